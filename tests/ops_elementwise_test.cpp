// Why this file exists: the elementwise ops, activations and where/masked_fill checked
// four ways: backward against finite differences (f64; broadcast, transposed, sliced,
// expanded and odd-sized inputs), forward against plain std:: loops, bf16/f16 forward
// against fp32 within a stated tolerance, and the errors a user sees for bad input.
// Also what each op saves for backward, and that the threaded paths (inputs above the
// parallel threshold) agree with the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/views.h"
#include "ops/ops.h"
#include "tests/gradcheck.h"
#include "tests/tensor_test_helpers.h"

namespace cg {
namespace {

using testing::make_input;
using V = std::vector<Tensor>;
using Fn = std::function<Tensor(const Tensor&)>;
using Ref = std::function<double(double)>;

// A leaf of positive values (for log, sqrt, rsqrt, pow bases): |N(0,1)| + 0.5.
Tensor positive_input(const Shape& shape, uint64_t seed) {
  Tensor t = make_input(shape, seed).detach();
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::abs(p[i]) + 0.5;
  return t.requires_grad_();
}

Tensor bools(const std::vector<int64_t>& values, const Shape& shape) {
  return from_ints(values, shape, {.dtype = DType::boolean});
}

struct UnaryCase {
  const char* name;
  Fn op;
  Ref ref;
  bool positive_only;
};

double ref_gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double ref_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

std::vector<UnaryCase> unary_cases() {
  return {
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, false},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); },
       true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); },
       true},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0); }, [](double x) { return x * x * x; },
       false},
      {"pow 2", [](const Tensor& x) { return pow(x, 2.0); }, [](double x) { return x * x; }, false},
      {"pow -1.5", [](const Tensor& x) { return pow(x, -1.5); },
       [](double x) { return std::pow(x, -1.5); }, true},
      {"pow 0.5", [](const Tensor& x) { return pow(x, 0.5); },
       [](double x) { return std::sqrt(x); }, true},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); },
       false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, ref_sigmoid, false},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x * ref_sigmoid(x); },
       false},
      {"gelu", [](const Tensor& x) { return gelu(x); }, ref_gelu, false},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::tanh); }, ref_gelu_tanh,
       false},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; },
       false},
  };
}

// ---- gradients -----------------------------------------------------------------------

TEST(OpsElemGradcheck, UnaryOpsContiguousTransposedSliced) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor a = c.positive_only ? positive_input({3, 5}, 1) : make_input({3, 5}, 1, 0.05);
    Tensor odd = c.positive_only ? positive_input({7}, 2) : make_input({7}, 2, 0.05);
    Fn op = c.op;
    EXPECT_GRADCHECK([op](const V& x) { return op(x[0]); }, a);
    EXPECT_GRADCHECK([op](const V& x) { return op(x[0]); }, odd);
    EXPECT_GRADCHECK([op](const V& x) { return op(transpose(x[0], 0, 1)); }, a);
    EXPECT_GRADCHECK([op](const V& x) { return op(slice(x[0], 1, 0, 5, 2)); }, a);
  }
}

TEST(OpsElemGradcheck, PowScalarEdgeExponents) {
  Tensor a = make_input({2, 3}, 3, 0.1);
  EXPECT_GRADCHECK([](const V& x) { return pow(x[0], 1.0); }, a);
  EXPECT_GRADCHECK([](const V& x) { return pow(x[0], 0.0); }, a);
  EXPECT_GRADCHECK([](const V& x) { return 2.0 / x[0]; }, a);
}

TEST(OpsElemGradcheck, DivAndPowBroadcastAndNonContiguous) {
  Tensor a = make_input({3, 1, 4}, 4), b = positive_input({2, 4}, 5);
  EXPECT_GRADCHECK([](const V& x) { return div(x[0], x[1]); }, a, b);
  EXPECT_GRADCHECK(
      [](const V& x) {
        return x[1] / expand(x[0], {3, 2, 4});
      },
      positive_input({3, 1, 4}, 6), b);
  Tensor base = positive_input({4, 3}, 7), e = make_input({3}, 8);
  EXPECT_GRADCHECK([](const V& x) { return pow(x[0], x[1]); }, base, e);
  EXPECT_GRADCHECK([](const V& x) { return pow(transpose(x[0], 0, 1), x[1]); }, base,
                   make_input({4}, 9));
  // Only one side requiring grad (each node saves less then).
  Tensor c = make_input({4, 3}, 10);
  EXPECT_GRADCHECK([c](const V& x) { return div(c.detach(), x[0]); }, positive_input({3}, 11));
  EXPECT_GRADCHECK([base](const V& x) { return pow(base.detach(), x[0]); }, make_input({1, 3}, 12));
}

