// Why this file exists: the online feature stage (issue 19): the target runs in this
// process and its features for every training sequence are computed once, in memory
// (train/drafter_data.h); this source hands the trainer the rows of one step from them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/drafter_data.h"
#include "train/feature_source.h"

namespace cg::train {

class InMemoryFeatureSource : public FeatureSource {
 public:
  // `features` are of `sequences` (row i of each tensor is sequence i), on any device.
  InMemoryFeatureSource(std::vector<DrafterSequence> sequences, TargetFeatures features);

  const std::vector<DrafterSequence>& sequences() const override { return sequences_; }
  int64_t seq_len() const override { return features_.seq_len; }
  int64_t num_feature_layers() const override { return num_layers_; }
  int64_t hidden_size() const override { return hidden_; }
  DType dtype() const override { return features_.features.dtype(); }
  bool has_last_hidden() const override { return features_.final_hidden.defined(); }
  std::string describe() const override;
  FeatureBatch fetch(const std::vector<int64_t>& ids, Device device) override;

  // All of them (tests compare the trainer's inputs against these).
  const TargetFeatures& features() const { return features_; }

 private:
  std::vector<DrafterSequence> sequences_;
  TargetFeatures features_;
  int64_t num_layers_ = 0, hidden_ = 0;
};

}  // namespace cg::train
