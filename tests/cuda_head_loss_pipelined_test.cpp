// Why this file exists: the pipelined fused head loss on a GPU (Note [Pipelined chunks],
// ops/fused_head_loop.cpp): chunk i's row pass and gradient GEMMs on a side stream beside
// chunk i + 1's logits GEMMs. A missing wait lets a GEMM overwrite a slot the row pass or
// the dh GEMM still reads, which shows as wrong losses and gradients: the pipelined loop
// must give the one-stream loop's numbers at the same chunk size, for several chunks (odd
// and even counts, a ragged last chunk, a last chunk of one row), bf16 and f32, a frozen
// head with KL + CE, a trainable head (dW accumulated on the side stream) and recompute.
// Both loops make the same cuBLASLt calls on slots equally aligned (V a multiple of 128),
// so they pick the same algorithms and the numbers should be equal bit for bit; the test
// allows a bf16 ulp and prints the largest difference. Then the memory bound at the
// DFlash shape: pipelined, the peak above the inputs stays under 2 GiB. Skipped without a
// GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/views.h"
#include "cuda/device_info.h"
#include "head_loss_loops_util.h"
#include "ops/head_loss.h"

namespace cg {
namespace {

using namespace head_loss_test;

class CudaHeadLossPipelined : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
};

TEST_F(CudaHeadLossPipelined, EqualsTheOneStreamLoop) {
  constexpr int64_t T = 1000, D = 256, V = 32000;
  for (DType dt : {DType::bf16, DType::f32}) {
    const LoopProblem frozen = make_loop_problem(cuda_device(0), dt, T, D, V, false);
    const LoopProblem trainable = make_loop_problem(cuda_device(0), dt, T, D, V, true);
    const double tol = dt == DType::bf16 ? 4e-3 : 1e-6;
    // 5 chunks (the last of 104 rows), 4 (the last of 1 row), 8 (the last of 104).
    for (int64_t chunk : {224, 333, 128}) {
      struct Mode {
        const LoopProblem* p;
        LossKind kind;
        bool recompute;
        const char* name;
      };
      for (const Mode& m : {Mode{&frozen, LossKind::forward_kl, false, "KL + CE, frozen"},
                            Mode{&trainable, LossKind::cross_entropy, false, "CE, trainable"},
                            Mode{&trainable, LossKind::forward_kl, true, "KL + CE, recompute"}}) {
        const std::string what =
            std::string(dtype_name(dt)) + ", chunk " + std::to_string(chunk) + ", " + m.name;
        const LoopOutcome one = run_loop(*m.p, m.kind, chunk, false, m.recompute);
        const LoopOutcome two = run_loop(*m.p, m.kind, chunk, true, m.recompute);
        const double loss = rel_err(two.per_token, one.per_token), dh = rel_err(two.dh, one.dh);
        const double dw = one.dw.empty() ? 0.0 : rel_err(two.dw, one.dw);
        std::printf("%-40s largest difference: per-token %.3g, dh %.3g, dW %.3g\n", what.c_str(),
                    loss, dh, dw);
        EXPECT_LE(loss, tol) << what;
        EXPECT_LE(rel_err(two.lse, one.lse), tol) << what;
        EXPECT_LE(dh, tol) << what;
        EXPECT_LE(dw, tol) << what;
        EXPECT_EQ(two.argmax, one.argmax) << what;
      }
    }
  }
}

// Issue 19 item 6: KL with the frozen shared head + 0.1 CE at T = 24576, D = 5120,
// V = 248320, bf16, head_loss's default budget: the pipelined loop takes 1024-row chunks
// (three [C, V] slots), and the allocated peak above the inputs -- slots, two GEMMs'
// workspace, the per-row outputs and dh -- stays under 2 GiB. Its loss equals the
// one-stream loop's (1536-row chunks) within bf16 rounding.
TEST_F(CudaHeadLossPipelined, DflashShapeStaysUnderTwoGiB) {
  constexpr int64_t T = 24576, D = 5120, V = 248320;
  const Device dev = cuda_device(0);
  CachingAllocator& alloc = allocator_for(dev);
  Generator gen(1);
  HeadLossInputs in;
  in.hidden = randn({T, D}, {.dtype = DType::bf16, .device = dev}, &gen).requires_grad_();
  in.head = randn({V, D}, {.dtype = DType::bf16, .device = dev}, &gen, 0.0, 1.0 / std::sqrt(D));
  in.teacher_hidden = randn({T, D}, {.dtype = DType::bf16, .device = dev}, &gen);
  std::vector<int64_t> y(static_cast<size_t>(T));
  for (auto& v : y) v = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(V));
  in.labels = from_ints(y, {T}, {.dtype = DType::i64, .device = dev});
  HeadLossOptions o;
  o.pipelined = true;
  o.loss.kind = LossKind::forward_kl;
  o.loss.hard_ce_weight = 0.1f;
  HeadLossOptions serial = o;
  serial.pipelined = false;
  EXPECT_EQ(head_loss_chunk_rows(in, o), 1024);
  EXPECT_EQ(head_loss_chunk_rows(in, serial), 1536);
  double losses[2] = {0, 0};
  for (int pipelined = 1; pipelined >= 0; --pipelined) {
    in.hidden.set_grad(Tensor());
    backend_for(dev).synchronize(dev.index);
    const int64_t base = alloc.stats().allocated_bytes.current;
    alloc.reset_peak_stats();
    {
      HeadLossResult r = head_loss(in, pipelined ? o : serial);
      r.loss.backward();
      losses[pipelined] = host(r.loss)[0];
    }
    const double peak = static_cast<double>(alloc.stats().allocated_bytes.peak - base);
    std::printf("%s: allocated peak above the inputs %.3f GiB\n",
                pipelined ? "pipelined" : "one stream", peak / double(1 << 30));
    if (pipelined) {
      EXPECT_LE(peak, 2.0 * (1 << 30));
      EXPECT_GE(peak, 3.0 * 1024 * V * 2);  // the three slots were there
    }
  }
  in.hidden.set_grad(Tensor());
  EXPECT_NEAR(losses[1], losses[0], 5e-3 * std::abs(losses[0]));
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
