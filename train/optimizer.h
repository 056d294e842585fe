// Why this file exists: the training recipe's optimiser -- AdamW on fp32 master weights
// (the model may compute in bf16), a warmup + cosine learning rate, global-norm gradient
// clipping and gradient accumulation -- kept device-neutral: the update is one kernel
// entry (ops/optim.h) and the clip coefficient a device tensor, so step() never reads a
// value back to the host. Logging reads last_grad_norm() after the step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"
#include "ops/kernels.h"

namespace cg::train {

// lr at optimiser step `step` (1-based) of `total`: linear warmup to base_lr over
// warmup_steps, then cosine from base_lr to base_lr * min_ratio at the last step.
double warmup_cosine_lr(int64_t step, int64_t total, int64_t warmup_steps, double base_lr,
                        double min_ratio);

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  double grad_clip = 1.0;  // max global norm; 0 = off
  // The update's arguments at learning rate `lr` and (1-based) step `step`.
  AdamWArgs args(double lr, int64_t step) const {
    return {.lr = lr,
            .beta1 = beta1,
            .beta2 = beta2,
            .eps = eps,
            .weight_decay = weight_decay,
            .step = step};
  }
};

class AdamW {
 public:
  // params: the trainable leaves (any floating dtype); a non-f32 parameter gets an fp32
  // master copy, which the update works on.
  AdamW(std::vector<Tensor> params, AdamWOptions options);

  // One update with `lr` from the accumulated grads, each multiplied by grad_multiplier
  // (1 / micro-batches for accumulation of mean losses) and the clip coefficient.
  // Parameters without a grad are skipped this step. Grads are cleared afterwards.
  void step(double lr, double grad_multiplier = 1.0);
  int64_t steps_taken() const { return step_; }
  // The global grad norm before clipping of the last step (reads the device: call after).
  Tensor last_grad_norm_tensor() const { return last_norm_; }  // on the device, not read
  double last_grad_norm() const;

  // Optimiser state by name ("exp_avg.3", "exp_avg_sq.3", "master.3") plus the step count,
  // for checkpoints; load checks shapes and count.
  std::vector<std::pair<std::string, Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, int64_t step);
  const std::vector<Tensor>& params() const { return params_; }

 private:
  std::vector<Tensor> params_, masters_, exp_avg_, exp_avg_sq_;
  AdamWOptions options_;
  int64_t step_ = 0;
  Tensor last_norm_;
};

}  // namespace cg::train
