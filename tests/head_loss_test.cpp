// Why this file exists: the three head-loss paths must give the same loss and the same
// gradients (fp32 tight, bf16 within a stated tolerance) for every loss kind and head
// mode, and the fused path's gradients must match finite differences in f64 for any
// upstream gradient -- the failure peers shipped with reduction none.
#include <gtest/gtest.h>

#include <cmath>

#include "core/factories.h"
#include "core/views.h"
#include "gradcheck.h"
#include "ops/head_loss.h"
#include "ops/ops.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

constexpr int64_t kT = 37, kD = 12, kV = 53;  // odd sizes: chunks don't divide T

struct Problem {
  Tensor h, w, th, labels, weights;
};

Problem make_problem(DType dtype, bool trainable_head, uint64_t seed) {
  Generator gen(seed);
  Problem p;
  p.h = randn({kT, kD}, {.dtype = dtype}, &gen).requires_grad_();
  p.w = randn({kV, kD}, {.dtype = dtype}, &gen, 0.0, 0.5);
  if (trainable_head) p.w.requires_grad_();
  p.th = randn({kT, kD}, {.dtype = dtype}, &gen);
  std::vector<int64_t> y(kT);
  for (int64_t i = 0; i < kT; ++i)
    y[i] = i % 9 == 4 ? -100 : static_cast<int64_t>(gen.next_u64() % kV);
  p.labels = from_ints(y, {kT});
  std::vector<double> wv(kT);
  for (int64_t i = 0; i < kT; ++i)
    wv[i] = std::exp(-static_cast<double>(i % 8) / 7.0);  // gamma decay
  p.weights = from_vector(wv, {kT});
  return p;
}

struct Grads {
  double loss;
  std::vector<double> per_token, dh, dw;
};

Grads run(const Problem& p, const HeadLossOptions& o, bool use_weights = true) {
  p.h.set_grad(Tensor());
  if (p.w.requires_grad()) p.w.set_grad(Tensor());
  HeadLossInputs in{p.h, p.w, p.labels, use_weights ? p.weights : Tensor(), p.th, Tensor()};
  HeadLossResult r = head_loss(in, o);
  Grads g;
  g.loss = to(r.loss, DType::f64).item();
  g.per_token = r.per_token.to_vector();
  r.loss.backward();
  g.dh = p.h.grad().to_vector();
  if (p.w.requires_grad()) g.dw = p.w.grad().to_vector();
  return g;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// |a - b| <= tol * max|b| elementwise (gradients of a mean loss are small: compare to scale).
void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  const double scale = std::max(max_abs(b), 1e-30);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol * scale) << what << " element " << i;
  }
}

std::vector<LossConfig> loss_configs() {
  std::vector<LossConfig> out;
  LossConfig ce;
  ce.label_smoothing = 0.1f;
  ce.z_loss = 1e-3f;
  out.push_back(ce);
  for (LossKind k : {LossKind::forward_kl, LossKind::reverse_kl, LossKind::soft_cross_entropy}) {
    LossConfig c;
    c.kind = k;
    c.temperature = 1.5f;
    out.push_back(c);
  }
  LossConfig mix;
  mix.kind = LossKind::forward_kl;
  mix.hard_ce_weight = 0.25f;
  mix.softcap = 8.0f;
  out.push_back(mix);
  return out;
}

TEST(HeadLoss, ThreePathsAgreeInFp32) {
  for (bool trainable : {false, true}) {
    for (const LossConfig& c : loss_configs()) {
      const Problem p = make_problem(DType::f32, trainable, 7);
      HeadLossOptions o;
      o.loss = c;
      o.chunk_rows = 8;
      o.path = HeadLossPath::naive;
      const Grads naive = run(p, o);
      const std::string what =
          std::string(loss_kind_name(c.kind)) + (trainable ? " trainable" : " frozen");
      for (HeadLossPath path : {HeadLossPath::chunked, HeadLossPath::fused}) {
        for (bool recompute : {false, true}) {
          if (recompute && path != HeadLossPath::fused) continue;
          o.path = path;
          o.recompute_in_backward = recompute;
          const Grads g = run(p, o);
          const std::string w =
              what + " " + head_loss_path_name(path) + (recompute ? " recompute" : "");
          EXPECT_NEAR(g.loss, naive.loss, 1e-5 * std::max(1.0, std::fabs(naive.loss))) << w;
          expect_close(g.per_token, naive.per_token, 1e-5, w + " per-token");
          expect_close(g.dh, naive.dh, 1e-4, w + " dh");
          if (trainable) expect_close(g.dw, naive.dw, 1e-4, w + " dW");
        }
      }
    }
  }
}

