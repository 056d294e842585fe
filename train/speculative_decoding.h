// Why this file exists: the measurement the whole project is for -- does the drafter make
// decoding faster without changing a single output token? DFlash-style speculative
// decoding: the drafter (train/block_drafter.h) proposes block_size - 1 tokens after the
// anchor, the target verifies [anchor, draft...] in ONE cached forward, and greedy
// acceptance keeps the longest prefix where the draft equals the target's own argmax,
// plus the target's next token (the bonus). evaluate_speculative() runs it and
// target-only greedy decoding (train/generate.h, also with a KV cache) on the same
// prompts, times both, and checks that the outputs are equal token for token.
//
//   auto report = cg::train::evaluate_speculative(target, drafter, prompts,
//                                                 {.block_size = 8, .max_new_tokens = 128});
//   report.tau; report.speedup; report.lossless;  std::cout << report.str();
//
// Note [Speculative step]: with the anchor (the last emitted token, not yet in the target
// cache) at position a and the drafter's guesses d_1..d_{L-1}:
//   logits = target.forward_cached([anchor, d_1, ..., d_{L-1}])  // positions a .. a+L-1
//   t_i = argmax(logits[i])                                      // greedy_tokens
//   k = the largest k with d_j == t_{j-1} for all j <= k         // accepted drafts
//   emitted = t_0 .. t_k                                         // k accepted + the bonus
// Positions a .. a+k now hold tokens the greedy decoder would also have fed (anchor and
// the accepted drafts), so the target cache is truncated to a+k+1 and those k+1
// positions' features go to the drafter; t_k becomes the next anchor at a+k+1. The block
// is cut to L = min(block_size, tokens still allowed) so max_new_tokens is never passed;
// emitted tokens stop after an EOS exactly as greedy decoding stops. By induction every
// emitted token is the greedy token of its prefix -- up to floating point: the verify
// forward multiplies L rows at once where greedy decoding multiplies one, so logits agree
// to fp32 rounding, not bit for bit (Note [Near ties]).
//
// Note [Near ties]: when two logits are within rounding of each other, the two decoders
// may pick different tokens and then (correctly) continue differently. evaluate_speculative
// tells this apart from a bug: at the first differing token it recomputes the prefix's
// logits and calls the divergence a near tie only when both picks are within
// tie_tolerance * (1 + |max logit|) of the maximum. Anything else is a mismatch: flagged,
// and thrown unless throw_on_mismatch is false.
//
// Note [Verify cost]: speculative decoding pays off when a verify forward of B tokens
// costs much less than B one-token steps. On the CPU a one-token step multiplies each
// weight matrix by one vector (a GEMV: the weights are streamed once), while two or more
// tokens take the GEMM path, which packs every weight matrix on every call. Measured
// with Eigen's products (before issue 24 moved them to OpenBLAS, which does the same: one
// row is its GEMV) on the toy target (hidden 128, 6 layers, vocab 260; one thread of the
// shared 2-core machine, 89 cached positions): a cached forward of 1 token 380 us, 2 tokens 695 us,
// 4: 764 us, 8: 1035 us, 16: 1616 us. So with a free, perfect drafter the speedup is at
// most ~1.0x at B = 2, 1.8x at 4, 2.7x at 8, 3.7x at 16 (ceiling_speedup measures it on
// the run's own prompts); a real drafter's tau and cost come off that.
//
// Note [tau]: tau = tokens emitted by verify forwards / verify forwards (bonus included;
// the prompt's forward, which yields the first new token in both decoders, is not a
// verify forward). A drafter that is always wrong gives tau = 1; an oracle gives
// block_size until max_new_tokens or EOS cuts a block short.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nn/qwen3.h"
#include "train/block_drafter.h"
#include "train/generate.h"

namespace cg::train {

struct SpeculativeOptions {
  int64_t block_size = 8;          // >= 2: the anchor and block_size - 1 drafted tokens
  int64_t max_new_tokens = 64;     // >= 0
  std::vector<int64_t> eos_ids{};  // stop after any of these (kept); empty: never early
};

struct SpeculativeGeneration {
  std::vector<int64_t> tokens;  // prompt + new tokens
  int64_t prompt_length = 0;
  bool stopped_at_eos = false;
  int64_t target_forwards = 0;              // the prompt's forward + verify forwards
  std::vector<int64_t> emitted_per_verify;  // tokens each verify forward emitted (1 .. B)
  double drafter_seconds = 0;               // in propose and append_context

