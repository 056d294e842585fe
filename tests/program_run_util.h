// Why this file exists: the tests that run the built `chunkgrad` program
// (train_program_test.cpp, features_program_test.cpp) read what it printed and what it
// left in a folder the same way.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace cg::testing_program {

// How a run of the program ended, and what it printed.
struct ProgramRun {
  int exit_code = -1;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every file under `dir` and its bytes (none when `dir` does not exist).
inline std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> files;
  if (!std::filesystem::exists(dir)) return files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[e.path().string()] = slurp(e.path().string());
  }
  return files;
}

}  // namespace cg::testing_program
