// Why this file exists: the drafter's head-loss row kernel that holds rows on chip
// (cuda/head_rows_cluster.cu, Note [Rows held on chip]) against the general row kernel
// (cuda/head_loss_kernels.cu, itself checked against the CPU in cuda_head_loss_test.cpp):
// per-row loss, lse, entropy, both argmaxes and the bf16 gradient, at vocabularies split
// over 2 to 16 CTAs, with more rows than the GPU runs clusters, ignored rows, a per-row
// gradient scale, ties for the max, masked teacher logits, a max in a row's last element,
// and the loss without a gradient; and the calls it must leave to the general kernel.
// Skipped without a GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "cuda/device_info.h"
#include "cuda/head_rows_cluster.h"
#include "head_loss_loops_util.h"
#include "ops/kernels.h"

namespace cg {
namespace {

using head_loss_test::host;

struct RowsOut {
  std::vector<double> loss, lse, entropy, grad;
  std::vector<double> argmax, teacher_argmax;
};

struct RowsCase {
  int64_t C = 37, V = 0;
  LossConfig config;
  bool want_grad = true, entropy = true, labels = true;
};

// Logits and teacher [C, V] in bf16 on the GPU, uniform in [-4, 4], with the cases the
// kernel must get right placed in the first rows.
struct RowsInputs {
  Tensor logits, teacher, labels, grad_scale;
};

RowsInputs make_rows(const RowsCase& rc, uint64_t seed) {
  const int64_t C = rc.C, V = rc.V;
  Generator gen(seed);
  Tensor z = rand({C, V}, {.dtype = DType::f32}, &gen, -4, 4);
  Tensor t = rand({C, V}, {.dtype = DType::f32}, &gen, -4, 4);
  float* zp = z.data<float>();
  float* tp = t.data<float>();
  zp[17] = zp[V - 5] = 30.0f;  // row 0: tied maxima, the first one wins
  tp[100] = tp[V - 1] = 25.0f;
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < V; j += 3) tp[V + j] = -inf;  // row 1: masked teacher logits
  zp[5 * V + V - 1] = 40.0f;                            // row 5: the max in the last element
  tp[5 * V + V - 1] = 35.0f;
  std::vector<int64_t> y(static_cast<size_t>(C));
  std::vector<double> scale(static_cast<size_t>(C));
  for (int64_t i = 0; i < C; ++i) {
    y[i] = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(V));
    scale[i] = 0.5 + static_cast<double>(i % 5) / 4.0;
  }
  y[2] = -100;  // ignored
  y[3] = V - 1;
  y[4] = 0;
  y[5] = V - 1;  // the label on the max
  const Device gpu = cuda_device(0);
  RowsInputs in;
  in.logits = raw::to_device(raw::to_dtype(z, DType::bf16), gpu);
  in.teacher = raw::to_device(raw::to_dtype(t, DType::bf16), gpu);
  if (rc.labels) in.labels = raw::to_device(from_ints(y, {C}), gpu);
  in.grad_scale = raw::to_device(from_vector(scale, {C}, {.dtype = DType::f32}), gpu);
  return in;
}

