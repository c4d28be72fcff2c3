// CLI11 checks shared by the programs.
//   OutputPath: an output file's folder must exist, and the path must not be a folder, so that
//               a long run does not fail only when it writes its result;
//   Seed:       digits only (CLI11 would read "-1" into an unsigned integer as 2^64 - 1).
#pragma once

#include <filesystem>
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
