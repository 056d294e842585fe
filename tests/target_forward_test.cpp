// Why this file exists: the fast target forward of the feature stage
// (train/target_forward.h) and the target's direct load (train/feature_target.h): length
// buckets cover every sample once within the token budget; bucketed, padded forwards give
// each sample the features it gets alone; a bf16 sharded folder loads straight into bf16
// with no parameter initialised first, the values equal to the file's; and on a GPU the
// bf16 features stay within a stated tolerance of the f32 CPU ones.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "attention_test_util.h"
#include "core/backend.h"
#include "core/factories.h"
#include "nn/checkpoint.h"
#include "nn/init_mode.h"
#include "nn/safetensors.h"
#include "nn_test_util.h"
#include "ops/shape_ops.h"
#include "train/feature_target.h"
#include "train/target_forward.h"

namespace cg {
namespace {

namespace fs = std::filesystem;
using testing_nn::bit_equal;
using testing_nn::TempDir;

const fs::path kTiny = fs::path(CHUNKGRAD_TEST_DATA_DIR) / "qwen3_tiny_untied";

// Sequences of the given lengths with seeded ids below the tiny target's vocabulary (256).
std::vector<train::DrafterSequence> sequences(const std::vector<int64_t>& lengths) {
  std::vector<train::DrafterSequence> out;
  Generator g(11);
  for (int64_t len : lengths) {
    train::DrafterSequence s;
    for (int64_t t = 0; t < len; ++t) s.ids.push_back(static_cast<int64_t>(g.next_u64() % 256));
    s.loss_mask.assign(s.ids.size(), 1);
    out.push_back(std::move(s));
  }
  return out;
}

// attention_test_util.h's, on tensors (a size mismatch or a NaN counts as infinite).
double max_abs_diff(const Tensor& a, const Tensor& b) {
  return testing::max_abs_diff(a.to_vector(), b.to_vector());
}
double max_abs(const Tensor& a) { return testing::max_abs(a.to_vector()); }

TEST(TargetForward, LengthBucketsCoverEverySampleOnceWithinTheBudget) {
  const std::vector<int64_t> lengths = {5, 300, 17, 64, 65, 1000, 3, 128, 2, 70};
  const auto buckets = train::length_buckets(lengths, {.batch_tokens = 256, .round_to = 16});
  std::set<size_t> seen;
  int64_t last_length = 0;
  for (const auto& b : buckets) {
    ASSERT_FALSE(b.samples.empty());
    EXPECT_EQ(b.length % 16, 0);
    EXPECT_GE(b.length, last_length) << "buckets go by length";
    last_length = b.length;
    // Within the budget, except a sample longer than it, which runs alone.
    if (b.samples.size() > 1) EXPECT_LE(static_cast<int64_t>(b.samples.size()) * b.length, 256);
    for (size_t i : b.samples) {
      EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
      EXPECT_LE(lengths[i], b.length);
    }
  }
  EXPECT_EQ(seen.size(), lengths.size());
  // batch_tokens 0: one sample a bucket, in order, unpadded.
  const auto ones = train::length_buckets(lengths, {});
  ASSERT_EQ(ones.size(), lengths.size());
  for (size_t i = 0; i < ones.size(); ++i) {
    EXPECT_EQ(ones[i].samples, std::vector<size_t>{i});
    EXPECT_EQ(ones[i].length, lengths[i]);
  }
}

// Note [Length buckets]: a padded, batched forward gives each sample its own features.
TEST(TargetForward, BucketedForwardsEqualOneSampleAtATime) {
  const train::FeatureTarget target = train::load_feature_target(kTiny.string(), kCPU);
  const auto seqs = sequences({9, 23, 4, 31, 16, 2});
  const std::vector<int64_t> layers = {1, 0};
  std::vector<int64_t> lengths;
  for (const auto& s : seqs) lengths.push_back(static_cast<int64_t>(s.ids.size()));
  const auto buckets = train::length_buckets(lengths, {.batch_tokens = 96, .round_to = 8});
  ASSERT_LT(buckets.size(), seqs.size()) << "some bucket must hold several samples";
  for (const auto& b : buckets) {
    const auto got = train::bucket_features(*target.lm, seqs, b, layers, DType::f32);
    ASSERT_EQ(got.size(), b.samples.size());
    for (size_t r = 0; r < b.samples.size(); ++r) {
      const auto& s = seqs[b.samples[r]];
      const train::SampleFeatures alone = train::sample_features(*target.lm, s, layers);
      ASSERT_EQ(got[r].hidden_states.shape(), (Shape{static_cast<int64_t>(s.ids.size()), 64}));
      EXPECT_LE(max_abs_diff(got[r].hidden_states, alone.hidden_states), 1e-5);
      EXPECT_LE(max_abs_diff(got[r].last_hidden, alone.last_hidden), 1e-5);
    }
  }
}

// A bf16 checkpoint in shards (model.safetensors.index.json) loads straight into bf16: no
// parameter is initialised on the way (parameter_inits() does not move) and every value is
// the file's, bit for bit; asked for f32, the same values widened.
TEST(TargetForward, ABf16ShardedFolderLoadsStraightIntoBf16WithoutInit) {
  TempDir dir;
  const fs::path folder = dir.file("bf16_target");
  fs::create_directories(folder);
  fs::copy_file(kTiny / "config.json", folder / "config.json");
  {
    const auto source = train::load_feature_target(kTiny.string(), kCPU);
    source.lm->to(DType::bf16);
    nn::save_checkpoint_sharded(*source.lm, folder.string(), 16 * 1024);
  }
  ASSERT_TRUE(fs::exists(folder / "model.safetensors.index.json"));
  const auto reader = safetensors::open(folder.string());
  const int64_t inits = nn::parameter_inits();
  const train::FeatureTarget bf16 = train::load_feature_target(folder.string(), kCPU, DType::bf16);
  EXPECT_EQ(nn::parameter_inits(), inits) << "a load from a checkpoint initialised parameters";
  EXPECT_EQ(bf16.dtype, DType::bf16);
  const train::FeatureTarget f32 = train::load_feature_target(folder.string(), kCPU);
  int64_t checked = 0;
  for (const auto& [name, p] : bf16.lm->named_parameters()) {
    const Tensor file = reader->load(name, kCPU);
    EXPECT_EQ(p.dtype(), DType::bf16) << name;
    EXPECT_TRUE(bit_equal(p.detach(), file)) << name;
    EXPECT_TRUE(bit_equal(f32.lm->parameter(name).detach(), to_dtype(file, DType::f32))) << name;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int64_t>(reader->names().size()));
  // The counter does count a model built the usual way.
  nn::Qwen3ForCausalLM initialised(bf16.lm->config());
  EXPECT_GT(nn::parameter_inits(), inits);
}

// Note [Length buckets] on the GPU: the bf16 target (cuDNN's causal attention) against the
// f32 CPU one, on the tiny target. Tolerance: per tensor, the largest difference at most 2%
// of the tensor's largest magnitude (bf16 keeps 8 bits: about 0.4% per rounding, compounded
// over two layers' GEMMs, norms and residual adds; the H200 measured 0.75% at worst); a
// layer-id or padding mistake moves values by their own size.
TEST(TargetForward, Bf16OnTheGpuMatchesF32OnTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  const train::FeatureTarget cpu = train::load_feature_target(kTiny.string(), kCPU);
  const train::FeatureTarget gpu =
      train::load_feature_target(kTiny.string(), Device::parse("cuda"), DType::bf16);
  EXPECT_EQ(gpu.lm->model->embed_tokens->weight.dtype(), DType::bf16);
  const auto seqs = sequences({40, 7, 64, 33, 2, 17});
  const std::vector<int64_t> layers = {0, 1};
  std::vector<int64_t> lengths;
  for (const auto& s : seqs) lengths.push_back(static_cast<int64_t>(s.ids.size()));
  for (const auto& b : train::length_buckets(lengths, {.batch_tokens = 160, .round_to = 16})) {
    const auto got = train::bucket_features(*gpu.lm, seqs, b, layers, DType::f32);
    for (size_t r = 0; r < b.samples.size(); ++r) {
      const train::SampleFeatures want =
          train::sample_features(*cpu.lm, seqs[b.samples[r]], layers);
      const double hs = max_abs_diff(got[r].hidden_states, want.hidden_states);
      const double last = max_abs_diff(got[r].last_hidden, want.last_hidden);
      EXPECT_LE(hs, 0.02 * max_abs(want.hidden_states)) << "sample " << b.samples[r];
      EXPECT_LE(last, 0.02 * max_abs(want.last_hidden)) << "sample " << b.samples[r];
      std::printf(
          "sample %zu (%zu tokens): max |gpu bf16 - cpu f32| %.4g (layers, max %.3g), "
          "%.4g (final norm, max %.3g)\n",
          b.samples[r], seqs[b.samples[r]].ids.size(), hs, max_abs(want.hidden_states), last,
          max_abs(want.last_hidden));
    }
  }
}

}  // namespace
}  // namespace cg
