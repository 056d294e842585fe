// Why this file exists: autograd sits below ops (core <- autograd <- ops), yet the engine
// must add gradients and AccumulateGrad must reduce and add them in place. These three
// kernels are declared here and defined by ops/ (ops/gradient_math.cpp) on top of the
// same dispatched kernels every op uses, so autograd never includes an ops header.
// They record no graph and run on whatever device the tensors are on.
#pragma once

#include "core/tensor.h"

namespace cg::gradient_math {

// a + b, same shapes (a fresh tensor).
Tensor add(const Tensor& a, const Tensor& b);
// dst += src in place; src broadcastable to dst.
void add_into(const Tensor& dst, const Tensor& src);
// Sums g over the dims that numpy broadcasting expanded, giving `shape`.
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

}  // namespace cg::gradient_math
