// Why this file exists: issue 12's correctness on the device. The GPU's fused head loss
// (cuBLASLt GEMMs, the bandwidth row kernel of cuda/head_loss_kernels.cu, fp32 dW) against the GPU's naive path at a shape where naive fits
// (T=1000, D=256, V=50000: several chunks, rows of many 16-byte packs with a ragged last
// group), and against the CPU at small shapes with every option (label smoothing, z-loss,
// softcap, ignore_index rows, per-token weights, teacher losses mixed with CE). Loss and
// gradients (dh, dW) must agree within the tolerances below. Skipped without a GPU.
//
// Tolerances, as max |a - b| / max |b| over a tensor (loss: relative):
//   f32: 1e-4 (loss 1e-5). bf16: 3e-2 (loss 5e-3): the GPU keeps a chunk's logits and
//   their gradient in bf16 (head_logits_dtype) where the CPU and the naive path round at
//   other points, so gradients differ by a few bf16 ulps of the largest entry.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "cuda/device_info.h"
#include "head_loss_loops_util.h"
#include "ops/head_loss.h"
#include "ops/kernels.h"
#include "ops/loss.h"

namespace cg {
namespace {

using head_loss_test::host;
using head_loss_test::rel_err;

struct Grads {
  double loss = 0;
  std::vector<double> dh, dw, per_token;
};

struct Shape3 {
  int64_t T, D, V;
};

struct LossCase {
  Shape3 s;
  DType dtype = DType::f32;
  bool trainable = false;
  bool separate_teacher_head = false;  // a distinct tensor equal to the head
  HeadLossOptions o;
  bool weights = false;
};

// The problem on the CPU from a seed, moved to `dev`.
HeadLossInputs make_inputs(const LossCase& st, Device dev, uint64_t seed) {
  Generator gen(seed);
  const auto [T, D, V] = st.s;
  auto put = [&](const Tensor& t) { return raw::to_device(raw::to_dtype(t, st.dtype), dev); };
  HeadLossInputs in;
  in.hidden = put(randn({T, D}, {.dtype = DType::f32}, &gen)).requires_grad_();
  in.head = put(randn({V, D}, {.dtype = DType::f32}, &gen, 0.0, 2.0 / std::sqrt(double(D))));
  if (st.trainable) in.head.requires_grad_();
  std::vector<int64_t> y(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i)
    y[i] = i % 7 == 3 ? -100 : static_cast<int64_t>(gen.next_u64() % V);
  in.labels = raw::to_device(from_ints(y, {T}), dev);
  if (st.weights) {
    std::vector<double> w(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) w[i] = std::exp(-static_cast<double>(i % 8) / 7.0);
    in.weights =
        raw::to_device(raw::to_dtype(from_vector(w, {T}), compute_dtype_of(st.dtype)), dev);
  }
  if (loss_needs_teacher(st.o.loss)) {
    in.teacher_hidden = put(randn({T, D}, {.dtype = DType::f32}, &gen));
    if (st.separate_teacher_head) in.teacher_head = raw::clone(in.head.detach());
  }
  return in;
}

Grads run(const LossCase& st, Device dev, HeadLossPath path) {
  const HeadLossInputs in = make_inputs(st, dev, 7);
  HeadLossOptions o = st.o;
  o.path = path;
  HeadLossResult r = head_loss(in, o);
  Grads g;
  g.loss = host(r.loss)[0];
  g.per_token = host(r.per_token);
  r.loss.backward();
  g.dh = host(in.hidden.grad());
  if (st.trainable) g.dw = host(in.head.grad());
  return g;
}

void expect_close(const Grads& a, const Grads& b, DType dtype, const std::string& what) {
  const bool half = dtype == DType::bf16 || dtype == DType::f16;
  const double tol = half ? 3e-2 : 1e-4, loss_tol = half ? 5e-3 : 1e-5;
  EXPECT_NEAR(a.loss, b.loss, loss_tol * std::max(1.0, std::abs(b.loss))) << what;
  EXPECT_LE(rel_err(a.per_token, b.per_token), half ? 2e-2 : 1e-4) << what << ": per-token losses";
  EXPECT_LE(rel_err(a.dh, b.dh), tol) << what << ": dh";
  if (!b.dw.empty()) EXPECT_LE(rel_err(a.dw, b.dw), tol) << what << ": dW";
}

class CudaHeadLoss : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
  Device gpu() const { return cuda_device(0); }
};

HeadLossOptions ce_options() {
  HeadLossOptions o;
  o.loss.kind = LossKind::cross_entropy;
  return o;
}

HeadLossOptions kl_options(float ce_weight) {
  HeadLossOptions o;
  o.loss.kind = LossKind::forward_kl;
  o.loss.hard_ce_weight = ce_weight;
  return o;
}

// Fused vs naive on the GPU where naive fits: several chunks (chunk_rows 384: two full,
// one ragged), V = 50000 (12 full groups of packs and a ragged one per row).
TEST_F(CudaHeadLoss, FusedMatchesNaiveOnTheGpu) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int mode = 0; mode < 3; ++mode) {
      LossCase st;
      st.s = {1000, 256, 50000};
      st.dtype = dt;
      st.trainable = mode == 0;
      st.o = mode == 0 ? ce_options() : kl_options(mode == 2 ? 0.25f : 0.0f);
      st.o.chunk_rows = 384;
      const std::string what = std::string(dtype_name(dt)) +
                               (mode == 0 ? " CE trainable" : " KL frozen") +
                               (mode == 2 ? " + CE mix" : "");
      expect_close(run(st, gpu(), HeadLossPath::fused), run(st, gpu(), HeadLossPath::naive), dt,
                   what);
    }
  }
}

