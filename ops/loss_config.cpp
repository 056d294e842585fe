// Why this file exists: the loss vocabulary's functions (ops/loss_config.h) -- the kind
// table's lookups, parsing and listing of names -- and the checks every loss path and row
// kernel share (ops/loss_row_math.h).
#include "ops/loss_config.h"

#include <cmath>
#include <iterator>

#include "core/error.h"
#include "ops/loss_row_math.h"

namespace cg {

namespace {

constexpr bool table_in_enum_order() {
  for (size_t i = 0; i < std::size(kLossKinds); ++i) {
    if (static_cast<size_t>(kLossKinds[i].kind) != i) return false;
  }
  return true;
}
static_assert(table_in_enum_order(),
              "kLossKinds (ops/loss_config.h) must list the kinds in enum order");

}  // namespace

const LossKindInfo& loss_kind_info(LossKind kind) {
  // One case per kind and no default: a kind added to the enum without a case here stops
  // the build (-Werror=switch), a reminder that it needs its row in kLossKinds (Note
  // [Adding a loss kind]).
  switch (kind) {
    case LossKind::cross_entropy:
    case LossKind::forward_kl:
    case LossKind::reverse_kl:
    case LossKind::soft_cross_entropy: {
      const size_t row = static_cast<size_t>(kind);
      CG_CHECK(row < std::size(kLossKinds), "loss kind ", row,
               " has no row in kLossKinds (ops/loss_config.h)");
      return kLossKinds[row];
    }
  }
  CG_FAIL("loss kind ", static_cast<int>(kind), " is not a LossKind");
}

const char* loss_kind_name(LossKind kind) { return loss_kind_info(kind).name; }
const char* loss_kind_short_name(LossKind kind) { return loss_kind_info(kind).short_name; }

LossKind parse_loss_kind(std::string_view name, std::string_view what) {
  for (const LossKindInfo& k : kLossKinds) {
    if (name == k.short_name || name == k.name) return k.kind;
  }
  std::string accepted;
  for (const LossKindInfo& k : kLossKinds) {
    accepted += accepted.empty() ? "" : ", ";
    accepted += std::string(k.short_name) + " (" + k.name + ")";
  }
  CG_FAIL(what, ": unknown loss kind '", name, "'; expected one of ", accepted);
}

std::vector<std::string> loss_kind_short_names() {
  std::vector<std::string> names;
  for (const LossKindInfo& k : kLossKinds) names.emplace_back(k.short_name);
  return names;
}

std::string loss_kind_choices(std::string_view separator) {
  std::string out;
  for (const LossKindInfo& k : kLossKinds) {
    if (!out.empty()) out += separator;
    out += k.short_name;
  }
  return out;
}

void check_loss_config(const char* op, const LossConfig& c) {
  CG_CHECK(c.temperature > 0.0f && std::isfinite(c.temperature), op,
           ": temperature must be > 0 (and finite), got ", c.temperature);
  CG_CHECK(c.label_smoothing >= 0.0f && c.label_smoothing <= 1.0f, op,
           ": label_smoothing must be in [0, 1], got ", c.label_smoothing);
  CG_CHECK(c.softcap >= 0.0f && std::isfinite(c.softcap), op,
           ": softcap must be >= 0 (0 = off; finite), got ", c.softcap);
  CG_CHECK(c.z_loss >= 0.0f && std::isfinite(c.z_loss), op,
           ": z_loss must be >= 0 (0 = off; finite), got ", c.z_loss);
  CG_CHECK(c.hard_ce_weight >= 0.0f && c.hard_ce_weight <= 1.0f, op,
           ": hard_ce_weight must be in [0, 1], got ", c.hard_ce_weight);
}

std::string loss_description(const LossConfig& c) {
  const LossKindInfo& k = loss_kind_info(c.kind);
  return std::string(k.name) +
         (k.needs_labels || c.hard_ce_weight == 0.0f ? "" : " mixed with hard CE");
}

void check_loss_row_inputs(const LossConfig& c, bool has_teacher, bool has_labels) {
  CG_CHECK(!loss_needs_teacher(c) || has_teacher, "head loss: ", loss_kind_name(c.kind),
           " needs teacher logits");
  CG_CHECK(!loss_needs_labels(c) || has_labels, "head loss: ", loss_description(c),
           " needs labels");
  CG_CHECK(c.temperature > 0.0f, "head loss: temperature must be > 0, got ", c.temperature);
}

}  // namespace cg
