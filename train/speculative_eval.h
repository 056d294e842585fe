// Why this file exists: `chunkgrad eval` reports, per dataset and overall, what a drafter
// does for its target: tau (Note [tau] in speculative_decoding.h), how often each draft
// slot is accepted, target-only and speculative tokens/s and the speedup, and whether the
// output equals target-only greedy decoding token for token. evaluate_speculative
// (speculative_decoding.h) does the decoding and the comparison for one group of prompts;
// this file runs it dataset by dataset and adds the groups up.
//
//   EvalReport r = evaluate_by_dataset(lm, drafter, prompts, 16, {.max_new_tokens = 256});
//   std::cout << r.str();  r.json();
//
// Note [Slot acceptance]: slot k (1 .. block_size - 1) of a verify step is accepted when
// the first k drafted tokens all equal the target's greedy tokens, i.e. the step emitted
// at least k + 1 tokens (the bonus included). acceptance[k] = accepted steps / all verify
// steps. A step that accepts slot k accepted every slot before it, so the curve never
// rises with k; its sum over k is tau - 1. Steps cut short by max_new_tokens or an EOS
// count their missing slots as not accepted (they were not drafted), which is why a run
// whose answers are short shows lower late slots than the drafter's per-slot accuracy.
//
// Note [Eval losslessness]: each prompt ends in one of three ways. identical: speculative
// output equals target-only output token for token. near tie: the first differing token
// was a near tie of the logits (Note [Near ties]), where the verify forward (many rows at
// once) and the one-token step round differently -- in bf16 far more often than in f32;
// after it the two continue from different prefixes, so the rest is not compared. These
// are counted and reported apart, and the run is never called identical when there is
// one. mismatch: anything else, a bug; the report says NOT LOSSLESS and `chunkgrad eval`
// exits 1 after printing it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "train/eval_inputs.h"
#include "train/speculative_decoding.h"

namespace cg::train {

// Note [Slot acceptance]: from a histogram of tokens emitted per verify step (index n =
// steps that emitted n, n = 0 .. block_size), the fraction of steps that accepted slot
// k, for k = 1 .. block_size - 1 (entry k - 1). Zeros when there are no steps.
std::vector<double> slot_acceptance(const std::vector<int64_t>& histogram);

struct DatasetEvaluation {
  std::string name;
  SpeculativeReport report;
  std::vector<double> slot_acceptance;  // Note [Slot acceptance]
};

struct EvalRunOptions {
  int64_t max_new_tokens = 256;
  std::vector<int64_t> eos_ids{};
  double tie_tolerance = 1e-4;   // Note [Near ties]
  bool measure_ceiling = false;  // also time a free, always-right drafter (Note [Speedup ceiling])
  bool warmup = true;            // one untimed prompt by each decoder before the first dataset
  GenerateProgress on_progress{};  // prompts done of all prompts, over every dataset
};

struct EvalReport {
  std::vector<DatasetEvaluation> datasets;
  int64_t block_size = 0, max_new_tokens = 0, num_prompts = 0;
  int64_t new_tokens = 0, greedy_new_tokens = 0, verify_forwards = 0;
  double tau = 0;
  std::vector<int64_t> acceptance_histogram;  // summed over the datasets
  std::vector<double> slot_acceptance;        // Note [Slot acceptance], overall
  double greedy_seconds = 0, speculative_seconds = 0, drafter_seconds = 0, ceiling_seconds = 0;
  double speedup = 0, ceiling_speedup = 0;  // ceiling 0 when not measured
  double greedy_tokens_per_second = 0, speculative_tokens_per_second = 0;
  // Note [Eval losslessness]: prompts by outcome, and the first mismatch described.
  int64_t identical_prompts = 0, tie_divergences = 0, mismatched_prompts = 0;
  std::string first_mismatch;

  bool identical() const { return identical_prompts == num_prompts; }
  // No mismatch: identical, or diverged only at near ties (which is not "identical").
  bool lossless_up_to_near_ties() const { return mismatched_prompts == 0; }
  std::string outcome() const;  // one sentence on losslessness (Note [Eval losslessness])
  std::string str() const;      // the table, the per-slot acceptance, the timing, the outcome
  nlohmann::json json() const;
};

// Decodes the prompts dataset by dataset (they come grouped, read_eval_prompts), each with
// target-only greedy decoding and speculative decoding with `drafter` at `block_size`,
// and adds the groups up. A mismatch never throws: it is in the report.
EvalReport evaluate_by_dataset(const nn::Qwen3ForCausalLM& target, BlockDrafter& drafter,
                               const std::vector<EvalPrompt>& prompts, int64_t block_size,
                               const EvalRunOptions& options);

}  // namespace cg::train