// The default chunk from the budget (a multiple of 128 rows), trainable head, bf16: the
// fp32 dW accumulated over chunks matches naive's.
TEST_F(CudaHeadLoss, BudgetChunksAccumulateDwInFp32) {
  LossCase st;
  st.s = {2500, 128, 32768};
  st.dtype = DType::bf16;
  st.trainable = true;
  st.o = ce_options();
  const HeadLossInputs in = make_inputs(st, gpu(), 7);
  st.o.chunk_budget_bytes = head_loss_chunk_bytes(in, st.o, 1200);  // 1200 rows fit: 1152 run
  EXPECT_EQ(head_loss_chunk_rows(in, st.o), 1152);
  expect_close(run(st, gpu(), HeadLossPath::fused), run(st, gpu(), HeadLossPath::naive), st.dtype,
               "bf16 CE trainable, budget chunks");
}

// A shared frozen head (the teacher's logits from the student's head) gives what a
// separate, equal teacher head gives.
TEST_F(CudaHeadLoss, SharedTeacherHeadMatchesASeparateOne) {
  for (DType dt : {DType::f32, DType::bf16}) {
    LossCase st;
    st.s = {600, 192, 20000};
    st.dtype = dt;
    st.o = kl_options(0.1f);
    st.o.chunk_rows = 256;
    const Grads shared = run(st, gpu(), HeadLossPath::fused);
    st.separate_teacher_head = true;
    const Grads separate = run(st, gpu(), HeadLossPath::fused);
    expect_close(shared, separate, DType::f32,
                 std::string(dtype_name(dt)) + " shared vs separate head");
  }
}

// GPU fused vs CPU fused at small shapes with every option. V 1003 (odd: the unpacked
// kernel) and 8200 (16-byte packs, 512 threads, a ragged last group).
TEST_F(CudaHeadLoss, FusedMatchesCpuWithEveryOption) {
  for (int64_t V : {int64_t{1003}, int64_t{8200}}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      for (int variant = 0; variant < 5; ++variant) {
        LossCase st;
        st.s = {45, 40, V};
        st.dtype = dt;
        st.weights = variant % 2 == 1;
        std::string what = std::string(dtype_name(dt)) + " V=" + std::to_string(V);
        if (variant == 0) {
          st.o = ce_options();
          st.o.loss.label_smoothing = 0.1f;
          st.trainable = true;
          what += " CE trainable, label smoothing";
        } else if (variant == 1) {
          st.o = ce_options();
          st.o.loss.z_loss = 1e-3f;
          st.o.loss.softcap = 15.0f;
          st.trainable = true;
          what += " CE trainable, z-loss, softcap, weights";
        } else if (variant == 2) {
          st.o = kl_options(0.3f);
          st.o.loss.temperature = 2.0f;
          st.o.loss.hinton_scale = true;
          what += " forward KL + CE, tau 2, Hinton";
        } else if (variant == 3) {
          st.o = kl_options(0.0f);
          st.o.loss.kind = LossKind::reverse_kl;
          st.o.loss.softcap = 20.0f;
          what += " reverse KL, softcap, weights";
        } else {
          st.o = kl_options(0.2f);
          st.o.loss.kind = LossKind::soft_cross_entropy;
          st.o.reduction = Reduction::sum;
          what += " soft CE + CE, sum";
        }
        st.o.chunk_rows = 16;
        expect_close(run(st, gpu(), HeadLossPath::fused), run(st, kCPU, HeadLossPath::fused), dt,
                     what);
      }
    }
  }
}

