// Why this file exists: construction and forward of the mixture-of-experts block (nn/moe.h),
// in transformers' order: the shared expert and the router read the same input; the routed
// experts' sum (ops/moe.h) plus the sigmoid-gated shared expert, in the model dtype.
#include "nn/moe.h"

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/views.h"
#include "nn/init_mode.h"
#include "nn/qwen3.h"
#include "ops/elementwise.h"
#include "ops/shape_ops.h"

namespace cg::nn {

namespace {

// transformers' initializer_range default, the std of its expert and router init.
constexpr double kInitStd = 0.02;

}  // namespace

MoeExperts::MoeExperts(int64_t num_experts, int64_t hidden_size, int64_t intermediate_size,
                       InitOptions init)
    : Module("MoeExperts") {
  CG_CHECK(num_experts > 0 && hidden_size > 0 && intermediate_size > 0,
           "MoeExperts: num_experts, hidden_size and intermediate_size must be positive, got ",
           num_experts, ", ", hidden_size, " and ", intermediate_size);
  {
    CategoryGuard category(MemoryCategory::parameter);
    const TensorOptions opts = init.tensor_options();
    const Shape gate_up_shape{num_experts, 2 * intermediate_size, hidden_size};
    const Shape down_shape{num_experts, hidden_size, intermediate_size};
    if (SkipParameterInit::active()) {  // Note [Uninitialized parameters]
      gate_up_proj = empty(gate_up_shape, opts);
      down_proj = empty(down_shape, opts);
    } else {
      gate_up_proj = randn(gate_up_shape, opts, init.generator, 0.0, kInitStd);
      down_proj = randn(down_shape, opts, init.generator, 0.0, kInitStd);
      count_parameter_init();
      count_parameter_init();
    }
  }
  register_parameter("gate_up_proj", &gate_up_proj);
  register_parameter("down_proj", &down_proj);
}

Tensor MoeExperts::forward(const Tensor& x, const MoeRouting& routing) const {
  auto scope = enter_scope();
  return moe_experts(x, gate_up_proj, down_proj, routing);
}

SparseMoeBlock::SparseMoeBlock(const Qwen3Config& config, InitOptions init)
    : Module("SparseMoeBlock"), top_k_(config.num_experts_per_tok), hidden_(config.hidden_size) {
  CG_CHECK(config.is_moe() && top_k_ >= 1 && top_k_ <= config.num_experts,
           "SparseMoeBlock: the config needs num_experts > 0 and 1 <= num_experts_per_tok <= "
           "num_experts, got ",
           config.num_experts, " experts and top ", top_k_);
  const LinearOptions no_bias{.bias = false, .init = init};
  gate = register_module("gate", std::make_unique<Linear>(hidden_, config.num_experts, no_bias));
  if (!SkipParameterInit::active()) {  // transformers' router init instead of nn.Linear's
    raw::copy_(gate->weight,
               randn(gate->weight.shape(), init.tensor_options(), init.generator, 0.0, kInitStd));
  }
  experts =
      register_module("experts", std::make_unique<MoeExperts>(config.num_experts, hidden_,
                                                              config.moe_intermediate_size, init));
  shared_expert = register_module(
      "shared_expert",
      std::make_unique<Qwen3MLP>(hidden_, config.shared_expert_intermediate_size, init));
  shared_expert_gate =
      register_module("shared_expert_gate", std::make_unique<Linear>(hidden_, 1, no_bias));
}

MoeRouting SparseMoeBlock::route(const Tensor& x) const {
  return moe_route(gate->forward(x), top_k_);
}

Tensor SparseMoeBlock::forward(const Tensor& x) const {
  auto scope = enter_scope();
  CG_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == hidden_, "SparseMoeBlock '", name(),
           "': x must be [..., hidden=", hidden_, "], got ",
           x.defined() ? shape_str(x.shape()) : "undefined");
  if (GradMode::is_enabled()) {
    bool needs_grad = x.requires_grad();
    for (const auto& [param_name, p] : named_parameters())
      needs_grad = needs_grad || p.requires_grad();
    CG_CHECK(!needs_grad, "SparseMoeBlock '", name(),
             "': the mixture-of-experts block records no gradient (it runs frozen targets), but "
             "grad mode is on and ",
             x.requires_grad() ? "x" : "its parameters",
             " require grad; freeze() the model or run it under cg::NoGradGuard");
  }
  const Tensor flat = reshape(x, {-1, hidden_});
  const Tensor shared = shared_expert->forward(flat);
  const Tensor routed = experts->forward(flat, route(flat));
  const Tensor gated_shared = mul(sigmoid(shared_expert_gate->forward(flat)), shared);
  return reshape(add(routed, gated_shared), x.shape());
}

}  // namespace cg::nn
