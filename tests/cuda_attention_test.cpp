// Why this file exists: the CUDA attention entries (cuda/cuda_attention.h) against the CPU
// reference (the CPU table's attention entries, cpu/attention.cpp): forward (out,
// lse) and backward (dq, dk, dv) under masks none / causal / dflash_blocks / dense, GQA,
// the DFlash rule with anchors at the sequence start (0, 1), padded blocks, context
// longer than the blocks and blocks wider than a tile, lengths that are not multiples of
// the 64-row tiles, non-contiguous and misaligned inputs, each dtype, and every path
// (cudnn, flash, rows) where it applies; the cudnn path (cuDNN's fused SDPA) also forced
// at lengths 1 / 37 / 300, hd 64 / 128, GQA, bf16 and f16, with one lse contract across
// paths, and automatic's pick for the causal target. The harness and its per-dtype
// tolerances are in tests/cuda_attention_test_util.h; the sliding DFlash rule is tested in
// cuda_attention_sliding_test.cpp. Compiled only in CUDA builds; skipped without a GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "cuda/attention_kernels.h"
#include "cuda/cuda_attention.h"
#include "cuda/cuda_kernels.h"
#include "cuda/device_info.h"
#include "ops/attention_mask.h"
#include "ops/kernels.h"
#include "tests/cuda_attention_test_util.h"

