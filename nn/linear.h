// Why this file exists: the linear layer, the module nearly every parameter of a
// transformer lives in, and the parameter-init options all modules share.
#pragma once

#include <cstdint>

#include "core/factories.h"
#include "nn/module.h"

namespace cg::nn {

// Parameter dtype/device and the seeded generator their initial values come from.
struct InitOptions {
  DType dtype = DType::f32;
  Device device{};
  Generator* generator = nullptr;  // nullptr: cg::default_generator()
  TensorOptions tensor_options() const { return {.dtype = dtype, .device = device}; }
};

struct LinearOptions {
  bool bias = false;
  InitOptions init{};
  // Use this [out, in] tensor as the weight instead of making one (tied lm_head: the
  // embedding's weight). It is shared, not copied; nothing is allocated.
  Tensor shared_weight{};
};

// y = x W^T (+ b).  weight [out, in], bias [out]; x [..., in] -> [..., out].
// Init as PyTorch's nn.Linear: kaiming-uniform with a = sqrt(5), i.e. W and b uniform
// in [-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});
  Tensor forward(const Tensor& x) const;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  Tensor weight;
  Tensor bias;  // undefined without bias

 private:
  int64_t in_, out_;
};

}  // namespace cg::nn
