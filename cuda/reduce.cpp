// Why this file exists: the CUDA table's reductions and row entries (CudaKernels,
// cuda/cuda_kernels.h): sum, max/argmax, logsumexp, max's backward, softmax and its
// backward, rms_norm and rotary. Each builds the geometry of its rows (the dim taken out)
// or of its kept/reduced dims and calls the launcher beside its kernel in
// cuda/reduce_kernels.cu or cuda/norm_kernels.cu; scratch buffers come from the caching
// allocator.
#include "core/memory_trace.h"
#include "core/views.h"
#include "cuda/cuda_kernels.h"
#include "cuda/launch_helpers.h"
#include "cuda/norm_kernels.h"
#include "cuda/reduce_kernels.h"
#include "ops/kernel_shapes.h"

namespace cg::cuda {

namespace {

Shape with_dim_one(Shape shape, int64_t dim) {
  shape[static_cast<size_t>(dim)] = 1;
  return shape;
}

Tensor scratch(int64_t n, DType dtype, Device device) {
  CategoryGuard temporary(MemoryCategory::temporary);
  return raw::empty({n}, dtype, device);
}

}  // namespace

Tensor CudaKernels::sum(const Tensor& a, const std::vector<bool>& reduce, bool keepdim,
                        double scale) {
  const ReductionSplit split = split_reduction(a, reduce, keepdim);
  const Shape& kept_shape = split.kept_shape;
  const Shape& reduced_shape = split.reduced_shape;
  Tensor out = raw::empty(split.out_shape, a.dtype(), a.device());
  const Strided kept =
      strided_of<2>(kept_shape, {&split.kept_strides, &split.out_kept_strides}, "sum");
  const Strided reduced = strided_of<1>(reduced_shape, {&split.reduced_strides}, "sum");
  const bool coalesced = kept.strides[0][kept.ndim - 1] == 1;
  const SumPlan plan = sum_plan(kept.numel, reduced.numel, coalesced);
  const Tensor partial =
      plan.splits > 1 ? scratch(kept.numel * plan.splits, DType::f64, a.device()) : Tensor();
  launch_sum(a.dtype(), a.data_ptr(), out.data_ptr(), kept, reduced, scale,
             plan.splits > 1 ? partial.data<double>() : nullptr, plan, stream_of(a));
  return out;
}

Tensor CudaKernels::sum_of_squares(const Tensor& a) {
  Tensor out = raw::empty({}, compute_dtype_of(a.dtype()), a.device());
  const Tensor partial = scratch(kSquaresBlocks, DType::f64, a.device());
  launch_sum_of_squares(a.dtype(), a.data_ptr(), a.numel(), out.data_ptr(), partial.data<double>(),
                        stream_of(a));
  return out;
}

Tensor CudaKernels::max_along_dim(const Tensor& a, int64_t dim, Tensor* values) {
  const Shape kept = with_dim_one(a.shape(), dim);
  Tensor indices = raw::empty(kept, DType::i64, a.device());
  if (values) *values = raw::empty(kept, a.dtype(), a.device());
  const Strided rows =
      strided_of<3>(kept, {&a.strides(), &indices.strides(), &indices.strides()}, "max");
  launch_max_rows(a.dtype(), a.data_ptr(), indices.data<int64_t>(),
                  values ? values->data_ptr() : nullptr, rows, a.shape()[dim], a.strides()[dim],
                  stream_of(a));
  return indices;
}

Tensor CudaKernels::logsumexp_along_dim(const Tensor& a, int64_t dim) {
  const Shape kept = with_dim_one(a.shape(), dim);
  Tensor out = raw::empty(kept, a.dtype(), a.device());
  const Strided rows = strided_of<2>(kept, {&a.strides(), &out.strides()}, "logsumexp");
  launch_logsumexp_rows(a.dtype(), a.data_ptr(), out.data_ptr(), rows, a.shape()[dim],
                        a.strides()[dim], stream_of(a));
  return out;
}

Tensor CudaKernels::scatter_along_dim(const Tensor& src, const Tensor& index, int64_t dim,
                                      const Shape& shape) {
  Tensor out = raw::empty(shape, src.dtype(), src.device());
  raw::fill_(out, 0.0);
  const Strided rows =
      strided_of<3>(with_dim_one(shape, dim), {&out.strides(), &src.strides(), &index.strides()},
                    "scatter_along_dim");
  launch_scatter_rows(src.dtype(), out.data_ptr(), src.data_ptr(), index.data<int64_t>(), rows,
                      out.strides()[dim], stream_of(src));
  return out;
}

Tensor CudaKernels::softmax(const Tensor& a, int64_t dim, bool log) {
  Tensor out = raw::empty(a.shape(), a.dtype(), a.device());
  const Strided rows =
      strided_of<2>(with_dim_one(a.shape(), dim), {&a.strides(), &out.strides()}, "softmax");
  launch_softmax_rows(a.dtype(), log, a.data_ptr(), out.data_ptr(), rows, a.shape()[dim],
                      a.strides()[dim], out.strides()[dim], stream_of(a));
  return out;
}

Tensor CudaKernels::softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log) {
  Tensor out = raw::empty(y.shape(), y.dtype(), y.device());
  const Strided rows =
      strided_of<3>(with_dim_one(y.shape(), dim), {&grad.strides(), &y.strides(), &out.strides()},
                    "softmax_backward");
  launch_softmax_backward_rows(y.dtype(), log, grad.data_ptr(), y.data_ptr(), out.data_ptr(), rows,
                               y.shape()[dim], grad.strides()[dim], y.strides()[dim],
                               out.strides()[dim], stream_of(y));
  return out;
}

