// Why this file exists: the offline feature source (offline_features.h).
#include "train/offline_features.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "core/content_hash.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "core/views.h"
#include "ops/shape_ops.h"

namespace cg::train {

namespace fs = std::filesystem;

namespace {

std::string list_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// pread until `n` bytes are in `dst`; throws naming the file.
void read_exactly(int fd, char* dst, uint64_t offset, uint64_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, dst, n, static_cast<off_t>(offset));
    CG_CHECK(got > 0, "feature files: reading ", path, " failed at byte ", offset, ": ",
             got == 0 ? std::string("the file ends early (truncated?)") : std::strerror(errno));
    dst += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

}  // namespace

FeatureFileIndex read_feature_index(const std::string& dir) {
  const std::string path = (fs::path(dir) / "index.json").string();
  CG_CHECK(fs::is_directory(dir), "feature files: ", dir, " is not a folder");
  std::ifstream in(path, std::ios::binary);
  CG_CHECK(in.is_open(), "feature files: ", path,
           " does not exist or cannot be read (not a folder written by `chunkgrad features`)");
  std::stringstream text;
  text << in.rdbuf();
  return FeatureFileIndex::from_json(text.str(), path);
}

OfflineFeatureSource::OfflineFeatureSource(const std::string& dir,
                                           const FeatureExpectations& expect, int64_t first,
                                           int64_t count)
    : dir_(dir), index_(read_feature_index(dir)) {
  const std::string index_path = (fs::path(dir) / "index.json").string();
  const int64_t K = index_.num_layers(), H = index_.hidden_size;
  // The index against the run first: one line saying what to change.
  if (!expect.layer_ids.empty() && expect.layer_ids != index_.layer_ids) {
    CG_FAIL("feature files: ", index_path, ": field '",
            static_cast<int64_t>(expect.layer_ids.size()) != K ? "num_layers" : "layer_ids",
            "' disagrees with the config: the features hold layers ", list_text(index_.layer_ids),
            " (K = ", K, "), the drafter reads layers ", list_text(expect.layer_ids),
            " (K = ", expect.layer_ids.size(),
            "); write the features with --layers matching drafter.target_layers, or change it");
  }
  CG_CHECK(expect.hidden_size == 0 || expect.hidden_size == H, "feature files: ", index_path,
           ": field 'hidden_size' is ", H, " but the target's hidden size is ", expect.hidden_size,
           " (features of another target)");
  CG_CHECK(
      expect.target_fingerprint.empty() || expect.target_fingerprint == index_.target_fingerprint,
      "feature files: ", index_path, ": field 'target_fingerprint' is ", index_.target_fingerprint,
      " but the target now has ", expect.target_fingerprint,
      " (the target's weights or config changed since the features were written; write "
      "them again)");
  CG_CHECK(expect.tokenizer_hash.empty() || expect.tokenizer_hash == index_.tokenizer_hash,
           "feature files: ", index_path, ": field 'tokenizer_hash' is ", index_.tokenizer_hash,
           " but the target's tokenizer has ", expect.tokenizer_hash,
           " (features tokenized by another tokenizer)");
  if (count < 0) count = index_.num_samples - first;
  CG_CHECK(first >= 0 && count >= 1 && first + count <= index_.num_samples,
           "feature files: ", index_path, " holds ", index_.num_samples, " samples; samples [",
           first, ", ", first + count, ") were asked for");

  // Every shard: its size, its header, and the tensors of the samples it holds.
  int64_t longest = 0;  // over every sample of the folder, not only [first, first + count)
  for (size_t si = 0; si < index_.shards.size(); ++si) {
    const FeatureFileIndex::Shard& sh = index_.shards[si];
    const std::string path = shard_path(static_cast<int>(si));
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    CG_CHECK(!ec, "feature files: shard ", path,
             " (field 'shards' of index.json) is missing: ", ec.message());
    CG_CHECK(size == sh.bytes, "feature files: shard ", path, " is ", size,
             " bytes but field 'shards.bytes' of index.json says ", sh.bytes,
             size < sh.bytes ? " (the shard is truncated)" : " (the shard was replaced)",
             "; write the features again");
    std::unique_ptr<safetensors::File> file;
    try {
      file = std::make_unique<safetensors::File>(path);
    } catch (const Error& e) { CG_FAIL("feature files: shard ", path, ": ", e.message()); }
    if (!sh.header_xxh3.empty()) {  // Note [Shard header hashes] (train/feature_files.h)
      const std::string got = shard_header_hash(path);
      CG_CHECK(got == sh.header_xxh3, "feature files: shard ", path, "'s header hashes to ", got,
               " but field 'shards.header_xxh3' of index.json says ", sh.header_xxh3,
               " (the shard was replaced, e.g. by one of another feature set of the same shapes)",
               "; write the features again");
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    CG_CHECK(fd >= 0, "feature files: cannot open ", path, ": ", std::strerror(errno));
    fds_.push_back(fd);
    for (int64_t i = sh.first; i < sh.first + sh.count; ++i) {
      const std::string any_ids = feature_tensor_name(i, "input_ids");
      if (file->contains(any_ids) && file->info(any_ids).shape.size() == 1)
        longest = std::max(longest, file->info(any_ids).shape[0]);
      if (i < first || i >= first + count) continue;
      auto tensor = [&](const char* field, DType dtype, const Shape& shape,
                        const std::string& hint) -> const safetensors::TensorInfo& {
        const std::string name = feature_tensor_name(i, field);
        CG_CHECK(file->contains(name), "feature files: shard ", path, ": tensor '", name,
                 "' of sample ", i, " is missing");
        const safetensors::TensorInfo& t = file->info(name);
        const bool u8 = dtype == DType::boolean;
        CG_CHECK(t.dtype == dtype && t.u8 == u8, "feature files: shard ", path, ": tensor '", name,
                 "' is ", t.u8 ? "u8" : dtype_name(t.dtype), ", expected ",
                 u8 ? "u8" : dtype_name(dtype), hint);
        CG_CHECK(t.shape == shape, "feature files: shard ", path, ": tensor '", name, "' is ",
                 shape_str(t.shape), ", expected ", shape_str(shape), hint);
        return t;
      };
      const std::string ids_name = feature_tensor_name(i, "input_ids");
      CG_CHECK(file->contains(ids_name), "feature files: shard ", path, ": tensor '", ids_name,
               "' of sample ", i, " is missing");
      const Shape& ids_shape = file->info(ids_name).shape;
      CG_CHECK(ids_shape.size() == 1 && ids_shape[0] >= 1 && ids_shape[0] <= index_.max_seq_len,
               "feature files: shard ", path, ": tensor '", ids_name, "' is ", shape_str(ids_shape),
               ", expected [S] with 1 <= S <= max_seq_len ", index_.max_seq_len);
      const int64_t S = ids_shape[0];
      tensor("input_ids", DType::i32, {S}, "");
      tensor("loss_mask", DType::boolean, {S}, "");
      const std::string layers_hint = " (K = " + std::to_string(K) + " layers " +
                                      list_text(index_.layer_ids) + " of H = " + std::to_string(H) +
                                      " in index.json: a layer missing?)";
      const std::string dtype_hint = " (field 'dtype' of index.json)";
      auto hint = [&](const char* field, const std::string& shape_hint) {
        const std::string name = feature_tensor_name(i, field);
        return file->contains(name) && file->info(name).dtype != index_.dtype ? dtype_hint
                                                                              : shape_hint;
      };
      const auto& hs =
          tensor("hidden_states", index_.dtype, {S, K * H}, hint("hidden_states", layers_hint));
      const auto& last =
          tensor("last_hidden", index_.dtype, {S, H},
                 hint("last_hidden", " (H = " + std::to_string(H) + " in index.json)"));
      SampleFiles f;
      f.seq_len = S;
      f.index = i;
      f.hidden_states = {static_cast<int>(si), file->data_start() + hs.begin, hs.nbytes(),
                         file->checksum(hs.name)};
      f.last_hidden = {static_cast<int>(si), file->data_start() + last.begin, last.nbytes(),
                       file->checksum(last.name)};
      samples_.push_back(f);
      // The ids and the mask, read now: the trainer samples anchors from them.
      const Tensor ids = file->load(ids_name);
      const Tensor mask = file->load(feature_tensor_name(i, "loss_mask"));
      DrafterSequence seq;
      const int32_t* id = ids.data<int32_t>();
      const uint8_t* m = static_cast<const uint8_t*>(mask.data_ptr());
      for (int64_t t = 0; t < S; ++t) {
        CG_CHECK(id[t] >= 0, "feature files: shard ", path, ": tensor '", ids_name, "' holds ",
                 id[t], " at ", t, "; token ids are >= 0");
        // Checked here, before the run directory is touched, rather than as an embedding
        // or head-loss range error at step 1 that names no file.
        CG_CHECK(expect.vocab_size <= 0 || id[t] < expect.vocab_size, "feature files: shard ", path,
                 ": tensor '", ids_name, "' holds ", id[t], " at ", t,
                 ", not a token id of the target (vocabulary of ", expect.vocab_size,
                 "); were these features written for another target or tokenizer?");
        CG_CHECK(id[t] != expect.mask_token_id, "feature files: shard ", path, ": tensor '",
                 ids_name, "' holds ", id[t], " at ", t,
                 ", which is drafter.mask_token_id: the MASK must be an id the data never "
                 "holds (a Hugging Face target: set drafter.mask_token_id, Qwen3: 151669; a "
                 "chunkgrad run's byte target: write the features from data without ",
                 id[t], ")");
        CG_CHECK(m[t] <= 1, "feature files: shard ", path, ": tensor '",
                 feature_tensor_name(i, "loss_mask"), "' holds ", static_cast<int>(m[t]), " at ", t,
                 "; a loss mask is 0 or 1");
        seq.ids.push_back(id[t]);
        seq.loss_mask.push_back(m[t]);
      }
      sequences_.push_back(std::move(seq));
    }
  }
  // Batches are [B, max_seq_len]: a field edited up (2^62) was a hang or a bare bad_alloc
  // at the first step, after the run directory had been written.
  CG_CHECK(longest == index_.max_seq_len, "feature files: ", index_path,
           ": field 'max_seq_len' is ", index_.max_seq_len,
           " but the longest sample has S = ", longest,
           " (index.json was edited or belongs to other shards); write the features again");
}

OfflineFeatureSource::~OfflineFeatureSource() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (reader_.joinable()) reader_.join();
  for (const auto& b : queue_) drop_locked(*b);  // the reader is gone: no lock needed
  queue_.clear();
  for (int fd : fds_) ::close(fd);
  for (PinnedBuffer& p : pinned_) {
    while (!pinned_backend_->upload_done(p.ticket)) std::this_thread::yield();
    pinned_backend_->free_pinned_host(p.ptr);
  }
}

std::string OfflineFeatureSource::shard_path(int shard) const {
  return (fs::path(dir_) / index_.shards[static_cast<size_t>(shard)].file).string();
}

std::string OfflineFeatureSource::describe() const {
  return "offline " + dir_ + " (" + std::to_string(sequences_.size()) + " samples, " +
         std::to_string(index_.shards.size()) + " shards, " + dtype_name(index_.dtype) + ")";
}

// Not zeroed: read_batch writes every byte (the samples, then zeros to S).
void OfflineFeatureSource::take_buffer(size_t nbytes, HostBuffer& out) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pinned_backend_ != nullptr) {
      int found = -1;
      for (size_t i = 0; i < pinned_.size() && found < 0; ++i) {
        PinnedBuffer& p = pinned_[i];
        if (!p.in_use && p.size >= nbytes && pinned_backend_->upload_done(p.ticket))
          found = static_cast<int>(i);
      }
      if (found < 0) {
        void* ptr = pinned_backend_->allocate_pinned_host(std::max<size_t>(nbytes, 1));
        if (ptr != nullptr) {
          pinned_.push_back({ptr, std::max<size_t>(nbytes, 1), 0, false});
          found = static_cast<int>(pinned_.size()) - 1;
        }
      }
      if (found >= 0) {
        pinned_[static_cast<size_t>(found)].in_use = true;
        out.pinned = found;
        out.data = static_cast<char*>(pinned_[static_cast<size_t>(found)].ptr);
        return;
      }
    }
  }
  out.plain.resize(nbytes);
  out.data = out.plain.data();
}

