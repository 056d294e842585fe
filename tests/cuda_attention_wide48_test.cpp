// Why this file exists: the backward's 128-key CTAs on 48-row query tiles (Note [48-row
// query tiles] in cuda/attention_flash_dkdv.cu; forced on here for both DFlash rules)
// against the CPU reference, and against the same CTAs on 32-row tiles on the same inputs,
// tightly (both round the same bf16 P and dS; only their sums' grouping differs), since a
// mistake in one 16-row half of the dq's runs, in the second load pass's rows 32 .. 47 or
// in one k16 step could hide under the CPU comparison's tolerance. Groups whose packed rows
// are 48, 96, 144 and 240 (a 48-row tile starting on either half of a 32-row tile of the
// dq's buffer), 192 (a multiple of 64 too) and 528 (past the row table), anchors at 0, at
// the end, repeated and padded, windows smaller and larger than the context, atomics
// instead of bulk reductions, and the backward's scratch starting as NaN. Every comparison
// with 32-row tiles checks that its 48-row run launched the 48-row kernel and its 32-row
// run did not, and each test that the kernel ran at all. Compiled only in CUDA builds;
// skipped without a GPU or without the warpgroup MMA.
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

class CudaAttentionWide48Test : public testing::CudaAttentionTest {
 protected:
  void SetUp() override {
    testing::CudaAttentionTest::SetUp();
    if (IsSkipped()) return;
    if (std::string(cuda::flash_forward_kernel_name(DType::bf16, 128)) != "wgmma")
      GTEST_SKIP() << "no warpgroup MMA here (an sm_90a build on a compute capability 9.0 card)";
    launches_before_ = cuda::flash_dkdv_wide48_launches();
  }
  void TearDown() override {
    if (!IsSkipped())
      EXPECT_GT(cuda::flash_dkdv_wide48_launches(), launches_before_)
          << "the 48-row kernel never launched: the cases ran 32-row tiles";
  }
  int64_t launches_before_ = 0;
};

// dq, dk and dv with 48-row tiles against 32-row tiles on the same inputs and forward
// outputs: relative to each one's largest magnitude, 8e-3 (about two bf16 ulps there). The
// 48-row run must launch the 48-row kernel (a case that fell back to 32 rows would compare
// 32 rows with 32 rows: an outside review's finding).
void expect_as_32_rows(const testing::Case& c, const std::string& what) {
  SCOPED_TRACE(what + " vs 32-row tiles");
  testing::FlashBackwardRig rig(c);
  AttentionGrads grads[2];
  for (int rows48 = 0; rows48 < 2; ++rows48) {
    const ScopedEnv rows("CHUNKGRAD_FLASH_DKDV_WIDE_ROWS", rows48 ? "48" : "32");
    const int64_t before = cuda::flash_dkdv_wide48_launches();
    grads[rows48] = rig.backward();
    if (rows48) {
      EXPECT_GT(cuda::flash_dkdv_wide48_launches(), before) << "the 48-row kernel did not run";
    } else {
      EXPECT_EQ(cuda::flash_dkdv_wide48_launches(), before) << "32 rows ran the 48-row kernel";
    }
  }
  testing::expect_close(grads[1].dq, grads[0].dq, 8e-3, "dq");
  testing::expect_close(grads[1].dk, grads[0].dk, 8e-3, "dk");
  testing::expect_close(grads[1].dv, grads[0].dv, 8e-3, "dv");
}

std::string name(int64_t hq, int64_t S, int64_t Bs, int64_t W, int64_t hkv = 8) {
  return testing::dflash_name(hq, hkv, S, Bs, W);
}

