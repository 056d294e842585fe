// Why this file exists: the CUDA elementwise kernels of the kernel table (see
// elementwise_kernels.h). One grid-stride kernel per entry, templated on the storage type
// only (the op is a uniform runtime switch: 4 instantiations per kernel instead of 56);
// every element is read through the compute type and rounded once on store, as the CPU.
// Contiguous operands take flat kernels with 16-byte accesses (Note [Flat packs]).
#include "cuda/elementwise_kernels.h"

#include <cstdint>
#include <initializer_list>

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
    st(dst + o[0], apply_inplace<compute_t<T>>(op, ld(dst + o[0]), ld(src + o[1]), alpha));
  }
}

template <typename T>
__global__ void addcmul_kernel(T* dst, const T* a, const T* b, compute_t<T> v, bool divide,
                               Strided g) {
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[3];
    offsets_of<3>(g, i, o);
    st(dst + o[0], addcmul_of<compute_t<T>>(ld(dst + o[0]), ld(a + o[1]), ld(b + o[2]), v, divide));
  }
}

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, Strided g) {
  using C = compute_t<T>;
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[3];
    offsets_of<3>(g, i, o);
    st(out + o[0], swiglu_of<C>(ld(gate + o[1]), ld(up + o[2])));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* grad, const T* gate, const T* up, T* dgate, T* dup,
                                       Strided g) {
  using C = compute_t<T>;
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[5];
    offsets_of<5>(g, i, o);
    C da, du;
    swiglu_grads_of<C>(ld(grad + o[0]), ld(gate + o[1]), ld(up + o[2]), da, du);
    if (dgate) st(dgate + o[3], da);
    if (dup) st(dup + o[4], du);
  }
}

// ---- flat kernels: every operand contiguous and 16-byte aligned ----------------------
// Note [Flat packs]: the common case (contiguous tensors of one shape) reads and writes 16
// bytes per access (8 bf16/f16, 4 f32, 2 f64) with no index arithmetic; the n % P tail
// runs element by element. Same formulas, same rounding as the strided kernels.

template <typename T>
inline constexpr int kPackOf = static_cast<int>(16 / sizeof(T));

template <typename T>
__global__ void binary_flat_kernel(BinaryOp op, T* out, const T* a, const T* b, int64_t n) {
  using C = compute_t<T>;
  constexpr int P = kPackOf<T>;
  const int64_t packs = n / P;
  for (int64_t q = first_index(); q < packs; q += grid_stride()) {
    C va[P], vb[P], vo[P];
    load_pack<T, P>(a + q * P, va);
    load_pack<T, P>(b + q * P, vb);
#pragma unroll
    for (int k = 0; k < P; ++k) vo[k] = apply_binary<C>(op, va[k], vb[k]);
    store_pack<T, P>(out + q * P, vo);
  }
  for (int64_t i = packs * P + first_index(); i < n; i += grid_stride()) {
    st(out + i, apply_binary<C>(op, ld(a + i), ld(b + i)));
  }
}

template <typename T>
__global__ void unary_flat_kernel(UnaryOp op, T* out, const T* a, compute_t<T> s, int64_t n) {
  using C = compute_t<T>;
  constexpr int P = kPackOf<T>;
  const int64_t packs = n / P;
  for (int64_t q = first_index(); q < packs; q += grid_stride()) {
    C va[P], vo[P];
    load_pack<T, P>(a + q * P, va);
#pragma unroll
    for (int k = 0; k < P; ++k) vo[k] = apply_unary<C>(op, va[k], s);
    store_pack<T, P>(out + q * P, vo);
  }
  for (int64_t i = packs * P + first_index(); i < n; i += grid_stride()) {
    st(out + i, apply_unary<C>(op, ld(a + i), s));
  }
}

