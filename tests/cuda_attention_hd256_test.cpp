// Why this file exists: Qwen3.5's full-attention layers have head_dim 256 (24 q / 4 kv heads
// in the 27B model), and cuda/cuda_attention.cpp's cudnn rule takes 256 since issue 21 (the
// flash kernels are built for 64 and 128; without cuDNN these layers would run the rows
// kernel). This checks cuDNN's fused SDPA at 256 against the CPU reference
// (cpu/attention.cpp) for the masks a target runs: causal over the prompt (the prefill,
// Sq = Sk) and causal bottom-right for a cached verify block (Sq < Sk), plus no mask; bf16
// and f16; GQA 24/4 and 8/2; lengths that are not multiples of cuDNN's tiles.
// Forward: out and lse, with the cudnn path forced, and automatic must pick cudnn.
// Backward: the same rule sends head_dim 256 to cuDNN's backward when cuDNN finalizes a plan
// for it (a frozen target never runs it; a drafter with head_dim 256 would), so where cuDNN
// supports the shape its backward is checked forced; where it does not, the test says so
// and checks that automatic falls back (rows) and still matches the CPU.
// Compiled only in CUDA builds; skipped without a GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>

#include "cuda/cuda_attention.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cudnn_sdpa.h"
#include "ops/attention_mask.h"
#include "ops/kernels.h"
#include "tests/cuda_attention_test_util.h"

namespace cg {
namespace {

using cuda::AttentionPath;
using testing::Case;
using testing::CudaAttentionTest;
using testing::expect_close;
using testing::make_input;
using testing::same_view_on_gpu;
using testing::tolerance;

// The problem cuda_attention.cpp hands cuDNN for contiguous [B, H, S, hd] operands (the
// support answer depends on shape, dtype and strides, not on the data).
cuda::SdpaProblem contiguous_problem(const Case& c, bool causal) {
  auto operand = [&](int64_t H, int64_t S) {
    cuda::SdpaOperand o;
    o.ss = c.hd;
    o.sh = S * c.hd;
    o.sb = H * S * c.hd;
    return o;
  };
  cuda::SdpaProblem p;
  p.dtype = c.dtype;
  p.B = c.B;
  p.Hq = c.Hq;
  p.Hkv = c.Hkv;
  p.Sq = c.Sq;
  p.Sk = c.Sk;
  p.hd = c.hd;
  p.causal = causal;
  p.q = operand(c.Hq, c.Sq);
  p.k = p.v = operand(c.Hkv, c.Sk);
  p.o = p.dout = operand(c.Hq, c.Sq);
  return p;
}

std::string describe(const Case& c, const char* mask) {
  return std::string(dtype_name(c.dtype)) + " " + mask + " Hq " + std::to_string(c.Hq) + " Hkv " +
         std::to_string(c.Hkv) + " Sq " + std::to_string(c.Sq) + " Sk " + std::to_string(c.Sk);
}

// Forward forced on cudnn and backward on cudnn where cuDNN supports it, else automatic.
// Returns whether the backward ran on cuDNN.
bool check_hd256(const Case& c, const char* mask_name) {
  const std::string name = describe(c, mask_name);
  SCOPED_TRACE(name);
  const Tensor q = make_input(c, c.Hq, c.Sq, 21, false), k = make_input(c, c.Hkv, c.Sk, 22, false),
               v = make_input(c, c.Hkv, c.Sk, 23, false), g = make_input(c, c.Hq, c.Sq, 24, false);
  const Tensor qg = same_view_on_gpu(q), kg = same_view_on_gpu(k), vg = same_view_on_gpu(v),
               gg = same_view_on_gpu(g);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.hd));
  const ResolvedAttentionMask mc =
      resolve_attention_mask(c.mask, c.B, c.Hq, c.Sq, c.Sk, kCPU, "test");
  const ResolvedAttentionMask mg =
      resolve_attention_mask(c.mask, c.B, c.Hq, c.Sq, c.Sk, cuda_device(0), "test");
  EXPECT_EQ(cuda::cuda_attention_path(qg, kg, mg, scale), "cudnn")
      << "automatic should take cuDNN at head_dim 256";
  DeviceKernels* cpu = find_kernels(DeviceType::cpu);
  EXPECT_NE(cpu, nullptr);
  if (cpu == nullptr) return false;
  const double tol = tolerance(c.dtype);

  const AttentionForward ref = cpu->attention_forward(q, k, v, mc, scale);
  cuda::CudaKernels cudnn(AttentionPath::cudnn);
  const AttentionForward got = cudnn.attention_forward(qg, kg, vg, mg, scale);
  expect_close(got.out, ref.out, tol, "out (cudnn)");
  expect_close(got.lse, ref.lse, tol, "lse (cudnn)");

  const cuda::SdpaProblem p = contiguous_problem(c, c.mask.kind() == AttentionMask::Kind::causal);
  const std::string why_not = cuda::cudnn_sdpa_backward_support(0, p);
  const bool on_cudnn = why_not.empty();
  if (!on_cudnn) {
    std::cout << "[ hd256 ] " << name << ": cuDNN backward not supported (" << why_not
              << "); automatic backward checked instead\n";
  }
  cuda::CudaKernels automatic(AttentionPath::automatic);
  cuda::CudaKernels& backward = on_cudnn ? cudnn : automatic;
  const AttentionGrads rg =
      cpu->attention_backward(g, q, k, v, ref.out, ref.lse, mc, scale, true, true, true);
  const AttentionGrads gr =
      backward.attention_backward(gg, qg, kg, vg, got.out, got.lse, mg, scale, true, true, true);
  expect_close(gr.dq, rg.dq, tol, on_cudnn ? "dq (cudnn)" : "dq (automatic)");
  expect_close(gr.dk, rg.dk, tol, on_cudnn ? "dk (cudnn)" : "dk (automatic)");
  expect_close(gr.dv, rg.dv, tol, on_cudnn ? "dv (cudnn)" : "dv (automatic)");
  return on_cudnn;
}

TEST_F(CudaAttentionTest, HeadDim256OnCudnnMatchesTheCpu) {
  int backward_on_cudnn = 0, cases = 0;
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const auto& [hq, hkv] : {std::pair<int64_t, int64_t>{24, 4}, {8, 2}}) {
      Case c;
      c.B = 1;
      c.Hq = hq;
      c.Hkv = hkv;
      c.hd = 256;
      c.dtype = dt;
      // The prefill: causal over the prompt, at lengths off cuDNN's tiles.
      for (int64_t T : {37, 130}) {
        c.Sq = c.Sk = T;
        c.mask = AttentionMask::causal();
        backward_on_cudnn += check_hd256(c, "causal prefill");
        ++cases;
      }
      // A cached verify block: 5 new queries after 70 cached keys (bottom-right causal).
      c.Sq = 5;
      c.Sk = 75;
      backward_on_cudnn += check_hd256(c, "causal verify");
      ++cases;
      // No mask, two sequences.
      c.B = 2;
      c.Sq = c.Sk = 37;
      c.mask = AttentionMask::none();
      backward_on_cudnn += check_hd256(c, "none");
      ++cases;
    }
  }
  std::cout << "[ hd256 ] cuDNN " << cuda::cudnn_runtime_version() << ": backward ran on cuDNN in "
            << backward_on_cudnn << " of " << cases << " cases\n";
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
