// Why this file exists: the drafter's own layout (issue 19 item 1) -- its heads, head_dim,
// MLP, RoPE, per-layer full / sliding attention -- and the target layer-id rule are what a
// published drafter checkpoint is made of; a wrong count, a window off by one or a layer
// id rounded the other way only shows as a drafter that loads but never gets accepted.
// These tests pin the parameter count of the published 27B-class layout, the rounding
// rule, the sliding rule in the training and the cached (inference) forwards against a
// dense-mask reference, and a toy-size run with sliding layers that learns.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "nn/dflash_drafter.h"
#include "nn_test_util.h"
#include "ops/ops.h"
#include "train/dflash_batch.h"
#include "train/dflash_block_drafter.h"
#include "train/drafter_step.h"
#include "train/drafter_trainer.h"
#include "train/pipeline.h"
#include "train/train_config.h"
#include "train_test_util.h"

namespace cg {
namespace {

using testing_nn::TempDir;
using testing_train::make_sequence;
using train::BlockBatch;
using train::DrafterSequence;

// The public DFlash drafter for Qwen3.6-27B (docs/dflash_training.md).
nn::DFlashDrafterConfig published_27b_layout() {
  nn::DFlashDrafterConfig c;
  c.layers.vocab_size = 248320;
  c.layers.hidden_size = 5120;
  c.layers.num_layers = 5;
  c.layers.num_heads = 32;
  c.layers.num_kv_heads = 8;
  c.layers.head_dim = 128;
  c.layers.intermediate_size = 17408;
  c.layers.rope_theta = 1e7;
  c.target_layers = {1, 16, 31, 46, 61};
  c.mask_token_id = 248070;
  using A = nn::DrafterAttention;
  c.layer_types = {A::sliding, A::sliding, A::sliding, A::sliding, A::full};
  c.sliding_window = 2048;
  return c;
}

TEST(DFlashLayout, Published27bDrafterHasAbout1_73BParameters) {
  // By hand, H = 5120, query width 32 x 128 = 4096, KV width 8 x 128 = 1024:
  const int64_t H = 5120, q = 4096, kv = 1024, mlp = 17408;
  const int64_t attention = H * q + 2 * H * kv + q * H + 2 * 128;  // q, k, v, o, q/k norms
  const int64_t layer = attention + 3 * H * mlp + 2 * H;           // + gate/up/down, 2 norms
  const int64_t fc = 5 * H * H;                                    // K = 5 target layers
  const int64_t total = fc + H + 5 * layer + H;                    // + hidden_norm, norm
  EXPECT_EQ(total, 1730213120);
  EXPECT_EQ(published_27b_layout().parameter_count(), total);
  EXPECT_NEAR(static_cast<double>(total) / 1e9, 1.73, 0.005);
}

// The module adds up to the count, at a small shape with the same structure (the query
// width differs from the hidden size; sliding and full layers).
TEST(DFlashLayout, TheModuleHasTheCountedParameters) {
  nn::DFlashDrafterConfig c = published_27b_layout();
  c.layers.vocab_size = 50;
  c.layers.hidden_size = 40;
  c.layers.num_heads = 4;
  c.layers.num_kv_heads = 2;
  c.layers.head_dim = 8;  // query width 32, not 40
  c.layers.intermediate_size = 72;
  c.mask_token_id = 49;
  c.sliding_window = 4;
  Generator gen(3);
  const Tensor table = randn({50, 40}, {}, &gen);
  nn::DFlashDrafter d(c, table, table, {.generator = &gen});
  EXPECT_EQ(d.num_parameters(), c.parameter_count());
  EXPECT_EQ(d.layer(0).self_attn->q_proj->weight.shape(), (Shape{32, 40}));
  EXPECT_EQ(d.layer(0).self_attn->o_proj->weight.shape(), (Shape{40, 32}));
}

// Note [Layer-id rounding] (nn/dflash_drafter.cpp): Python's round, half to even.
TEST(DFlashLayout, LayerIdRuleRoundsHalfToEven) {
  EXPECT_EQ(nn::dflash_target_layers(27, 3), (std::vector<int64_t>{1, 12, 24}));  // 12.5 -> 12
  EXPECT_EQ(nn::dflash_target_layers(64, 5), (std::vector<int64_t>{1, 16, 31, 46, 61}));
  EXPECT_EQ(nn::dflash_target_layers(36, 5), (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(nn::dflash_target_layers(29, 3), (std::vector<int64_t>{1, 14, 26}));  // 13.5 -> 14
  EXPECT_EQ(nn::dflash_target_layers(10, 5), (std::vector<int64_t>{1, 2, 4, 6, 7}));
  EXPECT_EQ(nn::dflash_target_layers(8, 5), (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

// An outside tester: num_target_features = 9 on the 8-layer toy target trained and
// exported target_layer_ids [1, 2, 2, 2, 3, 4, 4, 4, 5]; the rule now refuses to repeat
// a layer, as an explicit list with a layer twice is refused.
TEST(DFlashLayout, LayerIdRuleNeverRepeatsALayer) {
  for (int64_t L = 5; L <= 70; ++L) {
    for (int64_t n = 1; n <= L - 3; ++n) {
      const std::vector<int64_t> ids = nn::dflash_target_layers(L, n);
      for (size_t i = 1; i < ids.size(); ++i) EXPECT_LT(ids[i - 1], ids[i]) << L << " " << n;
    }
  }
  try {
    nn::dflash_target_layers(8, 9);
    ADD_FAILURE() << "8 layers gave 9 feature layers";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("at most 5 feature layers"), std::string::npos) << e.message();
  }
}

// Layer id l is the output of decoder layer l: Hugging Face's hidden_states[l + 1]
// (hidden_states[0] is the embedding). capture_layers = {0} is not the embedding.
TEST(DFlashLayout, LayerIdIsTheOutputOfThatDecoderLayer) {
  nn::Qwen3Config c;
  c.vocab_size = 30;
  c.hidden_size = 16;
  c.num_layers = 3;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.intermediate_size = 24;
  Generator gen(4);
  nn::Qwen3ForCausalLM lm(c, {.generator = &gen});
  NoGradGuard no_grad;
  const Tensor ids = from_ints({3, 7, 1, 9, 2}, {1, 5});
  const auto out = lm.forward(ids, {.capture_layers = {0, 1}, .logits = false});
  // hidden_states[1] by hand: the embedding through decoder layer 0.
  const Tensor h0 = lm.model->embed_tokens->forward(ids);
  const Tensor h1 = lm.model->layer(0).forward(h0, {}, AttentionMask::causal());
  const Tensor h2 = lm.model->layer(1).forward(h1, {}, AttentionMask::causal());
  EXPECT_EQ(out.layer_hidden[0].to_vector(), h1.to_vector());
  EXPECT_EQ(out.layer_hidden[1].to_vector(), h2.to_vector());
}

nn::DFlashDrafterConfig tiny_sliding_config(nn::DrafterAttention type, int64_t window) {
  nn::DFlashDrafterConfig c;
  c.layers.vocab_size = 40;
  c.layers.hidden_size = 16;
  c.layers.num_layers = 1;
  c.layers.num_heads = 3;
  c.layers.num_kv_heads = 1;
  c.layers.head_dim = 8;  // query width 24, not 16
  c.layers.intermediate_size = 24;
  c.layers.rope_theta = 10000;
  c.target_layers = {0, 1};
  c.mask_token_id = 39;
  c.layer_types = {type};
  c.sliding_window = window;
  return c;
}

std::unique_ptr<nn::DFlashDrafter> tiny_drafter(const nn::DFlashDrafterConfig& c) {
  Generator gen(11);  // the same weights whatever the layer type
  const Tensor embed = randn({40, 16}, {}, &gen, 0, 0.5);
  const Tensor head = randn({40, 16}, {}, &gen, 0, 0.5);
  return std::make_unique<nn::DFlashDrafter>(c, embed, head, nn::InitOptions{.generator = &gen});
}

// The sliding rule as a dense [Sq, Sk] mask, written from the notes' sentence: slot k of
// block b (anchor a) sees context keys a + k - (W - 1) <= j < a and slots k' <= k of its
// own block with k - k' <= W - 1.
Tensor dense_sliding_rule(const std::vector<int64_t>& anchors, int64_t S, int64_t bs, int64_t W) {
  const int64_t N = static_cast<int64_t>(anchors.size()), Sq = N * bs, Sk = S + Sq;
  std::vector<double> allowed(static_cast<size_t>(Sq * Sk), 0.0);
  for (int64_t b = 0; b < N; ++b) {
    const int64_t a = anchors[static_cast<size_t>(b)];
    for (int64_t k = 0; k < bs; ++k) {
      const int64_t row = b * bs + k;
      for (int64_t j = 0; j < S; ++j)
        if (j < a && j >= a + k - (W - 1)) allowed[static_cast<size_t>(row * Sk + j)] = 1;
      for (int64_t k2 = 0; k2 <= k; ++k2)
        if (k - k2 <= W - 1) allowed[static_cast<size_t>(row * Sk + S + b * bs + k2)] = 1;
    }
  }
  return to_dtype(from_vector(allowed, {Sq, Sk}), DType::boolean);
}

// A sliding layer runs the sliding rule: equal to a full-rule layer of the same weights
// under the dense sliding mask; different from the full rule where the window cuts, and
// where it does not (W >= context + block) different only in the block's causal part, so
// the last slot of each block, which sees its whole block either way, equals the full rule's.
TEST(DFlashLayout, SlidingLayerRunsTheSlidingRule) {
  const int64_t S = 16, bs = 4;
  const std::vector<int64_t> anchors = {3, 9, 15};
  const DrafterSequence s = make_sequence(S, 2, 4);
  const BlockBatch b = train::build_block_batch({&s}, {anchors}, 3, bs, 0.0, 39, 0);
  Generator gen(2);
  const Tensor features = randn({1, S, 32}, {}, &gen);
  const Tensor x = randn({1, 12, 16}, {}, &gen);
  const Tensor pos = from_ints(b.positions, {1, 12});
  const AttentionMask full_rule = AttentionMask::dflash_blocks(S, bs, from_ints(anchors, {3}));
  NoGradGuard no_grad;
  auto full = tiny_drafter(tiny_sliding_config(nn::DrafterAttention::full, 0));
  const std::vector<double> full_out =
      full->forward(x, pos, full_rule, full->fuse(features)).to_vector();
  for (int64_t W : std::vector<int64_t>{1, 3, 6, S + bs, 100}) {
    auto sliding = tiny_drafter(tiny_sliding_config(nn::DrafterAttention::sliding, W));
    const std::vector<double> out =
        sliding->forward(x, pos, full_rule, sliding->fuse(features)).to_vector();
    const std::vector<double> ref =
        full->forward(x, pos, AttentionMask::dense(dense_sliding_rule(anchors, S, bs, W)),
                      full->fuse(features))
            .to_vector();
    ASSERT_EQ(out.size(), ref.size());
    double differs_from_full = 0, last_slot_diff = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], ref[i], 1e-5) << "W " << W << " element " << i;
      differs_from_full = std::max(differs_from_full, std::abs(out[i] - full_out[i]));
      const int64_t slot = static_cast<int64_t>(i / 16) % bs;
      if (slot == bs - 1) last_slot_diff = std::max(last_slot_diff, std::abs(out[i] - full_out[i]));
    }
    EXPECT_GT(differs_from_full, 1e-4) << "W " << W << ": causal inside the block";
    if (W >= S + bs) {
      EXPECT_LT(last_slot_diff, 1e-5) << "W " << W << " cuts nothing: the last slot sees all";
    } else {
      EXPECT_GT(last_slot_diff, 1e-4) << "W " << W << " cuts context keys";
    }
  }
}

// Note [Sliding at inference]: the cached forward of a sliding drafter proposes what its
// training forward predicts, with the window cutting the cached context.
TEST(DFlashLayout, CachedSlidingDrafterMatchesTheTrainingForward) {
  nn::DFlashDrafterConfig c = tiny_sliding_config(nn::DrafterAttention::sliding, 5);
  c.layers.num_layers = 2;
  c.layer_types = {nn::DrafterAttention::sliding, nn::DrafterAttention::full};
  auto d = tiny_drafter(c);
  const DrafterSequence s = make_sequence(18, 2, 8);
  Generator gen(6);
  const Tensor features = randn({1, 18, 32}, {}, &gen);
  train::DFlashBlockDrafter bd(*d);
  for (int64_t anchor : {1, 7, 12}) {
    const BlockBatch b = train::build_block_batch({&s}, {{anchor}}, 1, 6, 0.0, 39, 0);
    LossConfig ce;
    ce.ignore_index = train::kIgnoreLabel;
    NoGradGuard no_grad;
    HeadLossResult r = train::drafter_loss(*d, {&b, features, Tensor()}, {ce, HeadLossPath::naive});
    const std::vector<double> am = r.argmax.to_vector();
    bd.reset();
    bd.append_context(reshape(narrow(features, 1, 0, anchor), {anchor, 32}), 0);
    const std::vector<int64_t> p = bd.propose(s.ids[static_cast<size_t>(anchor)], anchor, 6);
    ASSERT_EQ(p.size(), 5u);
    for (size_t k = 0; k < 5; ++k)
      EXPECT_EQ(p[k], static_cast<int64_t>(am[k + 1])) << "anchor " << anchor << " slot " << k + 1;
  }
}

// The config fields reach the drafter; bad ones are errors naming the field.
TEST(DFlashLayout, ConfigFieldsAndTheirErrors) {
  nlohmann::json j = {{"drafter",
                       {{"num_layers", 2},
                        {"num_heads", 4},
                        {"num_kv_heads", 2},
                        {"head_dim", 8},
                        {"rope_theta", 1e7},
                        {"layer_types", {"sliding_attention", "full_attention"}},
                        {"sliding_window", 16},
                        {"mask_token_id", 258}}}};
  const train::TrainConfig c = train::TrainConfig::from_json(j);
  EXPECT_EQ(train::TrainConfig::from_json(c.to_json()).to_json(), c.to_json());
  const nn::DFlashDrafterConfig dc =
      train::drafter_model_config(nn::Qwen3Config{.vocab_size = 260,
                                                  .hidden_size = 64,
                                                  .num_layers = 8,
                                                  .num_heads = 2,
                                                  .num_kv_heads = 1,
                                                  .head_dim = 32,
                                                  .intermediate_size = 192},
                                  c.drafter, 259);
  EXPECT_EQ(dc.layers.num_heads, 4);
  EXPECT_EQ(dc.layers.head_dim, 8);
  EXPECT_EQ(dc.layers.rope_theta, 1e7);
  EXPECT_EQ(dc.layers.hidden_size, 64);
  EXPECT_EQ(dc.mask_token_id, 258);
  EXPECT_EQ(dc.layer_types[0], nn::DrafterAttention::sliding);
  EXPECT_EQ(dc.sliding_window, 16);
  auto error_of = [](nlohmann::json d) {
    try {
      train::TrainConfig::from_json({{"drafter", d}});
    } catch (const Error& e) { return e.message(); }
    return std::string("no error");
  };
  EXPECT_NE(error_of({{"layer_types", {"sliding"}}}).find("drafter.layer_types: unknown type"),
            std::string::npos);
  EXPECT_NE(error_of({{"num_layers", 2}, {"layer_types", {"full_attention"}}})
                .find("1 entries for 2 layers"),
            std::string::npos);
  EXPECT_NE(error_of({{"layer_types", {"sliding_attention"}}}).find("drafter.sliding_window"),
            std::string::npos);
  EXPECT_NE(error_of({{"num_heads", 6}, {"num_kv_heads", 4}}).find("multiple of num_kv_heads"),
            std::string::npos);
  // A target model's width cannot be overridden.
  train::DrafterConfig wrong = c.drafter;
  wrong.hidden_size = 128;
  EXPECT_THROW(train::drafter_model_config(nn::Qwen3Config{.hidden_size = 64}, wrong, 0), Error);
}

// A toy-size drafter with its own heads and a sliding layer trains end to end (CPU).
TEST(DFlashLayout, ToyDrafterWithSlidingLayersLearns) {
  TempDir dir;
  train::TrainConfig c = testing_train::ci_train_config(dir.file("run"));
  auto& d = c.drafter;
  d.num_layers = 2;
  d.num_heads = 4;
  d.num_kv_heads = 2;
  d.head_dim = 8;  // query width 32 at hidden 32, its own split
  d.layer_types = {"sliding_attention", "full_attention"};
  d.sliding_window = 8;
  const nlohmann::json s = train::run_pipeline(c);
  const auto acc = s["per_slot_accuracy"].get<std::vector<double>>();
  EXPECT_GT(acc[1], 0.2) << "slot-1 accuracy (chance: 1/260)";
  EXPECT_TRUE(s["lossless"].get<bool>());
  // Every drafter step's log line has its time, rates, MFU and the allocator's peak.
  std::ifstream metrics(dir.file("run/metrics.jsonl"));
  int64_t steps = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (r["phase"] != "drafter") continue;
    ++steps;
    for (const char* field :
         {"ms", "context_tokens_per_s", "positions_per_s", "mfu", "peak_allocated_bytes"})
      EXPECT_GT(r[field].get<double>(), 0) << field << " of step " << r["step"];
  }
  EXPECT_EQ(steps, c.drafter.optim.steps);
}

}  // namespace
}  // namespace cg
