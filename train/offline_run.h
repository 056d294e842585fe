// Why this file exists: a run from offline features (features.source "offline",
// `chunkgrad train --features DIR`) skips the target's training and the data generation:
// the drafter trains from the shards, with the frozen embedding and lm_head of the target
// the features were written from. Everything that can refuse such a run -- the folder, its
// shards, the target it names, the layer ids, H, the fingerprints -- is checked here,
// reading only, so that the pipeline calls it before any stage writes to the run
// directory.
//
// Note [Offline runs]: the last eval.accuracy_sequences samples (at most a quarter of the
// set) are held out of training for the per-slot accuracy (so a resume may not change that
// field: Note [Held-out samples on resume], drafter_checkpoints.cpp); speculative decoding
// is skipped (it needs the target to decode prompts, which a feature set does not have),
// and the summary says so.
#pragma once

#include <memory>
#include <string>

#include "train/feature_target.h"
#include "train/offline_features.h"
#include "train/train_config.h"

namespace cg::train {

struct OfflineRun {
  FeatureTarget target;
  std::shared_ptr<OfflineFeatureSource> train, held;  // held: null when the set is too small
  std::string data_fingerprint;                       // JSON text, saved with checkpoints
};

OfflineRun open_offline_run(const TrainConfig& config, Device device);

}  // namespace cg::train