void OfflineFeatureSource::release_locked(HostBuffer& b, uint64_t ticket) {
  if (b.pinned < 0) return;
  PinnedBuffer& p = pinned_[static_cast<size_t>(b.pinned)];
  p.ticket = ticket;
  p.in_use = false;
  b.pinned = -1;
  b.data = nullptr;
}

namespace {

// The first element of `n` bytes of `dtype` (bf16, f16 or f32) whose exponent bits are all
// ones -- a NaN or an infinity -- or -1. A bit test per element: the reader thread scans a
// full-scale sample (about 250 MB) in a few tens of ms, beside a step of about 900.
int64_t first_non_finite(const char* data, uint64_t n, DType dtype) {
  if (dtype == DType::f32) {
    for (uint64_t i = 0; i < n / 4; ++i) {
      uint32_t v;
      std::memcpy(&v, data + 4 * i, 4);
      if ((v & 0x7f800000u) == 0x7f800000u) return static_cast<int64_t>(i);
    }
    return -1;
  }
  const uint16_t exponent = dtype == DType::f16 ? 0x7c00u : 0x7f80u;
  for (uint64_t i = 0; i < n / 2; ++i) {
    uint16_t v;
    std::memcpy(&v, data + 2 * i, 2);
    if ((v & exponent) == exponent) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

void OfflineFeatureSource::read_batch(HostBatch& b) {
  const int64_t B = static_cast<int64_t>(b.ids.size()), S = index_.max_seq_len;
  const uint64_t es = element_size(index_.dtype);
  const uint64_t row_hs = static_cast<uint64_t>(index_.num_layers() * index_.hidden_size) * es;
  const uint64_t row_last = static_cast<uint64_t>(index_.hidden_size) * es;
  take_buffer(static_cast<size_t>(B * S) * row_hs, b.hidden_states);
  take_buffer(static_cast<size_t>(B * S) * row_last, b.last_hidden);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t id = b.ids[static_cast<size_t>(r)];
    CG_CHECK(id >= 0 && id < static_cast<int64_t>(samples_.size()), "feature files: sample ", id,
             " asked for; ", dir_, " has ", samples_.size());
    const SampleFiles& f = samples_[static_cast<size_t>(id)];
    char* hs = b.hidden_states.data + static_cast<uint64_t>(r * S) * row_hs;
    char* last = b.last_hidden.data + static_cast<uint64_t>(r * S) * row_last;
    read_exactly(fds_[static_cast<size_t>(f.hidden_states.shard)], hs, f.hidden_states.offset,
                 f.hidden_states.nbytes, shard_path(f.hidden_states.shard));
    read_exactly(fds_[static_cast<size_t>(f.last_hidden.shard)], last, f.last_hidden.offset,
                 f.last_hidden.nbytes, shard_path(f.last_hidden.shard));
    // A NaN or inf in a feature is an error naming the shard and the sample, not a loss of
    // NaN at step 1 with nothing to say where it came from.
    for (const auto& [data, part, field] : {std::tuple{hs, &f.hidden_states, "hidden_states"},
                                            std::tuple{last, &f.last_hidden, "last_hidden"}}) {
      // Note [Tensor checksums] (nn/safetensors.h): these bytes bypass Reader::load.
      if (!part->checksum.empty()) {
        const std::string now = content_hash(data, part->nbytes);
        CG_CHECK(now == part->checksum, "feature files: shard ", shard_path(part->shard),
                 ": tensor '", feature_tensor_name(f.index, field),
                 "' does not match the checksum written with it (XXH3-128 ", now, ", recorded ",
                 part->checksum,
                 "): the shard was damaged or changed after it was written; "
                 "write the features again");
      }
      const int64_t bad = first_non_finite(data, part->nbytes, index_.dtype);
      CG_CHECK(bad < 0, "feature files: shard ", shard_path(part->shard), ": tensor '",
               feature_tensor_name(f.index, field), "' holds a NaN or inf at element ", bad,
               "; write the features again (was the target's output finite?)");
    }
    const uint64_t pad = static_cast<uint64_t>(S - f.seq_len);  // rows after the sample
    std::memset(hs + f.hidden_states.nbytes, 0, pad * row_hs);
    std::memset(last + f.last_hidden.nbytes, 0, pad * row_last);
  }
}

void OfflineFeatureSource::reader_loop() {
  CategoryGuard inputs(MemoryCategory::input);  // this thread's buffers are the step's inputs
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] {
      if (stop_) return true;
      for (const auto& b : queue_)
        if (!b->done) return true;
      return false;
    });
    if (stop_) return;
    std::shared_ptr<HostBatch> next;
    for (const auto& b : queue_) {
      if (!b->done) {
        next = b;
        break;
      }
    }
    lock.unlock();
    try {
      read_batch(*next);
    } catch (const Error& e) { next->error = e.message(); } catch (const std::exception& e) {
      next->error = e.what();
    }
    lock.lock();
    next->done = true;
    if (next->dropped) {  // fetch() went past it while it was being read
      release_locked(next->hidden_states, 0);
      release_locked(next->last_hidden, 0);
    } else if (next->error.empty()) {
      try {
        upload_ahead_locked(*next);
      } catch (const std::exception& e) { next->error = e.what(); }  // fetch() throws it
    }
    ready_.notify_all();
  }
}

