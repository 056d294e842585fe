// Why this file exists: the answers `chunkgrad trace` gives, checked from trace files
// alone: the holders at the peak of the memory lesson's three paths (the logits held by
// the loss node for naive and chunked, dh for fused), the phase of the peak, the round
// trip through the file, and bad input -- empty, truncated, foreign, an overflowed ring
// buffer -- giving a clear error or a marked partial answer.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/factories.h"
#include "ops/head_loss.h"
#include "trace/trace_analysis.h"
#include "trace/trace_file.h"

namespace cg {
namespace {

class TraceAnalysisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MemoryTrace::disable();
    MemoryTrace::clear();
  }
  void TearDown() override {
    MemoryTrace::disable();
    MemoryTrace::clear();
  }
};

// One traced head_loss step (forward and backward) of `path`; the file as a reader sees it.
TraceFile lesson_trace(HeadLossPath path) {
  Generator gen(3);
  const int64_t T = 64, D = 16, V = 1024;  // logits [T, V] fp32 = 256 KiB, dh [T, D] = 4 KiB
  HeadLossInputs in;
  {
    CategoryGuard input(MemoryCategory::input);
    in.hidden = randn({T, D}, {}, &gen).requires_grad_();
    in.head = randn({V, D}, {}, &gen);
    std::vector<int64_t> labels(T);
    for (auto& y : labels) y = static_cast<int64_t>(gen.next_u64() % V);
    in.labels = from_ints(labels, {T});
  }
  HeadLossOptions o;
  o.path = path;
  o.chunk_rows = 16;  // chunked and fused: four chunks
  MemoryTrace::enable();
  {
    TracePhase step("step");
    HeadLossResult r;
    {
      TracePhase phase("forward");
      r = head_loss(in, o);
    }
    TracePhase phase("backward");
    r.loss.backward();
  }
  // Through text, as from a file.
  const std::string text = memory_trace_file().dump();
  MemoryTrace::disable();
  return parse_trace_file(nlohmann::json::parse(text), head_loss_path_name(path));
}

TEST_F(TraceAnalysisTest, NaiveAndChunkedPeaksAreHeldByTheLossNodesLogits) {
  for (HeadLossPath path : {HeadLossPath::naive, HeadLossPath::chunked}) {
    SCOPED_TRACE(head_loss_path_name(path));
    const TraceFile file = lesson_trace(path);
    const TraceAnalysis a = analyse_trace(file);
    const MemoryGroup* holder = a.top_saved_holder();
    ASSERT_NE(holder, nullptr);
    EXPECT_EQ(holder->name, "RowLossBackward:logits");
    EXPECT_GE(holder->bytes, 64 * 1024 * 4);  // all of [T, V], in one block or four chunks
    EXPECT_EQ(holder->blocks, path == HeadLossPath::naive ? 1 : 4);
    EXPECT_TRUE(a.notes.empty()) << a.notes.front();
    EXPECT_EQ(a.inconsistencies, 0u);
    // The peak is the maximum of the timeline and falls inside the traced step.
    for (const TimelinePoint& p : a.timeline) EXPECT_LE(p.allocated, a.peak.allocated);
    EXPECT_TRUE(a.peak_phase == "forward" || a.peak_phase == "backward") << a.peak_phase;
    EXPECT_GE(a.cached_unallocated(), 0);
    // The groups add up to the peak.
    int64_t sum = 0;
    for (const MemoryGroup& g : a.by_category) sum += g.bytes;
    EXPECT_EQ(sum, a.peak.allocated);
  }
}

