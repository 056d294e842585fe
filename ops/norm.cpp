// Why this file exists: rms_norm's entry point, checks and backward node (declared in
// ops/norm.h). The fused kernels are the device's
// rms_norm entries (ops/kernels.h).
#include "ops/norm.h"

#include "autograd/function.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"

namespace cg {

namespace {

struct RmsNormBackward : Node {
  size_t x = SIZE_MAX, rstd = SIZE_MAX, weight = SIZE_MAX;
  std::string name() const override { return "RmsNormBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const bool need_dx = needs_input_grad(0), need_dw = needs_input_grad(1);
    const Tensor& sx = saved(x);
    // weight is saved only when dx needs it; dweight alone does not read it.
    const Tensor w = weight != SIZE_MAX ? saved(weight) : Tensor();
    const RmsNormGrads g = kernels_for(sx.device(), "rms_norm backward")
                               .rms_norm_backward(grads[0], sx, w, saved(rstd), need_dx, need_dw);
    return {g.dx, g.dweight};
  }
};

void check_rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_defined("rms_norm", x, "x");
  check_floating("rms_norm", x);
  CG_CHECK(x.dim() >= 1, "rms_norm: x is a 0-d tensor; it needs a last dim to normalise over");
  CG_CHECK(eps >= 0.0, "rms_norm: eps must be >= 0, got ", eps);
  if (!weight.defined()) return;
  check_same_device("rms_norm", x, weight);
  check_same_dtype("rms_norm", x, weight);
  const int64_t D = x.shape().back();
  CG_CHECK(weight.dim() == 1 && weight.shape()[0] == D, "rms_norm: weight has shape ",
           shape_str(weight.shape()), " but x ", shape_str(x.shape()), " has last dim ", D,
           "; weight must be [", D, "] (one scale per feature of the normalised dim)");
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_rms_norm(x, weight, eps);
  const RmsNormForward fwd = kernels_for(x.device(), "rms_norm").rms_norm_forward(x, weight, eps);
  if (auto node = make_node<RmsNormBackward>({&x, &weight})) {
    node->x = node->save(x);
    node->rstd = node->save(fwd.rstd);
    if (node->needs_input_grad(0) && weight.defined()) node->weight = node->save(weight);
    set_history(node, fwd.out);
  }
  return fwd.out;
}

}  // namespace cg
