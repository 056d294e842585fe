// Why this file exists: the drafter's activation_checkpointing "layers" (issue 19 items 4
// and 5) must be a memory choice only: the same gradients of every parameter and input as
// the plain forward, on a drafter with sliding and full layers, and a lower allocator peak
// where the layers' activations dominate; a CI-sized run with it learns. Also the config
// field that selects it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autograd/graph_bytes.h"
#include "checkpoint_test_util.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "error_helpers.h"
#include "nn/dflash_drafter.h"
#include "nn_test_util.h"
#include "ops/ops.h"
#include "train/config_overrides.h"
#include "train/dflash_batch.h"
#include "train/drafter_model.h"
#include "train/drafter_step.h"
#include "train/pipeline.h"
#include "train/train_config.h"
#include "train_test_util.h"

namespace cg {
namespace {

using nn::ActivationCheckpointing;
using testing_checkpoint::small_drafter;

// Anchors spread over a context of S keys, blocks of bs: positions [1, N*bs] and the mask.
struct Blocks {
  Tensor positions;
  AttentionMask mask;
};
Blocks make_blocks(int64_t S, int64_t N, int64_t bs) {
  std::vector<int64_t> anchors, positions;
  for (int64_t b = 0; b < N; ++b) anchors.push_back(1 + b * (S - 2) / std::max<int64_t>(N - 1, 1));
  for (int64_t a : anchors)
    for (int64_t k = 0; k < bs; ++k) positions.push_back(a + k);
  return {from_ints(positions, {1, N * bs}),
          AttentionMask::dflash_blocks(S, bs, from_ints(anchors, {N}))};
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}
double max_abs(const Tensor& a) {
  double m = 0;
  for (double v : a.to_vector()) m = std::max(m, std::abs(v));
  return m;
}

// Every parameter's and both inputs' gradients, with and without checkpointing, f32: equal
// up to the order in which the context's gradient sums its layers' parts.
TEST(DFlashCheckpoint, GradientsEqualThePlainForward) {
  auto d = small_drafter(16, 24, 5);
  const int64_t S = 20, N = 3, bs = 4;
  const Blocks blocks = make_blocks(S, N, bs);
  Generator gen(3);
  Tensor features = randn({1, S, 32}, {}, &gen).requires_grad_();
  Tensor x = randn({1, N * bs, 16}, {}, &gen).requires_grad_();
  const Tensor up = randn({1, N * bs, 16}, {}, &gen);
  auto run = [&](ActivationCheckpointing mode) {
    d->set_activation_checkpointing(mode);
    d->zero_grad();
    features.set_grad(Tensor());
    x.set_grad(Tensor());
    const Tensor out = d->forward(x, blocks.positions, blocks.mask, d->fuse(features));
    // One CheckpointBackward per layer in place of the layers' nodes.
    const size_t checkpoints = graph_retained_bytes(out).nodes_by_name["CheckpointBackward"];
    EXPECT_EQ(checkpoints, mode == ActivationCheckpointing::layers ? 3u : 0u);
    sum(mul(out, up)).backward();
    std::vector<Tensor> grads = {out.detach(), x.grad(), features.grad()};
    for (const Tensor& p : d->parameters()) grads.push_back(p.grad());
    return grads;
  };
  const std::vector<Tensor> plain = run(ActivationCheckpointing::none);
  const std::vector<Tensor> ckpt = run(ActivationCheckpointing::layers);
  ASSERT_EQ(plain.size(), ckpt.size());
  const auto names = d->named_parameters();
  for (size_t i = 0; i < plain.size(); ++i) {
    const std::string what = i == 0   ? "output"
                             : i == 1 ? "x.grad"
                             : i == 2 ? "features.grad"
                                      : names[i - 3].first + ".grad";
    ASSERT_TRUE(plain[i].defined() && ckpt[i].defined()) << what;
    EXPECT_LE(max_abs_diff(plain[i], ckpt[i]), 1e-6 * std::max(1.0, max_abs(plain[i]))) << what;
  }
}

// The training step itself (drafter_loss: embed, fuse, layers, head loss), parameters only.
TEST(DFlashCheckpoint, DrafterLossStepGradientsEqual) {
  auto d = small_drafter(16, 24, 5);
  const train::DrafterSequence s = testing_train::make_sequence(24, 2, 5);
  const train::BlockBatch b = train::build_block_batch({&s}, {{2, 9, 17}}, 3, 5, 4.0, 39, 0);
  Generator gen(4);
  const Tensor features = randn({1, 24, 32}, {}, &gen);
  LossConfig ce;
  ce.ignore_index = train::kIgnoreLabel;
  auto run = [&](ActivationCheckpointing mode) {
    d->set_activation_checkpointing(mode);
    d->zero_grad();
    train::drafter_loss(*d, {&b, features, Tensor()}, {ce, HeadLossPath::fused}).loss.backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : d->parameters()) grads.push_back(p.grad());
    return grads;
  };
  const std::vector<Tensor> plain = run(ActivationCheckpointing::none);
  const std::vector<Tensor> ckpt = run(ActivationCheckpointing::layers);
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_LE(max_abs_diff(plain[i], ckpt[i]), 1e-6 * std::max(1.0, max_abs(plain[i]))) << i;
}

// Where the MLP's activations dominate (width 512 at hidden 32), the step's peak from the
// CPU allocator is well below the plain one: the plain forward keeps three layers of them,
// the checkpointed backward one at a time.
TEST(DFlashCheckpoint, PeakIsLowerWhereActivationsDominate) {
  auto d = small_drafter(32, 512, 5);
  const int64_t S = 64, N = 24, bs = 8;
  const Blocks blocks = make_blocks(S, N, bs);
  Generator gen(8);
  const Tensor features = randn({1, S, 64}, {}, &gen);
  const Tensor x = randn({1, N * bs, 32}, {}, &gen);
  CachingAllocator& alloc = allocator_for(kCPU);
  auto peak_above_start = [&](ActivationCheckpointing mode) {
    d->set_activation_checkpointing(mode);
    d->zero_grad();
    for (const Tensor& p : d->parameters()) p.set_grad(Tensor());
    const int64_t start = alloc.stats().allocated_bytes.current;
    alloc.reset_peak_stats();
    sum(d->forward(x, blocks.positions, blocks.mask, d->fuse(features))).backward();
    return alloc.stats().allocated_bytes.peak - start;
  };
  const int64_t plain = peak_above_start(ActivationCheckpointing::none);
  const int64_t ckpt = peak_above_start(ActivationCheckpointing::layers);
  RecordProperty("plain_peak_bytes", std::to_string(plain));
  RecordProperty("checkpointed_peak_bytes", std::to_string(ckpt));
  EXPECT_LT(ckpt, plain * 6 / 10) << "plain " << plain << " B, checkpointed " << ckpt << " B";
}

// The CI-sized run (tests/train_test_util.h) with checkpointed sliding and full layers
// trains end to end through the trainer and learns as the plain run does.
TEST(DFlashCheckpoint, ACheckpointedRunLearns) {
  testing_nn::TempDir dir;
  train::TrainConfig c = testing_train::ci_train_config(dir.file("run"));
  c.drafter.num_layers = 2;
  c.drafter.layer_types = {"sliding_attention", "full_attention"};
  c.drafter.sliding_window = 8;
  c.drafter.activation_checkpointing = "layers";
  const nlohmann::json s = train::run_pipeline(c);
  EXPECT_GT(s["per_slot_accuracy"].get<std::vector<double>>()[1], 0.2) << "chance: 1/260";
  EXPECT_TRUE(s["lossless"].get<bool>());
  EXPECT_EQ(s["config"]["drafter"]["activation_checkpointing"], "layers");
}

// drafter.activation_checkpointing: read, written, overridden with --set, passed to the
// drafter; anything but none / layers is an error naming the field before a run starts.
TEST(DFlashCheckpoint, ConfigField) {
  train::TrainConfig c;
  EXPECT_EQ(c.drafter.activation_checkpointing, "none");
  nlohmann::json j = c.to_json();
  EXPECT_EQ(j["drafter"]["activation_checkpointing"], "none");
  train::apply_config_override(j, "drafter.activation_checkpointing=layers");
  c = train::TrainConfig::from_json(j);
  EXPECT_EQ(c.drafter.activation_checkpointing, "layers");
  const nn::DFlashDrafterConfig dc = train::drafter_model_config(
      nn::Qwen3Config{.vocab_size = 260, .hidden_size = 64, .num_layers = 8}, c.drafter, 259);
  EXPECT_EQ(dc.activation_checkpointing, ActivationCheckpointing::layers);
  j["drafter"]["activation_checkpointing"] = "all";
  EXPECT_ERROR_HAS(train::TrainConfig::from_json(j), "drafter.activation_checkpointing", "none",
                   "layers", "'all'");
  EXPECT_ERROR_HAS(nn::parse_activation_checkpointing("full"), "none", "layers");
  EXPECT_STREQ(nn::activation_checkpointing_name(ActivationCheckpointing::layers), "layers");
}

}  // namespace
}  // namespace cg
