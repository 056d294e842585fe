// Why this file exists: the main job's summary as text (summary_text in pipeline.h): what
// the run printed at its end, read back from summary.json, so that the text and the file
// always agree. Kept apart from the stages (pipeline.cpp), which write that JSON.
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "train/pipeline.h"
#include "train/speculative_decoding.h"

namespace cg::train {

namespace {

// What the token-for-token check found, exactly: "identical tokens" only when they were.
std::string lossless_text(const nlohmann::json& s) {
  const bool identical = s.value("identical", false);
  const int64_t ties = s.value("tie_divergences", int64_t{0});
  if (s["lossless"].get<bool>() && identical) return "lossless: identical tokens";
  if (s["lossless"].get<bool>()) {
    return "lossless up to near ties: " + std::to_string(ties) +
           (ties == 1 ? " prompt" : " prompts") +
           " diverged where the top two logits were within the tie tolerance, no real mismatch";
  }
  return "NOT LOSSLESS";
}

// The speedup as a result, or -- when the timing was noise (Note [Timing noise],
// speculative_decoding.h) -- said to be one: a speedup above its own ceiling is never
// printed as a result. Summaries without a spread (older ones) count as one repeat.
// above_ceiling: set when the speedup is not a result at all.
std::string speedup_text(const nlohmann::json& s, std::string* note, bool* above_ceiling) {
  const double speedup = s["speedup"].get<double>();
  const double ceiling = s.value("ceiling_speedup", 0.0);
  auto spread = [&](const char* key, double value) {
    const nlohmann::json& j = s.contains(key) ? s[key] : nlohmann::json();
    if (!j.is_array() || j.size() != 3) return TimingSpread{value, value, value};
    return TimingSpread{j[0].get<double>(), j[1].get<double>(), j[2].get<double>()};
  };
  const SpeedupVerdict v =
      judge_speedup(spread("speedup_spread", speedup), spread("ceiling_spread", ceiling),
                    s.value("timing_repeats", int64_t{1}));
  char text[160];
  if (v.above_ceiling) {
    std::snprintf(text, sizeof text, "speedup not measured: timing noise (see below)");
  } else {
    std::snprintf(text, sizeof text, "speedup %.2fx%s over target-only greedy", speedup,
                  v.noisy ? " (NOISY, see below)" : "");
  }
  *note = v.note;
  *above_ceiling = v.above_ceiling;
  return text;
}

}  // namespace

std::string summary_text(const nlohmann::json& s) {
  std::ostringstream o;
  char line[256];
  const int64_t block = s["eval_block_size"].get<int64_t>();
  const int64_t trained = s.value("drafter_block_size", block);
  std::string block_text = "block " + std::to_string(block);
  if (trained != block) block_text += ", trained on blocks of " + std::to_string(trained);
  if (s.contains("evaluation_skipped")) {  // offline or synthetic features: no decoding
    o << "evaluation skipped: " << s["evaluation_skipped"].get<std::string>() << "\n";
  } else {
    std::string timing;
    bool not_a_result = false;
    const std::string speedup = speedup_text(s, &timing, &not_a_result);
    std::snprintf(line, sizeof line, "speculative decoding (%s): tau %.2f tokens per target step, ",
                  block_text.c_str(), s["tau"].get<double>());
    o << line << speedup << " (" << lossless_text(s) << ")\n";
    std::snprintf(line, sizeof line,
                  "  target-only %.1f tok/s, speculative %.1f tok/s; a free, always-right drafter "
                  "would give %.2fx\n",
                  s["target_tokens_per_s"].get<double>(),
                  s["speculative_tokens_per_s"].get<double>(), s["ceiling_speedup"].get<double>());
    o << line << "  timing: " << timing << "\n";
    // Note [Break-even tau]: speedup = tau x (one target step's time) / (one speculative
    // step's time, drafter and verify forward), so tau / speedup is how many target steps
    // one speculative step costs: the tau this drafter must beat to pay off at all. A short
    // run with speedup below 1 reads as "tau has not reached break-even yet".
    const double tau = s["tau"].get<double>(), speedup_x = s["speedup"].get<double>();
    if (speedup_x > 0 && !not_a_result) {
      std::snprintf(line, sizeof line,
                    "  break-even tau %.2f (tau / speedup: one speculative step costs as much as "
                    "%.2f target-only steps; the drafter pays off once tau is above it)\n",
                    tau / speedup_x, tau / speedup_x);
      o << line;
    }
  }
  if (s["per_slot_accuracy"].is_null()) {  // no held-out block was measured
    o << "per-slot accuracy and acceptance lengths: none (no held-out blocks to measure)\n";
  } else {
    o << "per-slot accuracy (slot 1..):";
    const auto acc = s["per_slot_accuracy"].get<std::vector<double>>();
    for (size_t k = 1; k < acc.size(); ++k) {
      std::snprintf(line, sizeof line, " %.3f", acc[k]);
      o << line;
    }
    // Note [Three acceptance numbers]: tau, the expected and the measured acceptance length
    // are three measurements, not one printed three ways. The last two come from held-out
    // blocks of the target's own text, each anchored at a true position (teacher-forced):
    // "expected" combines the per-slot accuracies as if misses were independent, "measured"
    // averages each block's 1 + correct prefix (usually higher: misses cluster; blocks cut
    // short by the end of a sequence pull it down). tau is
    // what speculative decoding achieved on the held-out prompts, where each block starts
    // where the last one stopped and the eval block size is used.
    char acceptance[512];
    std::snprintf(
        acceptance, sizeof acceptance,
        "\nexpected acceptance length %.2f (1 + the sum over k of the product of the slot 1..k "
        "accuracies: "
        "as if misses were independent); measured per block %.2f (1 + each block's correct prefix, "
        "averaged: usually higher, as misses cluster; blocks cut by a sequence's end lower it)\n",
        s["expected_acceptance_length"].get<double>(),
        s["measured_acceptance_length"].get<double>());
    o << acceptance;
    o << (s.contains("evaluation_skipped")
              ? "  (both on held-out blocks of drafter.block_size anchored at true positions)\n"
              : "  (both on held-out blocks of drafter.block_size anchored at true positions; tau "
                "above is what decoding achieved, each block starting where the last one "
                "stopped)\n");
  }
  const nlohmann::json& steps = s["drafter_steps"];
  if (steps["trained"].get<int64_t>() > 0) {
    std::snprintf(
        line, sizeof line, "drafter training: %lld steps, %.0f label tokens/s; total %.1f s\n",
        static_cast<long long>(steps["trained"].get<int64_t>()),
        s["drafter_train_tokens_per_s"].get<double>(), s["seconds"]["total"].get<double>());
  } else {  // resumed at or past the last step: there is no training speed to report
    std::snprintf(line, sizeof line,
                  "drafter training: none (resumed at step %lld, the last); total %.1f s\n",
                  static_cast<long long>(steps["final"].get<int64_t>()),
                  s["seconds"]["total"].get<double>());
  }
  o << line;
  if (s.contains("device") && s["device"] != kCPU.str())
    o << "device: " << s["device"].get<std::string>() << "\n";
  if (s.contains("memory_skipped")) {
    o << "memory of one drafter training step: not measured ("
      << s["memory_skipped"].get<std::string>() << ")\n";
  } else if (s.contains("memory") && s["memory"].is_array() && s["memory"].empty()) {
    o << "memory of one drafter training step: not measured (memory.enabled is false)\n";
  } else {
    o << "memory of one drafter training step (caching allocator):\n"
      << s["memory_table"].get<std::string>();
    // The traces' reports (chunkgrad trace) name a "largest autograd holder" that counts
    // otherwise; say how this one counts so that the two are not read as a contradiction.
    o << "  (largest graph node: a node name's saved tensors once the forward is done, all its "
         "instances together; "
         "chunkgrad trace's \"largest autograd holder\" counts the allocator blocks live at the "
         "step's peak)\n";
  }
  // The traces' HTML reports (timelines by category, the holders at the peak), when traced.
  if (s.contains("memory") && s["memory"].is_array()) {
    for (const auto& m : s["memory"]) {
      if (m.contains("report") && !m["report"].get<std::string>().empty()) {
        o << "memory timeline: " << m["report"].get<std::string>() << "\n";
      }
    }
  }
  return o.str();
}

}  // namespace cg::train
