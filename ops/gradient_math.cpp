// Why this file exists: ops/ provides the three kernels autograd declares in
// autograd/gradient_math.h (autograd cannot include ops headers; see there).
#include "autograd/gradient_math.h"

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/inplace.h"
#include "ops/reduce.h"

namespace cg::gradient_math {

Tensor add(const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;
  return cg::add(a, b);
}

void add_into(const Tensor& dst, const Tensor& src) {
  NoGradGuard no_grad;
  cg::add_(dst, src, 1.0);
}

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  NoGradGuard no_grad;
  return cg::sum_to_shape(g, shape);
}

}  // namespace cg::gradient_math