// One call of the table's head_loss_rows on copies of the inputs with
// CHUNKGRAD_HEAD_ROWS_CLUSTER set to `shape` (null: unset, the default shape; "0": the
// general kernel); `launched` says whether the on-chip kernel ran.
RowsOut run_rows(const RowsCase& rc, const RowsInputs& in, const char* shape, bool* launched) {
  if (shape == nullptr)
    unsetenv("CHUNKGRAD_HEAD_ROWS_CLUSTER");
  else
    setenv("CHUNKGRAD_HEAD_ROWS_CLUSTER", shape, 1);
  const Device gpu = cuda_device(0);
  HeadRowsArgs a;
  a.logits = raw::clone(in.logits);
  a.teacher = raw::clone(in.teacher);
  a.labels = in.labels;
  a.config = rc.config;
  a.want_grad = rc.want_grad;
  a.grad_scale = in.grad_scale;
  // Outputs start as NaN and -1, so that a row the kernel skips cannot pass on what an
  // earlier call left in a reused block.
  auto out = [&](DType dt, double fill) {
    Tensor t = raw::empty({rc.C}, dt, gpu);
    raw::fill_(t, fill);
    return t;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  a.loss = out(DType::f32, nan);
  a.lse = out(DType::f32, nan);
  if (rc.entropy) a.entropy = out(DType::f32, nan);
  a.argmax = out(DType::i64, -1);
  a.teacher_argmax = out(DType::i64, -1);
  const int64_t before = cuda::head_rows_cluster_launches();
  kernels_for(gpu, "head_rows_cluster_test").head_loss_rows(a);
  *launched = cuda::head_rows_cluster_launches() > before;
  unsetenv("CHUNKGRAD_HEAD_ROWS_CLUSTER");
  RowsOut o;
  o.loss = host(a.loss);
  o.lse = host(a.lse);
  if (rc.entropy) o.entropy = host(a.entropy);
  o.argmax = host(a.argmax);
  o.teacher_argmax = host(a.teacher_argmax);
  if (rc.want_grad) o.grad = host(a.logits);
  return o;
}

// |a - b| <= rel |b| + abs[i] (abs: one value, or one per element), element by element;
// the first failure reported.
void expect_each_near(const std::vector<double>& a, const std::vector<double>& b, double rel,
                      const std::vector<double>& abs, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_TRUE(abs.size() == 1 || abs.size() == a.size()) << what;
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double slack = abs.size() == 1 ? abs[0] : abs[i];
    const bool ok = std::abs(a[i] - b[i]) <= rel * std::abs(b[i]) + slack ||
                    (std::isnan(a[i]) && std::isnan(b[i]));
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  EXPECT_EQ(bad, 0) << what << ": first at " << first << ": " << a[first] << " vs " << b[first];
}
void expect_each_near(const std::vector<double>& a, const std::vector<double>& b, double rel,
                      double abs, const std::string& what) {
  expect_each_near(a, b, rel, std::vector<double>{abs}, what);
}

// The gradient's slack where its terms cancel: a row's gradient is its scale s times a mix
// of p - q (KL), p - onehot (CE) and p lse (z-loss), p and q the student's and the
// teacher's softmax. The two kernels differ in the order of their fp32 sums, about 1e-6 of
// p and q; the slack is 1e-4 s (p + q) per element (p and q in double from the bf16
// inputs; the student's lse from the general kernel, the teacher's here), far under the
// 1e-7 a uniform floor would need at V = 248320, where p and q average 4e-6.
std::vector<double> gradient_slack(const RowsInputs& in, const RowsOut& general, int64_t C,
                                   int64_t V) {
  const std::vector<double> z = host(in.logits), t = host(in.teacher), s = host(in.grad_scale);
  std::vector<double> slack(static_cast<size_t>(C * V));
  for (int64_t i = 0; i < C; ++i) {
    const double* ti = t.data() + i * V;
    double tm = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j < V; ++j) tm = std::max(tm, ti[j]);
    for (int64_t j = 0; j < V; ++j) sum += std::exp(ti[j] - tm);
    const double tlse = tm + std::log(sum), zlse = general.lse[i];
    // A row whose lse is not finite gets none (strict). An ignored row gets the slack of
    // scale s, though its gradient is 0: the test checks that row for exact zeros apart.
    if (!std::isfinite(zlse)) continue;
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::exp(z[i * V + j] - zlse), q = std::exp(ti[j] - tlse);
      slack[i * V + j] = 1e-4 * s[i] * (p + q);
    }
  }
  return slack;
}

class CudaHeadRowsCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    if (cuda::device_properties(0).cc_major < 9) GTEST_SKIP() << "clusters need sm_90";
  }
};

LossConfig drafter_loss(float ce_weight) {
  LossConfig c;
  c.kind = LossKind::forward_kl;
  c.hard_ce_weight = ce_weight;
  return c;
}

