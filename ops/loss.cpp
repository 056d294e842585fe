// Why this file exists: row_losses (checks, working copies, the node that recomputes the
// gradient from the saved logits) and the reductions and wrappers built on it.
#include "ops/loss.h"

#include <cmath>

#include "autograd/function.h"
#include "core/factories.h"
#include "core/views.h"
#include "ops/compute_copy.h"
#include "ops/elementwise.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"
#include "ops/reduce.h"

namespace cg {

namespace {

void check_row_loss_inputs(const char* op, const Tensor& logits, const Tensor& labels,
                           const Tensor& teacher, const LossConfig& c) {
  check_defined(op, logits, "logits");
  check_floating(op, logits);
  CG_CHECK(logits.dim() == 2, op, ": logits must be 2-D [N, V], got ", shape_str(logits.shape()),
           "; reshape to [-1, V] first");
  const int64_t n = logits.size(0);
  if (loss_needs_labels(c)) {
    CG_CHECK(labels.defined(), op, ": ", loss_description(c), " needs labels [", n, "]");
  }
  if (labels.defined()) {
    CG_CHECK(labels.dtype() == DType::i64, op, ": labels must be i64, got ",
             dtype_name(labels.dtype()), "; convert with cg::to(labels, DType::i64)");
    CG_CHECK(labels.dim() == 1 && labels.size(0) == n, op, ": labels must be [", n,
             "] to match logits ", shape_str(logits.shape()), ", got ", shape_str(labels.shape()));
    check_same_device(op, logits, labels);
  }
  if (loss_needs_teacher(c)) {
    CG_CHECK(teacher.defined(), op, ": ", loss_kind_name(c.kind), " needs teacher logits ",
             shape_str(logits.shape()));
    CG_CHECK(teacher.shape() == logits.shape(), op, ": teacher logits ", shape_str(teacher.shape()),
             " must match the student's ", shape_str(logits.shape()));
    check_same_dtype(op, logits, teacher);
    check_same_device(op, logits, teacher);
  }
  check_loss_config(op, c);
}

// The row kernel over one block of logits (and teacher logits), on the logits' device.
// z and t are fresh or read-only buffers in the device's head_logits_dtype; the kernel
// softcaps them in place and, with a grad_scale, writes the gradient over z.
void run_rows(DeviceKernels& k, const Tensor& z, const Tensor& t, const Tensor& labels,
              const LossConfig& c, const Tensor& grad_scale, const RowLosses& out) {
  HeadRowsArgs args;
  args.logits = z;
  args.teacher = t;
  args.labels = labels.defined() ? raw::contiguous(labels) : Tensor();
  args.config = c;
  args.want_grad = grad_scale.defined();
  args.grad_scale = grad_scale;
  args.loss = out.loss;
  args.lse = out.lse;
  args.entropy = out.entropy;
  args.argmax = out.argmax;
  args.teacher_argmax = out.teacher_argmax;
  k.head_loss_rows(args);
}

class RowLossBackward : public Node {
 public:
  explicit RowLossBackward(const LossConfig& c) : config(c) {}
  std::string name() const override { return "RowLossBackward"; }
  LossConfig config;
  size_t logits_i = 0, teacher_i = 0, labels_i = 0;
  bool has_teacher = false, has_labels = false;

 protected:
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const Tensor& logits = saved(logits_i);
    DeviceKernels& k = kernels_for(logits.device(), "row_losses backward");
    const DType work = k.head_logits_dtype(logits.dtype());
    Tensor z = compute_copy(logits, work, true);  // becomes the gradient
    Tensor t = has_teacher ? compute_copy(saved(teacher_i), work, config.softcap > 0.0f) : Tensor();
    Tensor g = compute_copy(grads[0], compute_dtype_of(logits.dtype()), false);
    run_rows(k, z, t, has_labels ? saved(labels_i) : Tensor(), config, g, RowLosses{});
    return {raw::to_dtype(z, logits.dtype())};
  }
};

}  // namespace

