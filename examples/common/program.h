// Why this file exists: every chunkgrad program follows the same rules with bad input,
// and they live here once instead of in each main():
//
// - options are validated up front, before anything is allocated, by validators whose
//   errors name the option and say the allowed range in words ("--steps: must be an
//   integer from 1 to 1000000000, got 0"), and `--help` shows every default;
// - output files are made ready (a temporary next to each) before the work starts, so
//   that a run of an hour does not end by failing to write its result, and replace the
//   old files only when complete, so that a failed run destroys nothing;
// - a memory limit (--memory-limit-mb) is set before the first allocation, so that it
//   holds for everything the run allocates;
// - a loss that becomes NaN or inf stops the run with an error that names the step;
// - main() runs inside Program::run, which turns any failure -- a bad option, cg::Error,
//   out of memory, std::bad_alloc -- into ONE line on stderr,
//       chunkgrad <program>: error: <what happened and what to change>
//   and exit code 1 (0 on success and for --help). Nothing aborts. A run stopped by
//   SIGINT/SIGTERM that saved its state (train/stop_signal.h) says so in one line and
//   exits with 130.
//
// Progress goes to stderr, results to stdout (so `--json > out.json` stays clean).
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

#include "core/atomic_file.h"
#include "core/device.h"

namespace cg::program {

constexpr int kExitError = 1;  // every failure; 0 is success (and --help)

class Program {
 public:
  // name: the executable's name, used in error lines ("chunkgrad <name>: error: ...").
  Program(std::string name, std::string description);
  CLI::App& app() { return app_; }
  const std::string& name() const { return name_; }
  // Marks a list option (`--anchors 3 6`) that may be named only once: CLI11 merges the
  // values of one named twice (Note [An option given twice], program.cpp). Returns it.
  CLI::Option* given_once(CLI::Option* option) {
    given_once_.push_back(option);
    return option;
  }

  // Parses the command line, then runs body. Returns the exit code for main: 0 on
  // success or --help, kExitError after printing one error line for any failure.
  int run(int argc, char** argv, const std::function<void()>& body);

 private:
  // The name in error lines: the program's, or the chosen subcommand's for `chunkgrad`.
  std::string error_name() const;
  // "The following arguments were not expected: ...", in the order they were given.
  std::string unexpected_arguments(int argc, char** argv) const;
  // A program with subcommands run with none, or with an unknown word: names it and lists
  // the subcommands. Other "required" errors (a missing option) keep `message`.
  std::string missing_subcommand(int argc, char** argv, const std::string& message) const;

  std::string name_;
  CLI::App app_;
  std::vector<const CLI::Option*> given_once_;
};

// For a program that parses in its own main (the benchmarks in bench/, whose bodies
// return early): parses `app` and returns -1 to go on, 0 after --help, or kExitError after
// one line "chunkgrad <name>: error: ..." -- in place of CLI11_PARSE, whose own exit codes
// (104, 105, 109) and messages are not chunkgrad's.
int parse_command_line(CLI::App& app, const std::string& name, int argc, char** argv);

// Validators. Each parses the option's text itself (so "abc" and "1.5" fail with the
// same readable message as an out-of-range number) and describes its range in --help.
CLI::Validator integer_in(int64_t lo, int64_t hi);
// A finite number in [lo, hi]; lo_open excludes lo itself ("greater than 0").
CLI::Validator number_in(double lo, double hi, bool lo_open = false);
// Exactly one of `allowed` ("must be one of f32, bf16, f16, f64, got f8").
CLI::Validator one_of(const std::vector<std::string>& allowed);
// One of the comma-separated names in `allowed`, each at most once ("naive,fused").
CLI::Validator subset_of(const std::vector<std::string>& allowed);
// A comma-separated list of integers, each in [lo, hi], at least one ("256,512").
CLI::Validator integer_list_in(int64_t lo, int64_t hi);
// The integers of a list integer_list_in accepted.
std::vector<int64_t> parse_integer_list(const std::string& text);
// Any text but the empty one: an option given as "" is an error, not "not given".
CLI::Validator not_empty();
// A device name of the table in core/device.h (parsed only: cg::resolve_device, called
// before the work, also checks it is built in and present). An empty value is refused
// too, not read as "not given".
CLI::Validator device_name();

// Caps the CPU allocator's reserved bytes at `mb` MiB (0: no limit). Call it before the
// program allocates anything: the limit then covers the whole run.
void set_cpu_memory_limit_mb(int64_t mb);

// An output file made ready when constructed (its temporary next to it is created, so an
// unwritable place throws cg::Error naming the option and the reason before the work),
// written at the end and only then put in place of the old file (core/atomic_file.h):
// a run that fails leaves the old file as it was.
class OutputFile {
 public:
  OutputFile() = default;
  OutputFile(const std::string& path, const std::string& option);
  bool is_open() const { return out_ != nullptr; }
  const std::string& path() const { return path_; }
  // Writes the JSON (one line, then a newline) and closes; throws when the write fails.
  void write_json(const nlohmann::json& j);

