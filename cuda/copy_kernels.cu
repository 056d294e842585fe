// Why this file exists: the CUDA kernels behind the backend's data primitives (Note
// [Device primitives], core/backend.h), so that factories, copies, casts and gradient
// accumulation on a GPU never go through host memory. One grid-stride kernel per
// primitive, templated on the element types; each thread turns a row-major element
// number into per-operand offsets through a small by-value Geometry (Note [Copy index
// math]).
// The element rules are core's (cast_element in core/dtype_dispatch.h): 16-bit floats
// are read and written through fp32 with round-to-nearest-even, to bool is x != 0,
// float to int truncates; random values come from core/philox.h, the same code the
// host runs.
#include "cuda/copy_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "core/philox.h"
#include "cuda/cuda_check.h"

namespace cg::cuda {

namespace {

// Sizes and up to two operands' strides, passed to kernels by value.
struct Geometry {
  int ndim;                      // 1..kMaxDims
  int64_t sizes[kMaxDims];       // (ndim,), outermost first
  int64_t strides[2][kMaxDims];  // (operand, ndim), in elements
};

template <typename T>
inline constexpr bool is_16bit_float_v =
    std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// ---------------------------------------------------------------------------------------
// kernels

// Note [Copy index math]: a GPU has no 64-bit integer divider; a 64-bit i % size and
// i / size per dim cost tens of instructions, which made copies, casts and gradient sums
// of a few hundred MB compute-bound at a third of the memory bandwidth. So copies and
// sums of one flat run (every operand contiguous) take kernels with no division at all,
// and the others take 32-bit index math whenever every element number and offset fits
// (fits_32_bits), 64-bit only beyond.

// Offsets of row-major element i in each of the first N operands, in index type I.
template <int N, typename I = int64_t>
__device__ inline void offsets_of(const Geometry& g, I i, I (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const I size = static_cast<I>(g.sizes[d]);
    const I index = i % size;
    i /= size;
    for (int k = 0; k < N; ++k) off[k] += index * static_cast<I>(g.strides[k][d]);
  }
}

__device__ inline float to_f32(__half x) { return __half2float(x); }
__device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// x as a D, by cast_element's rules.
template <typename D, typename S>
__device__ inline D convert(S x) {
  if constexpr (std::is_same_v<D, S>) {
    return x;
  } else if constexpr (is_16bit_float_v<S>) {
    return convert<D>(to_f32(x));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<D, bool>) {
    return x != static_cast<S>(0);
  } else {
    return static_cast<D>(x);
  }
}

__device__ inline int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// dst: (n,) elements in g's geometry. dst[i] = value + i * step.
template <typename T>
__global__ void fill_kernel(T* dst, Geometry g, int64_t n, double value, double step) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t off[1];
    offsets_of<1>(g, i, off);
    const double v = step == 0.0 ? value : fma(static_cast<double>(i), step, value);
    dst[off[0]] = convert<T>(v);
  }
}

// dst, src: (n,) elements in g's geometry (operand 0 dst, 1 src). dst[i] = cast(src[i]).
template <typename D, typename S, typename I>
__global__ void copy_kernel(D* dst, const S* src, Geometry g, I n) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    I off[2];
    offsets_of<2, I>(g, i, off);
    dst[off[0]] = convert<D>(src[off[1]]);
  }
}

// dst, src: (n,) contiguous elements. dst[i] = cast(src[i]).
template <typename D, typename S>
__global__ void copy_flat_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dst[i] = convert<D>(src[i]);
}

// Note [Flat packs]: the flat kernels on 16-byte aligned operands move kFlatPack elements a
// thread per step, each operand with one vector access (16 bytes of fp32, 8 of bf16):
// an element at a time, a bf16 += bf16 of a [24576, 5120] gradient ran at 2.3 TB/s on
// the H200. The arithmetic per element is the scalar kernel's.
constexpr int kFlatPack = 4;

