// Why this file exists: the entry points of ops/moe.h. Each checks its inputs and says what
// to change, makes them the layouts the kernel entries take (contiguous; routing weights in
// fp32 or f64, indices i32 and checked against E on the device) and calls the device's
// entry (ops/kernels.h). No autograd node: these ops run frozen targets only.
#include "ops/moe.h"

#include "core/views.h"
#include "ops/op_checks.h"

namespace cg {

MoeRouting moe_route(const Tensor& router_logits, int64_t top_k) {
  const char* op = "moe_route";
  check_defined(op, router_logits, "router_logits");
  check_floating(op, router_logits);
  CG_CHECK(router_logits.dim() == 2, op, ": router_logits must be [tokens, experts], got ",
           shape_str(router_logits.shape()), " (flatten the batch dims first)");
  const int64_t E = router_logits.size(1);
  CG_CHECK(E > 0, op, ": router_logits has no experts (shape ", shape_str(router_logits.shape()),
           ")");
  CG_CHECK(top_k >= 1 && top_k <= E, op, ": top_k must be in [1, ", E, "] (the experts), got ",
           top_k);
  check_no_grad(op, router_logits, "router_logits");
  return kernels_for(router_logits.device(), op).moe_route(raw::contiguous(router_logits), top_k);
}

Tensor moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                   const MoeRouting& routing) {
  const char* op = "moe_experts";
  check_defined(op, x, "x");
  check_defined(op, gate_up, "gate_up");
  check_defined(op, down, "down");
  check_defined(op, routing.weights, "routing.weights");
  check_defined(op, routing.indices, "routing.indices");
  check_floating(op, x);
  CG_CHECK(gate_up.dtype() == x.dtype() && down.dtype() == x.dtype(), op,
           ": x, gate_up and down must share one dtype, got ", dtype_name(x.dtype()), ", ",
           dtype_name(gate_up.dtype()), " and ", dtype_name(down.dtype()),
           "; convert them with cg::to(t, dtype)");
  for (const Tensor* t : {&gate_up, &down, &routing.weights, &routing.indices})
    check_same_device(op, x, *t);
  CG_CHECK(x.dim() == 2, op, ": x must be [tokens, hidden], got ", shape_str(x.shape()));
  const int64_t N = x.size(0), H = x.size(1);
  CG_CHECK(gate_up.dim() == 3 && gate_up.size(2) == H && gate_up.size(1) % 2 == 0 &&
               gate_up.size(0) > 0 && gate_up.size(1) > 0,
           op, ": gate_up must be [experts, 2 * intermediate, hidden=", H, "], got ",
           shape_str(gate_up.shape()));
  const int64_t E = gate_up.size(0), I = gate_up.size(1) / 2;
  const Shape down_shape{E, H, I};
  CG_CHECK(down.shape() == down_shape, op,
           ": down must be [experts, hidden, intermediate] = ", shape_str(down_shape),
           " to match gate_up ", shape_str(gate_up.shape()), ", got ", shape_str(down.shape()));
  CG_CHECK(routing.indices.dim() == 2 && routing.indices.size(0) == N &&
               routing.indices.size(1) >= 1 && routing.weights.shape() == routing.indices.shape(),
           op, ": routing.weights and routing.indices must both be [tokens=", N, ", top_k], got ",
           shape_str(routing.weights.shape()), " and ", shape_str(routing.indices.shape()),
           " (make them with moe_route)");
  CG_CHECK(routing.weights.dtype() == DType::f32 || routing.weights.dtype() == DType::f64, op,
           ": routing.weights must be f32 or f64, got ", dtype_name(routing.weights.dtype()),
           " (moe_route returns f32)");
  check_index_dtype(op, routing.indices, "routing.indices");
  for (const Tensor* t : {&x, &gate_up, &down, &routing.weights})
    check_no_grad(op, *t,
                  t == &x         ? "x"
                  : t == &gate_up ? "gate_up"
                  : t == &down    ? "down"
                                  : "routing.weights");
  DeviceKernels& table = kernels_for(x.device(), op);
  const Tensor indices = raw::contiguous(raw::to_dtype(routing.indices, DType::i32));
  table.check_indices(op, "expert index", indices, E, "the experts of gate_up");
  return table.moe_experts(raw::contiguous(x), raw::contiguous(gate_up), raw::contiguous(down),
                           {raw::contiguous(routing.weights), indices});
}

}  // namespace cg
