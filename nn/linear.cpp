// Why this file exists: Linear's PyTorch-style initialisation (under
// MemoryCategory::parameter, from a seeded generator) and its one-GEMM forward.
#include "nn/linear.h"

#include <cmath>

#include "nn/init_mode.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"

namespace cg::nn {

// ---- Linear ----------------------------------------------------------------------

Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions options)
    : Module("Linear"), in_(in_features), out_(out_features) {
  CG_CHECK(in_features > 0 && out_features > 0, "Linear: in_features (", in_features,
           ") and out_features (", out_features, ") must be positive");
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  CategoryGuard category(MemoryCategory::parameter);
  if (options.shared_weight.defined()) {
    CG_CHECK(options.shared_weight.shape() == (Shape{out_features, in_features}),
             "Linear: the shared weight is ", shape_str(options.shared_weight.shape()),
             " but a Linear(", in_features, " -> ", out_features, ") needs [", out_features, ", ",
             in_features, "]");
    weight = options.shared_weight;
  } else if (SkipParameterInit::active()) {  // Note [Uninitialized parameters]
    weight = empty({out_features, in_features}, options.init.tensor_options());
  } else {
    weight = rand({out_features, in_features}, options.init.tensor_options(),
                  options.init.generator, -bound, bound);
    count_parameter_init();
  }
  register_parameter("weight", &weight);
  if (options.bias) {
    if (SkipParameterInit::active()) {
      bias = empty({out_features}, options.init.tensor_options());
    } else {
      bias = rand({out_features}, options.init.tensor_options(), options.init.generator, -bound,
                  bound);
      count_parameter_init();
    }
    register_parameter("bias", &bias);
  }
}

Tensor Linear::forward(const Tensor& x) const {
  auto scope = enter_scope();
  CG_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_, "Linear(", in_, " -> ", out_, ") '",
           name(), "': the input's last dim must be ", in_, ", got shape ",
           x.defined() ? shape_str(x.shape()) : "undefined");
  return linear(x, weight, bias);
}

}  // namespace cg::nn
