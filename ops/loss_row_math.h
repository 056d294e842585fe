// Why this file exists: what every backend's row kernel computes, per loss kind, written
// once and for no device in particular. The CPU kernel (cpu/head_loss_rows.cpp) and the
// CUDA one (cuda/head_loss_kernels.cu) implement this spec; they differ in how they walk a
// row, not in what they compute, and both read their per-row weights from
// loss_row_terms() below. docs/fused_loss.md derives the formulas.
//
// One row of student logits z [V] (raw: z_raw), optionally the teacher's t [V] and a
// label y. Every kind computes the per-row loss l and, when asked, g * dl/dz_raw written
// over z (g: the row's grad_scale, 1 when none).
//
//   softcap c (c > 0):  z = c tanh(z_raw / c), t likewise; dz/dz_raw = 1 - (z/c)^2
//   cross_entropy (eps = label_smoothing, zl = z_loss; lse = logsumexp(z)):
//       l     = lse - (1-eps) z_y - eps/V sum_j z_j + zl lse^2
//       dl/dz = softmax(z)(1 + 2 zl lse) - (1-eps) onehot(y) - eps/V
//   teacher kinds (tau = temperature; p = softmax(t/tau), q = softmax(z/tau)):
//     forward_kl          l = sum p (log p - log q)        dl/dz = (q - p) / tau
//     soft_cross_entropy  l = -sum p log q                 dl/dz = (q - p) / tau
//     reverse_kl          l = sum q (log q - log p)        dl/dz = q ((log q - log p) - l) / tau
//     Hinton scaling multiplies the teacher loss and its gradient by tau^2.
//   hard-CE mix (a = hard_ce_weight, teacher kinds only):
//       l = a CE + (1 - a) teacher loss, and the gradient mixes the same way;
//       CE here runs at temperature 1, with the smoothing and z-loss above.
//   metrics: lse (tau = 1), argmax and entropy of softmax(z), the teacher's argmax
//       (teacher kinds), all of the softcapped logits.
//   ignore_index: a row whose label is ignore_index has loss 0 and gradient 0.
//
// Precision: sums over V accumulate in double (or in float lanes added into double per
// block: Note [Row sums], cpu/row_math.h); row constants such as lse_teacher - lse_student
// are differenced in double, so a near-zero KL keeps its digits in float.
#pragma once

#include "ops/loss_config.h"

namespace cg {

// The per-row weights of a loss, the same numbers for every backend (computed in
// double on the host, before a kernel runs).
struct LossRowTerms {
  bool want_ce = false;       // the row has a hard-CE part (reads labels)
  bool want_teacher = false;  // the row has a teacher part (reads teacher logits)
  double ce_weight = 0.0;     // weight of the CE part: 1 for cross_entropy, a for a mix
  double kl_weight = 0.0;     // weight of the teacher part: 1 - a
  double kl_scale = 1.0;      // tau^2 with Hinton scaling, else 1
  double tau = 1.0, inv_tau = 1.0;
};

inline LossRowTerms loss_row_terms(const LossConfig& c) {
  LossRowTerms r;
  r.want_ce = loss_needs_labels(c);
  r.want_teacher = loss_needs_teacher(c);
  r.ce_weight = r.want_teacher ? c.hard_ce_weight : 1.0;
  r.kl_weight = r.want_teacher ? 1.0 - c.hard_ce_weight : 0.0;
  r.tau = c.temperature;
  r.inv_tau = 1.0 / r.tau;
  r.kl_scale = c.hinton_scale ? r.tau * r.tau : 1.0;
  return r;
}

// A row kernel's own checks on what it was handed (the ops check shapes and ranges
// before): teacher logits for a teacher kind, labels for CE, a positive temperature.
void check_loss_row_inputs(const LossConfig& config, bool has_teacher, bool has_labels);

}  // namespace cg
