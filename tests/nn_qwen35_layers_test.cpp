// Why this file exists: the Qwen3.5 pieces of the target model besides the DeltaNet
// (issue 21 item 2): the zero-centred RMSNorm, the per-head query/gate split of gated
// attention (against a hand-computed case that the "two halves of q_proj" reading would
// fail), partial rotary against a direct reference, a full-attention-only hybrid model
// (parameter count, cached decoding equal to the full forward), and the checkpoint name
// map of both Hugging Face layouts with its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/factories.h"
#include "core/views.h"
#include "nn/checkpoint.h"
#include "nn/nn.h"
#include "nn/safetensors.h"
#include "nn_test_util.h"
#include "ops/ops.h"
#include "tests/error_helpers.h"

namespace cg {
namespace {

using testing_nn::bit_equal;
using testing_nn::TempDir;

// A Qwen3.5-style config whose layers are all full attention (runs without the DeltaNet).
nn::Qwen3Config all_full_config() {
  nn::Qwen3Config c;
  c.family = "qwen3_5";
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 48;
  c.rope_theta = 1e4;
  c.layer_types = {"full_attention", "full_attention"};
  c.attn_output_gate = true;
  c.zero_centred_norm = true;
  c.partial_rotary_factor = 0.5;
  return c;
}

void set(const Tensor& p, const std::vector<double>& values) {
  raw::copy_(p, from_vector(values, p.shape(), {.dtype = p.dtype()}));
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

TEST(Qwen35Layers, ZeroCentredNormScalesByOnePlusW) {
  nn::RMSNorm norm(4, 1e-6, {}, /*zero_centred=*/true);
  EXPECT_EQ(norm.weight.to_vector(), std::vector<double>(4, 0.0));  // starts at 0: scale 1
  const std::vector<double> w{0.5, -0.25, 0.0, 2.0}, x{1.0, -2.0, 3.0, 0.5};
  set(norm.weight, w);
  const Tensor out = norm.forward(from_vector(x, {1, 4}));
  double ms = 0;
  for (double v : x) ms += v * v / 4;
  const std::vector<double> got = out.to_vector();
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(got[i], x[i] / std::sqrt(ms + 1e-6) * (1 + w[i]), 1e-6) << i;
  // Plain w on the same weights is another number (the rule matters).
  nn::RMSNorm plain(4, 1e-6);
  set(plain.weight, w);
  EXPECT_GT(max_abs_diff(plain.forward(from_vector(x, {1, 4})), out), 0.1);
  // bf16: the scale is formed in fp32 (1 + 0.01 is not a bf16 number) and y rounded once.
  nn::RMSNorm half(4, 1e-6, {.dtype = DType::bf16}, true);
  nn::RMSNorm full(4, 1e-6, {}, true);
  const std::vector<double> small{0.01, -0.004, 0.03, 0.002};
  set(half.weight, small);
  set(full.weight, half.weight.to_vector());  // the same (bf16-representable) weights
  const Tensor xb = to_dtype(from_vector(x, {1, 4}), DType::bf16);
  EXPECT_TRUE(
      bit_equal(half.forward(xb), to_dtype(full.forward(to_dtype(xb, DType::f32)), DType::bf16)));
}

// Note [Gated attention] on one token (attention over one key is that key's value), so the
// whole layer is a hand computation: out = o_proj(v per head * sigmoid(gate per head)).
TEST(Qwen35Layers, GateIsTheSecondHalfOfEachHeadNotOfTheWholeOutput) {
  nn::Qwen3Config c = all_full_config();
  c.hidden_size = 4;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 2;
  c.partial_rotary_factor = 1.0;
  nn::Attention attn(c);
  ASSERT_EQ(attn.q_proj->weight.shape(), (Shape{8, 4}));  // 2 heads x [query | gate] x 2
  std::vector<double> wq(32);
  for (size_t i = 0; i < wq.size(); ++i) wq[i] = 0.1 * static_cast<double>(i % 7) - 0.3;
  set(attn.q_proj->weight, wq);
  set(attn.k_proj->weight, std::vector<double>(8, 0.2));
  set(attn.v_proj->weight, {1, 0, 0, 0, 0, 1, 0, 0});  // v = (x0, x1)
  std::vector<double> eye(16, 0.0);
  for (int i = 0; i < 4; ++i) eye[static_cast<size_t>(i * 5)] = 1.0;
  set(attn.o_proj->weight, eye);
  const std::vector<double> x{0.5, -1.0, 2.0, 1.5};
  const Tensor out = attn.forward(from_vector(x, {1, 1, 4}));

  auto row = [&](int r) {  // (q_proj x)[r]
    double s = 0;
    for (int j = 0; j < 4; ++j) s += wq[static_cast<size_t>(r * 4 + j)] * x[static_cast<size_t>(j)];
    return s;
  };
  auto sigmoid_of = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const double v[2] = {x[0], x[1]};
  std::vector<double> per_head(4), halves(4);
  for (int h = 0; h < 2; ++h) {
    for (int d = 0; d < 2; ++d) {
      per_head[static_cast<size_t>(h * 2 + d)] = v[d] * sigmoid_of(row(h * 4 + 2 + d));
      halves[static_cast<size_t>(h * 2 + d)] = v[d] * sigmoid_of(row(4 + h * 2 + d));
    }
  }
  const Tensor want = from_vector(per_head, {1, 1, 4});
  EXPECT_LT(max_abs_diff(out, want), 1e-6);
  // The "two halves" reading gives another output, so this test would catch it.
  EXPECT_GT(max_abs_diff(from_vector(halves, {1, 1, 4}), want), 1e-2);
}

TEST(Qwen35Layers, PartialRotaryRotatesOnlyTheFirstRotaryDims) {
  const nn::Qwen3Config c = all_full_config();  // head_dim 8, rotary_dim 4
  Generator gen(7);
  nn::Attention attn(c, {.generator = &gen});
  ASSERT_EQ(attn.rotary_dim(), 4);
  const std::vector<double> inv = attn.rotary_emb->inv_freq().to_vector();
  ASSERT_EQ(inv.size(), 2u);  // theta^(-2i/rotary_dim), not over head_dim
  EXPECT_DOUBLE_EQ(inv[1], std::pow(1e4, -0.5));
  const Tensor x = randn({1, 3, 32}, {}, &gen);
  const Tensor positions = from_vector({3, 7, 11}, {3}, {.dtype = DType::i64});
  const Tensor k = attn.keys_values(x, positions).first;  // [1, 3, 2, 8]
  const std::vector<double> normed =
      attn.k_norm->forward(view(attn.k_proj->forward(x), {1, 3, 2, 8})).to_vector();
  const std::vector<double> got = k.to_vector();
  const double pos[3] = {3, 7, 11};
  for (int s = 0; s < 3; ++s) {
    for (int h = 0; h < 2; ++h) {
      const size_t base = static_cast<size_t>((s * 2 + h) * 8);
      for (int i = 0; i < 2; ++i) {  // pairs (i, i + 2) of the rotary dims
        const double a = pos[s] * std::pow(1e4, -2.0 * i / 4.0);
        const double x1 = normed[base + i], x2 = normed[base + i + 2];
        EXPECT_NEAR(got[base + i], x1 * std::cos(a) - x2 * std::sin(a), 1e-5);
        EXPECT_NEAR(got[base + i + 2], x2 * std::cos(a) + x1 * std::sin(a), 1e-5);
      }
      for (size_t d = 4; d < 8; ++d) EXPECT_EQ(got[base + d], normed[base + d]) << "passes through";
    }
  }
}

TEST(Qwen35Layers, AllFullHybridModelCountsAndDecodesLikeItsForward) {
  const nn::Qwen3Config c = all_full_config();
  Generator gen(3);
  nn::Qwen3ForCausalLM lm(c, {.generator = &gen});
  int64_t n = 0;
  for (const auto& [name, p] : lm.named_parameters()) n += p.numel();
  EXPECT_EQ(n, c.total_parameters());
  EXPECT_EQ(lm.model->layer(0).self_attn->q_proj->weight.shape(), (Shape{2 * 4 * 8, 32}));
  EXPECT_EQ(lm.model->layer(0).linear_attn, nullptr);
  for (const Tensor& w : {lm.model->norm->weight, lm.model->layer(1).input_layernorm->weight,
                          lm.model->layer(1).self_attn->q_norm->weight})
    EXPECT_EQ(w.to_vector(), std::vector<double>(w.numel(), 0.0));  // zero-centred: start at 0
  // Non-trivial norm weights, so that 1 + w and w differ everywhere.
  for (const auto& [name, p] : lm.named_parameters()) {
    if (name.find("norm") != std::string::npos) raw::copy_(p, randn(p.shape(), {}, &gen) * 0.1);
  }
  const Tensor ids = from_vector({1, 5, 9, 2, 33, 7}, {1, 6}, {.dtype = DType::i64});
  const Tensor full = lm.forward(ids).logits;
  nn::KVCache cache = lm.make_cache(16);
  const Tensor first = lm.forward_cached(narrow(ids, 1, 0, 4), cache).logits;
  const Tensor rest = lm.forward_cached(narrow(ids, 1, 4, 2), cache).logits;
  EXPECT_LT(max_abs_diff(first, narrow(full, 1, 0, 4)), 1e-4);
  EXPECT_LT(max_abs_diff(rest, narrow(full, 1, 4, 2)), 1e-4);
}

// A hybrid model (DeltaNet layers 0 and 2, full attention 1 and 3), random weights: the
// layers hold linear_attn / self_attn as config says, the parameter count is the hand
// formula's, cached decoding in pieces equals the full forward, and a rejected block
// truncated away leaves the next step equal to never having seen it.
TEST(Qwen35Layers, HybridModelCountsDecodesAndRollsBack) {
  nn::Qwen3Config c = all_full_config();
  c.num_layers = 4;
  c.layer_types = {"linear_attention", "full_attention", "linear_attention", "full_attention"};
  c.linear_num_key_heads = 2;
  c.linear_num_value_heads = 4;
  c.linear_key_head_dim = 8;
  c.linear_value_head_dim = 8;
  Generator gen(11);
  nn::Qwen3ForCausalLM lm(c, {.generator = &gen});
  ASSERT_NE(lm.model->layer(0).linear_attn, nullptr);
  EXPECT_EQ(lm.model->layer(0).self_attn, nullptr);
  ASSERT_NE(lm.model->layer(1).self_attn, nullptr);
  EXPECT_EQ(lm.model->layer(1).linear_attn, nullptr);
  int64_t n = 0;
  for (const auto& [name, p] : lm.named_parameters()) n += p.numel();
  EXPECT_EQ(n, c.total_parameters());
  for (const auto& [name, p] : lm.named_parameters()) {
    if (name.find("norm") != std::string::npos) raw::copy_(p, randn(p.shape(), {}, &gen) * 0.1);
  }
  lm.freeze();  // a frozen target: the DeltaNet records no gradient
  const Tensor ids = from_vector({1, 5, 9, 2, 33, 7, 4}, {1, 7}, {.dtype = DType::i64});
  const Tensor full = lm.forward(ids).logits;
  nn::KVCache cache = lm.make_cache(16);
  const Tensor first = lm.forward_cached(narrow(ids, 1, 0, 4), cache).logits;
  // A rejected block of two tokens, then rolled back to 4 positions.
  lm.forward_cached(from_vector({60, 61}, {1, 2}, {.dtype = DType::i64}), cache);
  cache.truncate(4);
  const Tensor rest = lm.forward_cached(narrow(ids, 1, 4, 3), cache).logits;
  EXPECT_LT(max_abs_diff(first, narrow(full, 1, 0, 4)), 1e-4);
  EXPECT_LT(max_abs_diff(rest, narrow(full, 1, 4, 3)), 1e-4);
}

// ---- Note [Hugging Face target names] ------------------------------------------------

// The model's tensors under `prefix` instead of "model.", plus `extra` tensors.
void save_as(const nn::Qwen3ForCausalLM& lm, const std::string& path, const std::string& prefix,
             const safetensors::NamedTensors& extra, bool drop_first = false) {
  safetensors::NamedTensors out;
  for (const auto& [name, p] : lm.named_parameters()) {
    if (drop_first && out.empty()) {
      drop_first = false;
      continue;
    }
    const bool in_model = name.rfind("model.", 0) == 0;
    out.emplace_back(in_model ? prefix + name.substr(6) : name, p.detach());
  }
  for (const auto& e : extra) out.push_back(e);
  safetensors::save_file(out, path);
}

TEST(Qwen35Layers, LoadsBothCheckpointLayoutsSkippingVisionAndMtp) {
  const nn::Qwen3Config c = all_full_config();
  Generator gen(5);
  nn::Qwen3ForCausalLM source(c, {.generator = &gen});
  TempDir dir;
  const safetensors::NamedTensors skipped{{"model.visual.blocks.0.attn.qkv.weight", ones({3, 2})},
                                          {"mtp.fc.weight", ones({2, 2})}};
  for (const std::string prefix : {"model.language_model.", "model."}) {
    const std::string path = dir.file("m.safetensors");
    save_as(source, path, prefix, skipped);
    nn::Qwen3ForCausalLM lm(c);
    nn::load_checkpoint(lm, path, nn::hf_target_load_options(c));
    const auto a = source.named_parameters(), b = lm.named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(bit_equal(a[i].second, b[i].second)) << prefix;
  }
  // Qwen3 dense keeps its strictness: the same vision tensor is unexpected there.
  nn::Qwen3Config dense = c;
  dense.family = "qwen3";
  EXPECT_EQ(nn::hf_target_name(dense, "mtp.fc.weight"), "mtp.fc.weight");
}

TEST(Qwen35Layers, CheckpointErrorsNameTheTensor) {
  const nn::Qwen3Config c = all_full_config();
  nn::Qwen3ForCausalLM source(c);
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  nn::Qwen3ForCausalLM lm(c);
  // A missing tensor is named as the file would name it, then as the model does (Note
  // [Missing names], nn/checkpoint.cpp): the user greps the files given, not the modules.
  save_as(source, path, "model.language_model.", {}, /*drop_first=*/true);
  EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path, nn::hf_target_load_options(c)),
                   "missing 1 key(s): model.language_model.embed_tokens.weight",
                   "(the model's model.embed_tokens.weight)", path.c_str());
  // The same in a sharded folder: the error names the folder's index.
  {
    safetensors::NamedTensors kept;
    for (const auto& [name, p] : source.named_parameters()) {
      if (name == "model.norm.weight") continue;
      kept.emplace_back(
          name.rfind("model.", 0) == 0 ? "model.language_model." + name.substr(6) : name,
          p.detach());
    }
    const std::string folder = dir.file("sharded");
    std::filesystem::create_directories(folder);
    safetensors::save_sharded(kept, folder, 4096);
    EXPECT_ERROR_HAS(nn::load_checkpoint(lm, folder, nn::hf_target_load_options(c)),
                     "missing 1 key(s): model.language_model.norm.weight",
                     "(the model's model.norm.weight)", "sharded/model.safetensors.index.json");
  }
  // An outside tester: a NaN in a sharded checkpoint was said to be in the index file. The
  // error names the shard that holds the tensor's bytes.
  {
    safetensors::NamedTensors kept;
    for (const auto& [name, p] : source.named_parameters())
      kept.emplace_back(name, name == "model.norm.weight" ? full(p.shape(), NAN) : p.detach());
    const std::string folder = dir.file("sharded_nan");
    std::filesystem::create_directories(folder);
    ASSERT_GT(safetensors::save_sharded(kept, folder, 4096).size(), 1u);
    const std::string shard = safetensors::open(folder)->path_of("model.norm.weight");
    EXPECT_NE(shard.find("-of-"), std::string::npos) << shard;  // a shard, not the index
    const std::string m = ::cg::testing::error_of(
        [&] { nn::load_checkpoint(lm, folder, nn::hf_target_load_options(c)); });
    EXPECT_NE(m.find("checkpoint '" + shard + "': tensor 'model.norm.weight' holds nan"),
              std::string::npos)
        << m;
    EXPECT_EQ(m.find("index.json"), std::string::npos) << m;
  }
  // An untied wrapper without lm_head.weight (an outside tester's text_config said
  // tie_word_embeddings: true, which transformers does not read): the message says which
  // field ties, not only "config.json then says true" (it did, in text_config).
  {
    safetensors::NamedTensors no_head;
    for (const auto& [name, p] : source.named_parameters())
      if (name != "lm_head.weight") no_head.emplace_back(name, p.detach());
    safetensors::save_file(no_head, path);
    EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path, nn::hf_target_load_options(c)),
                     "missing 1 key(s): lm_head.weight", "true at the top level",
                     "ties by its top-level field; text_config's is not used");
  }
  // A flat (Qwen3_5ForCausalLM) file keeps the module's names: nothing is added.
  save_as(source, path, "model.", {}, /*drop_first=*/true);
  const std::string flat = ::cg::testing::error_of(
      [&] { nn::load_checkpoint(lm, path, nn::hf_target_load_options(c)); });
  EXPECT_NE(flat.find("missing 1 key(s): model.embed_tokens.weight;"), std::string::npos) << flat;
  save_as(source, path, "model.language_model.",
          {{"model.language_model.layers.0.self_attn.extra.weight", ones({2})}});
  EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path, nn::hf_target_load_options(c)), "unexpected",
                   "model.language_model.layers.0.self_attn.extra.weight");
  // An ungated q_proj (the Qwen3 width) where the gated one belongs: name and both shapes.
  nn::Qwen3Config ungated = c;
  ungated.attn_output_gate = false;
  nn::Qwen3ForCausalLM narrow_q(ungated);
  save_as(narrow_q, path, "model.language_model.", {});
  EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path, nn::hf_target_load_options(c)),
                   "model.language_model.layers.0.self_attn.q_proj.weight", "[32, 32]", "[64, 32]");
  // Both layouts in one folder.
  save_as(source, path, "model.language_model.", {{"model.norm.weight", ones({32})}});
  EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path, nn::hf_target_load_options(c)),
                   "model.language_model.norm.weight", "model.norm.weight",
                   "two checkpoint layouts");
}

}  // namespace
}  // namespace cg
