// Why this file exists: Embedding, RMSNorm and RotaryEmbedding (layers.h) -- their
// initialisation (under MemoryCategory::parameter) and their one-op forwards.
#include "nn/layers.h"

#include <cmath>

#include "nn/init_mode.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/norm.h"
#include "ops/rotary.h"
#include "ops/shape_ops.h"

namespace cg::nn {

// ---- Embedding -------------------------------------------------------------------

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, InitOptions init)
    : Module("Embedding") {
  CG_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding: num_embeddings (", num_embeddings,
           ") and embedding_dim (", embedding_dim, ") must be positive");
  CategoryGuard category(MemoryCategory::parameter);
  if (SkipParameterInit::active()) {  // Note [Uninitialized parameters]
    weight = empty({num_embeddings, embedding_dim}, init.tensor_options());
  } else {
    weight = randn({num_embeddings, embedding_dim}, init.tensor_options(), init.generator);
    count_parameter_init();
  }
  register_parameter("weight", &weight);
}

Tensor Embedding::forward(const Tensor& ids) const {
  auto scope = enter_scope();
  return embedding(weight, ids);
}

// ---- RMSNorm ---------------------------------------------------------------------

// Note [Zero-centred RMSNorm]: the Qwen3.5 family stores each RMSNorm's scale as an offset
// from 1 (transformers' Qwen3_5RMSNorm: weight initialised to zeros, y = norm(x) * (1 + w),
// all in fp32, one rounding to x's dtype at the end). Forming 1 + w in bf16 would round the
// scale itself (w = 0.01 becomes 1.0078), so forward() makes the scale in fp32 and runs the
// fused norm on fp32 x; for an f32 model that is the plain op with weight 1 + w. The rule for
// each norm of a Qwen3.5 target and of its drafter:
//   input_layernorm, post_attention_layernorm, model.norm   zero-centred (1 + w)
//   self_attn.q_norm, self_attn.k_norm (full layers)          zero-centred (1 + w)
//   linear_attn.norm (the DeltaNet's gated norm)             plain w, times SiLU(z)
//   every norm of a DFlash drafter (hidden_norm, layer norms,
//   q/k norms, final norm), whatever its target             plain w (its own config)
// Qwen3 dense targets: plain w everywhere (zero_centred_norm false).
RMSNorm::RMSNorm(int64_t dim, double eps, InitOptions init, bool zero_centred)
    : Module("RMSNorm"), eps_(eps), zero_centred_(zero_centred) {
  CG_CHECK(dim > 0, "RMSNorm: dim must be positive, got ", dim);
  CG_CHECK(eps >= 0.0, "RMSNorm: eps must be >= 0, got ", eps);
  CategoryGuard category(MemoryCategory::parameter);
  if (SkipParameterInit::active()) {  // Note [Uninitialized parameters]
    weight = empty({dim}, init.tensor_options());
  } else {
    weight =
        zero_centred ? zeros({dim}, init.tensor_options()) : ones({dim}, init.tensor_options());
    count_parameter_init();
  }
  register_parameter("weight", &weight);
}

Tensor RMSNorm::forward(const Tensor& x) const {
  auto scope = enter_scope();
  CG_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == weight.size(0), "RMSNorm(", weight.size(0),
           ") '", name(), "': the input's last dim must be ", weight.size(0), ", got shape ",
           x.defined() ? shape_str(x.shape()) : "undefined");
  if (!zero_centred_) return rms_norm(x, weight, eps_);
  const DType compute = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor scale = to_dtype(weight, compute) + 1.0;
  return to_dtype(rms_norm(to_dtype(x, compute), scale, eps_), x.dtype());
}

// ---- RotaryEmbedding -------------------------------------------------------------

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, double theta)
    : Module("RotaryEmbedding"), head_dim_(head_dim), theta_(theta) {
  CG_CHECK(head_dim > 0 && head_dim % 2 == 0,
           "RotaryEmbedding: head_dim must be even and "
           "positive (dims are rotated in pairs), got ",
           head_dim);
  CG_CHECK(theta > 0.0, "RotaryEmbedding: theta must be positive, got ", theta);
}

Tensor RotaryEmbedding::forward(const Tensor& x, const Tensor& positions) const {
  auto scope = enter_scope();
  CG_CHECK(x.defined() && x.dim() >= 3 && x.size(-1) == head_dim_, "RotaryEmbedding(head_dim ",
           head_dim_, "): x must be [..., S, H, ", head_dim_, "], got ",
           x.defined() ? shape_str(x.shape()) : "undefined");
  CG_CHECK(
      positions.defined() && (positions.dtype() == DType::i64 || positions.dtype() == DType::i32),
      "RotaryEmbedding: positions must be an i64 (or i32) tensor, got ",
      positions.defined() ? dtype_name(positions.dtype()) : "undefined");
  return apply_rotary(x, positions, theta_);
}

Tensor RotaryEmbedding::inv_freq() const {
  std::vector<double> f(static_cast<size_t>(head_dim_ / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = std::pow(theta_, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim_));
  }
  return from_vector(f, {head_dim_ / 2}, {.dtype = DType::f64});
}

Tensor RotaryEmbedding::positions(int64_t start, int64_t length, Device device) {
  CG_CHECK(length >= 0, "RotaryEmbedding::positions: length must be >= 0, got ", length);
  return arange(static_cast<double>(start), static_cast<double>(start + length), 1.0,
                {.dtype = DType::i64, .device = device});
}

}  // namespace cg::nn
