// Why this file exists: the offline feature files (train/feature_files.h,
// train/offline_features.h): what is written is what is read back, bit for bit, in bf16
// and f32, through the background read-ahead and without it; and a damaged or
// mismatched folder is refused in one line naming the file and the field.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "core/backend.h"
#include "core/factories.h"
#include "core/json_input.h"
#include "fake_device.h"
#include "nn/safetensors.h"
#include "nn_test_util.h"
#include "ops/shape_ops.h"
#include "tensor_test_helpers.h"
#include "tests/error_helpers.h"
#include "train/feature_files.h"
#include "train/feature_target.h"
#include "train/offline_features.h"
#include "train_test_util.h"

namespace cg {
namespace {

namespace fs = std::filesystem;
using testing_nn::bit_equal;
using testing_nn::TempDir;
using testing_train::make_sequence;

// Row r of a [B, ...] tensor.
Tensor row(const Tensor& t, int64_t r) { return squeeze(narrow(t, 0, r, 1), 0); }

constexpr int64_t kK = 2, kH = 8;

train::FeatureFileIndex header(DType dtype) {
  train::FeatureFileIndex h;
  h.layer_ids = {1, 3};
  h.hidden_size = kH;
  h.dtype = dtype;
  h.target = "/nowhere/target";
  h.target_fingerprint = "f00d";
  h.tokenizer_hash = "beef";
  return h;
}

struct Written {
  std::vector<train::DrafterSequence> seqs;
  std::vector<Tensor> hidden, last;  // f32 as given
};

// Five samples of lengths 5..13, over shards of about two samples each.
Written write_features(const std::string& dir, DType dtype, uint64_t seed = 7) {
  Written w;
  train::FeatureFileWriter writer(dir, header(dtype),
                                  2 * train::feature_sample_bytes(9, kK, kH, dtype));
  Generator gen(seed);
  for (int64_t i = 0; i < 5; ++i) {
    const int64_t S = 5 + 2 * i;
    w.seqs.push_back(make_sequence(S, 2, 100 + static_cast<uint64_t>(i)));
    w.hidden.push_back(randn({S, kK * kH}, {}, &gen));
    w.last.push_back(randn({S, kH}, {}, &gen));
    writer.add(w.seqs.back(), w.hidden.back(), w.last.back());
  }
  const train::FeatureFileIndex& index = writer.finish();
  EXPECT_EQ(index.num_samples, 5);
  EXPECT_EQ(index.max_seq_len, 13);
  EXPECT_GE(index.shards.size(), 2u);
  return w;
}

// Sample `r` of a fetched batch equals what was written (stored in `dtype`), zeros after it.
void expect_row(const train::FeatureBatch& b, int64_t r, const Written& w, int64_t id,
                DType dtype) {
  const int64_t S = static_cast<int64_t>(w.seqs[static_cast<size_t>(id)].ids.size());
  const Tensor hs = narrow(row(b.hidden_states, r), 0, 0, S);
  const Tensor last = narrow(row(b.last_hidden, r), 0, 0, S);
  EXPECT_TRUE(bit_equal(contiguous(hs), to_dtype(w.hidden[static_cast<size_t>(id)], dtype)));
  EXPECT_TRUE(bit_equal(contiguous(last), to_dtype(w.last[static_cast<size_t>(id)], dtype)));
  const Tensor pad = narrow(row(b.hidden_states, r), 0, S, b.hidden_states.size(1) - S);
  for (double v : pad.to_vector()) ASSERT_EQ(v, 0.0);
}

train::FeatureBatch to_cpu(const train::FeatureBatch& b) {
  return {to_device(b.hidden_states, kCPU), to_device(b.last_hidden, kCPU)};
}

TEST(FeatureFiles, WhatIsWrittenIsReadBackBf16AndF32) {
  for (DType dtype : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    TempDir dir;
    const Written w = write_features(dir.file("f"), dtype);
    train::OfflineFeatureSource source(dir.file("f"), {.layer_ids = {1, 3}, .hidden_size = kH});
    ASSERT_EQ(source.sequences().size(), 5u);
    EXPECT_EQ(source.seq_len(), 13);
    EXPECT_EQ(source.num_feature_layers(), kK);
    EXPECT_EQ(source.dtype(), dtype);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(source.sequences()[i].ids, w.seqs[i].ids);
      EXPECT_EQ(source.sequences()[i].loss_mask, w.seqs[i].loss_mask);
    }
    // Read on this thread (nothing prefetched), then through the read-ahead.
    const train::FeatureBatch direct = source.fetch({4, 0}, kCPU);
    EXPECT_EQ(direct.hidden_states.shape(), Shape({2, 13, kK * kH}));
    expect_row(direct, 0, w, 4, dtype);
    expect_row(direct, 1, w, 0, dtype);
    source.prefetch({1, 2});
    source.prefetch({3});
    source.prefetch({2, 1});
    const train::FeatureBatch a = source.fetch({1, 2}, kCPU);
    const train::FeatureBatch c = source.fetch({2, 1}, kCPU);  // {3} was skipped: dropped
    EXPECT_EQ(source.stats().prefetched, 2);
    expect_row(a, 0, w, 1, dtype);
    expect_row(a, 1, w, 2, dtype);
    expect_row(c, 0, w, 2, dtype);
    expect_row(c, 1, w, 1, dtype);
    // A range of the samples, renumbered from 0 (the held-out split of an offline run).
    train::OfflineFeatureSource tail(dir.file("f"), {}, 3, 2);
    ASSERT_EQ(tail.sequences().size(), 2u);
    EXPECT_EQ(tail.sequences()[0].ids, w.seqs[3].ids);
    expect_row(tail.fetch({1}, kCPU), 0, w, 4, dtype);
  }
}

// On a device with memory of its own (the fake device standing for a GPU), batches read
// ahead go through pinned buffers (Note [Pinned uploads]), a pool that stops growing; the
// features are the same.
// Each sample's dataset (train/chat_data.h) is recorded when any sample is named; an index
// without the two fields (written before them) reads as no names.
TEST(FeatureFiles, DatasetNamesAreRecordedPerSampleAndOptional) {
  TempDir dir;
  train::FeatureFileWriter writer(dir.file("f"), header(DType::f32));
  Generator gen(3);
  for (const char* name : {"math", "chat", "math"})
    writer.add(make_sequence(6, 2, 9), randn({6, kK * kH}, {}, &gen), randn({6, kH}, {}, &gen),
               name);
  const train::FeatureFileIndex& written = writer.finish();
  EXPECT_EQ(written.dataset_names, (std::vector<std::string>{"math", "chat"}));
  EXPECT_EQ(written.sample_datasets, (std::vector<int32_t>{0, 1, 0}));
  nlohmann::json j = written.to_json();
  const auto back = train::FeatureFileIndex::from_json(j.dump(), "index.json");
  EXPECT_EQ(back.dataset_names, written.dataset_names);
  EXPECT_EQ(back.sample_datasets, written.sample_datasets);
  const auto error = [&](const nlohmann::json& bad) {
    try {
      train::FeatureFileIndex::from_json(bad.dump(), "index.json");
    } catch (const Error& e) { return e.message(); }
    return std::string("no error");
  };
  nlohmann::json bad = j;
  bad["sample_datasets"] = {0, 1};
  EXPECT_NE(error(bad).find("'sample_datasets' must be an array of 3"), std::string::npos);
  bad["sample_datasets"] = {0, 1, 2};
  EXPECT_NE(error(bad).find("holds 2 but 'dataset_names' has 2 names"), std::string::npos);
  bad.erase("dataset_names");
  EXPECT_NE(error(bad).find("'dataset_names' is missing"), std::string::npos);
  j.erase("dataset_names");
  j.erase("sample_datasets");
  EXPECT_TRUE(train::FeatureFileIndex::from_json(j.dump(), "index.json").dataset_names.empty());
  // Unnamed samples record nothing.
  train::FeatureFileWriter plain(dir.file("g"), header(DType::f32));
  plain.add(make_sequence(6, 2, 9), randn({6, kK * kH}, {}, &gen), randn({6, kH}, {}, &gen));
  EXPECT_FALSE(plain.finish().to_json().contains("dataset_names"));
}

TEST(FeatureFiles, ReadAheadGoesThroughPinnedBuffersOnADevice) {
  fake::FakeDeviceScope scope;
  TempDir dir;
  const Written w = write_features(dir.file("f"), DType::bf16);
  train::OfflineFeatureSource source(dir.file("f"));
  expect_row(to_cpu(source.fetch({0}, fake::fake_device())), 0, w, 0, DType::bf16);
  EXPECT_EQ(scope.backend().counts.pinned_uploads, 2);  // read here, through pinned memory too
  for (int step = 0; step < 6; ++step) {
    const std::vector<int64_t> ids = {step % 5, (step + 2) % 5};
    source.prefetch(ids);
    const train::FeatureBatch b = to_cpu(source.fetch(ids, fake::fake_device()));
    expect_row(b, 0, w, ids[0], DType::bf16);
    expect_row(b, 1, w, ids[1], DType::bf16);
  }
  EXPECT_EQ(scope.backend().counts.pinned_uploads, 14);
  EXPECT_LE(scope.backend().counts.pinned_buffers, 4);  // reused, not made per batch
}

// Note [Uploading ahead], on the fake device whose uploads run only when the compute
// stream waits for them: each step's batch is uploaded before its fetch, batches come in
// the order asked for, and a pinned buffer whose upload has not run is never rewritten by
// the reader (if it were, the late copy would carry the next batch's bytes and a row
// below would not match). A batch skipped after its upload was queued is waited for.
TEST(FeatureFiles, UploadsGoAheadInOrderAndNoBufferIsRewrittenInFlight) {
  fake::FakeDeviceScope scope;
  fake::FakeDeviceBackend& fake = scope.backend();
  TempDir dir;
  const Written w = write_features(dir.file("f"), DType::bf16);
  train::OfflineFeatureSource source(dir.file("f"));
  source.fetch({0}, fake::fake_device());  // names the device
  // Until the reader has queued `n` uploads (it runs on its own thread).
  auto until_pending = [&](int n) {
    for (int i = 0; i < 5000 && fake.pending_uploads() < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(fake.pending_uploads(), n);
  };
  auto ids_of = [](int step) { return std::vector<int64_t>{step % 5, (step + 1) % 5}; };
  std::vector<train::FeatureBatch> got;
  source.prefetch(ids_of(0));
  until_pending(2);
  for (int step = 0; step < 6; ++step) {
    source.prefetch(ids_of(step + 1));  // the trainer's order: the next step's, then this one's
    until_pending(4);                   // both batches' uploads queued, none run
    got.push_back(source.fetch(ids_of(step), fake::fake_device()));
    EXPECT_EQ(fake.pending_uploads(), 2) << "the fetch ran the next batch's upload too";
  }
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE(step);
    const train::FeatureBatch b = to_cpu(got[static_cast<size_t>(step)]);
    expect_row(b, 0, w, ids_of(step)[0], DType::bf16);
    expect_row(b, 1, w, ids_of(step)[1], DType::bf16);
  }
  const auto stats = source.stats();
  EXPECT_EQ(stats.fetches, 7);
  EXPECT_EQ(stats.prefetched, 6);
  EXPECT_EQ(stats.uploaded_ahead, 6);
  EXPECT_EQ(stats.upload_in_flight, 6);      // the fake runs an upload only when waited for
  EXPECT_LE(fake.counts.pinned_buffers, 8);  // two batches in flight and the pool's spares
  // Batch 6 was asked for and never fetched: fetching batch 7 drops it, after its upload.
  source.prefetch({4});
  until_pending(4);
  expect_row(to_cpu(source.fetch({4}, fake::fake_device())), 0, w, 4, DType::bf16);
  EXPECT_EQ(fake.pending_uploads(), 0);
}

// The same on the GPU: the features that arrive are the CPU's bits, and once the pool of
// pinned buffers exists a read-ahead fetch makes the host wait for nothing (Note [Host
// sync count]): the upload is queued, not waited for.
TEST(FeatureFiles, PinnedReadAheadOnTheGpuQueuesUploadsWithoutWaiting) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  const Device gpu = cuda_device(0);
  TempDir dir;
  const Written w = write_features(dir.file("f"), DType::bf16);
  train::OfflineFeatureSource source(dir.file("f"));
  std::vector<train::FeatureBatch> got;
  uint64_t syncs_after_warmup = 0;
  for (int step = 0; step < 8; ++step) {
    const std::vector<int64_t> ids = {step % 5, (step + 3) % 5};
    source.prefetch(ids);
    if (step == 3) syncs_after_warmup = host_sync_count();
    got.push_back(source.fetch(ids, gpu));
  }
  EXPECT_EQ(host_sync_count(), syncs_after_warmup) << "a fetch waited for the GPU";
  for (int step = 0; step < 8; ++step) {
    const train::FeatureBatch b = to_cpu(got[static_cast<size_t>(step)]);
    expect_row(b, 0, w, step % 5, DType::bf16);
    expect_row(b, 1, w, (step + 3) % 5, DType::bf16);
  }
}

