// Why this file exists: the CUDA half of the kernel table's adamw_step entry (declared in
// ops/kernels.h by the drafter's branch; the lead wires CudaKernels::adamw_step to this
// free function when merging): a fused AdamW over many tensors with optional fp32 master
// weights, launched as few multi-tensor kernels (cuda/adamw_kernels.h) on the compute
// stream, never synchronising.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace cg::cuda {

struct CudaAdamWArgs {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;
};

// For each i: g = grads[i] * (grad_scale[0] if defined); m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g^2; w -= lr * (m/(1-b1^step) / (sqrt(v/(1-b2^step)) + eps) + wd * w)
// in fp32 on masters[i] when defined (then params[i] = cast(master)), else on params[i]
// directly. masters may be empty (none). All tensors contiguous on one CUDA device;
// exp_avgs, exp_avg_sqs and masters f32; params and grads floating, grads[i] of params[i]'s
// numel.
void cuda_adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& masters,
                     const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
                     const std::vector<Tensor>& exp_avg_sqs, const Tensor& grad_scale,
                     const CudaAdamWArgs& args);

}  // namespace cg::cuda
