// Why this file exists: the launchers of the CUDA gated delta rule (chunked for prefill,
// recurrent for decoding a few tokens) and causal conv1d kernels behind the kernel table's
// entries of those names (ops/kernels.h), and run_gated_delta_rule, the entry with its
// algorithm chosen by the caller (the tests compare the two; the bench times each).
// Raw device pointers, launched on `stream`; the math is in cuda/gated_delta_body.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/kernels.h"

namespace cg::cuda {

// Shapes of one gated delta rule call: q, k [B, T, Hk, dk]; v, out [B, T, Hv, dv];
// g, beta [B, T, Hv] f32; state [B, Hv, dk, dv] f32, read then overwritten.
struct GatedDeltaShape {
  int64_t B = 0, T = 0, Hk = 0, Hv = 0, dk = 0, dv = 0;
  bool l2norm = true;
  double scale = 1.0;
};

// f32 floats of scratch the chunked launcher needs for `shape`.
int64_t gated_delta_chunked_scratch_floats(const GatedDeltaShape& shape);
// Chunked (WY / UT-transform) algorithm, chunks of 64 tokens: two kernels, one block per
// (b, h, chunk) and one per (b, h, 32 state columns). scratch: the floats asked above.
void launch_gated_delta_chunked(DType dtype, const GatedDeltaShape& shape, const void* q,
                                const void* k, const void* v, const float* g, const float* beta,
                                float* state, void* out, float* scratch, cudaStream_t stream);
// The recurrence token by token, one block of 32 threads per (b, h, 32 state columns).
void launch_gated_delta_recurrent(DType dtype, const GatedDeltaShape& shape, const void* q,
                                  const void* k, const void* v, const float* g, const float* beta,
                                  float* state, void* out, cudaStream_t stream);
// x, out [B, T, C]; weight [C, K]; history [B, K-1, C] or null (zeros). x's dtype throughout.
void launch_causal_conv1d(DType dtype, const void* x, const void* weight, const void* history,
                          void* out, int64_t B, int64_t T, int64_t C, int64_t K, bool silu,
                          cudaStream_t stream);

// Up to this many tokens the automatic choice is the recurrence (decoding, verification
// blocks); longer calls take the chunked algorithm.
constexpr int64_t kGatedDeltaRecurrentMaxTokens = 16;

enum class GatedDeltaAlgorithm { automatic, chunked, recurrent };

// The CUDA table's gated_delta_rule entry with the algorithm forced (automatic: what the
// entry does). Same contract as DeviceKernels::gated_delta_rule: args.state is updated in
// place; returns out [B, T, Hv, dv] in v's dtype.
Tensor run_gated_delta_rule(const GatedDeltaArgs& args, GatedDeltaAlgorithm algorithm);

}  // namespace cg::cuda
