// Command-line checks shared by the programs.
//   parse:       CLI11's parse with exit code 2 for every command-line error (CLI11's own codes,
//                105 to 115, say no more than its message), 0 for --help, and messages that name
//                an unknown subcommand and list the subcommands;
//   InputFile:   an input must be a regular file: a folder, a device (/dev/zero never ends), a
//                FIFO or a socket is refused before anything is read;
//   OutputPath:  an output's folder must exist and be writable, and the path must not be empty,
//                a folder, or any other file than a regular one, so that a long run does not fail
//                only when it writes its result (nothing is created or truncated here);
//   Seed:        digits only, at most 2^64 - 1 (CLI11 would read "-1" into an unsigned integer as
//                2^64 - 1, and a larger number as 2^64 - 1 too);
//   Whole, Between: an integer (a number) in a range, saying which of the two the value is not;
//   Positive:    a finite number > 0, said in words (CLI11's own checks print their range with
//                309 digits);
//   NotBlank:   text with at least one character that is not white space;
//   overwrites: an output that is one of the command's own inputs (the same file however
//               named: links, other spellings), which the command line must not allow;
//   the exit codes every program's --help states (exit_codes).
#pragma once

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

// What a file that exists but is not a regular file is ("a folder", "a character device", ...).
inline std::string file_kind(std::filesystem::file_type t) {
  using T = std::filesystem::file_type;
  switch (t) {
    case T::directory: return "a folder (directory)";
    case T::character: return "a character device";
    case T::block: return "a block device";
    case T::fifo: return "a FIFO (pipe)";
    case T::socket: return "a socket";
    default: return "not a regular file";
  }
}

// The problem with `path` as an input file (`what`, in the message), or "" when it is a regular
// file that can be read.
inline std::string input_problem(const std::string& path, const std::string& what = "input") {
  namespace fs = std::filesystem;
  if (path.empty()) return "the path is empty";
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // of the file a link leads to
  if (!fs::exists(st)) return what + " " + path + " does not exist";
  if (!fs::is_regular_file(st)) return what + " " + path + " is " + file_kind(st.type()) + ", not a regular file: it is not read";
  if (::access(path.c_str(), R_OK) != 0) return what + " " + path + " cannot be read: " + std::strerror(errno);
  return {};
}

// The problem with `path` as an output file, or "" when it can be written: its folder exists
// and is writable, and it is not yet a file or is a writable regular file.
inline std::string output_problem(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return "the path is empty";
  std::error_code ec;
  const fs::path p(path), dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const fs::file_status st = fs::status(p, ec);
  if (p.filename().empty() || fs::is_directory(st)) return "output " + path + " is a folder, not a file";
  if (fs::exists(st) && !fs::is_regular_file(st)) return "output " + path + " is " + file_kind(st.type()) + ", not a regular file";
  const fs::file_status dst = fs::status(dir, ec);
  if (!fs::exists(dst)) return "the folder of the output " + path + " does not exist";
  if (!fs::is_directory(dst)) return "the folder of the output " + path + ", " + dir.string() + ", is not a folder";
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return "the folder of the output " + path + " is not writable: " + std::strerror(errno);
  if (fs::exists(st) && ::access(path.c_str(), W_OK) != 0) return "output " + path + " is not writable: " + std::strerror(errno);
  return {};
}

inline const CLI::Validator InputFile([](std::string& path) { return input_problem(path); }, "FILE", "InputFile");

inline const CLI::Validator OutputPath([](std::string& path) { return output_problem(path); }, "PATH", "OutputPath");

// The whole number that all of s is (digits only), or nothing when s is not one or is above
// 2^64 - 1.
inline std::optional<std::uint64_t> whole_number(const std::string& s) {
  std::uint64_t v = 0;
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The problem with s as a seed, or "".
inline std::string seed_problem(const std::string& s) {
  if (whole_number(s)) return {};
  if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) return "the seed " + s + " is above 18446744073709551615 (2^64 - 1)";
  return "the seed " + s + " is not a non-negative integer";
}

inline const CLI::Validator Seed([](std::string& s) { return seed_problem(s); }, "UINT", "Seed");

