// Why this file exists: the losses on materialised logits -- cross_entropy and kl_div as
// users of PyTorch know them, and row_losses underneath, which also returns the metrics
// (argmax, logsumexp, entropy, teacher argmax) from the same pass. These are the
// "ordinary ops" of the naive and chunked head-loss paths (ops/head_loss.h); the fused
// path calls the same row kernel without ever materialising [T, V].
//
// What the graph keeps: row_losses saves the logits (and the teacher logits and labels
// when given) -- [N, V] -- and recomputes the gradient from them in backward. That is
// exactly the memory the fused path avoids.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "ops/loss_config.h"

namespace cg {

struct RowLosses {
  Tensor loss;            // [N] per-row loss; f64 for f64 logits, else f32; differentiable
  Tensor lse;             // [N] logsumexp of the (softcapped) logits   (with_metrics only)
  Tensor entropy;         // [N] entropy of softmax(logits), nats         (with_metrics only)
  Tensor argmax;          // [N] i64                                      (with_metrics only)
  Tensor teacher_argmax;  // [N] i64, teacher losses only                 (with_metrics only)
};

// logits [N, V] (f32, f64, bf16, f16); labels [N] i64 (needed by hard CE and by a mix);
// teacher_logits [N, V] like logits (needed by the teacher losses; a constant target: no
// gradient flows to it). Computes in f32 (f64 for f64 logits).
RowLosses row_losses(const Tensor& logits, const Tensor& labels, const Tensor& teacher_logits,
                     const LossConfig& config, bool with_metrics = false);

// Reduces per-row losses [N] with optional per-row weights [N] (constants: no gradient):
//   none: w * l (or l);  sum: sum w l;  mean: sum w l / sum w,
// where rows whose label is ignore_index have weight 0 (labels may be undefined). A mean
// over zero total weight is 0, not NaN (a batch with nothing to learn from).
Tensor reduce_rows(const Tensor& per_row, const Tensor& weights, const Tensor& labels,
                   int64_t ignore_index, Reduction reduction);

// The factor each row's loss is multiplied by in a sum or mean reduction (w_i, or
// w_i / sum w over rows not ignored; 0 on ignored rows): [n] of `dtype` on `device`,
// computed there. A constant (no graph).
Tensor row_reduction_weights(int64_t n, const Tensor& weights, const Tensor& labels,
                             int64_t ignore_index, Reduction reduction, DType dtype, Device device);

struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  float label_smoothing = 0.0f;
  float z_loss = 0.0f;
  float softcap = 0.0f;
  Tensor weights;  // [N] per-token weights, optional
  Reduction reduction = Reduction::mean;
};
// logits [N, V], labels [N] i64.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels,
                     const CrossEntropyOptions& options = {});

struct KlDivOptions {
  bool reverse = false;  // false: KL(teacher || student); true: KL(student || teacher)
  float temperature = 1.0f;
  bool hinton_scale = false;  // multiply by temperature^2
  Tensor weights;             // [N] per-token weights, optional
  Reduction reduction = Reduction::mean;
};
// Both arguments are logits [N, V]: the student's (gets the gradient) and the teacher's.
Tensor kl_div(const Tensor& logits, const Tensor& teacher_logits, const KlDivOptions& options = {});

}  // namespace cg
