// Why this file exists: chunkgrad's DFlash drafter checked against an independent PyTorch
// implementation of the public module (issue 20, golden tests), not only against itself.
// tests/golden/make_drafter_golden.py wrote two random drafters in the public layout
// (drafter_sliding/: a sliding and a full layer, window 5, block 4, q width 96 != hidden 64,
// its own rope theta 1e4; drafter_full/: three full layers, block 8) over the tiny
// transformers Qwen3 (tiny_qwen3/: its embed_tokens and lm_head, its hidden states as the
// features) and, with tests/golden/dflash_reference.py, the block logits under SpecForge's
// training mask (drafter_golden.safetensors). Here chunkgrad reads each folder with its
// export reader (load_public_drafter: config.json field by field, then the bf16 tensors)
// and its block logits must equal the reference's, on the CPU and on the GPU; the cached
// (inference) forward must equal them block by block; and for the drafter without
// sliding layers they also equal the reference's own unmasked inference forward.
//
// Note [Label shift]: slot k of the block at anchor a is trained to predict the token at
// a + k (SpecForge: "position k predicts token anchor+k"; slot 0 is the anchor itself and
// carries no loss), and runs at RoPE position a + k. A trainer one off in either trains a
// drafter that serves near-zero acceptance. TrainingBatchHasTheReferenceLabels checks the
// batch the trainer builds against the reference's labels and its per-slot loss against
// the loss computed from the reference's logits; ShiftedPositionsBreakTheComparison shows
// the logits comparison catches a position shifted by one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/backend.h"
#include "core/factories.h"
#include "core/views.h"
#include "nn/dflash_drafter.h"
#include "nn/safetensors.h"
#include "ops/ops.h"
#include "tests/golden_test_util.h"
#include "tests/nn_test_util.h"
#include "train/dflash_batch.h"
#include "train/drafter_export.h"
#include "train/drafter_model.h"
#include "train/drafter_step.h"
#include "train/feature_target.h"
#include "train/train_config.h"

namespace cg {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing_golden::rel_diff;

const std::string kGolden = std::string(CHUNKGRAD_TEST_DATA_DIR) + "/../golden";
const std::string kData = kGolden + "/drafter_golden.safetensors";
constexpr double kCpuRelTol = 2e-5;  // f32 both sides, other summation orders
constexpr double kGpuRelTol = 2e-3;  // the GPU's f32 GEMMs (TF32 where allowed) and attention

bool have_goldens() {
  return fs::exists(kData) && fs::exists(kGolden + "/tiny_qwen3/config.json") &&
         fs::exists(kGolden + "/drafter_sliding/config.json") &&
         fs::exists(kGolden + "/drafter_full/config.json");
}
#define SKIP_WITHOUT_GOLDENS()                                          \
  if (!have_goldens())                                                  \
  GTEST_SKIP() << "no " << kData                                        \
               << ": make it on a machine with torch and transformers " \
                  "(tests/golden/make_qwen3_golden.py, then make_drafter_golden.py)"

std::vector<int64_t> ints(const Tensor& t) {
  const std::vector<double> v = t.to_vector();
  return std::vector<int64_t>(v.begin(), v.end());
}

// The drafter a public config.json describes (the fields `chunkgrad export` writes).
nn::DFlashDrafterConfig drafter_config_of(const json& c) {
  nn::DFlashDrafterConfig dc;
  dc.layers.vocab_size = c["vocab_size"];
  dc.layers.hidden_size = c["hidden_size"];
  dc.layers.num_layers = c["num_hidden_layers"];
  dc.layers.num_heads = c["num_attention_heads"];
  dc.layers.num_kv_heads = c["num_key_value_heads"];
  dc.layers.head_dim = c["head_dim"];
  dc.layers.intermediate_size = c["intermediate_size"];
  dc.layers.rope_theta = c["rope_theta"];
  dc.layers.rms_eps = c["rms_norm_eps"];
  dc.target_layers = c["dflash_config"]["target_layer_ids"].get<std::vector<int64_t>>();
  dc.mask_token_id = c["dflash_config"]["mask_token_id"];
  for (const auto& t : c["layer_types"]) dc.layer_types.push_back(nn::parse_drafter_attention(t));
  dc.sliding_window = c["sliding_window"].is_null() ? 0 : c["sliding_window"].get<int64_t>();
  return dc;
}

// One golden drafter ("sliding" or "full"), loaded on `device`, and its reference data.
struct GoldenDrafter {
  std::string name;
  train::FeatureTarget target;
  std::unique_ptr<nn::DFlashDrafter> drafter;
  train::PublicDrafterInfo info;
  std::unique_ptr<safetensors::Reader> data = safetensors::open(kData);
  int64_t S = 0, N = 0, Bk = 0, V = 0;

