// Why this file exists: the device helpers of the lm_head loss row kernel
// (cuda/head_loss_kernels.cu, Note [Row kernel bandwidth] there): 16-byte packs kept raw
// until used, a thread's group of packs loaded before any is used, exponentials as one fma
// and exp2, a pack's max as a tree, and block reductions that share their barriers.
// Included by head_loss_kernels.cu only.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/device_math.cuh"

namespace cg::cuda::head_rows {

// A pack of N elements as loaded: 16 raw bytes (N > 1), or the element (N == 1). Kept raw
// until used, so kUnroll packs in flight cost 4 registers each whatever the dtype.
template <typename T, int N>
using RawPack = std::conditional_t<N == 1, T, uint4>;

template <typename T, int N>
__device__ __forceinline__ RawPack<T, N> load_raw(const T* p) {
  return *reinterpret_cast<const RawPack<T, N>*>(p);
}

template <typename T, int N>
__device__ __forceinline__ void unpack(const RawPack<T, N>& raw, compute_t<T> (&v)[N]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = ld(e + k);
}

// e^x for the row passes: exp_fma(x, a, b) = e^(x a' + b') written as base^(x a + b), a and
// b pre-multiplied by kExpScale (log2 e for fp32's exp2, 1 for f64's exp): one fma and the
// hardware's exp2 (~2 ulp) where expf's range reduction costs several instructions -- the
// KL passes take four exponentials per logit and are bound by instructions, not memory.
template <typename A>
constexpr A kExpScale = std::is_same_v<A, float> ? A(1.4426950408889634) : A(1);
// (fp32: fast_exp2, cuda/device_math.cuh)
__device__ __forceinline__ float exp_fma(float x, float a, float b) {
  return fast_exp2(fmaf(x, a, b));
}
__device__ __forceinline__ double exp_fma(double x, double a, double b) {
  return exp(fma(x, a, b));
}

// Largest of v (NaN never wins, as fmax), a tree of N - 1 steps.
template <typename A, int N>
__device__ __forceinline__ A pack_max(const A (&v)[N]) {
  A w[N];
#pragma unroll
  for (int k = 0; k < N; ++k) w[k] = v[k];
#pragma unroll
  for (int h = N / 2; h >= 1; h /= 2) {
#pragma unroll
    for (int k = 0; k < h; ++k) w[k] = fmax(w[k], w[k + h]);
  }
  return w[0];
}

// The largest finite-or-not value below every real number (fp32/fp64 lowest): x clamped to
// it is x unless x is -inf or NaN, so e * max(x, lowest) is 0 where e is 0.
template <typename A>
constexpr A kLowest = std::is_same_v<A, float> ? A(-3.402823466e38f) : A(-1.7976931348623157e308);

// The first k with v[k] == x (N when none).
template <typename A, int N>
__device__ __forceinline__ int first_equal(const A (&v)[N], A x) {
  int at = N;
#pragma unroll
  for (int k = N - 1; k >= 0; --k) at = v[k] == x ? k : at;
  return at;
}

// Group g of a thread's packs (packs g * U * stride + u * stride + threadIdx.x), every
// load issued before any is used (Note [Row kernel bandwidth]); packs past the row's end
// are left unset.
template <typename T, int N, int U, bool kTeacher>
__device__ __forceinline__ void load_group(const T* z, const T* t, int64_t g, int64_t stride,
                                           int64_t packs, RawPack<T, N> (&zr)[U],
                                           RawPack<T, N> (&tr)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t pk = (g * U + u) * stride + threadIdx.x;
    if (pk < packs) {
      zr[u] = load_raw<T, N>(z + pk * N);
      if (kTeacher) tr[u] = load_raw<T, N>(t + pk * N);
    }
  }
}

// Asks L2 for group g of a thread's packs (as load_group reads them) without waiting or
// holding registers: the loads of that group later find it there (Note [Row kernel
// bandwidth]); groups outside [0, groups) ask nothing.
template <typename T, int N, int U, bool kTeacher>
__device__ __forceinline__ void prefetch_group(const T* z, const T* t, int64_t g, int64_t groups,
                                               int64_t stride, int64_t packs) {
  if (g < 0 || g >= groups) return;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t pk = (g * U + u) * stride + threadIdx.x;
    if (pk < packs) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(z + pk * N));
      if (kTeacher) asm volatile("prefetch.global.L2 [%0];" ::"l"(t + pk * N));
    }
  }
}

// Two reductions over the block with one pair of barriers, to every thread: a and b
// each replaced by op over the block (scratch: 64 V of shared memory). Op: MaxOp, MinOp.
struct MaxOp {
  template <typename V>
  __device__ V operator()(V x, V y) const {
    return y > x ? y : x;
  }  // a NaN never wins
};
struct MinOp {
  template <typename V>
  __device__ V operator()(V x, V y) const {
    return y < x ? y : x;
  }
};

template <typename V, typename Op>
__device__ __forceinline__ V warp_reduce(V v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, static_cast<V>(__shfl_xor_sync(0xffffffffu, v, o)));
  return v;
}

template <typename V, typename Op>
__device__ __forceinline__ void block_reduce2(V& a, V& b, V* scratch, V identity, Op op) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  a = warp_reduce(a, op);
  b = warp_reduce(b, op);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) {
    scratch[warp] = a;
    scratch[32 + warp] = b;
  }
  __syncthreads();
  a = warp_reduce(lane < warps ? scratch[lane] : identity, op);
  b = warp_reduce(lane < warps ? scratch[32 + lane] : identity, op);
}

// Sums of K doubles over the block with one pair of barriers, to every thread.
// scratch: 32 * K doubles of shared memory.
template <int K>
__device__ __forceinline__ void block_sums(double (&v)[K], double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(v[k]);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) scratch[k * 32 + warp] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(lane < warps ? scratch[k * 32 + lane] : 0.0);
}

}  // namespace cg::cuda::head_rows
