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
// while the current step computes. fetch() then only hands over what was read; a fetch
// nobody asked for reads on the calling thread. On the CPU the buffer is ordinary memory,
// copied into a tensor.
//
// Note [Uploading ahead]: on a device with memory of its own (once a fetch has named it)
// the buffers are page-locked host memory from a small pool, and the batch goes up while
// the current step computes, not between steps (Note [Pinned uploads], core/backend.h):
//   prefetch() (main thread)  makes the batch's device tensors and a ticket for the compute
//                             stream's work so far (the tensors' blocks may have been in
//                             use until then);
//   the reader                reads into a pinned buffer, then queues the upload on the
//                             device's upload stream after that ticket;
//   fetch()                   makes the compute stream wait for the upload (the host does
//                             not) and returns the tensors.
// Invariants: a pinned buffer is written again only once upload_done() says its last
// upload finished (so no step sees a half-rewritten buffer); a device tensor that an
// upload writes is freed or read only after wait_for() on that upload; batches are handed
// out in the order they were asked for, skipped ones dropped (their uploads waited for).
// Before the first fetch the device is unknown: that batch goes the CPU way, then up.
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
#include "core/tensor.h"
#include "train/feature_files.h"
#include "train/feature_source.h"

namespace cg::train {

// What the run expects of the features; an empty field is not checked.
struct FeatureExpectations {
  std::vector<int64_t> layer_ids;
  int64_t hidden_size = 0;
  int64_t vocab_size = 0;  // > 0: every input id must be below it (the target's vocabulary)
  // >= 0: no input id may be it (the drafter's MASK, which block slots read in place of the
  // token: a MASK the data holds makes a real token and a masked slot look the same)
  int64_t mask_token_id = -1;
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
  // What the read-ahead did so far (a bench prints it; tests check it).
  struct ReadAheadStats {
    int64_t fetches = 0;
    int64_t prefetched = 0;        // fetches served by the background reader
    int64_t uploaded_ahead = 0;    // ... whose upload was queued before the fetch
    int64_t upload_in_flight = 0;  // ... whose upload had not finished at the fetch (the
                                   // compute stream may wait for it, the host did not)
    double wait_seconds = 0;       // host time fetch() spent waiting for the reader
  };
  ReadAheadStats stats() const;

 private:
  struct Location {  // where one tensor's bytes are
    int shard = 0;
    uint64_t offset = 0, nbytes = 0;
    std::string checksum;  // its XXH3-128 hex, "" when the shard records none
  };
  struct SampleFiles {
    Location hidden_states, last_hidden;
    int64_t seq_len = 0;
    int64_t index = 0;  // the sample's number in the folder (its tensors' "i." prefix)
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
    // Note [Uploading ahead]: made by prefetch() when the device is known; `after`: the
    // compute stream's work when they were made; `uploaded`: the ticket of the last upload
    // into them (0: not queued).
    Tensor device_hidden_states, device_last_hidden;
    uint64_t after = 0, uploaded = 0;
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
  void drop_locked(HostBatch& b);          // main thread
  void upload_ahead_locked(HostBatch& b);  // the reader, once b is read
  Tensor upload(HostBuffer& b, const Shape& shape, Device device);
  void reader_loop();
  std::string shard_path(int shard) const;

  std::string dir_;
  FeatureFileIndex index_;
  std::vector<int> fds_;  // one per shard, for pread
  std::vector<DrafterSequence> sequences_;
  std::vector<SampleFiles> samples_;

  mutable std::mutex mutex_;
  std::condition_variable wake_, ready_;
  std::deque<std::shared_ptr<HostBatch>> queue_;  // asked for, in order
  bool stop_ = false;
  std::thread reader_;  // started by the first prefetch()
  ReadAheadStats stats_;
  // Set by the first fetch to a device with memory of its own; the pool of its pinned
  // buffers, reused once their last upload is done (all guarded by mutex_).
  DeviceBackend* pinned_backend_ = nullptr;
  Device pinned_device_ = kCPU;
  std::vector<PinnedBuffer> pinned_;
};

}  // namespace cg::train