 private:
  std::string path_, option_;
  std::unique_ptr<AtomicFile> out_;
};

// Refuses two outputs at one path ((path, option) pairs; `--html` inside `--svg-dir` under
// an SVG's name, `--svg` and `--trace` the same file): whichever was written last would be
// all that is left, after the whole run. `folders` are output folders the run makes and
// fills: an output file at one of their paths (`--html out --svg-dir out`) is refused too
// (the folder was made, filled, and the file's rename failed at the end). Folders may
// share a path with each other. Call it before making any of them ready.
void check_outputs_apart(const std::vector<std::pair<std::string, std::string>>& outputs,
                         const std::vector<std::pair<std::string, std::string>>& folders = {});

// Refuses an output that would write over an input ((path, option) pairs; an input is a
// file or a folder): the same file (also through a symlink or a hard link), or a path
// inside an input folder (`eval --json` into the drafter's folder, `train --run-dir` the
// target's). An unset input ("") is skipped. Call it before making the output ready.
void check_output_not_input(const std::string& output, const std::string& option,
                            const std::vector<std::pair<std::string, std::string>>& inputs);

// Refuses an input inside an output folder that the program clears or fills with files of
// its own names (`features --out` with --fresh deleted a --data file kept there).
void check_inputs_outside(const std::string& folder, const std::string& option,
                          const std::vector<std::pair<std::string, std::string>>& inputs);

// A folder a run is about to make (construct it before the folder is made): if the run
// fails before writing anything into it, the empty folder goes again when this is
// destroyed, and so do the parents the run made for it (`--svg-dir new/svg` made new/).
// A folder that existed before, or holds anything, is left as it is.
class RemoveIfLeftEmpty {
 public:
  explicit RemoveIfLeftEmpty(const std::string& dir);
  ~RemoveIfLeftEmpty();
  RemoveIfLeftEmpty(const RemoveIfLeftEmpty&) = delete;
  RemoveIfLeftEmpty& operator=(const RemoveIfLeftEmpty&) = delete;

 private:
  std::vector<std::string> made_;  // the folders not there yet, innermost first
};

// Makes `dir` (and its parents); throws cg::Error naming the option when it cannot. Open
// the files to go in it (OutputFile) before the work starts, too.
void make_output_dir(const std::string& dir, const std::string& option);

// Throws cg::Error when `bytes` -- what a run will allocate, counted before it starts --
// are more than the machine's memory: "<what> need 64.00 GiB, more than this machine's
// 15.60 GiB of memory; <advice>". A run then fails at once, not after filling gigabytes.
void check_fits_in_memory(double bytes, const std::string& what, const std::string& advice);

// Throws cg::Error when the loss is NaN or inf: "the loss became nan at step 12 ...".
// what: "step 12", "the fused path", ...; advice: what to change.
void check_finite_loss(double loss, const std::string& what, const std::string& advice);

// One progress line on stderr ("chunkgrad <name>: ..."), flushed at once.
void progress(const std::string& name, const std::string& line);

}  // namespace cg::program
