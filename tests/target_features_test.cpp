// Why this file exists: features.source "target" (train/target_features.h) computes each
// step's features with a Hugging Face target in the training process. Its batches must be
// exactly what the offline path would hand out for the same samples -- each sample's own
// forward, zeros past its end -- and a run that cannot work (no MASK id for a real
// vocabulary, a run directory given as the target) is refused before any work.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "nn_test_util.h"
#include "train/feature_target.h"
#include "train/target_features.h"

namespace cg {
namespace {

namespace fs = std::filesystem;
using testing_nn::TempDir;

std::string tiny_target() {
  return (fs::path(CHUNKGRAD_TEST_DATA_DIR) / "qwen3_tiny_untied").string();
}

train::DrafterSequence seq(int64_t length, int64_t salt) {
  train::DrafterSequence s;
  for (int64_t i = 0; i < length; ++i) {
    s.ids.push_back((i * 37 + salt * 11 + 5) % 256);
    s.loss_mask.push_back(i >= length / 2 ? 1 : 0);
  }
  return s;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// Rows of a fetched batch equal each sample's own forward (sample_features), and the
// positions past a sample's end are zero.
TEST(TargetFeatures, BatchEqualsEachSamplesOwnForwardZeroPadded) {
  const train::FeatureTarget target = train::load_feature_target(tiny_target(), kCPU);
  const std::vector<int64_t> layers = {1, 0};
  std::vector<train::DrafterSequence> seqs = {seq(5, 0), seq(11, 1), seq(3, 2), seq(8, 3)};
  train::TargetFeatureSource source(*target.lm, seqs, layers, "tiny");
  EXPECT_EQ(source.seq_len(), 11);
  EXPECT_EQ(source.num_feature_layers(), 2);
  EXPECT_EQ(source.hidden_size(), 32);
  EXPECT_TRUE(source.has_last_hidden());
  const train::FeatureBatch b = source.fetch({2, 0}, kCPU);  // longest in the batch: 5
  ASSERT_EQ(b.hidden_states.shape(), (Shape{2, 11, 64}));
  ASSERT_EQ(b.last_hidden.shape(), (Shape{2, 11, 32}));
  const std::vector<double> hs = b.hidden_states.to_vector(), last = b.last_hidden.to_vector();
  const int64_t rows[2] = {2, 0};
  for (int r = 0; r < 2; ++r) {
    const train::DrafterSequence& s = seqs[static_cast<size_t>(rows[r])];
    const train::SampleFeatures own = train::sample_features(*target.lm, s, layers);
    const int64_t n = static_cast<int64_t>(s.ids.size());
    std::vector<double> got_hs(hs.begin() + r * 11 * 64, hs.begin() + r * 11 * 64 + n * 64);
    std::vector<double> got_last(last.begin() + r * 11 * 32, last.begin() + r * 11 * 32 + n * 32);
    EXPECT_LE(max_diff(got_hs, own.hidden_states.to_vector()), 1e-5) << "row " << r;
    EXPECT_LE(max_diff(got_last, own.last_hidden.to_vector()), 1e-5) << "row " << r;
    for (int64_t i = r * 11 * 64 + n * 64; i < (r + 1) * 11 * 64; ++i)
      ASSERT_EQ(hs[static_cast<size_t>(i)], 0.0) << "row " << r << " past its end";
  }
}

TEST(TargetFeatures, LayerOutsideTheTargetIsRefused) {
  const train::FeatureTarget target = train::load_feature_target(tiny_target(), kCPU);
  try {
    train::TargetFeatureSource source(*target.lm, {seq(4, 0)}, {2}, "tiny");
    FAIL() << "layer 2 of a 2-layer target was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("layer 2 is not a layer of the target (0 .. 1)"), std::string::npos)
        << e.message();
  }
}

train::TrainConfig target_config(const std::string& data) {
  train::TrainConfig c;
  c.features.source = "target";
  c.features.target = tiny_target();
  c.features.data = {data};
  c.drafter.target_layers = {0, 1};
  c.eval.accuracy_sequences = 2;
  return c;
}

std::string write_samples(const TempDir& dir, int count) {
  const std::string path = dir.file("samples.jsonl");
  std::ofstream out(path);
  for (int i = 0; i < count; ++i) {
    out << "{\"input_ids\": [" << 3 + i << ", 7, 9, " << 11 + i
        << "], \"loss_mask\": [0, 0, 1, 1]}\n";
  }
  return path;
}

TEST(TargetFeatures, OpenHoldsOutTheLastSamples) {
  TempDir dir;
  train::TrainConfig c = target_config(write_samples(dir, 9));
  c.drafter.mask_token_id = 255;
  const train::TargetRun r = train::open_target_run(c, kCPU);
  ASSERT_TRUE(r.held);
  EXPECT_EQ(r.train->sequences().size(), 7u);
  EXPECT_EQ(r.held->sequences().size(), 2u);
  EXPECT_EQ(r.held->sequences()[1].ids[0], 3 + 8);  // the file's last line
  EXPECT_NE(r.data_fingerprint.find(r.target.fingerprint), std::string::npos);
}

TEST(TargetFeatures, RealVocabularyNeedsTheMaskId) {
  TempDir dir;
  const train::TrainConfig c = target_config(write_samples(dir, 4));  // mask_token_id -1
  try {
    train::open_target_run(c, kCPU);
    FAIL() << "a Hugging Face target ran with the byte tokenizer's MASK id";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("drafter.mask_token_id"), std::string::npos) << e.message();
  }
}

TEST(TargetFeatures, ConfigNeedsTargetAndData) {
  train::TrainConfig c;
  c.features.source = "target";
  EXPECT_THROW(c.validate(), Error);
  c.features.target = tiny_target();
  c.features.data = {"x.jsonl"};
  c.features.source = "online";
  try {
    c.validate();
    FAIL() << "features.target was accepted with source online";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("set source to target"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace cg
