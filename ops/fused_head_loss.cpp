// Why this file exists: the fused head loss's three modes as autograd nodes. Each runs
// the same chunk loop (ops/cpu/fused_head_chunks.h); they differ in what they keep for
// backward:
//   FusedHeadRowsBackward       frozen head: dh rows [T, D] (unweighted), scaled by g_i
//   FusedHeadScalarBackward     trainable head: dh [T, D] and dW [V, D] fp32, pre-scaled
//                               by w_i / N, multiplied by the incoming scalar
//   FusedHeadRecomputeBackward  any head: the inputs only; backward reruns the chunk loop
#include "ops/fused_head_loss.h"

#include <optional>

#include "autograd/function.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "core/views.h"
#include "ops/cpu/compute_copy.h"
#include "ops/cpu/fused_head_chunks.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/op_checks.h"
#include "ops/shape_ops.h"

namespace cg {

namespace {

cpu::FusedHeadChunkArgs base_args(const HeadLossInputs& in, const HeadLossOptions& o,
                                  int64_t chunk_rows) {
  cpu::FusedHeadChunkArgs a;
  a.hidden = in.hidden.detach();
  a.head = in.head.detach();
  if (loss_needs_teacher(o.loss)) {
    a.teacher_hidden = in.teacher_hidden.detach();
    a.teacher_head = teacher_head_of(in).detach();
  }
  if (in.labels.defined()) a.labels = raw::contiguous(in.labels);
  a.config = o.loss;
  a.chunk_rows = chunk_rows;
  return a;
}

// g [T] (any float dtype) times each row of rows [T, D], in rows' dtype; fp32 math.
Tensor scale_rows(const Tensor& rows, const Tensor& g) {
  const DType compute = rows.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor r = raw::to_dtype(rows, compute);
  const Tensor out = mul(r, unsqueeze(raw::to_dtype(g, compute), 1));
  return raw::to_dtype(out, rows.dtype());
}

class FusedHeadRowsBackward : public Node {
 public:
  std::string name() const override { return "FusedHeadRowsBackward"; }
  size_t dh_i = 0;

 protected:
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {scale_rows(saved(dh_i), grads[0])};
  }
};

class FusedHeadScalarBackward : public Node {
 public:
  std::string name() const override { return "FusedHeadScalarBackward"; }
  std::optional<size_t> dh_i, dw_i;  // set when h / W need a gradient
  DType head_dtype = DType::f32;

 protected:
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const double g = grads[0].item();
    std::vector<Tensor> out(2);
    if (dh_i) out[0] = raw::to_dtype(scale(saved(*dh_i), g), saved(*dh_i).dtype());
    if (dw_i) out[1] = raw::to_dtype(scale(saved(*dw_i), g), head_dtype);
    return out;
  }
};

// Saves the inputs in this order: hidden, head, [teacher hidden, teacher head], [labels].
class FusedHeadRecomputeBackward : public Node {
 public:
  std::string name() const override { return "FusedHeadRecomputeBackward"; }
  LossConfig config;
  int64_t chunk_rows = 0;

 protected:
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    cpu::FusedHeadChunkArgs a;
    a.config = config;
    a.chunk_rows = chunk_rows;
    size_t i = 0;
    a.hidden = saved(i++);
    a.head = saved(i++);
    if (loss_needs_teacher(config)) {
      a.teacher_hidden = saved(i++);
      a.teacher_head = saved(i++);
    }
    if (i < saved_tensors().size()) a.labels = saved(i++);
    const DType compute = cpu::compute_dtype_of(a.hidden.dtype());
    a.gradients = true;
    a.grad_scale = cpu::compute_copy(grads[0], compute);
    std::vector<Tensor> out(2);
    if (needs_input_grad(0)) a.grad_hidden = out[0] = raw::empty(a.hidden.shape(), a.hidden.dtype(), a.hidden.device());
    Tensor dw;
    if (needs_input_grad(1)) a.grad_head = dw = zeros(a.head.shape(), {.dtype = compute});
    cpu::fused_head_chunks(a);
    if (dw.defined()) out[1] = raw::to_dtype(dw, a.head.dtype());
    return out;
  }
};

// Per-token outputs of the forward loop.
HeadLossResult make_outputs(const HeadLossInputs& in, const HeadLossOptions& o, DType compute,
                            cpu::FusedHeadChunkArgs& a) {
  const int64_t t = in.hidden.size(0);
  const Device dev = in.hidden.device();
  HeadLossResult r;
  a.loss = r.per_token = raw::empty({t}, compute, dev);
  if (o.with_metrics) {
    a.lse = r.lse = raw::empty({t}, compute, dev);
    a.entropy = r.entropy = raw::empty({t}, compute, dev);
    a.argmax = r.argmax = raw::empty({t}, DType::i64, dev);
    if (loss_needs_teacher(o.loss)) a.teacher_argmax = r.teacher_argmax = raw::empty({t}, DType::i64, dev);
  }
  return r;
}