namespace cg {
namespace {

using cuda::AttentionPath;
using testing::Case;
using testing::check_case;
using testing::check_paths;
using testing::CudaAttentionTest;
using testing::expect_close;
using testing::kDTypes;
using testing::mask_on;

// Note [wgmma forward]: an sm_90a build on a compute capability 9.0 card runs the forward
// of head dim 128 on the warpgroup-MMA kernel -- so every hd 128 case of this file checks
// that kernel there -- and CHUNKGRAD_FLASH_WGMMA=0 turns it off.
TEST_F(CudaAttentionTest, ForwardKernelChoice) {
  const cuda::DeviceProperties p = cuda::device_properties(0);
  const char* env = std::getenv("CHUNKGRAD_FLASH_WGMMA");
  const bool on = cuda::flash_wgmma_built() && p.cc_major == 9 && p.cc_minor == 0 &&
                  !(env != nullptr && std::string(env) == "0");
  EXPECT_STREQ(cuda::flash_forward_kernel_name(DType::bf16, 128), on ? "wgmma" : "mma.sync");
  EXPECT_STREQ(cuda::flash_forward_kernel_name(DType::f16, 128), on ? "wgmma" : "mma.sync");
  EXPECT_STREQ(cuda::flash_forward_kernel_name(DType::bf16, 64), "mma.sync");
  EXPECT_STREQ(cuda::flash_forward_kernel_name(DType::f32, 128), "mma.sync");
}

TEST_F(CudaAttentionTest, NoMaskOddLengths) {
  for (DType dt : kDTypes) {
    for (int64_t hd : {64, 128}) {
      Case c;
      c.B = 2;
      c.Hq = 3;
      c.Hkv = 3;
      c.Sq = 77;
      c.Sk = 131;
      c.hd = hd;
      c.dtype = dt;
      check_paths(c, "none hd " + std::to_string(hd));
    }
  }
}

TEST_F(CudaAttentionTest, CausalGqa) {
  for (DType dt : kDTypes) {
    for (int64_t hd : {64, 128}) {
      Case c;
      c.B = 2;
      c.Hq = 8;
      c.Hkv = 2;
      c.Sq = 130;
      c.Sk = 130;
      c.hd = hd;
      c.dtype = dt;
      c.mask = AttentionMask::causal();
      check_paths(c, "causal GQA 8/2 hd " + std::to_string(hd));
    }
  }
}

TEST_F(CudaAttentionTest, CausalRectangular) {
  for (DType dt : kDTypes) {
    Case c;  // Sq < Sk: bottom-right aligned
    c.Hq = 4;
    c.Hkv = 1;
    c.Sq = 50;
    c.Sk = 203;
    c.hd = 64;
    c.dtype = dt;
    c.mask = AttentionMask::causal();
    check_paths(c, "causal Sq < Sk");
    c.Sq = 100;
    c.Sk = 37;  // Sq > Sk: the first 63 rows see nothing (output 0, lse -inf)
    check_paths(c, "causal Sq > Sk");
  }
}

// A batch above the grid's 65535 z-blocks (issue 18 item 29: every GPU path failed with
// "too many tiles for one launch", and the automatic path's cuDNN forward then had no
// backward): the flash kernels spread the batch over y and z (Note [Batch grid]).
TEST_F(CudaAttentionTest, BatchAbove65535) {
  Case c;  // 65601 = 65535 + 66: the grid's second y-row holds 66 batch entries
  c.B = 65601;
  c.Hq = 1;
  c.Hkv = 1;
  c.Sq = 8;
  c.Sk = 8;
  c.hd = 64;
  c.dtype = DType::bf16;
  c.mask = AttentionMask::causal();
  check_paths(c, "B 65601 causal");
}

// DFlash: S context keys, N blocks of Bs; anchors at 0 and 1, at S, mid-way, and padded
// (negative and by flag); per-batch anchors.
TEST_F(CudaAttentionTest, DflashBlocks) {
  for (DType dt : kDTypes) {
    for (int64_t hd : {64, 128}) {
      const int64_t S = 150, N = 6, Bs = 24;
      Case c;
      c.B = 2;
      c.Hq = 8;
      c.Hkv = 2;
      c.Sq = N * Bs;
      c.Sk = S + N * Bs;
      c.hd = hd;
      c.dtype = dt;
      const Tensor anchors = from_ints({0, 1, 149, 150, -1, 64,  //
                                        7, 0, 150, 1, 130, 2},
                                       {2, N});
      const Tensor padded =
          from_vector({0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, {2, N}, {.dtype = DType::boolean});
      c.mask = AttentionMask::dflash_blocks(S, Bs, anchors, padded);
      check_paths(c, "dflash per-batch anchors hd " + std::to_string(hd));
    }
  }
}

TEST_F(CudaAttentionTest, DflashSmallAndWideBlocks) {
  for (DType dt : {DType::bf16, DType::f32}) {
    {  // no GQA, blocks of 16 (a quarter of a query tile), shared anchors
      const int64_t S = 70, N = 5, Bs = 16;
      Case c;
      c.Hq = 2;
      c.Hkv = 2;
      c.Sq = N * Bs;
      c.Sk = S + N * Bs;
      c.hd = 64;
      c.dtype = dt;
      c.mask = AttentionMask::dflash_blocks(S, Bs, from_ints({1, 0, 70, 33, 64}, {N}));
      check_paths(c, "dflash Bs 16");
    }
    {  // blocks of 70 keys: wider than a key tile
      const int64_t S = 40, N = 3, Bs = 70;
      Case c;
      c.Hq = 3;
      c.Hkv = 1;
      c.Sq = N * Bs;
      c.Sk = S + N * Bs;
      c.hd = 128;
      c.dtype = dt;
      c.mask = AttentionMask::dflash_blocks(S, Bs, from_ints({0, 40, 17}, {N}));
      check_paths(c, "dflash Bs 70");
    }
  }
}

TEST_F(CudaAttentionTest, DflashLongContext) {  // context much longer than the blocks
  const int64_t S = 1000, N = 24, Bs = 24;
  Case c;
  c.Hq = 10;
  c.Hkv = 2;
  c.Sq = N * Bs;
  c.Sk = S + N * Bs;
  c.hd = 128;
  c.dtype = DType::bf16;
  std::vector<int64_t> a(N);
  for (int64_t b = 0; b < N; ++b) a[b] = (b * 389) % (S + 1);
  a[3] = -1;
  c.mask = AttentionMask::dflash_blocks(S, Bs, from_ints(a, {N}));
  check_paths(c, "dflash long context");
}

// DFlash at head dim 128 (the 128-key dk/dv CTAs and the blocks' own key CTAs, whose
// threads copy query rows through the row table's strides) with Q and dO laid out as
// [B, S, H, hd], and narrowed from a wider last dim (a 2-byte offset: no 16-byte copies);
// blocks of 24 (a group of 4: three full 32-row query tiles) and of 16 with a group of 5
// (80 rows: the last tile half empty).
TEST_F(CudaAttentionTest, DflashStridedAndNarrowedOperands) {
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const int64_t Bs : {24, 16}) {
      const int64_t S = 150, N = 6;
      Case c;
      c.B = 2;
      c.Hq = Bs == 24 ? 8 : 10;
      c.Hkv = 2;
      c.Sq = N * Bs;
      c.Sk = S + N * Bs;
      c.hd = 128;
      c.dtype = dt;
      c.mask = AttentionMask::dflash_blocks(
          S, Bs, from_ints({0, 1, 149, 150, 64, 64, 7, 0, 150, 1, 130, 2}, {2, N}));
      const std::string bs = " Bs " + std::to_string(Bs);
      c.non_contiguous = true;
      check_case(c, AttentionPath::flash, "dflash [B, S, H, hd] transposed" + bs);
      c.non_contiguous = false;
      c.misaligned = true;
      check_case(c, AttentionPath::flash, "dflash q and dO narrowed" + bs);
    }
  }
}

TEST_F(CudaAttentionTest, DenseMaskUsesRows) {
  for (DType dt : {DType::bf16, DType::f32, DType::f64}) {
    const int64_t B = 2, Sq = 33, Sk = 45;
    std::vector<double> allowed(B * Sq * Sk);
    for (size_t i = 0; i < allowed.size(); ++i) allowed[i] = ((i * 7919) % 5) < 2 ? 1.0 : 0.0;
    for (int64_t j = 0; j < Sk; ++j) allowed[5 * Sk + j] = 0.0;  // a row that sees nothing
    Case c;
    c.B = B;
    c.Hq = 4;
    c.Hkv = 2;
    c.Sq = Sq;
    c.Sk = Sk;
    c.hd = 64;
    c.dtype = dt;
    c.mask = AttentionMask::dense(from_vector(allowed, {B, 1, Sq, Sk}, {.dtype = DType::boolean}));
    const ResolvedAttentionMask m = resolve_attention_mask(
        mask_on(c.mask, cuda_device(0)), c.B, c.Hq, c.Sq, c.Sk, cuda_device(0), "test");
    EXPECT_STREQ(cuda::cuda_attention_path(dt, 64, m, 0.125), "rows");
    check_case(c, AttentionPath::automatic, "dense");
  }
}

TEST_F(CudaAttentionTest, NonContiguousAndMisalignedInputs) {
  for (DType dt : {DType::bf16, DType::f16}) {
    Case c;
    c.B = 2;
    c.Hq = 4;
    c.Hkv = 2;
    c.Sq = 70;
    c.Sk = 70;
    c.hd = 64;
    c.dtype = dt;
    c.mask = AttentionMask::causal();
    c.non_contiguous = true;
    check_case(c, AttentionPath::flash, "[B, S, H, hd] transposed");
    check_case(c, AttentionPath::rows, "[B, S, H, hd] transposed");
    c.non_contiguous = false;
    c.misaligned = true;
    check_case(c, AttentionPath::flash, "q and dO narrowed from a wider last dim");
    check_case(c, AttentionPath::cudnn, "q and dO narrowed from a wider last dim");
    // the rows path reads dO where it lies: its delta loads 2 bytes a lane there, not 16
    check_case(c, AttentionPath::rows, "q and dO narrowed from a wider last dim");
    c.misaligned = false;
    c.non_contiguous = true;
    check_case(c, AttentionPath::cudnn, "[B, S, H, hd] transposed");
  }
}

// The cudnn path forced, against the CPU: causal and none, GQA and not, lengths 1, 37,
// 300 (not multiples of cuDNN's tiles), hd 64 and 128, bf16 and f16.
TEST_F(CudaAttentionTest, CudnnForced) {
  for (DType dt : {DType::bf16, DType::f16}) {
    for (int64_t hd : {64, 128}) {
      for (int64_t S : {1, 37, 300}) {
        for (bool causal : {true, false}) {
          Case c;  // GQA 4/2 (MHA: the automatic tests above run on cudnn too)
          c.B = 2;
          c.Hq = 4;
          c.Hkv = 2;
          c.Sq = S;
          c.Sk = S;
          c.hd = hd;
          c.dtype = dt;
          if (causal) c.mask = AttentionMask::causal();
          check_case(c, AttentionPath::cudnn,
                     std::string(causal ? "causal" : "none") + " S " + std::to_string(S) + " hd " +
                         std::to_string(hd));
        }
      }
    }
  }
}

TEST_F(CudaAttentionTest, CudnnRectangularAndMixedPaths) {
  Case c;  // causal Sq < Sk (bottom-right) and no mask with Sq != Sk
  c.Hq = 8;
  c.Hkv = 2;
  c.Sq = 45;
  c.Sk = 190;
  c.hd = 128;
  c.dtype = DType::bf16;
  c.mask = AttentionMask::causal();
  check_case(c, AttentionPath::cudnn, "causal Sq < Sk");
  c.mask = AttentionMask::none();
  check_case(c, AttentionPath::cudnn, "none Sq < Sk");
  c.Sq = 190;
  c.Sk = 45;
  check_case(c, AttentionPath::cudnn, "none Sq > Sk");

  // One lse contract: a cudnn forward feeds a flash backward and the other way round.
  Generator gen(5);
  const Device d = cuda_device(0);
  const Tensor q = randn({1, 4, 96, 64}, {.dtype = DType::bf16, .device = d}, &gen);
  const Tensor k = randn({1, 2, 96, 64}, {.dtype = DType::bf16, .device = d}, &gen);
  const Tensor v = randn({1, 2, 96, 64}, {.dtype = DType::bf16, .device = d}, &gen);
  const Tensor g = randn({1, 4, 96, 64}, {.dtype = DType::bf16, .device = d}, &gen);
  const ResolvedAttentionMask m =
      resolve_attention_mask(AttentionMask::causal(), 1, 4, 96, 96, d, "t");
  cuda::CudaKernels cudnn(AttentionPath::cudnn), flash(AttentionPath::flash);
  const AttentionForward fc = cudnn.attention_forward(q, k, v, m, 0.125);
  const AttentionForward ff = flash.attention_forward(q, k, v, m, 0.125);
  expect_close(fc.lse, ff.lse, 1e-3, "lse cudnn vs flash");
  expect_close(fc.out, ff.out, 3e-2, "out cudnn vs flash");
  const AttentionGrads a =
      flash.attention_backward(g, q, k, v, fc.out, fc.lse, m, 0.125, true, true, true);
  const AttentionGrads b =
      cudnn.attention_backward(g, q, k, v, ff.out, ff.lse, m, 0.125, true, true, true);
  expect_close(a.dq, b.dq, 3e-2, "dq");
  expect_close(a.dk, b.dk, 3e-2, "dk");
  expect_close(a.dv, b.dv, 3e-2, "dv");
}

// The bench shape (causal, bf16, hd 128, GQA 40/8, 4096 tokens) runs on cudnn when
// automatic; the DFlash rule never does; forcing cudnn on it is a clear error.
TEST_F(CudaAttentionTest, AutomaticPicksCudnnForTheCausalTarget) {
  const Device d = cuda_device(0);
  const Tensor q = empty({1, 40, 4096, 128}, {.dtype = DType::bf16, .device = d});
  const Tensor k = empty({1, 8, 4096, 128}, {.dtype = DType::bf16, .device = d});
  const ResolvedAttentionMask m =
      resolve_attention_mask(AttentionMask::causal(), 1, 40, 4096, 4096, d, "t");
  EXPECT_EQ(cuda::cuda_attention_path(q, k, m, 1.0 / std::sqrt(128.0)), "cudnn");
  EXPECT_STREQ(cuda::cuda_attention_path(DType::bf16, 128, m, 0.1), "cudnn");
  // cuDNN's kernels return NaN for a negative scale: automatic goes to rows, forced refuses.
  EXPECT_STREQ(cuda::cuda_attention_path(DType::bf16, 128, m, -0.1), "rows");
  EXPECT_THROW(cuda::CudaKernels(AttentionPath::cudnn).attention_forward(q, k, k, m, -0.1), Error);

  const Tensor anchors = from_ints({4, 8}, {2});
  const AttentionMask dm = AttentionMask::dflash_blocks(8, 4, anchors);
  const ResolvedAttentionMask rd = resolve_attention_mask(dm, 1, 4, 8, 16, d, "t");
  EXPECT_STREQ(cuda::cuda_attention_path(DType::bf16, 64, rd, 0.1), "flash");
  const Tensor qs = empty({1, 4, 8, 64}, {.dtype = DType::bf16, .device = d});
  const Tensor ks = empty({1, 4, 16, 64}, {.dtype = DType::bf16, .device = d});
  try {
    cuda::CudaKernels(AttentionPath::cudnn).attention_forward(qs, ks, ks, rd, 0.1);
    FAIL() << "the DFlash rule on the cudnn path should be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudnn path takes masks none and causal"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CudaAttentionTest, OtherHeadDimsAndF64AndScale) {
  for (int64_t hd : {32, 96, 200}) {
    Case c;
    c.Hq = 4;
    c.Hkv = 2;
    c.Sq = 40;
    c.Sk = 40;
    c.hd = hd;
    c.dtype = DType::bf16;
    c.mask = AttentionMask::causal();
    check_case(c, AttentionPath::automatic, "bf16 hd " + std::to_string(hd));
  }
  {  // hd 256 forced onto rows: the vector delta's widest rows (32 lanes a row)
    Case c;
    c.Hq = 4;
    c.Hkv = 2;
    c.Sq = 33;
    c.Sk = 33;
    c.hd = 256;
    c.mask = AttentionMask::causal();
    check_case(c, AttentionPath::rows, "bf16 hd 256 on rows");
  }
  Case c;
  c.Hq = 2;
  c.Hkv = 1;
  c.Sq = 30;
  c.Sk = 50;
  c.hd = 64;
  c.dtype = DType::f64;
  c.mask = AttentionMask::causal();
  check_case(c, AttentionPath::automatic, "f64");
  c.dtype = DType::bf16;
  c.scale = -0.2;  // a negative scale goes to the rows path
  check_case(c, AttentionPath::automatic, "negative scale");
}

TEST_F(CudaAttentionTest, OnlySomeGradsAndUnsupported) {
  Generator gen(3);
  const Device d = cuda_device(0);
  const Tensor q = randn({1, 4, 64, 128}, {.dtype = DType::bf16, .device = d}, &gen);
  const Tensor k = randn({1, 2, 64, 128}, {.dtype = DType::bf16, .device = d}, &gen);
  const Tensor v = randn({1, 2, 64, 128}, {.dtype = DType::bf16, .device = d}, &gen);
  const ResolvedAttentionMask m =
      resolve_attention_mask(AttentionMask::causal(), 1, 4, 64, 64, d, "t");
  // flash is deterministic: equal bits; cuDNN may accumulate dq/dk in another order.
  for (AttentionPath path : {AttentionPath::flash, AttentionPath::cudnn}) {
    SCOPED_TRACE(path == AttentionPath::flash ? "flash" : "cudnn");
    const double tol = path == AttentionPath::flash ? 0.0 : 1e-2;
    cuda::CudaKernels gpu(path);
    const AttentionForward f = gpu.attention_forward(q, k, v, m, 0.1);
    const AttentionGrads all =
        gpu.attention_backward(f.out, q, k, v, f.out, f.lse, m, 0.1, true, true, true);
    const AttentionGrads only_k =
        gpu.attention_backward(f.out, q, k, v, f.out, f.lse, m, 0.1, false, true, false);
    EXPECT_FALSE(only_k.dq.defined());
    EXPECT_FALSE(only_k.dv.defined());
    expect_close(only_k.dk, all.dk, tol, "dk alone");
    const AttentionGrads only_q =
        gpu.attention_backward(f.out, q, k, v, f.out, f.lse, m, 0.1, true, false, false);
    expect_close(only_q.dq, all.dq, tol, "dq alone");
  }

  const Tensor big = randn({1, 1, 4, 264}, {.dtype = DType::bf16, .device = d}, &gen);
  const ResolvedAttentionMask mb =
      resolve_attention_mask(AttentionMask::none(), 1, 1, 4, 4, d, "t");
  try {
    cuda::CudaKernels().attention_forward(big, big, big, mb, 0.1);
    FAIL() << "head_dim 264 should be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not supported on cuda"), std::string::npos) << e.what();
  }
  const Tensor q32 = raw::to_dtype(q, DType::f32), k32 = raw::to_dtype(k, DType::f32);
  EXPECT_THROW(cuda::CudaKernels(AttentionPath::flash).attention_forward(q32, k32, k32, m, 0.1),
               Error);
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
