// Why this file exists: the Qwen3 attention forward with DFlash context injection
// (attention.h), written as the op sequence Hugging Face's Qwen3Attention runs so that
// real checkpoints reproduce their reference outputs.
#include "nn/attention.h"

#include "ops/attention.h"
#include "ops/elementwise.h"
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
      head_dim_(config.head_dim),
      rotary_dim_(config.rotary_dim()),
      output_gate_(config.attn_output_gate) {
  config.validate();
  const LinearOptions no_bias{.bias = false, .init = init};
  const int64_t q_width = num_heads_ * head_dim_ * (output_gate_ ? 2 : 1);
  q_proj = register_module("q_proj", std::make_unique<Linear>(hidden_, q_width, no_bias));
  k_proj = register_module("k_proj",
                           std::make_unique<Linear>(hidden_, num_kv_heads_ * head_dim_, no_bias));
  v_proj = register_module("v_proj",
                           std::make_unique<Linear>(hidden_, num_kv_heads_ * head_dim_, no_bias));
  o_proj =
      register_module("o_proj", std::make_unique<Linear>(num_heads_ * head_dim_, hidden_, no_bias));
  const bool zc = config.zero_centred_norm;
  q_norm =
      register_module("q_norm", std::make_unique<RMSNorm>(head_dim_, config.rms_eps, init, zc));
  k_norm =
      register_module("k_norm", std::make_unique<RMSNorm>(head_dim_, config.rms_eps, init, zc));
  rotary_emb = register_module("rotary_emb",
                               std::make_unique<RotaryEmbedding>(rotary_dim_, config.rope_theta));
}

std::pair<Tensor, Tensor> Attention::queries_and_gate(const Tensor& x) const {
  const int64_t B = x.size(0), S = x.size(1);
  if (!output_gate_) {
    return {q_norm->forward(view(q_proj->forward(x), {B, S, num_heads_, head_dim_})), Tensor()};
  }
  // Note [Gated attention]: per head [query | gate].
  const Tensor both = view(q_proj->forward(x), {B, S, num_heads_, 2 * head_dim_});
  const Tensor q = q_norm->forward(narrow(both, 3, 0, head_dim_));
  const Tensor gate =
      reshape(narrow(both, 3, head_dim_, head_dim_), {B, S, num_heads_ * head_dim_});
  return {q, gate};
}

Tensor Attention::rotate(const Tensor& x, const Tensor& positions) const {
  if (rotary_dim_ == head_dim_) return rotary_emb->forward(x, positions);
  const int64_t last = x.dim() - 1;
  return cat({rotary_emb->forward(narrow(x, last, 0, rotary_dim_), positions),
              narrow(x, last, rotary_dim_, head_dim_ - rotary_dim_)},
             last);
}

Tensor Attention::project_output(const Tensor& out, const Tensor& gate) const {
  return o_proj->forward(gate.defined() ? out * sigmoid(gate) : out);
}

std::pair<Tensor, Tensor> Attention::keys_values(const Tensor& hidden,
                                                 const Tensor& positions) const {
  CG_CHECK(hidden.defined() && hidden.dim() == 3 && hidden.size(2) == hidden_, "Attention '",
           name(), "': hidden states must be [B, L, ", hidden_, "], got ",
           hidden.defined() ? shape_str(hidden.shape()) : "undefined");
  const int64_t B = hidden.size(0), L = hidden.size(1);
  Tensor k = view(k_proj->forward(hidden), {B, L, num_kv_heads_, head_dim_});
  k = rotate(k_norm->forward(k), positions_or_default(positions, L, hidden.device()));
  Tensor v = view(v_proj->forward(hidden), {B, L, num_kv_heads_, head_dim_});
  return {k, v};
}

Tensor Attention::forward_cached(const Tensor& x, KVCache& cache, int64_t layer,
                                 const Tensor& positions, const AttentionMask& mask) const {
  auto scope = enter_scope();
  CG_CHECK(x.defined() && x.dim() == 3 && x.size(2) == hidden_, "Attention '", name(),
           "': x must be [B, n, ", hidden_, "], got ",
           x.defined() ? shape_str(x.shape()) : "undefined");
  const int64_t B = x.size(0), n = x.size(1);
  const Tensor pos =
      positions.defined() ? positions : RotaryEmbedding::positions(cache.length(), n, x.device());
  auto [q, gate] = queries_and_gate(x);
  q = rotate(q, pos);
  const auto [k_new, v_new] = keys_values(x, pos);
  const auto [k, v] = cache.write(layer, k_new, v_new);  // [B, Hkv, length + n, hd]
  // Causal aligns to the bottom right: new query i sees keys 0 .. length + i.
  Tensor out = scaled_dot_product_attention(transpose(q, 1, 2), k, v, mask);
  out = reshape(transpose(out, 1, 2), {B, n, num_heads_ * head_dim_});
  return project_output(out, gate);
}

Tensor Attention::forward(const Tensor& x, const Tensor& positions, const AttentionMask& mask,
                          const AttentionContext& context) const {
  auto scope = enter_scope();
  CG_CHECK(x.defined() && x.dim() == 3 && x.size(2) == hidden_, "Attention '", name(),
           "': x must be [B, S, ", hidden_, "], got ",
           x.defined() ? shape_str(x.shape()) : "undefined");
  const int64_t B = x.size(0), S = x.size(1);
  const Tensor pos = positions_or_default(positions, S, x.device());

  auto [q, gate] = queries_and_gate(x);
  q = rotate(q, pos);
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
  return project_output(out, gate);
}

}  // namespace cg::nn
