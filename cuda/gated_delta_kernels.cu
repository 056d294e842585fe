// Why this file exists: the CUDA gated delta rule and causal conv1d kernels (see
// gated_delta_kernels.h) and their launchers. The kernels are thin: each names its block's
// work and calls its body in cuda/gated_delta_body.cuh, where the math and the indexing
// live (Note [Bodies that run on the host too]).
//
// Note [The chunked gated delta rule on the GPU]: the delta rule's state columns are
// independent (column c of S only ever reads column c of v), so the sequential pass over
// the chunks splits dv into slices of 32 columns, B * Hv * dv/32 blocks (192 for
// Qwen3.5-27B's 48 value heads of dv 128 at B = 1, against 132 SMs). Everything that does
// not depend on the state -- the chunk's solve, W, U, the decayed q k^T, the scaled q and
// k -- is computed first, one block per (b, h, chunk) (3072 blocks at T 4096), into f32
// scratch, so the sequential pass does three [64, dk] x [dk, 32]-sized products and one
// [64, 64] x [64, 32] per chunk. fp32 SIMT math throughout (no tensor cores yet): the
// state and every product stay fp32, as the CPU reference; f64 inputs too (read and written
// as f64, computed in fp32, where the CPU computes them in double: compare at fp32's
// tolerance).
#include "cuda/gated_delta_kernels.h"

#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/gated_delta_body.cuh"

namespace cg::cuda {

namespace gd = gated_delta;

namespace {

constexpr int kBlock = 256;

// ---- kernels ------------------------------------------------------------------------------

// grid (B * Hv * chunks): block (bh, n) fills chunk n's scratch rows of head bh.
template <typename T>
__global__ void __launch_bounds__(kBlock)
    prepare_kernel(gd::Problem p, const T* q, const T* k, const T* v, const float* g,
                   const float* beta, gd::ChunkScratch s) {
  extern __shared__ float smem[];
  const int chunks = p.chunks();
  const int bh = static_cast<int>(blockIdx.x) / chunks, n = static_cast<int>(blockIdx.x) % chunks;
  gd::prepare_chunk<T>(p, q, k, v, g, beta, s, bh, n, smem, threadIdx.x, blockDim.x);
}

// grid (B * Hv * slices): block (bh, sl) walks every chunk for state columns sl*32...
template <typename T>
__global__ void __launch_bounds__(kBlock)
    state_kernel(gd::Problem p, gd::ChunkScratch s, float* state, T* out) {
  extern __shared__ float smem[];
  const int slices = p.slices();
  const int bh = static_cast<int>(blockIdx.x) / slices, sl = static_cast<int>(blockIdx.x) % slices;
  gd::chunked_state_pass<T>(p, s, state, out, bh, sl, smem, threadIdx.x, blockDim.x);
}

// grid (B * Hv * slices), 32 threads: one thread per state column.
template <typename T>
__global__ void recurrent_kernel(gd::Problem p, const T* q, const T* k, const T* v, const float* g,
                                 const float* beta, float* state, T* out) {
  extern __shared__ float smem[];
  const int slices = p.slices();
  const int bh = static_cast<int>(blockIdx.x) / slices, sl = static_cast<int>(blockIdx.x) % slices;
  gd::recurrent_pass<T>(p, q, k, v, g, beta, state, out, bh, sl, smem, threadIdx.x, blockDim.x);
}

// One thread per output element (grid-stride).
template <typename T>
__global__ void causal_conv1d_kernel(const T* x, const T* w, const T* history, T* out, int64_t n,
                                     int64_t T_len, int64_t C, int K, bool silu) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    gd::causal_conv1d_element<T>(x, w, history, out, T_len, C, K, silu, e);
  }
}

// ---- launchers ----------------------------------------------------------------------------

template <typename F>
void visit_gated_delta_dtype(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::f32: return f(static_cast<float*>(nullptr));
    case DType::bf16: return f(static_cast<__nv_bfloat16*>(nullptr));
    case DType::f16: return f(static_cast<__half*>(nullptr));
    case DType::f64: return f(static_cast<double*>(nullptr));  // read and written, fp32 math
    default: break;
  }
  CG_FAIL(what, " on cuda: dtype ", dtype_name(dtype),
          " is not supported; pass f32, bf16, f16 or f64 inputs");
}

