// Why this file exists: what every kernel-table CUDA kernel (cuda/*.cu) needs per element:
// the storage type of a DType, loads and stores through the compute type (fp32 for
// bf16/f16/f32, fp64 for f64: Note [Compute types] in cpu/loops.h, rounded once on
// store), the offsets of a row-major element in a Strided geometry and block reductions.
// The elementwise formulas are ops/elementwise_formulas.h, shared with the CPU table and
// brought into cg::cuda below. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/kernel_args.h"
#include "ops/elementwise_formulas.h"
#include "ops/kernels.h"

namespace cg::cuda {

// 2^x as the bare ex2.approx.ftz (one MUFU.EX2): exp2f's non-ftz form adds a range test and
// two multiplies around it to keep denormal results, which matter nowhere it is used (the
// head loss's row passes, the attention's probabilities): every exponent there is relative
// to a max or a log-sum-exp, so results are <= 1 and those below 2^-126 are as good as 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with T the device storage type of a floating `dtype`.
template <typename F>
void visit_floating(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::f32: return f(Tag<float>{});
    case DType::f64: return f(Tag<double>{});
    case DType::f16: return f(Tag<__half>{});
    case DType::bf16: return f(Tag<__nv_bfloat16>{});
    default: break;
  }
  CG_FAIL(what, ": dtype ", dtype_name(dtype),
          " is not supported; it computes on f32, f64, "
          "bf16 and f16 tensors");
}

// Calls f(Tag<I>{}) with I the C++ type of an index dtype.
template <typename F>
void visit_index(DType dtype, F&& f) {
  switch (dtype) {
    case DType::i64: return f(Tag<int64_t>{});
    case DType::i32: return f(Tag<int32_t>{});
    default: break;
  }
  CG_FAIL("index op: indices have dtype ", dtype_name(dtype), "; they must be i32 or i64");
}

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
__device__ __forceinline__ compute_t<T> ld(const T* p) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(*p);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(*p);
  } else {
    return *p;
  }
}

template <typename T>
__device__ __forceinline__ void st(T* p, compute_t<T> v) {
  if constexpr (std::is_same_v<T, __half>) {
    *p = __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    *p = __float2bfloat16_rn(v);
  } else {
    *p = v;
  }
}

// Offsets of row-major element i (< g.numel) in the first N operands of g. One 64-bit
// division per dim but the outermost (where what is left of i is the index itself), so a
// flat loop (ndim 1, the common contiguous case) divides nothing.
template <int N>
__device__ __forceinline__ void offsets_of(const Strided& g, int64_t i, int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = g.ndim - 1; d > 0; --d) {
    const int64_t size = g.sizes[d];
    const int64_t q = i / size;
    const int64_t index = i - q * size;
    i = q;
    for (int k = 0; k < N; ++k) off[k] += index * g.strides[k][d];
  }
  for (int k = 0; k < N; ++k) off[k] += i * g.strides[k][0];
}

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

constexpr int kThreads = 256;

// Enough blocks of kThreads for one element per thread, capped (kernels grid-stride).
inline unsigned blocks_for(int64_t n) {
  int64_t wanted = (n + kThreads - 1) / kThreads;
  if (wanted < 1) wanted = 1;
  if (wanted > 65536) wanted = 65536;
  return static_cast<unsigned>(wanted);
}

// N consecutive elements as compute values: one 16-byte load (store) when N > 1; p must
// then be 16-byte aligned.
template <typename T, int N>
__device__ __forceinline__ void load_pack(const T* p, compute_t<T> (&v)[N]) {
  if constexpr (N == 1) {
    v[0] = ld(p);
  } else {
    static_assert(N * sizeof(T) == 16, "a pack is 16 bytes");
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = ld(e + k);
  }
}
template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const compute_t<T> (&v)[N]) {
  if constexpr (N == 1) {
    st(p, v[0]);
  } else {
    uint4 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int k = 0; k < N; ++k) st(e + k, v[k]);
    *reinterpret_cast<uint4*>(p) = u;
  }
}
// ---- math in the compute type -----------------------------------------------------------

// The formulas every table shares (Note [Formulas on the host and the device]).
using formulas::addcmul_of;
using formulas::apply_binary;
using formulas::apply_inplace;
using formulas::apply_unary;
using formulas::m_erf;
using formulas::m_exp;
using formulas::m_log;
using formulas::m_pow;
using formulas::m_sqrt;
using formulas::m_tanh;
using formulas::swiglu_grads_of;
using formulas::swiglu_of;

__device__ __forceinline__ bool m_isnan(float x) { return isnan(x); }
__device__ __forceinline__ bool m_isnan(double x) { return isnan(x); }
__device__ __forceinline__ bool m_isinf(float x) { return isinf(x); }
__device__ __forceinline__ bool m_isinf(double x) { return isinf(x); }
template <typename C>
__device__ __forceinline__ C m_inf() {
  if constexpr (std::is_same_v<C, double>)
    return __longlong_as_double(0x7ff0000000000000LL);
  else
    return __int_as_float(0x7f800000);
}

// ---- block reductions (blockDim.x a multiple of 32, at most 1024) ------------------------

template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename A>
__device__ __forceinline__ A warp_max(A v) {
  for (int o = 16; o > 0; o >>= 1) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

// Sum of v over the block, returned to every thread. `scratch`: 32 A of shared memory;
// every thread of the block must call it (it synchronises twice).
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A t = lane < warps ? scratch[lane] : A(0);
  return warp_sum(t);
}
// Max of v over the block, to every thread (as `>`: a NaN never wins over a number).
template <typename A>
__device__ __forceinline__ A block_max(A v, A* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A t = lane < warps ? scratch[lane] : -m_inf<A>();
  return warp_max(t);
}

}  // namespace cg::cuda

namespace cg::cuda {

// The element at p[i] of a floating `dtype` (a runtime switch: for small helper kernels
// that take operands of any dtype without an instantiation per pair).
__device__ __forceinline__ double load_any(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return 0.0;
  }
}
__device__ __forceinline__ void store_any(void* p, DType dtype, int64_t i, double v) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::f16: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    case DType::bf16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v));
      break;
    default: break;
  }
}

// Smallest v over the block, to every thread (32 int64 of shared scratch).
__device__ __forceinline__ int64_t block_min_i64(int64_t v, int64_t* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v = min(v, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, v, o)));
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int64_t t = lane < warps ? scratch[lane] : INT64_MAX;
  for (int o = 16; o > 0; o >>= 1)
    t = min(t, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, t, o)));
  return t;
}

}  // namespace cg::cuda