template <typename T>
struct alignas(sizeof(T) * kFlatPack) FlatPack {
  T e[kFlatPack];
};

// Elements of at most 4 bytes (a pack of 8-byte elements would need 32-byte alignment).
template <typename D, typename S>
bool packs_fit(const D* a, const S* b) {
  return sizeof(D) <= 4 && sizeof(S) <= 4 && reinterpret_cast<uintptr_t>(a) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(b) % 16 == 0;
}

// dst, src: (n,) contiguous, 16-byte aligned. dst[i] = src[i].
template <typename D, typename S>
__global__ void copy_packs_kernel(D* dst, const S* src, int64_t n) {
  const int64_t packs = n / kFlatPack;
  for (int64_t q = first_index(); q < packs; q += grid_stride()) {
    const FlatPack<S> x = reinterpret_cast<const FlatPack<S>*>(src)[q];
    FlatPack<D> y;
#pragma unroll
    for (int k = 0; k < kFlatPack; ++k) y.e[k] = convert<D>(x.e[k]);
    reinterpret_cast<FlatPack<D>*>(dst)[q] = y;
  }
  for (int64_t i = packs * kFlatPack + first_index(); i < n; i += grid_stride()) {
    dst[i] = convert<D>(src[i]);
  }
}

// dst, src: (n,) floating elements. dst[i] += src[i], summed in f64 when either is f64.
template <typename D, typename S>
using AccumulateType =
    std::conditional_t<std::is_same_v<D, double> || std::is_same_v<S, double>, double, float>;

template <typename D, typename S, typename I>
__global__ void accumulate_kernel(D* dst, const S* src, Geometry g, I n) {
  using Acc = AccumulateType<D, S>;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    I off[2];
    offsets_of<2, I>(g, i, off);
    dst[off[0]] = convert<D>(convert<Acc>(dst[off[0]]) + convert<Acc>(src[off[1]]));
  }
}

// dst, src: (n,) contiguous floating elements. dst[i] += src[i].
template <typename D, typename S>
__global__ void accumulate_flat_kernel(D* dst, const S* src, int64_t n) {
  using Acc = AccumulateType<D, S>;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    dst[i] = convert<D>(convert<Acc>(dst[i]) + convert<Acc>(src[i]));
  }
}

// dst, src: (n,) contiguous, 16-byte aligned. dst[i] += src[i] (Note [Flat packs]).
template <typename D, typename S>
__global__ void accumulate_packs_kernel(D* dst, const S* src, int64_t n) {
  using Acc = AccumulateType<D, S>;
  const int64_t packs = n / kFlatPack;
  for (int64_t q = first_index(); q < packs; q += grid_stride()) {
    FlatPack<D> y = reinterpret_cast<const FlatPack<D>*>(dst)[q];
    const FlatPack<S> x = reinterpret_cast<const FlatPack<S>*>(src)[q];
#pragma unroll
    for (int k = 0; k < kFlatPack; ++k) {
      y.e[k] = convert<D>(convert<Acc>(y.e[k]) + convert<Acc>(x.e[k]));
    }
    reinterpret_cast<FlatPack<D>*>(dst)[q] = y;
  }
  for (int64_t i = packs * kFlatPack + first_index(); i < n; i += grid_stride()) {
    dst[i] = convert<D>(convert<Acc>(dst[i]) + convert<Acc>(src[i]));
  }
}

// dst: (n,) floating elements. dst[i] = uniform from Philox counter offset + i.
template <typename T>
__global__ void random_uniform_kernel(T* dst, Geometry g, int64_t n, uint64_t seed, uint64_t offset,
                                      int bits, double low, double high) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t off[1];
    offsets_of<1>(g, i, off);
    const philox::Block b = philox::random_block(seed, offset + static_cast<uint64_t>(i));
    dst[off[0]] = convert<T>(philox::uniform_value(philox::low_u64(b), bits, low, high));
  }
}

