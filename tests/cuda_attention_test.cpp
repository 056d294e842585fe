// Why this file exists: the CUDA attention entries (cuda/cuda_attention.h) against the CPU
// reference (the CPU table's attention entries, cpu/attention.cpp): forward (out,
// lse) and backward (dq, dk, dv) under masks none / causal / dflash_blocks / dense, GQA,
// the DFlash rule with anchors at the sequence start (0, 1), padded blocks, context
// longer than the blocks and blocks wider than a tile, lengths that are not multiples of
// the 64-row tiles, non-contiguous and misaligned inputs, each dtype, and every path
// (cudnn, flash, rows) where it applies; the cudnn path (cuDNN's fused SDPA) also forced
// at lengths 1 / 37 / 300, hd 64 / 128, GQA, bf16 and f16, with one lse contract across
// paths, and automatic's pick for the causal target. Tolerances are per dtype, relative
// to the largest reference value: bf16 3e-2 (P and dS are rounded to bf16 as mma operands), f16 6e-3,
// f32 2e-4, f64 1e-9. Compiled only in CUDA builds; skipped without a GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "cuda/cuda_attention.h"
#include "cuda/cuda_kernels.h"
#include "cuda/device_info.h"
#include "ops/attention_mask.h"
#include "ops/kernels.h"

namespace cg {
namespace {

using cuda::AttentionPath;

class CudaAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) {
      GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    }
  }
};

double tolerance(DType dt) {
  switch (dt) {
    case DType::bf16: return 3e-2;
    case DType::f16: return 6e-3;
    case DType::f32: return 2e-4;
    default: return 1e-9;
  }
}

// Max |gpu - cpu| <= tol * max(1, max |cpu|); -inf must match -inf (lse of empty rows).
void expect_close(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what) {
  ASSERT_TRUE(gpu.defined()) << what;
  ASSERT_TRUE(cpu.defined()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const std::vector<double> g = gpu.to_vector(), c = cpu.to_vector();
  double ref = 1.0;
  for (double x : c) {
    if (std::isfinite(x)) ref = std::max(ref, std::abs(x));
  }
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isinf(c[i]) || std::isinf(g[i])) {
      ASSERT_EQ(g[i], c[i]) << what << " at " << i;
      continue;
    }
    ASSERT_FALSE(std::isnan(g[i])) << what << " is NaN at " << i;
    const double d = std::abs(g[i] - c[i]);
    if (d > worst) {
      worst = d;
      at = i;
    }
  }
  EXPECT_LE(worst, tol * ref) << what << ": worst |gpu - cpu| " << worst << " at element " << at
                              << " (gpu " << g[at] << ", cpu " << c[at] << "), max |cpu| " << ref;
}

struct Case {
  int64_t B = 1, Hq = 2, Hkv = 2, Sq = 16, Sk = 16, hd = 64;
  DType dtype = DType::bf16;
  // Mask on the CPU; a dense mask is moved to the GPU for the GPU call.
  AttentionMask mask = AttentionMask::none();
  double scale = 0;             // 0: 1 / sqrt(hd)
  bool non_contiguous = false;  // q, k, v, grad_out as [B, S, H, hd] transposed
  bool misaligned = false;      // q as a narrow of a wider last dim (strides not 8-aligned)
};

// [B, H, S, hd] random values in dtype, on the CPU, laid out as the case asks.
Tensor make_input(const Case& c, int64_t H, int64_t S, uint64_t seed, bool may_misalign) {
  Generator gen(seed);
  if (c.non_contiguous) {
    Tensor t = randn({c.B, S, H, c.hd}, {.dtype = c.dtype}, &gen);
    return raw::transpose(t, 1, 2);
  }
  if (c.misaligned && may_misalign) {
    Tensor t = randn({c.B, H, S, c.hd + 3}, {.dtype = c.dtype}, &gen);
    return raw::narrow(t, 3, 1, c.hd);
  }
  return randn({c.B, H, S, c.hd}, {.dtype = c.dtype}, &gen);
}

