// Why this file exists: Note [Tensor checksums] (nn/safetensors.h). A bit that flips on
// disk and leaves a finite value used to load without a word; every file save_file writes
// now records each tensor's XXH3-128, and every read checks it. These tests flip bits in
// written files (one tensor of a file, a shard of a sharded checkpoint, a feature shard
// read by the offline loader) and damage the recorded sums themselves, and check that a
// file without sums, or one written into a pipe, reads as before.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/content_hash.h"
#include "core/factories.h"
#include "nn/safetensors.h"
#include "nn_test_util.h"
#include "tests/error_helpers.h"
#include "train/feature_files.h"
#include "train/offline_features.h"
#include "train_test_util.h"

namespace cg {
namespace {

using testing_nn::read_bytes;
using testing_nn::TempDir;
using testing_nn::write_bytes;
namespace st = safetensors;

// Each of `words` is in the message of the cg::Error `f` throws.
template <typename F>
void expect_error_with(F&& f, const std::vector<std::string>& words) {
  const std::string msg = testing::error_of(f);
  ASSERT_FALSE(msg.empty()) << "no cg::Error thrown";
  for (const std::string& w : words)
    EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
}
#define EXPECT_THROW_WITH(expr, ...) expect_error_with([&] { (void)(expr); }, __VA_ARGS__)

st::NamedTensors three_tensors() {
  Generator gen(5);
  return {{"a", randn({4, 3}, {}, &gen)},
          {"b", raw::to_dtype(randn({8}, {}, &gen), DType::bf16)},
          {"c", full({2, 2}, 7.0, TensorOptions{DType::i64})}};
}

// The header JSON of a file's bytes.
nlohmann::json header_of(const std::string& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return nlohmann::json::parse(bytes.substr(8, n));
}

// `bytes` with bit `bit` of data-section byte `offset` flipped.
std::string flipped(std::string bytes, uint64_t offset, int bit) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  bytes[8 + n + offset] = static_cast<char>(bytes[8 + n + offset] ^ (1 << bit));
  return bytes;
}

// `bytes` with the recorded sums replaced by `sums` (a string, as the format keeps it).
std::string with_sums(const std::string& bytes, const std::string& sums) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::ordered_json h = nlohmann::ordered_json::parse(bytes.substr(8, n));
  h["__metadata__"]["chunkgrad.xxh3"] = sums;
  const std::string text = h.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  return out + text + bytes.substr(8 + n);
}

TEST(TensorChecksums, EachTensorsHashIsRecordedAndKeptOutOfTheMetadata) {
  TempDir dir;
  const st::NamedTensors tensors = three_tensors();
  st::save_file(tensors, dir.file("m.safetensors"), {{"format", "pt"}});
  const nlohmann::json h = header_of(read_bytes(dir.file("m.safetensors")));
  ASSERT_TRUE(h["__metadata__"].contains("chunkgrad.xxh3")) << h.dump();
  const auto file = st::open(dir.file("m.safetensors"));
  EXPECT_EQ(file->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(file->checksum(name), content_hash(t.data_ptr(), t.nbytes())) << name;
    EXPECT_TRUE(testing_nn::bit_equal(file->load(name), t)) << name;
  }
  // Saving what was read, metadata and all, does not carry the old sums along twice.
  st::save_file(tensors, dir.file("again.safetensors"), file->metadata());
  EXPECT_EQ(read_bytes(dir.file("again.safetensors")), read_bytes(dir.file("m.safetensors")));
  EXPECT_THROW_WITH(st::save_file(tensors, dir.file("x.safetensors"), {{"chunkgrad.xxh3", "{}"}}),
                    {"'chunkgrad.xxh3'", "save_file's own"});
}

TEST(TensorChecksums, AFlippedBitIsAnErrorNamingTheTensorAndTheFile) {
  TempDir dir;
  st::save_file(three_tensors(), dir.file("m.safetensors"));
  // Byte 3 of a's first fp32, bit 6: the exponent's top bit, a finite value still.
  write_bytes(dir.file("m.safetensors"), flipped(read_bytes(dir.file("m.safetensors")), 3, 6));
  const auto file = st::open(dir.file("m.safetensors"));
  EXPECT_NO_THROW(file->load("b"));
  EXPECT_NO_THROW(file->load("c"));
  EXPECT_THROW_WITH(file->load("a"), {"tensor 'a'", dir.file("m.safetensors"),
                                      "does not match the checksum written with it"});
  Tensor into = raw::empty({4, 3}, DType::f32, kCPU);
  EXPECT_THROW_WITH(file->load_into("a", into), {"tensor 'a'", "does not match the checksum"});
}

TEST(TensorChecksums, AShardOfASplitCheckpointIsCheckedToo) {
  TempDir dir;
  const auto files = st::save_sharded(three_tensors(), dir.str(), 40);
  ASSERT_GE(files.size(), 2u);
  const std::string last = dir.file(files.back());
  write_bytes(last, flipped(read_bytes(last), 0, 0));
  const auto ckpt = st::open(dir.str());
  EXPECT_NO_THROW(ckpt->load("a"));
  EXPECT_FALSE(ckpt->checksum("c").empty());
  EXPECT_THROW_WITH(ckpt->load("c"), {"tensor 'c'", files.back(), "does not match the checksum"});
}