HeadLossResult frozen_head(const HeadLossInputs& in, const HeadLossOptions& o, int64_t chunk) {
  const DType compute = cpu::compute_dtype_of(in.hidden.dtype());
  cpu::FusedHeadChunkArgs a = base_args(in, o, chunk);
  HeadLossResult r = make_outputs(in, o, compute, a);
  auto node = make_node<FusedHeadRowsBackward>({&in.hidden});
  if (node) {
    CategoryGuard saved(MemoryCategory::autograd_saved);  // dh is what the graph keeps
    a.gradients = true;  // unit row scale: backward applies the real one
    a.grad_hidden = raw::empty(in.hidden.shape(), in.hidden.dtype(), in.hidden.device());
  }
  cpu::fused_head_chunks(a);
  if (node) {
    node->dh_i = node->save(a.grad_hidden);
    set_history(node, r.per_token);
  }
  r.loss = reduce_rows(r.per_token, in.weights, in.labels, o.loss.ignore_index, o.reduction);
  return r;
}

HeadLossResult trainable_head(const HeadLossInputs& in, const HeadLossOptions& o, int64_t chunk) {
  CG_CHECK(o.reduction != Reduction::none,
           "head_loss: the fused path with a trainable head computes gradients in the forward "
           "pass and needs a sum or mean reduction; for reduction none set recompute_in_backward");
  const DType compute = cpu::compute_dtype_of(in.hidden.dtype());
  const int64_t t = in.hidden.size(0);
  cpu::FusedHeadChunkArgs a = base_args(in, o, chunk);
  HeadLossResult r = make_outputs(in, o, compute, a);
  const std::vector<double> scale =
      row_reduction_scale(t, in.weights, in.labels, o.loss.ignore_index, o.reduction);
  auto node = make_node<FusedHeadScalarBackward>({&in.hidden, &in.head});
  if (node) {
    a.gradients = true;
    {
      CategoryGuard temporary(MemoryCategory::temporary);
      a.grad_scale = from_vector(scale, {t}, {.dtype = compute});
    }
    CategoryGuard saved(MemoryCategory::autograd_saved);  // dh and dW are what the graph keeps
    if (node->needs_input_grad(0)) a.grad_hidden = raw::empty(in.hidden.shape(), in.hidden.dtype(), in.hidden.device());
    if (node->needs_input_grad(1)) a.grad_head = zeros(in.head.shape(), {.dtype = compute});
  }
  cpu::fused_head_chunks(a);
  const std::vector<double> per_token = r.per_token.to_vector();
  double loss = 0.0;
  for (int64_t i = 0; i < t; ++i) loss += scale[i] * per_token[i];
  r.loss = scalar_tensor(loss, {.dtype = compute});
  if (node) {
    if (a.grad_hidden.defined()) node->dh_i = node->save(a.grad_hidden);
    if (a.grad_head.defined()) node->dw_i = node->save(a.grad_head);
    node->head_dtype = in.head.dtype();
    set_history(node, r.loss);
  }
  return r;
}

HeadLossResult recompute(const HeadLossInputs& in, const HeadLossOptions& o, int64_t chunk) {
  const DType compute = cpu::compute_dtype_of(in.hidden.dtype());
  cpu::FusedHeadChunkArgs a = base_args(in, o, chunk);
  HeadLossResult r = make_outputs(in, o, compute, a);
  cpu::fused_head_chunks(a);
  if (auto node = make_node<FusedHeadRecomputeBackward>({&in.hidden, &in.head})) {
    node->config = o.loss;
    node->chunk_rows = chunk;
    node->save(a.hidden);
    node->save(a.head);
    if (a.teacher_hidden.defined()) {
      node->save(a.teacher_hidden);
      node->save(a.teacher_head);
    }
    if (a.labels.defined()) node->save(a.labels);
    set_history(node, r.per_token);
  }
  r.loss = reduce_rows(r.per_token, in.weights, in.labels, o.loss.ignore_index, o.reduction);
  return r;
}

}  // namespace

HeadLossResult fused_head_loss(const HeadLossInputs& in, const HeadLossOptions& o, int64_t chunk) {
  if (!in.hidden.device().is_cpu()) fail_not_implemented("head_loss (fused)", in.hidden.device());
  HeadLossResult r = o.recompute_in_backward ? recompute(in, o, chunk)
                     : in.head.requires_grad() ? trainable_head(in, o, chunk)
                                               : frozen_head(in, o, chunk);
  r.chunk_rows = chunk;
  return r;
}

}  // namespace cg