TEST(OpsElemGradcheck, ActivationsBroadcastExpanded) {
  // An expanded (stride 0) input: the gradient sums over the repeats.
  Tensor a = make_input({1, 5}, 13, 0.05);
  EXPECT_GRADCHECK([](const V& x) { return mul(silu(expand(x[0], {3, 5})), tanh(x[0])); }, a);
  EXPECT_GRADCHECK([](const V& x) { return gelu(expand(x[0], {4, 5})); }, a);
  EXPECT_GRADCHECK([](const V& x) { return sigmoid(expand(x[0], {2, 5})); }, a);
}

TEST(OpsElemGradcheck, WhereBroadcast) {
  Tensor cond = bools({1, 0, 0, 1}, {4});
  Tensor a = make_input({3, 4}, 14), b = make_input({3, 1}, 15);
  EXPECT_GRADCHECK([cond](const V& x) { return where(cond, x[0], x[1]); }, a, b);
  // cond [2, 1, 4] with a [3, 4] and a 0-d b -> [2, 3, 4]; a transposed a.
  Tensor c2 = bools({1, 1, 0, 0, 0, 1, 0, 1}, {2, 1, 4});
  EXPECT_GRADCHECK([c2](const V& x) { return where(c2, x[0], x[1]); }, a, make_input({}, 16));
  Tensor at = make_input({4, 3}, 17);
  EXPECT_GRADCHECK([cond](const V& x) { return where(cond, transpose(x[0], 0, 1), x[1]); }, at, b);
}

TEST(OpsElemGradcheck, MaskedFill) {
  Tensor x = make_input({2, 3, 4}, 18);
  Tensor causal = bools({0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1}, {3, 4});
  EXPECT_GRADCHECK([causal](const V& v) { return masked_fill(v[0], causal, -1e4); }, x);
  Tensor row = bools({1, 0}, {2, 1, 1});
  EXPECT_GRADCHECK([row](const V& v) { return masked_fill(v[0], row, 0.0); }, x);
  EXPECT_GRADCHECK(
      [causal](const V& v) {
        return masked_fill(transpose(v[0], 0, 1), narrow(narrow(causal, 0, 1, 2), 1, 1, 2), 2.0);
      },
      make_input({2, 3, 2}, 19));
}

// ---- forward values ------------------------------------------------------------------

TEST(OpsElemForward, UnaryMatchesReferenceLoops) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x64 = (c.positive_only ? positive_input({5, 7}, 20) : make_input({5, 7}, 20)).detach();
    const std::vector<double> xv = x64.to_vector();
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor x = to(x64, dt);
      const std::vector<double> got = c.op(x).to_vector();
      const std::vector<double> xr = x.to_vector();  // the values as rounded to dt
      const double tol = dt == DType::f64 ? 1e-14 : 2e-6;
      for (size_t i = 0; i < got.size(); ++i) {
        const double want = c.ref(xr[i]);
        EXPECT_NEAR(got[i], want, tol * (1 + std::abs(want))) << "x = " << xr[i];
      }
    }
  }
}

TEST(OpsElemForward, GeluIsTheErfForm) {
  Tensor x = from_vector({-3, -1, -0.5, 0, 0.5, 1, 3}, {7}, {.dtype = DType::f64});
  const auto got = gelu(x).to_vector(), approx = gelu(x, GeluApproximation::tanh).to_vector();
  const auto xv = x.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_DOUBLE_EQ(got[i], 0.5 * xv[i] * (1 + std::erf(xv[i] / std::sqrt(2.0))));
    EXPECT_NEAR(approx[i], got[i], 1e-3);  // the tanh form is within 1e-3 of the exact one
  }
}

TEST(OpsElemForward, SigmoidAndSiluStableAtExtremes) {
  Tensor x = from_vector({-1000, -100, 100, 1000}, {4});
  EXPECT_EQ(sigmoid(x).to_vector(),
            (std::vector<double>{0, std::exp(-100.0f) / (1 + std::exp(-100.0f)), 1, 1}));
  for (double v : silu(x).to_vector()) EXPECT_FALSE(std::isnan(v));
  EXPECT_EQ(tanh(x).to_vector(), (std::vector<double>{-1, -1, 1, 1}));
}