// testing::EdgeAnchors: per-batch anchors at 0, 1, the end, repeated, at tile edges and
// padded, over 300 context keys.
TEST_F(CudaAttentionWide48Test, BothRulesEdgeAnchors) {
  const ScopedEnv on("CHUNKGRAD_FLASH_DKDV_WIDE_ROWS", "48");
  const testing::EdgeAnchors e;
  const int64_t S = e.S, N = e.N;
  struct Group {
    int64_t hq, hkv, Bs;  // packed rows (hq / hkv) * Bs
  };
  // 96, 48, 144, 240 packed rows; 192 (a multiple of 64 too: 48 only by the switch); 528
  // (past the row table's 512 rows: each row worked out in the kernel)
  const Group groups[] = {{32, 8, 24}, {16, 8, 24}, {24, 8, 48},
                          {40, 8, 48}, {64, 8, 24}, {22, 1, 24}};
  for (DType dt : {DType::bf16, DType::f16}) {
    for (Group gr : groups) {
      for (int64_t W : {0, 5, 66, 1000}) {
        if (gr.hkv == 1 && (dt == DType::f16 || W == 5)) continue;  // (the largest: fewer)
        const AttentionMask m = AttentionMask::dflash_blocks(S, gr.Bs, e.anchors, e.padded, W);
        const testing::Case c = dflash_case(dt, 128, gr.hq, gr.hkv, 2, S, N, gr.Bs, m);
        const std::string what = name(gr.hq, S, gr.Bs, W, gr.hkv);
        check_case(c, AttentionPath::flash, what);
        expect_as_32_rows(c, what);
      }
    }
  }
}

// Near the drafter's shape (64 blocks of 24 over 4096 sorted anchors, 32/8 heads), both
// rules, and once with the backward's scratch starting as NaN.
TEST_F(CudaAttentionWide48Test, NearTheRealShapeAndNanScratch) {
  const ScopedEnv on("CHUNKGRAD_FLASH_DKDV_WIDE_ROWS", "48");
  const int64_t S = 4096, N = 64, Bs = 24;
  std::vector<int64_t> a(N);
  for (int64_t b = 0; b < N; ++b) a[b] = b * S / (N - 1);
  for (int64_t W : {0, 2048}) {
    const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, from_ints(a, {N}), Tensor(), W);
    const testing::Case c = dflash_case(DType::bf16, 128, 32, 8, 1, S, N, Bs, m);
    check_case(c, AttentionPath::flash, name(32, S, Bs, W));
    expect_as_32_rows(c, name(32, S, Bs, W));
  }
  const ScopedEnv nan("CHUNKGRAD_FLASH_SCRATCH_NAN", "1");
  const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, from_ints(a, {N}), Tensor(), 66);
  check_case(dflash_case(DType::bf16, 128, 32, 8, 1, S, N, Bs, m), AttentionPath::flash,
             name(32, S, Bs, 66) + " NaN scratch");
}

// The fused dq by atomics (CHUNKGRAD_FLASH_DQ_BULK=0) instead of bulk reductions: a row at
// a time into the 32-row tiles of the buffer, skipping those past a block's packed rows.
TEST_F(CudaAttentionWide48Test, AtomicsInsteadOfBulkReductions) {
  const ScopedEnv on("CHUNKGRAD_FLASH_DKDV_WIDE_ROWS", "48");
  const ScopedEnv atomics("CHUNKGRAD_FLASH_DQ_BULK", "0");
  const int64_t S = 300, N = 5;
  const Tensor anchors = from_ints({0, 128, 129, 300, 300}, {N});
  for (int64_t W : {0, 66}) {
    for (int64_t hq : {32, 24}) {  // 96 and 72 (not a multiple of 48: 32-row tiles) rows
      const AttentionMask m = AttentionMask::dflash_blocks(S, 24, anchors, Tensor(), W);
      const testing::Case c = dflash_case(DType::bf16, 128, hq, 8, 1, S, N, 24, m);
      check_case(c, AttentionPath::flash, name(hq, S, 24, W) + " atomics");
      if (hq == 32) expect_as_32_rows(c, name(hq, S, 24, W) + " atomics");
    }
  }
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