// Layer id l is the output of decoder layer l, Hugging Face's hidden_states[l + 1]; the
// teacher is the final norm's output. Checked through `chunkgrad features`' path (a Hugging
// Face folder, f32 files, read back) against transformers' own numbers.
TEST(FeatureFiles, LayerIdLIsHuggingFacesHiddenStatesLPlusOne) {
  const fs::path folder = fs::path(CHUNKGRAD_TEST_DATA_DIR) / "qwen3_tiny_untied";
  if (!fs::exists(folder / "reference_outputs.safetensors")) GTEST_SKIP() << "no golden data";
  const auto ref = safetensors::open((folder / "reference_outputs.safetensors").string());
  const Tensor ids = ref->load("input_ids");  // [2, 8]
  std::vector<train::DrafterSequence> seqs(2);
  const std::vector<double> flat = ids.to_vector();
  for (size_t i = 0; i < flat.size(); ++i) {
    seqs[i / 8].ids.push_back(static_cast<int64_t>(flat[i]));
    seqs[i / 8].loss_mask.push_back(1);
  }
  const train::FeatureTarget target = train::load_feature_target(folder.string(), kCPU);
  EXPECT_EQ(target.kind, "hugging face");
  TempDir dir;
  train::write_feature_files(target, seqs, {0}, DType::f32, dir.file("f"), uint64_t{1} << 20);
  train::OfflineFeatureSource source(
      dir.file("f"),
      {.layer_ids = {0}, .hidden_size = 32, .target_fingerprint = target.fingerprint});
  const train::FeatureBatch b = source.fetch({0, 1}, kCPU);
  auto worst = [](const Tensor& got, const Tensor& want) {
    const std::vector<double> a = got.to_vector(), w = want.to_vector();
    EXPECT_EQ(a.size(), w.size());
    double d = 0;
    for (size_t i = 0; i < a.size() && i < w.size(); ++i) d = std::max(d, std::abs(a[i] - w[i]));
    return d;
  };
  EXPECT_LE(worst(b.hidden_states, ref->load("hf_hidden_states.1")), 1e-4);
  EXPECT_LE(worst(b.hidden_states, ref->load("layers.0.output")), 1e-4);
  EXPECT_LE(worst(b.last_hidden, ref->load("norm.output")), 1e-4);
}

