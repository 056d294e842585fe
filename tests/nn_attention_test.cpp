// Why this file exists: Attention is where DFlash differs from a plain decoder (keys and
// values from a context placed before the block's own), so its output is checked
// against an independent reference -- projections, norms and RoPE through the
// submodules, then softmax attention written as loops over a manual concatenation of
// context and block keys, with grouped-query head sharing -- and against running
// self-attention over the concatenated sequence. The decoder layer is checked to be
// the pre-norm residual composition of its parts.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/factories.h"
#include "gradcheck.h"
#include "nn/qwen3.h"
#include "nn_test_util.h"
#include "ops/ops.h"

namespace cg {
namespace {

nn::Qwen3Config small_config() {
  nn::Qwen3Config c;
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 6;  // != hidden / heads, as in Qwen3
  c.intermediate_size = 24;
  c.rope_theta = 1e4;
  c.rms_eps = 1e-6;
  return c;
}

// softmax(q k^T / sqrt(hd)) v by loops. q [B, S, Hq, hd], k/v [B, L, Hkv, hd] (host
// vectors); allowed(i, j) says whether query i may see key j. -> [B, S, Hq * hd].
std::vector<double> reference_attention(const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v, int64_t B, int64_t S,
                                        int64_t L, int64_t Hq, int64_t Hkv, int64_t hd,
                                        const std::function<bool(int64_t, int64_t)>& allowed) {
  std::vector<double> out(static_cast<size_t>(B * S * Hq * hd), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kh = h / (Hq / Hkv);  // grouped-query: heads share a kv head
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> p(static_cast<size_t>(L), 0.0);
        double mx = -INFINITY;
        for (int64_t j = 0; j < L; ++j) {
          if (!allowed(i, j)) continue;
          double s = 0;
          for (int64_t d = 0; d < hd; ++d) {
            s += q[((b * S + i) * Hq + h) * hd + d] * k[((b * L + j) * Hkv + kh) * hd + d];
          }
          p[j] = s / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, p[j]);
        }
        double z = 0;
        for (int64_t j = 0; j < L; ++j) {
          p[j] = allowed(i, j) ? std::exp(p[j] - mx) : 0.0;
          z += p[j];
        }
        for (int64_t j = 0; j < L; ++j) {
          for (int64_t d = 0; d < hd; ++d) {
            out[((b * S + i) * Hq + h) * hd + d] += p[j] / z * v[((b * L + j) * Hkv + kh) * hd + d];
          }
        }
      }
    }
  }
  return out;
}

