// Why this file exists: the CPU kernels of the elementwise ops (add, sub, mul, neg,
// scale, relu and their in-place forms), written once over strided_loop so that any
// strides (transposed, sliced, broadcast) work without a contiguous copy.
#include <algorithm>

#include "core/views.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/loops.h"

namespace cg::cpu {

namespace {

template <typename C>
inline C apply_binary(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::relu_backward: return b > C(0) ? a : C(0);
  }
  return C(0);
}

template <typename C>
inline C apply_unary(UnaryOp op, C a, C s) {
  switch (op) {
    case UnaryOp::neg: return -a;
    case UnaryOp::scale: return a * s;
    case UnaryOp::add_scalar: return a + s;
    case UnaryOp::relu: return a > C(0) ? a : C(0);
  }
  return C(0);
}

bool same_contiguous(const Tensor& t, const Shape& shape) {
  return t.shape() == shape && t.is_contiguous();
}

// Runs `per_op` with the op as a compile-time constant, so the switch leaves the loop.
template <typename Enum, Enum... ops, typename F>
void with_op(Enum op, F&& per_op) {
  ((op == ops ? per_op(std::integral_constant<Enum, ops>{}) : void()), ...);
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const Shape shape = raw::broadcast_shapes(a.shape(), b.shape());
  Tensor out = raw::empty(shape, a.dtype(), a.device());
  dispatch_floating(a.dtype(), "binary op", [&]<typename T>() {
    using C = compute_t<T>;
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    with_op<BinaryOp, BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::relu_backward>(
        op, [&](auto kind) {
          if (same_contiguous(a, shape) && same_contiguous(b, shape)) {
            const int64_t n = out.numel();
            for (int64_t i = 0; i < n; ++i) {
              store(po + i, apply_binary<C>(kind(), load(pa + i), load(pb + i)));
            }
            return;
          }
          strided_loop<3>(shape, {out.strides(), broadcast_strides(a, shape),
                                  broadcast_strides(b, shape)},
                          [&](const std::array<int64_t, 3>& o) {
                            store(po + o[0], apply_binary<C>(kind(), load(pa + o[1]), load(pb + o[2])));
                          });
        });
  });
  return out;
}

Tensor unary(UnaryOp op, const Tensor& a, double s) {
  Tensor out = raw::empty(a.shape(), a.dtype(), a.device());
  dispatch_floating(a.dtype(), "unary op", [&]<typename T>() {
    using C = compute_t<T>;
    const C scalar = static_cast<C>(s);
    const T* pa = static_cast<const T*>(a.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    with_op<UnaryOp, UnaryOp::neg, UnaryOp::scale, UnaryOp::add_scalar, UnaryOp::relu>(
        op, [&](auto kind) {
          if (a.is_contiguous()) {
            const int64_t n = a.numel();
            for (int64_t i = 0; i < n; ++i) store(po + i, apply_unary<C>(kind(), load(pa + i), scalar));
            return;
          }
          strided_loop<2>(a.shape(), {out.strides(), a.strides()},
                          [&](const std::array<int64_t, 2>& o) {
                            store(po + o[0], apply_unary<C>(kind(), load(pa + o[1]), scalar));
                          });
        });
  });
  return out;
}

void inplace(InplaceOp op, const Tensor& dst, const Tensor& src, double alpha) {
  dispatch_floating(dst.dtype(), "in-place op", [&]<typename T>() {
    using C = compute_t<T>;
    const C a = static_cast<C>(alpha);
    T* pd = static_cast<T*>(dst.data_ptr());
    const T* ps = static_cast<const T*>(src.data_ptr());
    strided_loop<2>(dst.shape(), {dst.strides(), broadcast_strides(src, dst.shape())},
                    [&](const std::array<int64_t, 2>& o) {
                      const C s = load(ps + o[1]);
                      switch (op) {
                        case InplaceOp::add: store(pd + o[0], load(pd + o[0]) + a * s); break;
                        case InplaceOp::mul: store(pd + o[0], load(pd + o[0]) * s); break;
                        case InplaceOp::copy: store(pd + o[0], s); break;
                      }
                    });
  });
}

void inplace_scalar(UnaryOp op, const Tensor& dst, double s) {
  dispatch_floating(dst.dtype(), "in-place op", [&]<typename T>() {
    using C = compute_t<T>;
    const C scalar = static_cast<C>(s);
    T* pd = static_cast<T*>(dst.data_ptr());
    strided_loop<1>(dst.shape(), {dst.strides()}, [&](const std::array<int64_t, 1>& o) {
      store(pd + o[0], apply_unary<C>(op, load(pd + o[0]), scalar));
    });
  });
}

void addcmul_(const Tensor& dst, const Tensor& a, const Tensor& b, double value, bool divide) {
  dispatch_floating(dst.dtype(), "addcmul_", [&]<typename T>() {
    using C = compute_t<T>;
    const C v = static_cast<C>(value);
    T* pd = static_cast<T*>(dst.data_ptr());
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    strided_loop<3>(dst.shape(), {dst.strides(), broadcast_strides(a, dst.shape()),
                                  broadcast_strides(b, dst.shape())},
                    [&](const std::array<int64_t, 3>& o) {
                      const C x = load(pa + o[1]), y = load(pb + o[2]);
                      store(pd + o[0], load(pd + o[0]) + v * (divide ? x / y : x * y));
                    });
  });
}

}  // namespace cg::cpu
