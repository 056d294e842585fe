// Why this file exists: the Gated DeltaNet layer of nn/gated_deltanet.h, wired as
// transformers' Qwen3_5GatedDeltaNet computes it (the casts included, so a bf16 target
// rounds where the reference rounds):
//   qkv  = in_proj_qkv(x)                          [B, S, 2 Hk dk + Hv dv], model dtype
//   qkv  = silu(causal_conv1d(qkv))                one depthwise conv over all q|k|v channels
//   q, k, v = split(qkv) in that order, viewed per head
//   beta = sigmoid(in_proj_b(x))                   model dtype (the rule reads it in fp32)
//   g    = -exp(A_log) * softplus(in_proj_a(x) + dt_bias)   fp32
//   core = gated_delta_rule(q, k, v, g, beta)      l2norm(q, k) in fp32, q * dk^-0.5
//   y    = w * rms(core) (rms in fp32, rounded to the model dtype, times w), then * silu(z)
//          in fp32, rounded: transformers' Qwen3_5RMSNormGated, z = in_proj_z(x) per head
//   out  = out_proj(y)
#include "nn/gated_deltanet.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "nn/init_mode.h"
#include "ops/elementwise.h"
#include "ops/join_ops.h"
#include "ops/norm.h"
#include "ops/shape_ops.h"