void OfflineFeatureSource::prefetch(const std::vector<int64_t>& ids) {
  CategoryGuard inputs(MemoryCategory::input);  // the device tensors uploaded ahead
  auto b = std::make_shared<HostBatch>();
  b->ids = ids;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pinned_backend_ != nullptr) {  // Note [Uploading ahead]
      const int64_t B = static_cast<int64_t>(ids.size()), S = index_.max_seq_len;
      const TensorOptions on{.dtype = index_.dtype, .device = pinned_device_};
      b->device_hidden_states = empty({B, S, index_.num_layers() * index_.hidden_size}, on);
      b->device_last_hidden = empty({B, S, index_.hidden_size}, on);
      b->after = pinned_backend_->record_compute(pinned_device_);
    }
    queue_.push_back(std::move(b));
    if (!reader_.joinable()) reader_ = std::thread([this] { reader_loop(); });
  }
  wake_.notify_all();
}

FeatureBatch OfflineFeatureSource::fetch(const std::vector<int64_t>& ids, Device device) {
  std::shared_ptr<HostBatch> b;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    ++stats_.fetches;
    // From now on batches are read into pinned memory and uploaded ahead when the device
    // has memory of its own (Note [Uploading ahead]).
    if (pinned_backend_ == nullptr && backend_for(device).capabilities().own_memory) {
      pinned_backend_ = &backend_for(device);
      pinned_device_ = device;
    }
    CG_CHECK(pinned_backend_ == nullptr || device == pinned_device_, "feature files: ", describe(),
             " uploads to ", pinned_device_.str(), " and was asked for ", device.str(),
             "; open one source per device");
    // The first queued batch with these ids; the ones before it were not fetched and go
    // (one the reader is reading finishes unseen). The batch itself stays queued until it
    // is read: the reader takes its work from the queue.
    for (size_t i = 0; i < queue_.size(); ++i) {
      if (queue_[i]->ids != ids) continue;
      b = queue_[i];
      for (size_t k = 0; k < i; ++k) drop_locked(*queue_[k]);
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    if (b) {
      const auto t0 = std::chrono::steady_clock::now();
      ready_.wait(lock, [&] { return b->done; });
      stats_.wait_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      queue_.pop_front();  // b: nothing before it was added since
      ++stats_.prefetched;
      if (b->uploaded != 0) {
        ++stats_.uploaded_ahead;
        if (!pinned_backend_->upload_done(b->uploaded)) ++stats_.upload_in_flight;
        pinned_backend_->wait_for(device, b->uploaded);
        return {std::move(b->device_hidden_states), std::move(b->device_last_hidden)};
      }
      b->device_hidden_states = Tensor();  // not uploaded ahead (nothing was queued on them)
      b->device_last_hidden = Tensor();
    }
  }
  if (!b) {  // nobody asked for it: read here
    b = std::make_shared<HostBatch>();
    b->ids = ids;
    read_batch(*b);
  }
  CG_CHECK(b->error.empty(), b->error);
  const int64_t B = static_cast<int64_t>(ids.size()), S = index_.max_seq_len;
  FeatureBatch out;
  out.hidden_states =
      upload(b->hidden_states, {B, S, index_.num_layers() * index_.hidden_size}, device);
  out.last_hidden = upload(b->last_hidden, {B, S, index_.hidden_size}, device);
  return out;
}

