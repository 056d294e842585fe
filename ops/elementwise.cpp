// Why this file exists: the entry points and backward nodes of the elementwise ops
// (declared in ops/elementwise.h). Kernels are in ops/cpu/elementwise.cpp.
#include "ops/elementwise.h"

#include "autograd/function.h"
#include "core/views.h"
#include "ops/cpu/kernels.h"
#include "ops/op_checks.h"
#include "ops/reduce.h"

namespace cg {

// ---- device dispatch -------------------------------------------------------------

namespace {

Tensor run_binary(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  check_binary(op, a, b);
  raw::broadcast_shapes(a.shape(), b.shape(), op);  // a clear shape error before any work
  switch (a.device().type) {
    case DeviceType::cpu: return cpu::binary(kind, a, b);
    case DeviceType::cuda: break;
  }
  fail_not_implemented(op, a.device());
}

Tensor run_unary(const char* op, UnaryOp kind, const Tensor& a, double s) {
  check_defined(op, a);
  check_floating(op, a);
  switch (a.device().type) {
    case DeviceType::cpu: return cpu::unary(kind, a, s);
    case DeviceType::cuda: break;
  }
  fail_not_implemented(op, a.device());
}

// ---- backward nodes ----------------------------------------------------------------

// a + sign * b: the gradient flows unchanged (negated for b when subtracting), summed
// over broadcast dims.
struct AddBackward : Node {
  explicit AddBackward(double sign) : sign(sign) {}
  double sign;
  std::string name() const override { return sign > 0 ? "AddBackward" : "SubBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    if (needs_input_grad(0)) ga = sum_to_shape(g, input_meta[0].shape);
    if (needs_input_grad(1)) gb = sum_to_shape(sign > 0 ? g : neg(g), input_meta[1].shape);
    return {ga, gb};
  }
};

struct MulBackward : Node {
  size_t a = SIZE_MAX, b = SIZE_MAX;  // indices of saved inputs (only those needed)
  std::string name() const override { return "MulBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    if (needs_input_grad(0)) ga = sum_to_shape(mul(g, saved(b)), input_meta[0].shape);
    if (needs_input_grad(1)) gb = sum_to_shape(mul(g, saved(a)), input_meta[1].shape);
    return {ga, gb};
  }
};

// Covers neg (s = -1), scale (s) and add_scalar (s = 1, a shift has gradient 1).
struct ScaleBackward : Node {
  ScaleBackward(const char* name, double s) : node_name(name), s(s) {}
  const char* node_name;
  double s;
  std::string name() const override { return node_name; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    if (s == 1.0) return {grads[0]};
    return {scale(grads[0], s)};
  }
};

struct ReluBackward : Node {
  size_t out = 0;
  std::string name() const override { return "ReluBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {run_binary("relu_backward", BinaryOp::relu_backward, grads[0], saved(out))};
  }
};

Tensor record_scale(Tensor out, const Tensor& a, const char* node_name, double s) {
  if (auto node = make_node<ScaleBackward>({&a}, node_name, s)) set_history(node, out);
  return out;
}

}  // namespace

// ---- ops -----------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = run_binary("add", BinaryOp::add, a, b);
  if (auto node = make_node<AddBackward>({&a, &b}, 1.0)) set_history(node, out);
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = run_binary("sub", BinaryOp::sub, a, b);
  if (auto node = make_node<AddBackward>({&a, &b}, -1.0)) set_history(node, out);
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = run_binary("mul", BinaryOp::mul, a, b);
  if (auto node = make_node<MulBackward>({&a, &b})) {
    if (node->needs_input_grad(0)) node->b = node->save(b);
    if (node->needs_input_grad(1)) node->a = node->save(a);
    set_history(node, out);
  }
  return out;
}

Tensor neg(const Tensor& a) {
  return record_scale(run_unary("neg", UnaryOp::neg, a, 0.0), a, "NegBackward", -1.0);
}

Tensor scale(const Tensor& a, double s) {
  return record_scale(run_unary("scale", UnaryOp::scale, a, s), a, "ScaleBackward", s);
}

Tensor add_scalar(const Tensor& a, double s) {
  return record_scale(run_unary("add_scalar", UnaryOp::add_scalar, a, s), a, "AddScalarBackward",
                      1.0);
}

Tensor relu(const Tensor& a) {
  Tensor out = run_unary("relu", UnaryOp::relu, a, 0.0);
  if (auto node = make_node<ReluBackward>({&a})) {
    node->out = node->save(out);  // the output is the mask's source; the input can go
    set_history(node, out);
  }
  return out;
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double s) { return add_scalar(a, s); }
Tensor operator+(double s, const Tensor& a) { return add_scalar(a, s); }
Tensor operator-(const Tensor& a, double s) { return add_scalar(a, -s); }
Tensor operator-(double s, const Tensor& a) { return add_scalar(neg(a), s); }
Tensor operator*(const Tensor& a, double s) { return scale(a, s); }
Tensor operator*(double s, const Tensor& a) { return scale(a, s); }
Tensor operator/(const Tensor& a, double s) { return scale(a, 1.0 / s); }

}  // namespace cg
