// Why this file exists: the one implementation of the rules in program.h that every
// chunkgrad program follows with bad input (validate up front, write-check outputs
// first, one error line and exit code 1 instead of an abort).
#include "examples/common/program.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <new>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/allocator_stats.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "ops/threads.h"
#include "train/progress.h"
#include "train/stop_signal.h"

namespace cg::program {
namespace {

// "1e+06" would read badly in a range; integers print as integers, the rest with %g.
std::string number_str(double v) {
  if (std::abs(v) < 1e15 && v == std::floor(v)) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// "rank R: " under mpirun with more than one rank, where every rank prints its own error
// line (a config error before the ranks connect: each meets it), as dist::abort_job's
// lines start; "" in a plain run, or where the launch environment cannot be read.
std::string rank_prefix() {
  try {
    const dist::LaunchInfo launch = dist::detect_launch();
    if (launch.under_mpirun && launch.world_size > 1)
      return "rank " + std::to_string(launch.rank) + ": ";
  } catch (const Error&) {  // (a malformed mpirun environment: the error is about that)
  }
  return "";
}

void print_error_line(const std::string& program, const std::string& message,
                      bool with_rank = true) {
  cg::train::end_open_progress_line();  // not glued to a progress bar's line
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  // `program` is "mlp_demo", or for the one program with subcommands "train" (or "" when
  // no subcommand was chosen): the line starts "chunkgrad train: error:".
  std::fprintf(stderr, "%schunkgrad%s%s: error: %s\n", with_rank ? rank_prefix().c_str() : "",
               program.empty() ? "" : " ", program.c_str(), line.c_str());
  std::fflush(stderr);
}

// The whole of `text` as a decimal integer (a leading '+' allowed), or nothing.
std::optional<int64_t> parse_integer(const std::string& text) {
  int64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (first != last && *first == '+') ++first;
  const auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end != last || first == last) return std::nullopt;
  return value;
}

// Note [An option given twice]: CLI11 refuses a one-value option given twice ("--html:
// At Most 1 required but received 2", reworded below) but merges the values of a list
// option: `--anchors 3 6 --anchors 1` drew three blocks, as if all had followed one
// --anchors. A list option that is not meant to repeat (unlike `train --set`) is marked
// with Program::given_once and refused when named twice: the first such, or "".
std::string repeated_option(const std::vector<const CLI::Option*>& options, int argc, char** argv) {
  for (const CLI::Option* option : options) {
    for (const std::string& name : option->get_lnames()) {
      const std::string flag = "--" + name;
      int given = 0;
      for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--") break;  // the rest are positionals
        if (arg == flag || arg.rfind(flag + "=", 0) == 0) ++given;
      }
      if (given > 1) {
        return flag + " is given " + std::to_string(given) +
               " times; give all its values after one " + flag;
      }
    }
  }
  return std::string();
}

// CLI11's count errors in chunkgrad's words: "--html: At Most 1 required but received 2"
// is an option given twice; other messages are kept.
std::string reworded_count_error(const std::string& message) {
  static const std::regex at_most("^(.*): At Most ([0-9]+) required but received ([0-9]+)$");
  static const std::regex at_least("^(.*): At least ([0-9]+) required but received ([0-9]+)$");
  std::smatch m;
  if (std::regex_match(message, m, at_most)) {
    if (m[2] == "1") return m[1].str() + " is given " + m[3].str() + " times; give it once";
    return m[1].str() + ": at most " + m[2].str() + " values, got " + m[3].str();
  }
  if (std::regex_match(message, m, at_least))
    return m[1].str() + ": at least " + m[2].str() + " values, got " + m[3].str();
  return message;
}

}  // namespace

namespace {

// "mlp_demo (chunkgrad 0.4.0); devices built in: cpu (1 present), cuda (0 present: no
// CUDA driver)": what a bug report needs, and whether this build can use a GPU at all.
// Asked only when --version is given: counting GPUs starts the driver, which no other
// program start should pay for.
std::string version_text(const std::string& program) {
  std::string devices;
  for (size_t slot = 0; slot < kDeviceTypeCount; ++slot) {
    const DeviceBackend* backend = find_backend(static_cast<DeviceType>(slot));
    if (backend == nullptr) continue;  // not built in
    const int count = backend->device_count();
    std::string why = count == 0 ? backend->unavailable_reason() : std::string();
    devices += std::string(devices.empty() ? "" : ", ") + backend->name() + " (" +
               std::to_string(count) + " present" + (why.empty() ? "" : ": " + why) + ")";
  }
  const std::string version = program == "chunkgrad"
                                  ? std::string("chunkgrad " CHUNKGRAD_VERSION)
                                  : program + " (chunkgrad " CHUNKGRAD_VERSION ")";
  return version + "; devices built in: " + devices;
}

}  // namespace

