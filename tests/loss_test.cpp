// Why this file exists: the logits-level losses (row_losses, cross_entropy, kl_div) are
// checked against finite differences in f64 for every loss kind and option, against
// straightforward reference formulas, and for their errors. The fused head-loss paths
// are then checked against these.
#include <gtest/gtest.h>

#include <cmath>

#include "core/factories.h"
#include "core/views.h"
#include "gradcheck.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

using testing::gradcheck;
using testing::make_input;

Tensor labels_of(const std::vector<int64_t>& v) {
  return from_ints(v, {static_cast<int64_t>(v.size())});
}

struct Variant {
  const char* name;
  LossConfig config;
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (const LossKindInfo& k : kLossKinds) {  // every kind, a new one included
    const LossKind kind = k.kind;
    LossConfig plain;
    plain.kind = kind;
    out.push_back({"plain", plain});
    LossConfig rich = plain;
    rich.softcap = 2.5f;
    rich.temperature = 1.7f;
    rich.hinton_scale = true;
    rich.label_smoothing = 0.1f;
    rich.z_loss = 0.01f;
    out.push_back({"softcap+temperature+smoothing+zloss", rich});
    if (k.needs_teacher) {
      LossConfig mix = plain;
      mix.hard_ce_weight = 0.3f;
      mix.temperature = 0.6f;
      out.push_back({"mixed with hard CE", mix});
    }
  }
  return out;
}

TEST(LossRows, GradcheckEveryKindAndOption) {
  const int64_t n = 5, v = 7;
  const Tensor labels = labels_of({3, 0, -100, 6, 2});  // one ignored row
  for (const Variant& var : variants()) {
    const Tensor logits = make_input({n, v}, 11);
    const Tensor teacher = make_input({n, v}, 12).detach();
    auto f = [&](const std::vector<Tensor>& in) {
      return row_losses(in[0], labels, teacher, var.config).loss;
    };
    auto r = gradcheck(f, {logits});
    EXPECT_TRUE(r.ok) << loss_kind_name(var.config.kind) << " / " << var.name << ": " << r.str();
  }
}

TEST(LossRows, GradcheckOnNonContiguousLogits) {
  const Tensor base = make_input({6, 4}, 21);  // logits = base^T: [4, 6], strided
  const Tensor labels = labels_of({5, 1, 0, 3});
  auto f = [&](const std::vector<Tensor>& in) {
    return cross_entropy(transpose(in[0], 0, 1), labels, {.reduction = Reduction::none});
  };
  EXPECT_TRUE(gradcheck(f, {base}).ok);
}

TEST(LossRows, CrossEntropyMatchesTheFormula) {
  const Tensor logits = make_input({3, 5}, 31).detach();
  const std::vector<int64_t> y = {4, 0, 2};
  const std::vector<double> z = logits.to_vector();
  const Tensor per_row = cross_entropy(logits, labels_of(y), {.reduction = Reduction::none});
  double mean = 0;
  for (int64_t i = 0; i < 3; ++i) {
    double m = -1e300, s = 0;
    for (int64_t j = 0; j < 5; ++j) m = std::max(m, z[i * 5 + j]);
    for (int64_t j = 0; j < 5; ++j) s += std::exp(z[i * 5 + j] - m);
    const double expected = m + std::log(s) - z[i * 5 + y[i]];
    EXPECT_NEAR(per_row.to_vector()[i], expected, 1e-12);
    mean += expected / 3;
  }
  EXPECT_NEAR(cross_entropy(logits, labels_of(y)).item(), mean, 1e-12);
}

TEST(LossRows, KlMatchesTheFormulaAndIsZeroAgainstItself) {
  const Tensor a = make_input({2, 6}, 41).detach();
  const Tensor b = make_input({2, 6}, 42).detach();
  const std::vector<double> s = a.to_vector(), t = b.to_vector();
  const double tau = 2.0;
  auto softmax_row = [&](const std::vector<double>& x, int64_t i) {
    std::vector<double> p(6);
    double sum = 0;
    for (int j = 0; j < 6; ++j) sum += p[j] = std::exp(x[i * 6 + j] / tau);
    for (double& x : p) x /= sum;
    return p;
  };
  double fwd = 0, rev = 0;
  for (int64_t i = 0; i < 2; ++i) {
    auto q = softmax_row(s, i), p = softmax_row(t, i);
    for (int j = 0; j < 6; ++j) {
      fwd += p[j] * std::log(p[j] / q[j]) / 2;
      rev += q[j] * std::log(q[j] / p[j]) / 2;
    }
  }
  EXPECT_NEAR(kl_div(a, b, {.temperature = 2.0f}).item(), fwd, 1e-12);
  EXPECT_NEAR(kl_div(a, b, {.reverse = true, .temperature = 2.0f}).item(), rev, 1e-12);
  EXPECT_NEAR(kl_div(a, a).item(), 0.0, 1e-12);
}