TEST(OpsElemForward, BinaryValues) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}), b = from_vector({2, 4, 8}, {3});
  EXPECT_EQ(div(a, b).to_vector(), (std::vector<double>{0.5, 0.5, 0.375, 2, 1.25, 0.75}));
  EXPECT_EQ((a / b).to_vector(), div(a, b).to_vector());
  const auto p = pow(b, from_vector({2, 0.5}, {2, 1})).to_vector();
  const std::vector<double> want{4, 16, 64, std::sqrt(2.0), 2, std::sqrt(8.0)};
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], want[i], 1e-6 * want[i]);
  EXPECT_EQ((12.0 / b).to_vector(), (std::vector<double>{6, 3, 1.5}));
}

TEST(OpsElemForward, WhereAndMaskedFillValues) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}), b = from_vector({-1, -2}, {2, 1});
  Tensor cond = bools({1, 0, 1}, {3});
  EXPECT_EQ(where(cond, a, b).to_vector(), (std::vector<double>{1, -1, 3, 4, -2, 6}));
  Tensor mask = bools({0, 1}, {2, 1});
  EXPECT_EQ(masked_fill(a, mask, -7).to_vector(), (std::vector<double>{1, 2, 3, -7, -7, -7}));
  EXPECT_EQ(masked_fill(a, mask, -7).shape(), a.shape());
  // A mask made by conversion: nonzero is true.
  Tensor converted = to(from_vector({0, 2, 0}, {3}), DType::boolean);
  EXPECT_EQ(masked_fill(a, converted, 0).to_vector(), (std::vector<double>{1, 0, 3, 4, 0, 6}));
}

// bf16 and f16 keep 8 and 11 significant bits: computing in fp32 from the same (rounded)
// input, the only error left is the output's rounding, <= 2^-8 (bf16) / 2^-11 (f16)
// relative, plus a tiny absolute slack for results near 0.
TEST(OpsElemForward, HalfDtypesWithinRoundingOfFloat) {
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double rel = dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;
    for (const UnaryCase& c : unary_cases()) {
      SCOPED_TRACE(c.name);
      Tensor x64 = (c.positive_only ? positive_input({4, 9}, 21) : make_input({4, 9}, 21)).detach();
      Tensor xh = to(x64, dt);
      Tensor out = c.op(xh);
      EXPECT_EQ(out.dtype(), dt);
      const auto got = out.to_vector(), want = c.op(to(xh, DType::f32)).to_vector();
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], rel * std::abs(want[i]) + 1e-6);
    }
    Tensor a = to(randn({3, 4}), dt), b = to(to(randn({4}), DType::f64) * 0.1 + 2.0, dt);
    const auto q = div(a, b).to_vector(),
               qf = div(to(a, DType::f32), to(b, DType::f32)).to_vector();
    for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(q[i], qf[i], rel * std::abs(qf[i]) + 1e-6);
    Tensor cond = bools({1, 0, 0, 1}, {4});
    EXPECT_EQ(where(cond, a, -a).to_vector(),
              where(cond, to(a, DType::f32), -to(a, DType::f32)).to_vector());
  }
}

// Above kParallelMinElements (32768) the loops split between threads; contiguous and
// strided (transposed, broadcast) paths must still give the reference values.
TEST(OpsElemThreads, LargeInputsMatchReference) {
  Generator gen(22);
  Tensor a = randn({300, 257}, {.dtype = DType::f64}, &gen),
         b = randn({257}, {.dtype = DType::f64}, &gen);
  const auto av = a.to_vector(), bv = b.to_vector();
  const auto sum_ab = add(a, b).to_vector(), e = exp(a).to_vector();
  const auto t = gelu(transpose(a, 0, 1)).to_vector();
  for (int64_t i = 0; i < 300; ++i) {
    for (int64_t j = 0; j < 257; ++j) {
      ASSERT_EQ(sum_ab[i * 257 + j], av[i * 257 + j] + bv[j]);
      ASSERT_EQ(e[i * 257 + j], std::exp(av[i * 257 + j]));
      ASSERT_NEAR(t[j * 300 + i], ref_gelu(av[i * 257 + j]), 1e-14);
    }
  }
  Tensor m = zeros({300, 257}, {.dtype = DType::f64});
  add_(m, b, 2.0);
  const auto mv = m.to_vector();
  for (int64_t i = 0; i < 300 * 257; ++i) ASSERT_EQ(mv[i], 2.0 * bv[i % 257]);
}

