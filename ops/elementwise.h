// Why this file exists: the differentiable elementwise ops and the Tensor operators.
// Binary ops broadcast like numpy; their backward sums each gradient back to its
// input's shape. Inputs must share a device and a floating dtype (no silent promotion).
#pragma once

#include "core/tensor.h"

namespace cg {

Tensor add(const Tensor& a, const Tensor& b);  // saves nothing
Tensor sub(const Tensor& a, const Tensor& b);  // saves nothing
Tensor mul(const Tensor& a, const Tensor& b);  // saves b for a's grad, a for b's grad
Tensor neg(const Tensor& a);                   // saves nothing
Tensor scale(const Tensor& a, double s);       // a * s; saves nothing
Tensor add_scalar(const Tensor& a, double s);  // a + s; saves nothing
Tensor relu(const Tensor& a);                  // saves its output (the mask's source)

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(const Tensor& a, double s);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(const Tensor& a, double s);

}  // namespace cg