// dst: (n,) floating elements. dst[i] = normal from Philox counter offset + i.
template <typename T>
__global__ void random_normal_kernel(T* dst, Geometry g, int64_t n, uint64_t seed, uint64_t offset,
                                     double mean, double std) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t off[1];
    offsets_of<1>(g, i, off);
    const philox::Block b = philox::random_block(seed, offset + static_cast<uint64_t>(i));
    dst[off[0]] = convert<T>(philox::normal_value(b, mean, std));
  }
}

// ---------------------------------------------------------------------------------------
// launchers

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with T the device type stored for `dtype`.
template <typename F>
void visit_device_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(Tag<float>{});
    case DType::f64: return f(Tag<double>{});
    case DType::f16: return f(Tag<__half>{});
    case DType::bf16: return f(Tag<__nv_bfloat16>{});
    case DType::i32: return f(Tag<int32_t>{});
    case DType::i64: return f(Tag<int64_t>{});
    case DType::boolean: return f(Tag<bool>{});
  }
  CG_FAIL("unknown dtype code ", static_cast<int>(dtype));
}

template <typename F>
void visit_floating_dtype(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::f32: return f(Tag<float>{});
    case DType::f64: return f(Tag<double>{});
    case DType::f16: return f(Tag<__half>{});
    case DType::bf16: return f(Tag<__nv_bfloat16>{});
    default: CG_FAIL(what, ": dtype ", dtype_name(dtype), " is not floating (f32, f64, f16, bf16)");
  }
}

template <size_t N>
Geometry geometry_of(const LoopNest<N>& loop, const char* what) {
  CG_CHECK(loop.dims() <= static_cast<size_t>(kMaxDims), what, ": ", loop.dims(),
           " dims remain after merging contiguous ones, but CUDA kernels take at most ", kMaxDims,
           "; make the tensor contiguous or reshape it to fewer dims first");
  Geometry g{};
  g.ndim = static_cast<int>(loop.dims());
  for (size_t d = 0; d < loop.dims(); ++d) {
    g.sizes[d] = loop.sizes[d];
    for (size_t k = 0; k < N; ++k) g.strides[k][d] = loop.strides[k][d];
  }
  return g;
}

constexpr int kThreads = 256;

// Enough blocks for one element per thread, capped: the kernels stride over the rest.
unsigned blocks_for(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(wanted, 1, 65536));
}

unsigned pack_blocks(int64_t n) { return blocks_for(n / kFlatPack + 1); }

template <size_t N>
bool is_flat(const LoopNest<N>& loop) {
  if (loop.dims() != 1) return false;
  for (size_t k = 0; k < N; ++k) {
    if (loop.strides[k][0] != 1) return false;
  }
  return true;
}

// Whether every element number below n and every operand offset fits in int32 (Note [Copy
// index math]): the largest offset an operand reaches is sum |stride| * (size - 1).
template <size_t N>
bool fits_32_bits(const LoopNest<N>& loop) {
  constexpr int64_t kMax = INT32_MAX;
  // (the grid-stride step is added to an element number below n: room for it too)
  if (loop.numel() >= kMax - int64_t{65536} * kThreads) return false;
  for (size_t k = 0; k < N; ++k) {
    int64_t reach = 0;
    for (size_t d = 0; d < loop.dims(); ++d) {
      reach +=
          (loop.strides[k][d] < 0 ? -loop.strides[k][d] : loop.strides[k][d]) * (loop.sizes[d] - 1);
    }
    if (reach >= kMax) return false;
  }
  return true;
}

}  // namespace

