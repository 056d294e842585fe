// Why this file exists: swiglu's entry point, checks and backward node (declared in
// ops/swiglu.h). The kernels are the device's swiglu
// entries (ops/kernels.h).
#include "ops/swiglu.h"

#include "autograd/function.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"

namespace cg {

namespace {

struct SwigluBackward : Node {
  size_t gate = SIZE_MAX, up = SIZE_MAX;
  std::string name() const override { return "SwigluBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const bool need_dgate = needs_input_grad(0), need_dup = needs_input_grad(1);
    const Tensor& g = saved(gate);
    // up is saved only for dgate; dup alone reads gate only.
    const Tensor u = up != SIZE_MAX ? saved(up) : g;
    const SwigluGrads d = kernels_for(g.device(), "swiglu backward")
                              .swiglu_backward(grads[0], g, u, need_dgate, need_dup);
    return {d.dgate, d.dup};
  }
};

}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  check_binary("swiglu", gate, up);
  CG_CHECK(gate.shape() == up.shape(), "swiglu: gate ", shape_str(gate.shape()), " and up ",
           shape_str(up.shape()), " must have the same shape (both are [..., intermediate])");
  Tensor out = kernels_for(gate.device(), "swiglu").swiglu_forward(gate, up);
  if (auto node = make_node<SwigluBackward>({&gate, &up})) {
    node->gate = node->save(gate);
    if (node->needs_input_grad(0)) node->up = node->save(up);
    set_history(node, out);
  }
  return out;
}

}  // namespace cg