// An integer of type T from lo to hi: "abc is not a whole number", "0 is out of range: 1 to 9".
template <class T>
CLI::Validator Whole(T lo, T hi) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        const size_t digits = s.starts_with('-') ? 1 : 0;
        if (s.size() == digits || s.find_first_not_of("0123456789", digits) != std::string::npos) return s + " is not a whole number";
        T v{};
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return s + " is out of range: " + range;
        return {};
      },
      "in [" + range + "]", "Whole");
}

namespace detail {
// The number in s (all of it), or NaN when s is not one.
inline double number(const std::string& s) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    return used == s.size() ? v : std::nan("");
  } catch (const std::exception&) {
    return std::nan("");
  }
}
}  // namespace detail

inline const CLI::Validator Positive(
    [](std::string& s) -> std::string {
      const double v = detail::number(s);
      return std::isfinite(v) && v > 0 ? "" : s + " is not a number above 0";
    },
    "NUMBER > 0", "Positive");

// A number from lo to hi.
inline CLI::Validator Between(double lo, double hi) {
  char range[64];
  std::snprintf(range, sizeof range, "%g to %g", lo, hi);
  return CLI::Validator(
      [lo, hi, text = std::string(range)](std::string& s) -> std::string {
        const double v = detail::number(s);
        if (std::isnan(v)) return s + " is not a number";
        return v >= lo && v <= hi ? "" : s + " is out of range: " + text;
      },
      "in [" + std::string(range) + "]", "Between");
}

inline const CLI::Validator NotBlank(
    [](std::string& s) -> std::string { return s.find_first_not_of(" \t\r\n") == std::string::npos ? "it is empty" : ""; }, "TEXT",
    "NotBlank");

// The message for an output that is one of `inputs` (the same file), or "" when it is none of
// them (an input or an output not given, or not yet a file, is none).
inline std::string overwrites(const std::string& output, std::initializer_list<std::string> inputs) {
  std::error_code ec;
  for (const auto& input : inputs)
    if (!output.empty() && !input.empty() && std::filesystem::equivalent(output, input, ec))
      return "the output " + output + " is the input " + input + " (the same file): it would be overwritten";
  return {};
}

// The problem with a training state resumed from checkpoint `file` (or ""): its step below 0 or
// past `last`, the run's length (`length` names it), or its optimiser's step count below 0.
inline std::string resumed_state_problem(const std::string& file, std::int64_t step, std::int64_t optim_steps, std::int64_t last,
                                         const std::string& length) {
  const std::string at = "checkpoint " + file + ": its ";
  if (step < 0) return at + "'state.step' is " + std::to_string(step) + ", below 0";
  if (step > last) return at + "'state.step' is " + std::to_string(step) + ", beyond " + length + " " + std::to_string(last);
  if (optim_steps < 0) return at + "'optim.steps' is " + std::to_string(optim_steps) + ", below 0";
  return {};
}

// Parses the command line. Nothing: parsed, go on; 0: --help was printed; 2: a command-line
// error was said on stderr as "program: problem" (an unknown subcommand named, with the
// subcommands listed).
inline std::optional<int> parse(CLI::App& app, int argc, char** argv, const std::string& program) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::string message = e.what();
    const auto commands = app.get_subcommands({});
    if (!commands.empty() && app.get_subcommands().empty()) {  // no subcommand was recognised
      std::string names;
      for (const auto* c : commands) names += (names.empty() ? "" : ", ") + c->get_name();
      if (argc > 1 && argv[1][0] != '-')
        message = "unknown subcommand '" + std::string(argv[1]) + "' (the subcommands: " + names + ")";
      else if (e.get_name() == "RequiredError" && message == "A subcommand is required")
        message += " (one of: " + names + ")";
    }
    std::fprintf(stderr, "%s: %s\nRun with --help for more information.\n", program.c_str(), message.c_str());
    return 2;
  }
}

// The exit codes of the programs, for their --help.
inline constexpr const char* exit_codes =
    "Exit codes: 0 done; 1 a problem with the input or the run (the message says which); 2 a bad command line; "
    "128 + N stopped by signal N after writing a checkpoint (130 Ctrl-C, 143 SIGTERM).";
