// Why this file exists: proof that a change to how the elementwise formulas are written
// (ops/elementwise_formulas.h) left the CPU results bit for bit as they were. It runs
// every BinaryOp and UnaryOp entry, the in-place forms, addcmul and swiglu of the CPU
// kernel table on fixed inputs -- edge values (0, -0, denormals, +-inf, NaN, huge, tiny)
// and fixed pseudo-random ones, contiguous and strided -- in f64, f32, bf16 and f16, and
// prints one FNV-1a hash of the result bytes per op, dtype and variant. Built and run
// against two trees by tools/formula_hash.sh, which compares the two listings.
// It uses only the kernel table's interface (ops/kernels.h) and core's factories, so the
// same source builds against an older tree.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "ops/kernels.h"

namespace {

using cg::BinaryOp;
using cg::DType;
using cg::InplaceOp;
using cg::Tensor;
using cg::UnaryOp;

uint64_t fnv1a(const Tensor& t) {
  const Tensor c = cg::raw::contiguous(t);
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < c.nbytes(); ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

const char* dtype_label(DType d) {
  switch (d) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    default: return "?";
  }
}

// Values at the edges of `d`'s range, and around the points where the formulas change
// branch or saturate.
std::vector<double> edge_values(DType d) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v = {0.0,   -0.0,  1.0,    -1.0, 0.5,  -0.5,  2.0,  3.0,   -2.5,
                           1e-3,  -1e-3, 7.0,    -7.0, 20.0, -20.0, 40.0, -40.0, 88.5,
                           -88.5, 100.0, -100.0, inf,  -inf, nan,   -nan};
  switch (d) {
    case DType::f64:
      v.insert(v.end(), {4.9e-324, -4.9e-324, 1e-310, 2.2250738585072014e-308, 1e-300, 1.7e308,
                         -1.7e308, 1e154, 709.0, -709.0, 745.0, -745.0});
      break;
    case DType::f32:
    case DType::bf16:
      v.insert(v.end(), {1.4e-45, -1.4e-45, 1e-40, 1.1754943508222875e-38, 1e-30, 3.0e38, -3.0e38,
                         1.8e19, 87.0, -87.0, 104.0, -104.0});
      break;
    case DType::f16:
      v.insert(v.end(), {6e-8, -6e-8, 1e-5, 6.103515625e-5, 1e-4, 65504.0, -65504.0, 255.0, 11.0,
                         -11.0, 17.0, -17.0});
      break;
    default: break;
  }
  return v;
}

// The edge values followed by fixed pseudo-random values in [-8, 8), `n` in all.
std::vector<double> inputs(DType d, size_t n, uint64_t seed) {
  std::vector<double> v = edge_values(d);
  uint64_t s = seed;
  while (v.size() < n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v.push_back(static_cast<double>(s >> 11) / 9007199254740992.0 * 16.0 - 8.0);
  }
  v.resize(n);
  return v;
}

Tensor make(const std::vector<double>& values, const cg::Shape& shape, DType d) {
  return cg::from_vector(values, shape, {.dtype = d});
}

void print(const std::string& what, DType d, const Tensor& t) {
  std::printf("%-40s %-5s %016llx\n", what.c_str(), dtype_label(d),
              static_cast<unsigned long long>(fnv1a(t)));
}

// Every op of the two enums with the name it is printed under.
template <typename Op>
struct Named {
  Op op;
  const char* name;
};
constexpr Named<BinaryOp> kBinaryOps[] = {{BinaryOp::add, "add"},
                                          {BinaryOp::sub, "sub"},
                                          {BinaryOp::mul, "mul"},
                                          {BinaryOp::relu_backward, "relu_backward"},
                                          {BinaryOp::div, "div"},
                                          {BinaryOp::pow, "pow"},
                                          {BinaryOp::xlogy, "xlogy"},
                                          {BinaryOp::sqrt_backward, "sqrt_backward"},
                                          {BinaryOp::rsqrt_backward, "rsqrt_backward"},
                                          {BinaryOp::tanh_backward, "tanh_backward"},
                                          {BinaryOp::sigmoid_backward, "sigmoid_backward"},
                                          {BinaryOp::silu_backward, "silu_backward"},
                                          {BinaryOp::gelu_backward, "gelu_backward"},
                                          {BinaryOp::gelu_tanh_backward, "gelu_tanh_backward"}};
constexpr Named<UnaryOp> kUnaryOps[] = {{UnaryOp::neg, "neg"},
                                        {UnaryOp::scale, "scale"},
                                        {UnaryOp::add_scalar, "add_scalar"},
                                        {UnaryOp::relu, "relu"},
                                        {UnaryOp::exp, "exp"},
                                        {UnaryOp::log, "log"},
                                        {UnaryOp::sqrt, "sqrt"},
                                        {UnaryOp::rsqrt, "rsqrt"},
                                        {UnaryOp::pow, "pow"},
                                        {UnaryOp::tanh, "tanh"},
                                        {UnaryOp::sigmoid, "sigmoid"},
                                        {UnaryOp::silu, "silu"},
                                        {UnaryOp::gelu, "gelu"},
                                        {UnaryOp::gelu_tanh, "gelu_tanh"}};

