// Why this file exists: issue 19 asks that data loading overlap the step: the full-scale
// step fed from feature shards on disk must take the time of the same step with its
// features already on the device (within 3%). drafter_step_bench --offline-dir writes a
// small feature set of the step's shapes with the project's own writer
// (train/feature_files.h), drops it from the page cache so that the timed steps read the
// disk, and feeds each step through the loader `chunkgrad train --features` uses
// (train/offline_features.h, Note [Uploading ahead]) in the trainer's order: the next
// step's sample is prefetched, then this step's fetched. This file is that feed.
//
//   OfflineStepFeed feed(dir, 8, seq, config, dev, gen);  // writes 8 samples (~250 MB each)
//   feed.before_step(s, steps, in);                        // in.features, in.teacher_hidden
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/factories.h"
#include "nn/dflash_drafter.h"
#include "train/drafter_step.h"
#include "train/offline_features.h"

namespace cg::bench {

class OfflineStepFeed {
 public:
  // Writes `samples` samples of `seq`'s length into `parent`/drafter_step_bench_features
  // (removed first if there, and again by the destructor): every sample has `seq`'s ids
  // and mask, and random bf16 features of the drafter's K layers and hidden size.
  OfflineStepFeed(const std::string& parent, int64_t samples, const train::DrafterSequence& seq,
                  const nn::DFlashDrafterConfig& config, Device device, Generator& gen);
  ~OfflineStepFeed();
  OfflineStepFeed(const OfflineStepFeed&) = delete;
  OfflineStepFeed& operator=(const OfflineStepFeed&) = delete;

  // Step `step` of `steps` (0-based) takes sample step % samples: prefetches the next
  // step's sample (none after the last), fetches this one's into `in`.
  void before_step(int step, int steps, train::DrafterLossInputs& in);

  train::OfflineFeatureSource& source() { return *source_; }
  const std::string& folder() const { return folder_; }
  uint64_t bytes() const { return bytes_; }  // the shards, on disk
  double write_seconds() const { return write_seconds_; }

 private:
  std::string folder_;
  int64_t samples_ = 0;
  Device device_;
  uint64_t bytes_ = 0;
  double write_seconds_ = 0;
  std::unique_ptr<train::OfflineFeatureSource> source_;
};

}  // namespace cg::bench
