// Why this file exists: length buckets and the bucketed no-graph target forward
// (target_forward.h).
#include "train/target_forward.h"

#include <algorithm>
#include <numeric>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/factories.h"
#include "ops/join_ops.h"
#include "ops/shape_ops.h"

namespace cg::train {

std::vector<LengthBucket> length_buckets(const std::vector<int64_t>& lengths,
                                         const BucketOptions& options) {
  CG_CHECK(options.batch_tokens >= 0 && options.round_to >= 1,
           "length_buckets: batch_tokens must be >= 0 and round_to >= 1, got ",
           options.batch_tokens, " and ", options.round_to);
  std::vector<LengthBucket> out;
  if (options.batch_tokens == 0) {  // one sample a forward, in the given order, unpadded
    for (size_t i = 0; i < lengths.size(); ++i) out.push_back({{i}, lengths[i]});
    return out;
  }
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lengths[a] < lengths[b]; });
  auto padded = [&](int64_t len) {
    return (len + options.round_to - 1) / options.round_to * options.round_to;
  };
  for (size_t i : order) {
    const int64_t len = padded(lengths[i]);
    // Sorted ascending: the new sample sets the bucket's length.
    if (!out.empty()) {
      LengthBucket& b = out.back();
      const int64_t rows = static_cast<int64_t>(b.samples.size()) + 1;
      if (rows * len <= options.batch_tokens) {
        b.samples.push_back(i);
        b.length = len;
        continue;
      }
    }
    out.push_back({{i}, len});
  }
  return out;
}

std::vector<SampleFeatures> bucket_features(const nn::Qwen3ForCausalLM& lm,
                                            const std::vector<DrafterSequence>& sequences,
                                            const LengthBucket& bucket,
                                            const std::vector<int64_t>& layers, DType store_dtype) {
  NoGradGuard no_grad;
  CG_CHECK(!bucket.samples.empty() && !layers.empty(),
           "bucket_features: a bucket needs samples and at least one layer");
  const int64_t n = static_cast<int64_t>(bucket.samples.size()), S = bucket.length;
  // Pads after each sample (Note [Length buckets]); id 0 is a token of every vocabulary.
  std::vector<int64_t> ids(static_cast<size_t>(n * S), 0);
  for (int64_t r = 0; r < n; ++r) {
    const std::vector<int64_t>& s = sequences.at(bucket.samples[static_cast<size_t>(r)]).ids;
    CG_CHECK(static_cast<int64_t>(s.size()) <= S, "bucket_features: sample ",
             bucket.samples[static_cast<size_t>(r)], " has ", s.size(),
             " tokens, more than its bucket's length ", S);
    std::copy(s.begin(), s.end(), ids.begin() + r * S);
  }
  const Device device = lm.model->embed_tokens->weight.device();
  nn::DecoderOutput out =
      lm.forward(from_ints(ids, {n, S}, {.dtype = DType::i64, .device = device}),
                 {.capture_layers = layers, .logits = false});
  // Converted on the device, then one copy each to the host.
  const Tensor hidden = to_device(to_dtype(cat(out.layer_hidden, 2), store_dtype), kCPU);
  out.layer_hidden.clear();  // the device copies go now
  const Tensor last = to_device(to_dtype(out.hidden, store_dtype), kCPU);
  std::vector<SampleFeatures> result;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t len =
        static_cast<int64_t>(sequences[bucket.samples[static_cast<size_t>(r)]].ids.size());
    result.push_back({narrow(squeeze(narrow(hidden, 0, r, 1), 0), 0, 0, len),
                      narrow(squeeze(narrow(last, 0, r, 1), 0), 0, 0, len)});
  }
  return result;
}

}  // namespace cg::train