// Both kernels on the same rows, the on-chip one in each of its shapes (the default, three
// CTAs of 256 threads an SM; two of 256; one of 512): values within fp32 summation order,
// argmaxes equal, the bf16 gradient within one rounding (2^-7 relative) plus the slack of
// gradient_slack where its terms cancel.
TEST_F(CudaHeadRowsCluster, MatchesTheGeneralKernel) {
  std::vector<RowsCase> cases(4);
  cases[0].V = 248320;  // 16 CTAs of 256 a row (8 of 512): the drafter's vocabulary
  cases[0].config = drafter_loss(0.1f);
  cases[0].config.z_loss = 1e-3f;
  cases[1].V = 131080;  // 16385 packs: 9 CTAs of 256 (5 of 512), uneven slices
  cases[1].config = drafter_loss(0.3f);
  cases[1].entropy = false;
  cases[2].V = 40000;  // 3 CTAs of 256 (2 of 512); the loss alone, no CE, no labels
  cases[2].config = drafter_loss(0.0f);
  cases[2].want_grad = false;
  cases[2].labels = false;
  cases[3].V = 40000;  // the loss alone again, over more rows than the GPU runs clusters
  cases[3].C = 600;
  cases[3].config = drafter_loss(0.1f);
  cases[3].want_grad = false;
  cases[3].entropy = false;
  for (const RowsCase& rc : cases) {
    // The general kernel's rows and the gradient's slack, once a case (the slack's pass
    // over every logit in double is the slow part of the test).
    const RowsInputs in = make_rows(rc, 11);
    bool general = true;
    const RowsOut b = run_rows(rc, in, "0", &general);
    EXPECT_FALSE(general) << "V " << rc.V << ": the general kernel did not run";
    const std::vector<double> slack =
        rc.want_grad ? gradient_slack(in, b, rc.C, rc.V) : std::vector<double>{};
    for (const char* shape : {static_cast<const char*>(nullptr), "256", "512"}) {
      const std::string what =
          "V " + std::to_string(rc.V) + ", shape " + (shape ? shape : "default");
      bool on_chip = false;
      const RowsOut a = run_rows(rc, in, shape, &on_chip);
      EXPECT_TRUE(on_chip) << what << ": the on-chip kernel did not run";
      expect_each_near(a.loss, b.loss, 2e-5, 2e-5, what + " loss");
      expect_each_near(a.lse, b.lse, 1e-6, 1e-6, what + " lse");
      if (rc.entropy) expect_each_near(a.entropy, b.entropy, 2e-5, 2e-5, what + " entropy");
      EXPECT_EQ(a.argmax, b.argmax) << what;
      EXPECT_EQ(a.teacher_argmax, b.teacher_argmax) << what;
      EXPECT_EQ(a.argmax[0], 17) << what << ": the first of tied maxima";
      EXPECT_EQ(a.teacher_argmax[0], 100) << what;
      EXPECT_EQ(a.argmax[5], rc.V - 1) << what;
      EXPECT_EQ(a.loss[2], rc.labels ? 0.0 : b.loss[2]) << what;  // row 2 is ignored
      for (double l : a.loss) EXPECT_TRUE(std::isfinite(l)) << what;
      if (rc.want_grad) {
        expect_each_near(a.grad, b.grad, 1.0 / 128, slack, what + " gradient");
        double row2 = 0;  // the ignored row's gradient is zero
        for (int64_t j = 0; j < rc.V; ++j) row2 = std::max(row2, std::abs(a.grad[2 * rc.V + j]));
        EXPECT_EQ(row2, 0.0) << what;
      }
    }
  }
}

// What the kernel does not compute goes to the general one: a temperature, reverse KL,
// label smoothing, a softcap, a short vocabulary, one past its longest.
TEST_F(CudaHeadRowsCluster, OtherCallsKeepTheGeneralKernel) {
  for (int variant = 0; variant < 6; ++variant) {
    RowsCase rc;
    rc.C = 6;
    rc.V = variant == 4 ? 16384 : variant == 5 ? 262152 : 40000;
    rc.config = drafter_loss(0.1f);
    if (variant == 0) rc.config.temperature = 2.0f;
    if (variant == 1) rc.config.kind = LossKind::reverse_kl;
    if (variant == 2) rc.config.label_smoothing = 0.1f;
    if (variant == 3) rc.config.softcap = 30.0f;
    const RowsInputs in = make_rows(rc, 5);
    bool launched = true;
    run_rows(rc, in, nullptr, &launched);
    EXPECT_FALSE(launched) << "variant " << variant;
  }
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
