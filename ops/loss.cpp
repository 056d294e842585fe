// Why this file exists: row_losses (checks, working copies, the node that recomputes the
// gradient from the saved logits) and the reductions and wrappers built on it.
#include "ops/loss.h"

#include "autograd/function.h"
#include "core/factories.h"
#include "core/views.h"
#include "ops/cpu/compute_copy.h"
#include "ops/cpu/head_loss_rows.h"
#include "ops/elementwise.h"
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
    CG_CHECK(labels.defined(), op, ": ", loss_kind_name(c.kind),
             c.kind == LossKind::cross_entropy ? "" : " mixed with hard CE", " needs labels [", n, "]");
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
  CG_CHECK(c.temperature > 0.0f, op, ": temperature must be > 0, got ", c.temperature);
  CG_CHECK(c.label_smoothing >= 0.0f && c.label_smoothing <= 1.0f, op,
           ": label_smoothing must be in [0, 1], got ", c.label_smoothing);
  CG_CHECK(c.softcap >= 0.0f, op, ": softcap must be >= 0 (0 = off), got ", c.softcap);
}

// Runs the row kernel on contiguous compute-dtype buffers.
void run_rows(const Tensor& z, const Tensor& t, const Tensor& labels, const LossConfig& c,
              const Tensor& grad_scale, const RowLosses& out) {
  const int64_t n = z.size(0), v = z.size(1);
  const int64_t* y = labels.defined() ? labels.data<int64_t>() : nullptr;
  auto run = [&](auto* zero) {
    using T = std::remove_pointer_t<decltype(zero)>;
    cpu::HeadRowOutputs<T> o;
    if (out.loss.defined()) o.loss = out.loss.data<T>();
    if (out.lse.defined()) o.lse = out.lse.data<T>();
    if (out.entropy.defined()) o.entropy = out.entropy.data<T>();
    if (out.argmax.defined()) o.argmax = out.argmax.data<int64_t>();
    if (out.teacher_argmax.defined()) o.teacher_argmax = out.teacher_argmax.data<int64_t>();
    cpu::head_loss_rows<T>(z.data<T>(), t.defined() ? t.data<T>() : nullptr, y, n, v, c,
                           grad_scale.defined(), grad_scale.defined() ? grad_scale.data<T>() : nullptr, o);
  };
  if (z.dtype() == DType::f64) run(static_cast<double*>(nullptr));
  else run(static_cast<float*>(nullptr));
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
    const DType compute = cpu::compute_dtype_of(logits.dtype());
    Tensor z = cpu::compute_copy(logits, compute, true);  // becomes the gradient
    Tensor t = has_teacher ? cpu::compute_copy(saved(teacher_i), compute, config.softcap > 0.0f) : Tensor();
    Tensor g = cpu::compute_copy(grads[0], compute, false);
    run_rows(z, t, has_labels ? saved(labels_i) : Tensor(), config, g, RowLosses{});
    return {raw::to_dtype(z, logits.dtype())};
  }
};

}  // namespace

RowLosses row_losses(const Tensor& logits, const Tensor& labels, const Tensor& teacher_logits,
                     const LossConfig& config, bool with_metrics) {
  const char* op = "row_losses";
  check_row_loss_inputs(op, logits, labels, teacher_logits, config);
  if (!logits.device().is_cpu()) fail_not_implemented(op, logits.device());
  const bool use_teacher = loss_needs_teacher(config);
  const bool use_labels = labels.defined();
  const DType compute = cpu::compute_dtype_of(logits.dtype());
  const int64_t n = logits.size(0);

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
    Tensor z = cpu::compute_copy(logits, compute, capped);
    Tensor t = use_teacher ? cpu::compute_copy(teacher_logits, compute, capped) : Tensor();
    Tensor y = use_labels ? raw::contiguous(labels) : Tensor();
    run_rows(z, t, y, config, Tensor(), out);
  }
  if (auto node = make_node<RowLossBackward>({&logits}, config)) {
    node->logits_i = node->save(logits);
    if (use_teacher) {
      node->teacher_i = node->save(teacher_logits);
      node->has_teacher = true;
    }
    if (use_labels) {
      node->labels_i = node->save(labels);
      node->has_labels = true;
    }
    set_history(node, out.loss);
  }
  return out;
}

std::vector<double> row_reduction_scale(int64_t n, const Tensor& weights, const Tensor& labels,
                                        int64_t ignore_index, Reduction reduction) {
  CG_CHECK(reduction != Reduction::none, "row_reduction_scale: reduction none has no scale");
  std::vector<double> scale = weights.defined() ? weights.to_vector() : std::vector<double>(n, 1.0);
  if (labels.defined()) {
    const std::vector<double> y = labels.to_vector();
    for (int64_t i = 0; i < n; ++i) {
      if (static_cast<int64_t>(y[i]) == ignore_index) scale[i] = 0.0;
    }
  }
  if (reduction == Reduction::mean) {
    double norm = 0.0;
    for (double w : scale) norm += w;
    for (double& w : scale) w = norm == 0.0 ? 0.0 : w / norm;
  }
  return scale;
}

Tensor reduce_rows(const Tensor& per_row, const Tensor& weights, const Tensor& labels,
                   int64_t ignore_index, Reduction reduction) {
  const char* op = "reduce_rows";
  CG_CHECK(per_row.dim() == 1, op, ": per-row losses must be 1-D, got ", shape_str(per_row.shape()));
  const int64_t n = per_row.size(0);
  if (weights.defined()) {
    CG_CHECK(weights.dim() == 1 && weights.size(0) == n, op, ": weights must be [", n,
             "] (one per row), got ", shape_str(weights.shape()));
    check_same_device(op, per_row, weights);
  }
  if (reduction == Reduction::none) {
    return weights.defined() ? mul(per_row, raw::to_dtype(weights.detach(), per_row.dtype())) : per_row;
  }
  // Constants (weights carry no gradient), so the reduction is one weighted sum.
  const Tensor scale = from_vector(row_reduction_scale(n, weights, labels, ignore_index, reduction),
                                   {n}, {.dtype = per_row.dtype(), .device = per_row.device()});
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
