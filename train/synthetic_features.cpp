// Why this file exists: the synthetic feature source (synthetic_features.h).
#include "train/synthetic_features.h"

#include <cmath>
#include <numeric>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "ops/elementwise.h"
#include "ops/index_ops.h"
#include "ops/shape_ops.h"

namespace cg::train {
namespace {

// One generator per (seed, sample): a sample is the same whatever else was drawn.
uint64_t sample_seed(uint64_t seed, int64_t sample) {
  return seed * 0xD1B54A32D192ED03ull + static_cast<uint64_t>(sample) * 0x9E3779B97F4A7C15ull +
         0x5157;
}

}  // namespace

SyntheticFeatureSource::SyntheticFeatureSource(const SyntheticFeatureOptions& options)
    : o_(options) {
  CG_CHECK(o_.vocab >= 2 && o_.hidden >= 1 && o_.feature_layers >= 1 && o_.seq_len >= 2 &&
               o_.num_samples >= 1 && o_.first_sample >= 0,
           "synthetic features: need vocab >= 2, hidden, feature layers and samples >= 1, "
           "seq_len >= 2; got V ",
           o_.vocab, ", H ", o_.hidden, ", K ", o_.feature_layers, ", S ", o_.seq_len, ", ",
           o_.num_samples, " samples");
  const int64_t usable = o_.vocab - (o_.mask_token_id >= 0 && o_.mask_token_id < o_.vocab ? 1 : 0);
  CG_CHECK(o_.task_vocab >= 2 && o_.task_vocab <= usable, "synthetic features: task_vocab ",
           o_.task_vocab, " must be from 2 to the vocabulary without MASK (", usable, ")");
  CG_CHECK(o_.restart_probability >= 0 && o_.restart_probability <= 1,
           "synthetic features: restart_probability must be from 0 to 1, got ",
           o_.restart_probability);
  Generator gen(o_.seed);
  // The task's tokens: distinct ids spread over the whole vocabulary, never MASK.
  std::unordered_set<int64_t> taken;
  while (static_cast<int64_t>(task_tokens_.size()) < o_.task_vocab) {
    const int64_t id = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(o_.vocab));
    if (id == o_.mask_token_id || !taken.insert(id).second) continue;
    task_tokens_.push_back(id);
  }
  // The rule: a random permutation (Fisher-Yates).
  next_.resize(static_cast<size_t>(o_.task_vocab));
  std::iota(next_.begin(), next_.end(), 0);
  for (int64_t i = o_.task_vocab - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(i + 1));
    std::swap(next_[static_cast<size_t>(i)], next_[static_cast<size_t>(j)]);
  }
  // The frozen tables and the per-token features, on the device in the compute dtype; rows
  // of norm about 1 (std 1/sqrt(H)), like a trained model's embedding scale.
  {
    NoGradGuard no_grad;
    CategoryGuard category(MemoryCategory::parameter);
    const TensorOptions opts{.dtype = o_.dtype, .device = o_.device};
    const double row_std = 1.0 / std::sqrt(static_cast<double>(o_.hidden));
    embed_ = randn({o_.vocab, o_.hidden}, opts, &gen, 0.0, row_std);
    head_ = randn({o_.vocab, o_.hidden}, opts, &gen, 0.0, row_std);
    token_features_ = randn({o_.task_vocab, o_.feature_layers * o_.hidden}, opts, &gen);
  }
  make_sequences();
}

SyntheticFeatureSource::SyntheticFeatureSource(const SyntheticFeatureSource& task,
                                               int64_t first_sample, int64_t num_samples)
    : o_(task.o_),
      task_tokens_(task.task_tokens_),
      next_(task.next_),
      embed_(task.embed_),
      head_(task.head_),
      token_features_(task.token_features_) {
  CG_CHECK(first_sample >= 0 && num_samples >= 1,
           "synthetic features: a sample range needs first >= 0 and count >= 1");
  o_.first_sample = first_sample;
  o_.num_samples = num_samples;
  make_sequences();
}

void SyntheticFeatureSource::make_sequences() {
  sequences_.assign(static_cast<size_t>(o_.num_samples), {});
  task_index_.assign(static_cast<size_t>(o_.num_samples), {});
  const uint64_t M = static_cast<uint64_t>(o_.task_vocab);
  for (int64_t i = 0; i < o_.num_samples; ++i) {
    Generator g(sample_seed(o_.seed, o_.first_sample + i));
    std::vector<int64_t>& x = task_index_[static_cast<size_t>(i)];
    x.resize(static_cast<size_t>(o_.seq_len));
    x[0] = static_cast<int64_t>(g.next_u64() % M);
    for (size_t t = 1; t < x.size(); ++t) {
      x[t] = g.uniform() < o_.restart_probability ? static_cast<int64_t>(g.next_u64() % M)
                                                  : next_[static_cast<size_t>(x[t - 1])];
    }
    DrafterSequence& s = sequences_[static_cast<size_t>(i)];
    s.ids.resize(x.size());
    for (size_t t = 0; t < x.size(); ++t) s.ids[t] = task_tokens_[static_cast<size_t>(x[t])];
    s.loss_mask.assign(x.size(), 1);
  }
}

std::string SyntheticFeatureSource::describe() const {
  return "synthetic (" + std::to_string(o_.num_samples) + " samples of " +
         std::to_string(o_.seq_len) + " tokens, V " + std::to_string(o_.vocab) + ", H " +
         std::to_string(o_.hidden) + ", K " + std::to_string(o_.feature_layers) + ", task over " +
         std::to_string(o_.task_vocab) + " tokens, seed " + std::to_string(o_.seed) + ")";
}

FeatureBatch SyntheticFeatureSource::fetch(const std::vector<int64_t>& ids, Device device) {
  NoGradGuard no_grad;
  const int64_t B = static_cast<int64_t>(ids.size()), S = o_.seq_len;
  CG_CHECK(B >= 1, "synthetic features: fetch of no samples");
  std::vector<int64_t> tokens, next_tokens;
  tokens.reserve(static_cast<size_t>(B * S));
  next_tokens.reserve(static_cast<size_t>(B * S));
  for (int64_t id : ids) {
    CG_CHECK(id >= 0 && id < o_.num_samples, "synthetic features: sample ", id,
             " is not one of the ", o_.num_samples, " samples");
    const std::vector<int64_t>& x = task_index_[static_cast<size_t>(id)];
    const std::vector<int64_t>& v = sequences_[static_cast<size_t>(id)].ids;
    tokens.insert(tokens.end(), x.begin(), x.end());
    // The teacher at t predicts x[t+1]; the last position has none and gets its own token.
    next_tokens.insert(next_tokens.end(), v.begin() + 1, v.end());
    next_tokens.push_back(v.back());
  }
  const TensorOptions ints{.dtype = DType::i64, .device = token_features_.device()};
  FeatureBatch f;
  f.hidden_states = reshape(index_select(token_features_, 0, from_ints(tokens, {B * S}, ints)),
                            {B, S, o_.feature_layers * o_.hidden});
  if (o_.last_hidden) {
    const double c = std::log(static_cast<double>(o_.vocab)) + 3.0;
    f.last_hidden = reshape(index_select(head_, 0, from_ints(next_tokens, {B * S}, ints)) * c,
                            {B, S, o_.hidden});
  }
  f.hidden_states = to_device(f.hidden_states, device);  // the tables' device: no copy
  if (f.last_hidden.defined()) f.last_hidden = to_device(f.last_hidden, device);
  return f;
}

}  // namespace cg::train
