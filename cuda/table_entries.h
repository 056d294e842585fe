// Why this file exists: the tensor-level halves of the CUDA kernel table's entries
// (ops/kernels.h): each checks nothing the op layer already checked, allocates its
// outputs through the caching allocator, builds the launch geometry and calls a launcher
// of cuda/*_kernels.h on the device's compute stream. cuda_kernels.cpp puts them in the
// table; they live in table_*.cpp by family.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/kernels.h"

namespace cg::cuda {

// Makes t's device current and returns its compute stream (Note [One compute stream]).
cudaStream_t stream_of(const Tensor& t);
// Strides of t viewed at `shape` under numpy broadcasting (0 where broadcast).
Shape broadcast_strides_of(const Tensor& t, const Shape& shape);

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor unary(UnaryOp op, const Tensor& a, double s);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
void inplace(InplaceOp op, const Tensor& dst, const Tensor& src, double alpha);
void inplace_scalar(UnaryOp op, const Tensor& dst, double s);
void addcmul(const Tensor& dst, const Tensor& a, const Tensor& b, double value, bool divide);
Tensor swiglu_forward(const Tensor& gate, const Tensor& up);
SwigluGrads swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                            bool need_dgate, bool need_dup);

Tensor sum(const Tensor& a, const std::vector<bool>& reduce, bool keepdim, double scale);
Tensor max_along_dim(const Tensor& a, int64_t dim, Tensor* values);
Tensor logsumexp_along_dim(const Tensor& a, int64_t dim);
Tensor scatter_along_dim(const Tensor& src, const Tensor& index, int64_t dim, const Shape& shape);
Tensor softmax(const Tensor& a, int64_t dim, bool log);
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log);
RmsNormForward rms_norm_forward(const Tensor& x, const Tensor& weight, double eps);
RmsNormGrads rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd, bool need_dx, bool need_dweight);
Tensor rotary(const Tensor& x, const Tensor& positions, double theta, bool inverse);

void head_loss_rows(const HeadRowsArgs& args);
void check_labels(const Tensor& labels, int64_t vocab, int64_t ignore_index);
void row_weights(const Tensor& labels, const Tensor& weights, int64_t ignore_index,
                 bool normalize, const Tensor& out);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& idx);
void index_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src, int64_t skip);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& idx);
void scatter_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src);
void check_indices(const char* op, const char* noun, const Tensor& idx, int64_t bound,
                   const std::string& what);

}  // namespace cg::cuda