Program::Program(std::string name, std::string description)
    : name_(std::move(name)), app_(std::move(description), name_) {
  // --help shows each option's default ("[300]"), captured when the option is added.
  app_.option_defaults()->always_capture_default();
  app_.set_version_flag("--version",
                        std::function<std::string()>([name = name_] { return version_text(name); }),
                        "print the version and the devices this build contains, then exit");
}

// CLI11 lists the arguments it did not expect last one first ("--cc --bb --aa"); they are
// named here in the order they were given.
std::string Program::unexpected_arguments(int argc, char** argv) const {
  std::multiset<std::string> extra;
  for (const std::string& a : app_.remaining(/*recurse=*/true)) extra.insert(a);
  std::string names;
  for (int i = 1; i < argc; ++i) {
    const auto it = extra.find(argv[i]);
    if (it == extra.end()) continue;
    names += std::string(names.empty() ? "" : " ") + argv[i];
    extra.erase(it);
  }
  for (const std::string& a : extra) names += " " + a;  // not found verbatim (a split "--x=1")
  return "The following arguments were not expected: " + names;
}

std::string Program::error_name() const {
  if (name_ != "chunkgrad") return name_;
  const auto chosen = app_.get_subcommands();
  return chosen.empty() ? std::string() : chosen.front()->get_name();
}

int Program::run(int argc, char** argv, const std::function<void()>& body) {
  try {
    app_.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success))
      return app_.exit(e);  // --help
    std::string message = e.what();
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr)
      message = unexpected_arguments(argc, argv);
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr)
      message = missing_subcommand(argc, argv, message);
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr)
      message = reworded_count_error(message);
    print_error_line(error_name(), message + " (run with --help to see the options)");
    return kExitError;
  }
  if (const std::string repeated = repeated_option(given_once_, argc, argv); !repeated.empty()) {
    print_error_line(error_name(), repeated + " (run with --help to see the options)");
    return kExitError;
  }
  try {
    // The thread count and the allocators' max split size from the environment are options
    // too: refuse a bad one before any work, not when a kernel first starts the pool or a
    // device's allocator is first made (or never, in a small run).
    (void)cg::get_num_threads();
    (void)cg::max_split_size_from_env();
    body();
    // Results go to stdout: a failed write there (a full disk behind "> out.json") is a
    // failed run, not a truncated file and exit 0.
    std::cout.flush();
    CG_CHECK(!std::cout.fail() && std::fflush(stdout) == 0 && !std::ferror(stdout),
             "writing the results to standard output failed (disk full, or a closed pipe?)");
    return 0;
  } catch (
      const cg::train::Interrupted& e) {  // a stop signal: saved, resumable (train/stop_signal.h)
    cg::train::end_open_progress_line();
    std::fprintf(stderr, "chunkgrad %s: %s\n", error_name().c_str(), e.what());
    std::fflush(stderr);
    return cg::train::kExitInterrupted;
  } catch (const cg::dist::EveryRankError& e) {
    // Every rank met it; rank 0 prints it for all (Note [Ending together]), so no "rank 0: "
    // in front (its text names the rank it came from where that was another).
    print_error_line(error_name(), e.what(), /*with_rank=*/false);
  } catch (const cg::Error& e) {  // OutOfMemoryError included; what() ends in "(at file:line)"
    print_error_line(error_name(), e.what());
  } catch (const CLI::Error& e) {  // a check made after parsing, on the parsed values
    print_error_line(error_name(), e.what());
  } catch (const std::bad_alloc&) {
    print_error_line(error_name(),
                     "out of host memory (std::bad_alloc): lower the sizes or the number of steps");
  } catch (const std::exception& e) { print_error_line(error_name(), e.what()); } catch (...) {
    print_error_line(error_name(), "unknown exception");
  }
  return kExitError;
}

int parse_command_line(CLI::App& app, const std::string& name, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      app.exit(e);  // --help
      return 0;
    }
    print_error_line(name, std::string(e.what()) + " (run with --help to see the options)");
    return kExitError;
  }
  return -1;
}

std::string Program::missing_subcommand(int argc, char** argv, const std::string& message) const {
  // A subcommand was parsed: the error is about its own options.
  if (!app_.get_subcommands().empty()) return message;
  const auto subcommands = app_.get_subcommands([](const CLI::App*) { return true; });
  if (subcommands.empty()) return message;
  std::string names;
  for (const CLI::App* sub : subcommands) names += (names.empty() ? "" : ", ") + sub->get_name();
  // The first word that is not an option: what the user meant as the subcommand.
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (!word.empty() && word[0] != '-')
      return "unknown subcommand '" + word + "'; the subcommands are: " + names;
  }
  return "a subcommand is required, one of: " + names;
}

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const std::optional<int64_t> value = parse_integer(text);
        if (!value || *value < lo || *value > hi) return "must be " + range + ", got " + text;
        return std::string();
      },
      "from " + std::to_string(lo) + " to " + std::to_string(hi));
}

