// Why this file exists: checks and dispatch of the optimiser ops (optim.h).
#include "ops/optim.h"

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/shape_ops.h"

namespace cg {

void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& masters,
                const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
                const std::vector<Tensor>& exp_avg_sqs, const Tensor& grad_scale,
                const AdamWArgs& args) {
  const size_t n = params.size();
  CG_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n &&
               (masters.empty() || masters.size() == n),
           "adamw_step: the lists differ in length (params ", n, ", grads ", grads.size(),
           ", exp_avgs ", exp_avgs.size(), ", exp_avg_sqs ", exp_avg_sqs.size(), ", masters ",
           masters.size(), ")");
  CG_CHECK(args.step >= 1, "adamw_step: step counts from 1, got ", args.step);
  if (n == 0) return;
  const Device device = params[0].device();
  auto fp32_like = [&](const Tensor& t, const Tensor& p, const char* what, size_t i) {
    CG_CHECK(t.defined() && t.dtype() == DType::f32 && t.shape() == p.shape() &&
                 t.is_contiguous() && t.device() == device,
             "adamw_step: ", what, "[", i, "] must be a contiguous f32 tensor of shape ",
             shape_str(p.shape()), " on ", device.str(), ", got ",
             t.defined() ? std::string(t.is_contiguous() ? "a contiguous " : "a strided ") +
                               dtype_name(t.dtype()) + " tensor of shape " + shape_str(t.shape()) +
                               " on " + t.device().str()
                         : std::string("an undefined tensor"));
  };
  for (size_t i = 0; i < n; ++i) {
    const Tensor& p = params[i];
    CG_CHECK(p.defined() && is_floating(p.dtype()) && p.is_contiguous(), "adamw_step: params[", i,
             "] must be a defined, contiguous, floating tensor");
    CG_CHECK(p.device() == device, "adamw_step: params[", i, "] is on ", p.device().str(),
             " but params[0] is on ", device.str(), "; one step updates parameters of one device");
    const bool master = !masters.empty() && masters[i].defined();
    if (master)
      fp32_like(masters[i], p, "masters", i);
    else
      CG_CHECK(p.dtype() == DType::f32, "adamw_step: params[", i, "] is ", dtype_name(p.dtype()),
               ": a 16-bit parameter needs an fp32 master copy");
    fp32_like(exp_avgs[i], p, "exp_avgs", i);
    fp32_like(exp_avg_sqs[i], p, "exp_avg_sqs", i);
    const Tensor& g = grads[i];
    CG_CHECK(g.defined(), "adamw_step: grads[", i, "] is undefined (params[", i,
             "] got no gradient); leave the parameter out or give it a zero gradient");
    CG_CHECK(is_floating(g.dtype()), "adamw_step: grads[", i, "] has dtype ", dtype_name(g.dtype()),
             "; gradients must be floating (f32, f64, bf16 or f16)");
    CG_CHECK(g.shape() == p.shape(), "adamw_step: grads[", i, "] has shape ", shape_str(g.shape()),
             " but params[", i, "] has shape ", shape_str(p.shape()));
    CG_CHECK(g.device() == device, "adamw_step: grads[", i, "] is on ", g.device().str(),
             " but the parameters are on ", device.str(), "; move it with cg::to(grad, ",
             device.str(), ")");
  }
  CG_CHECK(!grad_scale.defined() || (grad_scale.numel() == 1 && grad_scale.dtype() == DType::f32 &&
                                     grad_scale.device() == device),
           "adamw_step: grad_scale must be a 1-element f32 tensor on ", device.str());
  const Tensor scale = grad_scale.defined() ? contiguous(grad_scale.detach()) : Tensor();
  kernels_for(device, "adamw_step")
      .adamw_step(params, masters, grads, exp_avgs, exp_avg_sqs, scale, args);
}

Tensor global_grad_norm(const std::vector<Tensor>& grads, const Tensor& scale) {
  NoGradGuard no_grad;
  Tensor total;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    CG_CHECK(is_floating(g.dtype()), "global_grad_norm: a gradient has dtype ",
             dtype_name(g.dtype()), "; gradients must be floating (f32, f64, bf16 or f16)");
    CG_CHECK(!total.defined() || g.device() == total.device(),
             "global_grad_norm: a gradient is on ", g.device().str(), " but an earlier one is on ",
             total.device().str(), "; one norm covers the gradients of one device");
    // One read of each gradient in its own dtype (no f32 copy, no squares tensor).
    const Tensor flat = g.is_contiguous() ? g.detach() : contiguous(g.detach());
    Tensor sq = kernels_for(flat.device(), "sum_of_squares").sum_of_squares(flat);
    if (sq.dtype() != DType::f32) sq = to_dtype(sq, DType::f32);
    total = total.defined() ? add(total, sq) : sq;
  }
  CG_CHECK(total.defined(), "global_grad_norm: no gradient is defined");
  Tensor norm = reshape(sqrt(total), {1});
  if (scale.defined()) norm = mul(norm, reshape(scale.detach(), {1}));
  return norm;
}

Tensor clip_coefficient(const Tensor& norm, double max_norm) {
  CG_CHECK(max_norm > 0, "clip_coefficient: max_norm must be > 0, got ", max_norm);
  NoGradGuard no_grad;
  // min(1, x) = (1 + x - |1 - x|) / 2, with |y| = sqrt(y^2): device ops only, no compare.
  const Tensor x =
      div(full(norm.shape(), max_norm, {.dtype = norm.dtype(), .device = norm.device()}),
          add_scalar(norm.detach(), 1e-6));
  const Tensor d = add_scalar(neg(x), 1.0);
  return scale(add(add_scalar(x, 1.0), neg(sqrt(mul(d, d)))), 0.5);
}

}  // namespace cg
