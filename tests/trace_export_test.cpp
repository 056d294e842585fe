// Why this file exists: the files other tools open, checked without those tools (no
// network here): the memory_viz snapshot against the viewer's rules
// (docs/allocator_notes.md) and against the allocator, replayed backwards
// as the viewer does; the pickle decoded by a small reader here (and by Python's pickle
// module when python3 is on PATH) equal to the JSON, integers exact; the Perfetto file's
// counters, spans and instants; the HTML report and SVG self-contained.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "trace/chrome_trace.h"
#include "trace/memory_snapshot.h"
#include "trace/trace_report.h"

namespace cg {
namespace {

// ---- a reader for the opcodes to_pickle writes (and only those) ----
struct PickleReader {
  const std::string& s;
  size_t at = 0;
  uint64_t le(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(s.at(at + i))) << (8 * i);
    at += n;
    return v;
  }
  nlohmann::json read() {
    EXPECT_EQ(s.at(0), '\x80');
    at = 2;
    std::vector<nlohmann::json> stack;
    std::vector<size_t> marks;
    while (true) {
      const char op = s.at(at++);
      switch (op) {
        case '.': EXPECT_EQ(at, s.size()); return stack.back();
        case 'N': stack.emplace_back(nullptr); break;
        case '\x88': stack.emplace_back(true); break;
        case '\x89': stack.emplace_back(false); break;
        case 'K': stack.emplace_back(le(1)); break;
        case 'M': stack.emplace_back(le(2)); break;
        case 'J': stack.emplace_back(int64_t(int32_t(uint32_t(le(4))))); break;
        case '\x8a': {
          const int n = uint8_t(s.at(at++));
          EXPECT_LE(n, 9);
          const bool negative = uint8_t(s.at(at + n - 1)) & 0x80;
          uint64_t v = le(std::min(n, 8));
          if (n == 9) {
            EXPECT_EQ(s.at(at++), '\0');  // 2^63..2^64-1 take a ninth zero byte
            stack.emplace_back(v);
          } else if (negative) {
            if (n < 8) v |= ~uint64_t{0} << (8 * n);
            stack.emplace_back(int64_t(v));
          } else {
            stack.emplace_back(v);
          }
          break;
        }
        case 'G': {
          uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = (bits << 8) | uint8_t(s.at(at++));
          double d;
          std::memcpy(&d, &bits, 8);
          stack.emplace_back(d);
          break;
        }
        case 'X': {
          const size_t n = le(4);
          stack.emplace_back(s.substr(at, n));
          at += n;
          break;
        }
        case ']': stack.emplace_back(nlohmann::json::array()); break;
        case '}': stack.emplace_back(nlohmann::json::object()); break;
        case '(': marks.push_back(stack.size()); break;
        case 'e': {
          const size_t m = marks.back();
          marks.pop_back();
          for (size_t i = m; i < stack.size(); ++i) stack[m - 1].push_back(stack[i]);
          stack.resize(m);
          break;
        }
        case 'u': {
          const size_t m = marks.back();
          marks.pop_back();
          for (size_t i = m; i + 1 < stack.size(); i += 2)
            stack[m - 1][stack[i].get<std::string>()] = stack[i + 1];
          stack.resize(m);
          break;
        }
        default: ADD_FAILURE() << "unexpected opcode " << int(uint8_t(op)); return nullptr;
      }
    }
  }
};

TEST(TraceExport, PickleIntegersAreExact) {
  const nlohmann::json j = {{"small", 7},
                            {"two_bytes", 60000},
                            {"negative", -5},
                            {"int32", 2000000000},
                            {"above_2^53", (uint64_t{1} << 53) + 1},
                            {"max_u64", UINT64_MAX},
                            {"2^63", uint64_t{1} << 63},
                            {"min_i64", INT64_MIN},
                            {"neg_big", -(int64_t{1} << 40) - 3},
                            {"edge", 0x80},
                            {"edge2", 0x8000000000LL},
                            {"list", {1, "two", nullptr, true, false, 2.5}},
                            {"empty", nlohmann::json::object()},
                            {"empty_list", nlohmann::json::array()}};
  for (int protocol : {2, 3, 4}) {
    const std::string p = to_pickle(j, protocol);
    EXPECT_EQ(p[1], char(protocol));
    EXPECT_EQ(PickleReader{p}.read(), j);
  }
  EXPECT_THROW(to_pickle(j, 5), Error);
}

// A traced run on the CPU allocator: allocations and frees, with the allocator's state
// taken in the middle (`mid_blocks`, after `mid_events` events).
struct TracedRun {
  nlohmann::json file;
  std::set<std::pair<uint64_t, uint64_t>> mid_blocks, end_blocks;  // allocated (addr, size)
  size_t mid_events = 0;
};

std::set<std::pair<uint64_t, uint64_t>> allocated_blocks(const std::vector<SegmentInfo>& segments) {
  std::set<std::pair<uint64_t, uint64_t>> out;
  for (const SegmentInfo& s : segments) {
    for (const BlockInfo& b : s.blocks) {
      if (b.allocated) out.emplace(b.addr, b.size);
    }
  }
  return out;
}

TracedRun traced_run() {
  TracedRun run;
  CachingAllocator& alloc = allocator_for(kCPU);
  MemoryTrace::enable();
  std::vector<void*> live;
  uint64_t x = 12345;
  auto step = [&](int n) {
    for (int i = 0; i < n; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      if (live.empty() || (x >> 60) < 10) {
        CategoryGuard c((x >> 33) % 2 ? MemoryCategory::activation : MemoryCategory::temporary);
        live.push_back(alloc.allocate(512 + (x >> 20) % (3 << 20)));
      } else {
        const size_t k = (x >> 7) % live.size();
        alloc.free(live[k]);
        live.erase(live.begin() + k);
      }
    }
  };
  {
    TracePhase phase("forward");
    step(150);
  }
  run.mid_events = MemoryTrace::events().size();
  run.mid_blocks = allocated_blocks(alloc.snapshot());
  {
    TracePhase phase("backward");
    step(150);
  }
  MemoryTrace::record(TraceAction::oom, kCPU, 0, uint64_t{1} << 40, uint64_t{1} << 40);
  run.file = memory_trace_file();
  run.end_blocks = allocated_blocks(alloc.snapshot());
  MemoryTrace::disable();
  for (void* p : live) alloc.free(p);
  return run;
}

TEST(TraceExport, SnapshotFollowsTheViewersRulesAndReplaysBackwards) {
  const TracedRun run = traced_run();
  const TraceFile file = parse_trace_file(run.file);
  const nlohmann::json snap = memory_viz_snapshot(file);
  ASSERT_TRUE(snap["segments"].is_array());
  ASSERT_TRUE(snap["device_traces"].is_array());
  const nlohmann::json& trace = snap["device_traces"][0];

  // Rules 1 and 2: the segments are the end state, and their blocks tile them.
  std::set<std::pair<uint64_t, uint64_t>> allocated;
  for (const auto& s : snap["segments"]) {
    ASSERT_LT(s["device"].get<size_t>(), snap["device_traces"].size());  // rule 3
    uint64_t at = s["address"].get<uint64_t>(), sum = 0;
    for (const auto& b : s["blocks"]) {
      EXPECT_EQ(b["address"].get<uint64_t>(), at);
      at += b["size"].get<uint64_t>();
      EXPECT_TRUE(b["state"] == "active_allocated" || b["state"] == "inactive");
      if (b["state"] == "active_allocated") {
        allocated.emplace(b["address"].get<uint64_t>(), b["size"].get<uint64_t>());
        sum += b["size"].get<uint64_t>();
      }
    }
    EXPECT_EQ(at, s["address"].get<uint64_t>() + s["total_size"].get<uint64_t>());
    EXPECT_EQ(s["allocated_size"].get<uint64_t>(), sum);
    for (const char* key : {"stream", "segment_type", "segment_pool_id", "is_expandable", "frames",
                            "requested_size", "active_size"}) {
      EXPECT_TRUE(s.contains(key)) << key;
    }
  }
  EXPECT_EQ(allocated, run.end_blocks);

  // Rule 4: categories present, so "unknown" is among them. Rule 5: JSON integers < 2^53.
  bool unknown = false;
  std::map<std::string, int> actions;
  for (const auto& e : trace) {
    unknown = unknown || e["category"] == "unknown";
    actions[e["action"].get<std::string>()] += 1;
    ASSERT_TRUE(e.contains("frames") && e["frames"].is_array());
  }
  EXPECT_TRUE(unknown);
  for (const char* a : {"alloc", "free_requested", "free_completed", "segment_alloc", "oom"}) {
    EXPECT_GT(actions[a], 0) << a;
  }
  EXPECT_EQ(actions["free_requested"], actions["free_completed"]);
  std::function<void(const nlohmann::json&)> check_ints = [&](const nlohmann::json& j) {
    if (j.is_number_unsigned()) EXPECT_LT(j.get<uint64_t>(), uint64_t{1} << 53);
    if (j.is_number_integer() && !j.is_number_unsigned())
      EXPECT_LT(std::abs(j.get<int64_t>()), int64_t{1} << 53);
    if (j.is_structured()) {
      for (const auto& v : j) check_ints(v);
    }
  };
  check_ints(snap);

  // Replayed backwards from the segments (what the viewer does), the trace reaches the
  // allocator's state in the middle of the run.
  size_t entries_before_mid = 0;  // the viewer's entries made of the first mid_events events
  for (size_t i = 0; i < run.mid_events; ++i) {
    const std::string a =
        file.events[i].action == TraceAction::free ? "free" : action_name(file.events[i].action);
    entries_before_mid +=
        a == "free" ? 2
                    : (a == "alloc" || a == "segment_alloc" || a == "segment_free" || a == "oom");
  }
  std::set<std::pair<uint64_t, uint64_t>> state = allocated;
  for (size_t i = trace.size(); i-- > entries_before_mid;) {
    const auto& e = trace[i];
    if (e["action"] == "alloc")
      EXPECT_EQ(state.erase({e["addr"].get<uint64_t>(), e["size"].get<uint64_t>()}), 1u);
    if (e["action"] == "free_completed")
      EXPECT_TRUE(state.emplace(e["addr"].get<uint64_t>(), e["size"].get<uint64_t>()).second);
  }
  EXPECT_EQ(state, run.mid_blocks);
}

TEST(TraceExport, PickleAndJsonCarryTheSameSnapshot) {
  const nlohmann::json snap = memory_viz_snapshot(parse_trace_file(traced_run().file));
  const std::string pickle = to_pickle(snap);
  EXPECT_EQ(PickleReader{pickle}.read(), snap);

  // And Python's own pickle module, when there is one.
  if (std::system("command -v python3 >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 is not on PATH";
  const std::string dir = ::testing::TempDir() + "chunkgrad_snapshot_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/s.pickle", std::ios::binary) << pickle;
  std::ofstream(dir + "/s.json") << snap.dump();
  std::ofstream(dir + "/big.pickle", std::ios::binary)
      << to_pickle({{"a", UINT64_MAX}, {"b", INT64_MIN}}, 4);
  const std::string cmd =
      "python3 -c \"import pickle,json,sys; d=sys.argv[1]; "
      "p=pickle.load(open(d+'/s.pickle','rb')); j=json.load(open(d+'/s.json')); "
      "b=pickle.load(open(d+'/big.pickle','rb')); "
      "sys.exit(0 if p==j and b=={'a':2**64-1,'b':-2**63} else 3)\" '" +
      dir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "Python's pickle.load differs from the JSON";
  std::filesystem::remove_all(dir);
}

// PyTorch's own Python reader of snapshots (torch.cuda._memory_viz: segsum, trace,
// memory, segments -- what `python -m torch.cuda._memory_viz` runs) reads the pickle
// without an error, where torch is installed.
TEST(TraceExport, PyTorchsSnapshotReaderReadsThePickle) {
  if (std::system("python3 -c 'import torch.cuda._memory_viz' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with torch is not on PATH";
  }
  const std::string path =
      ::testing::TempDir() + "chunkgrad_snapshot_" + std::to_string(::getpid()) + ".pickle";
  std::ofstream(path, std::ios::binary)
      << to_pickle(memory_viz_snapshot(parse_trace_file(traced_run().file)));
  const std::string cmd =
      "python3 -c \"import pickle,sys; from torch.cuda import _memory_viz as mv; "
      "d=pickle.load(open(sys.argv[1],'rb')); mv.segsum(d); mv.trace(d); "
      "mv.memory(d, format_flamegraph=lambda x: x); mv.segments(d, format_flamegraph=lambda x: "
      "x)\" '" +
      path + "' >/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  std::filesystem::remove(path);
}

TEST(TraceExport, PerfettoHasCountersSpansAndOomInstants) {
  const nlohmann::json j = chrome_trace(parse_trace_file(traced_run().file));
  ASSERT_TRUE(j["traceEvents"].is_array());
  std::set<std::string> spans, counter_keys;
  int ooms = 0, counters = 0;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("name") && e.contains("pid")) << e.dump();
    const std::string ph = e["ph"];
    if (ph != "M") EXPECT_TRUE(e["ts"].is_number_integer()) << e.dump();
    if (ph == "C") {
      ++counters;
      for (const auto& [k, v] : e["args"].items()) {
        counter_keys.insert(k);
        EXPECT_TRUE(v.is_number_integer());
      }
    }
    if (ph == "X") {
      spans.insert(e["name"].get<std::string>());
      EXPECT_GE(e["dur"].get<int64_t>(), 0);
    }
    if (ph == "i") ++ooms;
  }
  EXPECT_GT(counters, 10);
  for (const char* k : {"allocated", "reserved", "activation", "temporary"})
    EXPECT_TRUE(counter_keys.count(k)) << k;
  EXPECT_EQ(spans, (std::set<std::string>{"forward", "backward"}));
  EXPECT_EQ(ooms, 1);
}

TEST(TraceExport, ReportAndSvgAreSelfContained) {
  const TraceFile file = parse_trace_file(traced_run().file);
  std::vector<ReportTrace> traces;
  for (const char* name : {"one", "two"})
    traces.push_back({name, "run.json", analyse_trace(file), {}});
  const std::string svg = timeline_svg(traces[0]);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("class=\"area\""), std::string::npos);
  EXPECT_NE(svg.find("class=\"peak-label\""), std::string::npos);
  const std::string html = html_report(traces);
  for (const char* needle : {"<svg class=\"timeline\"", "peak-label", "report-ok", "window.onerror",
                             "id=\"comparison\""}) {
    EXPECT_NE(html.find(needle), std::string::npos) << needle;
  }
  // Nothing is fetched: no src= or href= attributes, no URL but the SVG namespace.
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(html.find("http"), std::string::npos);
}

}  // namespace
}  // namespace cg
