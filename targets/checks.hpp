// CLI11 checks shared by the programs.
//   OutputPath: an output file's folder must exist, and the path must not be a folder, so that
//               a long run does not fail only when it writes its result;
//   Seed:       digits only (CLI11 would read "-1" into an unsigned integer as 2^64 - 1);
//   Positive, NonNegative: a finite number > 0 (>= 0), said in words (CLI11's own checks
//               print their range with 309 digits);
//   NotBlank:   text with at least one character that is not white space;
//   overwrites: an output that is one of the command's own inputs (the same file however
//               named: links, other spellings), which the command line must not allow;
//   the exit codes every program's --help states (exit_codes).
#pragma once

#include <cmath>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <string>

#include <CLI/CLI.hpp>

inline const CLI::Validator OutputPath(
    [](std::string& path) -> std::string {
      namespace fs = std::filesystem;
      std::error_code ec;
      const fs::path p(path), dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
      if (p.filename().empty() || fs::is_directory(p, ec)) return "output " + path + " is a folder, not a file";
      if (!fs::is_directory(dir, ec)) return "the folder of the output " + path + " does not exist";
      return {};
    },
    "PATH", "OutputPath");

inline const CLI::Validator Seed(
    [](std::string& s) -> std::string {
      return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos ? "" : "the seed " + s + " is not a non-negative integer";
    },
    "UINT", "Seed");

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

inline const CLI::Validator NonNegative(
    [](std::string& s) -> std::string {
      const double v = detail::number(s);
      return std::isfinite(v) && v >= 0 ? "" : s + " is not a number of 0 or more";
    },
    "NUMBER >= 0", "NonNegative");

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

// The exit codes of the programs, for their --help.
inline constexpr const char* exit_codes =
    "Exit codes: 0 done; 1 a problem with the input or the run (the message says which); 2 a bad command line; "
    "128 + N stopped by signal N after writing a checkpoint (130 Ctrl-C, 143 SIGTERM).";