RowLosses row_losses(const Tensor& logits, const Tensor& labels, const Tensor& teacher_logits,
                     const LossConfig& config, bool with_metrics) {
  const char* op = "row_losses";
  check_row_loss_inputs(op, logits, labels, teacher_logits, config);
  DeviceKernels& k = kernels_for(logits.device(), op);
  const bool use_teacher = loss_needs_teacher(config);
  const bool use_labels = labels.defined();
  const DType compute = compute_dtype_of(logits.dtype());
  const DType work = k.head_logits_dtype(logits.dtype());
  const int64_t n = logits.size(0);
  if (use_labels) k.check_labels(labels, logits.size(1), config.ignore_index);

  RowLosses out;
  out.loss = raw::empty({n}, compute, logits.device());
  if (with_metrics) {
    out.lse = raw::empty({n}, compute, logits.device());
    out.entropy = raw::empty({n}, compute, logits.device());
    out.argmax = raw::empty({n}, DType::i64, logits.device());
    if (use_teacher) out.teacher_argmax = raw::empty({n}, DType::i64, logits.device());
  }
  {
    const bool capped = config.softcap > 0.0f;  // the kernel softcaps in place
    Tensor z = compute_copy(logits, work, capped);
    Tensor t = use_teacher ? compute_copy(teacher_logits, work, capped) : Tensor();
    run_rows(k, z, t, use_labels ? labels : Tensor(), config, Tensor(), out);
  }
  if (auto node = make_node<RowLossBackward>({&logits}, config)) {
    node->logits_i = node->save(logits, "logits");
    if (use_teacher) {
      node->teacher_i = node->save(teacher_logits, "teacher_logits");
      node->has_teacher = true;
    }
    if (use_labels) {
      node->labels_i = node->save(labels, "labels");
      node->has_labels = true;
    }
    set_history(node, out.loss);
  }
  return out;
}

Tensor row_reduction_weights(int64_t n, const Tensor& weights, const Tensor& labels,
                             int64_t ignore_index, Reduction reduction, DType dtype,
                             Device device) {
  CG_CHECK(reduction != Reduction::none, "row_reduction_weights: reduction none has no weights");
  Tensor out = raw::empty({n}, dtype, device);
  const Tensor w = weights.defined() ? weights.detach() : Tensor();
  kernels_for(device, "reduce_rows")
      .row_weights(labels, w, ignore_index, reduction == Reduction::mean, out);
  return out;
}

Tensor reduce_rows(const Tensor& per_row, const Tensor& weights, const Tensor& labels,
                   int64_t ignore_index, Reduction reduction) {
  const char* op = "reduce_rows";
  CG_CHECK(per_row.dim() == 1, op, ": per-row losses must be 1-D, got ",
           shape_str(per_row.shape()));
  const int64_t n = per_row.size(0);
  if (weights.defined()) {
    CG_CHECK(weights.dim() == 1 && weights.size(0) == n, op, ": weights must be [", n,
             "] (one per row), got ", shape_str(weights.shape()));
    check_same_device(op, per_row, weights);
  }
  if (reduction == Reduction::none) {
    return weights.defined() ? mul(per_row, raw::to_dtype(weights.detach(), per_row.dtype()))
                             : per_row;
  }
  // Constants (weights carry no gradient), so the reduction is one weighted sum.
  const Tensor scale = row_reduction_weights(n, weights, labels, ignore_index, reduction,
                                             per_row.dtype(), per_row.device());
  return sum(mul(per_row, scale));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, const CrossEntropyOptions& o) {
  LossConfig c;
  c.kind = LossKind::cross_entropy;
  c.ignore_index = o.ignore_index;
  c.label_smoothing = o.label_smoothing;
  c.z_loss = o.z_loss;
  c.softcap = o.softcap;
  const RowLosses rows = row_losses(logits, labels, Tensor(), c);
  return reduce_rows(rows.loss, o.weights, labels, o.ignore_index, o.reduction);
}

Tensor kl_div(const Tensor& logits, const Tensor& teacher_logits, const KlDivOptions& o) {
  LossConfig c;
  c.kind = o.reverse ? LossKind::reverse_kl : LossKind::forward_kl;
  c.temperature = o.temperature;
  c.hinton_scale = o.hinton_scale;
  const RowLosses rows = row_losses(logits, Tensor(), teacher_logits, c);
  return reduce_rows(rows.loss, o.weights, Tensor(), c.ignore_index, o.reduction);
}

}  // namespace cg