// The error of opening `dir` with `expect`, or "" when it opens.
std::string open_error(const std::string& dir, const train::FeatureExpectations& expect = {}) {
  try {
    train::OfflineFeatureSource source(dir, expect);
  } catch (const Error& e) { return e.message(); }
  return "";
}

void expect_names(const std::string& error, const std::vector<std::string>& parts) {
  EXPECT_FALSE(error.empty()) << "no error";
  EXPECT_EQ(error.find('\n'), std::string::npos) << "one line: " << error;
  for (const auto& p : parts) EXPECT_NE(error.find(p), std::string::npos) << p << " in: " << error;
}

TEST(FeatureFiles, AMismatchWithTheRunIsRefusedNamingTheField) {
  TempDir dir;
  write_features(dir.file("f"), DType::bf16);
  const std::string f = dir.file("f");
  EXPECT_EQ(open_error(f, {.layer_ids = {1, 3},
                           .hidden_size = kH,
                           .target_fingerprint = "f00d",
                           .tokenizer_hash = "beef"}),
            "");
  expect_names(open_error(f, {.layer_ids = {1, 2}}), {"index.json", "'layer_ids'", "[1, 2]"});
  expect_names(open_error(f, {.layer_ids = {1, 3, 5}}), {"index.json", "'num_layers'", "K = 3"});
  expect_names(open_error(f, {.hidden_size = 16}), {"index.json", "'hidden_size'", "16"});
  expect_names(open_error(f, {.target_fingerprint = "cafe"}),
               {"index.json", "'target_fingerprint'", "cafe", "changed"});
  expect_names(open_error(f, {.tokenizer_hash = "0"}), {"index.json", "'tokenizer_hash'"});
  // Token ids past the target's vocabulary: refused at open, naming the shard and tensor.
  EXPECT_EQ(open_error(f, {.vocab_size = 1 << 20}), "");
  expect_names(open_error(f, {.vocab_size = 1}),
               {"features-", "input_ids", "not a token id of the target (vocabulary of 1)"});
}