namespace cg::nn {

namespace {

// A module holding one parameter of its parent under the name "weight", so that the
// parent's member tensor loads as "<child>.weight" (Hugging Face's conv1d.weight and
// norm.weight are parameters of submodules there).
class WeightOf : public Module {
 public:
  WeightOf(const char* type_name, Tensor* slot) : Module(type_name) {
    register_parameter("weight", slot);
  }
};

// softplus(x) = log(1 + exp(x)), written so that exp never overflows:
// max(x, 0) + log(1 + exp(-|x|)).
Tensor softplus(const Tensor& x) {
  const Tensor pos = relu(x), neg_part = relu(neg(x));
  return add(pos, log(add_scalar(exp(neg(add(pos, neg_part))), 1.0)));
}

}  // namespace

GatedDeltaResult gated_delta_from_projections(const GatedDeltaShape& shape, const Tensor& mixed_qkv,
                                              const Tensor& conv_weight, const Tensor& history,
                                              const Tensor& g, const Tensor& beta,
                                              const Tensor& state) {
  NoGradGuard no_grad;
  const Tensor mixed = causal_conv1d(mixed_qkv, conv_weight, history, /*silu=*/true);
  const int64_t B = mixed.size(0), n = mixed.size(1), key_dim = shape.key_dim();
  const Tensor q = view(narrow(mixed, 2, 0, key_dim), {B, n, shape.num_k_heads, shape.k_head_dim});
  const Tensor k =
      view(narrow(mixed, 2, key_dim, key_dim), {B, n, shape.num_k_heads, shape.k_head_dim});
  const Tensor v = view(narrow(mixed, 2, 2 * key_dim, shape.value_dim()),
                        {B, n, shape.num_v_heads, shape.v_head_dim});
  return gated_delta_rule(q, k, v, g, beta,
                          {.state = state,
                           .l2norm_qk = true,
                           .scale = 1.0 / std::sqrt(static_cast<double>(shape.k_head_dim))});
}

GatedDeltaNet::GatedDeltaNet(const Qwen3Config& config, InitOptions init)
    : Module("GatedDeltaNet"),
      shape_(GatedDeltaShape::of(config)),
      hidden_(config.hidden_size),
      eps_(config.rms_eps) {
  const GatedDeltaShape& s = shape_;
  CG_CHECK(s.num_k_heads > 0 && s.num_v_heads > 0 && s.k_head_dim > 0 && s.v_head_dim > 0 &&
               s.conv_kernel > 0,
           "GatedDeltaNet: linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, "
           "linear_value_head_dim and linear_conv_kernel_dim must be positive, got ",
           s.num_k_heads, ", ", s.num_v_heads, ", ", s.k_head_dim, ", ", s.v_head_dim, ", ",
           s.conv_kernel);
  CG_CHECK(s.num_v_heads % s.num_k_heads == 0, "GatedDeltaNet: linear_num_value_heads (",
           s.num_v_heads, ") must be a multiple of linear_num_key_heads (", s.num_k_heads, ")");
  const LinearOptions linear{.init = init};
  in_proj_qkv =
      register_module("in_proj_qkv", std::make_unique<Linear>(hidden_, s.conv_dim(), linear));
  in_proj_z =
      register_module("in_proj_z", std::make_unique<Linear>(hidden_, s.value_dim(), linear));
  in_proj_b =
      register_module("in_proj_b", std::make_unique<Linear>(hidden_, s.num_v_heads, linear));
  in_proj_a =
      register_module("in_proj_a", std::make_unique<Linear>(hidden_, s.num_v_heads, linear));
  out_proj = register_module("out_proj", std::make_unique<Linear>(s.value_dim(), hidden_, linear));
  {
    CategoryGuard category(MemoryCategory::parameter);
    const TensorOptions opts = init.tensor_options();
    const Shape conv_shape{s.conv_dim(), 1, s.conv_kernel};
    if (SkipParameterInit::active()) {  // Note [Uninitialized parameters]
      conv1d_weight = empty(conv_shape, opts);
      dt_bias = empty({s.num_v_heads}, opts);
      A_log = empty({s.num_v_heads}, opts);
      norm_weight = empty({s.v_head_dim}, opts);
    } else {
      // PyTorch's Conv1d: kaiming-uniform(a = sqrt(5)) over fan_in = K (one input channel
      // per group): uniform in +-1/sqrt(K).
      const double bound = 1.0 / std::sqrt(static_cast<double>(s.conv_kernel));
      conv1d_weight = rand(conv_shape, opts, init.generator, -bound, bound);
      dt_bias = ones({s.num_v_heads}, opts);
      // A uniform in [0.01, 16) (transformers keeps it away from 0 so log(A) is finite).
      const Tensor a = rand({s.num_v_heads}, {.dtype = DType::f64}, init.generator, 0.01, 16.0);
      A_log = to_device(to_dtype(log(a), init.dtype), init.device);
      norm_weight = ones({s.v_head_dim}, opts);
      for (int i = 0; i < 4; ++i) count_parameter_init();
    }
  }
  register_module("conv1d", std::make_unique<WeightOf>("Conv1d", &conv1d_weight));
  register_parameter("dt_bias", &dt_bias);
  register_parameter("A_log", &A_log);
  register_module("norm", std::make_unique<WeightOf>("RMSNormGated", &norm_weight));
}

void GatedDeltaNet::check_input(const Tensor& x, const char* what) const {
  CG_CHECK(x.defined() && x.dim() == 3 && x.size(2) == hidden_, "GatedDeltaNet '", name(), "' ",
           what, ": x must be [B, S, hidden=", hidden_, "], got ",
           x.defined() ? shape_str(x.shape()) : "undefined");
  if (!GradMode::is_enabled()) return;
  bool needs_grad = x.requires_grad();
  for (const auto& [param_name, p] : named_parameters())
    needs_grad = needs_grad || p.requires_grad();
  CG_CHECK(!needs_grad, "GatedDeltaNet '", name(), "' ", what,
           ": the layer records no gradient (it runs frozen targets), but grad mode is on and ",
           x.requires_grad() ? "x" : "its parameters", " require grad; freeze() the model or ",
           "run it under cg::NoGradGuard");
}

GatedDeltaNet::Gates GatedDeltaNet::gates_of(const Tensor& x) const {
  Gates gates;
  gates.beta = sigmoid(in_proj_b->forward(x));  // rounded to the model dtype, as transformers
  const Tensor a = to_dtype(in_proj_a->forward(x), DType::f32);
  const Tensor decay_rate = exp(to_dtype(A_log, DType::f32));  // [Hv]
  gates.g = neg(mul(decay_rate, softplus(add(a, to_dtype(dt_bias, DType::f32)))));
  return gates;
}

Tensor GatedDeltaNet::output_of(const Tensor& core, const Tensor& x) const {
  const int64_t B = x.size(0), S = x.size(1);
  const DType dtype = core.dtype();
  const Tensor z = view(in_proj_z->forward(x), {B, S, shape_.num_v_heads, shape_.v_head_dim});
  // Qwen3_5RMSNormGated: normalise in fp32, round, scale by w in the model dtype, then
  // gate by silu(z) in fp32 and round once more.
  const Tensor normed = to_dtype(rms_norm(to_dtype(core, DType::f32), Tensor(), eps_), dtype);
  const Tensor scaled = mul(normed, norm_weight);
  const Tensor gated = mul(to_dtype(scaled, DType::f32), silu(to_dtype(z, DType::f32)));
  return out_proj->forward(reshape(to_dtype(gated, dtype), {B, S, shape_.value_dim()}));
}

Tensor GatedDeltaNet::forward(const Tensor& x) const {
  auto scope = enter_scope();
  check_input(x, "forward");
  const Tensor mixed_qkv = in_proj_qkv->forward(x);
  const Gates gates = gates_of(x);
  const GatedDeltaResult r = gated_delta_from_projections(shape_, mixed_qkv, conv1d_weight,
                                                          Tensor(), gates.g, gates.beta, Tensor());
  return output_of(r.out, x);
}

Tensor GatedDeltaNet::forward_cached(const Tensor& x, KVCache& cache, int64_t layer) const {
  auto scope = enter_scope();
  NoGradGuard no_grad;
  check_input(x, "forward_cached");
  const Tensor mixed_qkv = in_proj_qkv->forward(x);
  const Gates gates = gates_of(x);
  const GatedDeltaResult r =
      gated_delta_from_projections(shape_, mixed_qkv, conv1d_weight, cache.conv_state(layer),
                                   gates.g, gates.beta, cache.recurrent_state(layer));
  cache.write_linear(layer, {.final_state = r.final_state,
                             .mixed_qkv = mixed_qkv,
                             .g = gates.g,
                             .beta = gates.beta,
                             .conv_weight = conv1d_weight});
  return output_of(r.out, x);
}

}  // namespace cg::nn