TEST(HeadLoss, ThreePathsAgreeInBf16WithinTolerance) {
  // Naive and chunked round the logits to bf16 (the matmul's output dtype); fused keeps
  // them in fp32. Each logit then differs by up to 2^-8 relative: the loss by ~1e-2,
  // gradients by a few percent of their largest element.
  for (bool trainable : {false, true}) {
    for (LossKind kind : {LossKind::cross_entropy, LossKind::forward_kl, LossKind::reverse_kl}) {
      const Problem p = make_problem(DType::bf16, trainable, 8);
      HeadLossOptions o;
      o.loss.kind = kind;
      o.chunk_rows = 16;
      o.path = HeadLossPath::naive;
      const Grads naive = run(p, o);
      for (auto [path, recompute] :
           {std::pair{HeadLossPath::chunked, false}, std::pair{HeadLossPath::fused, false},
            std::pair{HeadLossPath::fused, true}}) {
        o.path = path;
        o.recompute_in_backward = recompute;
        const Grads g = run(p, o);
        const std::string w = std::string(loss_kind_name(kind)) + " " + head_loss_path_name(path) +
                              (recompute ? " recompute" : "");
        EXPECT_NEAR(g.loss, naive.loss, 2e-2 * std::max(1.0, std::fabs(naive.loss))) << w;
        expect_close(g.dh, naive.dh, 5e-2, w + " dh");
        if (trainable) expect_close(g.dw, naive.dw, 5e-2, w + " dW");
      }
    }
  }
}

TEST(HeadLoss, TeacherOfAnotherWidthWithItsOwnHead) {
  // A wider teacher (its own [V, Dt] head): every path must agree, the fused one included.
  constexpr int64_t kDt = 19;
  for (LossKind kind : {LossKind::forward_kl, LossKind::reverse_kl}) {
    const Problem p = make_problem(DType::f32, false, 21);
    Generator gen(22);
    const Tensor th = randn({kT, kDt}, {}, &gen);
    const Tensor wt = randn({kV, kDt}, {}, &gen, 0.0, 0.5);
    HeadLossOptions o;
    o.loss.kind = kind;
    o.chunk_rows = 8;
    auto run_path = [&](HeadLossPath path, bool recompute) {
      p.h.set_grad(Tensor());
      o.path = path;
      o.recompute_in_backward = recompute;
      HeadLossResult r = head_loss({p.h, p.w, Tensor(), p.weights, th, wt}, o);
      r.loss.backward();
      return std::make_pair(r.loss.item(), p.h.grad().to_vector());
    };
    const auto naive = run_path(HeadLossPath::naive, false);
    for (auto [path, recompute] :
         {std::pair{HeadLossPath::chunked, false}, std::pair{HeadLossPath::fused, false},
          std::pair{HeadLossPath::fused, true}}) {
      const auto got = run_path(path, recompute);
      const std::string w = std::string(loss_kind_name(kind)) + " " + head_loss_path_name(path);
      EXPECT_NEAR(got.first, naive.first, 1e-5 * std::max(1.0, std::fabs(naive.first))) << w;
      expect_close(got.second, naive.second, 1e-4, w + " dh");
    }
  }
}

TEST(HeadLoss, RecomputeEqualsGradsInForward) {
  const Problem p = make_problem(DType::f32, true, 9);
  HeadLossOptions o;
  o.chunk_rows = 5;
  const Grads forward_grads = run(p, o);
  o.recompute_in_backward = true;
  const Grads recomputed = run(p, o);
  EXPECT_NEAR(recomputed.loss, forward_grads.loss, 1e-6 * std::fabs(forward_grads.loss));
  expect_close(recomputed.dh, forward_grads.dh, 1e-5, "dh");
  expect_close(recomputed.dw, forward_grads.dw, 1e-5, "dW");
}

// Finite differences in f64 with a random upstream gradient on per-token losses
// (reduction none): the frozen-head rows mode and the recompute mode.
TEST(HeadLoss, FusedPerTokenGradcheckWithArbitraryUpstream) {
  for (const LossConfig& c : loss_configs()) {
    for (bool recompute : {false, true}) {
      const Problem p = make_problem(DType::f64, recompute, 10);
      const Tensor h = testing::make_input({kT, kD}, 11);
      const Tensor w = recompute ? testing::make_input({kV, kD}, 12) : p.w;
      // The teacher's head is a constant: with a trainable student head, give the teacher
      // its own copy, or finite differences would move the teacher's logits too.
      const Tensor teacher_head = raw::clone(w.detach());
      auto f = [&](const std::vector<Tensor>& in) {
        HeadLossOptions o;
        o.loss = c;
        o.chunk_rows = 6;
        o.reduction = Reduction::none;
        o.recompute_in_backward = recompute;
        return head_loss({in[0], recompute ? in[1] : w, p.labels, p.weights, p.th, teacher_head}, o)
            .loss;
      };
      std::vector<Tensor> inputs{h};
      if (recompute) inputs.push_back(w);
      const auto r = testing::gradcheck(f, inputs);
      EXPECT_TRUE(r.ok) << loss_kind_name(c.kind) << (recompute ? " recompute: " : " frozen: ")
                        << r.str();
    }
  }
}

