// Why this file exists: the harness of the tests that run the built `chunkgrad train`
// (train_program_test.cpp, train_resume_test.cpp): a temporary folder per test, a tiny
// config that trains everything in a fraction of a second, the program run in the
// foreground or the background, and the checks of its one error line. Each including file
// derives its own suite from TrainProgram (GoogleTest wants one fixture class per suite).
#pragma once

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "core/backend.h"
#include "nn/safetensors.h"
#include "train/run_lock.h"

namespace train_program_fixture {

struct TrainRun {
  int exit_code = -1;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class TrainProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("chunkgrad_train_program_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    // Folders a test made read-only are writable again, so that they can be removed.
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir_, ec);
         !ec && it != decltype(it)(); it.increment(ec)) {
      if (it->is_directory() && !it->is_symlink()) {
        std::filesystem::permissions(it->path(), std::filesystem::perms::owner_all,
                                     std::filesystem::perm_options::add, ec);
      }
    }
    std::filesystem::remove_all(dir_);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  TrainRun train(const std::string& args) const { return run("train " + args); }
  // `chunkgrad ARGS` (a subcommand and its options; may end in a "<file" redirection),
  // started by `launcher` when given ("mpirun -np 2 ... ").
  TrainRun run(const std::string& args, const std::string& launcher = "") const {
    const std::string cmd = "CHUNKGRAD_NUM_THREADS=1 " + launcher + "'" + CHUNKGRAD_CLI + "' " +
                            args + " >'" + path("out") + "' 2>'" + path("err") + "'";
    return collected(std::system(cmd.c_str()));
  }
  // A finished run's wait status, stdout and stderr (exit code, or 128 + the signal).
  TrainRun collected(int status) const {
    TrainRun r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(path("out"));
    r.err = slurp(path("err"));
    return r;
  }
  // One error line of `command` naming `what`, exit code 1.
  void expect_error(const TrainRun& r, const std::string& what,
                    const std::string& command = "train") const {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err.rfind("chunkgrad " + command + ": error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
  }
  // A config that trains everything in a fraction of a second.
  std::string tiny(const std::string& run_dir, const std::string& corpus_path = "") const {
    return R"({"run_dir": ")" + run_dir +
           R"(", "progress": false, "corpus": {"lines": 200, "path": ")" + corpus_path + R"("},
      "target": {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "head_dim": 8,
                 "intermediate_size": 32, "seq_len": 32, "optim": {"steps": 3, "batch_size": 2}},
      "data": {"num_sequences": 2, "max_new_tokens": 12},
      "drafter": {"num_layers": 1, "intermediate_size": 32, "num_target_features": 1, "block_size": 4,
                  "max_anchors": 4, "optim": {"steps": 2, "batch_size": 2}},
      "eval": {"prompts": 1, "max_new_tokens": 8, "accuracy_sequences": 1},
      "memory": {"enabled": false}})";
  }
  // Every file under `dir` and its bytes.
  static std::map<std::string, std::string> files_of(const std::string& dir) {
    std::map<std::string, std::string> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
      if (e.is_regular_file()) files[e.path().string()] = slurp(e.path().string());
    }
    return files;
  }
  // `chunkgrad train args` started in the background; its PID.
  pid_t start_train(const std::string& args) const {
    const std::string cmd = std::string("exec '") + CHUNKGRAD_CLI + "' train " + args + " >'" +
                            path("out") + "' 2>'" + path("err") + "'";
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("CHUNKGRAD_NUM_THREADS", "1", 1);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    return pid;
  }
  // Waits (up to a minute) until `file` contains `text`.
  static bool wait_for(const std::string& file, const std::string& text) {
    for (int i = 0; i < 1200; ++i) {
      if (slurp(file).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // Sends `sig` to a background run and collects it.
  TrainRun stop(pid_t pid, int sig) const {
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return collected(status);
  }
  // How often each step of `phase` appears in metrics.jsonl.
  static std::map<int64_t, int> steps_logged(const std::string& run, const std::string& phase) {
    std::map<int64_t, int> steps;
    std::istringstream log(slurp(run + "/metrics.jsonl"));
    for (std::string line; std::getline(log, line);) {
      if (line.find("\"phase\":\"" + phase + "\"") == std::string::npos) continue;
      const size_t at = line.find("\"step\":");
      if (at != std::string::npos) ++steps[std::stoll(line.substr(at + 7))];
    }
    return steps;
  }
  // Makes `dir` a folder in which no file can be created: without write permission for a
  // user; as root (CI), which permissions do not stop, a link to /sys (sysfs refuses new
  // files to root too). False when neither works here (the caller skips, saying why).
  static bool make_unwritable_dir(const std::string& dir) {
    if (::geteuid() != 0) {
      std::filesystem::create_directories(dir);
      std::filesystem::permissions(
          dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    } else {
      std::error_code ec;
      std::filesystem::create_directory_symlink("/sys", dir, ec);
      if (ec) return false;
    }
    const std::string probe = dir + "/probe";
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(probe.c_str());
      return false;
    }
    return true;
  }
  // `file`'s bytes with a NaN (0xFFFFFFFF as f32) written over 4 bytes at `offset` into its
  // safetensors data section.
  // The bytes of `file` as if its writer had saved a NaN at data-section byte `offset`
  // (0xFF x 4): the tensor holding it is changed before the file is written again, so its
  // checksum (Note [Tensor checksums], nn/safetensors.h) matches and the NaN is what a
  // reader must find.
  static std::string with_nan(const std::string& file, uint64_t offset) {
    const auto reader = cg::safetensors::open(file);
    cg::safetensors::NamedTensors tensors;
    for (const std::string& name : reader->names()) {  // in data order: same offsets
      cg::Tensor t = reader->load(name);
      const cg::safetensors::TensorInfo& info = reader->info(name);
      if (offset >= info.begin && offset + 4 <= info.end)
        std::memset(static_cast<char*>(t.data_ptr()) + (offset - info.begin), 0xFF, 4);
      tensors.emplace_back(name, t);
    }
    const std::string rewritten = file + ".with_nan";
    cg::safetensors::save_file(tensors, rewritten, reader->metadata());
    std::string bytes = slurp(rewritten);
    std::filesystem::remove(rewritten);
    return bytes;
  }
  // The bytes of `file` with one bit of data-section byte `offset` flipped, as a disk
  // might: the recorded checksum no longer matches.
  static std::string with_flipped_bit(const std::string& file, uint64_t offset, int bit) {
    std::string bytes = slurp(file);
    uint64_t header = 0;
    std::memcpy(&header, bytes.data(), 8);
    bytes[8 + header + offset] = static_cast<char>(bytes[8 + header + offset] ^ (1 << bit));
    return bytes;
  }
  // A corpus file's text: 200 lines "question N: answer 7N".
  static std::string question_corpus() {
    std::string text;
    for (int i = 0; i < 200; ++i)
      text += "question " + std::to_string(i) + ": answer " + std::to_string(i * 7) + "\n";
    return text;
  }
  static std::string replaced(std::string text, const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return text;
  }
  std::filesystem::path dir_;
};

}  // namespace train_program_fixture