// An outside tester: a MASK id that the data holds (a newline of a real tokenizer) was
// accepted; block slots read the MASK in place of their token, so a real token and a
// masked slot would look the same.
TEST(FeatureFiles, AMaskIdTheDataHoldsIsRefused) {
  TempDir dir;
  const Written w = write_features(dir.file("f"), DType::bf16);
  const int64_t used = w.seqs[2].ids[3];
  expect_names(open_error(dir.file("f"), {.mask_token_id = used}),
               {"features-", "input_ids", std::to_string(used), "drafter.mask_token_id"});
  EXPECT_EQ(open_error(dir.file("f"), {.mask_token_id = 1 << 20}), "");
}

// A NaN or inf in a feature: the fetch that reads it fails naming the shard and the
// tensor (the reader scans each sample), instead of a NaN loss at step 1.
TEST(FeatureFiles, ANonFiniteFeatureIsAnErrorNamingTheTensor) {
  for (DType dtype : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    TempDir dir;
    train::FeatureFileWriter writer(dir.file("f"), header(dtype), size_t{1} << 20);
    Generator gen(3);
    for (int i = 0; i < 3; ++i) {
      Tensor hidden = randn({6, kK * kH}, {}, &gen), last = randn({6, kH}, {}, &gen);
      if (i == 2) last.data<float>()[7] = std::numeric_limits<float>::infinity();
      writer.add(make_sequence(6, 2, 10 + static_cast<uint64_t>(i)), hidden, last);
    }
    writer.finish();
    train::OfflineFeatureSource source(dir.file("f"));
    EXPECT_NO_THROW(source.fetch({0, 1}, kCPU));
    try {
      source.fetch({2}, kCPU);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      expect_names(e.message(), {"features-", "'2.last_hidden'", "NaN or inf", "element 7"});
    }
  }
}