// Issue 23: what the graph holds has one colour in every path. naive allocates its logits
// as activations and RowLossBackward saves them later; fused allocates dh as
// autograd_saved. Both count as autograd_saved, and every block a node saved does.
TEST_F(TraceAnalysisTest, BlocksTheGraphHoldsAreAutogradSavedInEveryPath) {
  for (HeadLossPath path : {HeadLossPath::naive, HeadLossPath::chunked, HeadLossPath::fused}) {
    SCOPED_TRACE(head_loss_path_name(path));
    const TraceAnalysis a = analyse_trace(lesson_trace(path));
    int64_t saved = 0;
    for (const LiveBlock& b : a.live_at_peak) {
      if (b.holders.empty() || b.before_trace) continue;
      EXPECT_EQ(b.category, MemoryCategory::autograd_saved) << b.size;
      saved += static_cast<int64_t>(b.size);
    }
    EXPECT_GT(saved, 0);
    EXPECT_EQ(a.peak.by_category[static_cast<int>(MemoryCategory::autograd_saved)], saved);
    EXPECT_LT(a.peak.by_category[static_cast<int>(MemoryCategory::activation)], 64 * 1024 * 4)
        << "the logits are still filed as activations";
  }
}

// Issue 23: a gradient made in backward names the node that made it. chunked's backward
// runs each chunk's NarrowBackward, which returns a block of all of h [T, D].
TEST_F(TraceAnalysisTest, GradientsMadeInBackwardNameTheirNode) {
  const TraceFile file = lesson_trace(HeadLossPath::chunked);
  bool narrow = false;
  for (const TraceRecord& e : file.events) {
    if (e.action == TraceAction::alloc &&
        file.name(e.scope).find("NarrowBackward") != std::string::npos && e.size >= 64 * 16 * 4)
      narrow = true;
  }
  EXPECT_TRUE(narrow) << "no [T, D] block allocated under a NarrowBackward scope";
  const TraceAnalysis a = analyse_trace(file);
  for (const MemoryGroup& g : a.by_holder) {
    if (g.name.rfind(kMadeInBackwardGroup, 0) == 0) {
      EXPECT_EQ(g.name.back(), ')');
      EXPECT_NE(g.name.find("Backward)"), std::string::npos) << g.name;
    }
  }
  EXPECT_EQ(a.top_saved_holder()->name, "RowLossBackward:logits");  // never a made-in group
}

TEST_F(TraceAnalysisTest, FusedPeakIsHeldByDh) {
  const TraceFile file = lesson_trace(HeadLossPath::fused);
  const TraceAnalysis a = analyse_trace(file);
  const MemoryGroup* holder = a.top_saved_holder();
  ASSERT_NE(holder, nullptr);
  EXPECT_EQ(holder->name, "FusedHeadRowsBackward:dh");
  EXPECT_EQ(holder->bytes, static_cast<int64_t>(CachingAllocator::round_size(64 * 16 * 4)));
  for (const MemoryGroup& g : a.by_holder) EXPECT_NE(g.name, "RowLossBackward:logits");
}

TEST_F(TraceAnalysisTest, PhasesNestAndAreNamed) {
  const TraceAnalysis a = analyse_trace(lesson_trace(HeadLossPath::fused));
  ASSERT_EQ(a.phases.size(), 3u);
  EXPECT_EQ(a.phases[0].name, "step");
  EXPECT_EQ(a.phases[0].depth, 0);
  EXPECT_EQ(a.phases[1].name, "forward");
  EXPECT_EQ(a.phases[1].depth, 1);
  EXPECT_EQ(a.phases[2].name, "backward");
  EXPECT_LE(a.phases[1].end_us, a.phases[2].begin_us);
}

