// Why this file exists: training a drafter for a real target without writing features to
// disk first (issue 20 item 4, "online features"): the Hugging Face Qwen3 target runs in
// the training process, frozen and without autograd, and each step's features are computed
// from that step's samples on the compute device. The trainer sees a FeatureSource
// (train/feature_source.h) like the offline one; `chunkgrad train --target DIR --data FILE`
// (features.source "target") selects it.
//
// Note [Target features per step]: fetch(ids) runs one target forward over the step's B
// samples, padded to the longest of them (causal attention: a padded position changes no
// earlier one), capturing the drafter's K layers and the final normed hidden state, then
// pads the result with zeros to seq_len() -- the same [B, S, K*H] and [B, S, H] an offline
// folder hands out, zeros where a sample has no tokens. The cost per step is one target
// forward of B x (longest sample) tokens; no feature is kept between steps. Nothing is read
// ahead: the forward runs on the compute stream that the drafter step uses next.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/chat_data.h"
#include "train/feature_source.h"
#include "train/feature_target.h"
#include "train/train_config.h"

namespace cg::train {

class TargetFeatureSource : public FeatureSource {
 public:
  // `lm` must outlive the source; its device is where features are computed.
  TargetFeatureSource(const nn::Qwen3ForCausalLM& lm, std::vector<DrafterSequence> sequences,
                      std::vector<int64_t> layers, std::string name);

  const std::vector<DrafterSequence>& sequences() const override { return sequences_; }
  int64_t seq_len() const override { return seq_len_; }
  int64_t num_feature_layers() const override { return static_cast<int64_t>(layers_.size()); }
  int64_t hidden_size() const override;
  DType dtype() const override;
  bool has_last_hidden() const override { return true; }
  std::string describe() const override;
  FeatureBatch fetch(const std::vector<int64_t>& ids, Device device) override;

 private:
  const nn::Qwen3ForCausalLM& lm_;
  std::vector<DrafterSequence> sequences_;
  std::vector<int64_t> layers_;
  std::string name_;
  int64_t seq_len_ = 0;
};

// A run with features.source "target": the target folder loaded on `device`, the samples
// of features.data read and checked against its vocabulary, the last
// eval.accuracy_sequences samples (at most a quarter) held out, as an offline run holds
// them out (Note [Offline runs], offline_run.h). Reads only; throws naming the file and
// the field.
struct TargetRun {
  FeatureTarget target;
  std::shared_ptr<TargetFeatureSource> train, held;  // held: null when the set is too small
  std::string data_fingerprint;                      // JSON text, saved with checkpoints
};
TargetRun open_target_run(const TrainConfig& config, Device device,
                          const ChatDataOptions& data_options = {});

}  // namespace cg::train