TEST(FeatureFiles, ATruncatedShardIsRefusedNamingItsSize) {
  TempDir dir;
  write_features(dir.file("f"), DType::bf16);
  const fs::path shard = fs::path(dir.file("f")) / "features-00001.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 10);
  expect_names(open_error(dir.file("f")),
               {"features-00001.safetensors", "'shards.bytes'", "truncated"});
  fs::remove(shard);
  expect_names(open_error(dir.file("f")), {"features-00001.safetensors", "missing"});
}

// Note [Shard header hashes]: a shard of another feature set of the same shapes (same size,
// its header and tensors agreeing with each other) is refused, naming it; before, its
// values were read as this set's.
TEST(FeatureFiles, AShardOfAnotherSetOfTheSameShapesIsRefused) {
  TempDir dir;
  write_features(dir.file("a"), DType::bf16, 7);
  write_features(dir.file("b"), DType::bf16, 8);
  const train::FeatureFileIndex index = train::FeatureFileIndex::from_json(
      read_text_file(dir.file("a") + "/index.json", "index.json"), dir.file("a") + "/index.json");
  for (const auto& sh : index.shards) EXPECT_EQ(sh.header_xxh3.size(), 32u) << sh.file;
  const fs::path mine = fs::path(dir.file("a")) / "features-00001.safetensors";
  const fs::path theirs = fs::path(dir.file("b")) / "features-00001.safetensors";
  ASSERT_EQ(fs::file_size(mine), fs::file_size(theirs));
  fs::copy_file(theirs, mine, fs::copy_options::overwrite_existing);
  expect_names(open_error(dir.file("a")),
               {"features-00001.safetensors", "'shards.header_xxh3'", "replaced"});
  // The field dropped from that shard alone (a second tester's edit let it through), or
  // given in capitals: the index is refused.
  const std::string index_path = dir.file("a") + "/index.json";
  nlohmann::json j = nlohmann::json::parse(read_text_file(index_path, "index.json"));
  j["shards"][1].erase("header_xxh3");
  std::ofstream(index_path) << j.dump(2);
  expect_names(open_error(dir.file("a")), {"index.json", "'shards.header_xxh3' is on"});
  std::string upper = index.shards[1].header_xxh3;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  j["shards"][1]["header_xxh3"] = upper;
  std::ofstream(index_path) << j.dump(2);
  expect_names(open_error(dir.file("a")), {"index.json", "lowercase hex"});
}

