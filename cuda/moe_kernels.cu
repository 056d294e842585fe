// Why this file exists: the CUDA kernels of the mixture-of-experts entries (moe_route,
// moe_experts; the pipeline is in cuda/moe_kernels.h) and their launchers, in llm.c's
// layout: kernels, then launchers. The GEMMs between gather and combine are cuBLAS calls
// in cuda/cuda_moe.cpp.
#include <climits>

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"
#include "cuda/moe_kernels.h"

namespace cg::cuda {

namespace {

// ============================== CUDA kernels ==============================================

constexpr int kRouteWarps = 4;  // tokens per block of moe_route

// (v, i) beats (bv, bi): the larger value, the lower index on a tie.
template <typename C>
__device__ __forceinline__ bool beats(C v, int i, C bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// One warp per token; the row's probabilities sit in shared memory (E values per warp).
// Note [MoE routing order]: the softmax sums lane-strided partials and then across the
// warp (an order the CPU does not share: the probabilities agree to rounding). The top-k
// is exact given the probabilities: each round takes the largest remaining value, the
// lower index on ties, and its owner lane marks it taken (-inf). Lane 0 keeps the k picks
// and divides them by their sum, added in slot order.
template <typename T>
__global__ void moe_route_kernel(const T* logits, compute_t<T>* weights, int32_t* indices,
                                 int64_t N, int E, int k) {
  using C = compute_t<T>;
  extern __shared__ __align__(16) unsigned char route_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (n >= N) return;  // the whole warp leaves together; no block barrier follows
  C* probs = reinterpret_cast<C*>(route_smem) + static_cast<int64_t>(warp) * E;
  const T* row = logits + n * E;
  C m = -m_inf<C>();
  for (int i = lane; i < E; i += 32) {
    const C v = ld(row + i);
    probs[i] = v;
    m = v > m ? v : m;
  }
  m = warp_max(m);
  C sum = 0;
  for (int i = lane; i < E; i += 32) {
    const C e = m_exp(probs[i] - m);
    probs[i] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  for (int i = lane; i < E; i += 32) probs[i] = probs[i] / sum;
  C* w = weights + n * k;
  int32_t* idx = indices + n * k;
  for (int r = 0; r < k; ++r) {
    C bv = -m_inf<C>();
    int bi = INT_MAX;
    for (int i = lane; i < E; i += 32) {
      if (beats(probs[i], i, bv, bi)) {
        bv = probs[i];
        bi = i;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const C ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (beats(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (bi != INT_MAX && lane == (bi & 31)) probs[bi] = -m_inf<C>();
    if (lane == 0) {
      w[r] = bv;
      idx[r] = bi;
    }
  }
  if (lane == 0) {
    C total = 0;
    for (int r = 0; r < k; ++r) total += w[r];
    for (int r = 0; r < k; ++r) w[r] = w[r] / total;
  }
}

// Exclusive prefix sum of v over the block (blockDim.x a multiple of 32, at most 1024);
// *total gets the block's sum. Every thread calls it; `scratch` holds 32 ints.
__device__ __forceinline__ int block_exclusive_scan(int v, int* scratch, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  int incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += u;
  }
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  int before = 0, all = 0;
  for (int w = 0; w < warps; ++w) {
    const int s = scratch[w];
    if (w < warp) before += s;
    all += s;
  }
  *total = all;
  return before + incl - v;
}

// Step 1, one block per expert e: walks the pairs in order, numbering those routed to e;
// each thread takes kRankRun consecutive pairs per pass. The numbering follows (token,
// slot) order, so the expert-sorted buffer is the same on every run (no atomics).
constexpr int kRankRun = 8;
__global__ void moe_rank_kernel(const int32_t* indices, int64_t R, int32_t* rank, int32_t* counts) {
  __shared__ int scratch[32];
  const int e = blockIdx.x;
  int running = 0;
  for (int64_t base = 0; base < R; base += static_cast<int64_t>(blockDim.x) * kRankRun) {
    const int64_t first = base + static_cast<int64_t>(threadIdx.x) * kRankRun;
    int32_t v[kRankRun];
    int mine = 0;
#pragma unroll
    for (int j = 0; j < kRankRun; ++j) {
      v[j] = first + j < R ? indices[first + j] : -1;
      mine += v[j] == e ? 1 : 0;
    }
    int total = 0;
    int r = running + block_exclusive_scan(mine, scratch, &total);
#pragma unroll
    for (int j = 0; j < kRankRun; ++j) {
      if (v[j] == e) rank[first + j] = r++;
    }
    running += total;
  }
  if (threadIdx.x == 0) counts[e] = running;
}

// Step 2, one block: offsets = exclusive scan of counts; the g-th expert with rows gets
// the six pointers of its grouped-GEMM problems (moe_kernels.h, launch_moe_plan).
__global__ void moe_offsets_kernel(const int32_t* counts, int64_t E, MoeBuffers b, int32_t* offsets,
                                   const void** ptrs) {
  __shared__ int scratch[32];
  int rows_before = 0, groups_before = 0;
  const char* gate_up = static_cast<const char*>(b.gate_up);
  const char* down = static_cast<const char*>(b.down);
  for (int64_t base = 0; base < E; base += blockDim.x) {
    const int64_t e = base + threadIdx.x;
    const int c = e < E ? counts[e] : 0;
    int rows_total = 0, groups_total = 0;
    const int off = rows_before + block_exclusive_scan(c, scratch, &rows_total);
    const int g = groups_before + block_exclusive_scan(c > 0 ? 1 : 0, scratch, &groups_total);
    if (e < E) {
      offsets[e] = off;
      if (c > 0) {
        const int64_t o = off;
        const size_t xb = b.x_bytes;
        ptrs[0 * E + g] = gate_up + static_cast<size_t>(e * 2 * b.I * b.H) * xb;
        ptrs[1 * E + g] = static_cast<char*>(b.xs) + static_cast<size_t>(o * b.H) * xb;
        ptrs[2 * E + g] = static_cast<char*>(b.h) + static_cast<size_t>(o * 2 * b.I) * xb;
        ptrs[3 * E + g] = down + static_cast<size_t>(e * b.H * b.I) * xb;
        ptrs[4 * E + g] = static_cast<char*>(b.act) + static_cast<size_t>(o * b.I) * xb;
        ptrs[5 * E + g] = static_cast<char*>(b.ys) + static_cast<size_t>(o * b.H) * b.ys_bytes;
      }
    }
    rows_before += rows_total;
    groups_before += groups_total;
  }
  if (threadIdx.x == 0) offsets[E] = rows_before;
}

// Step 3, one block per pair: its row position, and its token's row copied there. V is
// the copy unit (uint4 when rows are 16-byte multiples and aligned, else the element).
template <typename V>
__global__ void moe_gather_kernel(const V* x, const int32_t* indices, const int32_t* rank,
                                  const int32_t* offsets, int32_t* pos, V* xs, int64_t k,
                                  int64_t row_units) {
  const int64_t p = blockIdx.x;
  const int64_t at = static_cast<int64_t>(offsets[indices[p]]) + rank[p];
  if (threadIdx.x == 0) pos[p] = static_cast<int32_t>(at);
  const V* src = x + (p / k) * row_units;
  V* dst = xs + at * row_units;
  for (int64_t i = threadIdx.x; i < row_units; i += blockDim.x) dst[i] = src[i];
}

template <typename T>
__global__ void moe_swiglu_kernel(const T* h, T* act, int64_t R, int64_t I) {
  const int64_t n = R * I;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t r = i / I, j = i - r * I;
    const T* row = h + r * 2 * I;
    st(act + i, swiglu_of<compute_t<T>>(ld(row + j), ld(row + I + j)));
  }
}

// v rounded to T's precision (a no-op for f32 and f64), back in the compute type.
template <typename T>
__device__ __forceinline__ compute_t<T> rounded_to(compute_t<T> v) {
  T t;
  st(&t, v);
  return ld(&t);
}

// Step 5, one block per (token, chunk of columns): the slots in order, in the compute
// type, one rounding on store; each weight first rounded to x's dtype (Note [MoE rounding]).
template <typename T, typename Y, typename W>
__global__ void moe_combine_kernel(const Y* ys, const W* weights, const int32_t* pos, T* out,
                                   int64_t k, int64_t H) {
  using C = compute_t<T>;
  const int64_t n = blockIdx.x;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (col >= H) return;
  C acc = 0;
  for (int64_t s = 0; s < k; ++s) {
    const C w = rounded_to<T>(static_cast<C>(weights[n * k + s]));
    acc += w * static_cast<C>(ld(ys + static_cast<int64_t>(pos[n * k + s]) * H + col));
  }
  st(out + n * H + col, acc);
}

}  // namespace

// ============================== kernel launchers ==========================================

void launch_moe_route(DType dtype, const void* logits, void* weights, int32_t* indices, int64_t N,
                      int64_t E, int64_t k, cudaStream_t stream) {
  if (N == 0) return;
  visit_floating(dtype, "moe_route", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const size_t smem = static_cast<size_t>(kRouteWarps) * static_cast<size_t>(E) * sizeof(C);
    CG_CHECK(smem <= 48 * 1024, "moe_route: ", E,
             " experts do not fit the routing kernel's shared memory (at most ",
             48 * 1024 / (kRouteWarps * sizeof(C)), " for ", dtype_name(dtype), " logits)");
    const unsigned blocks = static_cast<unsigned>((N + kRouteWarps - 1) / kRouteWarps);
    moe_route_kernel<T><<<blocks, kRouteWarps * 32, smem, stream>>>(
        static_cast<const T*>(logits), static_cast<C*>(weights), indices, N, static_cast<int>(E),
        static_cast<int>(k));
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_moe_plan(const int32_t* indices, int64_t R, int64_t E, const MoeBuffers& buffers,
                     int32_t* rank, int32_t* counts, int32_t* offsets, const void** ptrs,
                     cudaStream_t stream) {
  moe_rank_kernel<<<static_cast<unsigned>(E), 256, 0, stream>>>(indices, R, rank, counts);
  CG_CUDA_CHECK(cudaGetLastError());
  moe_offsets_kernel<<<1, 1024, 0, stream>>>(counts, E, buffers, offsets, ptrs);
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_moe_gather(DType dtype, const void* x, const int32_t* indices, const int32_t* rank,
                       const int32_t* offsets, int32_t* pos, void* xs, int64_t R, int64_t k,
                       int64_t H, cudaStream_t stream) {
  if (R == 0) return;
  const size_t row_bytes = static_cast<size_t>(H) * element_size(dtype);
  const bool packed = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(xs) % 16 == 0;
  const unsigned blocks = static_cast<unsigned>(R);
  if (packed) {
    const int64_t units = static_cast<int64_t>(row_bytes / 16);
    moe_gather_kernel<uint4><<<blocks, 128, 0, stream>>>(static_cast<const uint4*>(x), indices,
                                                         rank, offsets, pos,
                                                         static_cast<uint4*>(xs), k, units);
  } else {
    visit_floating(dtype, "moe_experts", [&](auto tag) {
      using T = typename decltype(tag)::type;
      moe_gather_kernel<T><<<blocks, 128, 0, stream>>>(static_cast<const T*>(x), indices, rank,
                                                       offsets, pos, static_cast<T*>(xs), k, H);
    });
  }
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_moe_swiglu(DType dtype, const void* h, void* act, int64_t R, int64_t I,
                       cudaStream_t stream) {
  if (R * I == 0) return;
  visit_floating(dtype, "moe_experts", [&](auto tag) {
    using T = typename decltype(tag)::type;
    moe_swiglu_kernel<T><<<blocks_for(R * I), kThreads, 0, stream>>>(static_cast<const T*>(h),
                                                                     static_cast<T*>(act), R, I);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_moe_combine(DType dtype, DType ys_dtype, DType w_dtype, const void* ys,
                        const void* weights, const int32_t* pos, void* out, int64_t N, int64_t k,
                        int64_t H, cudaStream_t stream) {
  if (N == 0 || H == 0) return;
  CG_CHECK(ys_dtype == dtype || ys_dtype == DType::f32,
           "moe_experts (internal): expert outputs are ", dtype_name(ys_dtype), " for ",
           dtype_name(dtype), " tokens");
  CG_CHECK(w_dtype == DType::f32 || w_dtype == DType::f64, "moe_experts: routing weights are ",
           dtype_name(w_dtype), "; they must be f32 or f64 (as moe_route returns them)");
  const dim3 grid(static_cast<unsigned>(N), static_cast<unsigned>((H + kThreads - 1) / kThreads));
  visit_floating(dtype, "moe_experts", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto with_ys = [&](auto ytag) {
      using Y = typename decltype(ytag)::type;
      const Y* y = static_cast<const Y*>(ys);
      if (w_dtype == DType::f64) {
        moe_combine_kernel<T, Y, double><<<grid, kThreads, 0, stream>>>(
            y, static_cast<const double*>(weights), pos, static_cast<T*>(out), k, H);
      } else {
        moe_combine_kernel<T, Y, float><<<grid, kThreads, 0, stream>>>(
            y, static_cast<const float*>(weights), pos, static_cast<T*>(out), k, H);
      }
    };
    if (ys_dtype == dtype) {
      with_ys(Tag<T>{});
    } else {
      with_ys(Tag<float>{});
    }
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
