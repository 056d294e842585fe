// Why this file exists: drafter_step_bench's feed from feature shards on disk
// (drafter_step_offline.h).
#include "drafter_step_offline.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "ops/shape_ops.h"
#include "train/feature_files.h"

namespace cg::bench {

namespace fs = std::filesystem;

namespace {

// Writes the file's pages to the disk and drops them from the page cache, so that the
// timed steps read the disk as a feature set larger than memory would.
void drop_from_page_cache(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  CG_CHECK(fd >= 0, "drafter_step_bench: cannot open ", file.string());
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

OfflineStepFeed::OfflineStepFeed(const std::string& parent, int64_t samples,
                                 const train::DrafterSequence& seq,
                                 const nn::DFlashDrafterConfig& config, Device device,
                                 Generator& gen)
    : folder_((fs::path(parent) / "drafter_step_bench_features").string()),
      samples_(samples),
      device_(device) {
  const auto t0 = std::chrono::steady_clock::now();
  fs::remove_all(folder_);  // a set left by an interrupted run
  train::FeatureFileIndex header;
  header.layer_ids = config.target_layers;
  header.hidden_size = config.layers.hidden_size;
  header.dtype = DType::bf16;
  header.target = "random features (drafter_step_bench)";
  header.target_fingerprint = "drafter_step_bench";
  header.tokenizer_hash = "drafter_step_bench";
  const int64_t S = static_cast<int64_t>(seq.ids.size()), H = header.hidden_size;
  const int64_t K = header.num_layers();
  train::FeatureFileWriter writer(folder_, header);
  const TensorOptions bf16{.dtype = DType::bf16, .device = device};
  for (int64_t i = 0; i < samples; ++i)
    writer.add(seq, randn({S, K * H}, bf16, &gen), randn({S, H}, bf16, &gen));
  const train::FeatureFileIndex& index = writer.finish();
  for (const auto& shard : index.shards) {
    drop_from_page_cache(fs::path(folder_) / shard.file);
    bytes_ += shard.bytes;
  }
  write_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  source_ = std::make_unique<train::OfflineFeatureSource>(
      folder_, train::FeatureExpectations{.layer_ids = config.target_layers, .hidden_size = H});
  // One fetch names the device, so that every batch of the timed rows is uploaded ahead
  // (Note [Uploading ahead]: before the first fetch a batch goes the CPU way).
  source_->fetch({0}, device);
}

OfflineStepFeed::~OfflineStepFeed() {
  source_.reset();
  std::error_code ec;
  fs::remove_all(folder_, ec);  // best effort: a destructor must not throw
}

void OfflineStepFeed::before_step(int step, int steps, train::DrafterLossInputs& in) {
  auto sample = [&](int s) { return std::vector<int64_t>{s % samples_}; };
  if (step == 0) source_->prefetch(sample(0));
  if (step + 1 < steps) source_->prefetch(sample(step + 1));
  const train::FeatureBatch f = source_->fetch(sample(step), device_);
  in.features = f.hidden_states;
  in.teacher_hidden = reshape(f.last_hidden, {f.last_hidden.size(1), f.last_hidden.size(2)});
}

}  // namespace cg::bench