// The same strided view on the GPU: a device copy of the backing buffer, viewed alike.
Tensor same_view_on_gpu(const Tensor& t) {
  const int64_t extent = static_cast<int64_t>(t.storage()->nbytes() / element_size(t.dtype()));
  Tensor flat_cpu = raw::make_tensor(t.storage(), {extent}, {1}, 0, t.dtype());
  Tensor flat_gpu = raw::to_device(flat_cpu, cuda_device(0));
  return raw::as_strided(flat_gpu, t.shape(), t.strides(), t.offset());
}

AttentionMask mask_on(const AttentionMask& m, Device d) {
  if (m.kind() != AttentionMask::Kind::dense) return m;
  return AttentionMask::dense(raw::to_device(m.allowed(), d));
}

// Runs the case on CPU (reference) and GPU (path) and compares everything.
void check_case(const Case& c, AttentionPath path, const std::string& name) {
  SCOPED_TRACE(name + " [" + dtype_name(c.dtype) + ", path " +
               (path == AttentionPath::flash   ? "flash"
                : path == AttentionPath::rows  ? "rows"
                : path == AttentionPath::cudnn ? "cudnn"
                                               : "auto") +
               "]");
  const Tensor q = make_input(c, c.Hq, c.Sq, 11, true), k = make_input(c, c.Hkv, c.Sk, 12, false),
               v = make_input(c, c.Hkv, c.Sk, 13, false), g = make_input(c, c.Hq, c.Sq, 14, false);
  const Tensor qg = same_view_on_gpu(q), kg = same_view_on_gpu(k), vg = same_view_on_gpu(v),
               gg = same_view_on_gpu(g);
  ASSERT_EQ(qg.strides(), q.strides());
  const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.hd));
  const ResolvedAttentionMask mc =
      resolve_attention_mask(c.mask, c.B, c.Hq, c.Sq, c.Sk, kCPU, "test");
  const ResolvedAttentionMask mg = resolve_attention_mask(mask_on(c.mask, cuda_device(0)), c.B,
                                                          c.Hq, c.Sq, c.Sk, cuda_device(0), "test");
  DeviceKernels* cpu = find_kernels(DeviceType::cpu);
  ASSERT_NE(cpu, nullptr);

  const AttentionForward ref = cpu->attention_forward(q, k, v, mc, scale);
  cuda::CudaKernels gpu(path);  // the CUDA table with this path forced
  const AttentionForward got = gpu.attention_forward(qg, kg, vg, mg, scale);
  const double tol = tolerance(c.dtype);
  EXPECT_EQ(got.out.dtype(), c.dtype);
  EXPECT_EQ(got.lse.dtype(), compute_dtype_of(c.dtype));
  expect_close(got.out, ref.out, tol, "out");
  expect_close(got.lse, ref.lse, tol, "lse");

  const AttentionGrads rg =
      cpu->attention_backward(g, q, k, v, ref.out, ref.lse, mc, scale, true, true, true);
  const AttentionGrads gg2 =
      gpu.attention_backward(gg, qg, kg, vg, got.out, got.lse, mg, scale, true, true, true);
  expect_close(gg2.dq, rg.dq, tol, "dq");
  expect_close(gg2.dk, rg.dk, tol, "dk");
  expect_close(gg2.dv, rg.dv, tol, "dv");
}

// The automatic path, and flash and rows too where the automatic one is cudnn or flash.
void check_paths(const Case& c, const std::string& name) {
  const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.hd));
  const ResolvedAttentionMask m = resolve_attention_mask(mask_on(c.mask, cuda_device(0)), c.B, c.Hq,
                                                         c.Sq, c.Sk, cuda_device(0), "test");
  const std::string rule = cuda::cuda_attention_path(c.dtype, c.hd, m, scale);
  check_case(c, AttentionPath::automatic, name);
  if (rule == "cudnn") check_case(c, AttentionPath::flash, name);
  if (rule == "flash" || rule == "cudnn") check_case(c, AttentionPath::rows, name);
}

const DType kDTypes[] = {DType::bf16, DType::f16, DType::f32};

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
    c.non_contiguous = false;
    c.misaligned = true;
    check_case(c, AttentionPath::flash, "q narrowed from a wider last dim");
    check_case(c, AttentionPath::cudnn, "q narrowed from a wider last dim");
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