TEST(HeadLoss, FusedTrainableHeadGradcheck) {
  const Problem p = make_problem(DType::f64, true, 13);
  for (Reduction red : {Reduction::mean, Reduction::sum}) {
    auto f = [&](const std::vector<Tensor>& in) {
      HeadLossOptions o;
      o.chunk_rows = 10;
      o.reduction = red;
      return head_loss({in[0], in[1], p.labels, p.weights, Tensor(), Tensor()}, o).loss;
    };
    const auto r = testing::gradcheck(
        f, {testing::make_input({kT, kD}, 14), testing::make_input({kV, kD}, 15)});
    EXPECT_TRUE(r.ok) << r.str();
  }
}

TEST(HeadLoss, WeightingComposesOnPerTokenLosses) {
  // D-PACE-like weights built from the per-token losses themselves (detached), applied
  // after the fused op: the gradient must equal the naive path's under the same weighting.
  const Problem p = make_problem(DType::f32, false, 16);
  auto weighted = [&](HeadLossPath path) {
    p.h.set_grad(Tensor());
    HeadLossOptions o;
    o.path = path;
    o.chunk_rows = 7;
    o.reduction = Reduction::none;
    HeadLossResult r = head_loss({p.h, p.w, p.labels, Tensor(), Tensor(), Tensor()}, o);
    const Tensor q = exp(neg(r.per_token.detach()));  // acceptance probability proxy
    const Tensor loss = sum(r.per_token * (q * 0.5 + 0.5));
    loss.backward();
    return p.h.grad().to_vector();
  };
  expect_close(weighted(HeadLossPath::fused), weighted(HeadLossPath::naive), 1e-4, "dh");
}

TEST(HeadLoss, MetricsAgreeAcrossPathsAndAreExact) {
  const Problem p = make_problem(DType::f32, false, 17);
  HeadLossOptions o;
  o.loss.kind = LossKind::forward_kl;
  o.loss.hard_ce_weight = 0.5f;
  o.loss.ignore_index = -1;
  o.chunk_rows = 9;
  // Labels: the student's own argmax on even rows, something else on odd rows, and
  // ignore_index on every 5th row -- so the accuracy is known exactly.
  const std::vector<double> top = [&] {
    NoGradGuard no_grad;
    return argmax(matmul(p.h, transpose(p.w, 0, 1)), 1).to_vector();
  }();
  std::vector<int64_t> y(kT);
  int64_t counted = 0, right = 0;
  for (int64_t i = 0; i < kT; ++i) {
    const int64_t a = static_cast<int64_t>(top[i]);
    y[i] = i % 5 == 0 ? -1 : i % 2 == 0 ? a : (a + 1) % kV;
    if (i % 5 != 0) {
      ++counted;
      right += i % 2 == 0;
    }
  }
  const Tensor labels = from_ints(y, {kT});
  HeadLossInputs in{p.h, p.w, labels, Tensor(), p.th, Tensor()};
  o.path = HeadLossPath::naive;
  const HeadLossResult naive = head_loss(in, o);
  EXPECT_DOUBLE_EQ(token_accuracy(naive, labels, -1), static_cast<double>(right) / counted);
  for (HeadLossPath path : {HeadLossPath::chunked, HeadLossPath::fused}) {
    o.path = path;
    const HeadLossResult r = head_loss(in, o);
    const std::string w = head_loss_path_name(path);
    EXPECT_EQ(r.argmax.to_vector(), naive.argmax.to_vector()) << w;
    EXPECT_EQ(r.teacher_argmax.to_vector(), naive.teacher_argmax.to_vector()) << w;
    expect_close(r.lse.to_vector(), naive.lse.to_vector(), 1e-5, w + " lse");
    expect_close(r.entropy.to_vector(), naive.entropy.to_vector(), 1e-4, w + " entropy");
    EXPECT_DOUBLE_EQ(token_accuracy(r, labels, -1), static_cast<double>(right) / counted) << w;
    EXPECT_DOUBLE_EQ(teacher_agreement(r, labels, -1), teacher_agreement(naive, labels, -1)) << w;
  }
  // A student that is its own teacher agrees with it everywhere.
  HeadLossInputs self{p.h, p.w, labels, Tensor(), p.h.detach(), Tensor()};
  EXPECT_EQ(teacher_agreement(head_loss(self, o)), 1.0);
  TENSOR_EXPECT_ERROR(token_accuracy(naive, from_ints({1, 2}, {2})), "rows");
}

