// Why this file exists: the optimiser's device work -- the AdamW update and gradient
// clipping -- as ops that stay on the parameters' device. The clip coefficient is a
// 1-element device tensor that the update multiplies every gradient by (ops/kernels.h,
// adamw_step's grad_scale), so a training step never waits for the host to read the
// gradient norm; logging reads it after the step.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "ops/kernels.h"  // AdamWArgs

namespace cg {

// Checks the lists (one length; params floating; masters undefined or fp32 of params'
// shape; moments fp32 of params' shape, contiguous; grads of params' shape) and runs the
// device's adamw_step. Records no graph.
void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& masters,
                const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
                const std::vector<Tensor>& exp_avg_sqs, const Tensor& grad_scale,
                const AdamWArgs& args);

// sqrt(sum over every grad of sum(g^2) * scale^2) as a 1-element fp32 tensor on the grads'
// device (scale: a 1-element fp32 tensor or undefined for 1). Undefined grads are skipped.
Tensor global_grad_norm(const std::vector<Tensor>& grads, const Tensor& scale = Tensor());

// min(1, max_norm / (norm + 1e-6)) as a 1-element fp32 device tensor, from device ops only.
Tensor clip_coefficient(const Tensor& norm, double max_norm);

}  // namespace cg
