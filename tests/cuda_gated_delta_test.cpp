// Why this file exists: the CUDA gated_delta_rule and causal_conv1d entries
// (cuda/cuda_gated_delta.cpp, kernels in cuda/gated_delta_kernels.cu) against the CPU
// table's (cpu/gated_delta.cpp, the plain recurrence): both CUDA algorithms -- chunked
// (prefill) and recurrent (decoding) -- on the same inputs, f32 and bf16, T across the
// chunk edges (1, 3, 63, 64, 65, 200, 1000), more value heads than key heads, a nonzero
// initial state, and the final state written in place compared too. causal_conv1d with
// and without history, with and without SiLU; and the ops (ops/gated_delta.cpp) on cuda:0
// against the same ops on the CPU. Tolerances are relative to the largest
// reference value (at least 1): out f32 and f64 1e-4, f16 4e-3, bf16 1.5e-2 (one rounding
// of out on each side); the f32 state 2e-4 (the chunked algorithm sums in another order), 1e-3 for
// 16-bit inputs. Compiled only in CUDA builds; skipped without a GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "cuda/cuda_kernels.h"
#include "cuda/device_info.h"
#include "cuda/gated_delta_kernels.h"
#include "ops/gated_delta.h"
#include "ops/kernels.h"
#include "tests/cuda_attention_test_util.h"

namespace cg {
namespace {

class CudaGatedDelta : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) {
      GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    }
  }
};

using testing::expect_close;  // max |gpu - cpu| <= tol * max(1, max |cpu|), no NaN

struct Case {
  int64_t B = 2, T = 65, Hk = 2, Hv = 4, dk = 64, dv = 48;
  double g_low = -0.5;  // g uniform in [g_low, 0): log decay per token
  bool l2norm = true;
};

// The inputs on the CPU; q, k, v in dtype, g and beta f32, state f32 [B, Hv, dk, dv].
GatedDeltaArgs make_inputs(const Case& c, DType dtype, uint64_t seed) {
  Generator gen(seed);
  GatedDeltaArgs a;
  // Without the l2norm, keep |k| near 1 so that the recurrence stays bounded.
  const double qk_std = c.l2norm ? 1.0 : 1.0 / std::sqrt(static_cast<double>(c.dk));
  a.q = randn({c.B, c.T, c.Hk, c.dk}, {.dtype = dtype}, &gen, 0.0, qk_std);
  a.k = randn({c.B, c.T, c.Hk, c.dk}, {.dtype = dtype}, &gen, 0.0, qk_std);
  a.v = randn({c.B, c.T, c.Hv, c.dv}, {.dtype = dtype}, &gen);
  a.g = rand({c.B, c.T, c.Hv}, {.dtype = DType::f32}, &gen, c.g_low, 0.0);
  a.beta = rand({c.B, c.T, c.Hv}, {.dtype = DType::f32}, &gen, 0.0, 1.0);
  a.state = randn({c.B, c.Hv, c.dk, c.dv}, {.dtype = DType::f32}, &gen, 0.0, 0.5);
  a.l2norm_qk = c.l2norm;
  a.scale = 1.0 / std::sqrt(static_cast<double>(c.dk));
  return a;
}

GatedDeltaArgs on_device(const GatedDeltaArgs& a, Device d) {
  GatedDeltaArgs r = a;
  r.q = raw::to_device(a.q, d);
  r.k = raw::to_device(a.k, d);
  r.v = raw::to_device(a.v, d);
  r.g = raw::to_device(a.g, d);
  r.beta = raw::to_device(a.beta, d);
  r.state = raw::clone(raw::to_device(a.state, d));  // each run updates its own copy
  return r;
}