void launch_fill(void* dst, DType dtype, const LoopNest<1>& loop, double value, double step,
                 cudaStream_t stream) {
  const int64_t n = loop.numel();
  if (n == 0) return;
  if (step == 0.0 && value == 0.0 && !std::signbit(value) && is_flat(loop)) {
    // +0 is all-zero bits in every dtype.
    CG_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(n) * element_size(dtype), stream));
    return;
  }
  const Geometry g = geometry_of(loop, "fill");
  visit_device_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(dst), g, n, value, step);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_copy(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                 const LoopNest<2>& loop, cudaStream_t stream) {
  const int64_t n = loop.numel();
  if (n == 0) return;
  if (dst_dtype == src_dtype && is_flat(loop)) {
    CG_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * element_size(dst_dtype),
                                  cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const Geometry g = geometry_of(loop, "copy");
  const bool flat = is_flat(loop), small = fits_32_bits(loop);
  visit_device_dtype(dst_dtype, [&](auto dst_tag) {
    using D = typename decltype(dst_tag)::type;
    visit_device_dtype(src_dtype, [&](auto src_tag) {
      using S = typename decltype(src_tag)::type;
      auto* d = static_cast<D*>(dst);
      const auto* x = static_cast<const S*>(src);
      if (flat && packs_fit(d, x)) {
        copy_packs_kernel<D, S><<<pack_blocks(n), kThreads, 0, stream>>>(d, x, n);
      } else if (flat) {
        copy_flat_kernel<D, S><<<blocks_for(n), kThreads, 0, stream>>>(d, x, n);
      } else if (small) {
        copy_kernel<D, S, int32_t>
            <<<blocks_for(n), kThreads, 0, stream>>>(d, x, g, static_cast<int32_t>(n));
      } else {
        copy_kernel<D, S, int64_t><<<blocks_for(n), kThreads, 0, stream>>>(d, x, g, n);
      }
    });
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_accumulate(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                       const LoopNest<2>& loop, cudaStream_t stream) {
  const int64_t n = loop.numel();
  if (n == 0) return;
  const Geometry g = geometry_of(loop, "accumulate");
  const bool flat = is_flat(loop), small = fits_32_bits(loop);
  visit_floating_dtype(dst_dtype, "accumulate (destination)", [&](auto dst_tag) {
    using D = typename decltype(dst_tag)::type;
    visit_floating_dtype(src_dtype, "accumulate (source)", [&](auto src_tag) {
      using S = typename decltype(src_tag)::type;
      auto* d = static_cast<D*>(dst);
      const auto* x = static_cast<const S*>(src);
      if (flat && packs_fit(d, x)) {
        accumulate_packs_kernel<D, S><<<pack_blocks(n), kThreads, 0, stream>>>(d, x, n);
      } else if (flat) {
        accumulate_flat_kernel<D, S><<<blocks_for(n), kThreads, 0, stream>>>(d, x, n);
      } else if (small) {
        accumulate_kernel<D, S, int32_t>
            <<<blocks_for(n), kThreads, 0, stream>>>(d, x, g, static_cast<int32_t>(n));
      } else {
        accumulate_kernel<D, S, int64_t><<<blocks_for(n), kThreads, 0, stream>>>(d, x, g, n);
      }
    });
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_random_uniform(void* dst, DType dtype, const LoopNest<1>& loop, uint64_t seed,
                           uint64_t offset, int bits, double low, double high,
                           cudaStream_t stream) {
  const int64_t n = loop.numel();
  if (n == 0) return;
  const Geometry g = geometry_of(loop, "random_uniform");
  visit_floating_dtype(dtype, "random_uniform", [&](auto tag) {
    using T = typename decltype(tag)::type;
    random_uniform_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(dst), g, n,
                                                                     seed, offset, bits, low, high);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_random_normal(void* dst, DType dtype, const LoopNest<1>& loop, uint64_t seed,
                          uint64_t offset, double mean, double std, cudaStream_t stream) {
  const int64_t n = loop.numel();
  if (n == 0) return;
  const Geometry g = geometry_of(loop, "random_normal");
  visit_floating_dtype(dtype, "random_normal", [&](auto tag) {
    using T = typename decltype(tag)::type;
    random_normal_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(dst), g, n,
                                                                    seed, offset, mean, std);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
