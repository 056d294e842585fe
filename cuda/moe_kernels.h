// Why this file exists: the launchers of the CUDA mixture-of-experts kernels behind the
// kernel table's moe_route and moe_experts entries (ops/kernels.h, Note [MoE rounding]),
// and run_moe_experts, the experts entry with its GEMM path chosen by the caller (the tests
// compare the paths; the bench times each). Raw device pointers, launched on `stream`
// without waiting; the GEMMs and the one host wait are in cuda/cuda_moe.cpp.
//
// The experts pipeline over N tokens, k slots, E experts, R = N k (token, slot) pairs:
//   1. rank: per expert, the rank of each of its pairs in (token, slot) order, and its count;
//   2. offsets: exclusive scan of the counts, the pointer arrays of the grouped GEMMs;
//   3. gather: pair p = n k + s goes to row pos[p] = offsets[e] + rank[p] of the
//      expert-sorted buffer xs [R, H] (a copy of x[n]);
//   4. per expert: h [rows, 2I] = xs_e gate_up[e]^T; act = silu(h[:, :I]) * h[:, I:];
//      ys [rows, H] = act down[e]^T (cuBLAS, cuda_moe.cpp);
//   5. combine: out[n] = sum_s w[n, s] ys[pos[n k + s]], in the compute type, rounded once.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/kernels.h"

namespace cg::cuda {

// logits [N, E] of `dtype`, contiguous -> weights [N, k] (f64 for f64 logits, else f32),
// indices [N, k] i32: softmax in the compute type, k rounds of a warp argmax (ties to the
// lower index), the k probabilities divided by their sum. One warp per token.
void launch_moe_route(DType dtype, const void* logits, void* weights, int32_t* indices, int64_t N,
                      int64_t E, int64_t k, cudaStream_t stream);

// Steps 1 and 2. indices [R] i32 in [0, E). Writes rank [R], counts [E], offsets [E + 1]
// and, for the g-th expert with rows (ascending e), the six grouped-GEMM pointers
// ptrs[j E + g], j = 0..5: gate_up[e], xs row offsets[e], h row offsets[e], down[e],
// act row offsets[e], ys row offsets[e] (element sizes: x_bytes for gate_up, down, xs, h,
// act; ys_bytes for ys).
struct MoeBuffers {
  const void* gate_up;  // [E, 2I, H]
  const void* down;     // [E, H, I]
  void* xs;             // [R, H] x's dtype
  void* h;              // [R, 2I] x's dtype
  void* act;            // [R, I] x's dtype
  void* ys;             // [R, H] ys dtype
  int64_t H, I;
  size_t x_bytes, ys_bytes;
};
void launch_moe_plan(const int32_t* indices, int64_t R, int64_t E, const MoeBuffers& buffers,
                     int32_t* rank, int32_t* counts, int32_t* offsets, const void** ptrs,
                     cudaStream_t stream);
// Step 3: pos [R] = offsets[indices] + rank; xs[pos[p]] = x[p / k] (rows of H elements).
void launch_moe_gather(DType dtype, const void* x, const int32_t* indices, const int32_t* rank,
                       const int32_t* offsets, int32_t* pos, void* xs, int64_t R, int64_t k,
                       int64_t H, cudaStream_t stream);
// act [R, I] = silu(h[:, :I]) * h[:, I:] from h [R, 2I], computed in the compute type.
void launch_moe_swiglu(DType dtype, const void* h, void* act, int64_t R, int64_t I,
                       cudaStream_t stream);
// Step 5: out [N, H] (`dtype`) from ys [N k, H] (`ys_dtype`), weights [N, k]
// (`w_dtype`, rounded to `dtype` before use), pos [N, k].
void launch_moe_combine(DType dtype, DType ys_dtype, DType w_dtype, const void* ys,
                        const void* weights, const int32_t* pos, void* out, int64_t N, int64_t k,
                        int64_t H, cudaStream_t stream);

// The scratch of one moe_experts call over x [N, H] with k slots (R = N k): the tensors
// (temporary memory) and the pointers the launchers above take. run_moe_experts makes one
// per call; the bench times the stages on one.
struct MoeScratch {
  Tensor ints;                             // i32 rank [R], pos [R], counts [E], offsets [E + 1]
  Tensor ptrs;                             // i64 [6 E]: the grouped-GEMM pointer arrays
  Tensor xs, h, act, ys;                   // [R, H], [R, 2I], [R, I], [R, H] in x's dtype
  int32_t *rank, *pos, *counts, *offsets;  // into ints
  MoeBuffers buffers;
  const void** ptr_array;  // ptrs' data
};
MoeScratch make_moe_scratch(const Tensor& x, const Tensor& gate_up, const Tensor& down, int64_t k);

// How the per-expert GEMMs run (Note [MoE grouped GEMM], cuda_moe.cpp): automatic takes
// cuBLAS's grouped GEMM where it accepts the dtypes, else the loop.
enum class MoeGemmPath { automatic, grouped, loop };

// The CUDA table's moe_experts entry with the GEMM path forced; `grouped` throws when
// cuBLAS refuses it. Same contract as DeviceKernels::moe_experts.
Tensor run_moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                       const MoeRouting& routing, MoeGemmPath path);
// The path the last run_moe_experts call on this thread took (grouped or loop; automatic
// before any call): for the bench and the tests to say which ran.
MoeGemmPath last_moe_gemm_path();

}  // namespace cg::cuda