gd::Problem problem_of(const GatedDeltaShape& s) {
  CG_CHECK(s.dk >= 1 && s.dk <= gd::kMaxDim && s.dv >= 1 && s.dv <= gd::kMaxDim,
           "gated_delta_rule on cuda: dk ", s.dk, " and dv ", s.dv, " must lie in [1, ",
           gd::kMaxDim, "] (the kernels keep a [64, 128] tile per chunk; widen them to go on)");
  CG_CHECK(s.Hk >= 1 && s.Hv % s.Hk == 0, "gated_delta_rule on cuda: Hv ", s.Hv,
           " must be a multiple of Hk ", s.Hk);
  gd::Problem p;
  p.B = static_cast<int>(s.B);
  p.T = static_cast<int>(s.T);
  p.Hk = static_cast<int>(s.Hk);
  p.Hv = static_cast<int>(s.Hv);
  p.dk = static_cast<int>(s.dk);
  p.dv = static_cast<int>(s.dv);
  p.l2norm = s.l2norm;
  p.scale = static_cast<float>(s.scale);
  return p;
}

struct ScratchSizes {
  int64_t w, u, a, e;  // one [B*Hv, Tp, dk] tensor, U, aqk, eg
};
ScratchSizes scratch_sizes(const GatedDeltaShape& s) {
  const int64_t chunks = (s.T + gd::kChunk - 1) / gd::kChunk;
  const int64_t rows = s.B * s.Hv * chunks * gd::kChunk;
  return {rows * s.dk, rows * s.dv, rows * gd::kChunk, s.B * s.Hv * chunks};
}

}  // namespace

int64_t gated_delta_chunked_scratch_floats(const GatedDeltaShape& shape) {
  const ScratchSizes z = scratch_sizes(shape);
  return 3 * z.w + z.u + z.a + z.e;
}

void launch_gated_delta_chunked(DType dtype, const GatedDeltaShape& shape, const void* q,
                                const void* k, const void* v, const float* g, const float* beta,
                                float* state, void* out, float* scratch, cudaStream_t stream) {
  if (shape.B == 0 || shape.Hv == 0 || shape.T == 0) return;
  const gd::Problem p = problem_of(shape);
  const ScratchSizes z = scratch_sizes(shape);
  gd::ChunkScratch s;
  s.w = scratch;
  s.qs = s.w + z.w;
  s.kd = s.qs + z.w;
  s.u = s.kd + z.w;
  s.aqk = s.u + z.u;
  s.eg = s.aqk + z.a;
  const int64_t prepare_blocks = shape.B * shape.Hv * p.chunks();
  const int64_t state_blocks = shape.B * shape.Hv * p.slices();
  CG_CHECK(prepare_blocks < (int64_t{1} << 31), "gated_delta_rule on cuda: ", prepare_blocks,
           " chunk blocks are too many for one grid; split the batch");
  constexpr size_t prepare_bytes = sizeof(float) * gd::kPrepareSharedFloats;
  constexpr size_t state_bytes = sizeof(float) * gd::kStateSharedFloats;
  visit_gated_delta_dtype(dtype, "gated_delta_rule", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    CG_CUDA_CHECK(cudaFuncSetAttribute(prepare_kernel<T>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(prepare_bytes)));
    CG_CUDA_CHECK(cudaFuncSetAttribute(state_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(state_bytes)));
    prepare_kernel<T><<<static_cast<unsigned>(prepare_blocks), kBlock, prepare_bytes, stream>>>(
        p, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), g, beta,
        s);
    CG_CUDA_CHECK(cudaGetLastError());
    state_kernel<T><<<static_cast<unsigned>(state_blocks), kBlock, state_bytes, stream>>>(
        p, s, state, static_cast<T*>(out));
    CG_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_gated_delta_recurrent(DType dtype, const GatedDeltaShape& shape, const void* q,
                                  const void* k, const void* v, const float* g, const float* beta,
                                  float* state, void* out, cudaStream_t stream) {
  if (shape.B == 0 || shape.Hv == 0) return;
  const gd::Problem p = problem_of(shape);
  const int64_t blocks = shape.B * shape.Hv * p.slices();
  constexpr size_t bytes = sizeof(float) * gd::kRecurrentSharedFloats;
  visit_gated_delta_dtype(dtype, "gated_delta_rule", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    recurrent_kernel<T><<<static_cast<unsigned>(blocks), gd::kSlice, bytes, stream>>>(
        p, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), g, beta,
        state, static_cast<T*>(out));
    CG_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_causal_conv1d(DType dtype, const void* x, const void* weight, const void* history,
                          void* out, int64_t B, int64_t T_len, int64_t C, int64_t K, bool silu,
                          cudaStream_t stream) {
  const int64_t n = B * T_len * C;
  if (n == 0) return;
  const unsigned blocks =
      static_cast<unsigned>(std::clamp<int64_t>((n + kBlock - 1) / kBlock, 1, 65536));
  visit_gated_delta_dtype(dtype, "causal_conv1d", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    causal_conv1d_kernel<T><<<blocks, kBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(history),
        static_cast<T*>(out), n, T_len, C, static_cast<int>(K), silu);
    CG_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace cg::cuda
