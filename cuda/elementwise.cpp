// Why this file exists: the CUDA table's elementwise and swiglu entries (CudaKernels,
// cuda/cuda_kernels.h): output allocation and the broadcast geometry, then the launcher
// beside its kernel in cuda/elementwise_kernels.cu. Any strides work without a contiguous
// copy. Also the two launch helpers every family uses (cuda/launch_helpers.h).
#include "core/views.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_kernels.h"
#include "cuda/elementwise_kernels.h"
#include "cuda/launch_helpers.h"

namespace cg::cuda {

cudaStream_t stream_of(const Tensor& t) {
  CG_CUDA_CHECK(cudaSetDevice(t.device().index));
  return current_stream(t.device().index);
}

Shape broadcast_strides_of(const Tensor& t, const Shape& shape) {
  const size_t nd = shape.size(), td = t.shape().size();
  Shape strides(nd, 0);
  for (size_t i = 0; i < td; ++i) {
    const size_t o = nd - td + i;
    strides[o] = (t.shape()[i] == 1 && shape[o] != 1) ? 0 : t.strides()[i];
  }
  return strides;
}

Tensor CudaKernels::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const Shape shape = raw::broadcast_shapes(a.shape(), b.shape());
  Tensor out = raw::empty(shape, a.dtype(), a.device());
  const Shape sa = broadcast_strides_of(a, shape), sb = broadcast_strides_of(b, shape);
  const Strided g = strided_of<3>(shape, {&out.strides(), &sa, &sb}, "binary op");
  launch_binary(op, a.dtype(), out.data_ptr(), a.data_ptr(), b.data_ptr(), g, stream_of(a));
  return out;
}

Tensor CudaKernels::unary(UnaryOp op, const Tensor& a, double s) {
  Tensor out = raw::empty(a.shape(), a.dtype(), a.device());
  const Strided g = strided_of<2>(a.shape(), {&out.strides(), &a.strides()}, "unary op");
  launch_unary(op, a.dtype(), out.data_ptr(), a.data_ptr(), s, g, stream_of(a));
  return out;
}

Tensor CudaKernels::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape shape =
      raw::broadcast_shapes(raw::broadcast_shapes(cond.shape(), a.shape()), b.shape());
  Tensor out = raw::empty(shape, a.dtype(), a.device());
  const Shape sc = broadcast_strides_of(cond, shape), sa = broadcast_strides_of(a, shape),
              sb = broadcast_strides_of(b, shape);
  const Strided g = strided_of<4>(shape, {&out.strides(), &sc, &sa, &sb}, "where");
  launch_where(a.dtype(), out.data_ptr(), static_cast<const bool*>(cond.data_ptr()), a.data_ptr(),
               b.data_ptr(), g, stream_of(a));
  return out;
}

void CudaKernels::inplace(InplaceOp op, const Tensor& dst, const Tensor& src, double alpha) {
  const Shape ss = broadcast_strides_of(src, dst.shape());
  const Strided g = strided_of<2>(dst.shape(), {&dst.strides(), &ss}, "in-place op");
  launch_inplace(op, dst.dtype(), dst.data_ptr(), src.data_ptr(), alpha, g, stream_of(dst));
}

void CudaKernels::inplace_scalar(UnaryOp op, const Tensor& dst, double s) {
  const Strided g = strided_of<2>(dst.shape(), {&dst.strides(), &dst.strides()}, "in-place op");
  launch_unary(op, dst.dtype(), dst.data_ptr(), dst.data_ptr(), s, g, stream_of(dst));
}

void CudaKernels::addcmul(const Tensor& dst, const Tensor& a, const Tensor& b, double value,
                          bool divide) {
  const Shape sa = broadcast_strides_of(a, dst.shape()), sb = broadcast_strides_of(b, dst.shape());
  const Strided g = strided_of<3>(dst.shape(), {&dst.strides(), &sa, &sb}, "addcmul_");
  launch_addcmul(dst.dtype(), dst.data_ptr(), a.data_ptr(), b.data_ptr(), value, divide, g,
                 stream_of(dst));
}

Tensor CudaKernels::swiglu_forward(const Tensor& gate, const Tensor& up) {
  Tensor out = raw::empty(gate.shape(), gate.dtype(), gate.device());
  const Strided g =
      strided_of<3>(gate.shape(), {&out.strides(), &gate.strides(), &up.strides()}, "swiglu");
  launch_swiglu_forward(gate.dtype(), out.data_ptr(), gate.data_ptr(), up.data_ptr(), g,
                        stream_of(gate));
  return out;
}

SwigluGrads CudaKernels::swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                                         bool need_dgate, bool need_dup) {
  SwigluGrads grads;
  if (need_dgate) grads.dgate = raw::empty(gate.shape(), gate.dtype(), gate.device());
  if (need_dup) grads.dup = raw::empty(up.shape(), up.dtype(), up.device());
  const Shape zero(gate.dim(), 0);
  const Shape& sdg = need_dgate ? grads.dgate.strides() : zero;
  const Shape& sdu = need_dup ? grads.dup.strides() : zero;
  const Strided g =
      strided_of<5>(gate.shape(), {&grad.strides(), &gate.strides(), &up.strides(), &sdg, &sdu},
                    "swiglu backward");
  launch_swiglu_backward(gate.dtype(), grad.data_ptr(), gate.data_ptr(), up.data_ptr(),
                         need_dgate ? grads.dgate.data_ptr() : nullptr,
                         need_dup ? grads.dup.data_ptr() : nullptr, g, stream_of(gate));
  return grads;
}

}  // namespace cg::cuda