void check_case(const Case& c, DType dtype) {
  const std::string name = std::string(dtype_name(dtype)) + " B" + std::to_string(c.B) + " T" +
                           std::to_string(c.T) + " Hk" + std::to_string(c.Hk) + " Hv" +
                           std::to_string(c.Hv) + " dk" + std::to_string(c.dk) + " dv" +
                           std::to_string(c.dv) + (c.l2norm ? "" : " no-l2norm");
  SCOPED_TRACE(name);
  const GatedDeltaArgs host = make_inputs(c, dtype, 1234 + static_cast<uint64_t>(c.T));
  DeviceKernels* cpu = find_kernels(DeviceType::cpu);
  ASSERT_NE(cpu, nullptr);
  GatedDeltaArgs ref_args = host;
  ref_args.state = raw::clone(host.state);
  const Tensor ref_out = cpu->gated_delta_rule(ref_args);
  const bool wide = dtype == DType::f32 || dtype == DType::f64;
  const double out_tol = wide ? 1e-4 : (dtype == DType::f16 ? 4e-3 : 1.5e-2);
  const double state_tol = wide ? 2e-4 : 1e-3;
  for (auto algorithm : {cuda::GatedDeltaAlgorithm::chunked, cuda::GatedDeltaAlgorithm::recurrent,
                         cuda::GatedDeltaAlgorithm::automatic}) {
    const char* which = algorithm == cuda::GatedDeltaAlgorithm::chunked     ? "chunked"
                        : algorithm == cuda::GatedDeltaAlgorithm::recurrent ? "recurrent"
                                                                            : "automatic";
    SCOPED_TRACE(which);
    const GatedDeltaArgs dev = on_device(host, cuda_device(0));
    const Tensor out = cuda::run_gated_delta_rule(dev, algorithm);
    EXPECT_EQ(out.dtype(), dtype);
    EXPECT_EQ(out.device(), cuda_device(0));
    expect_close(out, ref_out, out_tol, "out");
    expect_close(dev.state, ref_args.state, state_tol, "final state");
  }
}

TEST_F(CudaGatedDelta, ChunkEdgesBothAlgorithmsF32AndBf16) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int64_t T : {1, 3, 63, 64, 65, 200, 1000}) {
      Case c;
      c.T = T;
      check_case(c, dt);
    }
  }
}

TEST_F(CudaGatedDelta, F16AndF64Inputs) {  // f64 computes in fp32 on the GPU, double on the CPU
  for (DType dt : {DType::f16, DType::f64}) {
    for (int64_t T : {5, 65}) {
      Case c;
      c.T = T;
      check_case(c, dt);
    }
  }
}

TEST_F(CudaGatedDelta, Qwen35HeadDims) {  // dk = dv = 128, 3 value heads per key head
  for (DType dt : {DType::f32, DType::bf16}) {
    Case c;
    c.B = 1;
    c.Hk = 1;
    c.Hv = 3;
    c.dk = 128;
    c.dv = 128;
    c.T = 200;
    check_case(c, dt);
  }
}

TEST_F(CudaGatedDelta, SlowDecayLongSequence) {  // the state carries over many chunks
  Case c;
  c.B = 1;
  c.Hk = 1;
  c.Hv = 2;
  c.dk = 128;
  c.dv = 128;
  c.T = 1000;
  c.g_low = -0.02;
  check_case(c, DType::f32);
}

TEST_F(CudaGatedDelta, OddDimsAndNoL2Norm) {
  for (bool l2 : {true, false}) {
    Case c;
    c.B = 1;
    c.Hk = 3;
    c.Hv = 6;
    c.dk = 20;
    c.dv = 70;  // three state slices, the last 6 columns wide
    c.T = 130;
    c.l2norm = l2;
    check_case(c, DType::f32);
  }
}

TEST_F(CudaGatedDelta, StateCarriesAcrossCalls) {  // 65 + 7 tokens equal 72 in one call
  for (auto algorithm :
       {cuda::GatedDeltaAlgorithm::chunked, cuda::GatedDeltaAlgorithm::recurrent}) {
    Case c;
    c.T = 72;
    const GatedDeltaArgs whole = on_device(make_inputs(c, DType::f32, 77), cuda_device(0));
    GatedDeltaArgs one = whole;
    one.state = raw::clone(whole.state);
    const Tensor full = cuda::run_gated_delta_rule(one, algorithm);
    GatedDeltaArgs a = whole, b = whole;
    a.state = raw::clone(whole.state);
    auto part = [](const Tensor& t, int64_t start, int64_t n) {
      return raw::contiguous(raw::narrow(t, 1, start, n));
    };
    for (Tensor GatedDeltaArgs::*field :
         {&GatedDeltaArgs::q, &GatedDeltaArgs::k, &GatedDeltaArgs::v, &GatedDeltaArgs::g,
          &GatedDeltaArgs::beta}) {
      a.*field = part(whole.*field, 0, 65);
      b.*field = part(whole.*field, 65, 7);
    }
    const Tensor out_a = cuda::run_gated_delta_rule(a, algorithm);
    b.state = a.state;
    const Tensor out_b = cuda::run_gated_delta_rule(b, algorithm);
    expect_close(out_a, part(full, 0, 65), 1e-5, "first 65 tokens");
    expect_close(out_b, part(full, 65, 7), 1e-4, "last 7 tokens");
    expect_close(b.state, one.state, 1e-4, "final state");
  }
}

