// Why this file exists: the differentiable Tensor methods declared at the end of
// core/tensor.h, so that x.reshape(...) records the same graph as cg::reshape(x, ...).
#include "core/tensor.h"
#include "ops/shape_ops.h"

namespace cg {

Tensor Tensor::reshape(const Shape& shape) const { return cg::reshape(*this, shape); }
Tensor Tensor::view(const Shape& shape) const { return cg::view(*this, shape); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return cg::transpose(*this, d0, d1); }
Tensor Tensor::permute(const Shape& dims) const { return cg::permute(*this, dims); }
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return cg::narrow(*this, dim, start, length);
}
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return cg::slice(*this, dim, start, end, step);
}
Tensor Tensor::expand(const Shape& shape) const { return cg::expand(*this, shape); }
Tensor Tensor::contiguous() const { return cg::contiguous(*this); }
Tensor Tensor::to(DType dtype) const { return cg::to_dtype(*this, dtype); }
Tensor Tensor::to(Device device) const { return cg::to_device(*this, device); }

}  // namespace cg
