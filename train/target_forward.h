// Why this file exists: the target's side of the feature stage, fast: a frozen Qwen3 target
// (bf16 on the GPU, or f32 on the CPU for the goldens) runs sequences in length buckets,
// without autograd and without lm_head, and hands back each sample's K chosen layer
// outputs and its final normed hidden state, unpadded, in the storage dtype on the host.
//
//   auto buckets = cg::train::length_buckets(lengths, {.batch_tokens = 16384});
//   for (const auto& b : buckets)
//     auto feats = cg::train::bucket_features(lm, sequences, b, {1, 9, 17, 25, 33}, DType::bf16);
//
// Note [Length buckets]: the samples of a bucket are padded at the end to one length and
// run as one [n, S] batch under the causal mask. A real position never sees a padded one
// (pads come after it), so its features are those of the sample alone; the padded rows
// are computed and dropped. Sorting by length first keeps the padding small. Packing
// several documents into one row would waste nothing, but needs per-document masks in
// the attention kernels; with buckets the cuDNN causal kernel runs as it is.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/qwen3.h"
#include "train/dflash_batch.h"

namespace cg::train {

// One sample's features: [S, K*H] (the layers' outputs in `layers` order, concatenated on
// the last dim) and [S, H] (after the final norm).
struct SampleFeatures {
  Tensor hidden_states, last_hidden;
};

struct BucketOptions {
  // Padded tokens (rows x length) per forward at most; 0: one sample per forward, unpadded
  // (a sample longer than the budget always gets a forward of its own).
  int64_t batch_tokens = 0;
  // A bucket's length is rounded up to a multiple of this (fewer distinct shapes, so fewer
  // cuDNN plans to build); 1 keeps lengths exact. Ignored when batch_tokens is 0.
  int64_t round_to = 64;
};

// A group of samples (indices into the caller's list) run as one padded batch.
struct LengthBucket {
  std::vector<size_t> samples;
  int64_t length = 0;  // the padded length: the longest sample's, rounded up
};

// Buckets covering every index of `lengths` once (Note [Length buckets]): sorted by
// length (ties by index), filled greedily while rows x padded length fits batch_tokens.
std::vector<LengthBucket> length_buckets(const std::vector<int64_t>& lengths,
                                         const BucketOptions& options);

// One forward of the bucket's samples (no graph, no logits) on the target's device and in
// its dtype; returns their features in bucket order, unpadded, on the host in
// `store_dtype`. `layers` are the target's layer ids (layer l = output of decoder layer l).
std::vector<SampleFeatures> bucket_features(const nn::Qwen3ForCausalLM& lm,
                                            const std::vector<DrafterSequence>& sequences,
                                            const LengthBucket& bucket,
                                            const std::vector<int64_t>& layers, DType store_dtype);

}  // namespace cg::train
