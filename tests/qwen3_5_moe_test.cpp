// Why this file exists: the mixture-of-experts pieces of a Qwen3.5-MoE target (issue 21)
// without the golden: the router's rules (softmax over all experts, top-k descending, ties to
// the lower index, always renormalised), the experts' sum against a plain loop, the op's
// refusals, the config reader's MoE fields and refusals, the block's Hugging Face names and
// parameter count, the per-expert checkpoint layout stacked into the packed one (and its
// errors), and cached decoding of a hybrid MoE target against its full forward.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/views.h"
#include "decode_test_util.h"
#include "error_helpers.h"
#include "nn/checkpoint.h"
#include "nn/moe.h"
#include "nn/qwen3.h"
#include "nn/safetensors.h"
#include "ops/moe.h"
#include "ops/ops.h"

namespace cg {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.to_vector()) out.push_back(static_cast<int64_t>(v));
  return out;
}

// ---- the router ---------------------------------------------------------------------------

TEST(MoeRoute, TopKOfTheSoftmaxRenormalised) {
  // Row 0: probabilities 0.1, 0.2, 0.3, 0.4 (logits log p): top 2 = experts 3, 2 with
  // 0.4 / 0.7 and 0.3 / 0.7. Row 1: the same shifted by 5 (softmax ignores a shift).
  std::vector<double> logits;
  for (double shift : {0.0, 5.0})
    for (double p : {0.1, 0.2, 0.3, 0.4}) logits.push_back(std::log(p) + shift);
  for (DType dtype : {DType::f64, DType::f32}) {
    const MoeRouting r = moe_route(from_vector(logits, {2, 4}, {.dtype = dtype}), 2);
    EXPECT_EQ(r.indices.dtype(), DType::i32);
    EXPECT_EQ(r.weights.dtype(), dtype);  // f32, or f64 for f64 logits
    EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{3, 2, 3, 2}));
    const std::vector<double> w = r.weights.to_vector();
    const double tol = dtype == DType::f64 ? 1e-14 : 1e-6;
    for (int row = 0; row < 2; ++row) {
      EXPECT_NEAR(w[2 * row], 0.4 / 0.7, tol);
      EXPECT_NEAR(w[2 * row + 1], 0.3 / 0.7, tol);
    }
  }
  // bf16 logits: softmax in fp32, weights f32.
  const MoeRouting h = moe_route(from_vector(logits, {2, 4}, {.dtype = DType::bf16}), 3);
  EXPECT_EQ(h.weights.dtype(), DType::f32);
  EXPECT_EQ(ints(h.indices), (std::vector<int64_t>{3, 2, 1, 3, 2, 1}));
  const std::vector<double> w = h.weights.to_vector();
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
}

TEST(MoeRoute, TiesGoToTheLowerExpert) {
  // Row 0: experts 1 and 2 tie for first, 0 and 3 for third. Row 1: all tie.
  const Tensor logits = from_vector({0.5, 2.0, 2.0, 0.5, 0, 0, 0, 0}, {2, 4});
  const MoeRouting r = moe_route(logits, 3);
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{1, 2, 0, 0, 1, 2}));
  const std::vector<double> w = r.weights.to_vector();
  for (int i = 3; i < 6; ++i) EXPECT_NEAR(w[i], 1.0 / 3.0, 1e-7);
  EXPECT_NEAR(w[0], w[1], 0.0);
  // Every expert: the weights are the whole softmax, in index order when all tie.
  const MoeRouting all = moe_route(from_vector({1, 1, 1}, {1, 3}), 3);
  EXPECT_EQ(ints(all.indices), (std::vector<int64_t>{0, 1, 2}));
}

TEST(MoeRoute, RefusesBadInput) {
  const Tensor logits = zeros({3, 4});
  EXPECT_ERROR_HAS(moe_route(logits, 0), "moe_route", "top_k must be in [1, 4]");
  EXPECT_ERROR_HAS(moe_route(logits, 5), "top_k must be in [1, 4]", "got 5");
  EXPECT_ERROR_HAS(moe_route(zeros({12}), 2), "[tokens, experts]", "[12]");
  EXPECT_ERROR_HAS(moe_route(from_ints({1, 2}, {1, 2}), 1), "moe_route", "i64");
  Tensor needs_grad = zeros({3, 4});
  needs_grad.requires_grad_();
  EXPECT_ERROR_HAS(moe_route(needs_grad, 2), "requires grad", "NoGradGuard");
  NoGradGuard no_grad;
  EXPECT_NO_THROW(moe_route(needs_grad, 2));
}

