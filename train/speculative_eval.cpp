// Why this file exists: speculative decoding evaluated dataset by dataset, and the report
// of `chunkgrad eval` (speculative_eval.h).
#include "train/speculative_eval.h"

#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace cg::train {

std::vector<double> slot_acceptance(const std::vector<int64_t>& histogram) {
  if (histogram.size() < 2) return {};
  const size_t slots = histogram.size() - 2;  // block_size - 1
  int64_t steps = 0;
  for (int64_t n : histogram) steps += n;
  std::vector<double> out(slots, 0.0);
  if (steps == 0) return out;
  // Slot k was accepted by the steps that emitted at least k + 1 tokens.
  int64_t at_least = 0;
  for (size_t k = slots; k >= 1; --k) {
    at_least += histogram[k + 1];
    out[k - 1] = static_cast<double>(at_least) / static_cast<double>(steps);
  }
  return out;
}

EvalReport evaluate_by_dataset(const nn::Qwen3ForCausalLM& target, BlockDrafter& drafter,
                               const std::vector<EvalPrompt>& prompts, int64_t block_size,
                               const EvalRunOptions& options) {
  CG_CHECK(!prompts.empty(), "eval: no prompts to decode");
  EvalReport r;
  r.block_size = block_size;
  r.max_new_tokens = options.max_new_tokens;
  r.num_prompts = static_cast<int64_t>(prompts.size());
  r.acceptance_histogram.assign(static_cast<size_t>(block_size + 1), 0);
  int64_t done = 0;
  for (size_t begin = 0; begin < prompts.size();) {
    size_t end = begin;
    std::vector<std::vector<int64_t>> group;
    while (end < prompts.size() && prompts[end].dataset == prompts[begin].dataset)
      group.push_back(prompts[end++].ids);
    const int64_t before = done;
    EvaluateOptions eo{.block_size = block_size,
                       .max_new_tokens = options.max_new_tokens,
                       .eos_ids = options.eos_ids,
                       .warmup = options.warmup && begin == 0,
                       .repeats = 1,
                       .throw_on_mismatch = false,
                       .tie_tolerance = options.tie_tolerance,
                       .measure_ceiling = options.measure_ceiling};
    if (options.on_progress) {
      eo.on_progress = [&, before](int64_t i, int64_t, int64_t tokens) {
        done = before + i;
        options.on_progress(done, r.num_prompts, tokens);
      };
    }
    DatasetEvaluation d{
        prompts[begin].dataset, evaluate_speculative(target, drafter, group, eo), {}};
    done = before + static_cast<int64_t>(group.size());
    const SpeculativeReport& s = d.report;
    d.slot_acceptance = slot_acceptance(s.acceptance_histogram);
    r.new_tokens += s.new_tokens;
    r.greedy_new_tokens += s.greedy_new_tokens;
    r.verify_forwards += s.verify_forwards;
    for (size_t n = 0; n < r.acceptance_histogram.size(); ++n)
      r.acceptance_histogram[n] += s.acceptance_histogram[n];
    r.greedy_seconds += s.greedy_seconds;
    r.speculative_seconds += s.speculative_seconds;
    r.drafter_seconds += s.drafter_seconds;
    r.ceiling_seconds += s.ceiling_seconds;
    r.tie_divergences += s.tie_divergences;
    r.mismatched_prompts += s.mismatched_prompts;
    r.identical_prompts += s.num_prompts - s.tie_divergences - s.mismatched_prompts;
    if (r.first_mismatch.empty() && !s.mismatch.empty())
      r.first_mismatch = "dataset " + d.name + ", " + s.mismatch;
    r.datasets.push_back(std::move(d));
    begin = end;
  }
  int64_t emitted = 0;
  for (size_t n = 0; n < r.acceptance_histogram.size(); ++n)
    emitted += static_cast<int64_t>(n) * r.acceptance_histogram[n];
  r.tau = r.verify_forwards > 0 ? static_cast<double>(emitted) / r.verify_forwards : 0.0;
  r.slot_acceptance = slot_acceptance(r.acceptance_histogram);
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  r.speedup = ratio(r.greedy_seconds, r.speculative_seconds);
  r.ceiling_speedup = ratio(r.greedy_seconds, r.ceiling_seconds);
  r.greedy_tokens_per_second = ratio(static_cast<double>(r.greedy_new_tokens), r.greedy_seconds);
  r.speculative_tokens_per_second = ratio(static_cast<double>(r.new_tokens), r.speculative_seconds);
  return r;
}

namespace {

// "identical", "2 near ties", "3 MISMATCHED" for a table cell (Note [Eval losslessness]).
std::string outcome_cell(int64_t ties, int64_t mismatched) {
  if (mismatched > 0) return std::to_string(mismatched) + " MISMATCHED";
  if (ties > 0) return std::to_string(ties) + (ties == 1 ? " near tie" : " near ties");
  return "identical";
}

}  // namespace

