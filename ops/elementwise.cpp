// Why this file exists: the entry points and backward nodes of the arithmetic and math
// elementwise ops (declared in ops/elementwise.h), and the checked dispatch to the
// device's kernel table they share with ops/activation.cpp and ops/where.cpp
// (ops/elementwise_dispatch.h).
#include "ops/elementwise.h"

#include "autograd/function.h"
#include "core/views.h"
#include "ops/elementwise_dispatch.h"
#include "ops/op_checks.h"
#include "ops/reduce.h"

namespace cg {

// ---- device dispatch -------------------------------------------------------------

Tensor run_binary(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  check_binary(op, a, b);
  raw::broadcast_shapes(a.shape(), b.shape(), op);  // a clear shape error before any work
  return kernels_for(a.device(), op).binary(kind, a, b);
}

Tensor run_unary(const char* op, UnaryOp kind, const Tensor& a, double s) {
  check_defined(op, a);
  check_floating(op, a);
  return kernels_for(a.device(), op).unary(kind, a, s);
}

Tensor run_where(const char* op, const Tensor& cond, const Tensor& a, const Tensor& b) {
  return kernels_for(a.device(), op).where(cond, a, b);
}

Tensor record_pointwise(Tensor out, const Tensor& a, const char* node_name, BinaryOp formula,
                        const Tensor& to_save) {
  if (auto node = make_node<PointwiseBackward>({&a}, node_name, formula)) {
    node->saved_index = node->save(to_save);
    set_history(node, out);
  }
  return out;
}

namespace {

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

// d(a/b)/da = 1/b, d(a/b)/db = -a/b^2.
struct DivBackward : Node {
  size_t a = SIZE_MAX, b = SIZE_MAX;
  std::string name() const override { return "DivBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    if (needs_input_grad(0)) ga = sum_to_shape(div(g, saved(b)), input_meta[0].shape);
    if (needs_input_grad(1)) {
      const Tensor& sb = saved(b);
      gb = sum_to_shape(neg(mul(g, div(div(saved(a), sb), sb))), input_meta[1].shape);
    }
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

// d(a^p)/da = p a^(p-1).
struct PowScalarBackward : Node {
  explicit PowScalarBackward(double p) : p(p) {}
  double p;
  size_t a = SIZE_MAX;
  std::string name() const override { return "PowBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    if (p == 0.0) return {scale(g, 0.0)};
    if (p == 1.0) return {g};
    const Tensor& x = saved(a);
    Tensor d = p == 2.0 ? scale(x, 2.0) : scale(pow(x, p - 1.0), p);
    return {mul(g, d)};
  }
};

// d(a^b)/da = b a^(b-1), d(a^b)/db = a^b log a (0 where a^b is 0).
struct PowBackward : Node {
  size_t a = SIZE_MAX, b = SIZE_MAX, out = SIZE_MAX;
  std::string name() const override { return "PowBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    if (needs_input_grad(0)) {
      const Tensor& sb = saved(b);
      ga = sum_to_shape(mul(g, mul(sb, pow(saved(a), add_scalar(sb, -1.0)))), input_meta[0].shape);
    }
    if (needs_input_grad(1)) {
      Tensor dlog = run_binary("pow_backward", BinaryOp::xlogy, saved(out), saved(a));
      gb = sum_to_shape(mul(g, dlog), input_meta[1].shape);
    }
    return {ga, gb};
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

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = run_binary("div", BinaryOp::div, a, b);
  if (auto node = make_node<DivBackward>({&a, &b})) {
    node->b = node->save(b);
    if (node->needs_input_grad(1)) node->a = node->save(a);
    set_history(node, out);
  }
  return out;
}

Tensor neg(const Tensor& a) {
  return record_scale(run_unary("neg", UnaryOp::neg, a), a, "NegBackward", -1.0);
}

Tensor scale(const Tensor& a, double s) {
  return record_scale(run_unary("scale", UnaryOp::scale, a, s), a, "ScaleBackward", s);
}

Tensor add_scalar(const Tensor& a, double s) {
  return record_scale(run_unary("add_scalar", UnaryOp::add_scalar, a, s), a, "AddScalarBackward",
                      1.0);
}

Tensor exp(const Tensor& a) {
  Tensor out = run_unary("exp", UnaryOp::exp, a);
  return record_pointwise(out, a, "ExpBackward", BinaryOp::mul, out);
}

Tensor log(const Tensor& a) {
  return record_pointwise(run_unary("log", UnaryOp::log, a), a, "LogBackward", BinaryOp::div, a);
}

Tensor sqrt(const Tensor& a) {
  Tensor out = run_unary("sqrt", UnaryOp::sqrt, a);
  return record_pointwise(out, a, "SqrtBackward", BinaryOp::sqrt_backward, out);
}

Tensor rsqrt(const Tensor& a) {
  Tensor out = run_unary("rsqrt", UnaryOp::rsqrt, a);
  return record_pointwise(out, a, "RsqrtBackward", BinaryOp::rsqrt_backward, out);
}

Tensor pow(const Tensor& a, double exponent) {
  Tensor out = run_unary("pow", UnaryOp::pow, a, exponent);
  if (auto node = make_node<PowScalarBackward>({&a}, exponent)) {
    if (exponent != 0.0 && exponent != 1.0) node->a = node->save(a);
    set_history(node, out);
  }
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = run_binary("pow", BinaryOp::pow, a, b);
  if (auto node = make_node<PowBackward>({&a, &b})) {
    node->a = node->save(a);
    if (node->needs_input_grad(0)) node->b = node->save(b);
    if (node->needs_input_grad(1)) node->out = node->save(out);
    set_history(node, out);
  }
  return out;
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double s) { return add_scalar(a, s); }
Tensor operator+(double s, const Tensor& a) { return add_scalar(a, s); }
Tensor operator-(const Tensor& a, double s) { return add_scalar(a, -s); }
Tensor operator-(double s, const Tensor& a) { return add_scalar(neg(a), s); }
Tensor operator*(const Tensor& a, double s) { return scale(a, s); }
Tensor operator*(double s, const Tensor& a) { return scale(a, s); }
Tensor operator/(const Tensor& a, double s) { return scale(a, 1.0 / s); }
Tensor operator/(double s, const Tensor& a) { return scale(pow(a, -1.0), s); }

}  // namespace cg