// ---- the experts ----------------------------------------------------------------------------

// out[n] = sum_s w[n,s] down[e] (silu(gate_e x) * (up_e x)), written as loops in double.
std::vector<double> naive_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                                  const std::vector<int64_t>& idx, const std::vector<double>& w) {
  const int64_t N = x.size(0), H = x.size(1), I = down.size(2);
  const int64_t k = static_cast<int64_t>(idx.size()) / N;
  const auto xs = x.to_vector(), gu = gate_up.to_vector(), dn = down.to_vector();
  std::vector<double> out(static_cast<size_t>(N * H), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t e = idx[n * k + s];
      std::vector<double> act(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int64_t h = 0; h < H; ++h) {
          g += gu[(e * 2 * I + i) * H + h] * xs[n * H + h];
          u += gu[(e * 2 * I + I + i) * H + h] * xs[n * H + h];
        }
        act[i] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t h = 0; h < H; ++h) {
        double y = 0;
        for (int64_t i = 0; i < I; ++i) y += dn[(e * H + h) * I + i] * act[i];
        out[n * H + h] += w[n * k + s] * y;
      }
    }
  }
  return out;
}

TEST(MoeExperts, MatchesAPlainLoop) {
  Generator gen(71);
  const TensorOptions f64{.dtype = DType::f64};
  const Tensor x = randn({6, 5}, f64, &gen), gate_up = randn({4, 6, 5}, f64, &gen);
  const Tensor down = randn({4, 5, 3}, f64, &gen), logits = randn({6, 4}, f64, &gen);
  const MoeRouting r = moe_route(logits, 2);
  const Tensor out = moe_experts(x, gate_up, down, r);
  const auto want = naive_experts(x, gate_up, down, ints(r.indices), r.weights.to_vector());
  const auto got = out.to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  // A fixed routing (i64 indices) where expert 3 gets no token and expert 0 gets every one.
  const std::vector<int64_t> idx = {0, 1, 2, 0, 0, 2, 1, 0, 0, 2, 0, 1};
  const std::vector<double> w = {0.7, 0.3, 0.5, 0.5, 0.9, 0.1, 0.2, 0.8, 0.6, 0.4, 1.0, 0.0};
  const MoeRouting fixed{from_vector(w, {6, 2}, f64), from_ints(idx, {6, 2})};
  const auto got2 = moe_experts(x, gate_up, down, fixed).to_vector();
  const auto want2 = naive_experts(x, gate_up, down, idx, w);
  for (size_t i = 0; i < got2.size(); ++i) EXPECT_NEAR(got2[i], want2[i], 1e-12) << i;
  // f32 and bf16: the result in x's dtype, near the f64 one.
  for (DType d : {DType::f32, DType::bf16}) {
    const Tensor o = moe_experts(to_dtype(x, d), to_dtype(gate_up, d), to_dtype(down, d),
                                 {to_dtype(r.weights, DType::f32), r.indices});
    EXPECT_EQ(o.dtype(), d);
    const auto v = o.to_vector();
    const double tol = d == DType::f32 ? 1e-5 : 0.1;
    for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], want[i], tol * (1 + std::abs(want[i])));
  }
}

