// Why this file exists: one harness that checks any op's backward against finite
// differences, so every op (and every composite graph) is tested the same way
// (flashlight's and ggml's test-backend-ops' approach).
//
// gradcheck(f, inputs) runs out = f(inputs) on f64 leaves, backpropagates a fixed
// random upstream gradient w (so every output element matters), and compares each
// input's analytic gradient with the central difference
//   (sum(f(x + eps e_j) * w) - sum(f(x - eps e_j) * w)) / (2 eps),   eps = 1e-6,
// element by element. It reports the worst element (largest error relative to the
// tolerance atol + rtol * |numeric|).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/tensor.h"

namespace cg::testing {

struct GradcheckResult {
  bool ok = true;
  double worst_ratio = 0.0;  // error / tolerance at the worst element (ok: <= 1)
  size_t input = 0;          // where the worst element is
  int64_t element = 0;
  double analytic = 0.0;
  double numeric = 0.0;
  std::string problem;  // a gradient of the wrong shape or dtype
  std::string str() const {
    std::ostringstream out;
    if (!problem.empty()) return "MISMATCH: " + problem;
    out << (ok ? "ok" : "MISMATCH") << ": worst at input " << input << " element " << element
        << ": analytic " << analytic << " vs numeric " << numeric << " (error/tolerance "
        << worst_ratio << ")";
    return out.str();
  }
};

using GradFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Inputs: contiguous f64 leaves that require grad (see make_input).
inline GradcheckResult gradcheck(const GradFn& f, const std::vector<Tensor>& inputs,
                                 double eps = 1e-6, double atol = 1e-6, double rtol = 1e-5) {
  for (const Tensor& x : inputs) x.set_grad(Tensor());
  Tensor out = f(inputs);
  Generator gen(1234);
  Tensor w = randn(out.shape(), {.dtype = DType::f64}, &gen);
  const std::vector<double> wv = w.to_vector();
  out.backward(w);

  auto objective = [&]() {
    NoGradGuard no_grad;
    const std::vector<double> v = f(inputs).to_vector();
    double acc = 0.0;
    for (size_t i = 0; i < v.size(); ++i) acc += v[i] * wv[i];
    return acc;
  };

  GradcheckResult result;
  result.worst_ratio = -1.0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    const Tensor g = x.grad();
    if (g.defined() && (g.shape() != x.shape() || g.dtype() != x.dtype())) {
      result.problem = "input " + std::to_string(i) + " has shape " + shape_str(x.shape()) +
                       " but its gradient " + shape_str(g.shape()) + " " + dtype_name(g.dtype());
      result.ok = false;
      return result;
    }
    const std::vector<double> analytic =
        g.defined() ? g.to_vector() : std::vector<double>(x.numel(), 0.0);
    double* p = x.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double saved = p[j];
      p[j] = saved + eps;
      const double plus = objective();
      p[j] = saved - eps;
      const double minus = objective();
      p[j] = saved;
      const double numeric = (plus - minus) / (2 * eps);
      const double ratio = std::abs(analytic[j] - numeric) / (atol + rtol * std::abs(numeric));
      if (!(ratio <= result.worst_ratio)) {  // larger, or NaN
        result.worst_ratio = std::isnan(ratio) ? INFINITY : ratio;
        result.input = i;
        result.element = j;
        result.analytic = analytic[j];
        result.numeric = numeric;
      }
    }
  }
  result.ok = result.worst_ratio <= 1.0;
  result.worst_ratio = std::max(result.worst_ratio, 0.0);
  return result;
}

// A contiguous f64 leaf that requires grad, N(0, 1) from `seed`. With min_abs > 0, values
// are pushed away from 0 (for relu's kink).
inline Tensor make_input(const Shape& shape, uint64_t seed, double min_abs = 0.0) {
  Generator gen(seed);
  Tensor t = randn(shape, {.dtype = DType::f64}, &gen);
  if (min_abs > 0) {
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] += p[i] >= 0 ? min_abs : -min_abs;
  }
  t.requires_grad_();
  return t;
}

}  // namespace cg::testing

#define EXPECT_GRADCHECK(f, ...)                                          \
  do {                                                                    \
    auto gradcheck_result = ::cg::testing::gradcheck((f), {__VA_ARGS__}); \
    EXPECT_TRUE(gradcheck_result.ok) << gradcheck_result.str();           \
  } while (0)
