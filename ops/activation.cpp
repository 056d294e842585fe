// Why this file exists: the entry points of the activations declared in
// ops/elementwise.h (relu, tanh, sigmoid, silu, gelu). Each is one unary kernel forward
// and one fused binary kernel backward, so backward makes one tensor, not a chain of
// temporaries. The ones whose derivative is a function of the output save the output
// (the input can then be freed); silu and gelu need the input.
#include "ops/elementwise.h"

#include "ops/elementwise_dispatch.h"

namespace cg {

Tensor relu(const Tensor& a) {
  Tensor out = run_unary("relu", UnaryOp::relu, a);
  return record_pointwise(out, a, "ReluBackward", BinaryOp::relu_backward, out);
}

Tensor tanh(const Tensor& a) {
  Tensor out = run_unary("tanh", UnaryOp::tanh, a);
  return record_pointwise(out, a, "TanhBackward", BinaryOp::tanh_backward, out);
}

Tensor sigmoid(const Tensor& a) {
  Tensor out = run_unary("sigmoid", UnaryOp::sigmoid, a);
  return record_pointwise(out, a, "SigmoidBackward", BinaryOp::sigmoid_backward, out);
}

Tensor silu(const Tensor& a) {
  return record_pointwise(run_unary("silu", UnaryOp::silu, a), a, "SiluBackward",
                          BinaryOp::silu_backward, a);
}

Tensor gelu(const Tensor& a, GeluApproximation approximate) {
  if (approximate == GeluApproximation::tanh) {
    return record_pointwise(run_unary("gelu", UnaryOp::gelu_tanh, a), a, "GeluTanhBackward",
                            BinaryOp::gelu_tanh_backward, a);
  }
  return record_pointwise(run_unary("gelu", UnaryOp::gelu, a), a, "GeluBackward",
                          BinaryOp::gelu_backward, a);
}

}  // namespace cg