TEST(MoeExperts, RefusesBadInput) {
  const Tensor x = zeros({3, 4}), gate_up = zeros({2, 6, 4}), down = zeros({2, 4, 3});
  const MoeRouting ok{zeros({3, 1}), to_dtype(from_ints({0, 1, 0}, {3, 1}), DType::i32)};
  EXPECT_NO_THROW(moe_experts(x, gate_up, down, ok));
  EXPECT_ERROR_HAS(moe_experts(x, gate_up, zeros({2, 4, 2}), ok), "down must be", "[2, 4, 3]");
  EXPECT_ERROR_HAS(moe_experts(x, zeros({2, 5, 4}), down, ok), "gate_up must be");
  EXPECT_ERROR_HAS(moe_experts(x, to_dtype(gate_up, DType::bf16), down, ok), "one dtype");
  const MoeRouting out_of_range{zeros({3, 1}), from_ints({0, 2, 1}, {3, 1})};
  EXPECT_ERROR_HAS(moe_experts(x, gate_up, down, out_of_range), "expert index 2",
                   "the experts of gate_up");
  const MoeRouting bf16_weights{zeros({3, 1}, {.dtype = DType::bf16}), ok.indices};
  EXPECT_ERROR_HAS(moe_experts(x, gate_up, down, bf16_weights), "routing.weights must be f32");
  const MoeRouting wrong_rows{zeros({2, 1}), from_ints({0, 1}, {2, 1})};
  EXPECT_ERROR_HAS(moe_experts(x, gate_up, down, wrong_rows), "[tokens=3, top_k]");
}

// ---- the config ---------------------------------------------------------------------------

json moe_text_config() {
  return json::parse(R"({
    "model_type": "qwen3_5_moe_text", "architectures": ["Qwen3_5MoeForCausalLM"],
    "head_dim": 16, "hidden_act": "silu", "hidden_size": 32, "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": false, "vocab_size": 256,
    "layer_types": ["linear_attention", "full_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "num_experts": 8, "num_experts_per_tok": 3, "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 24, "router_aux_loss_coef": 0.001,
    "output_router_logits": false,
    "rope_parameters": {"rope_theta": 10000000.0, "rope_type": "default",
                        "partial_rotary_factor": 0.25}})");
}

json moe_nested_config() {
  json t = moe_text_config();
  t.erase("architectures");
  return json{{"model_type", "qwen3_5_moe"},
              {"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
              {"text_config", t},
              {"vision_config", {{"model_type", "qwen3_5_moe_vision"}, {"depth", 1}}},
              {"tie_word_embeddings", false}};
}

TEST(Qwen35MoeConfig, ReadsBothLayouts) {
  for (const json& j : {moe_text_config(), moe_nested_config()}) {
    const nn::Qwen3Config c = nn::Qwen3Config::from_hf_json(j);
    EXPECT_TRUE(c.is_moe());
    EXPECT_EQ(c.family, "qwen3_5");
    EXPECT_EQ(c.num_experts, 8);
    EXPECT_EQ(c.num_experts_per_tok, 3);
    EXPECT_EQ(c.moe_intermediate_size, 16);
    EXPECT_EQ(c.shared_expert_intermediate_size, 24);
    EXPECT_EQ(c.intermediate_size, 0);
    EXPECT_EQ(c.layer_types, (std::vector<std::string>{"linear_attention", "full_attention"}));
    EXPECT_NE(c.str().find("moe 8 experts top 3 x 16, shared expert 24"), std::string::npos)
        << c.str();
  }
  // norm_topk_prob true is what the router does anyway; intermediate_size is ignored.
  json j = moe_text_config();
  j["norm_topk_prob"] = true;
  j["intermediate_size"] = 512;
  j["mlp_only_layers"] = json::array();
  j["decoder_sparse_step"] = 1;
  EXPECT_EQ(nn::Qwen3Config::from_hf_json(j).intermediate_size, 0);
}

TEST(Qwen35MoeConfig, RefusesWhatItCannotCompute) {
  json j = moe_text_config();
  j["norm_topk_prob"] = false;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "norm_topk_prob = false",
                   "renormalises the top-k weights regardless");
  for (const char* key : {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                          "shared_expert_intermediate_size"}) {
    json missing = moe_text_config();
    missing.erase(key);
    EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(missing), "lacks", key);
  }
  json too_many = moe_text_config();
  too_many["num_experts_per_tok"] = 9;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(too_many),
                   "config.json has num_experts_per_tok = 9 but num_experts = 8",
                   "at most num_experts");
  json zero = moe_text_config();
  zero["moe_intermediate_size"] = 0;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(zero), "moe_intermediate_size must be positive");
  json dense_layers = moe_text_config();
  dense_layers["mlp_only_layers"] = {1};
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(dense_layers), "mlp_only_layers",
                   "dense layers are not supported");
  json sparse_step = moe_text_config();
  sparse_step["decoder_sparse_step"] = 2;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(sparse_step), "decoder_sparse_step = 2");
  json mixed = moe_nested_config();
  mixed["text_config"]["model_type"] = "qwen3_5_text";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(mixed), "text_config has model_type",
                   "\"qwen3_5_moe_text\"");
  json not_int = moe_text_config();
  not_int["num_experts"] = "eight";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(not_int), "num_experts", "integer");
}

