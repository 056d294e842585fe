// Why this file exists: a trace file is input from anywhere -- edited, merged from two
// runs, damaged -- and the reader promises to say when it does not add up instead of
// answering with wrong numbers. These are an outside tester's hostile traces, each with
// what the reader now says: a note beside the answer (Note [Inconsistent events] in
// trace/trace_analysis.cpp), an error where the file cannot be a trace (Note [Trace
// bounds] in trace/trace_file.h), and names that cannot forge a line of the report.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "trace/memory_snapshot.h"
#include "trace/trace_analysis.h"
#include "trace/trace_file.h"

namespace cg {
namespace {

constexpr uint64_t kSeg = 1ull << 30, kSegSize = 2ull << 20;  // one 2 MiB segment at 1 GiB

nlohmann::json event(const std::string& action, uint64_t addr, uint64_t size, int64_t time,
                     nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json e = {{"action", action}, {"addr", addr},     {"size", size},
                      {"time_us", time},  {"device", "cpu"},  {"category", "activation"},
                      {"scope", "s"},     {"requested", size}};
  e.update(extra);
  return e;
}

// The segment at kSeg as the end state: free throughout, or without any segment.
nlohmann::json trace_of(const std::vector<nlohmann::json>& events, bool end_segment = true) {
  nlohmann::json segments = nlohmann::json::array();
  if (end_segment) {
    segments.push_back({{"device", "cpu"},
                        {"addr", kSeg},
                        {"size", kSegSize},
                        {"small_pool", true},
                        {"stream", 0},
                        {"blocks",
                         {{{"addr", kSeg},
                           {"size", kSegSize},
                           {"requested", 0},
                           {"allocated", false},
                           {"category", "unknown"},
                           {"scope", ""}}}}});
  }
  return {{"format", "chunkgrad.memory_trace"},
          {"version", 1},
          {"events", events},
          {"segments", segments}};
}

bool has_note(const TraceAnalysis& a, const std::string& words) {
  for (const std::string& n : a.notes) {
    if (n.find(words) != std::string::npos) return true;
  }
  return false;
}

std::string notes_of(const TraceAnalysis& a) {
  std::string all;
  for (const std::string& n : a.notes) all += n + "\n";
  return all;
}

void expect_error(const nlohmann::json& j, const std::vector<std::string>& words) {
  try {
    parse_trace_file(j, "t.json");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    for (const std::string& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << " in: " << e.what();
  }
}

// A consistent trace: no note (the checks below do not fire on a good file).
TEST(TraceConsistency, AConsistentTraceHasNoNote) {
  const TraceFile file =
      parse_trace_file(trace_of({event("segment_alloc", kSeg, kSegSize, 1),
                                 event("alloc", kSeg, 1024, 2), event("free", kSeg, 1024, 3)}));
  const TraceAnalysis a = analyse_trace(file);
  EXPECT_TRUE(a.notes.empty()) << notes_of(a);
  EXPECT_EQ(a.peak.allocated, 1024);
}

// A free at an address outside every segment was counted as a block allocated before the
// trace: the peak read 5.00 KiB instead of 1.00 KiB, with no note, and the snapshot then
// had a free_completed outside every segment, which memory_viz cannot place.
TEST(TraceConsistency, AFreeOutsideEverySegmentIsANoteAndLeftOut) {
  const TraceFile file = parse_trace_file(
      trace_of({event("segment_alloc", kSeg, kSegSize, 1), event("alloc", kSeg, 1024, 2),
                event("free", kSeg, 1024, 3), event("free", 12345, 4096, 4)}));
  const TraceAnalysis a = analyse_trace(file);
  EXPECT_EQ(a.peak.allocated, 1024);
  EXPECT_EQ(a.inconsistencies, 1u);
  EXPECT_TRUE(has_note(a, "1 event does not match")) << notes_of(a);
  EXPECT_TRUE(has_note(a, "event 3, free of 4.00 KiB at 12345: outside every segment"))
      << notes_of(a);
  const nlohmann::json snapshot = memory_viz_snapshot(file);
  for (const auto& e : snapshot["device_traces"][0]) EXPECT_NE(e["addr"], 12345) << e.dump();
  // An allocation outside every segment is left out the same way.
  const TraceAnalysis b = analyse_trace(
      parse_trace_file(trace_of({event("alloc", 12345, 4096, 1), event("free", 12345, 4096, 2)})));
  EXPECT_EQ(b.peak.allocated, 0);
  EXPECT_EQ(b.inconsistencies, 2u);
}

// Two live blocks that overlap in part (not at one address) were both counted, silently.
TEST(TraceConsistency, PartlyOverlappingBlocksAreANote) {
  const TraceAnalysis a = analyse_trace(parse_trace_file(
      trace_of({event("segment_alloc", kSeg, kSegSize, 1), event("alloc", kSeg, 4096, 2),
                event("alloc", kSeg + 512, 4096, 3), event("free", kSeg + 512, 4096, 4),
                event("free", kSeg, 4096, 5)})));
  EXPECT_GE(a.inconsistencies, 1u);
  EXPECT_TRUE(has_note(a, "overlaps the block alive at " + std::to_string(kSeg))) << notes_of(a);
}

// A segment freed while a block in it is alive, and requested bytes above a block's size.
TEST(TraceConsistency, ASegmentFreedUnderALiveBlockAndOverRequestsAreNotes) {
  const TraceAnalysis a = analyse_trace(parse_trace_file(trace_of(
      {event("segment_alloc", kSeg, kSegSize, 1), event("alloc", kSeg, 1024, 2),
       event("segment_free", kSeg, kSegSize, 3), event("segment_alloc", kSeg, kSegSize, 4)})));
  EXPECT_GE(a.inconsistencies, 1u);
  EXPECT_TRUE(has_note(a, "in it is still alive") || has_note(a, "do not match")) << notes_of(a);
  const TraceAnalysis b = analyse_trace(parse_trace_file(trace_of(
      {event("segment_alloc", kSeg, kSegSize, 1),
       event("alloc", kSeg, 1024, 2, {{"requested", 1000000000}}), event("free", kSeg, 1024, 3)})));
  EXPECT_TRUE(has_note(b, "1 block requests more bytes than it holds (the first: event 1"))
      << notes_of(b);
  EXPECT_EQ(b.inconsistencies, 0u);
}

// A category this reader does not know became "unknown" without a word.
TEST(TraceConsistency, AnUnknownCategoryIsANote) {
  const TraceAnalysis a = analyse_trace(
      parse_trace_file(trace_of({event("segment_alloc", kSeg, kSegSize, 1),
                                 event("alloc", kSeg, 1024, 2, {{"category", "nonsense"}}),
                                 event("free", kSeg, 1024, 3, {{"category", "nonsense"}})})));
  EXPECT_TRUE(has_note(a, "categories this reader does not know (\"nonsense\")")) << notes_of(a);
  EXPECT_EQ(a.inconsistencies, 0u);
}

// A segment listed twice in the end state doubled the reserved bytes (74 -> 106 MiB).
TEST(TraceConsistency, OverlappingSegmentsOfTheEndStateAreAnError) {
  nlohmann::json j = trace_of({event("segment_alloc", kSeg, kSegSize, 1)});
  j["segments"].push_back(j["segments"][0]);
  expect_error(j, {"t.json", "segment 1 (at 1073741824) overlaps segment 0", "damaged"});
}

// Rule 5 of the memory_viz snapshot (JSON integers below 2^53) held only for sane files: a
// segment at 2^63, or at 2^64 - 1024 wrapping past 2^64, went into the snapshot as is.
TEST(TraceConsistency, ExtentsPast2To53AreRefused) {
  const uint64_t at_2_63 = 1ull << 63, near_2_64 = ~0ull - 1023, below_2_53 = (1ull << 53) - 512;
  expect_error(trace_of({event("segment_alloc", at_2_63, kSegSize, 1)}, false),
               {"event 0", "segment_alloc at 9223372036854775808", "ends past 2^53", "damaged"});
  expect_error(trace_of({event("alloc", near_2_64, 1024, 1)}, false), {"event 0", "past 2^53"});
  expect_error(trace_of({event("alloc", below_2_53, 1024, 1)}, false), {"event 0", "past 2^53"});
  nlohmann::json segment = trace_of({});
  segment["segments"][0]["addr"] = at_2_63;
  segment["segments"][0]["blocks"][0]["addr"] = at_2_63;
  expect_error(segment, {"segment 0", "past 2^53"});
  expect_error(trace_of({event("alloc", kSeg, 1024, 1ll << 62)}), {"event 0", "time_us", "2^53"});
  expect_error(trace_of({event("alloc", kSeg, 1024, 1, {{"stream", 1ull << 62}})}),
               {"event 0", "\"stream\"", "not a stream id"});
  // (a block's end at exactly 2^53 is still a trace)
  EXPECT_NO_THROW(parse_trace_file(trace_of({event("alloc", below_2_53, 512, 1)}, false)));
  // An oom's request may be anything: it is what was refused. The snapshot caps it.
  const TraceFile oom = parse_trace_file(trace_of({event("oom", 0, ~0ull, 1)}, false));
  EXPECT_EQ(oom.events[0].size, ~0ull);
  const nlohmann::json snapshot = memory_viz_snapshot(oom);
  EXPECT_LT(snapshot["device_traces"][0][0]["size"].get<uint64_t>(), 1ull << 53);
}

// Scope and label names went raw into the report: a terminal escape coloured it, and "\n"
// and "\r" forged a line of it.
TEST(TraceConsistency, ControlCharactersInNamesBecomeQuestionMarks) {
  const TraceFile file = parse_trace_file(trace_of(
      {event("segment_alloc", kSeg, kSegSize, 1),
       event("alloc", kSeg, 1024, 2,
             {{"scope",
               "a\x1b[31mb\nc\rd\xc2\x9b"
               "e/\xc3\xa9"}}),
       event("saved", kSeg, 1024, 2, {{"label", "Node:\x07x"}}), event("free", kSeg, 1024, 3)}));
  const std::vector<std::string> expected = {"", "a?[31mb?c?d?e/\xc3\xa9", "Node:?x"};
  for (const std::string& name : expected) {
    EXPECT_NE(std::find(file.names.begin(), file.names.end(), name), file.names.end()) << name;
  }
  for (const std::string& name : file.names) {
    for (char c : name) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << name;
  }
  EXPECT_EQ(printable_name("ok/\xe6\x97\xa5"), "ok/\xe6\x97\xa5");  // UTF-8 letters stay
}

// A third tester: a device name's escape sequence reached the terminal through the error
// that refuses it, a "dropped" count of 2^60 was printed as dropped events, and a key given
// twice ("dropped": 0, "dropped": 5) was read as its last value.
TEST(TraceConsistency, DeviceNamesCountsAndDuplicateKeysAreChecked) {
  nlohmann::json bad_device = trace_of({event("alloc", kSeg, 1024, 1)});
  bad_device["events"][0]["device"] = "cuda:0\x1b[2J\nchunkgrad trace: all good";
  try {
    parse_trace_file(bad_device, "t.json");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown device \"cuda:0?[2J?chunkgrad"), std::string::npos) << msg;
    for (char c : msg) EXPECT_NE(c, '\x1b') << msg;
  }
  nlohmann::json dropped = trace_of({});
  dropped["dropped"] = 1ull << 60;
  expect_error(dropped, {"\"dropped\"", "past 2^53", "damaged"});
  const std::string path =
      (std::filesystem::temp_directory_path() / "chunkgrad_trace_twice.json").string();
  std::string text = trace_of({}).dump();
  text.insert(1, R"("dropped": 0, "dropped": 5, )");
  std::ofstream(path) << text;
  try {
    read_trace_file(path);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has the key \"dropped\" twice"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace cg