// A one-sample folder whose shard is written by hand with `tensors` (the index right).
std::string hand_made(const TempDir& dir, const safetensors::NamedTensors& tensors,
                      int64_t seq_len = 4) {
  const std::string folder = dir.file("hand");
  fs::create_directories(folder);
  const std::string shard = (fs::path(folder) / "features-00000.safetensors").string();
  safetensors::save_file(tensors, shard, {}, {"0.loss_mask"});
  train::FeatureFileIndex index = header(DType::bf16);
  index.num_samples = 1;
  index.max_seq_len = seq_len;
  index.shards = {{"features-00000.safetensors", 0, 1, fs::file_size(shard)}};
  std::ofstream(fs::path(folder) / "index.json") << index.to_json().dump(2);
  return folder;
}

TEST(FeatureFiles, AWrongShapeDtypeOrMissingTensorIsRefusedNamingTheTensor) {
  TempDir dir;
  const Tensor ids = from_ints({1, 2, 3, 4}, {4}, {.dtype = DType::i32});
  const Tensor mask = from_ints({0, 1, 1, 1}, {4}, {.dtype = DType::boolean});
  auto bf = [](const Shape& s) { return to_dtype(zeros(s), DType::bf16); };
  // Right: opens.
  EXPECT_EQ(open_error(hand_made(dir, {{"0.input_ids", ids},
                                       {"0.loss_mask", mask},
                                       {"0.hidden_states", bf({4, kK * kH})},
                                       {"0.last_hidden", bf({4, kH})}})),
            "");
  fs::remove_all(dir.file("hand"));
  // One layer missing: [S, H] where [S, K*H] is due.
  expect_names(open_error(hand_made(dir, {{"0.input_ids", ids},
                                          {"0.loss_mask", mask},
                                          {"0.hidden_states", bf({4, kH})},
                                          {"0.last_hidden", bf({4, kH})}})),
               {"features-00000.safetensors", "'0.hidden_states'", "[4, 16]", "layer missing"});
  fs::remove_all(dir.file("hand"));
  // f32 where the index says bf16.
  expect_names(open_error(hand_made(dir, {{"0.input_ids", ids},
                                          {"0.loss_mask", mask},
                                          {"0.hidden_states", zeros({4, kK * kH})},
                                          {"0.last_hidden", bf({4, kH})}})),
               {"features-00000.safetensors", "'0.hidden_states'", "f32", "'dtype'"});
  fs::remove_all(dir.file("hand"));
  // No teacher.
  expect_names(open_error(hand_made(dir, {{"0.input_ids", ids},
                                          {"0.loss_mask", mask},
                                          {"0.hidden_states", bf({4, kK * kH})}})),
               {"features-00000.safetensors", "'0.last_hidden'", "missing"});
  fs::remove_all(dir.file("hand"));
  // A mask that is not 0/1 (another writer's U8 bytes).
  const Tensor two = from_ints({0, 1, 1, 1}, {4}, {.dtype = DType::boolean});
  static_cast<uint8_t*>(two.data_ptr())[2] = 2;
  expect_names(open_error(hand_made(dir, {{"0.input_ids", ids},
                                          {"0.loss_mask", two},
                                          {"0.hidden_states", bf({4, kK * kH})},
                                          {"0.last_hidden", bf({4, kH})}})),
               {"'0.loss_mask'", "0 or 1"});
}

