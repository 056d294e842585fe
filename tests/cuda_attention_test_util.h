// Why this file exists: the harness the CUDA attention tests share (cuda_attention_test.cpp,
// cuda_attention_sliding_test.cpp, cuda_attention_dq_wgmma_test.cpp,
// cuda_attention_wide48_test.cpp): a fixture that skips without a GPU, the per-dtype
// tolerances, a scoped environment variable (ScopedEnv), a DFlash case's shapes
// (dflash_case, dflash_name, EdgeAnchors), check_case / check_paths, which run one
// attention problem forward and backward on the CPU (the reference, cpu/attention.cpp) and
// on a CUDA path and compare out, lse, dq, dk and dv, and FlashBackwardRig, which runs one
// problem's flash backward again on the same inputs under another kernel switch.
// Tolerances are relative to the largest reference value: bf16 3e-2 (P and dS are rounded
// to bf16 as mma operands), f16 6e-3, f32 2e-4, f64 1e-9. Include it only inside
// `#if defined(CHUNKGRAD_WITH_CUDA)`.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "cuda/cuda_attention.h"
#include "cuda/cuda_kernels.h"
#include "cuda/device_info.h"
#include "ops/attention_mask.h"
#include "ops/kernels.h"

namespace cg::testing {

using cuda::AttentionPath;

class CudaAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) {
      GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    }
  }
};

inline double tolerance(DType dt) {
  switch (dt) {
    case DType::bf16: return 3e-2;
    case DType::f16: return 6e-3;
    case DType::f32: return 2e-4;
    default: return 1e-9;
  }
}

// Max |gpu - cpu| <= tol * max(1, max |cpu|); -inf must match -inf (lse of empty rows).
inline void expect_close(const Tensor& gpu, const Tensor& cpu, double tol,
                         const std::string& what) {
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
  bool misaligned = false;      // q, grad_out as narrows of a wider last dim (not 8-aligned)
};

// Sets an environment variable for a scope and then puts back what was there (the
// flash kernels' switches that tests set are read at every launch).
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// A DFlash case (either rule, as the mask says): B batch rows, heads hq / hkv of hd, N
// blocks of Bs queries over S context keys (keys: the context, then every block's own).
inline Case dflash_case(DType dt, int64_t hd, int64_t hq, int64_t hkv, int64_t B, int64_t S,
                        int64_t N, int64_t Bs, const AttentionMask& mask) {
  Case c;
  c.B = B;
  c.Hq = hq;
  c.Hkv = hkv;
  c.Sq = N * Bs;
  c.Sk = S + N * Bs;
  c.hd = hd;
  c.dtype = dt;
  c.mask = mask;
  return c;
}

// [B, H, S, hd] random values in dtype, on the CPU, laid out as the case asks.
inline Tensor make_input(const Case& c, int64_t H, int64_t S, uint64_t seed, bool may_misalign) {
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
inline Tensor same_view_on_gpu(const Tensor& t) {
  const int64_t extent = static_cast<int64_t>(t.storage()->nbytes() / element_size(t.dtype()));
  Tensor flat_cpu = raw::make_tensor(t.storage(), {extent}, {1}, 0, t.dtype());
  Tensor flat_gpu = raw::to_device(flat_cpu, cuda_device(0));
  return raw::as_strided(flat_gpu, t.shape(), t.strides(), t.offset());
}

inline AttentionMask mask_on(const AttentionMask& m, Device d) {
  if (m.kind() != AttentionMask::Kind::dense) return m;
  return AttentionMask::dense(raw::to_device(m.allowed(), d));
}

// Runs the case on CPU (reference) and GPU (path) and compares everything.
inline void check_case(const Case& c, AttentionPath path, const std::string& name) {
  SCOPED_TRACE(name + " [" + dtype_name(c.dtype) + ", path " +
               (path == AttentionPath::flash   ? "flash"
                : path == AttentionPath::rows  ? "rows"
                : path == AttentionPath::cudnn ? "cudnn"
                                               : "auto") +
               "]");
  const Tensor q = make_input(c, c.Hq, c.Sq, 11, true), k = make_input(c, c.Hkv, c.Sk, 12, false),
               v = make_input(c, c.Hkv, c.Sk, 13, false), g = make_input(c, c.Hq, c.Sq, 14, true);
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

// One case's inputs on the GPU and its flash forward, kept so that the backward can run
// again on exactly the same inputs under another environment switch (the kernels read
// theirs at every launch): two kernels compared tightly, where only their sums' order
// differs, not through the CPU comparison's tolerance.
struct FlashBackwardRig {
  explicit FlashBackwardRig(const Case& c)
      : q(same_view_on_gpu(make_input(c, c.Hq, c.Sq, 11, true))),
        k(same_view_on_gpu(make_input(c, c.Hkv, c.Sk, 12, false))),
        v(same_view_on_gpu(make_input(c, c.Hkv, c.Sk, 13, false))),
        g(same_view_on_gpu(make_input(c, c.Hq, c.Sq, 14, true))),
        m(resolve_attention_mask(mask_on(c.mask, cuda_device(0)), c.B, c.Hq, c.Sq, c.Sk,
                                 cuda_device(0), "test")),
        scale(c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.hd))),
        gpu(AttentionPath::flash),
        f(gpu.attention_forward(q, k, v, m, scale)) {}
  AttentionGrads backward() {
    return gpu.attention_backward(g, q, k, v, f.out, f.lse, m, scale, true, true, true);
  }
  Tensor q, k, v, g;
  ResolvedAttentionMask m;
  double scale;
  cuda::CudaKernels gpu;
  AttentionForward f;
};

// "heads 32/8 S 300 Bs 24 W 66": a DFlash case's name in a trace.
inline std::string dflash_name(int64_t hq, int64_t hkv, int64_t S, int64_t Bs, int64_t W) {
  return "heads " + std::to_string(hq) + "/" + std::to_string(hkv) + " S " + std::to_string(S) +
         " Bs " + std::to_string(Bs) + " W " + std::to_string(W);
}

// Two batch rows of 8 anchors over S = 300 context keys (three 128-key tiles, the last one
// partial): at 0, 1, the end, repeated, at tile edges, and padded (a negative anchor, and
// the last block by flag).
struct EdgeAnchors {
  static constexpr int64_t S = 300, N = 8;
  Tensor anchors = from_ints({0, 1, 127, 128, 128, 255, 300, -1,  //
                              300, 0, 0, 129, 200, 256, 299, 64},
                             {2, N});
  Tensor padded = from_vector({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, {2, N},
                              {.dtype = DType::boolean});
};

// The automatic path, and flash and rows too where the automatic one is cudnn or flash.
inline void check_paths(const Case& c, const std::string& name) {
  const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.hd));
  const ResolvedAttentionMask m = resolve_attention_mask(mask_on(c.mask, cuda_device(0)), c.B, c.Hq,
                                                         c.Sq, c.Sk, cuda_device(0), "test");
  const std::string rule = cuda::cuda_attention_path(c.dtype, c.hd, m, scale);
  check_case(c, AttentionPath::automatic, name);
  if (rule == "cudnn") check_case(c, AttentionPath::flash, name);
  if (rule == "flash" || rule == "cudnn") check_case(c, AttentionPath::rows, name);
}

inline const DType kDTypes[] = {DType::bf16, DType::f16, DType::f32};

}  // namespace cg::testing