void check_conv(int64_t B, int64_t T, int64_t C, int64_t K, bool history, bool silu, DType dt) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " T" + std::to_string(T) + " C" + std::to_string(C) +
               " K" + std::to_string(K) + (history ? " history" : "") + (silu ? " silu" : ""));
  Generator gen(99 + static_cast<uint64_t>(T));
  const Tensor x = randn({B, T, C}, {.dtype = dt}, &gen);
  const Tensor w = randn({C, K}, {.dtype = dt}, &gen, 0.0, 0.5);
  const Tensor h = history ? randn({B, K - 1, C}, {.dtype = dt}, &gen) : Tensor();
  DeviceKernels* cpu = find_kernels(DeviceType::cpu);
  ASSERT_NE(cpu, nullptr);
  const Tensor want = cpu->causal_conv1d(x, w, h, silu);
  cuda::CudaKernels gpu;
  const Device d = cuda_device(0);
  const Tensor got = gpu.causal_conv1d(raw::to_device(x, d), raw::to_device(w, d),
                                       history ? raw::to_device(h, d) : Tensor(), silu);
  EXPECT_EQ(got.dtype(), dt);
  expect_close(got, want, dt == DType::f32 ? 1e-5 : 1e-2, "causal_conv1d");
}

TEST_F(CudaGatedDelta, CausalConv1d) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int64_t T : {1, 3, 37}) {
      for (bool history : {false, true}) { check_conv(2, T, 96, 4, history, true, dt); }
    }
    check_conv(1, 9, 33, 4, true, false, dt);
    check_conv(3, 5, 8, 2, true, true, dt);
  }
}

// The ops (ops/gated_delta.cpp) on cuda:0 against the same ops on the CPU: the op layer's
// conversions (g, beta in bf16 to f32; HF's [C, 1, K] conv weight) reach the CUDA entries,
// and the caller's state is left as it was.
TEST_F(CudaGatedDelta, OpsOnTheGpuMatchTheCpu) {
  Generator gen(5);
  const Device d = cuda_device(0);
  const int64_t B = 1, T = 70, Hk = 2, Hv = 4, dk = 32, dv = 32;
  const Tensor q = randn({B, T, Hk, dk}, {.dtype = DType::bf16}, &gen);
  const Tensor k = randn({B, T, Hk, dk}, {.dtype = DType::bf16}, &gen);
  const Tensor v = randn({B, T, Hv, dv}, {.dtype = DType::bf16}, &gen);
  const Tensor g = rand({B, T, Hv}, {.dtype = DType::bf16}, &gen, -1.0, 0.0);
  const Tensor beta = rand({B, T, Hv}, {.dtype = DType::bf16}, &gen, 0.0, 1.0);
  const Tensor state = randn({B, Hv, dk, dv}, {.dtype = DType::f32}, &gen);
  const Tensor state_gpu = raw::to_device(state, d);
  const std::vector<double> state_before = state_gpu.to_vector();
  const double scale = 1.0 / std::sqrt(static_cast<double>(dk));
  const GatedDeltaResult want =
      gated_delta_rule(q, k, v, g, beta, {.state = state, .scale = scale});
  const GatedDeltaResult got = gated_delta_rule(
      raw::to_device(q, d), raw::to_device(k, d), raw::to_device(v, d), raw::to_device(g, d),
      raw::to_device(beta, d), {.state = state_gpu, .scale = scale});
  expect_close(got.out, want.out, 1.5e-2, "op out");
  expect_close(got.final_state, want.final_state, 1e-3, "op final state");
  EXPECT_EQ(state_gpu.to_vector(), state_before) << "the caller's state changed";

  const Tensor x = randn({B, T, 24}, {.dtype = DType::bf16}, &gen);
  const Tensor w = randn({24, 1, 4}, {.dtype = DType::bf16}, &gen, 0.0, 0.5);
  const Tensor h = randn({B, 3, 24}, {.dtype = DType::bf16}, &gen);
  expect_close(causal_conv1d(raw::to_device(x, d), raw::to_device(w, d), raw::to_device(h, d)),
               causal_conv1d(x, w, h), 1e-2, "op causal_conv1d");
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