TEST(FeatureFiles, ABadIndexIsRefusedNamingTheField) {
  TempDir dir;
  write_features(dir.file("f"), DType::f32);
  const fs::path index = fs::path(dir.file("f")) / "index.json";
  std::ifstream in(index);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  for (const char* field : {"hidden_size", "layer_ids", "target_fingerprint", "shards"}) {
    nlohmann::json bad = j;
    bad.erase(field);
    std::ofstream(index) << bad.dump();
    expect_names(open_error(dir.file("f")), {"index.json", std::string("'") + field + "'"});
  }
  nlohmann::json bad = j;
  bad["dtype"] = "f16";
  std::ofstream(index) << bad.dump();
  expect_names(open_error(dir.file("f")), {"index.json", "'dtype'", "f16"});
  // An outside tester: max_seq_len edited to 2^62 hung the first step (batches are [B,
  // max_seq_len]); 10^9 was a bare bad_alloc, after the run directory was written.
  for (const int64_t edited : {int64_t{1} << 62, int64_t{1000000000}, int64_t{14}}) {
    bad = j;
    bad["max_seq_len"] = edited;
    std::ofstream(index) << bad.dump();
    expect_names(open_error(dir.file("f")),
                 {"index.json", "'max_seq_len'", std::to_string(edited), "S = 13"});
  }
  fs::remove(index);
  expect_names(open_error(dir.file("f")), {"index.json", "chunkgrad features"});
  // The writer refuses to write over a feature set.
  std::ofstream(index) << j.dump();
  try {
    train::FeatureFileWriter again(dir.file("f"), header(DType::f32));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) { expect_names(e.message(), {"already holds index.json"}); }
}