// The scalars each unary op runs with (pow's special-cased exponents and two others).
std::vector<double> scalars_of(UnaryOp op) {
  if (op == UnaryOp::pow) return {2.0, 1.0, 0.5, -1.0, 3.0, 1.7, -2.5, 0.0};
  if (op == UnaryOp::scale || op == UnaryOp::add_scalar) return {0.37, -3.0};
  return {0.0};
}

void run(DType d) {
  cg::DeviceKernels& k = cg::kernels_for(cg::Device{}, "formula_hash");
  const size_t n = 64;  // edge values, then pseudo-random ones
  const std::vector<double> xa = inputs(d, n, 1), xb = inputs(d, n, 2), xc = inputs(d, n, 3);
  print("input a", d, make(xa, {int64_t(n)}, d));
  print("input b", d, make(xb, {int64_t(n)}, d));
  // Every pair of the edge values: a as a column, b as a row (broadcast, strided loop).
  const Tensor col = make(xa, {int64_t(n), 1}, d), row = make(xa, {1, int64_t(n)}, d);
  const Tensor a = make(xa, {int64_t(n)}, d), b = make(xb, {int64_t(n)}, d);
  const Tensor a2 = make(xa, {8, 8}, d), b2 = make(xb, {8, 8}, d);
  const Tensor at = cg::raw::transpose(a2, 0, 1);  // strided, not broadcast

  for (const auto& [op, op_name] : kBinaryOps) {
    const std::string name = std::string("binary ") + op_name;
    print(name + " grid", d, k.binary(op, col, row));
    print(name + " flat", d, k.binary(op, a, b));
    print(name + " transposed", d, k.binary(op, at, b2));
  }
  for (const auto& [op, op_name] : kUnaryOps) {
    for (double s : scalars_of(op)) {
      const std::string name = std::string("unary ") + op_name + " s=" + std::to_string(s);
      print(name + " flat", d, k.unary(op, a, s));
      print(name + " transposed", d, k.unary(op, at, s));
      Tensor dst = cg::raw::clone(a2);
      k.inplace_scalar(op, cg::raw::transpose(dst, 0, 1), s);
      print(name + " in-place", d, dst);
    }
  }
  const InplaceOp inplace_ops[] = {InplaceOp::add, InplaceOp::mul, InplaceOp::copy};
  const char* inplace_names[] = {"add", "mul", "copy"};
  for (int i = 0; i < 3; ++i) {
    for (double alpha : {1.0, 0.3, -1.5}) {
      const std::string name =
          std::string("inplace ") + inplace_names[i] + " alpha=" + std::to_string(alpha);
      Tensor dst = cg::raw::clone(a);
      k.inplace(inplace_ops[i], dst, b, alpha);
      print(name + " flat", d, dst);
      Tensor grid = make(inputs(d, n * n, 4), {int64_t(n), int64_t(n)}, d);
      k.inplace(inplace_ops[i], grid, row, alpha);
      print(name + " broadcast", d, grid);
    }
  }
  for (bool divide : {false, true}) {
    for (double value : {1.0, -0.25}) {
      const std::string name =
          std::string("addcmul divide=") + (divide ? "1" : "0") + " value=" + std::to_string(value);
      Tensor dst = cg::raw::clone(make(xc, {int64_t(n)}, d));
      k.addcmul(dst, a, b, value, divide);
      print(name, d, dst);
    }
  }
  const Tensor c = make(xc, {int64_t(n)}, d);
  print("swiglu forward flat", d, k.swiglu_forward(a, b));
  print("swiglu forward transposed", d, k.swiglu_forward(at, b2));
  for (bool need_dgate : {false, true}) {
    for (bool need_dup : {false, true}) {
      if (!need_dgate && !need_dup) continue;
      const std::string flags = std::string(need_dgate ? " dgate" : "") + (need_dup ? " dup" : "");
      const cg::SwigluGrads g = k.swiglu_backward(c, a, b, need_dgate, need_dup);
      if (need_dgate) print("swiglu backward flat" + flags + " [dgate]", d, g.dgate);
      if (need_dup) print("swiglu backward flat" + flags + " [dup]", d, g.dup);
      const cg::SwigluGrads t =
          k.swiglu_backward(make(xc, {8, 8}, d), at, b2, need_dgate, need_dup);
      if (need_dgate) print("swiglu backward transposed" + flags + " [dgate]", d, t.dgate);
      if (need_dup) print("swiglu backward transposed" + flags + " [dup]", d, t.dup);
    }
  }
}

}  // namespace

int main() {
  try {
    for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) run(d);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "formula_hash: %s\n", e.what());
    return 1;
  }
  return 0;
}
