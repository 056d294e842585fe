// Why this file exists: matmul's entry point, shape rules and backward node (declared
// in ops/linalg.h). The kernel is the device's matmul entry (ops/kernels.h).
#include "ops/linalg.h"

#include "autograd/function.h"
#include "core/views.h"
#include "ops/elementwise.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"
#include "ops/reduce.h"
#include "ops/shape_ops.h"

namespace cg {

namespace {

Tensor run_matmul(const Tensor& a, const Tensor& b) {
  return kernels_for(a.device(), "matmul").matmul(a, b);
}

// Note [Gradient in the operand's layout]: linear() multiplies by transpose(weight), a
// column-major view. Written row-major, its gradient [in, out] would reach the weight
// through TransposeBackward as a transposed view, and the leaf's clone of it is a strided
// transposing copy (0.6 ms for a 17408 x 5120 MLP weight on the H200, three of them per
// drafter layer). So a 2-D b stored column-major gets its gradient column-major too:
// (g^T a)^T, one GEMM of the same cost, and the weight's gradient arrives contiguous.
// (PyTorch's mm backward picks the layout of mat2's gradient from mat2's strides too.)
bool column_major_2d(const Tensor& t) {
  return t.dim() == 2 && t.size(0) > 1 && t.size(1) > 1 && t.stride(0) == 1 &&
         t.stride(1) == t.size(0);
}

// grad_a = g @ b^T and grad_b = a^T @ g, each summed back over broadcast batch dims.
// The transposes are views: the kernel maps them as column-major, no copy.
struct MatmulBackward : Node {
  size_t a = SIZE_MAX, b = SIZE_MAX;
  bool b_column_major = false;  // Note [Gradient in the operand's layout]
  std::string name() const override { return "MatmulBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    if (needs_input_grad(0)) {
      ga = sum_to_shape(run_matmul(g, raw::transpose(saved(b), -1, -2)), input_meta[0].shape);
    }
    if (needs_input_grad(1)) {
      const Tensor& sa = saved(a);
      const Shape& b_shape = input_meta[1].shape;
      if (b_shape.size() == 2 && (sa.dim() > 2 || b_column_major)) {
        // A weight shared over batch dims ([B, T, k] @ [k, m]): fold the batch into the
        // rows, one [k, B*T] @ [B*T, m] GEMM instead of B products summed afterwards.
        const int64_t k = sa.shape()[sa.dim() - 1], m = g.shape()[g.dim() - 1];
        const Tensor a2 = raw::reshape(sa, {-1, k}), g2 = raw::reshape(g, {-1, m});
        gb = b_column_major ? raw::transpose(run_matmul(raw::transpose(g2, 0, 1), a2), 0, 1)
                            : run_matmul(raw::transpose(a2, 0, 1), g2);
      } else {
        gb = sum_to_shape(run_matmul(raw::transpose(sa, -1, -2), g), b_shape);
      }
    }
    return {ga, gb};
  }
};

// Both operands at least 2-D.
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  const int64_t k_a = a.shape()[a.dim() - 1], k_b = b.shape()[b.dim() - 2];
  CG_CHECK(k_a == k_b, "matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
           " don't match: inner dims ", k_a, " vs ", k_b);
  const Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  const Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  try {
    raw::broadcast_shapes(batch_a, batch_b, "matmul");
  } catch (const Error&) {
    CG_FAIL("matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
            " don't match: batch dims ", shape_str(batch_a), " and ", shape_str(batch_b),
            " don't broadcast (sizes must match or be 1, aligned from the last dim)");
  }
  Tensor out = run_matmul(a, b);
  if (auto node = make_node<MatmulBackward>({&a, &b})) {
    if (node->needs_input_grad(0)) node->b = node->save(b);
    if (node->needs_input_grad(1)) {
      node->a = node->save(a);
      node->b_column_major = column_major_2d(b);
    }
    set_history(node, out);
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_binary("matmul", a, b);
  CG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got shapes ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  // 1-D operands become a row / a column through differentiable reshapes, so their
  // gradients come out 1-D too.
  if (a.dim() == 1 && b.dim() == 1) {
    CG_CHECK(a.shape()[0] == b.shape()[0], "matmul: shapes ", shape_str(a.shape()), " and ",
             shape_str(b.shape()), " don't match: inner dims ", a.shape()[0], " vs ", b.shape()[0]);
    return reshape(matmul_nd(unsqueeze(a, 0), unsqueeze(b, 1)), Shape{});
  }
  if (a.dim() == 1) {
    CG_CHECK(a.shape()[0] == b.shape()[b.dim() - 2], "matmul: shapes ", shape_str(a.shape()),
             " and ", shape_str(b.shape()), " don't match: inner dims ", a.shape()[0], " vs ",
             b.shape()[b.dim() - 2]);
    return squeeze(matmul_nd(unsqueeze(a, 0), b), -2);
  }
  if (b.dim() == 1) {
    CG_CHECK(a.shape()[a.dim() - 1] == b.shape()[0], "matmul: shapes ", shape_str(a.shape()),
             " and ", shape_str(b.shape()), " don't match: inner dims ", a.shape()[a.dim() - 1],
             " vs ", b.shape()[0]);
    return squeeze(matmul_nd(a, unsqueeze(b, 1)), -1);
  }
  return matmul_nd(a, b);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* op = "linear";
  check_defined(op, x, "x");
  check_defined(op, weight, "weight");
  CG_CHECK(weight.dim() == 2, op, ": weight must be [out, in], got ", shape_str(weight.shape()));
  const int64_t in = weight.size(1), out = weight.size(0);
  CG_CHECK(x.dim() >= 1 && x.size(-1) == in, op, ": x's last dim must be in=", in,
           " to match weight ", shape_str(weight.shape()), ", got x ", shape_str(x.shape()));
  if (bias.defined()) {
    CG_CHECK(bias.dim() == 1 && bias.size(0) == out, op, ": bias must be [out=", out, "], got ",
             shape_str(bias.shape()));
  }
  Shape out_shape = x.shape();
  out_shape.back() = out;
  // The rows are counted, not inferred: with in = 0 a -1 could be any number, and
  // [rows, 0] @ [0, out] is the zero matrix PyTorch gives (plus the bias).
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  Tensor y = matmul(reshape(x, {rows, in}), transpose(weight, 0, 1));
  if (bias.defined()) y = add(y, bias);
  return reshape(y, out_shape);
}

}  // namespace cg
