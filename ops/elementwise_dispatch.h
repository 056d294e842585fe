// Why this file exists: the pieces the elementwise entry points share across their
// files (ops/elementwise.cpp, ops/activation.cpp, ops/where.cpp): the checked device
// switch for binary and unary kernels, and the one backward node of every unary op whose
// gradient is a single binary kernel of (incoming gradient, one saved tensor).
// Internal to ops/: not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "ops/kernels.h"

namespace cg {

// Checks a and b (defined, same device and floating dtype, shapes broadcast), then runs
// `kind` on their device. `op` names the caller in errors.
Tensor run_binary(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b);
// Checks a (defined, floating), then runs `kind` with scalar s on its device.
Tensor run_unary(const char* op, UnaryOp kind, const Tensor& a, double s = 0.0);
// cond ? a : b on their device; inputs already checked.
Tensor run_where(const char* op, const Tensor& cond, const Tensor& a, const Tensor& b);

// A unary op's node: grad_in = formula(grad_out, saved), e.g. ExpBackward is
// mul(g, out), SigmoidBackward is sigmoid_backward(g, out). It saves one tensor.
struct PointwiseBackward : Node {
  PointwiseBackward(const char* node_name, BinaryOp formula)
      : node_name(node_name), formula(formula) {}
  const char* node_name;
  BinaryOp formula;
  size_t saved_index = SIZE_MAX;
  std::string name() const override { return node_name; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {run_binary(node_name, formula, grads[0], saved(saved_index))};
  }
};

// Records a PointwiseBackward for out = op(a) that saves `to_save` (a or out); returns out.
Tensor record_pointwise(Tensor out, const Tensor& a, const char* node_name, BinaryOp formula,
                        const Tensor& to_save);

}  // namespace cg
