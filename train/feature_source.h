// Why this file exists: the drafter learns from the target's hidden states, and where they
// come from is a choice of the run (issue 19's feature stage): computed once in memory from
// the toy target (online), read from feature shards on disk (offline, `chunkgrad features`),
// or generated from a seed for benchmarks (synthetic). The trainer sees only this
// interface: the token ids and loss masks of every sample (small, on the host, so that
// anchors can be sampled), and the features of the samples one step asks for, on the
// compute device.
//
//   FeatureSource& source = ...;
//   source.prefetch(next_step_ids);               // a background reader may start now
//   FeatureBatch f = source.fetch(ids, device);   // [B, S, K*H] and [B, S, H]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "train/dflash_batch.h"

namespace cg::train {

// The features of B samples, padded to the source's seq_len.
struct FeatureBatch {
  Tensor hidden_states;  // [B, S, K*H]: the K target layers in config order, concatenated
  Tensor
      last_hidden;  // [B, S, H] after the target's final norm; undefined unless has_last_hidden()
};

class FeatureSource {
 public:
  virtual ~FeatureSource() = default;

  // Every sample's token ids and loss mask (host memory; seq_len entries or fewer).
  virtual const std::vector<DrafterSequence>& sequences() const = 0;
  virtual int64_t seq_len() const = 0;             // S: every fetched batch is padded to it
  virtual int64_t num_feature_layers() const = 0;  // K
  virtual int64_t hidden_size() const = 0;         // H
  virtual DType dtype() const = 0;                 // of the fetched tensors
  virtual bool has_last_hidden() const = 0;        // a teacher for KL-type losses
  // A line for logs: "in memory (256 samples)", "offline /data/feats (12 shards)", ...
  virtual std::string describe() const = 0;

  // The features of samples `ids` (indices into sequences()), on `device`. Throws naming the
  // sample, the file and the field when the data is damaged or does not match.
  virtual FeatureBatch fetch(const std::vector<int64_t>& ids, Device device) = 0;
  // A hint: the next fetch() will ask for these ids. A source that reads from disk starts
  // reading them in the background; the default does nothing.
  virtual void prefetch(const std::vector<int64_t>& ids) { (void)ids; }
};

}  // namespace cg::train
