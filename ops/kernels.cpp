// Why this file exists: the registry of per-device kernel tables (ops/kernels.h) and the
// defaults of every entry, which say clearly that a device lacks the entry instead of
// crashing, so that a backend can be filled in one entry at a time.
#include "ops/kernels.h"

#include <array>
#include <atomic>

namespace cg {

namespace {

// One slot per device type (device_slot, core/device.h).
std::array<std::atomic<DeviceKernels*>, kDeviceTypeCount>& tables() {
  static std::array<std::atomic<DeviceKernels*>, kDeviceTypeCount> t{};  // C++20: all nullptr
  return t;
}

}  // namespace

void DeviceKernels::missing(const char* entry) const {
  CG_FAIL("kernel ", entry, " is not implemented on ", device_type_name(type()),
          " yet; run this op on the host (cg::to(t, cg::kCPU))");
}

const std::vector<std::string>& kernel_entry_names() {
  static const std::vector<std::string> names = {"binary",
                                                 "unary",
                                                 "where",
                                                 "inplace",
                                                 "inplace_scalar",
                                                 "addcmul",
                                                 "sum",
                                                 "sum_of_squares",
                                                 "max_along_dim",
                                                 "logsumexp_along_dim",
                                                 "scatter_along_dim",
                                                 "softmax",
                                                 "softmax_backward",
                                                 "head_logits_dtype",
                                                 "head_loss_rows",
                                                 "check_labels",
                                                 "row_weights",
                                                 "matmul",
                                                 "gemm",
                                                 "gemm_scratch_bytes",
                                                 "side_streams",
                                                 "stream_wait",
                                                 "rms_norm_forward",
                                                 "rms_norm_backward",
                                                 "rotary",
                                                 "swiglu_forward",
                                                 "swiglu_backward",
                                                 "gated_delta_rule",
                                                 "causal_conv1d",
                                                 "moe_route",
                                                 "moe_experts",
                                                 "attention_forward",
                                                 "attention_backward",
                                                 "index_select",
                                                 "index_add",
                                                 "gather",
                                                 "scatter_add",
                                                 "check_indices",
                                                 "adamw_step"};
  return names;
}

void register_kernels(DeviceKernels* table) {
  CG_CHECK(table != nullptr, "register_kernels: the table is null");
  tables()[device_slot(table->type())].store(table);
}

DeviceKernels* find_kernels(DeviceType type) { return tables()[device_slot(type)].load(); }

DeviceKernels* replace_kernels(DeviceType type, DeviceKernels* table) {
  CG_CHECK(table == nullptr || table->type() == type, "replace_kernels: a ",
           device_type_name(table->type()), " table cannot serve ", device_type_name(type));
  return tables()[device_slot(type)].exchange(table);
}

DeviceKernels& kernels_for(Device device, const char* op) {
  DeviceKernels* table = find_kernels(device.type);
  if (table == nullptr) {
    CG_FAIL("op ", op, " is not implemented on ", device.str(), " yet: this build has no ",
            device_type_name(device.type), " kernels; run it on the host (cg::to(t, cg::kCPU))");
  }
  return *table;
}

// ---- defaults: the entry is missing on this device --------------------------------------

Tensor DeviceKernels::binary(BinaryOp, const Tensor&, const Tensor&) { missing("binary"); }
Tensor DeviceKernels::unary(UnaryOp, const Tensor&, double) { missing("unary"); }
Tensor DeviceKernels::where(const Tensor&, const Tensor&, const Tensor&) { missing("where"); }
void DeviceKernels::inplace(InplaceOp, const Tensor&, const Tensor&, double) { missing("inplace"); }
void DeviceKernels::inplace_scalar(UnaryOp, const Tensor&, double) { missing("inplace_scalar"); }
void DeviceKernels::addcmul(const Tensor&, const Tensor&, const Tensor&, double, bool) {
  missing("addcmul");
}
Tensor DeviceKernels::sum(const Tensor&, const std::vector<bool>&, bool, double) { missing("sum"); }
Tensor DeviceKernels::sum_of_squares(const Tensor&) { missing("sum_of_squares"); }
Tensor DeviceKernels::max_along_dim(const Tensor&, int64_t, Tensor*) { missing("max_along_dim"); }
Tensor DeviceKernels::logsumexp_along_dim(const Tensor&, int64_t) {
  missing("logsumexp_along_dim");
}
Tensor DeviceKernels::scatter_along_dim(const Tensor&, const Tensor&, int64_t, const Shape&) {
  missing("scatter_along_dim");
}
Tensor DeviceKernels::softmax(const Tensor&, int64_t, bool) { missing("softmax"); }
Tensor DeviceKernels::softmax_backward(const Tensor&, const Tensor&, int64_t, bool) {
  missing("softmax_backward");
}
DType DeviceKernels::head_logits_dtype(DType input) const { return compute_dtype_of(input); }
void DeviceKernels::head_loss_rows(const HeadRowsArgs&) { missing("head_loss_rows"); }
void DeviceKernels::check_labels(const Tensor&, int64_t, int64_t) { missing("check_labels"); }
void DeviceKernels::row_weights(const Tensor&, const Tensor&, int64_t, bool, const Tensor&) {
  missing("row_weights");
}
Tensor DeviceKernels::matmul(const Tensor&, const Tensor&) { missing("matmul"); }
void DeviceKernels::gemm(const Tensor&, const Tensor&, const Tensor&, double, double) {
  missing("gemm");
}
size_t DeviceKernels::gemm_scratch_bytes(const GemmDesc&) const { return 0; }
// One queue (Note [Side streams]): no side streams, and nothing to order.
int DeviceKernels::side_streams() const { return 0; }
void DeviceKernels::stream_wait(Device, StreamId, StreamId) {}
RmsNormForward DeviceKernels::rms_norm_forward(const Tensor&, const Tensor&, double) {
  missing("rms_norm_forward");
}
RmsNormGrads DeviceKernels::rms_norm_backward(const Tensor&, const Tensor&, const Tensor&,
                                              const Tensor&, bool, bool) {
  missing("rms_norm_backward");
}
Tensor DeviceKernels::rotary(const Tensor&, const Tensor&, double, bool) { missing("rotary"); }
Tensor DeviceKernels::gated_delta_rule(const GatedDeltaArgs&) { missing("gated_delta_rule"); }
Tensor DeviceKernels::causal_conv1d(const Tensor&, const Tensor&, const Tensor&, bool) {
  missing("causal_conv1d");
}
MoeRouting DeviceKernels::moe_route(const Tensor&, int64_t) { missing("moe_route"); }
Tensor DeviceKernels::moe_experts(const Tensor&, const Tensor&, const Tensor&, const MoeRouting&) {
  missing("moe_experts");
}
Tensor DeviceKernels::swiglu_forward(const Tensor&, const Tensor&) { missing("swiglu_forward"); }
SwigluGrads DeviceKernels::swiglu_backward(const Tensor&, const Tensor&, const Tensor&, bool,
                                           bool) {
  missing("swiglu_backward");
}
AttentionForward DeviceKernels::attention_forward(const Tensor&, const Tensor&, const Tensor&,
                                                  const ResolvedAttentionMask&, double) {
  missing("attention_forward");
}
AttentionGrads DeviceKernels::attention_backward(const Tensor&, const Tensor&, const Tensor&,
                                                 const Tensor&, const Tensor&, const Tensor&,
                                                 const ResolvedAttentionMask&, double, bool, bool,
                                                 bool) {
  missing("attention_backward");
}
Tensor DeviceKernels::index_select(const Tensor&, int64_t, const Tensor&) {
  missing("index_select");
}
void DeviceKernels::index_add(const Tensor&, int64_t, const Tensor&, const Tensor&, int64_t) {
  missing("index_add");
}
Tensor DeviceKernels::gather(const Tensor&, int64_t, const Tensor&) { missing("gather"); }
void DeviceKernels::scatter_add(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  missing("scatter_add");
}
void DeviceKernels::check_indices(const char*, const char*, const Tensor&, int64_t,
                                  const std::string&) {
  missing("check_indices");
}
void DeviceKernels::adamw_step(const std::vector<Tensor>&, const std::vector<Tensor>&,
                               const std::vector<Tensor>&, const std::vector<Tensor>&,
                               const std::vector<Tensor>&, const Tensor&, const AdamWArgs&) {
  missing("adamw_step");
}

}  // namespace cg