TEST(HeadLoss, BadInputIsExplained) {
  const Problem p = make_problem(DType::f32, false, 18);
  HeadLossOptions o;
  std::vector<int64_t> y(kT, 0);
  y[5] = kV;
  TENSOR_EXPECT_ERROR(head_loss({p.h, p.w, from_ints(y, {kT}), Tensor(), Tensor(), Tensor()}, o),
                      "label 53", "row 5", "vocabulary of 53");
  o.loss.kind = LossKind::forward_kl;
  TENSOR_EXPECT_ERROR(head_loss({p.h, p.w, Tensor(), Tensor(), zeros({kT - 1, kD}), Tensor()}, o),
                      "teacher_hidden has 36 rows", "T=37");
  // A teacher of another width needs its own head; with the shared head D must match.
  TENSOR_EXPECT_ERROR(head_loss({p.h, p.w, Tensor(), Tensor(), zeros({kT, kD + 1}), Tensor()}, o),
                      "teacher_hidden D=13", "[53, 12]");
  TENSOR_EXPECT_ERROR(head_loss({p.h, p.w, Tensor(), Tensor(), p.th, zeros({kV + 1, kD})}, o),
                      "vocabulary V=53");
  TENSOR_EXPECT_ERROR(
      head_loss({p.h, p.w, Tensor(), Tensor(), p.th, zeros({kV, kD}, {.dtype = DType::bf16})}, o),
      "dtypes differ");
  TENSOR_EXPECT_ERROR(head_loss({p.h, p.w, Tensor(), Tensor(), p.th, zeros({kV, kD + 1})}, o),
                      "teacher_hidden D=12");
  o.loss.kind = LossKind::cross_entropy;
  TENSOR_EXPECT_ERROR(head_loss({p.h, p.w, p.labels, ones({kT + 2}), Tensor(), Tensor()}, o),
                      "weights must be [T=37]");
  TENSOR_EXPECT_ERROR(
      head_loss({p.h, zeros({kV, kD + 1}), p.labels, Tensor(), Tensor(), Tensor()}, o),
      "head must be [V, D=12]");
  o.chunk_budget_bytes = 100;
  const std::string one_row = std::to_string(head_loss_chunk_bytes(
                                  {p.h, p.w, p.labels, Tensor(), Tensor(), Tensor()}, o, 1)) +
                              " bytes";
  TENSOR_EXPECT_ERROR(head_loss({p.h, p.w, p.labels, Tensor(), Tensor(), Tensor()}, o),
                      "too small for one row", one_row.c_str());
  o.chunk_budget_bytes = 1 << 20;
  o.reduction = Reduction::none;
  const Tensor w_trains = p.w.detach().requires_grad_();
  TENSOR_EXPECT_ERROR(head_loss({p.h, w_trains, p.labels, Tensor(), Tensor(), Tensor()}, o),
                      "recompute_in_backward");
  TENSOR_EXPECT_ERROR(parse_head_loss_path("fast"), "naive, chunked or fused");
}

// Chunks from the budget: below 1024 rows the most that fit; from 1024 on a multiple of
// 128 (GEMM tiles); all rows when they all fit.
TEST(HeadLossChunks, BudgetChunksOfAThousandRowsOrMoreAreMultiplesOf128) {
  const Tensor h = zeros({3000, 4}), w = zeros({16, 4});
  const HeadLossInputs in{h, w, Tensor(), Tensor(), Tensor(), Tensor()};
  HeadLossOptions o;
  for (int64_t rows : {int64_t{700}, int64_t{1100}, int64_t{1300}, int64_t{2999}}) {
    o.chunk_budget_bytes = head_loss_chunk_bytes(in, o, rows);
    const int64_t want = rows < 1024 ? rows : rows - rows % 128;
    EXPECT_EQ(head_loss_chunk_rows(in, o), want) << rows << " rows fit";
  }
  o.chunk_budget_bytes = head_loss_chunk_bytes(in, o, 3000);
  EXPECT_EQ(head_loss_chunk_rows(in, o), 3000);
}

}  // namespace
}  // namespace cg
