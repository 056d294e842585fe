// Why this file exists: where(cond, a, b) and masked_fill(x, mask, value) (declared in
// ops/elementwise.h): the selections attention masks and padding are built from. Both
// run on one kernel entry, where, and so do both backwards: a gradient is routed to the
// side that was selected, zeros elsewhere, then summed back over broadcast dims. They
// save the bool condition only (one byte an element, often a small broadcast mask).
#include "ops/elementwise.h"

#include "autograd/function.h"
#include "core/views.h"
#include "ops/elementwise_dispatch.h"
#include "ops/op_checks.h"
#include "ops/reduce.h"

namespace cg {

namespace {

void check_condition(const char* op, const char* arg, const Tensor& cond, const Tensor& x) {
  check_defined(op, cond, arg);
  CG_CHECK(cond.dtype() == DType::boolean, op, ": ", arg, " must be a bool tensor but has dtype ",
           dtype_name(cond.dtype()),
           "; convert it with cg::to(cond, DType::boolean) (nonzero is true)");
  CG_CHECK(cond.device() == x.device(), op, ": ", arg, " is on ", cond.device().str(),
           " but the values are on ", x.device().str(), "; move it with cg::to(cond, device)");
}

// A 0-d tensor of t's dtype and device holding `value` (broadcasts against anything).
Tensor scalar_like(const Tensor& t, double value) {
  Tensor s = raw::empty({}, t.dtype(), t.device());
  raw::fill_(s, value);
  return s;
}

struct WhereBackward : Node {
  size_t cond = SIZE_MAX;
  std::string name() const override { return "WhereBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    const Tensor& c = saved(cond);
    const Tensor zero = scalar_like(g, 0.0);
    Tensor ga, gb;
    if (needs_input_grad(1))
      ga = sum_to_shape(run_where("where_backward", c, g, zero), input_meta[1].shape);
    if (needs_input_grad(2))
      gb = sum_to_shape(run_where("where_backward", c, zero, g), input_meta[2].shape);
    return {Tensor(), ga, gb};
  }
};

struct MaskedFillBackward : Node {
  size_t mask = SIZE_MAX;
  std::string name() const override { return "MaskedFillBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    return {run_where("masked_fill_backward", saved(mask), scalar_like(g, 0.0), g), Tensor()};
  }
};

}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_binary("where", a, b);
  check_condition("where", "cond", cond, a);
  try {
    raw::broadcast_shapes(raw::broadcast_shapes(cond.shape(), a.shape()), b.shape());
  } catch (const Error&) {
    CG_FAIL("where: shapes of cond ", shape_str(cond.shape()), ", a ", shape_str(a.shape()),
            " and b ", shape_str(b.shape()),
            " cannot be broadcast together; sizes must match or "
            "be 1, aligned from the last dim");
  }
  Tensor out = run_where("where", cond, a, b);
  if (auto node = make_node<WhereBackward>({&cond, &a, &b})) {
    node->cond = node->save(cond);
    set_history(node, out);
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_defined("masked_fill", x);
  check_floating("masked_fill", x);
  check_condition("masked_fill", "mask", mask, x);
  bool fits = mask.dim() <= x.dim();
  for (int64_t i = 1; fits && i <= mask.dim(); ++i) {
    const int64_t m = mask.shape()[mask.dim() - i], n = x.shape()[x.dim() - i];
    fits = m == n || m == 1;
  }
  CG_CHECK(fits, "masked_fill: mask of shape ", shape_str(mask.shape()),
           " does not broadcast to the input's shape ", shape_str(x.shape()),
           "; its sizes must match the input's or be 1, aligned from the last dim");
  Tensor out = run_where("masked_fill", mask, scalar_like(x, value), x);
  if (auto node = make_node<MaskedFillBackward>({&x, &mask})) {
    node->mask = node->save(mask);
    set_history(node, out);
  }
  return out;
}

}  // namespace cg
