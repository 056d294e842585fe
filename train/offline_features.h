// Why this file exists: the offline feature source: the trainer's features read from the
// shards `chunkgrad features` wrote (train/feature_files.h, docs/feature_files.md). The
// folder is checked whole when it is opened -- index.json, every shard's size and header,
// every sample's tensors, names, dtypes and shapes, and the index against what the run
// expects (layer ids, H, the target's fingerprint, the tokenizer's hash) -- so that a
// damaged or mismatched folder is refused in one line naming the file and the field
// before the run writes anything, not hours into training.
//
// Note [Reading ahead]: the trainer calls prefetch() with the next step's samples; a
// background thread reads their bytes from the shards (pread, no tensor is made off the
// main thread) into one host buffer per batch, laid out as the padded batch [B, S, K*H],
// while the current step computes. fetch() then only copies that buffer into a tensor and
// to the device; a fetch nobody asked for reads on the calling thread. On a device with
// memory of its own the buffers are page-locked host memory from a small pool and go up
// asynchronously in the device's stream order (Note [Pinned uploads], core/backend.h): the
// copy overlaps the device's work and a buffer is reused once its upload is done. On the
// CPU the buffer is ordinary memory.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "train/feature_files.h"
#include "train/feature_source.h"

namespace cg::train {

// What the run expects of the features; an empty field is not checked.
struct FeatureExpectations {
  std::vector<int64_t> layer_ids;
  int64_t hidden_size = 0;
  std::string target_fingerprint;
  std::string tokenizer_hash;
};

// Reads and checks `dir`/index.json (what every check below starts from).
FeatureFileIndex read_feature_index(const std::string& dir);

class OfflineFeatureSource : public FeatureSource {
 public:
  // Samples [first, first + count) of the folder (count -1: to the end), renumbered from 0.
  // Throws naming the file and the field (see the file comment).
  explicit OfflineFeatureSource(const std::string& dir, const FeatureExpectations& expect = {},
                                int64_t first = 0, int64_t count = -1);
  ~OfflineFeatureSource() override;
  OfflineFeatureSource(const OfflineFeatureSource&) = delete;
  OfflineFeatureSource& operator=(const OfflineFeatureSource&) = delete;

  const std::vector<DrafterSequence>& sequences() const override { return sequences_; }
  int64_t seq_len() const override { return index_.max_seq_len; }
  int64_t num_feature_layers() const override { return index_.num_layers(); }
  int64_t hidden_size() const override { return index_.hidden_size; }
  DType dtype() const override { return index_.dtype; }
  bool has_last_hidden() const override { return true; }
  std::string describe() const override;
  FeatureBatch fetch(const std::vector<int64_t>& ids, Device device) override;
  void prefetch(const std::vector<int64_t>& ids) override;

  const FeatureFileIndex& index() const { return index_; }
  // Batches read by the background thread and taken by fetch() (tests: > 0 once the
  // trainer prefetches).
  int64_t prefetched_batches_used() const { return prefetch_hits_; }

 private:
  struct Location {  // where one tensor's bytes are
    int shard = 0;
    uint64_t offset = 0, nbytes = 0;
  };
  struct SampleFiles {
    Location hidden_states, last_hidden;
    int64_t seq_len = 0;
  };
  // Host memory for one tensor of a batch: ordinary, or a pinned buffer of the pool
  // (Note [Pinned uploads], core/backend.h).
  struct HostBuffer {
    std::vector<char> plain;
    int pinned = -1;  // index into pinned_, or -1
    char* data = nullptr;
  };
  struct HostBatch {  // Note [Reading ahead]
    std::vector<int64_t> ids;
    HostBuffer hidden_states, last_hidden;  // [B, S, K*H] and [B, S, H], zero padded
    std::string error;
    bool done = false, dropped = false;
  };
  struct PinnedBuffer {
    void* ptr = nullptr;
    size_t size = 0;
    uint64_t ticket = 0;  // the last upload from it (DeviceBackend::upload_done)
    bool in_use = false;
  };

  void read_batch(HostBatch& b);                     // any thread
  void take_buffer(size_t nbytes, HostBuffer& out);  // any thread; zeroed
  void release_locked(HostBuffer& b, uint64_t ticket);
  Tensor upload(HostBuffer& b, const Shape& shape, Device device);
  void reader_loop();
  std::string shard_path(int shard) const;

  std::string dir_;
  FeatureFileIndex index_;
  std::vector<int> fds_;  // one per shard, for pread
  std::vector<DrafterSequence> sequences_;
  std::vector<SampleFiles> samples_;

  std::mutex mutex_;
  std::condition_variable wake_, ready_;
  std::deque<std::shared_ptr<HostBatch>> queue_;  // asked for, in order
  bool stop_ = false;
  std::thread reader_;  // started by the first prefetch()
  int64_t prefetch_hits_ = 0;
  // Set by the first fetch to a device with memory of its own; the pool of its pinned
  // buffers, reused once their last upload is done (both guarded by mutex_).
  DeviceBackend* pinned_backend_ = nullptr;
  std::vector<PinnedBuffer> pinned_;
};

}  // namespace cg::train