TEST(NnAttention, ContextInjectionMatchesManualConcatenation) {
  const nn::Qwen3Config c = small_config();
  Generator gen(11);
  nn::Attention attn(c, {.dtype = DType::f64, .generator = &gen});
  // Two DFlash blocks of 2 tokens (anchors 2 and 4) against 5 context keys.
  const int64_t B = 2, S = 4, C = 5, Hq = 4, Hkv = 2, hd = 6;
  Tensor x = randn({B, S, 16}, {.dtype = DType::f64}, &gen);
  Tensor ctx = randn({B, C, 16}, {.dtype = DType::f64}, &gen);
  Tensor x_pos = from_ints({2, 3, 4, 5}, {S});  // block tokens at anchor + k
  Tensor ctx_pos = arange(C);                   // context keys at 0 .. C-1

  // Reference: q/k/v through the submodules, keys concatenated by hand on the host.
  NoGradGuard no_grad;
  auto qkv = [&](nn::Linear* proj, nn::RMSNorm* norm, const Tensor& h, const Tensor& pos,
                 int64_t heads) {
    Tensor t = reshape(proj->forward(h), {B, h.size(1), heads, hd});
    return norm ? attn.rotary_emb->forward(norm->forward(t), pos) : t;
  };
  const auto q = qkv(attn.q_proj, attn.q_norm, x, x_pos, Hq).to_vector();
  auto concat = [&](const Tensor& first, const Tensor& second) {  // on dim 1, by hand
    std::vector<double> out;
    const auto a = first.to_vector(), b = second.to_vector();
    const int64_t row_a = C * Hkv * hd, row_b = S * Hkv * hd;
    for (int64_t bb = 0; bb < B; ++bb) {
      out.insert(out.end(), a.begin() + bb * row_a, a.begin() + (bb + 1) * row_a);
      out.insert(out.end(), b.begin() + bb * row_b, b.begin() + (bb + 1) * row_b);
    }
    return out;
  };
  const auto k = concat(qkv(attn.k_proj, attn.k_norm, ctx, ctx_pos, Hkv),
                        qkv(attn.k_proj, attn.k_norm, x, x_pos, Hkv));
  const auto v = concat(qkv(attn.v_proj, nullptr, ctx, ctx_pos, Hkv),
                        qkv(attn.v_proj, nullptr, x, x_pos, Hkv));

  struct Case {
    AttentionMask mask;
    std::function<bool(int64_t, int64_t)> allowed;
  };
  const int64_t anchors[] = {2, 4};
  const Case cases[] = {
      {AttentionMask::none(), [](int64_t, int64_t) { return true; }},
      // causal aligns bottom-right: query i sees all C context keys and block keys <= i.
      {AttentionMask::causal(), [&](int64_t i, int64_t j) { return j <= C + i; }},
      // DFlash: block b sees context keys j < anchor_b and its own block, nothing else.
      {AttentionMask::dflash_blocks(C, 2, from_ints({2, 4}, {2})),
       [&](int64_t i, int64_t j) { return j < C ? j < anchors[i / 2] : (j - C) / 2 == i / 2; }},
  };
  for (const Case& cs : cases) {
    const auto heads = reference_attention(q, k, v, B, S, C + S, Hq, Hkv, hd, cs.allowed);
    const Tensor expected =
        attn.o_proj->forward(from_vector(heads, {B, S, Hq * hd}, {.dtype = DType::f64}));
    const Tensor got = attn.forward(x, x_pos, cs.mask, {.hidden = ctx, .positions = ctx_pos});
    ASSERT_EQ(got.shape(), (Shape{B, S, 16}));
    const auto e = expected.to_vector(), g = got.to_vector();
    for (size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-10) << cs.mask.str();

    // Without DFlash blocks: the same as self-attention over [context; block], keeping
    // the block's rows.
    if (cs.mask.kind() == AttentionMask::Kind::dflash_blocks) continue;
    const Tensor joint = attn.forward(cat({ctx, x}, 1), cat({ctx_pos, x_pos}, 0), cs.mask);
    const auto jv = contiguous(narrow(joint, 1, C, S)).to_vector();
    for (size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(jv[i], e[i], 1e-10);
  }
}

TEST(NnAttention, GradientsReachInputsContextAndWeights) {
  const nn::Qwen3Config c = small_config();
  Generator gen(12);
  nn::Attention attn(c, {.dtype = DType::f64, .generator = &gen});
  const Tensor ctx_pos = from_ints({0, 1}, {2});
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return attn.forward(in[0], Tensor(), AttentionMask::causal(),
                            {.hidden = in[1], .positions = ctx_pos});
      },
      testing::make_input({1, 3, 16}, 1), testing::make_input({1, 2, 16}, 2));
  attn.zero_grad();
  sum(attn.forward(randn({1, 3, 16}, {.dtype = DType::f64}, &gen), Tensor(),
                   AttentionMask::causal(),
                   {.hidden = randn({1, 2, 16}, {.dtype = DType::f64}, &gen)}))
      .backward();
  for (const auto& [name, p] : attn.named_parameters()) { EXPECT_TRUE(p.grad().defined()) << name; }
}

TEST(NnAttention, ShapeErrorsNameTheModule) {
  nn::Attention attn(small_config());
  attn.set_name("self_attn");
  EXPECT_THROW(attn.forward(zeros({2, 3, 15})), Error);
  try {
    attn.forward(zeros({2, 3, 16}), Tensor(), AttentionMask::none(), {.hidden = zeros({1, 4, 16})});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("context must be [B=2"), std::string::npos) << e.message();
  }
}

TEST(NnDecoderLayer, PreNormResidualComposition) {
  const nn::Qwen3Config c = small_config();
  Generator gen(13);
  nn::Qwen3DecoderLayer layer(c, {.dtype = DType::f64, .generator = &gen});
  {
    NoGradGuard no_grad;  // non-trivial norm weights, so a swapped norm would show
    copy_(layer.input_layernorm->weight, rand({16}, {.dtype = DType::f64}, &gen, 0.5, 1.5));
    copy_(layer.post_attention_layernorm->weight,
          rand({16}, {.dtype = DType::f64}, &gen, 0.5, 1.5));
  }
  Tensor x = randn({2, 4, 16}, {.dtype = DType::f64}, &gen);
  const Tensor h = x + layer.self_attn->forward(layer.input_layernorm->forward(x), Tensor(),
                                                AttentionMask::causal());
  const Tensor expected = h + layer.mlp->forward(layer.post_attention_layernorm->forward(h));
  const Tensor got = layer.forward(x, Tensor(), AttentionMask::causal());
  EXPECT_TRUE(testing_nn::bit_equal(got, expected));
  // The MLP is down(silu(gate x) * up x).
  const Tensor g = layer.mlp->gate_proj->forward(x), u = layer.mlp->up_proj->forward(x);
  const Tensor mlp_ref = layer.mlp->down_proj->forward(silu(g) * u);
  const auto a = layer.mlp->forward(x).to_vector(), b = mlp_ref.to_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
}

}  // namespace
}  // namespace cg
