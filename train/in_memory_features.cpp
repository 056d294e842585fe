// Why this file exists: the in-memory feature source (in_memory_features.h).
#include "train/in_memory_features.h"

#include "core/factories.h"
#include "ops/index_ops.h"
#include "ops/shape_ops.h"

namespace cg::train {

InMemoryFeatureSource::InMemoryFeatureSource(std::vector<DrafterSequence> sequences,
                                             TargetFeatures features)
    : sequences_(std::move(sequences)), features_(std::move(features)) {
  const Tensor& f = features_.features;
  CG_CHECK(f.defined() && f.dim() == 3 && f.size(0) == static_cast<int64_t>(sequences_.size()) &&
               f.size(1) == features_.seq_len,
           "in-memory features: expected [", sequences_.size(), ", ", features_.seq_len,
           ", K*H] for the sequences, got ", f.defined() ? shape_str(f.shape()) : "undefined");
  const Tensor& last = features_.final_hidden;
  hidden_ = last.defined() ? last.size(2) : 0;
  num_layers_ = hidden_ > 0 ? f.size(2) / hidden_ : 1;
  if (hidden_ == 0) hidden_ = f.size(2);  // no teacher: K unknown, one slice of K*H
  CG_CHECK(!last.defined() || (last.dim() == 3 && last.size(0) == f.size(0) &&
                               last.size(1) == f.size(1) && f.size(2) % hidden_ == 0),
           "in-memory features: the final hidden states ", shape_str(last.shape()),
           " do not fit the layer features ", shape_str(f.shape()));
}

std::string InMemoryFeatureSource::describe() const {
  return "in memory (" + std::to_string(sequences_.size()) + " sequences)";
}

FeatureBatch InMemoryFeatureSource::fetch(const std::vector<int64_t>& ids, Device device) {
  const Device here = features_.features.device();
  const Tensor idx =
      from_ints(ids, {static_cast<int64_t>(ids.size())}, {.dtype = DType::i64, .device = here});
  FeatureBatch b;
  b.hidden_states = index_select(features_.features, 0, idx);
  if (features_.final_hidden.defined())
    b.last_hidden = index_select(features_.final_hidden, 0, idx);
  b.hidden_states = to_device(b.hidden_states, device);
  if (b.last_hidden.defined()) b.last_hidden = to_device(b.last_hidden, device);
  return b;
}

}  // namespace cg::train
