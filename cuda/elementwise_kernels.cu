// Why this file exists: the CUDA elementwise kernels of the kernel table (see
// elementwise_kernels.h). One grid-stride kernel per entry, templated on the storage type
// only (the op is a uniform runtime switch: 4 instantiations per kernel instead of 56);
// every element is read through the compute type and rounded once on store, as the CPU.
#include "cuda/elementwise_kernels.h"

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"

namespace cg::cuda {

namespace {

// out, a, b: g.numel elements; g operands {out, a, b}.
template <typename T>
__global__ void binary_kernel(BinaryOp op, T* out, const T* a, const T* b, Strided g) {
  using C = compute_t<T>;
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[3];
    offsets_of<3>(g, i, o);
    st(out + o[0], apply_binary<C>(op, ld(a + o[1]), ld(b + o[2])));
  }
}

template <typename T>
__global__ void unary_kernel(UnaryOp op, T* out, const T* a, compute_t<T> s, Strided g) {
  using C = compute_t<T>;
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[2];
    offsets_of<2>(g, i, o);
    st(out + o[0], apply_unary<C>(op, ld(a + o[1]), s));
  }
}

template <typename T>
__global__ void where_kernel(T* out, const bool* cond, const T* a, const T* b, Strided g) {
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[4];
    offsets_of<4>(g, i, o);
    out[o[0]] = cond[o[1]] ? a[o[2]] : b[o[3]];
  }
}

template <typename T>
__global__ void inplace_kernel(InplaceOp op, T* dst, const T* src, compute_t<T> alpha, Strided g) {
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[2];
    offsets_of<2>(g, i, o);
    const compute_t<T> s = ld(src + o[1]);
    switch (op) {
      case InplaceOp::add: st(dst + o[0], ld(dst + o[0]) + alpha * s); break;
      case InplaceOp::mul: st(dst + o[0], ld(dst + o[0]) * s); break;
      case InplaceOp::copy: st(dst + o[0], s); break;
    }
  }
}

template <typename T>
__global__ void addcmul_kernel(T* dst, const T* a, const T* b, compute_t<T> v, bool divide,
                               Strided g) {
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[3];
    offsets_of<3>(g, i, o);
    const compute_t<T> x = ld(a + o[1]), y = ld(b + o[2]);
    st(dst + o[0], ld(dst + o[0]) + v * (divide ? x / y : x * y));
  }
}

template <typename C>
__device__ __forceinline__ C plain_sigmoid(C v) {
  return C(1) / (C(1) + m_exp(-v));
}

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, Strided g) {
  using C = compute_t<T>;
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[3];
    offsets_of<3>(g, i, o);
    const C a = ld(gate + o[1]);
    st(out + o[0], a * plain_sigmoid(a) * ld(up + o[2]));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* grad, const T* gate, const T* up, T* dgate, T* dup,
                                       Strided g) {
  using C = compute_t<T>;
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[5];
    offsets_of<5>(g, i, o);
    const C gr = ld(grad + o[0]), a = ld(gate + o[1]), u = ld(up + o[2]);
    const C s = plain_sigmoid(a);
    if (dgate) st(dgate + o[3], gr * u * s * (C(1) + a * (C(1) - s)));
    if (dup) st(dup + o[4], gr * a * s);
  }
}

}  // namespace

void launch_binary(BinaryOp op, DType dtype, void* out, const void* a, const void* b,
                   const Strided& g, cudaStream_t stream) {
  if (g.numel == 0) return;
  visit_floating(dtype, "binary op", [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_kernel<T><<<blocks_for(g.numel), kThreads, 0, stream>>>(
        op, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), g);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_unary(UnaryOp op, DType dtype, void* out, const void* a, double s, const Strided& g,
                  cudaStream_t stream) {
  if (g.numel == 0) return;
  visit_floating(dtype, "unary op", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_kernel<T><<<blocks_for(g.numel), kThreads, 0, stream>>>(
        op, static_cast<T*>(out), static_cast<const T*>(a), static_cast<compute_t<T>>(s), g);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_where(DType dtype, void* out, const bool* cond, const void* a, const void* b,
                  const Strided& g, cudaStream_t stream) {
  if (g.numel == 0) return;
  visit_floating(dtype, "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    where_kernel<T><<<blocks_for(g.numel), kThreads, 0, stream>>>(
        static_cast<T*>(out), cond, static_cast<const T*>(a), static_cast<const T*>(b), g);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_inplace(InplaceOp op, DType dtype, void* dst, const void* src, double alpha,
                    const Strided& g, cudaStream_t stream) {
  if (g.numel == 0) return;
  visit_floating(dtype, "in-place op", [&](auto tag) {
    using T = typename decltype(tag)::type;
    inplace_kernel<T><<<blocks_for(g.numel), kThreads, 0, stream>>>(
        op, static_cast<T*>(dst), static_cast<const T*>(src), static_cast<compute_t<T>>(alpha), g);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_addcmul(DType dtype, void* dst, const void* a, const void* b, double value,
                    bool divide, const Strided& g, cudaStream_t stream) {
  if (g.numel == 0) return;
  visit_floating(dtype, "addcmul_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    addcmul_kernel<T><<<blocks_for(g.numel), kThreads, 0, stream>>>(
        static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b),
        static_cast<compute_t<T>>(value), divide, g);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_swiglu_forward(DType dtype, void* out, const void* gate, const void* up,
                           const Strided& g, cudaStream_t stream) {
  if (g.numel == 0) return;
  visit_floating(dtype, "swiglu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    swiglu_forward_kernel<T><<<blocks_for(g.numel), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(gate), static_cast<const T*>(up), g);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_swiglu_backward(DType dtype, const void* grad, const void* gate, const void* up,
                            void* dgate, void* dup, const Strided& g, cudaStream_t stream) {
  if (g.numel == 0) return;
  visit_floating(dtype, "swiglu backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    swiglu_backward_kernel<T><<<blocks_for(g.numel), kThreads, 0, stream>>>(
        static_cast<const T*>(grad), static_cast<const T*>(gate), static_cast<const T*>(up),
        static_cast<T*>(dgate), static_cast<T*>(dup), g);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