// An outside tester: num_experts = 2^40 was a misleading out-of-memory. The MoE sizes are
// bounded as the others are, naming config.json and the field, and sizes each in bounds
// whose product overflows are refused too (Note [Checked counts]).
TEST(Qwen35MoeConfig, RefusesSizesPastAnyModels) {
  for (const char* key : {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                          "shared_expert_intermediate_size"}) {
    json j = moe_text_config();
    j[key] = int64_t{1} << 40;
    const std::string want = "config.json has " + std::string(key) + " = 1099511627776";
    EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), want.c_str(), "past any model's");
  }
  json product = moe_text_config();
  product["hidden_size"] = int64_t{1} << 24;
  product["num_experts"] = int64_t{1} << 24;
  product["moe_intermediate_size"] = int64_t{1} << 24;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(product),
                   "config.json's sizes together are past any model's",
                   "a parameter count overflows 64 bits", "the file is damaged");
}

// newuser finding F1: a huge layer count is refused before layer_types is derived from it.
TEST(Qwen35MoeConfig, RefusesAHugeLayerCountBeforeSizingAnything) {
  json j = moe_text_config();
  j.erase("layer_types");
  j["num_hidden_layers"] = int64_t{100000000000};
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "num_hidden_layers = 100000000000",
                   "[1, 100000]");
}

// ---- the module -----------------------------------------------------------------------------

nn::Qwen3Config tiny_moe_config() {
  nn::Qwen3Config c = testing_decode::tiny_target_config();
  c.num_layers = 2;
  c.family = "qwen3_5";
  c.layer_types = {"linear_attention", "full_attention"};
  c.attn_output_gate = true;
  c.zero_centred_norm = true;
  c.head_dim = 8;
  c.partial_rotary_factor = 0.5;
  c.linear_num_key_heads = 2;
  c.linear_num_value_heads = 4;
  c.linear_key_head_dim = 4;
  c.linear_value_head_dim = 3;
  c.num_experts = 5;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 6;
  c.shared_expert_intermediate_size = 7;
  c.intermediate_size = 0;
  return c;
}

TEST(SparseMoeBlock, HuggingFaceNamesAndParameterCount) {
  const nn::Qwen3Config c = tiny_moe_config();
  Generator gen(3);
  nn::Qwen3ForCausalLM lm(c, {.generator = &gen});
  std::map<std::string, Shape> shapes;
  int64_t total = 0;
  for (const auto& [name, p] : lm.named_parameters()) {
    shapes[name] = p.shape();
    total += p.numel();
  }
  const std::string mlp = "model.layers.1.mlp.";
  EXPECT_EQ(shapes[mlp + "gate.weight"], (Shape{5, 16}));
  EXPECT_EQ(shapes[mlp + "experts.gate_up_proj"], (Shape{5, 12, 16}));
  EXPECT_EQ(shapes[mlp + "experts.down_proj"], (Shape{5, 16, 6}));
  EXPECT_EQ(shapes[mlp + "shared_expert.gate_proj.weight"], (Shape{7, 16}));
  EXPECT_EQ(shapes[mlp + "shared_expert.up_proj.weight"], (Shape{7, 16}));
  EXPECT_EQ(shapes[mlp + "shared_expert.down_proj.weight"], (Shape{16, 7}));
  EXPECT_EQ(shapes[mlp + "shared_expert_gate.weight"], (Shape{1, 16}));
  EXPECT_EQ(shapes.count("model.layers.0.mlp.gate_proj.weight"), 0u);
  EXPECT_EQ(total, c.total_parameters());
  EXPECT_EQ(lm.model->layer(0).mlp, nullptr);
  ASSERT_NE(lm.model->layer(0).moe, nullptr);
}

