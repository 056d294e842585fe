// Why this file exists: the CI-sized `chunkgrad train` config (a run of a few hundred
// milliseconds that still learns) is shared by the CPU pipeline tests
// (dflash_train_test.cpp) and their GPU twins (cuda_train_test.cpp); and a summary with
// every field summary_text reads, for the tests of what it prints.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/factories.h"
#include "train/dflash_batch.h"
#include "train/train_config.h"

namespace cg::testing_train {

// A summary (train/pipeline.h) as small as summary_text takes: lossless with 2 prompts
// tied, speedup 1.5x under a 3.0x ceiling, one repeat.
inline nlohmann::json summary_example() {
  return {{"eval_block_size", 4},
          {"tau", 2.0},
          {"speedup", 1.5},
          {"lossless", true},
          {"identical", false},
          {"tie_divergences", 2},
          {"target_tokens_per_s", 1.0},
          {"speculative_tokens_per_s", 1.5},
          {"ceiling_speedup", 3.0},
          {"per_slot_accuracy", {1.0, 0.5}},
          {"expected_acceptance_length", 1.5},
          {"measured_acceptance_length", 1.5},
          {"drafter_steps", {{"trained", 2}, {"final", 2}, {"resumed_at", 0}}},
          {"drafter_train_tokens_per_s", 10.0},
          {"seconds", {{"total", 1.0}}},
          {"memory_table", ""}};
}

inline train::TrainConfig ci_train_config(const std::string& run_dir,
                                          const std::string& device = "cpu") {
  train::TrainConfig c;
  c.run_dir = run_dir;
  c.device = device;
  c.progress = false;
  c.corpus.lines = 400;
  auto& t = c.target;
  t.hidden_size = 32;
  t.num_layers = 2;
  t.num_heads = 2;
  t.num_kv_heads = 1;
  t.head_dim = 16;
  t.intermediate_size = 64;
  t.seq_len = 48;
  t.optim.steps = 80;
  t.optim.batch_size = 4;
  t.optim.lr = 1e-2;
  c.data.num_sequences = 12;
  c.data.max_new_tokens = 24;
  auto& d = c.drafter;
  d.num_layers = 1;
  d.intermediate_size = 64;
  d.num_target_features = 1;
  d.block_size = 4;
  d.max_anchors = 8;
  d.optim.steps = 80;
  d.optim.batch_size = 4;
  d.optim.lr = 1e-2;
  d.checkpoint_every = 10;
  c.eval.prompts = 3;
  c.eval.max_new_tokens = 24;
  c.eval.accuracy_sequences = 4;
  c.eval.block_size = 0;  // the drafter's
  c.eval.timing_repeats = 1;
  c.memory.enabled = false;
  return c;
}

// `len` random ids below 38 (a vocabulary of 40 with room for MASK); the first `prompt`
// are the prompt (loss mask 0).
inline train::DrafterSequence make_sequence(int64_t len, int64_t prompt, uint64_t seed) {
  Generator g(seed);
  train::DrafterSequence s;
  for (int64_t t = 0; t < len; ++t) {
    s.ids.push_back(static_cast<int64_t>(g.next_u64() % 38));
    s.loss_mask.push_back(t >= prompt ? 1 : 0);
  }
  return s;
}

}  // namespace cg::testing_train