template <typename T>
__global__ void swiglu_forward_flat_kernel(T* out, const T* gate, const T* up, int64_t n) {
  using C = compute_t<T>;
  constexpr int P = kPackOf<T>;
  const int64_t packs = n / P;
  for (int64_t q = first_index(); q < packs; q += grid_stride()) {
    C va[P], vu[P], vo[P];
    load_pack<T, P>(gate + q * P, va);
    load_pack<T, P>(up + q * P, vu);
#pragma unroll
    for (int k = 0; k < P; ++k) vo[k] = swiglu_of<C>(va[k], vu[k]);
    store_pack<T, P>(out + q * P, vo);
  }
  for (int64_t i = packs * P + first_index(); i < n; i += grid_stride()) {
    st(out + i, swiglu_of<C>(ld(gate + i), ld(up + i)));
  }
}

template <typename T>
__global__ void swiglu_backward_flat_kernel(const T* grad, const T* gate, const T* up, T* dgate,
                                            T* dup, int64_t n) {
  using C = compute_t<T>;
  constexpr int P = kPackOf<T>;
  const int64_t packs = n / P;
  for (int64_t q = first_index(); q < packs; q += grid_stride()) {
    C vg[P], va[P], vu[P], da[P], du[P];
    load_pack<T, P>(grad + q * P, vg);
    load_pack<T, P>(gate + q * P, va);
    load_pack<T, P>(up + q * P, vu);
#pragma unroll
    for (int k = 0; k < P; ++k) swiglu_grads_of<C>(vg[k], va[k], vu[k], da[k], du[k]);
    if (dgate) store_pack<T, P>(dgate + q * P, da);
    if (dup) store_pack<T, P>(dup + q * P, du);
  }
  for (int64_t i = packs * P + first_index(); i < n; i += grid_stride()) {
    C da, du;
    swiglu_grads_of<C>(ld(grad + i), ld(gate + i), ld(up + i), da, du);
    if (dgate) st(dgate + i, da);
    if (dup) st(dup + i, du);
  }
}

// g is one loop with unit strides in every operand whose pointer is given (null: not
// used), and each such pointer is 16-byte aligned: the flat kernels apply.
bool is_flat(const Strided& g, std::initializer_list<const void*> operands) {
  if (g.ndim != 1) return false;
  int k = 0;
  for (const void* p : operands) {
    if (p != nullptr && (g.strides[k][0] != 1 || reinterpret_cast<uintptr_t>(p) % 16 != 0)) {
      return false;
    }
    ++k;
  }
  return true;
}

unsigned flat_blocks(int64_t n, size_t elem) {
  return blocks_for(n / static_cast<int64_t>(16 / elem) + 1);
}

}  // namespace

void launch_binary(BinaryOp op, DType dtype, void* out, const void* a, const void* b,
                   const Strided& g, cudaStream_t stream) {
  if (g.numel == 0) return;
  visit_floating(dtype, "binary op", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (is_flat(g, {out, a, b})) {
      binary_flat_kernel<T><<<flat_blocks(g.numel, sizeof(T)), kThreads, 0, stream>>>(
          op, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), g.numel);
      return;
    }
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
    if (is_flat(g, {out, a})) {
      unary_flat_kernel<T><<<flat_blocks(g.numel, sizeof(T)), kThreads, 0, stream>>>(
          op, static_cast<T*>(out), static_cast<const T*>(a), static_cast<compute_t<T>>(s),
          g.numel);
      return;
    }
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

void launch_addcmul(DType dtype, void* dst, const void* a, const void* b, double value, bool divide,
                    const Strided& g, cudaStream_t stream) {
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
    if (is_flat(g, {out, gate, up})) {
      swiglu_forward_flat_kernel<T><<<flat_blocks(g.numel, sizeof(T)), kThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(gate), static_cast<const T*>(up), g.numel);
      return;
    }
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
    if (is_flat(g, {grad, gate, up, dgate, dup})) {
      swiglu_backward_flat_kernel<T><<<flat_blocks(g.numel, sizeof(T)), kThreads, 0, stream>>>(
          static_cast<const T*>(grad), static_cast<const T*>(gate), static_cast<const T*>(up),
          static_cast<T*>(dgate), static_cast<T*>(dup), g.numel);
      return;
    }
    swiglu_backward_kernel<T><<<blocks_for(g.numel), kThreads, 0, stream>>>(
        static_cast<const T*>(grad), static_cast<const T*>(gate), static_cast<const T*>(up),
        static_cast<T*>(dgate), static_cast<T*>(dup), g);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