TEST(SparseMoeBlock, ForwardIsRoutedExpertsPlusTheGatedSharedExpert) {
  Generator gen(5);
  nn::SparseMoeBlock block(tiny_moe_config(), {.generator = &gen});
  block.freeze();
  const Tensor x = randn({2, 3, 16}, {}, &gen);
  const Tensor out = block.forward(x);
  EXPECT_EQ(out.shape(), x.shape());
  const Tensor flat = reshape(x, {6, 16});
  const Tensor routed = moe_experts(flat, block.experts->gate_up_proj, block.experts->down_proj,
                                    moe_route(block.gate->forward(flat), 2));
  const Tensor want = add(routed, mul(sigmoid(block.shared_expert_gate->forward(flat)),
                                      block.shared_expert->forward(flat)));
  const auto a = out.to_vector(), b = want.to_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;
  // Unfrozen under grad mode: refused with what to do.
  nn::SparseMoeBlock trainable(tiny_moe_config(), {.generator = &gen});
  EXPECT_ERROR_HAS(trainable.forward(x), "records no gradient", "freeze()");
}

// ---- per-expert checkpoints (Note [Per-expert checkpoints]) ---------------------------------

// The model's tensors with every experts.gate_up_proj / down_proj split per expert, minus
// the (layer, expert, projection) named in `drop`.
safetensors::NamedTensors per_expert_tensors(const nn::Module& m, const std::string& drop = "") {
  safetensors::NamedTensors out;
  for (const auto& [name, p] : m.named_parameters()) {
    const Tensor t = p.detach();
    const auto split = [&](const char* suffix) {
      return name.size() > std::string(suffix).size() &&
             name.compare(name.size() - std::string(suffix).size(), std::string::npos, suffix) == 0;
    };
    if (split("experts.gate_up_proj")) {
      const std::string base = name.substr(0, name.size() - std::string("gate_up_proj").size());
      const int64_t I = t.size(1) / 2;
      for (int64_t e = 0; e < t.size(0); ++e) {
        const Tensor rows = squeeze(narrow(t, 0, e, 1), 0);
        out.emplace_back(base + std::to_string(e) + ".gate_proj.weight", narrow(rows, 0, 0, I));
        out.emplace_back(base + std::to_string(e) + ".up_proj.weight", narrow(rows, 0, I, I));
      }
    } else if (split("experts.down_proj")) {
      const std::string base = name.substr(0, name.size() - std::string("down_proj").size());
      for (int64_t e = 0; e < t.size(0); ++e)
        out.emplace_back(base + std::to_string(e) + ".down_proj.weight",
                         squeeze(narrow(t, 0, e, 1), 0));
    } else {
      out.emplace_back(name, t);
    }
  }
  std::erase_if(out, [&](const auto& kv) { return kv.first == drop; });
  return out;
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("cg_moe_" + name + ".safetensors")).string();
}

TEST(MoeCheckpoint, PerExpertTensorsLoadAsThePackedOnes) {
  const nn::Qwen3Config c = tiny_moe_config();
  Generator gen(9);
  nn::Qwen3ForCausalLM source(c, {.generator = &gen});
  const std::string packed = temp_path("packed"), split = temp_path("split");
  nn::save_checkpoint(source, packed);
  safetensors::save_file(per_expert_tensors(source), split);
  for (const std::string& path : {packed, split}) {
    Generator other(10);
    nn::Qwen3ForCausalLM lm(c, {.generator = &other});
    nn::load_checkpoint(lm, path);
    const auto want = source.named_parameters();
    const auto got = lm.named_parameters();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i].second.to_vector(), want[i].second.to_vector())
          << path << " " << got[i].first;
  }
  fs::remove(packed);
  fs::remove(split);
}

