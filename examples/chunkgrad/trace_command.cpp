// Why this file exists: `chunkgrad trace FILE...` reads allocator traces and answers the
// question people open them for -- what held the memory at the peak, and why was it
// still alive -- in text, and writes the files other tools open:
//
//   chunkgrad trace traces/trace_naive.json                 # the peak and its holders
//   chunkgrad trace trace_naive.json trace_chunked.json trace_fused.json   # + side by side
//     --html report.html        one self-contained page (timelines, holders, comparison)
//     --svg-dir docs/img        memory_<name>.svg per trace (the pictures of docs/)
//     --snapshot-dir DIR        <name>.pickle and <name>.json for pytorch.org/memory_viz
//     --perfetto-dir DIR        <name>.perfetto.json for ui.perfetto.dev
//
// The reading, analysis and formats are library code in trace/ (trace_file, trace_analysis,
// memory_snapshot, chrome_trace, trace_report); this file is options and printing. Every
// output is made ready before any trace is read and replaced only when complete
// (examples/common/program.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/allocator_stats.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "examples/chunkgrad/commands.h"
#include "examples/common/program.h"
#include "trace/chrome_trace.h"
#include "trace/memory_snapshot.h"
#include "trace/trace_report.h"

namespace cg::cli {

namespace {

struct TraceOptions {
  std::vector<std::string> files;
  std::string names;
  int top = 5;
  std::string device;  // "": the device that ran out of memory, else the most allocating one
  std::string html, svg_dir, snapshot_dir, perfetto_dir;
};

// An output made ready up front and put in place at the end (core/atomic_file.h): the
// temporary next to it is created now, so an unwritable path fails before any trace is
// read, and the old file stays whole until the new one is complete -- a broken input
// leaves yesterday's report as it was. A path that is one of the input traces
// (`--html trace.json`, or `--snapshot-dir .` next to a trace called <name>.json) is
// refused first: the trace would be gone.
class TextOut {
 public:
  TextOut(std::string path, std::string option, const std::vector<std::string>& inputs)
      : path_(std::move(path)), option_(std::move(option)) {
    for (const std::string& in : inputs) {
      std::error_code ec;
      CG_CHECK(!std::filesystem::equivalent(path_, in, ec), option_, ": ", path_,
               " is the input trace ", in,
               "; writing it would destroy the trace. Give another output path.");
    }
    out_ = std::make_unique<AtomicFile>(path_, option_);
  }
  void write(const std::string& text) {
    out_->write(text);
    out_->commit();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_, option_;
  std::unique_ptr<AtomicFile> out_;
};

// Note [Trace names]: a trace's name names its output files (<name>.pickle,
// memory_<name>.svg) and its column: ASCII letters, digits, '-', '_' and '.', but not '.'
// first (a hidden file, or ".."). --names is held to it, and a name taken from a file
// name is made to fit: `trace_<b>".json` wrote `<b>".pickle`, `.json` a hidden `.json.json`.
bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

bool good_name(const std::string& name) {
  return !name.empty() && name[0] != '.' && std::all_of(name.begin(), name.end(), name_char);
}

// "traces/trace_naive.json" -> "naive"; other characters become '_' (Note [Trace names]).
std::string default_name(const std::string& file) {
  std::string stem = std::filesystem::path(file).stem().string();
  if (stem.rfind("trace_", 0) == 0 && stem.size() > 6) stem = stem.substr(6);
  for (char& c : stem) {
    if (!name_char(c)) c = '_';
  }
  stem.erase(0, stem.find_first_not_of('.'));
  return stem.empty() ? "trace" : stem;
}

std::vector<std::string> split_names(const TraceOptions& o) {
  std::vector<std::string> names;
  if (o.names.empty()) {
    // The same file name in two runs (runA/trace_naive.json runB/trace_naive.json) is the
    // usual way to compare runs: the later ones become naive_2, naive_3 (text, columns and
    // output files stay apart) instead of an error asking for --names.
    for (const std::string& f : o.files) {
      const std::string base = default_name(f);
      std::string name = base;
      for (int k = 2; std::find(names.begin(), names.end(), name) != names.end(); ++k) {
        name = base + "_" + std::to_string(k);
      }
      names.push_back(name);
    }
  } else {
    std::stringstream list(o.names);
    for (std::string n; std::getline(list, n, ',');) names.push_back(n);
    CG_CHECK(names.size() == o.files.size(), "--names: ", names.size(), " names for ",
             o.files.size(), " trace files; give one name per file, comma-separated");
  }
  for (size_t i = 0; i < names.size(); ++i) {
    CG_CHECK(good_name(names[i]), "--names: \"", printable_name(names[i]),
             "\" cannot name output files; use letters, digits, -, _ and . (not first)");
    for (size_t k = 0; k < i; ++k) {
      CG_CHECK(names[k] != names[i], "two traces are both called \"", names[i],
               "\" (their output files would collide); give --names");
    }
  }
  return names;
}

void print_groups(const char* title, const std::vector<MemoryGroup>& groups, int top) {
  std::printf("  %s:\n", title);
  int n = 0;
  for (const MemoryGroup& g : groups) {
    if (n++ == top) {
      std::printf("    ... %zu more\n", groups.size() - static_cast<size_t>(top));
      break;
    }
    std::printf("    %12s  %5lld block%s  %s\n", format_bytes(g.bytes).c_str(),
                static_cast<long long>(g.blocks), g.blocks == 1 ? " " : "s", g.name.c_str());
  }
}

void print_trace(const ReportTrace& t, const TraceFile& file, int top) {
  const TraceAnalysis& a = t.analysis;
  std::printf("%s (%s): %zu event%s over %.2f ms on %s\n", t.name.c_str(),
              printable_name(t.source).c_str(), a.events, a.events == 1 ? "" : "s",
              static_cast<double>(a.end_us - a.start_us) / 1000.0, a.device.c_str());
  for (const std::string& n : t.notes) std::printf("  NOTE: %s\n", n.c_str());
  std::printf(
      "  peak allocated %s at %.2f ms%s; reserved then %s, of which cached but "
      "unallocated %s (free blocks kept for reuse and the unused ends of segments: not only "
      "fragmentation)\n",
      format_bytes(a.peak.allocated).c_str(),
      static_cast<double>(a.peak.time_us - a.start_us) / 1000.0,
      a.peak_phase.empty() ? "" : (" (phase " + a.peak_phase + ")").c_str(),
      format_bytes(a.peak.reserved).c_str(), a.cached_unallocated_text().c_str());
  print_groups(
      "live at the peak, by the autograd node that saved them (each block once, for the first)",
      a.by_holder, top);
  print_groups("by category", a.by_category, top);
  print_groups("by scope", a.by_scope, top);
  std::printf("  largest blocks at the peak:\n");
  int n = 0;
  for (const LiveBlock& b : a.live_at_peak) {
    if (n++ == top) break;
    std::printf("    %12s  %-15s %s%s%s\n", format_bytes(static_cast<int64_t>(b.size)).c_str(),
                category_name(b.category),
                b.scope == 0 ? "(top level)" : file.name(b.scope).c_str(),
                b.holders.empty() ? "" : ("  saved by " + file.name(b.holders.front())).c_str(),
                b.before_trace ? "  (allocated before the trace)" : "");
  }
  for (const TraceRecord& e : a.ooms) {
    // (an OOM records what was asked, which may be past int64: 2^64 - 1 printed "-1 B")
    const std::string asked = e.size > static_cast<uint64_t>(INT64_MAX)
                                  ? std::to_string(e.size) + " B"
                                  : format_bytes(static_cast<int64_t>(e.size));
    std::printf("  out of memory at %.2f ms: %s requested\n",
                static_cast<double>(e.time_us - a.start_us) / 1000.0, asked.c_str());
  }
  if (a.at_first_oom) {  // what held the memory when the first request was refused
    const TraceAnalysis::AtOom& at = *a.at_first_oom;
    std::printf("  at the first out of memory%s: allocated %s, reserved %s\n",
                at.phase.empty() ? "" : (" (phase " + at.phase + ")").c_str(),
                format_bytes(at.point.allocated).c_str(), format_bytes(at.point.reserved).c_str());
    print_groups("live then, by the autograd node that saved them", at.by_holder, top);
    print_groups("live then, by category", at.by_category, top);
  }
  std::printf("\n");
}

void print_comparison(const std::vector<ReportTrace>& traces) {
  std::printf("side by side:\n  %-28s", "");
  for (const ReportTrace& t : traces) std::printf(" %24s", t.name.c_str());
  std::printf("\n");
  auto row = [&](const char* label, auto cell) {
    std::printf("  %-28s", label);
    for (const ReportTrace& t : traces) std::printf(" %24s", cell(t.analysis).c_str());
    std::printf("\n");
  };
  row("peak allocated", [](const TraceAnalysis& a) { return format_bytes(a.peak.allocated); });
  row("reserved at the peak", [](const TraceAnalysis& a) { return format_bytes(a.peak.reserved); });
  row("cached but unallocated", [](const TraceAnalysis& a) {
    return a.cached_unallocated() >= 0 ? format_bytes(a.cached_unallocated())
                                       : format_bytes(a.cached_unallocated()) + " (!)";
  });
  row("phase of the peak", [](const TraceAnalysis& a) {
    return a.peak_phase.empty() ? std::string("-") : a.peak_phase;
  });
  row("largest autograd holder", [](const TraceAnalysis& a) {
    const MemoryGroup* h = a.top_saved_holder();
    return h ? h->name : std::string("none");
  });
  row("  its bytes", [](const TraceAnalysis& a) {
    const MemoryGroup* h = a.top_saved_holder();
    return h ? format_bytes(h->bytes) : std::string("-");
  });
  // A run that failed peaks before its end: say so beside the peaks it is compared by.
  row("ran out of memory", [](const TraceAnalysis& a) {
    if (!a.at_first_oom) return std::string("no");
    const TraceAnalysis::AtOom& at = *a.at_first_oom;
    return "at " + format_bytes(at.point.allocated) + (at.phase.empty() ? "" : ", " + at.phase);
  });
  const int64_t base = traces.front().analysis.peak.allocated;
  row("peak vs the first", [&](const TraceAnalysis& a) {
    char buf[32];
    if (base <= 0) return std::string("- (the first peaks at 0 B)");
    std::snprintf(buf, sizeof buf, "%.2fx", static_cast<double>(a.peak.allocated) / base);
    return std::string(buf);
  });
  std::printf("  (%s)\n", kHolderCounting);
}

std::string device_list(const TraceFile& file) {
  std::string all;
  for (const std::string& d : file.devices) all += (all.empty() ? "" : ", ") + d;
  return all.empty() ? "none" : all;
}

// --device's index in the file; -1 (the one that ran out of memory, else the one with the
// most allocations) when not given.
int device_index(const TraceFile& file, const std::string& device) {
  if (device.empty()) return -1;
  for (size_t i = 0; i < file.devices.size(); ++i) {
    if (file.devices[i] == device) return static_cast<int>(i);
  }
  CG_FAIL("--device ", device, ": ", file.source,
          " has no events on it (it has: ", device_list(file), ")");
}

void run_trace(const TraceOptions& o) {
  const std::vector<std::string> names = split_names(o);
  std::vector<std::pair<std::string, std::string>> outputs;
  if (!o.html.empty()) outputs.emplace_back(o.html, "--html");
  for (const std::string& n : names) {
    if (!o.svg_dir.empty()) outputs.emplace_back(o.svg_dir + "/memory_" + n + ".svg", "--svg-dir");
    if (!o.snapshot_dir.empty()) {
      outputs.emplace_back(o.snapshot_dir + "/" + n + ".pickle", "--snapshot-dir");
      outputs.emplace_back(o.snapshot_dir + "/" + n + ".json", "--snapshot-dir");
    }
    if (!o.perfetto_dir.empty())
      outputs.emplace_back(o.perfetto_dir + "/" + n + ".perfetto.json", "--perfetto-dir");
  }
  // (an option's folder: the --html file's, made like the others)
  const std::string html_dir =
      o.html.empty() ? std::string() : std::filesystem::path(o.html).parent_path().string();
  std::vector<std::pair<std::string, std::string>> folders;
  const std::vector<std::pair<std::string, std::string>> each_folder = {
      {html_dir, "--html"},
      {o.svg_dir, "--svg-dir"},
      {o.snapshot_dir, "--snapshot-dir"},
      {o.perfetto_dir, "--perfetto-dir"}};
  for (const auto& [dir, option] : each_folder) {
    if (!dir.empty()) folders.emplace_back(dir, option);
  }
  program::check_outputs_apart(outputs, folders);
  // A folder made here goes again when the run fails before writing into it (a broken
  // trace): every guard is taken before any folder is made, and outlives the files below.
  std::vector<std::unique_ptr<program::RemoveIfLeftEmpty>> made_here;
  for (const auto& [dir, option] : folders)
    made_here.push_back(std::make_unique<program::RemoveIfLeftEmpty>(dir));
  for (const auto& [dir, option] : folders) program::make_output_dir(dir, option);
  // Outputs first: an unwritable path fails before any trace is read.
  std::unique_ptr<TextOut> html;
  if (!o.html.empty()) html = std::make_unique<TextOut>(o.html, "--html", o.files);
  std::vector<std::unique_ptr<TextOut>> svgs, pickles, snapshots, perfettos;
  for (const std::string& n : names) {
    if (!o.svg_dir.empty())
      svgs.push_back(
          std::make_unique<TextOut>(o.svg_dir + "/memory_" + n + ".svg", "--svg-dir", o.files));
    if (!o.snapshot_dir.empty()) {
      pickles.push_back(std::make_unique<TextOut>(o.snapshot_dir + "/" + n + ".pickle",
                                                  "--snapshot-dir", o.files));
      snapshots.push_back(
          std::make_unique<TextOut>(o.snapshot_dir + "/" + n + ".json", "--snapshot-dir", o.files));
    }
    if (!o.perfetto_dir.empty()) {
      perfettos.push_back(std::make_unique<TextOut>(o.perfetto_dir + "/" + n + ".perfetto.json",
                                                    "--perfetto-dir", o.files));
    }
  }

  std::vector<TraceFile> files;
  std::vector<ReportTrace> traces;
  for (size_t i = 0; i < o.files.size(); ++i) {
    files.push_back(read_trace_file(o.files[i]));
    ReportTrace t{names[i],
                  o.files[i],
                  analyse_trace(files.back(), device_index(files.back(), o.device)),
                  {}};
    t.notes = t.analysis.notes;
    if (files.back().devices.size() > 1 && o.device.empty()) {
      t.notes.push_back("the trace has events on " + device_list(files.back()) + "; this is " +
                        t.analysis.device + " (pick another with --device)");
    }
    traces.push_back(std::move(t));
  }
  for (size_t i = 0; i < traces.size(); ++i) print_trace(traces[i], files[i], o.top);
  if (traces.size() >= 2) print_comparison(traces);

  const int64_t scale = common_scale(traces);
  for (size_t i = 0; i < traces.size(); ++i) {
    if (!svgs.empty()) svgs[i]->write(timeline_svg(traces[i], scale));
    if (!snapshots.empty()) {
      const nlohmann::json snapshot = memory_viz_snapshot(files[i]);
      pickles[i]->write(to_pickle(snapshot));
      snapshots[i]->write(snapshot.dump() + "\n");
    }
    if (!perfettos.empty()) perfettos[i]->write(chrome_trace(files[i]).dump() + "\n");
  }
  if (html) html->write(html_report(traces, o.top));
  auto wrote = [](const char* what, const std::string& where) {
    if (!where.empty())
      std::fprintf(stderr, "chunkgrad trace: wrote %s to %s\n", what, where.c_str());
  };
  wrote("the HTML report", o.html);
  wrote("SVG timelines", o.svg_dir);
  wrote("memory_viz snapshots (pickle and JSON)", o.snapshot_dir);
  wrote("Perfetto traces", o.perfetto_dir);
}

}  // namespace

void add_trace_command(CLI::App& app, CommandBody& run) {
  auto o = std::make_shared<TraceOptions>();
  CLI::App* sub = app.add_subcommand("trace", "read allocator traces: the peak and what held it");
  sub->add_option(
         "files", o->files,
         "trace files: `chunkgrad train` writes <run_dir>/traces/trace_<config>_<path>.json "
         "(traces: its memory.trace_dir; config toy or large_vocab, path naive, chunked or fused, "
         "e.g. "
         "runs/toy/traces/trace_large_vocab_fused.json); also memory_lesson "
         "--trace-dir, mlp_demo --trace. Two or more are compared side by side")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--names", o->names,
                  "comma-separated names for the traces (default: file names without trace_)")
      ->check(program::not_empty());
  sub->add_option("--top", o->top, "rows per table")->check(program::integer_in(1, 1000));
  sub->add_option("--device", o->device,
                  "the device to report on, as the trace names it (default: the one that ran "
                  "out of memory, else the one with the most allocations)")
      ->check(program::not_empty());
  sub->add_option("--html", o->html,
                  "write a self-contained HTML report (timelines, holders, comparison) here")
      ->check(program::not_empty());
  sub->add_option("--svg-dir", o->svg_dir,
                  "write memory_<name>.svg timelines (one byte scale for all) here")
      ->check(program::not_empty());
  sub->add_option("--snapshot-dir", o->snapshot_dir,
                  "write <name>.pickle and <name>.json snapshots for pytorch.org/memory_viz here")
      ->check(program::not_empty());
  sub->add_option("--perfetto-dir", o->perfetto_dir,
                  "write <name>.perfetto.json for ui.perfetto.dev here")
      ->check(program::not_empty());
  sub->callback([&run, o] { run = [o] { run_trace(*o); }; });
}

}  // namespace cg::cli