TEST_F(TraceAnalysisTest, FileRoundTripKeepsTheAllocatorsEndState) {
  MemoryTrace::enable();
  CachingAllocator& alloc = allocator_for(kCPU);
  std::vector<void*> live;
  for (int i = 0; i < 20; ++i) live.push_back(alloc.allocate(1000 + 70000 * i));
  for (int i = 0; i < 20; i += 3) alloc.free(live[i]);
  const std::string text = memory_trace_file().dump();
  const std::vector<SegmentInfo> end = alloc.snapshot();
  MemoryTrace::disable();
  for (int i = 0; i < 20; ++i) {
    if (i % 3 != 0) alloc.free(live[i]);
  }
  const TraceFile file = parse_trace_file(nlohmann::json::parse(text));
  EXPECT_TRUE(file.end_state_recorded);
  ASSERT_EQ(file.segments.size(), end.size());
  for (size_t s = 0; s < end.size(); ++s) {
    EXPECT_EQ(file.segments[s].addr, end[s].addr);
    ASSERT_EQ(file.segments[s].blocks.size(), end[s].blocks.size());
    for (size_t b = 0; b < end[s].blocks.size(); ++b) {
      EXPECT_EQ(file.segments[s].blocks[b].addr, end[s].blocks[b].addr);
      EXPECT_EQ(file.segments[s].blocks[b].size, end[s].blocks[b].size);
      EXPECT_EQ(file.segments[s].blocks[b].allocated, end[s].blocks[b].allocated);
    }
  }
  // Without its end state the file is still read; the answer says what it lacks.
  nlohmann::json bare = nlohmann::json::parse(text);
  bare.erase("segments");
  const TraceAnalysis a = analyse_trace(parse_trace_file(bare));
  ASSERT_FALSE(a.notes.empty());
  EXPECT_NE(a.notes.front().find("no end state"), std::string::npos);
}

TEST_F(TraceAnalysisTest, DevicesAreReplayedApart) {
  // A host block and two device blocks at the same address: each device its own state.
  const nlohmann::json j = nlohmann::json::parse(R"({"events":[
    {"action":"segment_alloc","time_us":0,"addr":4096,"size":2097152,"device":"cuda:0"},
    {"action":"alloc","time_us":1,"addr":4096,"size":1024,"device":"cuda:0","category":"activation"},
    {"action":"alloc","time_us":2,"addr":4096,"size":512,"device":"cpu"},
    {"action":"alloc","time_us":3,"addr":5120,"size":2048,"device":"cuda:0","category":"gradient"},
    {"action":"free","time_us":4,"addr":4096,"size":1024,"device":"cuda:0","category":"activation"}]})");
  const TraceFile file = parse_trace_file(j);
  ASSERT_EQ(file.devices, (std::vector<std::string>{"cuda:0", "cpu"}));
  const TraceAnalysis gpu = analyse_trace(file);  // the device with the most allocations
  EXPECT_EQ(gpu.device, "cuda:0");
  EXPECT_EQ(gpu.peak.allocated, 3072);
  EXPECT_EQ(gpu.peak.reserved, 2097152);
  EXPECT_EQ(gpu.cached_unallocated(), 2097152 - 3072);
  EXPECT_EQ(gpu.inconsistencies, 0u);
  const TraceAnalysis cpu = analyse_trace(file, 1);
  EXPECT_EQ(cpu.device, "cpu");
  EXPECT_EQ(cpu.peak.allocated, 512);
  EXPECT_EQ(cpu.inconsistencies, 0u);  // a block outside any segment the trace saw
  // The rebuilt end state (no "segments" in the file) tiles the device's segment.
  ASSERT_EQ(file.segments.size(), 1u);
  uint64_t covered = 0;
  for (const BlockRecord& b : file.segments[0].blocks) covered += b.size;
  EXPECT_EQ(covered, 2097152u);
}

