// Why this file exists: the CPU loops of the elementwise ops (binary and unary ops, the
// activations' backwards, where, and the in-place forms), written once over strided
// walks so that any strides (transposed, sliced, broadcast) work without a contiguous
// copy. What each op does to one element is in ops/elementwise_formulas.h (shared with the
// CUDA kernels); here is only how tensors are walked, and split between threads
// (cpu/parallel.h). These loops are the CPU table's elementwise entries themselves
// (CpuKernels, cpu/cpu_kernels.h).
#include <type_traits>

#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"
#include "cpu/parallel.h"
#include "ops/elementwise_formulas.h"

namespace cg::cpu {

using formulas::addcmul_of;
using formulas::apply_binary;
using formulas::apply_inplace;
using formulas::apply_unary;

namespace {

bool same_contiguous(const Tensor& t, const Shape& shape) {
  return t.shape() == shape && t.is_contiguous();
}

// Runs `per_op` with the op as a compile-time constant, so the switch leaves the loop.
template <typename Enum, Enum... ops, typename F>
void with_op(Enum op, F&& per_op) {
  ((op == ops ? per_op(std::integral_constant<Enum, ops>{}) : void()), ...);
}

template <typename F>
void with_binary_op(BinaryOp op, F&& per_op) {
  using B = BinaryOp;
  with_op<B, B::add, B::sub, B::mul, B::relu_backward, B::div, B::pow, B::xlogy, B::sqrt_backward,
          B::rsqrt_backward, B::tanh_backward, B::sigmoid_backward, B::silu_backward,
          B::gelu_backward, B::gelu_tanh_backward>(op, per_op);
}

template <typename F>
void with_unary_op(UnaryOp op, F&& per_op) {
  using U = UnaryOp;
  with_op<U, U::neg, U::scale, U::add_scalar, U::relu, U::exp, U::log, U::sqrt, U::rsqrt, U::pow,
          U::tanh, U::sigmoid, U::silu, U::gelu, U::gelu_tanh>(op, per_op);
}

}  // namespace

Tensor CpuKernels::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const Shape shape = raw::broadcast_shapes(a.shape(), b.shape());
  Tensor out = raw::empty(shape, a.dtype(), a.device());
  dispatch_floating(a.dtype(), "binary op", [&]<typename T>() {
    using C = compute_t<T>;
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    with_binary_op(op, [&](auto kind) {
      if (same_contiguous(a, shape) && same_contiguous(b, shape)) {
        const int64_t n = out.numel();
        parallel_range(n, n, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            store(po + i, apply_binary<C>(kind(), load(pa + i), load(pb + i)));
          }
        });
        return;
      }
      parallel_strided_loop<3>(
          shape, {out.strides(), broadcast_strides(a, shape), broadcast_strides(b, shape)},
          [&](const std::array<int64_t, 3>& o) {
            store(po + o[0], apply_binary<C>(kind(), load(pa + o[1]), load(pb + o[2])));
          });
    });
  });
  return out;
}

Tensor CpuKernels::unary(UnaryOp op, const Tensor& a, double s) {
  Tensor out = raw::empty(a.shape(), a.dtype(), a.device());
  dispatch_floating(a.dtype(), "unary op", [&]<typename T>() {
    using C = compute_t<T>;
    const C scalar = static_cast<C>(s);
    const T* pa = static_cast<const T*>(a.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    with_unary_op(op, [&](auto kind) {
      if (a.is_contiguous()) {
        const int64_t n = a.numel();
        parallel_range(n, n, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            store(po + i, apply_unary<C>(kind(), load(pa + i), scalar));
          }
        });
        return;
      }
      parallel_strided_loop<2>(a.shape(), {out.strides(), a.strides()},
                               [&](const std::array<int64_t, 2>& o) {
                                 store(po + o[0], apply_unary<C>(kind(), load(pa + o[1]), scalar));
                               });
    });
  });
  return out;
}

Tensor CpuKernels::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape shape =
      raw::broadcast_shapes(raw::broadcast_shapes(cond.shape(), a.shape()), b.shape());
  Tensor out = raw::empty(shape, a.dtype(), a.device());
  dispatch_floating(a.dtype(), "where", [&]<typename T>() {
    const bool* pc = static_cast<const bool*>(cond.data_ptr());
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    // Values are copied as stored (no compute type): where never rounds.
    parallel_strided_loop<4>(
        shape,
        {out.strides(), broadcast_strides(cond, shape), broadcast_strides(a, shape),
         broadcast_strides(b, shape)},
        [&](const std::array<int64_t, 4>& o) { po[o[0]] = pc[o[1]] ? pa[o[2]] : pb[o[3]]; });
  });
  return out;
}

void CpuKernels::inplace(InplaceOp op, const Tensor& dst, const Tensor& src, double alpha) {
  dispatch_floating(dst.dtype(), "in-place op", [&]<typename T>() {
    using C = compute_t<T>;
    const C a = static_cast<C>(alpha);
    T* pd = static_cast<T*>(dst.data_ptr());
    const T* ps = static_cast<const T*>(src.data_ptr());
    parallel_strided_loop<2>(dst.shape(), {dst.strides(), broadcast_strides(src, dst.shape())},
                             [&](const std::array<int64_t, 2>& o) {
                               store(pd + o[0],
                                     apply_inplace<C>(op, load(pd + o[0]), load(ps + o[1]), a));
                             });
  });
}

void CpuKernels::inplace_scalar(UnaryOp op, const Tensor& dst, double s) {
  dispatch_floating(dst.dtype(), "in-place op", [&]<typename T>() {
    using C = compute_t<T>;
    const C scalar = static_cast<C>(s);
    T* pd = static_cast<T*>(dst.data_ptr());
    with_unary_op(op, [&](auto kind) {
      parallel_strided_loop<1>(dst.shape(), {dst.strides()}, [&](const std::array<int64_t, 1>& o) {
        store(pd + o[0], apply_unary<C>(kind(), load(pd + o[0]), scalar));
      });
    });
  });
}

void CpuKernels::addcmul(const Tensor& dst, const Tensor& a, const Tensor& b, double value,
                         bool divide) {
  dispatch_floating(dst.dtype(), "addcmul_", [&]<typename T>() {
    using C = compute_t<T>;
    const C v = static_cast<C>(value);
    T* pd = static_cast<T*>(dst.data_ptr());
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    parallel_strided_loop<3>(
        dst.shape(),
        {dst.strides(), broadcast_strides(a, dst.shape()), broadcast_strides(b, dst.shape())},
        [&](const std::array<int64_t, 3>& o) {
          store(pd + o[0],
                addcmul_of<C>(load(pd + o[0]), load(pa + o[1]), load(pb + o[2]), v, divide));
        });
  });
}

}  // namespace cg::cpu
