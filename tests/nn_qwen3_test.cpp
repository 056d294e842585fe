// Why this file exists: the Qwen3-style LM is the target model DFlash reads and the
// drafter's skeleton, so these tests check what both rely on: Hugging Face names and
// shapes (real checkpoints load by name), parameter counts equal to the hand formula,
// tied embeddings as one parameter whose gradient sums both uses, captured layer
// outputs, trace scopes, a checkpoint round trip that reproduces the logits bit for bit,
// and that the whole stack learns: a 2-layer model overfits a tiny batch.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/factories.h"
#include "core/memory_trace.h"
#include "nn/nn.h"
#include "nn_test_util.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

using testing_nn::bit_equal;
using testing_nn::TempDir;

nn::Qwen3Config tiny_config(bool tie = false) {
  nn::Qwen3Config c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 64;
  c.rope_theta = 1e4;
  c.tie_embeddings = tie;
  return c;
}

// Next-token cross-entropy: logits[:, t] predicts ids[:, t + 1].
Tensor next_token_loss(const Tensor& logits, const Tensor& ids) {
  const int64_t V = logits.size(2), T = logits.size(1) - 1;
  const Tensor labels = reshape(raw::contiguous(raw::narrow(ids, 1, 1, T)), {-1});
  return cross_entropy(reshape(narrow(logits, 1, 0, T), {-1, V}), labels);
}

// The same written with log_softmax + gather, to check cross_entropy where it is used.
Tensor next_token_loss_by_gather(const Tensor& logits, const Tensor& ids) {
  const int64_t V = logits.size(2), T = logits.size(1) - 1;
  const Tensor lp = log_softmax(reshape(narrow(logits, 1, 0, T), {-1, V}), -1);
  const Tensor labels = reshape(raw::contiguous(raw::narrow(ids, 1, 1, T)), {-1, 1});
  return -mean(gather(lp, 1, labels));
}

// Adam (betas 0.9, 0.999), written here on host loops until the optimiser module exists.
struct TinyAdam {
  explicit TinyAdam(std::vector<Tensor> params, double lr) : params(std::move(params)), lr(lr) {
    for (const Tensor& p : this->params) {
      m.emplace_back(static_cast<size_t>(p.numel()), 0.0);
      v.emplace_back(static_cast<size_t>(p.numel()), 0.0);
    }
  }
  void step() {
    ++t;
    const double c1 = 1 - std::pow(0.9, t), c2 = 1 - std::pow(0.999, t);
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].grad().defined()) continue;
      const std::vector<double> g = params[i].grad().to_vector();
      float* w = params[i].data<float>();
      for (size_t j = 0; j < g.size(); ++j) {
        m[i][j] = 0.9 * m[i][j] + 0.1 * g[j];
        v[i][j] = 0.999 * v[i][j] + 0.001 * g[j] * g[j];
        w[j] -= static_cast<float>(lr * (m[i][j] / c1) / (std::sqrt(v[i][j] / c2) + 1e-8));
      }
    }
  }
  std::vector<Tensor> params;
  double lr;
  int t = 0;
  std::vector<std::vector<double>> m, v;
};

TEST(NnQwen3, HuggingFaceNamesAndShapes) {
  nn::Qwen3Config c = tiny_config();
  c.num_layers = 1;
  nn::Qwen3ForCausalLM lm(c);
  std::vector<std::pair<std::string, Shape>> got;
  for (const auto& [name, p] : lm.named_parameters()) got.emplace_back(name, p.shape());
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"model.embed_tokens.weight", {64, 32}},
      {"model.layers.0.self_attn.q_proj.weight", {32, 32}},
      {"model.layers.0.self_attn.k_proj.weight", {16, 32}},
      {"model.layers.0.self_attn.v_proj.weight", {16, 32}},
      {"model.layers.0.self_attn.o_proj.weight", {32, 32}},
      {"model.layers.0.self_attn.q_norm.weight", {8}},
      {"model.layers.0.self_attn.k_norm.weight", {8}},
      {"model.layers.0.mlp.gate_proj.weight", {64, 32}},
      {"model.layers.0.mlp.up_proj.weight", {64, 32}},
      {"model.layers.0.mlp.down_proj.weight", {32, 64}},
      {"model.layers.0.input_layernorm.weight", {32}},
      {"model.layers.0.post_attention_layernorm.weight", {32}},
      {"model.norm.weight", {32}},
      {"lm_head.weight", {64, 32}},
  };
  EXPECT_EQ(got, expected);
}