CLI::Validator number_in(double lo, double hi, bool lo_open) {
  const std::string range =
      "a finite number " + (lo_open ? "greater than " + number_str(lo) : "from " + number_str(lo)) +
      (lo_open ? " and at most " : " to ") + number_str(hi);
  return CLI::Validator(
      [lo, hi, lo_open, range](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && end == text.c_str() + text.size() && errno != ERANGE;
        if (!parsed || !std::isfinite(value) || value > hi ||
            (lo_open ? value <= lo : value < lo)) {
          return "must be " + range + ", got " + text;
        }
        return std::string();
      },
      (lo_open ? "greater than " : "from ") + number_str(lo) + (lo_open ? ", at most " : " to ") +
          number_str(hi));
}

CLI::Validator one_of(const std::vector<std::string>& allowed) {
  std::string names;
  for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
  return CLI::Validator(
      [allowed, names](std::string& text) -> std::string {
        if (std::find(allowed.begin(), allowed.end(), text) != allowed.end()) return std::string();
        return "must be one of " + names + ", got '" + text + "'";
      },
      "one of " + names);
}

CLI::Validator subset_of(const std::vector<std::string>& allowed) {
  std::string names;
  for (const std::string& a : allowed) names += (names.empty() ? "" : ",") + a;
  return CLI::Validator(
      [allowed, names](std::string& text) -> std::string {
        std::set<std::string> seen;
        std::stringstream list(text);
        std::string name;
        int count = 0;
        while (std::getline(list, name, ',')) {
          ++count;
          if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
            return "'" + name + "' is not one of " + names + " (got " + text + ")";
          }
          if (!seen.insert(name).second) return "'" + name + "' is listed twice (got " + text + ")";
        }
        if (count == 0 || text.back() == ',')
          return "must be a comma-separated subset of " + names + ", got '" + text + "'";
        return std::string();
      },
      "subset of " + names);
}

CLI::Validator integer_list_in(int64_t lo, int64_t hi) {
  const std::string range = "integers from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const std::string shape =
            "must be a comma-separated list of " + range + ", got '" + text + "'";
        if (text.empty() || text.back() == ',') return shape;
        std::stringstream list(text);
        for (std::string item; std::getline(list, item, ',');) {
          const std::optional<int64_t> value = parse_integer(item);
          if (!value || *value < lo || *value > hi)
            return shape + (item.empty() ? " (an empty entry)" : " ('" + item + "' is not)");
        }
        return std::string();
      },
      "list of " + range);
}

std::vector<int64_t> parse_integer_list(const std::string& text) {
  std::vector<int64_t> values;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    const std::optional<int64_t> value = parse_integer(item);
    CG_CHECK(value.has_value(), "'", item, "' is not an integer (in '", text, "')");
    values.push_back(*value);
  }
  return values;
}

namespace {

// Where a path leads: absolute, symlinks resolved as far as it exists, normalised.
std::filesystem::path resolved(const std::string& path) {
  std::error_code ec;
  const auto at = std::filesystem::weakly_canonical(std::filesystem::absolute(path), ec);
  return ec ? std::filesystem::path(path) : at.lexically_normal();
}

// Whether `inner` is `outer` or lies under it (both resolved).
bool within(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  const std::filesystem::path rel = inner.lexically_relative(outer);
  return !rel.empty() && *rel.begin() != "..";
}

}  // namespace

void check_outputs_apart(const std::vector<std::pair<std::string, std::string>>& outputs,
                         const std::vector<std::pair<std::string, std::string>>& folders) {
  std::vector<std::string> where;
  for (const auto& [path, option] : outputs) where.push_back(resolved(path).string());
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t k = 0; k < i; ++k) {
      CG_CHECK(where[i] != where[k], outputs[i].second, " and ", outputs[k].second,
               " would both write ", outputs[i].first, "; give them different paths");
    }
    for (const auto& [folder, option] : folders) {
      CG_CHECK(where[i] != resolved(folder).string(), outputs[i].second, " and ", option,
               " would both write ", outputs[i].first, "; give them different paths");
    }
  }
}

void check_output_not_input(const std::string& output, const std::string& option,
                            const std::vector<std::pair<std::string, std::string>>& inputs) {
  const std::filesystem::path out = resolved(output);
  for (const auto& [path, input_option] : inputs) {
    if (path.empty()) continue;
    std::error_code ec;
    const bool same = std::filesystem::equivalent(output, path, ec) && !ec;
    const std::filesystem::path in = resolved(path);
    CG_CHECK(!same && out != in, option, " ", output, " is the input ", input_option, " ", path,
             ": writing it would destroy what the run reads; give another ", option);
    CG_CHECK(!within(out, in) || !std::filesystem::is_directory(in, ec), option, " ", output,
             " is inside ", input_option, " ", path,
             ": writing there could overwrite what the run reads; give a path outside it");
  }
}