TEST(TensorChecksums, FilesWithoutSumsOrWrittenIntoAPipeReadAsBefore) {
  TempDir dir;
  const st::NamedTensors tensors = three_tensors();
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read_bytes(fifo); });
  st::save_file(tensors, fifo);  // a pipe: the header cannot be written again, so no sums
  reader.join();
  EXPECT_FALSE(header_of(got).contains("__metadata__")) << header_of(got).dump();
  write_bytes(dir.file("plain.safetensors"), flipped(got, 0, 0));
  const auto file = st::open(dir.file("plain.safetensors"));
  EXPECT_EQ(file->checksum("a"), "");
  EXPECT_NO_THROW(file->load("a"));  // nothing recorded, nothing to find
  EXPECT_TRUE(testing_nn::bit_equal(file->load("c"), tensors[2].second));
}

TEST(TensorChecksums, DamagedSumsAreRefusedWhenTheFileIsOpened) {
  TempDir dir;
  st::save_file(three_tensors(), dir.file("m.safetensors"));
  const std::string good = read_bytes(dir.file("m.safetensors"));
  const std::string sum(32, 'a');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "is not valid JSON"},
      {"{}", "have none for tensor 'a'"},
      {R"({"a": ")" + sum + R"(", "a": ")" + sum + R"("})", "twice in one object"},
      {"[1, 2]", "must be a JSON object"},
      {R"({"zzz": ")" + sum + R"("})", "name a tensor the file does not hold"},
      {R"({"a": "0123"})", "32 lowercase hex digits"},
      {R"({"a": ")" + std::string(32, 'A') + R"("})", "32 lowercase hex digits"},
      {R"({"a": 5})", "32 lowercase hex digits"},
  };
  for (const auto& [sums, said] : cases) {
    SCOPED_TRACE(sums);
    write_bytes(dir.file("bad.safetensors"), with_sums(good, sums));
    EXPECT_THROW_WITH(st::open(dir.file("bad.safetensors")),
                      {"chunkgrad.xxh3", dir.file("bad.safetensors"), said, "header is damaged"});
  }
}

// The sums cover the metadata too (a checkpoint's step "2" -> "3" is one flipped bit, and
// resumed one step late), and a sum for every tensor must be there: one left out would let
// that tensor's damage through.
TEST(TensorChecksums, TheMetadataAndEveryTensorAreCovered) {
  TempDir dir;
  st::save_file(three_tensors(), dir.file("m.safetensors"), {{"step", "2"}});
  const std::string good = read_bytes(dir.file("m.safetensors"));
  std::string step3 = good;
  const size_t at = step3.find(R"("step":"2")");
  ASSERT_NE(at, std::string::npos);
  step3[at + 8] = '3';
  write_bytes(dir.file("bad.safetensors"), step3);
  EXPECT_THROW_WITH(st::open(dir.file("bad.safetensors")),
                    {"the metadata of", "does not match the checksum written with it"});
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  nlohmann::json sums =
      nlohmann::json::parse(header_of(good)["__metadata__"]["chunkgrad.xxh3"].get<std::string>());
  nlohmann::json without_b = sums, without_metadata = sums;
  without_b.erase("b");
  without_metadata.erase("__metadata__");
  write_bytes(dir.file("bad.safetensors"), with_sums(good, without_b.dump()));
  EXPECT_THROW_WITH(st::open(dir.file("bad.safetensors")), {"have none for tensor 'b'"});
  write_bytes(dir.file("bad.safetensors"), with_sums(good, without_metadata.dump()));
  EXPECT_THROW_WITH(st::open(dir.file("bad.safetensors")), {"have none for the metadata"});
  // A key twice inside __metadata__ (the second "chunkgrad.xxh3" was the one read).
  std::string twice = good;
  const size_t meta = twice.find(R"("__metadata__":{)");
  ASSERT_NE(meta, std::string::npos);
  twice.insert(meta + 16, R"("step":"9",)");
  const std::string text = twice.substr(8, n + 11);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  write_bytes(dir.file("bad.safetensors"), out + text + good.substr(8 + n));
  EXPECT_THROW_WITH(st::open(dir.file("bad.safetensors")),
                    {"has the key \"step\" twice in \"__metadata__\"", "damaged"});
}

// The offline loader reads feature bytes itself (pread into its buffers, not through
// Reader::load), so it checks the sums itself.
TEST(TensorChecksums, TheOfflineLoaderChecksTheFeaturesItReads) {
  TempDir dir;
  train::FeatureFileIndex h;
  h.layer_ids = {1, 3};
  h.hidden_size = 8;
  h.dtype = DType::bf16;
  h.target = "/nowhere/target";
  h.target_fingerprint = "f00d";
  h.tokenizer_hash = "beef";
  train::FeatureFileWriter writer(dir.file("f"), h, size_t{1} << 20);
  Generator gen(3);
  for (int i = 0; i < 2; ++i)
    writer.add(testing_train::make_sequence(6, 2, 10 + static_cast<uint64_t>(i)),
               randn({6, 16}, {}, &gen), randn({6, 8}, {}, &gen));
  const train::FeatureFileIndex& index = writer.finish();
  ASSERT_EQ(index.shards.size(), 1u);
  const std::string shard = dir.file("f") + "/" + index.shards[0].file;
  const auto file = st::open(shard);
  const st::TensorInfo& hs = file->info(train::feature_tensor_name(1, "hidden_states"));
  write_bytes(shard, flipped(read_bytes(shard), hs.begin + 5, 2));
  train::OfflineFeatureSource source(dir.file("f"));
  EXPECT_NO_THROW(source.fetch({0}, kCPU));
  EXPECT_THROW_WITH(source.fetch({1}, kCPU),
                    {index.shards[0].file, "'1.hidden_states'", "does not match the checksum"});
}

}  // namespace
}  // namespace cg