// A failing step's trace peaks in the forward and runs out in the backward: what held the
// memory at the refused request is answered apart from the peak (at_first_oom).
TEST_F(TraceAnalysisTest, WhatHeldTheMemoryAtTheFirstOutOfMemory) {
  const nlohmann::json j = nlohmann::json::parse(R"({"events":[
    {"action":"segment_alloc","time_us":0,"addr":4096,"size":2097152,"device":"cpu"},
    {"action":"phase_begin","time_us":1,"addr":0,"size":0,"device":"cpu","label":"forward"},
    {"action":"alloc","time_us":2,"addr":4096,"size":4096,"device":"cpu","category":"activation"},
    {"action":"saved","time_us":3,"addr":4096,"size":0,"device":"cpu","label":"RowLossBackward:logits"},
    {"action":"alloc","time_us":4,"addr":8192,"size":8192,"device":"cpu","category":"temporary"},
    {"action":"free","time_us":5,"addr":8192,"size":8192,"device":"cpu","category":"temporary"},
    {"action":"phase_end","time_us":6,"addr":0,"size":0,"device":"cpu","label":"forward"},
    {"action":"phase_begin","time_us":7,"addr":0,"size":0,"device":"cpu","label":"backward"},
    {"action":"alloc","time_us":8,"addr":8192,"size":1024,"device":"cpu","category":"gradient"},
    {"action":"oom","time_us":9,"addr":0,"size":1048576,"requested":1048576,"device":"cpu"},
    {"action":"oom","time_us":10,"addr":0,"size":2048,"requested":2048,"device":"cpu"},
    {"action":"phase_end","time_us":11,"addr":0,"size":0,"device":"cpu","label":"backward"}]})");
  const TraceAnalysis a = analyse_trace(parse_trace_file(j));
  EXPECT_EQ(a.peak.allocated, 4096 + 8192);
  EXPECT_EQ(a.peak_phase, "forward");
  ASSERT_EQ(a.ooms.size(), 2u);
  ASSERT_TRUE(a.at_first_oom.has_value());
  const TraceAnalysis::AtOom& at = *a.at_first_oom;
  EXPECT_EQ(at.event, 9u);
  EXPECT_EQ(at.point.allocated, 4096 + 1024);
  EXPECT_EQ(at.phase, "backward");
  ASSERT_EQ(at.by_holder.size(), 2u);
  EXPECT_EQ(at.by_holder[0].name, "RowLossBackward:logits");
  EXPECT_EQ(at.by_holder[0].bytes, 4096);
  EXPECT_EQ(at.by_holder[1].bytes, 1024);
  ASSERT_EQ(at.by_category.size(), 2u);
  EXPECT_EQ(at.by_category[0].name, "autograd_saved");  // a saved block counts as saved
  EXPECT_EQ(at.by_category[1].name, "gradient");
  // Interleaved with another device that allocates more, the device that ran out is the
  // one analysed when none is named.
  nlohmann::json two = j;
  for (int k = 0; k < 3; ++k) {
    two["events"].insert(two["events"].begin() + 1, nlohmann::json{{"action", "alloc"},
                                                                   {"time_us", 1},
                                                                   {"addr", (1 << 20) * (k + 1)},
                                                                   {"size", 512},
                                                                   {"device", "cuda:0"}});
  }
  const TraceAnalysis picked = analyse_trace(parse_trace_file(two));
  EXPECT_EQ(picked.device, "cpu");
  ASSERT_TRUE(picked.at_first_oom.has_value());
  EXPECT_EQ(picked.at_first_oom->point.allocated, 4096 + 1024);
  EXPECT_EQ(picked.at_first_oom->phase, "backward");
  // A trace with no out-of-memory event has no such answer.
  EXPECT_FALSE(analyse_trace(lesson_trace(HeadLossPath::naive)).at_first_oom.has_value());
}

// ---- bad input ----

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "chunkgrad_trace_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

void expect_error(const std::string& path, const std::vector<std::string>& words) {
  try {
    read_trace_file(path);
    ADD_FAILURE() << path << " was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const std::string& w : words)
      EXPECT_NE(m.find(w), std::string::npos) << "missing '" << w << "' in: " << m;
  }
  std::filesystem::remove(path);
}

