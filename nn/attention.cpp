// Why this file exists: the Qwen3 attention forward with DFlash context injection
// (attention.h), written as the op sequence Hugging Face's Qwen3Attention runs so that
// real checkpoints reproduce their reference outputs.
#include "nn/attention.h"

#include "ops/attention.h"
#include "ops/join_ops.h"
#include "ops/shape_ops.h"

namespace cg::nn {

namespace {
// Positions 0 .. length-1 when the caller gave none.
Tensor positions_or_default(const Tensor& positions, int64_t length, Device device) {
  return positions.defined() ? positions : RotaryEmbedding::positions(0, length, device);
}
}  // namespace

Attention::Attention(const Qwen3Config& config, InitOptions init)
    : Module("Attention"),
      hidden_(config.hidden_size),
      num_heads_(config.num_heads),
      num_kv_heads_(config.num_kv_heads),
      head_dim_(config.head_dim) {
  config.validate();
  const LinearOptions no_bias{.bias = false, .init = init};
  q_proj =
      register_module("q_proj", std::make_unique<Linear>(hidden_, num_heads_ * head_dim_, no_bias));
  k_proj = register_module("k_proj",
                           std::make_unique<Linear>(hidden_, num_kv_heads_ * head_dim_, no_bias));
  v_proj = register_module("v_proj",
                           std::make_unique<Linear>(hidden_, num_kv_heads_ * head_dim_, no_bias));
  o_proj =
      register_module("o_proj", std::make_unique<Linear>(num_heads_ * head_dim_, hidden_, no_bias));
  q_norm = register_module("q_norm", std::make_unique<RMSNorm>(head_dim_, config.rms_eps, init));
  k_norm = register_module("k_norm", std::make_unique<RMSNorm>(head_dim_, config.rms_eps, init));
  rotary_emb = register_module("rotary_emb",
                               std::make_unique<RotaryEmbedding>(head_dim_, config.rope_theta));
}

std::pair<Tensor, Tensor> Attention::keys_values(const Tensor& hidden,
                                                 const Tensor& positions) const {
  CG_CHECK(hidden.defined() && hidden.dim() == 3 && hidden.size(2) == hidden_, "Attention '",
           name(), "': hidden states must be [B, L, ", hidden_, "], got ",
           hidden.defined() ? shape_str(hidden.shape()) : "undefined");
  const int64_t B = hidden.size(0), L = hidden.size(1);
  Tensor k = view(k_proj->forward(hidden), {B, L, num_kv_heads_, head_dim_});
  k = rotary_emb->forward(k_norm->forward(k), positions_or_default(positions, L, hidden.device()));
  Tensor v = view(v_proj->forward(hidden), {B, L, num_kv_heads_, head_dim_});
  return {k, v};
}

Tensor Attention::forward_cached(const Tensor& x, KVCache& cache, int64_t layer,
                                 const Tensor& positions) const {
  auto scope = enter_scope();
  CG_CHECK(x.defined() && x.dim() == 3 && x.size(2) == hidden_, "Attention '", name(),
           "': x must be [B, n, ", hidden_, "], got ",
           x.defined() ? shape_str(x.shape()) : "undefined");
  const int64_t B = x.size(0), n = x.size(1);
  const Tensor pos =
      positions.defined() ? positions : RotaryEmbedding::positions(cache.length(), n, x.device());
  Tensor q = view(q_proj->forward(x), {B, n, num_heads_, head_dim_});
  q = rotary_emb->forward(q_norm->forward(q), pos);
  const auto [k_new, v_new] = keys_values(x, pos);
  const auto [k, v] = cache.write(layer, k_new, v_new);  // [B, Hkv, length + n, hd]
  // Causal aligns to the bottom right: new query i sees keys 0 .. length + i.
  Tensor out = scaled_dot_product_attention(transpose(q, 1, 2), k, v, AttentionMask::causal());
  out = reshape(transpose(out, 1, 2), {B, n, num_heads_ * head_dim_});
  return o_proj->forward(out);
}

Tensor Attention::forward(const Tensor& x, const Tensor& positions, const AttentionMask& mask,
                          const AttentionContext& context) const {
  auto scope = enter_scope();
  CG_CHECK(x.defined() && x.dim() == 3 && x.size(2) == hidden_, "Attention '", name(),
           "': x must be [B, S, ", hidden_, "], got ",
           x.defined() ? shape_str(x.shape()) : "undefined");
  const int64_t B = x.size(0), S = x.size(1);
  const Tensor pos = positions_or_default(positions, S, x.device());

  Tensor q = view(q_proj->forward(x), {B, S, num_heads_, head_dim_});
  q = rotary_emb->forward(q_norm->forward(q), pos);
  auto [k, v] = keys_values(x, pos);

  if (context.hidden.defined()) {
    CG_CHECK(context.hidden.dim() == 3 && context.hidden.size(0) == B &&
                 context.hidden.size(2) == hidden_,
             "Attention '", name(), "': context must be [B=", B, ", C, ", hidden_, "] like x ",
             shape_str(x.shape()), ", got ", shape_str(context.hidden.shape()));
    auto [k_ctx, v_ctx] = keys_values(context.hidden, context.positions);
    k = cat({k_ctx, k}, 1);  // context keys first: [B, C + S, Hkv, hd]
    v = cat({v_ctx, v}, 1);
  }
  // sdpa wants [B, H, L, hd]; transposed views, no copies.
  Tensor out = scaled_dot_product_attention(transpose(q, 1, 2), transpose(k, 1, 2),
                                            transpose(v, 1, 2), mask);
  out = reshape(transpose(out, 1, 2), {B, S, num_heads_ * head_dim_});
  return o_proj->forward(out);
}

}  // namespace cg::nn