// f16 with a mean over many rows (issue 18 item 28): each row's gradient is scaled by
// 1/N before it is stored, and in f16 logits it underflowed as N grew (dh off by 12% at
// T = 16384). The GPU keeps f16's chunk logits in fp32 (Note [16-bit logits on the GPU]),
// so it agrees with the CPU's fused path as closely at 16384 rows as at 256.
TEST_F(CudaHeadLoss, F16MeanGradientsKeepTheirDigitsAtLargeT) {
  for (int64_t T : {256, 16384}) {
    LossCase st;
    st.s = {T, 64, 1024};
    st.dtype = DType::f16;
    st.trainable = true;
    st.o = ce_options();
    st.o.chunk_rows = 4096;
    const std::string what = "f16 CE trainable, T " + std::to_string(T);
    const Grads gpu_fused = run(st, gpu(), HeadLossPath::fused);
    const Grads cpu_fused = run(st, kCPU, HeadLossPath::fused);
    EXPECT_LE(rel_err(gpu_fused.dh, cpu_fused.dh), 1e-2) << what << ": dh";
    EXPECT_LE(rel_err(gpu_fused.dw, cpu_fused.dw), 1e-2) << what << ": dW";
    EXPECT_NEAR(gpu_fused.loss, cpu_fused.loss, 5e-3 * std::max(1.0, std::abs(cpu_fused.loss)))
        << what;
  }
}

// Issue 18 items 25-26 on the GPU: a masked (-inf) logit in the student's row, or in the
// teacher's, gives the CPU's finite loss and gradient (cross-entropy without smoothing was
// NaN: 0 * the row's -inf sum).
TEST_F(CudaHeadLoss, MaskedLogitsGiveTheCpusFiniteLosses) {
  const double inf = std::numeric_limits<double>::infinity();
  // CE masks student logits; KL masks teacher logits (a student -inf where the teacher has
  // mass is an infinite KL, on both devices).
  const std::vector<double> masked_student = {1.0, -inf, 0.5, 2.0, -inf, 0.25};
  const std::vector<double> student = {1.0, 0.1, 0.5, 2.0, -0.7, 0.25};
  const std::vector<double> teacher = {2.0, 0.3, -inf, 0.4, 1.0, -inf};
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int kind = 0; kind < 2; ++kind) {
      double value[2];
      std::vector<double> grad[2];
      for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
        const Device dev = on_gpu ? gpu() : kCPU;
        const Tensor z =
            from_vector(kind == 0 ? masked_student : student, {1, 6}, {.dtype = dt, .device = dev})
                .requires_grad_(true);
        const Tensor loss =
            kind == 0 ? cross_entropy(z, from_ints({3}, {1}, {.dtype = DType::i64, .device = dev}))
                      : kl_div(z, from_vector(teacher, {1, 6}, {.dtype = dt, .device = dev}));
        loss.backward();
        value[on_gpu] = loss.item();
        grad[on_gpu] = z.grad().to_vector();
      }
      const std::string what = std::string(dtype_name(dt)) + (kind == 0 ? " CE" : " forward KL");
      EXPECT_TRUE(std::isfinite(value[1])) << what;
      EXPECT_NEAR(value[1], value[0], 1e-2 * std::max(1.0, std::abs(value[0]))) << what;
      for (size_t j = 0; j < grad[0].size(); ++j) {
        EXPECT_TRUE(std::isfinite(grad[1][j])) << what << " grad " << j;
        EXPECT_NEAR(grad[1][j], grad[0][j], 2e-2) << what << " grad " << j;
      }
    }
  }
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