TEST_F(TraceAnalysisTest, BadFilesGiveClearErrors) {
  expect_error(write_temp("empty.json", ""),
               {"is empty", "not a chunkgrad memory trace", "--trace-dir"});
  expect_error(write_temp("blank.json", "  \n"), {"is empty"});
  expect_error(
      write_temp("truncated.json",
                 R"({"format":"chunkgrad.memory_trace","version":1,"events":[{"action":"al)"),
      {"truncated"});
  expect_error(write_temp("png.json", std::string("\x89PNG\r\n\x1a\n\0\0", 10)), {"is not JSON"});
  expect_error(write_temp("perfetto.json", R"({"traceEvents":[]})"),
               {"not a chunkgrad memory trace", "Perfetto"});
  expect_error(write_temp("snapshot.json", R"({"segments":[],"device_traces":[[]]})"),
               {"memory_viz"});
  expect_error(write_temp("list.json", "[1,2,3]"), {"no \"events\" list"});
  expect_error(write_temp("field.json", R"({"events":[{"action":"alloc","time_us":0,"addr":16}]})"),
               {"event 0", "\"size\""});
  expect_error(write_temp("action.json",
                          R"({"events":[{"action":"malloc","time_us":0,"addr":16,"size":1}]})"),
               {"event 0", "unknown action", "malloc"});
  expect_error(write_temp("negative.json",
                          R"({"events":[{"action":"alloc","time_us":0,"addr":16,"size":-1}]})"),
               {"non-negative"});
  // 2^64 - 1 bytes wrapped the replay's int64 counts into a lower, wrong peak, silently.
  expect_error(
      write_temp(
          "huge.json",
          R"({"events":[{"action":"alloc","time_us":0,"addr":16,"size":18446744073709551615}]})"),
      {"event 0", "larger than any allocation", "damaged"});
  expect_error(
      write_temp("time.json", R"({"events":[{"action":"alloc","time_us":5,"addr":16,"size":1},)"
                              R"({"action":"free","time_us":4,"addr":16,"size":1}]})"),
      {"event 1", "back in time"});
  // An outside tester: -2^63 printed a span of "-9223372036854760.00 ms".
  expect_error(write_temp("before.json", R"({"events":[{"action":"alloc",)"
                                         R"("time_us":-9223372036854775808,"addr":16,"size":1}]})"),
               {"event 0", "is negative", "damaged"});
  expect_error(
      write_temp(
          "tiles.json",
          R"({"events":[],"segments":[{"device":"cpu","addr":0,"size":1024,"small_pool":true,)"
          R"("blocks":[{"addr":0,"size":512,"requested":1,"allocated":true}]}]})"),
      {"segment 0", "cover 512 of its 1024"});
  expect_error(
      write_temp("version.json", R"({"format":"chunkgrad.memory_trace","version":7,"events":[]})"),
      {"version 7"});
  try {
    read_trace_file("/nonexistent/trace.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open the trace /nonexistent/trace.json"),
              std::string::npos);
  }
}

TEST_F(TraceAnalysisTest, AnOverflowedRingBufferGivesAMarkedPartialAnswer) {
  CachingAllocator& alloc = allocator_for(kCPU);
  MemoryTrace::enable(8);  // far too small: most events are overwritten
  std::vector<void*> blocks;
  for (int i = 0; i < 12; ++i) blocks.push_back(alloc.allocate(4096));
  for (void* p : blocks) alloc.free(p);  // frees of blocks whose allocations were dropped
  const std::string text = memory_trace_file().dump();
  MemoryTrace::disable();
  const TraceFile file = parse_trace_file(nlohmann::json::parse(text));
  EXPECT_TRUE(file.partial());
  EXPECT_GT(file.dropped, 0u);
  const TraceAnalysis a = analyse_trace(file);
  ASSERT_FALSE(a.notes.empty());
  EXPECT_NE(a.notes.front().find("PARTIAL"), std::string::npos);
  EXPECT_NE(a.notes.front().find("dropped"), std::string::npos);
  EXPECT_EQ(a.inconsistencies, 0u);  // the kept frees are of blocks alive at the start
  // The kept window starts with blocks already alive, marked so.
  bool before = false;
  for (const LiveBlock& b : live_blocks_after(file, 0, SIZE_MAX)) before = before || b.before_trace;
  EXPECT_TRUE(before);
  // A window cut without its end state: still no crash, and still marked partial.
  nlohmann::json bare = nlohmann::json::parse(text);
  bare.erase("segments");
  const TraceAnalysis b = analyse_trace(parse_trace_file(bare));
  EXPECT_NE(b.notes.front().find("PARTIAL"), std::string::npos);
}

}  // namespace
}  // namespace cg
