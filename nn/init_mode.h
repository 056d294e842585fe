// Why this file exists: a model whose every parameter a checkpoint load fills next (a
// frozen target) should not draw initial values first.
//
// Note [Uninitialized parameters]: inside a SkipParameterInit scope, module constructors
// (Linear, Embedding, RMSNorm) allocate each parameter in the InitOptions dtype on its
// device and write nothing, so an 8B target is neither drawn at random on the host
// (minutes) nor held there in f32 (32 GB) on its way to the GPU. The values are garbage
// until the load; accelerate's init_empty_weights() plays the same part for PyTorch.
//
//   {
//     cg::nn::SkipParameterInit no_init;
//     lm = std::make_unique<cg::nn::Qwen3ForCausalLM>(config, {.dtype = bf16, .device = gpu});
//   }
//   cg::nn::load_checkpoint(*lm, dir, {.convert_dtype = true});
#pragma once

#include <cstdint>

namespace cg::nn {

// RAII, per thread, nestable: while one is alive, parameters are allocated uninitialised.
class SkipParameterInit {
 public:
  SkipParameterInit();
  ~SkipParameterInit();
  SkipParameterInit(const SkipParameterInit&) = delete;
  SkipParameterInit& operator=(const SkipParameterInit&) = delete;
  // Whether the calling thread is inside one (the constructors ask).
  static bool active();

 private:
  bool previous_;
};

// How many parameter tensors module constructors have written initial values into (random
// or constant) in this process. Tests read it around a load to check that no init ran.
int64_t parameter_inits();
// The constructors' side of parameter_inits(): one parameter tensor was initialised.
void count_parameter_init();

}  // namespace cg::nn
