// Why this file exists: the fused dq of the dk/dv pass's 128-key CTAs on the warpgroup MMA
// (Note [wgmma dq] in cuda/attention_flash_dkdv.cu; the default, set here explicitly) against
// the CPU reference, forward and backward, under both DFlash rules: bf16 and f16 at hd 128
// (the only head dim that takes it), GQA groups 4 and 5, blocks whose packed rows end
// inside a 32-row tile, context lengths that end inside a 128-key tile, anchors at 0, at
// the end, repeated and padded, the backward's scratch starting as NaN (the blocks' own
// key CTAs store dq before the context CTAs add theirs), and atomics instead of bulk
// reductions; and against the mma.sync dq on the same inputs, tightly (both round the same
// bf16 dS; only their sums' order differs), since a mistake in one k16 step or one row half
// could hide under the CPU comparison's 3e-2. Each test counts the wgmma dq's launches, so
// that a silent fallback to mma.sync (no sm_90a build, a card without the warpgroup MMA,
// three stages that do not fit, an environment switch) fails it instead of passing it.
// Compiled only in CUDA builds; skipped without a GPU or without the wgmma forward.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/factories.h"
#include "cuda/attention_kernels.h"
#include "cuda/cuda_attention.h"
#include "ops/attention_mask.h"
#include "tests/cuda_attention_test_util.h"

namespace cg {
namespace {

using cuda::AttentionPath;
using testing::check_case;
using testing::dflash_case;
using testing::ScopedEnv;

class CudaAttentionDqWgmmaTest : public testing::CudaAttentionTest {
 protected:
  void SetUp() override {
    testing::CudaAttentionTest::SetUp();
    if (IsSkipped()) return;
    if (std::string(cuda::flash_forward_kernel_name(DType::bf16, 128)) != "wgmma")
      GTEST_SKIP() << "no warpgroup MMA here (an sm_90a build on a compute capability 9.0 card)";
    launches_before_ = cuda::flash_dq_wgmma_launches();
  }
  void TearDown() override {
    if (!IsSkipped())
      EXPECT_GT(cuda::flash_dq_wgmma_launches(), launches_before_)
          << "the wgmma dq never launched: the cases ran the mma.sync dq";
  }
  int64_t launches_before_ = 0;
};

// dq of the wgmma kernel against the mma.sync kernel's on the same inputs and forward
// outputs: relative to the largest |dq|, 8e-3 (about two bf16 ulps there).
void expect_dq_as_mma_sync(const testing::Case& c, const std::string& what) {
  SCOPED_TRACE(what + " vs mma.sync");
  testing::FlashBackwardRig rig(c);
  Tensor dq[2];
  for (int wgmma = 0; wgmma < 2; ++wgmma) {
    const testing::ScopedEnv on("CHUNKGRAD_FLASH_DQ_WGMMA", wgmma ? "1" : "0");
    dq[wgmma] = rig.backward().dq;
  }
  testing::expect_close(dq[1], dq[0], 8e-3, "dq");
}

std::string name(int64_t hq, int64_t S, int64_t Bs, int64_t W) {
  return testing::dflash_name(hq, 8, S, Bs, W);
}

// testing::EdgeAnchors: per-batch anchors at 0, 1, the end, repeated, at tile edges and
// padded, over 300 context keys.
TEST_F(CudaAttentionDqWgmmaTest, BothRulesEdgeAnchors) {
  const ScopedEnv on("CHUNKGRAD_FLASH_DQ_WGMMA", "1");
  const testing::EdgeAnchors e;
  const int64_t S = e.S, N = e.N;
  for (DType dt : {DType::bf16, DType::f16}) {
    for (int64_t hq : {32, 40}) {
      for (int64_t Bs : {24, 16}) {  // 96 or 120, 64 or 80 packed rows
        for (int64_t W : {0, 5, 66, 1000}) {
          const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, e.anchors, e.padded, W);
          check_case(dflash_case(dt, 128, hq, 8, 2, S, N, Bs, m), AttentionPath::flash,
                     name(hq, S, Bs, W));
          expect_dq_as_mma_sync(dflash_case(dt, 128, hq, 8, 2, S, N, Bs, m), name(hq, S, Bs, W));
        }
      }
    }
  }
}

// Near the drafter's shape (64 blocks of 24 over 4096 sorted anchors, 32/8 heads), both
// rules, and once with the backward's scratch starting as NaN.
TEST_F(CudaAttentionDqWgmmaTest, NearTheRealShapeAndNanScratch) {
  const ScopedEnv on("CHUNKGRAD_FLASH_DQ_WGMMA", "1");
  const int64_t S = 4096, N = 64, Bs = 24;
  std::vector<int64_t> a(N);
  for (int64_t b = 0; b < N; ++b) a[b] = b * S / (N - 1);
  for (int64_t W : {0, 2048}) {
    const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, from_ints(a, {N}), Tensor(), W);
    check_case(dflash_case(DType::bf16, 128, 32, 8, 1, S, N, Bs, m), AttentionPath::flash,
               name(32, S, Bs, W));
    expect_dq_as_mma_sync(dflash_case(DType::bf16, 128, 32, 8, 1, S, N, Bs, m), name(32, S, Bs, W));
  }
  const ScopedEnv nan("CHUNKGRAD_FLASH_SCRATCH_NAN", "1");
  const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, from_ints(a, {N}), Tensor(), 66);
  check_case(dflash_case(DType::bf16, 128, 32, 8, 1, S, N, Bs, m), AttentionPath::flash,
             name(32, S, Bs, 66) + " NaN scratch");
}

// The fused dq by atomics (CHUNKGRAD_FLASH_DQ_BULK=0) instead of bulk reductions: the
// wgmma dq's other way of adding its rows, skipping those past a block's packed rows.
TEST_F(CudaAttentionDqWgmmaTest, AtomicsInsteadOfBulkReductions) {
  const ScopedEnv on("CHUNKGRAD_FLASH_DQ_WGMMA", "1");
  const ScopedEnv atomics("CHUNKGRAD_FLASH_DQ_BULK", "0");
  const int64_t S = 300, N = 5;
  const Tensor anchors = from_ints({0, 128, 129, 300, 300}, {N});
  for (int64_t Bs : {24, 16}) {
    for (int64_t W : {0, 66}) {
      const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, anchors, Tensor(), W);
      check_case(dflash_case(DType::bf16, 128, 40, 8, 1, S, N, Bs, m), AttentionPath::flash,
                 name(40, S, Bs, W) + " atomics");
    }
  }
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
