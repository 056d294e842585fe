// Why this file exists: the differentiable reductions, and argmax. sum and mean save
// nothing (their backward broadcasts the gradient back as an expanded view); max saves
// its indices; logsumexp saves its input and output. `dim` may be negative (counts from
// the end); keepdim keeps reduced dims as size 1. The overall forms reduce every dim to
// a 0-d tensor. Definitions in ops/reduce.cpp, kernels in each device's table (ops/kernels.h).
#pragma once

#include "core/tensor.h"

namespace cg {

Tensor sum(const Tensor& a);  // all -> shape []
Tensor sum(const Tensor& a, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& a);  // all -> shape []
Tensor mean(const Tensor& a, const Shape& dims, bool keepdim = false);

// The maxima along a dim and where they are (i64, into that dim). The gradient goes to
// the argmax position of each row only (the first one on ties; a NaN is the maximum).
// Saves the indices (8 bytes an output element), not the input.
struct MaxResult {
  Tensor values;
  Tensor indices;
};
MaxResult max(const Tensor& a, int64_t dim, bool keepdim = false);
// The largest element, shape []; the gradient goes to its first position in row-major
// order. Saves a 0-d index.
Tensor max(const Tensor& a);

// Index of the maximum along a dim, i64, first on ties (not differentiable; records no
// graph). The overall form indexes the row-major flattening of a, shape [].
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& a);

// log(sum(exp(a))) along a dim, numerically stable (shifted by the row max: logits of
// 1e4 do not overflow; an all -inf row gives -inf). Saves its input and its output; the
// backward recomputes softmax = exp(a - out) from them: g * exp(a - out).
Tensor logsumexp(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor logsumexp(const Tensor& a);  // over every element, shape []

// Sums g over the dims numpy broadcasting expanded to turn `shape` into g's shape (the
// backward of every broadcasting op). g itself when the shapes already match.
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

}  // namespace cg