void check_inputs_outside(const std::string& folder, const std::string& option,
                          const std::vector<std::pair<std::string, std::string>>& inputs) {
  const std::filesystem::path out = resolved(folder);
  for (const auto& [path, input_option] : inputs) {
    if (path.empty()) continue;
    CG_CHECK(!within(resolved(path), out), input_option, " ", path, " is inside ", option, " ",
             folder, ", which the run writes its own files into; move it out, or give another ",
             option);
  }
}

RemoveIfLeftEmpty::RemoveIfLeftEmpty(const std::string& dir) {
  if (dir.empty()) return;
  std::filesystem::path at = std::filesystem::path(dir).lexically_normal();
  if (!at.has_filename()) at = at.parent_path();  // "out/" is "out"
  for (; !at.empty(); at = at.parent_path()) {
    std::error_code ec;  // (set for a path that is not there, too)
    const std::filesystem::file_status status = std::filesystem::symlink_status(at, ec);
    if (status.type() != std::filesystem::file_type::not_found) break;  // there, or unknown
    made_.push_back(at.string());
    if (at == at.parent_path()) break;
  }
}

RemoveIfLeftEmpty::~RemoveIfLeftEmpty() {
  // rmdir removes only an empty folder: the first that holds anything ends the walk up
  // (one already gone, removed with another output's folder, does not).
  for (const std::string& dir : made_) {
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) break;
  }
}

CLI::Validator not_empty() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text.empty() ? std::string("must not be empty") : std::string();
      },
      "not empty");
}

CLI::Validator device_name() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          cg::Device::parse(text);
        } catch (const cg::Error& e) { return e.message(); }
        return std::string();
      },
      cg::device_names_help());
}

void set_cpu_memory_limit_mb(int64_t mb) {
  CG_CHECK(mb >= 0, "--memory-limit-mb must be 0 (no limit) or a positive number of MiB, got ", mb);
  if (mb > 0) allocator_for(kCPU).set_memory_limit(static_cast<size_t>(mb) << 20);
}

OutputFile::OutputFile(const std::string& path, const std::string& option)
    : path_(path), option_(option), out_(std::make_unique<AtomicFile>(path, option)) {}

void OutputFile::write_json(const nlohmann::json& j) {
  CG_CHECK(out_ != nullptr, option_, ": ", path_, " is not open for writing (written twice?)");
  out_->write(j.dump() + "\n");
  out_->commit();
  out_.reset();
}

void make_output_dir(const std::string& dir, const std::string& option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // In words, not the system's "Not a directory" / "File exists" (an outside tester's
  // --run-dir of a file, and of a dangling symlink).
  const fs::file_status link = fs::symlink_status(dir, ec);
  if (fs::is_symlink(link) && !fs::exists(dir, ec)) {
    CG_FAIL(option, ": ", dir, " is a symlink to ", fs::read_symlink(dir, ec).string(),
            ", which does not exist; make that folder or give another path");
  }
  CG_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec), option, ": ", dir,
           " is a file, not a folder; give a folder");
  for (fs::path up = fs::path(dir).parent_path(); !up.empty(); up = up.parent_path()) {
    if (fs::exists(up, ec)) {
      CG_CHECK(fs::is_directory(up, ec), option, ": ", dir, " cannot be made: ", up.string(),
               " is a file, not a folder");
      break;
    }
    if (up == up.parent_path()) break;
  }
  fs::create_directories(dir, ec);
  CG_CHECK(!ec, option, ": cannot create the directory ", dir, ": ", ec.message(),
           ". Give a writable directory.");
  CG_CHECK(std::filesystem::is_directory(dir, ec), option, ": ", dir, " is not a directory");
}

void check_fits_in_memory(double bytes, const std::string& what, const std::string& advice) {
  const double memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  CG_CHECK(memory <= 0 || bytes <= memory, what, " need ",
           format_bytes(static_cast<int64_t>(std::min(bytes, 9e18))), ", more than this machine's ",
           format_bytes(static_cast<int64_t>(memory)), " of memory; ", advice);
}

void check_finite_loss(double loss, const std::string& what, const std::string& advice) {
  CG_CHECK(std::isfinite(loss), "the loss became ", loss, " at ", what, "; stopping. ", advice);
}

void progress(const std::string& name, const std::string& line) {
  std::fprintf(stderr, "chunkgrad %s: %s\n", name.c_str(), line.c_str());
  std::fflush(stderr);
}

}  // namespace cg::program
