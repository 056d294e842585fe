// Why this file exists: apply_rotary's entry point, checks and backward node (declared
// in ops/rotary.h). The kernel is the device's rotary entry (ops/kernels.h).
#include "ops/rotary.h"

#include "autograd/function.h"
#include "core/views.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"

namespace cg {

namespace {

Tensor run_rotary(const Tensor& x, const Tensor& positions, double theta, bool inverse) {
  return kernels_for(x.device(), inverse ? "apply_rotary backward" : "apply_rotary")
      .rotary(x, positions, theta, inverse);
}

// The gradient of a rotation is the inverse rotation of the gradient.
struct RotaryBackward : Node {
  explicit RotaryBackward(double theta) : theta(theta) {}
  double theta;
  size_t positions = SIZE_MAX;
  std::string name() const override { return "RotaryBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {run_rotary(grads[0], saved(positions), theta, /*inverse=*/true)};
  }
};

void check_rotary(const Tensor& x, const Tensor& positions, double theta) {
  check_defined("apply_rotary", x, "x");
  check_defined("apply_rotary", positions, "positions");
  check_floating("apply_rotary", x);
  check_index_dtype("apply_rotary", positions, "positions");
  check_same_device("apply_rotary", x, positions);
  CG_CHECK(x.dim() >= 3, "apply_rotary: x has shape ", shape_str(x.shape()),
           "; the layout is [..., S, H, head_dim] (unsqueeze a heads dim of 1 if there is one "
           "head)");
  const int64_t hd = x.shape().back();
  CG_CHECK(hd % 2 == 0, "apply_rotary: head_dim ", hd, " (the last dim of x ", shape_str(x.shape()),
           ") is odd; rotary pairs (i, i + head_dim/2) need an even "
           "head_dim");
  CG_CHECK(theta > 0.0, "apply_rotary: theta must be > 0, got ", theta);
  const Shape tokens(x.shape().begin(), x.shape().end() - 2);  // [..., S]
  bool fits = positions.dim() <= static_cast<int64_t>(tokens.size());
  for (int64_t i = 1; fits && i <= positions.dim(); ++i) {
    const int64_t p = positions.shape()[positions.dim() - i];
    fits = p == tokens[tokens.size() - i] || p == 1;
  }
  CG_CHECK(fits, "apply_rotary: positions of shape ", shape_str(positions.shape()),
           " do not match x ", shape_str(x.shape()),
           " with layout [..., S, H, head_dim]; "
           "positions must be [S] = [",
           tokens.back(), "] or broadcast to ", shape_str(tokens));
}

}  // namespace

Tensor apply_rotary(const Tensor& x, const Tensor& positions, double theta) {
  check_rotary(x, positions, theta);
  const Tensor pos = raw::contiguous(raw::to_dtype(positions, DType::i64));
  Tensor out = run_rotary(x, pos, theta, /*inverse=*/false);
  if (auto node = make_node<RotaryBackward>({&x}, theta)) {
    node->positions = node->save(pos);
    set_history(node, out);
  }
  return out;
}

}  // namespace cg
