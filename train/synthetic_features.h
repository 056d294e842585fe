// Why this file exists: a full-scale drafter step can be measured before any 27B target
// is at hand (issue 19, `features.source` "synthetic"): seeded random features of the
// real shapes, a seeded random frozen embedding and lm_head [V, H] made on the device, and
// -- so that a benchmark also shows the step is right -- a task the drafter can learn.
//
// Note [The synthetic task]: each sample is a token sequence over a small sub-vocabulary
// of `task_vocab` ids (drawn from [0, V) without the MASK id) that follows a fixed rule:
// x[t+1] = next(x[t]) for a seeded random permutation `next`, except that with
// probability `restart_probability` a token is drawn afresh. So slot k of a block at
// anchor a has label next^k(x[a]) unless a restart came in between: a function of the
// anchor token, which the drafter sees through the frozen embedding, that it must learn.
// Its loss must fall if its step is right; a wrong mask, label shift or gradient leaves
// it flat.
//   hidden_states[t] = F[x[t]]           F [task_vocab, K*H], seeded, on the device: a
//                                        fixed random projection of the token at t (the
//                                        context the drafter fuses)
//   last_hidden[t]   = c * lm_head[x[t+1]]  (rows of lm_head have norm about 1), so the
//                                        teacher's logits lm_head(last_hidden[t]) put most
//                                        of their mass (about e^3 / (e^3 + 1) at
//                                        c = ln V + 3) on the true next token
// Sequences come from (seed, sample id) on the host (ids and loss masks: all 1); the
// features are gathered on the device per fetch: no disk, two gathers per step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "train/feature_source.h"

namespace cg::train {

struct SyntheticFeatureOptions {
  int64_t vocab = 248320;      // V of the frozen embedding and lm_head
  int64_t hidden = 5120;       // H
  int64_t feature_layers = 5;  // K
  int64_t seq_len = 4096;      // S
  int64_t num_samples = 64;    // samples 0 .. num_samples - 1
  int64_t first_sample = 0;    // sample ids start here (another range = held-out samples)
  int64_t task_vocab = 64;     // Note [The synthetic task]
  double restart_probability = 0.05;
  int64_t mask_token_id = -1;  // excluded from the task's tokens (-1: none)
  uint64_t seed = 1;
  DType dtype = DType::bf16;
  Device device = kCPU;
  bool last_hidden = true;  // make the teacher (KL-type losses)
};

class SyntheticFeatureSource : public FeatureSource {
 public:
  explicit SyntheticFeatureSource(const SyntheticFeatureOptions& options);
  // Another range of samples of the same task and tables (held-out evaluation).
  SyntheticFeatureSource(const SyntheticFeatureSource& task, int64_t first_sample,
                         int64_t num_samples);

  const std::vector<DrafterSequence>& sequences() const override { return sequences_; }
  int64_t seq_len() const override { return o_.seq_len; }
  int64_t num_feature_layers() const override { return o_.feature_layers; }
  int64_t hidden_size() const override { return o_.hidden; }
  DType dtype() const override { return o_.dtype; }
  bool has_last_hidden() const override { return o_.last_hidden; }
  std::string describe() const override;
  FeatureBatch fetch(const std::vector<int64_t>& ids, Device device) override;

  // The frozen tables [V, H] the drafter shares (dtype, on the device, parameter memory).
  const Tensor& embed_weight() const { return embed_; }
  const Tensor& head_weight() const { return head_; }
  const SyntheticFeatureOptions& options() const { return o_; }

 private:
  void make_sequences();
  SyntheticFeatureOptions o_;
  std::vector<int64_t> task_tokens_;      // [task_vocab] vocabulary ids
  std::vector<int64_t> next_;             // [task_vocab] the rule, as task indices
  Tensor embed_, head_, token_features_;  // [V, H], [V, H], [task_vocab, K*H]
  std::vector<DrafterSequence> sequences_;
  std::vector<std::vector<int64_t>> task_index_;  // per sample [S]: x[t] as a task index
};

}  // namespace cg::train