std::string EvalReport::outcome() const {
  std::ostringstream s;
  if (mismatched_prompts > 0) {
    s << "NOT LOSSLESS: " << mismatched_prompts << " of " << num_prompts
      << " prompt(s) differ from target-only decoding where the logits were not a near tie ("
      << identical_prompts << " equal, " << tie_divergences
      << " diverged at a near tie); first: " << first_mismatch;
  } else if (tie_divergences > 0) {
    s << identical_prompts << " of " << num_prompts
      << " prompts equal target-only decoding token for token; " << tie_divergences
      << " diverged at a near tie of the logits (the verify forward and the one-token step "
         "round differently there; after it the outputs differ and are not compared); no "
         "other difference";
  } else {
    s << "all " << num_prompts << " prompts equal target-only decoding token for token";
  }
  return s.str();
}

std::string EvalReport::str() const {
  std::ostringstream s;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "eval: %zu dataset(s), %lld prompts, block_size %lld, max_new_tokens %lld\n",
                datasets.size(), static_cast<long long>(num_prompts),
                static_cast<long long>(block_size), static_cast<long long>(max_new_tokens));
  s << buf;
  std::snprintf(buf, sizeof buf, "  %-20s %7s %6s %7s %12s %12s %8s  %s\n", "dataset", "prompts",
                "tau", "verify", "target tok/s", "spec tok/s", "speedup", "outputs");
  s << buf;
  auto row = [&](const std::string& name, int64_t prompts, double t, int64_t verify, double g,
                 double sp, double speed, const std::string& outputs) {
    std::snprintf(buf, sizeof buf, "  %-20s %7lld %6.3f %7lld %12.1f %12.1f %7.2fx  %s\n",
                  name.c_str(), static_cast<long long>(prompts), t, static_cast<long long>(verify),
                  g, sp, speed, outputs.c_str());
    s << buf;
  };
  for (const DatasetEvaluation& d : datasets) {
    const SpeculativeReport& r = d.report;
    row(d.name, r.num_prompts, r.tau, r.verify_forwards, r.greedy_tokens_per_second,
        r.speculative_tokens_per_second, r.speedup,
        outcome_cell(r.tie_divergences, r.mismatched_prompts));
  }
  row("all", num_prompts, tau, verify_forwards, greedy_tokens_per_second,
      speculative_tokens_per_second, speedup, outcome_cell(tie_divergences, mismatched_prompts));
  s << "  per-slot acceptance (fraction of verify steps that accepted draft slot k):";
  for (size_t k = 0; k < slot_acceptance.size(); ++k) {
    std::snprintf(buf, sizeof buf, "%s k%zu %.3f", k % 8 == 0 ? "\n   " : "", k + 1,
                  slot_acceptance[k]);
    s << buf;
  }
  std::snprintf(buf, sizeof buf,
                "\n  target-only %lld tokens in %.3f s (%.1f tokens/s); speculative %lld tokens "
                "in %.3f s (%.1f tokens/s, drafter %.3f s); speedup %.2fx\n",
                static_cast<long long>(greedy_new_tokens), greedy_seconds, greedy_tokens_per_second,
                static_cast<long long>(new_tokens), speculative_seconds,
                speculative_tokens_per_second, drafter_seconds, speedup);
  s << buf;
  if (ceiling_seconds > 0) {
    std::snprintf(buf, sizeof buf,
                  "  ceiling (a free drafter that is always right): speedup %.2fx\n",
                  ceiling_speedup);
    s << buf;
  }
  s << "  outputs: " << outcome() << "\n";
  return s.str();
}

nlohmann::json EvalReport::json() const {
  nlohmann::json per = nlohmann::json::array();
  for (const DatasetEvaluation& d : datasets) {
    nlohmann::json j = d.report.json();
    j["dataset"] = d.name;
    // Note [Eval losslessness]: "lossless" would read as a claim when near ties diverged.
    j.erase("lossless");
    j["lossless_up_to_near_ties"] = d.report.mismatched_prompts == 0;
    j["slot_acceptance"] = d.slot_acceptance;
    per.push_back(std::move(j));
  }
  return {{"block_size", block_size},
          {"max_new_tokens", max_new_tokens},
          {"num_prompts", num_prompts},
          {"tau", tau},
          {"acceptance_histogram", acceptance_histogram},
          {"slot_acceptance", slot_acceptance},
          {"verify_forwards", verify_forwards},
          {"new_tokens", new_tokens},
          {"greedy_new_tokens", greedy_new_tokens},
          {"greedy_seconds", greedy_seconds},
          {"speculative_seconds", speculative_seconds},
          {"drafter_seconds", drafter_seconds},
          {"greedy_tokens_per_second", greedy_tokens_per_second},
          {"speculative_tokens_per_second", speculative_tokens_per_second},
          {"speedup", speedup},
          {"ceiling_speedup", ceiling_speedup},
          {"identical", identical()},
          {"lossless_up_to_near_ties", lossless_up_to_near_ties()},
          {"identical_prompts", identical_prompts},
          {"tie_divergences", tie_divergences},
          {"mismatched_prompts", mismatched_prompts},
          {"first_mismatch", first_mismatch},
          {"outcome", outcome()},
          {"datasets", per}};
}

}  // namespace cg::train