  std::vector<int64_t> new_tokens() const { return {tokens.begin() + prompt_length, tokens.end()}; }
};

// One prompt (Note [Speculative step]). The cache, if given, is reused (cleared first;
// it must hold prompt + max_new_tokens + block_size positions); nullptr makes one.
// Throws when the drafter breaks its protocol (a draft of the wrong length, a token
// outside the vocabulary).
SpeculativeGeneration speculative_generate(const nn::Qwen3ForCausalLM& target,
                                           BlockDrafter& drafter,
                                           const std::vector<int64_t>& prompt,
                                           const SpeculativeOptions& options,
                                           nn::KVCache* cache = nullptr);

// Note [Timing noise]: wall-clock speedups on a shared machine move with its load (the
// same model once gave 2.93x, above its own 2.91x ceiling, then 1.80x). So the decoders
// are timed the same way: every repeat is one pass over all prompts in which each prompt
// is decoded by greedy, speculative and the ceiling's replaying decoder back to back (the
// order rotating), each repeat gives its own speedups, and the report takes their median
// and keeps the spread (min, median, max over the repeats). judge_speedup() calls a
// measurement noisy when the speedup came out above its own ceiling -- impossible for any
// drafter, so the number is not printed as a result -- or when the repeats' speedups (or
// ceilings) lie more than kNoisySpread of the median apart.
struct TimingSpread {
  double min = 0, median = 0, max = 0;
};
// min, median (the mean of the middle two for an even count) and max; zeros when empty.
TimingSpread spread_of(std::vector<double> values);

constexpr double kNoisySpread = 0.15;

struct SpeedupVerdict {
  bool noisy = false;
  bool above_ceiling = false;  // the speedup's median above the ceiling's: not a result
  std::string note;            // one sentence on the spread, and what to do when noisy
};
// ceiling: zeros when not measured. repeats: how many each spread has.
SpeedupVerdict judge_speedup(const TimingSpread& speedup, const TimingSpread& ceiling,
                             int64_t repeats);

struct EvaluateOptions {
  int64_t block_size = 8;
  int64_t max_new_tokens = 64;
  std::vector<int64_t> eos_ids{};
  bool warmup = true;  // one untimed run of the first prompt by each decoder
  // Passes over all prompts, each decoder timed in each (Note [Timing noise]); the
  // speedups are the median over the passes, with their spread.
  int64_t repeats = 1;
  bool throw_on_mismatch = true;  // a divergence that is not a near tie throws
  double tie_tolerance = 1e-4;    // Note [Near ties]
  // Also time speculative decoding with a free, perfect drafter that replays the greedy
  // output (Note [Speedup ceiling]).
  bool measure_ceiling = true;
  // Told after each prompt of each repeat (total: repeats x prompts), with the tokens the
  // decoders emitted for it: for a progress bar (train/progress.h).
  GenerateProgress on_progress{};
};

struct SpeculativeReport {
  int64_t block_size = 0, max_new_tokens = 0, num_prompts = 0;
  int64_t new_tokens = 0;         // emitted by speculative decoding, all prompts
  int64_t greedy_new_tokens = 0;  // emitted by target-only greedy decoding
  int64_t verify_forwards = 0;    // target forwards of speculative decoding, prompts excluded
  int64_t greedy_forwards = 0;    // target forwards of greedy decoding, prompts included
  double tau = 0;                 // Note [tau]
  // histogram[n] = verify forwards that emitted n tokens, n = 0 .. block_size (0 unused).
  std::vector<int64_t> acceptance_histogram;
  // Seconds for all prompts: the median over the repeats (Note [Timing noise]).
  double greedy_seconds = 0, speculative_seconds = 0, drafter_seconds = 0;
  int64_t repeats = 0;
  double speedup = 0;           // the median of the repeats' greedy / speculative times
  TimingSpread speedup_spread;  // over the repeats
  bool timing_noisy = false;    // judge_speedup's verdict, and its sentence
  std::string timing_note;
  double greedy_tokens_per_second = 0, speculative_tokens_per_second = 0;
  // Note [Speedup ceiling]: the same prompts decoded with a drafter that costs nothing and
  // is always right (it replays the greedy output), so tau is block_size up to cuts. What
  // is left between speedup and ceiling_speedup is the drafter's accuracy and cost; what
  // separates ceiling_speedup from block_size is the verify forward costing more than a
  // one-token step. 0 when not measured.
  double ceiling_tau = 0, ceiling_seconds = 0, ceiling_speedup = 0;
  TimingSpread ceiling_spread;
  bool identical = false;          // every prompt's output equal token for token
  bool lossless = false;           // identical, or diverged only at near ties (Note [Near ties])
  int64_t tie_divergences = 0;     // prompts that diverged at a near tie
  int64_t mismatched_prompts = 0;  // prompts that diverged otherwise (not lossless)
  std::string mismatch;            // the first real mismatch, described; empty when none

  std::string str() const;  // a few readable lines
  nlohmann::json json() const;
};

// Each prompt is decoded by target-only greedy decoding (generate, no features) and by
// speculative decoding (drafter time included), and by the ceiling's replaying decoder,
// each timed, back to back prompt by prompt in every repeat (Note [Timing noise]). Then
// the comparison.
// Both decoders use a KV cache sized once for the longest prompt.
SpeculativeReport evaluate_speculative(const nn::Qwen3ForCausalLM& target, BlockDrafter& drafter,
                                       const std::vector<std::vector<int64_t>>& prompts,
                                       const EvaluateOptions& options);

}  // namespace cg::train