TEST(NnQwen3, ParameterCountsMatchTheFormula) {
  for (bool tie : {false, true}) {
    const nn::Qwen3Config c = tiny_config(tie);
    nn::Qwen3ForCausalLM lm(c);
    // By hand: embed V*D; per layer q D*Hq*hd + k,v 2*D*Hkv*hd + o Hq*hd*D + q/k norm 2*hd
    // + MLP 3*D*I + two norms 2*D; final norm D; lm_head V*D unless tied.
    const int64_t per_layer = 32 * 32 + 2 * 32 * 16 + 32 * 32 + 2 * 8 + 3 * 32 * 64 + 2 * 32;
    const int64_t expected = 64 * 32 + 2 * per_layer + 32 + (tie ? 0 : 64 * 32);
    EXPECT_EQ(lm.num_parameters(), expected) << "tie " << tie;
    EXPECT_EQ(c.total_parameters(), expected);
    lm.model->embed_tokens->freeze();
    EXPECT_EQ(lm.num_trainable_parameters(), expected - 64 * 32);
  }
  // A real size: Qwen3-8B's config.json gives its published 8.19B (6.95B non-embedding).
  const nlohmann::json qwen3_8b = {{"vocab_size", 151936},       {"hidden_size", 4096},
                                   {"num_hidden_layers", 36},    {"num_attention_heads", 32},
                                   {"num_key_value_heads", 8},   {"head_dim", 128},
                                   {"intermediate_size", 12288}, {"rope_theta", 1000000.0},
                                   {"rms_norm_eps", 1e-6},       {"tie_word_embeddings", false}};
  const nn::Qwen3Config big = nn::Qwen3Config::from_hf_json(qwen3_8b);
  EXPECT_EQ(big.total_parameters(), 8190735360);
  EXPECT_EQ(big.rope_theta, 1e6);
  TENSOR_EXPECT_ERROR(nn::Qwen3Config::from_hf_json({{"vocab_size", 8}}), "lacks \"hidden_size\"");
  nn::Qwen3Config bad = tiny_config();
  bad.num_kv_heads = 3;
  TENSOR_EXPECT_ERROR(bad.validate(), "num_heads (4) must be a multiple of num_kv_heads (3)");
}

TEST(NnQwen3, TiedEmbeddingIsOneParameterAndAccumulatesBothGradients) {
  Generator g1(5), g2(6);
  nn::Qwen3ForCausalLM tied(tiny_config(true), {.dtype = DType::f64, .generator = &g1});
  nn::Qwen3ForCausalLM untied(tiny_config(false), {.dtype = DType::f64, .generator = &g2});
  EXPECT_TRUE(tied.lm_head->weight.is_same(tied.model->embed_tokens->weight));
  EXPECT_EQ(tied.state_dict().count("lm_head.weight"), 0u);  // as HF checkpoints of tied models

  // The untied twin holds the same values in two separate tensors.
  nn::StateDict sd = tied.state_dict();
  sd["lm_head.weight"] = sd.at("model.embed_tokens.weight");
  untied.load_state_dict(sd);
  Tensor ids = from_ints({1, 5, 9, 5, 63, 0}, {1, 6});
  next_token_loss(tied.forward(ids).logits, ids).backward();
  next_token_loss(untied.forward(ids).logits, ids).backward();
  const auto g = tied.model->embed_tokens->weight.grad().to_vector();
  const auto ge = untied.model->embed_tokens->weight.grad().to_vector();
  const auto gh = untied.lm_head->weight.grad().to_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], ge[i] + gh[i], 1e-12) << i;

  // A tied model accepts a checkpoint that also lists lm_head.weight (some HF repos do).
  nn::Qwen3ForCausalLM again(tiny_config(true), {.dtype = DType::f64});
  again.load_state_dict(sd);
  EXPECT_TRUE(bit_equal(again.lm_head->weight, sd.at("model.embed_tokens.weight")));
}

TEST(NnQwen3, CapturedLayerOutputs) {
  nn::Qwen3ForCausalLM lm(tiny_config());
  Tensor ids = from_ints({3, 1, 4, 1, 5, 9, 2, 6}, {2, 4});
  auto out = lm.forward(ids, {.capture_layers = {1, 0}});
  ASSERT_EQ(out.layer_hidden.size(), 2u);
  EXPECT_EQ(out.logits.shape(), (Shape{2, 4, 64}));
  const Tensor h0 = lm.model->layer(0).forward(lm.model->embed_tokens->forward(ids), Tensor(),
                                               AttentionMask::causal());
  EXPECT_TRUE(bit_equal(out.layer_hidden[1], h0));
  EXPECT_TRUE(bit_equal(lm.model->norm->forward(out.layer_hidden[0]), out.hidden));
  auto features = lm.forward(ids, {.capture_layers = {0}, .logits = false});
  EXPECT_FALSE(features.logits.defined());
  TENSOR_EXPECT_ERROR(lm.forward(ids, {.capture_layers = {2}}), "asks for layer 2", "layers 0..1");
}