TEST(MoeCheckpoint, IncompleteOrExtraExpertsAreRefused) {
  const nn::Qwen3Config c = tiny_moe_config();
  Generator gen(11);
  nn::Qwen3ForCausalLM source(c, {.generator = &gen});
  const std::string path = temp_path("bad");
  // Expert 2 of layer 0 lacks its up_proj.
  safetensors::save_file(per_expert_tensors(source, "model.layers.0.mlp.experts.2.up_proj.weight"),
                         path);
  nn::Qwen3ForCausalLM lm(c, {.generator = &gen});
  EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path), "model.layers.0.mlp.experts.",
                   "expert 2 has no up_proj.weight");
  // The last expert missing entirely: 4 experts where the model has 5.
  safetensors::NamedTensors four = per_expert_tensors(source);
  std::erase_if(four, [](const auto& kv) {
    return kv.first.find("layers.1.mlp.experts.4.") != std::string::npos;
  });
  safetensors::save_file(four, path);
  EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path), "model.layers.1.mlp.experts.gate_up_proj",
                   "[4, 12, 16]");
  // A sixth expert: more than the model has.
  safetensors::NamedTensors six = per_expert_tensors(source);
  for (const char* p : {"gate", "up"})
    six.emplace_back(std::string("model.layers.1.mlp.experts.5.") + p + "_proj.weight",
                     zeros({6, 16}));
  six.emplace_back("model.layers.1.mlp.experts.5.down_proj.weight", zeros({16, 6}));
  safetensors::save_file(six, path);
  EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path), "experts.gate_up_proj", "[6, 12, 16]");
  // An outside tester: an extra expert with one projection was "expert 5 has no
  // gate_proj.weight ... the checkpoint is incomplete". Knowing the model's count (the
  // Hugging Face loaders do), it is named as extra.
  safetensors::NamedTensors extra = per_expert_tensors(source);
  extra.emplace_back("model.layers.1.mlp.experts.5.up_proj.weight", zeros({6, 16}));
  safetensors::save_file(extra, path);
  EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path, nn::hf_target_load_options(c)),
                   "'model.layers.1.mlp.experts.5.up_proj.weight' is expert 5, beyond "
                   "num_experts (5: experts 0 .. 4)");
  EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path, nn::hf_target_load_options(c)),
                   "config.json's num_experts is wrong");
  // Both layouts of one layer in one file.
  safetensors::NamedTensors both = per_expert_tensors(source);
  both.emplace_back("model.layers.0.mlp.experts.gate_up_proj",
                    source.model->layer(0).moe->experts->gate_up_proj.detach());
  safetensors::save_file(both, path);
  EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path), "mixes two checkpoint layouts");
  fs::remove(path);
}

// newuser finding F3: integer tensors do not load into floating parameters, even converting.
TEST(MoeCheckpoint, IntegerTensorsAreRefusedForFloatingParameters) {
  const nn::Qwen3Config c = tiny_moe_config();
  Generator gen(12);
  nn::Qwen3ForCausalLM lm(c, {.generator = &gen});
  safetensors::NamedTensors tensors = per_expert_tensors(lm);
  for (auto& [name, t] : tensors)
    if (name == "model.norm.weight") t = to_dtype(t, DType::i32);
  const std::string path = temp_path("ints");
  safetensors::save_file(tensors, path);
  EXPECT_ERROR_HAS(nn::load_checkpoint(lm, path, {.convert_dtype = true}), "'model.norm.weight'",
                   "is i32", "floating point");
  fs::remove(path);
}

// ---- cached decoding ------------------------------------------------------------------------

TEST(Qwen35MoeDecoding, CachedPiecesEqualTheFullForward) {
  const nn::Qwen3Config c = tiny_moe_config();
  Generator gen(13);
  nn::Qwen3ForCausalLM lm(c, {.generator = &gen});
  lm.freeze();
  const std::vector<int64_t> ids = testing_decode::random_ids(23, c.vocab_size, gen);
  NoGradGuard no_grad;
  const Tensor full = lm.forward(from_ints(ids, {1, 23})).logits;
  nn::KVCache cache = lm.make_cache(30);
  int64_t at = 0;
  for (int64_t piece : {9, 1, 1, 4, 1, 7}) {
    std::vector<int64_t> part(ids.begin() + at, ids.begin() + at + piece);
    const Tensor got = lm.forward_cached(from_ints(part, {1, piece}), cache).logits;
    const auto g = got.to_vector();
    const auto f = contiguous(narrow(full, 1, at, piece)).to_vector();
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], f[i], 1e-4 * (1 + std::abs(f[i]))) << "position " << at << "+";
    at += piece;
  }
  EXPECT_EQ(at, 23);
}

}  // namespace
}  // namespace cg