RmsNormForward CudaKernels::rms_norm_forward(const Tensor& x, const Tensor& weight, double eps) {
  const int64_t D = x.shape().back();
  const Shape lead = with_dim_one(x.shape(), x.dim() - 1);
  const Strided rows = strided_of<2>(lead, {&x.strides(), &x.strides()}, "rms_norm");
  RmsNormForward result{raw::empty(x.shape(), x.dtype(), x.device()),
                        raw::empty({rows.numel}, compute_dtype_of(x.dtype()), x.device())};
  const bool has_w = weight.defined();
  launch_rms_norm_forward(x.dtype(), x.data_ptr(), has_w ? weight.data_ptr() : nullptr,
                          result.out.data_ptr(), result.rstd.data_ptr(), rows, D,
                          x.strides().back(), has_w ? weight.strides()[0] : 0, eps, stream_of(x));
  return result;
}

RmsNormGrads CudaKernels::rms_norm_backward(const Tensor& grad, const Tensor& x,
                                            const Tensor& weight, const Tensor& rstd, bool need_dx,
                                            bool need_dweight) {
  const int64_t D = x.shape().back();
  const Shape lead = with_dim_one(x.shape(), x.dim() - 1);
  const Strided rows = strided_of<2>(lead, {&x.strides(), &grad.strides()}, "rms_norm backward");
  RmsNormGrads grads;
  if (need_dx) grads.dx = raw::empty(x.shape(), x.dtype(), x.device());
  Tensor partial;
  const int splits = rms_norm_dweight_splits(rows.numel, D);
  if (need_dweight) {
    grads.dweight = raw::empty({D}, x.dtype(), x.device());
    partial = scratch(static_cast<int64_t>(splits) * D, DType::f64, x.device());
  }
  const bool has_w = weight.defined();
  launch_rms_norm_backward(
      x.dtype(), grad.data_ptr(), x.data_ptr(), has_w ? weight.data_ptr() : nullptr,
      rstd.data_ptr(), need_dx ? grads.dx.data_ptr() : nullptr,
      need_dweight ? grads.dweight.data_ptr() : nullptr,
      need_dweight ? partial.data<double>() : nullptr, splits, rows, D, x.strides().back(),
      grad.strides().back(), has_w ? weight.strides()[0] : 0, stream_of(x));
  return grads;
}

Tensor CudaKernels::rotary(const Tensor& x, const Tensor& positions, double theta, bool inverse) {
  const int64_t hd = x.shape().back();
  const Shape lead(x.shape().begin(), x.shape().end() - 1);  // [..., S, H]
  const Shape x_lead(x.strides().begin(), x.strides().end() - 1);
  Tensor out = raw::empty(x.shape(), x.dtype(), x.device());
  const Shape out_lead(out.strides().begin(), out.strides().end() - 1);
  const Tensor pos_col = raw::unsqueeze(positions, positions.dim());
  const Shape pos_strides = broadcast_strides_of(pos_col, lead);
  const Strided rows = strided_of<3>(lead, {&x_lead, &out_lead, &pos_strides}, "apply_rotary");
  launch_rotary(x.dtype(), x.data_ptr(), out.data_ptr(), positions.data<int64_t>(), rows, hd,
                x.strides().back(), theta, inverse, stream_of(x));
  return out;
}

}  // namespace cg::cuda
