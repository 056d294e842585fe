// Why this file exists: the description of an lm_head loss, shared by the logits-level
// loss ops (cross_entropy, kl_div), the three head-loss paths and every backend's row
// kernel, so that one option struct means the same thing everywhere.
#pragma once

#include <cstdint>

namespace cg {

enum class LossKind : int8_t {
  cross_entropy,       // hard labels
  forward_kl,          // KL(teacher || student)
  reverse_kl,          // KL(student || teacher)
  soft_cross_entropy,  // -sum p_teacher log q_student (forward KL's gradient)
};
const char* loss_kind_name(LossKind kind);

enum class Reduction : int8_t { none, sum, mean };

struct LossConfig {
  LossKind kind = LossKind::cross_entropy;
  int64_t ignore_index = -100;   // a row with this label contributes nothing
  float label_smoothing = 0.0f;  // eps, hard CE only
  float z_loss = 0.0f;           // coefficient of lse^2 (PaLM), hard CE only
  float softcap = 0.0f;          // logits -> c tanh(logits / c) (Gemma); 0 = off
  float temperature = 1.0f;      // teacher losses
  float hard_ce_weight = 0.0f;   // teacher losses: loss = a CE + (1 - a) teacher loss
  bool hinton_scale = false;     // teacher losses: multiply by temperature^2
};

inline bool loss_needs_teacher(const LossConfig& c) { return c.kind != LossKind::cross_entropy; }
inline bool loss_needs_labels(const LossConfig& c) {
  return c.kind == LossKind::cross_entropy || c.hard_ce_weight != 0.0f;
}

}  // namespace cg