  GoldenDrafter(const std::string& which, Device device)
      : name(which), target(train::load_feature_target(kGolden + "/tiny_qwen3", device)) {
    const std::string dir = kGolden + "/drafter_" + which;
    std::ifstream in(dir + "/config.json");
    const json c = json::parse(in);
    const nn::DFlashDrafterConfig dc = drafter_config_of(c);
    info.block_size = c["block_size"];
    info.num_target_layers = c["num_target_layers"];
    info.max_position_embeddings = c["max_position_embeddings"];
    drafter = std::make_unique<nn::DFlashDrafter>(dc, target.lm->model->embed_tokens->weight,
                                                  target.lm->lm_head->weight,
                                                  nn::InitOptions{.device = device});
    train::load_public_drafter(*drafter, info, dir);  // checks config.json field by field
    S = at("ids").size(0);
    N = at("anchors").size(0);
    Bk = info.block_size;
    V = dc.layers.vocab_size;
  }
  Tensor at(const std::string& key) const { return data->load(name + "." + key, kCPU); }
  Device device() const { return drafter->fc->weight.device(); }

  // Block logits [N*Bk, V] under the training mask, the block at `positions` [N*Bk].
  Tensor training_logits(const std::vector<int64_t>& block_ids,
                         const std::vector<int64_t>& positions) const {
    NoGradGuard no_grad;
    const TensorOptions i64{.dtype = DType::i64, .device = device()};
    const Tensor features =
        to_device(reshape(at("features"), {1, S, at("features").size(1)}), device());
    const Tensor x = drafter->embed(from_ints(block_ids, {1, N * Bk}, i64));
    const AttentionMask mask =
        AttentionMask::dflash_blocks(S, Bk, to_device(at("anchors"), device()));
    const Tensor h =
        drafter->forward(x, from_ints(positions, {1, N * Bk}, i64), mask, drafter->fuse(features));
    return linear(reshape(h, {N * Bk, h.size(2)}), drafter->head_weight());
  }
  std::vector<int64_t> golden_positions() const {
    std::vector<int64_t> p;
    for (int64_t a : ints(at("anchors")))
      for (int64_t k = 0; k < Bk; ++k) p.push_back(a + k);
    return p;
  }
  // The cached (inference) forward, one block at a time: context = features[:anchor].
  Tensor cached_logits() const {
    NoGradGuard no_grad;
    const TensorOptions i64{.dtype = DType::i64, .device = device()};
    const Tensor features = to_device(at("features"), device());
    const std::vector<int64_t> block_ids = ints(at("block_ids"));
    std::vector<Tensor> rows;
    for (int64_t b = 0; b < N; ++b) {
      const int64_t a = ints(at("anchors"))[static_cast<size_t>(b)];
      std::vector<nn::DrafterLayerCache> cache(drafter->num_layers());
      if (a > 0) {
        const Tensor ctx =
            drafter->fuse(reshape(narrow(features, 0, 0, a), {1, a, features.size(1)}));
        const Tensor pos = nn::RotaryEmbedding::positions(0, a, device());
        for (size_t i = 0; i < cache.size(); ++i)
          cache[i] = drafter->context_keys_values(i, ctx, pos);
      } else {
        const int64_t kv = drafter->config().layers.num_kv_heads,
                      hd = drafter->config().layers.head_dim;
        for (auto& c : cache) {
          c.k = zeros({1, 0, kv, hd}, {.device = device()});
          c.v = zeros({1, 0, kv, hd}, {.device = device()});
        }
      }
      const std::vector<int64_t> ids(block_ids.begin() + b * Bk, block_ids.begin() + (b + 1) * Bk);
      const Tensor x = drafter->embed(from_ints(ids, {1, Bk}, i64));
      const Tensor h =
          drafter->forward_cached(x, nn::RotaryEmbedding::positions(a, Bk, device()), cache);
      rows.push_back(linear(reshape(h, {Bk, h.size(2)}), drafter->head_weight()));
    }
    return cat(rows, 0);
  }
};

void check_training_logits(const std::string& which, Device device, double tol) {
  const GoldenDrafter g(which, device);
  const Tensor logits = g.training_logits(ints(g.at("block_ids")), g.golden_positions());
  EXPECT_LE(rel_diff(logits, g.at("logits")), tol) << which << ": block logits";
}

TEST(DFlashDrafterGolden, BlockLogitsEqualTheReferenceOnTheCpu) {
  SKIP_WITHOUT_GOLDENS();
  for (const char* which : {"sliding", "full"}) check_training_logits(which, kCPU, kCpuRelTol);
}

TEST(DFlashDrafterGolden, BlockLogitsEqualTheReferenceOnTheGpu) {
  SKIP_WITHOUT_GOLDENS();
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  for (const char* which : {"sliding", "full"})
    check_training_logits(which, cuda_device(), kGpuRelTol);
}

// Inference: a full-layer drafter's cached forward is z-lab's unmasked forward (context
// before the anchor, the whole block), which for full layers is the training mask exactly;
// a sliding drafter's cached forward keeps the sliding rule (window, causal block), so it
// equals the training logits and not the reference's unmasked forward.
TEST(DFlashDrafterGolden, CachedForwardEqualsTheReference) {
  SKIP_WITHOUT_GOLDENS();
  {
    const GoldenDrafter full("full", kCPU);
    EXPECT_LE(rel_diff(full.at("inference_logits"), full.at("logits")), kCpuRelTol)
        << "the reference's own two forwards agree for full layers";
    EXPECT_LE(rel_diff(full.cached_logits(), full.at("inference_logits")), kCpuRelTol);
  }
  const GoldenDrafter sliding("sliding", kCPU);
  const Tensor cached = sliding.cached_logits();
  EXPECT_LE(rel_diff(cached, sliding.at("logits")), kCpuRelTol);
  EXPECT_GT(rel_diff(cached, sliding.at("inference_logits")), 100 * kCpuRelTol)
      << "a sliding layer run unmasked is another model";
}

// Note [Label shift]: the batch the trainer builds for the reference's ids and anchors has
// the reference's block tokens, positions anchor + k and labels ids[anchor + k] (slot 0
// ignored), and the per-slot loss it computes is the cross-entropy of the reference's logits
// at those labels.
TEST(DFlashDrafterGolden, TrainingBatchHasTheReferenceLabels) {
  SKIP_WITHOUT_GOLDENS();
  for (const char* which : {"sliding", "full"}) {
    const GoldenDrafter g(which, kCPU);
    train::DrafterSequence s;
    s.ids = ints(g.at("ids"));
    s.loss_mask.assign(s.ids.size(), 1);
    const std::vector<int64_t> anchors = ints(g.at("anchors"));
    const train::BlockBatch b = train::build_block_batch({&s}, {anchors}, g.N, g.Bk, 0.0,
                                                         g.drafter->config().mask_token_id, 0);
    EXPECT_EQ(b.block_ids, ints(g.at("block_ids"))) << which;
    EXPECT_EQ(b.positions, g.golden_positions()) << which;
    const std::vector<int64_t> want = ints(g.at("labels"));  // [N, Bk]: ids[anchor + k]
    ASSERT_EQ(b.labels.size(), want.size());
    for (size_t r = 0; r < want.size(); ++r) {
      const int64_t k = static_cast<int64_t>(r) % g.Bk;
      const int64_t pos = anchors[r / static_cast<size_t>(g.Bk)] + k;
      if (k == 0 || pos >= g.S)
        EXPECT_EQ(b.labels[r], train::kIgnoreLabel) << which << " row " << r;
      else
        EXPECT_EQ(b.labels[r], want[r]) << which << " row " << r << " (slot " << k << ")";
    }
    // The trainer's loss path on this batch: per-row CE of the reference's logits.
    LossConfig ce;
    ce.ignore_index = train::kIgnoreLabel;
    NoGradGuard no_grad;
    const Tensor features = reshape(g.at("features"), {1, g.S, g.at("features").size(1)});
    const HeadLossResult r =
        train::drafter_loss(*g.drafter, {&b, features, Tensor()}, {ce, HeadLossPath::naive});
    const std::vector<double> per_row = r.per_token.to_vector();
    const std::vector<double> logits = g.at("logits").to_vector();
    ASSERT_EQ(per_row.size(), b.labels.size());
    for (size_t row = 0; row < per_row.size(); ++row) {
      if (b.labels[row] == train::kIgnoreLabel) continue;
      const double* l = logits.data() + row * static_cast<size_t>(g.V);
      double mx = l[0], sum = 0;
      for (int64_t v = 1; v < g.V; ++v) mx = std::max(mx, l[v]);
      for (int64_t v = 0; v < g.V; ++v) sum += std::exp(l[v] - mx);
      const double want_ce = mx + std::log(sum) - l[b.labels[row]];
      EXPECT_NEAR(per_row[row], want_ce, 1e-4 * std::max(1.0, want_ce)) << which << " row " << row;
    }
  }
}

// Note [Label shift]: a block run at anchor + k + 1 (or fed the token after the anchor)
// gives other logits by far more than the tolerance, so the comparison above catches it.
TEST(DFlashDrafterGolden, ShiftedPositionsBreakTheComparison) {
  SKIP_WITHOUT_GOLDENS();
  const GoldenDrafter g("full", kCPU);
  std::vector<int64_t> shifted = g.golden_positions();
  for (int64_t& p : shifted) ++p;
  EXPECT_GT(rel_diff(g.training_logits(ints(g.at("block_ids")), shifted), g.at("logits")),
            100 * kCpuRelTol);
  std::vector<int64_t> next_token = ints(g.at("block_ids"));
  const std::vector<int64_t> ids = ints(g.at("ids")), anchors = ints(g.at("anchors"));
  for (int64_t b = 0; b < g.N; ++b)
    next_token[static_cast<size_t>(b * g.Bk)] =
        ids[static_cast<size_t>(anchors[static_cast<size_t>(b)] + 1)];
  EXPECT_GT(rel_diff(g.training_logits(next_token, g.golden_positions()), g.at("logits")),
            100 * kCpuRelTol);
}

// The cross-load toward PyTorch (issue 20, "Done means"): a folder written by `chunkgrad
// export` and the block logits chunkgrad computes with it, written beside it as
// chunkgrad_logits.safetensors (features, ids, anchors, logits) for
// tests/golden/check_exported_drafter.py to recompute with the reference. The folder is
// $CHUNKGRAD_CROSSLOAD_DIR when set: when it already holds an export of a drafter for the
// tiny target (the recipe's), that one is used; otherwise a random drafter for the tiny
// target (a sliding and a full layer) is saved as a chunkgrad checkpoint and exported
// there by the code of `chunkgrad export --checkpoint` (the checkpoint is kept at
// $CHUNKGRAD_CROSSLOAD_CHECKPOINT when set, for the program itself to export it too).
TEST(DFlashDrafterGolden, ExportForTheReference) {
  SKIP_WITHOUT_GOLDENS();
  testing_nn::TempDir tmp;
  const char* env = std::getenv("CHUNKGRAD_CROSSLOAD_DIR");
  const std::string dir = env && *env ? std::string(env) : tmp.file("export");
  const train::FeatureTarget target = train::load_feature_target(kGolden + "/tiny_qwen3", kCPU);
  const Tensor embed = target.lm->model->embed_tokens->weight;
  const Tensor head = target.lm->lm_head->weight;
  if (!fs::exists(dir + "/config.json")) {
    train::TrainConfig config;
    config.target.checkpoint = kGolden + "/tiny_qwen3";
    config.target.hf_config = kGolden + "/tiny_qwen3/config.json";
    config.drafter.num_layers = 2;
    config.drafter.intermediate_size = 96;
    config.drafter.target_layers = {0, 2};
    config.drafter.mask_token_id = 1003;
    config.drafter.layer_types = {"sliding_attention", "full_attention"};
    config.drafter.sliding_window = 6;
    config.drafter.block_size = 4;
    config.drafter.rope_theta = 2e5;
    const nn::DFlashDrafterConfig dc = train::run_drafter_config(config);
    Generator gen(29);
    nn::DFlashDrafter d(dc, embed, head, nn::InitOptions{.generator = &gen});
    safetensors::NamedTensors tensors;
    for (const auto& [n, p] : d.named_parameters())
      tensors.emplace_back("drafter." + n, p.detach());
    // $CHUNKGRAD_CROSSLOAD_CHECKPOINT keeps the checkpoint, for `chunkgrad export` itself.
    const char* keep = std::getenv("CHUNKGRAD_CROSSLOAD_CHECKPOINT");
    const std::string ckpt =
        keep && *keep ? std::string(keep) : tmp.file("step_00000001.safetensors");
    safetensors::save_file(tensors, ckpt,
                           {{"format", "chunkgrad-dflash-drafter-1"},
                            {"step", "1"},
                            {"config", config.to_json().dump()}});
    train::export_drafter_checkpoint("", ckpt, dir);
  }
  std::ifstream in(dir + "/config.json");
  const json c = json::parse(in);
  const nn::DFlashDrafterConfig dc = drafter_config_of(c);
  train::PublicDrafterInfo info;
  info.block_size = c["block_size"];
  info.num_target_layers = c["num_target_layers"];
  info.max_position_embeddings = c["max_position_embeddings"];
  nn::DFlashDrafter drafter(dc, embed, head);
  train::load_public_drafter(drafter, info, dir);
  // Features of the golden 40 tokens at the drafter's target layers; 4 blocks.
  const auto data = safetensors::open(kData);
  train::DrafterSequence s;
  s.ids = ints(data->load("full.ids", kCPU));
  s.loss_mask.assign(s.ids.size(), 1);
  const int64_t S = static_cast<int64_t>(s.ids.size()), Bk = info.block_size, N = 4;
  const Tensor features = train::sample_features(*target.lm, s, dc.target_layers).hidden_states;
  std::vector<int64_t> anchors, block_ids, positions;
  for (int64_t b = 0; b < N; ++b) anchors.push_back(b * (S - 2) / N);
  for (int64_t a : anchors)
    for (int64_t k = 0; k < Bk; ++k) {
      block_ids.push_back(k == 0 ? s.ids[static_cast<size_t>(a)] : dc.mask_token_id);
      positions.push_back(a + k);
    }
  NoGradGuard no_grad;
  const Tensor h = drafter.forward(drafter.embed(from_ints(block_ids, {1, N * Bk})),
                                   from_ints(positions, {1, N * Bk}),
                                   AttentionMask::dflash_blocks(S, Bk, from_ints(anchors, {N})),
                                   drafter.fuse(reshape(features, {1, S, features.size(1)})));
  const Tensor logits = linear(reshape(h, {N * Bk, h.size(2)}), drafter.head_weight());
  safetensors::NamedTensors out;
  out.emplace_back("features", contiguous(features));
  out.emplace_back("ids", from_ints(s.ids, {S}));
  out.emplace_back("anchors", from_ints(anchors, {N}));
  out.emplace_back("logits", contiguous(logits));
  safetensors::save_file(out, dir + "/chunkgrad_logits.safetensors",
                         {{"made_by", "DFlashDrafterGolden.ExportForTheReference"}});
  EXPECT_EQ(logits.shape(), (Shape{N * Bk, dc.layers.vocab_size}));
  // A folder made here is a random drafter: its logits must not be degenerate.
  const std::vector<double> v = logits.to_vector();
  EXPECT_GT(*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end()), 1.0);
  if (env && *env) std::cout << "wrote " << dir << "/chunkgrad_logits.safetensors\n";
}

}  // namespace
}  // namespace cg