// ---- what backward keeps --------------------------------------------------------------

TEST(OpsElemSaved, EachOpSavesOnlyWhatItsGradientNeeds) {
  Tensor x = make_input({4, 8}, 23);  // 256 bytes
  Tensor w = make_input({8}, 24);     // 64 bytes
  const size_t out_bytes = 4 * 8 * 8;
  auto saved = [](const Tensor& t) { return t.grad_fn()->saved_bytes(); };
  EXPECT_EQ(saved(add(x, w)), 0u);
  EXPECT_EQ(saved(exp(x)), out_bytes);  // its output
  EXPECT_EQ(saved(sigmoid(x)), out_bytes);
  EXPECT_EQ(saved(tanh(x)), out_bytes);
  EXPECT_EQ(saved(silu(x)), x.nbytes());  // its input
  EXPECT_EQ(saved(gelu(x)), x.nbytes());
  EXPECT_EQ(saved(mul(x, w.detach())), w.nbytes());  // only x needs a grad: keeps w
  EXPECT_EQ(saved(div(x, w.detach())), w.nbytes());  // 1 / b only
  EXPECT_EQ(saved(div(x, w)), x.nbytes() + w.nbytes());
  EXPECT_EQ(saved(pow(x, 1.0)), 0u);
  Tensor cond = bools({1, 0, 1, 0, 1, 0, 1, 0}, {8});
  EXPECT_EQ(saved(where(cond, x, w)), 8u);  // the 8-byte bool condition
  EXPECT_EQ(saved(masked_fill(x, cond, 0)), 8u);
  // exp's input is not kept: the graph holds exp's output only.
  EXPECT_EQ(graph_retained_bytes(exp(scale(x, 2.0))).total_bytes, out_bytes);
  EXPECT_EQ(exp(x).grad_fn()->name(), "ExpBackward");
}

// ---- errors ----------------------------------------------------------------------------

TEST(OpsElemErrors, ShapesThatDoNotBroadcast) {
  TENSOR_EXPECT_ERROR(div(ones({2, 3}), ones({4})), "div", "[2, 3]", "[4]", "broadcast");
  TENSOR_EXPECT_ERROR(pow(ones({2, 3}), ones({2, 2})), "pow", "broadcast");
  TENSOR_EXPECT_ERROR(where(bools({1, 0}, {2}), ones({3}), ones({3})), "where", "cond [2]",
                      "cannot be broadcast");
  TENSOR_EXPECT_ERROR(masked_fill(ones({2, 3}), bools({1, 0}, {2}), 0), "masked_fill",
                      "mask of shape [2]", "[2, 3]", "broadcast");
  // A mask that broadcasts with x but would enlarge it is refused too.
  TENSOR_EXPECT_ERROR(masked_fill(ones({3}), bools({1, 0, 1, 1, 0, 1}, {2, 3}), 0), "masked_fill",
                      "does not broadcast to the input's shape [3]");
}

TEST(OpsElemErrors, DtypesAndConditions) {
  TENSOR_EXPECT_ERROR(div(ones({2}), ones({2}, {.dtype = DType::f64})), "div", "dtypes differ",
                      "f32", "f64");
  TENSOR_EXPECT_ERROR(where(ones({2}), ones({2}), ones({2})), "where", "cond", "bool", "f32");
  TENSOR_EXPECT_ERROR(masked_fill(ones({2}), ones({2}, {.dtype = DType::i64}), 1.0), "masked_fill",
                      "mask", "bool", "i64");
  TENSOR_EXPECT_ERROR(where(bools({1}, {1}), ones({2}), ones({2}, {.dtype = DType::bf16})), "where",
                      "dtypes differ");
  TENSOR_EXPECT_ERROR(exp(ones({2}, {.dtype = DType::i64})), "exp", "i64", "not supported");
  TENSOR_EXPECT_ERROR(gelu(Tensor()), "gelu", "undefined");
}

}  // namespace
}  // namespace cg
