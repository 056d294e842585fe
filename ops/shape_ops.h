// Why this file exists: the differentiable views and conversions. Views share storage
// with their input and save nothing but shapes; their backward maps the gradient back
// (transpose back, reshape back, scatter a slice into zeros, sum an expand). They are
// free functions, not Tensor methods, so that core/ does not depend on ops/ (the
// Layering paragraph of core/tensor.h).
#pragma once

#include "core/tensor.h"

namespace cg {

Tensor reshape(const Tensor& t, const Shape& shape);  // view when strides allow, else copy
Tensor view(const Tensor& t, const Shape& shape);     // view, or a clear error
Tensor transpose(const Tensor& t, int64_t d0, int64_t d1);
Tensor permute(const Tensor& t, const Shape& dims);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor expand(const Tensor& t, const Shape& shape);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor contiguous(const Tensor& t);                // t itself when already contiguous
Tensor to_dtype(const Tensor& t, DType dtype);     // t itself when the dtype matches
Tensor to_device(const Tensor& t, Device device);  // t itself when the device matches
// PyTorch's x.to(...) spelled as a free function: cg::to(x, DType::f64), cg::to(x, kCPU).
inline Tensor to(const Tensor& t, DType dtype) { return to_dtype(t, dtype); }
inline Tensor to(const Tensor& t, Device device) { return to_device(t, device); }

}  // namespace cg
