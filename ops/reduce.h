// Why this file exists: the differentiable reductions. Their backward broadcasts the
// gradient back over the reduced dims (an expanded view: no copy, nothing saved).
#pragma once

#include "core/tensor.h"

namespace cg {

Tensor sum(const Tensor& a);                                         // all -> shape []
Tensor sum(const Tensor& a, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& a);                                        // all -> shape []
Tensor mean(const Tensor& a, const Shape& dims, bool keepdim = false);

// Sums g over the dims numpy broadcasting expanded to turn `shape` into g's shape (the
// backward of every broadcasting op). g itself when the shapes already match.
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

}  // namespace cg
