// Why this file exists: the entry points of ops/gated_delta.h. Each checks its inputs and
// says what to change, makes them the contiguous layouts the kernel entries take (g and
// beta in fp32, a fresh fp32 state the entry overwrites), and calls the device's entry
// (ops/kernels.h). No autograd node: these ops run frozen targets only, so an input that
// would need a gradient is refused rather than silently cut off from the graph.
#include "ops/gated_delta.h"

#include <cmath>
#include <string>

#include "core/factories.h"
#include "core/views.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"

namespace cg {

namespace {

std::string shape_or_undefined(const Tensor& t) {
  return t.defined() ? shape_str(t.shape()) : std::string("undefined");
}

void check_gated_delta(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                       const Tensor& beta, const GatedDeltaOptions& options) {
  const char* op = "gated_delta_rule";
  check_defined(op, q, "q");
  check_defined(op, k, "k");
  check_defined(op, v, "v");
  check_defined(op, g, "g");
  check_defined(op, beta, "beta");
  for (const Tensor* t : {&q, &k, &v, &g, &beta}) check_floating(op, *t);
  CG_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op,
           ": q, k and v must share one dtype, got ", dtype_name(q.dtype()), ", ",
           dtype_name(k.dtype()), " and ", dtype_name(v.dtype()),
           "; convert them with cg::to(t, dtype)");
  for (const Tensor* t : {&k, &v, &g, &beta}) check_same_device(op, q, *t);
  CG_CHECK(q.dim() == 4 && k.shape() == q.shape(), op,
           ": q and k must both be [B, T, Hk, dk], got q ", shape_str(q.shape()), " and k ",
           shape_str(k.shape()));
  const int64_t B = q.size(0), T = q.size(1), Hk = q.size(2), dk = q.size(3);
  CG_CHECK(v.dim() == 4 && v.size(0) == B && v.size(1) == T, op, ": v must be [B=", B, ", T=", T,
           ", Hv, dv] like q ", shape_str(q.shape()), ", got ", shape_str(v.shape()));
  const int64_t Hv = v.size(2), dv = v.size(3);
  CG_CHECK(Hk > 0 && dk > 0 && Hv > 0 && dv > 0, op,
           ": head counts and dims must be positive, got q ", shape_str(q.shape()), " and v ",
           shape_str(v.shape()));
  CG_CHECK(Hv % Hk == 0, op, ": the value heads (", Hv,
           ", v's dim 2) must be a multiple of the key heads (", Hk,
           ", q's and k's dim 2): value head h reads key head h / (Hv / Hk)");
  const Shape per_head{B, T, Hv};
  CG_CHECK(g.shape() == per_head, op, ": g must be [B, T, Hv] = ", shape_str(per_head), ", got ",
           shape_str(g.shape()));
  CG_CHECK(beta.shape() == per_head, op, ": beta must be [B, T, Hv] = ", shape_str(per_head),
           ", got ", shape_str(beta.shape()));
  if (options.state.defined()) {
    const Shape state_shape{B, Hv, dk, dv};
    CG_CHECK(options.state.shape() == state_shape, op,
             ": the state must be [B, Hv, dk, dv] = ", shape_str(state_shape), ", got ",
             shape_str(options.state.shape()), " (hand back the final_state of the previous call)");
    CG_CHECK(options.state.dtype() == DType::f32, op, ": the state must be f32, got ",
             dtype_name(options.state.dtype()), "; convert it with cg::to(state, DType::f32)");
    check_same_device(op, q, options.state);
  }
  CG_CHECK(std::isfinite(options.scale), op, ": scale must be finite, got ", options.scale);
  check_no_grad(op, q, "q");
  check_no_grad(op, k, "k");
  check_no_grad(op, v, "v");
  check_no_grad(op, g, "g");
  check_no_grad(op, beta, "beta");
  check_no_grad(op, options.state, "the state");
}

}  // namespace

GatedDeltaResult gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& g, const Tensor& beta,
                                  const GatedDeltaOptions& options) {
  check_gated_delta(q, k, v, g, beta, options);
  GatedDeltaArgs args;
  args.q = raw::contiguous(q);
  args.k = raw::contiguous(k);
  args.v = raw::contiguous(v);
  args.g = raw::contiguous(raw::to_dtype(g, DType::f32));
  args.beta = raw::contiguous(raw::to_dtype(beta, DType::f32));
  // The entry overwrites the state in place: always a new tensor, never the caller's.
  args.state = options.state.defined() ? raw::clone(options.state)
                                       : zeros({q.size(0), v.size(2), q.size(3), v.size(3)},
                                               {.dtype = DType::f32, .device = q.device()});
  args.l2norm_qk = options.l2norm_qk;
  args.scale = options.scale;
  Tensor out = kernels_for(q.device(), "gated_delta_rule").gated_delta_rule(args);
  return {out, args.state};
}

Tensor causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& history, bool silu) {
  const char* op = "causal_conv1d";
  check_defined(op, x, "x");
  check_defined(op, weight, "weight");
  check_floating(op, x);
  CG_CHECK(x.dim() == 3, op, ": x must be [B, T, C] (channels last), got ", shape_str(x.shape()));
  const int64_t B = x.size(0), C = x.size(2);
  const bool hf_layout = weight.dim() == 3 && weight.size(1) == 1;
  CG_CHECK((weight.dim() == 2 || hf_layout) && weight.size(0) == C && weight.size(-1) > 0, op,
           ": weight must be [C, K] or Hugging Face's conv1d weight [C, 1, K] with C = ", C,
           " (x's channels), got ", shape_str(weight.shape()));
  check_same_device(op, x, weight);
  CG_CHECK(weight.dtype() == x.dtype(), op, ": weight is ", dtype_name(weight.dtype()),
           " but x is ", dtype_name(x.dtype()), "; convert one with cg::to(t, dtype)");
  const int64_t K = weight.size(-1);
  if (history.defined()) {
    const Shape history_shape{B, K - 1, C};
    CG_CHECK(history.shape() == history_shape, op,
             ": history must be [B, K-1, C] = ", shape_str(history_shape), " (the ", K - 1,
             " inputs before x[:, 0]), got ", shape_or_undefined(history));
    check_same_device(op, x, history);
    CG_CHECK(history.dtype() == x.dtype(), op, ": history is ", dtype_name(history.dtype()),
             " but x is ", dtype_name(x.dtype()), "; keep it in x's dtype");
  }
  check_no_grad(op, x, "x");
  check_no_grad(op, weight, "weight");
  check_no_grad(op, history, "history");
  const Tensor w = raw::contiguous(hf_layout ? raw::view(raw::contiguous(weight), {C, K}) : weight);
  const Tensor h = history.defined() ? raw::contiguous(history) : Tensor();
  return kernels_for(x.device(), op).causal_conv1d(raw::contiguous(x), w, h, silu);
}

}  // namespace cg
