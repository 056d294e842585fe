// Why this file exists: the loss vocabulary of chunkgrad, in one home. The kinds of
// lm_head loss (LossKind), their names as users type them and as messages print them,
// what each one reads (teacher logits, labels), and the option struct (LossConfig) shared
// by the logits-level loss ops (cross_entropy, kl_div), the three head-loss paths and every
// backend's row kernel, so that one option struct means the same thing everywhere. Every
// front end (the train config, memory_lesson, the benches) parses and lists kinds through
// the functions below instead of keeping its own list. What each kind computes per row
// (loss and gradient) is written down once in ops/loss_row_math.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cg {

// Note [Adding a loss kind]: a new kind is an enumerator here and its row in kLossKinds
// (enum order); then the row math in ops/loss_row_math.h (its formula and, if it has one,
// its weight in loss_row_terms), the CPU row kernel (cpu/head_loss_rows.cpp) and the CUDA
// one (cuda/head_loss_kernels.cu), and its case in train/drafter_step.cpp's
// drafter_loss_config. The library builds with -Werror=switch, so every switch over
// LossKind that lacks the new case (loss_kind_info, the kernels, drafter_loss_config)
// stops the build and points at what is left to write. Names, parsing, the CLI choices
// and the train config's accepted kinds follow from the row; the tests that run every
// kind (tests/loss_test.cpp's gradient checks, tests/dflash_train_test.cpp's config map)
// iterate over kLossKinds and pick the new one up.
enum class LossKind : int8_t {
  cross_entropy,       // hard labels
  forward_kl,          // KL(teacher || student)
  reverse_kl,          // KL(student || teacher)
  soft_cross_entropy,  // -sum p_teacher log q_student (forward KL's gradient)
};

struct LossKindInfo {
  LossKind kind;
  const char* short_name;  // what users type: CLI flags and config files ("kl")
  const char* name;        // what messages and JSON print ("forward_kl")
  bool needs_teacher;      // reads teacher logits
  bool needs_labels;       // reads labels on its own (a teacher kind mixed with hard CE does too)
  const char* summary;     // one line for --help and docs
};

// Every kind, in enum order (loss_config.cpp checks the order at compile time).
inline constexpr LossKindInfo kLossKinds[] = {
    {LossKind::cross_entropy, "ce", "cross_entropy", false, true, "cross-entropy with hard labels"},
    {LossKind::forward_kl, "kl", "forward_kl", true, false, "KL(teacher || student)"},
    {LossKind::reverse_kl, "rkl", "reverse_kl", true, false, "KL(student || teacher)"},
    {LossKind::soft_cross_entropy, "soft_ce", "soft_cross_entropy", true, false,
     "-sum p_teacher log q_student (forward KL's gradient)"},
};

const LossKindInfo& loss_kind_info(LossKind kind);
const char* loss_kind_name(LossKind kind);        // "forward_kl"
const char* loss_kind_short_name(LossKind kind);  // "kl"
// The kind of a short or long name ("kl" or "forward_kl"). Throws naming `what` (e.g.
// "--loss" or "train config: drafter.loss.kind") and listing the accepted names.
LossKind parse_loss_kind(std::string_view name, std::string_view what = "loss kind");
// The short names in enum order, for CLI validators ({"ce", "kl", "rkl", "soft_ce"}).
std::vector<std::string> loss_kind_short_names();
// The short names joined by `separator` ("ce | kl | rkl | soft_ce"), for help and messages.
std::string loss_kind_choices(std::string_view separator = " | ");

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

inline bool loss_needs_teacher(const LossConfig& c) { return loss_kind_info(c.kind).needs_teacher; }
inline bool loss_needs_labels(const LossConfig& c) {
  return loss_kind_info(c.kind).needs_labels || c.hard_ce_weight != 0.0f;
}

// Throws naming `op` when an option of the loss is out of range (temperature, label
// smoothing, softcap, z-loss, mix weight). Every path checks the same way.
void check_loss_config(const char* op, const LossConfig& config);

// The loss as messages name it: "cross_entropy", "forward_kl", or "forward_kl mixed with
// hard CE" when a teacher kind's hard_ce_weight is on (so "... needs labels" says why).
std::string loss_description(const LossConfig& config);

}  // namespace cg