// Note [Uploading ahead]: the reader has read `b`; its bytes go up now, after the compute
// work that was queued when its device tensors were made.
void OfflineFeatureSource::upload_ahead_locked(HostBatch& b) {
  if (!b.device_hidden_states.defined() || b.hidden_states.pinned < 0 || b.last_hidden.pinned < 0)
    return;  // fetch() uploads it the CPU way
  const uint64_t first = pinned_backend_->upload_pinned(b.device_hidden_states.data_ptr(),
                                                        pinned_device_, b.hidden_states.data,
                                                        b.device_hidden_states.nbytes(), b.after);
  b.after = 0;  // consumed
  b.uploaded = pinned_backend_->upload_pinned(b.device_last_hidden.data_ptr(), pinned_device_,
                                              b.last_hidden.data, b.device_last_hidden.nbytes(), 0);
  release_locked(b.hidden_states, first);
  release_locked(b.last_hidden, b.uploaded);
}

// A batch nobody will fetch (main thread): its pinned buffers go back to the pool (with
// their upload's ticket, if it was queued); its device tensors are freed once the compute
// stream is ordered after the upload into them.
void OfflineFeatureSource::drop_locked(HostBatch& b) {
  b.dropped = true;
  if (b.uploaded != 0) pinned_backend_->wait_for(pinned_device_, b.uploaded);
  b.uploaded = 0;
  if (b.done) {  // else the reader releases them when it finishes
    release_locked(b.hidden_states, 0);
    release_locked(b.last_hidden, 0);
  }
  b.device_hidden_states = Tensor();
  b.device_last_hidden = Tensor();
}

OfflineFeatureSource::ReadAheadStats OfflineFeatureSource::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

// A batch not uploaded ahead: a pinned buffer goes up now (the compute stream waits for
// it) and back to the pool with the upload's ticket; ordinary memory is copied into a
// tensor, and that to the device.
Tensor OfflineFeatureSource::upload(HostBuffer& b, const Shape& shape, Device device) {
  Tensor t;
  uint64_t ticket = 0;
  if (b.pinned >= 0 && backend_for(device).capabilities().own_memory) {
    t = empty(shape, {.dtype = index_.dtype, .device = device});
    const uint64_t after = pinned_backend_->record_compute(device);
    ticket = pinned_backend_->upload_pinned(t.data_ptr(), device, b.data, t.nbytes(), after);
    pinned_backend_->wait_for(device, ticket);
  } else {
    t = empty(shape, {.dtype = index_.dtype});
    std::memcpy(t.data_ptr(), b.data, t.nbytes());
    t = to_device(t, device);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  release_locked(b, ticket);
  return t;
}

}  // namespace cg::train