// Note [Resuming features]: a writer stopped after its first shard (the second half
// written, then lost) resumes on the same folder from the first whole shard's end and ends
// with the very files an uninterrupted writer makes; another run's folder is one error.
TEST(FeatureFiles, AnInterruptedWriterResumesFromItsWholeShards) {
  TempDir dir;
  const Written w = write_features(dir.file("whole"), DType::f32);
  const uint64_t shard_bytes = 2 * train::feature_sample_bytes(9, kK, kH, DType::f32);
  const train::FeatureRunIdentity identity{.data_fingerprint = "data", .num_inputs = 5};
  const std::string out = dir.file("resumed");
  {
    train::FeatureFileWriter first(out, header(DType::f32), shard_bytes, identity);
    EXPECT_EQ(first.resumed_samples(), 0);
    for (size_t i = 0; i < 4; ++i) first.add(w.seqs[i], w.hidden[i], w.last[i]);
  }  // stopped: samples 0-2 are shard 0, sample 3 was pending
  ASSERT_TRUE(fs::exists(out + "/" + train::kPartialFeatureIndex));
  ASSERT_FALSE(fs::exists(out + "/index.json"));
  std::ofstream(out + "/features-00001.safetensors") << "half a shard";
  const auto expect_refused = [&](train::FeatureFileIndex h, train::FeatureRunIdentity id,
                                  const char* field, const char* then, const char* now) {
    EXPECT_ERROR_HAS(train::FeatureFileWriter(out, h, shard_bytes, id), field, then, now,
                     "interrupted feature set", "another --out");
  };
  train::FeatureFileIndex other_layers = header(DType::f32);
  other_layers.layer_ids = {1, 2};
  expect_refused(other_layers, identity, "'layer_ids'", "[1, 3]", "[1, 2]");
  expect_refused(header(DType::bf16), identity, "'dtype'", "f32", "bf16");
  train::FeatureFileIndex other_target = header(DType::f32);
  other_target.target_fingerprint = "cafe";
  expect_refused(other_target, identity, "'target_fingerprint'", "f00d", "cafe");
  expect_refused(header(DType::f32), {.data_fingerprint = "other", .num_inputs = 5},
                 "'data_fingerprint'", "data", "other");
  {
    train::FeatureFileWriter second(out, header(DType::f32), shard_bytes, identity);
    EXPECT_EQ(second.resumed_samples(), 3);
    EXPECT_FALSE(fs::exists(out + "/features-00001.safetensors"));  // the half shard went
    for (size_t i = 3; i < 5; ++i) second.add(w.seqs[i], w.hidden[i], w.last[i]);
    second.finish();
  }
  EXPECT_FALSE(fs::exists(out + "/" + train::kPartialFeatureIndex));
  const auto slurp = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(slurp(out + "/index.json"), slurp(dir.file("whole") + "/index.json"));
  for (const char* shard : {"features-00000.safetensors", "features-00001.safetensors"})
    EXPECT_EQ(slurp(out + "/" + shard), slurp(dir.file("whole") + "/" + shard)) << shard;
  // A listed shard that is no longer whole is written again, with everything after it.
  const std::string damaged = dir.file("damaged");
  {
    train::FeatureFileWriter first(damaged, header(DType::f32), shard_bytes, identity);
    for (size_t i = 0; i < 4; ++i) first.add(w.seqs[i], w.hidden[i], w.last[i]);
  }
  fs::resize_file(damaged + "/features-00000.safetensors", 100);
  train::FeatureFileWriter again(damaged, header(DType::f32), shard_bytes, identity);
  EXPECT_EQ(again.resumed_samples(), 0);
  EXPECT_FALSE(fs::exists(damaged + "/features-00000.safetensors"));
}

TEST(FeatureFiles, BytesPerSample) {
  // The README's figure: 4096 tokens, K = 5, H = 5120, bf16.
  EXPECT_EQ(train::feature_sample_bytes(4096, 5, 5120, DType::bf16), uint64_t{251678720});
}

}  // namespace
}  // namespace cg
