// Why this file exists: the entry points and backward nodes of softmax and log_softmax
// (declared in ops/softmax.h). One node serves both: it saves the output and calls the
// fused backward entry (ops/kernels.h), so backward makes one tensor.
#include "ops/softmax.h"

#include "autograd/function.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"

namespace cg {

namespace {

Tensor run_softmax(const char* op, const Tensor& a, int64_t dim, bool log) {
  return kernels_for(a.device(), op).softmax(a, dim, log);
}

Tensor run_softmax_backward(const char* op, const Tensor& g, const Tensor& y, int64_t dim,
                            bool log) {
  return kernels_for(y.device(), op).softmax_backward(g, y, dim, log);
}

struct SoftmaxBackward : Node {
  SoftmaxBackward(int64_t dim, bool log) : dim(dim), log(log) {}
  int64_t dim;
  bool log;
  size_t output = SIZE_MAX;
  std::string name() const override { return log ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {run_softmax_backward(log ? "log_softmax_backward" : "softmax_backward", grads[0],
                                 saved(output), dim, log)};
  }
};

Tensor softmax_op(const char* op, const Tensor& a, int64_t dim, bool log) {
  check_defined(op, a);
  check_floating(op, a);
  const int64_t d = normalize_dim(dim, a.dim(), op);
  Tensor out = run_softmax(op, a, d, log);
  if (auto node = make_node<SoftmaxBackward>({&a}, d, log)) {
    node->output = node->save(out);
    set_history(node, out);
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) { return softmax_op("softmax", a, dim, false); }
Tensor log_softmax(const Tensor& a, int64_t dim) { return softmax_op("log_softmax", a, dim, true); }

}  // namespace cg