TEST(LossRows, WeightsIgnoreIndexAndReductions) {
  const Tensor logits = make_input({4, 3}, 51).detach();
  const Tensor labels = labels_of({0, -100, 2, 1});
  const Tensor weights = from_vector({1.0, 5.0, 0.5, 2.0}, {4}, {.dtype = DType::f64});
  const std::vector<double> l =
      cross_entropy(logits, labels, {.reduction = Reduction::none}).to_vector();
  EXPECT_EQ(l[1], 0.0);  // ignored row
  const double weighted_sum = l[0] * 1.0 + l[2] * 0.5 + l[3] * 2.0;
  EXPECT_NEAR(
      cross_entropy(logits, labels, {.weights = weights, .reduction = Reduction::sum}).item(),
      weighted_sum, 1e-12);
  // mean divides by the weight of the rows that are not ignored: 1 + 0.5 + 2
  EXPECT_NEAR(cross_entropy(logits, labels, {.weights = weights}).item(), weighted_sum / 3.5,
              1e-12);
  EXPECT_NEAR(cross_entropy(logits, labels).item(), (l[0] + l[2] + l[3]) / 3.0, 1e-12);
  // Nothing to learn from: 0, not NaN.
  EXPECT_EQ(cross_entropy(logits, labels_of({-100, -100, -100, -100})).item(), 0.0);
}

TEST(LossRows, WeightedMeanGradcheck) {
  const Tensor labels = labels_of({2, 0, -100, 1});
  const Tensor weights = from_vector({0.3, 2.0, 1.0, 0.7}, {4}, {.dtype = DType::f64});
  auto f = [&](const std::vector<Tensor>& in) {
    return cross_entropy(in[0], labels, {.label_smoothing = 0.2f, .weights = weights});
  };
  EXPECT_TRUE(gradcheck(f, {make_input({4, 3}, 61)}).ok);
}

TEST(LossRows, MetricsFromTheSamePass) {
  const Tensor logits = from_vector({0.0, 3.0, 1.0, 2.0, -1.0, 0.5}, {2, 3});
  const Tensor teacher = from_vector({5.0, 0.0, 0.0, 0.0, 0.0, 9.0}, {2, 3});
  LossConfig c;
  c.kind = LossKind::forward_kl;
  const RowLosses r = row_losses(logits, Tensor(), teacher, c, true);
  EXPECT_EQ(r.argmax.to_vector(), (std::vector<double>{1, 0}));
  EXPECT_EQ(r.teacher_argmax.to_vector(), (std::vector<double>{0, 2}));
  const double lse0 = std::log(1 + std::exp(3.0) + std::exp(1.0));
  EXPECT_NEAR(r.lse.to_vector()[0], lse0, 1e-5);
  // entropy = lse - sum softmax(z) z
  const double e0 = lse0 - (3 * std::exp(3.0) + std::exp(1.0)) / std::exp(lse0);
  EXPECT_NEAR(r.entropy.to_vector()[0], e0, 1e-5);
}

TEST(LossRows, Bf16MatchesF32WithinTolerance) {
  Generator gen(71);
  const Tensor logits = randn({16, 50}, {}, &gen, 0.0, 3.0);
  std::vector<int64_t> y(16);
  for (int64_t i = 0; i < 16; ++i) y[i] = (i * 7) % 50;
  const Tensor labels = labels_of(y);
  const Tensor l32 = logits.detach().requires_grad_();
  const Tensor l16 = to(logits, DType::bf16).detach().requires_grad_();
  const Tensor loss32 = cross_entropy(l32, labels);
  const Tensor loss16 = cross_entropy(l16, labels);
  loss32.backward();
  loss16.backward();
  // bf16 rounds each logit by up to 2^-9 relative (|z| <~ 10: <= 0.02 absolute).
  EXPECT_NEAR(loss16.item(), loss32.item(), 0.03);
  const std::vector<double> g32 = l32.grad().to_vector(), g16 = l16.grad().to_vector();
  for (size_t i = 0; i < g32.size(); ++i) EXPECT_NEAR(g16[i], g32[i], 2e-3) << i;
}

TEST(LossRows, BadInputIsExplained) {
  const Tensor logits = zeros({3, 4});
  TENSOR_EXPECT_ERROR(cross_entropy(logits, labels_of({0, 4, 1})), "label 4", "row 1",
                      "vocabulary of 4");
  TENSOR_EXPECT_ERROR(cross_entropy(logits, labels_of({0, 1})), "labels must be [3]");
  TENSOR_EXPECT_ERROR(cross_entropy(logits, zeros({3})), "labels must be i64");
  TENSOR_EXPECT_ERROR(cross_entropy(zeros({3}), labels_of({0, 1, 2})), "2-D [N, V]");
  TENSOR_EXPECT_ERROR(kl_div(logits, zeros({3, 5})), "teacher logits [3, 5]", "[3, 4]");
  TENSOR_EXPECT_ERROR(kl_div(logits, zeros({3, 4}, {.dtype = DType::bf16})), "dtypes differ");
  TENSOR_EXPECT_ERROR(cross_entropy(logits, labels_of({0, 1, 2}), {.weights = ones({2})}),
                      "weights must be [3]");
  TENSOR_EXPECT_ERROR(kl_div(logits, logits, {.temperature = 0.0f}), "temperature must be > 0");
}

}  // namespace
}  // namespace cg