class NnQwen3Trace : public ::testing::Test {
 protected:
  void SetUp() override { MemoryTrace::enable(1 << 16); }
  void TearDown() override {
    MemoryTrace::disable();
    MemoryTrace::clear();
  }
};

TEST_F(NnQwen3Trace, ForwardAllocationsCarryModulePaths) {
  nn::Qwen3ForCausalLM lm(tiny_config());
  MemoryTrace::clear();
  lm.forward(from_ints({1, 2, 3}, {1, 3}));
  std::set<std::string> scopes;
  for (const TraceEvent& e : MemoryTrace::events()) {
    if (e.action == TraceAction::alloc) scopes.insert(MemoryTrace::scope_name(e.scope_id));
  }
  for (const char* s : {"lm/model/embed_tokens", "lm/model/layers.1/self_attn/q_proj",
                        "lm/model/layers.1/self_attn", "lm/model/layers.0/mlp/down_proj",
                        "lm/model/norm", "lm/lm_head"}) {
    EXPECT_TRUE(scopes.count(s)) << s << " not in " << ::testing::PrintToString(scopes);
  }
}

TEST(NnQwen3, OverfitsATinyBatchThenRoundTripsThroughSafetensors) {
  Generator gen(2024);
  nn::Qwen3ForCausalLM lm(tiny_config(), {.generator = &gen});
  std::vector<int64_t> tokens(2 * 12);
  for (auto& t : tokens) t = static_cast<int64_t>(gen.next_u64() % 64);
  const Tensor ids = from_ints(tokens, {2, 12});

  TinyAdam adam(lm.parameters(), 1e-2);
  const double initial = next_token_loss(lm.forward(ids).logits, ids).item();
  EXPECT_NEAR(initial, next_token_loss_by_gather(lm.forward(ids).logits, ids).item(), 1e-5);
  double loss = initial;
  int steps = 0;
  constexpr int kMaxSteps = 100;
  constexpr double kFactor = 100.0;
  while (steps < kMaxSteps && loss > initial / kFactor) {
    lm.zero_grad();
    Tensor l = next_token_loss(lm.forward(ids).logits, ids);
    l.backward();
    adam.step();
    loss = l.item();
    ++steps;
  }
  const double final_loss = next_token_loss(lm.forward(ids).logits, ids).item();
  std::cout << "[ overfit  ] loss " << initial << " -> " << final_loss << " (x"
            << initial / final_loss << ") in " << steps << " Adam steps\n";
  RecordProperty("overfit_factor", std::to_string(initial / final_loss));
  EXPECT_NEAR(initial, std::log(64.0), 0.5);  // starts near chance
  EXPECT_LT(final_loss, initial / kFactor) << "after " << steps << " steps";

  // The trained state round-trips bit-exactly and reproduces the logits exactly.
  TempDir dir;
  const Tensor logits = lm.forward(ids).logits;
  nn::save_checkpoint(lm, dir.file("lm.safetensors"));
  nn::StateDict reread = nn::read_state_dict(dir.file("lm.safetensors"));
  for (const auto& [name, p] : lm.named_parameters()) {
    EXPECT_TRUE(bit_equal(reread.at(name), p)) << name;
  }
  nn::Qwen3ForCausalLM fresh(tiny_config());
  ASSERT_FALSE(bit_equal(fresh.forward(ids).logits, logits));
  nn::load_checkpoint(fresh, dir.file("lm.safetensors"));
  EXPECT_TRUE(bit_equal(fresh.forward(ids).logits, logits));
  // And through a state dict written with the plain safetensors writer, sharded.
  nn::Qwen3ForCausalLM other(tiny_config());
  safetensors::NamedTensors named(reread.begin(), reread.end());
  safetensors::save_sharded(named, dir.str(), 16 * 1024);
  other.load_state_dict(nn::read_state_dict(dir.str()));
  EXPECT_TRUE(bit_equal(other.forward(ids).logits, logits));
  // The decoder alone (what a drafter reads features from) loads from the LM's file
  // under the "model." prefix, without lm_head.
  nn::Qwen3Model decoder(tiny_config());
  nn::load_checkpoint(decoder, dir.file("lm.safetensors"), {.prefix = "model."});
  EXPECT_TRUE(bit_equal(decoder.forward(ids).hidden, lm.model->forward(ids).hidden));
}

}  // namespace
}  // namespace cg
