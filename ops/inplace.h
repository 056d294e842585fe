// Why this file exists: in-place updates for optimisers and gradient bookkeeping. They
// record no graph, so they refuse (with a clear error) to run on tensors that require
// grad while grad mode is on: call them under cg::NoGradGuard, as optimisers do.
// `src` operands broadcast to dst's shape and must share its dtype and device.
#pragma once

#include "core/tensor.h"

namespace cg {

void add_(const Tensor& dst, const Tensor& src, double alpha = 1.0);  // dst += alpha * src
void mul_(const Tensor& dst, const Tensor& src);                      // dst *= src
void mul_(const Tensor& dst, double s);                               // dst *= s
void add_scalar_(const Tensor& dst, double s);                        // dst += s
void copy_(const Tensor& dst, const Tensor& src);                     // dst = src
void fill_(const Tensor& dst, double value);
void zero_(const Tensor& dst);
void addcmul_(const Tensor& dst, const Tensor& a, const Tensor& b,
              double value = 1.0);  // dst += value*a*b
void addcdiv_(const Tensor& dst, const Tensor& a, const Tensor& b,
              double value = 1.0);  // dst += value*a/b

}  // namespace cg
