// Why this file exists: the fused head loss's three modes as autograd nodes. Each runs
// the same device-neutral chunk loop (ops/fused_head_loop.h); they differ in what they
// keep for backward:
//   FusedHeadRowsBackward       frozen head: dh rows [T, D] (unweighted), scaled by g_i
//   FusedHeadScalarBackward     trainable head: dh [T, D] and dW [V, D] fp32, pre-scaled
//                               by w_i / N, multiplied by the incoming scalar
//   FusedHeadRecomputeBackward  any head: the inputs only; backward reruns the chunk loop
// When no graph is recorded (grad mode off, or nothing requires grad) every mode is the
// same forward-only loop, whatever the reduction.
// Nothing here reads a tensor on the host: the loss scalar and the backward scaling are
// ops on the tensors' device, so a GPU run never waits inside the step.
#include "ops/fused_head_loss.h"

#include <algorithm>
#include <optional>

#include "autograd/function.h"
#include "core/memory_trace.h"
#include "core/views.h"
#include "ops/compute_copy.h"
#include "ops/elementwise.h"
#include "ops/fused_head_loop.h"
#include "ops/loss.h"
#include "ops/reduce.h"
#include "ops/shape_ops.h"

namespace cg {

namespace {

FusedHeadLoopArgs base_args(const HeadLossInputs& in, const HeadLossOptions& o,
                            int64_t chunk_rows) {
  FusedHeadLoopArgs a;
  a.hidden = in.hidden.detach();
  a.head = in.head.detach();
  if (loss_needs_teacher(o.loss)) {
    a.teacher_hidden = in.teacher_hidden.detach();
    a.teacher_head = teacher_head_of(in).detach();
  }
  if (in.labels.defined()) a.labels = raw::contiguous(in.labels.detach());
  a.config = o.loss;
  a.chunk_rows = chunk_rows;
  a.pipelined = o.pipelined;
  return a;
}

// Note [Scaling in blocks of rows]: backward hands out rows [R, D] times g -- per row
// (g [R]) or one scalar (g []) -- in out_dtype, computed in fp32 (one rounding, as the
// forward's fp32 accumulators were meant). Converting all of dW [V, D] at once would make
// two more [V, D] fp32 tensors (10 GiB at the DFlash shape) next to the saved one; a block
// of rows at a time keeps the temporaries at kScaleBlockElements.
constexpr int64_t kScaleBlockElements = int64_t{1} << 24;  // 64 MiB of fp32

Tensor scale_rows(const Tensor& rows, const Tensor& g, DType out_dtype) {
  NoGradGuard no_grad;
  const DType compute = compute_dtype_of(rows.dtype());
  const Tensor s = raw::to_dtype(g, compute);
  const Tensor out = raw::empty(rows.shape(), out_dtype, rows.device());
  const int64_t n = rows.size(0),
                width = std::max<int64_t>(rows.numel() / std::max<int64_t>(n, 1), 1);
  const int64_t block = std::max<int64_t>(1, kScaleBlockElements / width);
  for (int64_t r0 = 0; r0 < n; r0 += block) {
    const int64_t c = std::min(block, n - r0);
    const Tensor r = raw::to_dtype(raw::narrow(rows, 0, r0, c), compute);
    const Tensor sc = g.dim() == 0 ? s : raw::unsqueeze(raw::narrow(s, 0, r0, c), 1);
    raw::copy_(raw::narrow(out, 0, r0, c), mul(r, sc));
  }
  return out;
}

class FusedHeadRowsBackward : public Node {
 public:
  std::string name() const override { return "FusedHeadRowsBackward"; }
  size_t dh_i = 0;

 protected:
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {scale_rows(saved(dh_i), grads[0], saved(dh_i).dtype())};
  }
};

class FusedHeadScalarBackward : public Node {
 public:
  std::string name() const override { return "FusedHeadScalarBackward"; }
  std::optional<size_t> dh_i, dw_i;  // set when h / W need a gradient
  DType head_dtype = DType::f32;

 protected:
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> out(2);
    if (dh_i) out[0] = scale_rows(saved(*dh_i), grads[0], saved(*dh_i).dtype());
    if (dw_i) out[1] = scale_rows(saved(*dw_i), grads[0], head_dtype);
    return out;
  }
};

// Saves the inputs in this order: hidden, head, [teacher hidden, teacher head], [labels].
class FusedHeadRecomputeBackward : public Node {
 public:
  std::string name() const override { return "FusedHeadRecomputeBackward"; }
  LossConfig config;
  int64_t chunk_rows = 0;
  bool pipelined = false;

 protected:
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    FusedHeadLoopArgs a;
    a.config = config;
    a.chunk_rows = chunk_rows;
    a.pipelined = pipelined;
    size_t i = 0;
    a.hidden = saved(i++);
    a.head = saved(i++);
    if (loss_needs_teacher(config)) {
      a.teacher_hidden = saved(i++);
      a.teacher_head = saved(i++);
    }
    if (i < saved_tensors().size()) a.labels = saved(i++);
    const DType compute = compute_dtype_of(a.hidden.dtype());
    a.gradients = true;
    a.grad_scale = compute_copy(grads[0], compute);
    std::vector<Tensor> out(2);
    if (needs_input_grad(0))
      a.grad_hidden = out[0] = raw::empty(a.hidden.shape(), a.hidden.dtype(), a.hidden.device());
    Tensor dw;
    if (needs_input_grad(1)) {
      a.grad_head = dw = raw::empty(a.head.shape(), compute, a.head.device());
      raw::fill_(dw, 0.0);
    }
    fused_head_loop(a);
    if (dw.defined()) out[1] = raw::to_dtype(dw, a.head.dtype());
    return out;
  }
};

// Per-token outputs of the forward loop.
HeadLossResult make_outputs(const HeadLossInputs& in, const HeadLossOptions& o, DType compute,
                            FusedHeadLoopArgs& a) {
  const int64_t t = in.hidden.size(0);
  const Device dev = in.hidden.device();
  HeadLossResult r;
  a.loss = r.per_token = raw::empty({t}, compute, dev);
  if (o.with_metrics) {
    a.lse = r.lse = raw::empty({t}, compute, dev);
    a.entropy = r.entropy = raw::empty({t}, compute, dev);
    a.argmax = r.argmax = raw::empty({t}, DType::i64, dev);
    if (loss_needs_teacher(o.loss))
      a.teacher_argmax = r.teacher_argmax = raw::empty({t}, DType::i64, dev);
  }
  return r;
}

HeadLossResult reduced(HeadLossResult r, const HeadLossInputs& in, const HeadLossOptions& o) {
  r.loss = reduce_rows(r.per_token, in.weights, in.labels, o.loss.ignore_index, o.reduction);
  return r;
}

// Forward only: no graph will be recorded, so no gradient is computed either.
HeadLossResult no_graph(const HeadLossInputs& in, const HeadLossOptions& o, int64_t chunk) {
  FusedHeadLoopArgs a = base_args(in, o, chunk);
  HeadLossResult r = make_outputs(in, o, compute_dtype_of(in.hidden.dtype()), a);
  fused_head_loop(a);
  return reduced(std::move(r), in, o);
}

HeadLossResult frozen_head(const HeadLossInputs& in, const HeadLossOptions& o, int64_t chunk) {
  FusedHeadLoopArgs a = base_args(in, o, chunk);
  HeadLossResult r = make_outputs(in, o, compute_dtype_of(in.hidden.dtype()), a);
  auto node = make_node<FusedHeadRowsBackward>({&in.hidden});
  {
    CategoryGuard saved(MemoryCategory::autograd_saved);  // dh is what the graph keeps
    a.gradients = true;  // unit row scale: backward applies the real one
    a.grad_hidden = raw::empty(in.hidden.shape(), in.hidden.dtype(), in.hidden.device());
  }
  fused_head_loop(a);
  node->dh_i = node->save(a.grad_hidden, "dh");
  set_history(node, r.per_token);
  return reduced(std::move(r), in, o);
}

HeadLossResult trainable_head(const HeadLossInputs& in, const HeadLossOptions& o, int64_t chunk) {
  CG_CHECK(o.reduction != Reduction::none,
           "head_loss: the fused path with a trainable head computes gradients in the forward "
           "pass and needs a sum or mean reduction; for reduction none set recompute_in_backward");
  const DType compute = compute_dtype_of(in.hidden.dtype());
  const int64_t t = in.hidden.size(0);
  FusedHeadLoopArgs a = base_args(in, o, chunk);
  HeadLossResult r = make_outputs(in, o, compute, a);
  auto node = make_node<FusedHeadScalarBackward>({&in.hidden, &in.head});
  {
    CategoryGuard temporary(MemoryCategory::temporary);
    a.grad_scale = row_reduction_weights(t, in.weights, in.labels, o.loss.ignore_index, o.reduction,
                                         compute, in.hidden.device());
  }
  a.gradients = true;
  {
    CategoryGuard saved(MemoryCategory::autograd_saved);  // dh and dW are what the graph keeps
    if (node->needs_input_grad(0))
      a.grad_hidden = raw::empty(in.hidden.shape(), in.hidden.dtype(), in.hidden.device());
    if (node->needs_input_grad(1)) {
      a.grad_head = raw::empty(in.head.shape(), compute, in.head.device());
      raw::fill_(a.grad_head, 0.0);
    }
  }
  fused_head_loop(a);
  {
    NoGradGuard no_grad;
    r.loss = sum(mul(r.per_token, a.grad_scale));  // on the device: no host round trip
  }
  if (a.grad_hidden.defined()) node->dh_i = node->save(a.grad_hidden, "dh");
  if (a.grad_head.defined()) node->dw_i = node->save(a.grad_head, "dW");
  node->head_dtype = in.head.dtype();
  set_history(node, r.loss);
  return r;
}

HeadLossResult recompute(const HeadLossInputs& in, const HeadLossOptions& o, int64_t chunk) {
  FusedHeadLoopArgs a = base_args(in, o, chunk);
  HeadLossResult r = make_outputs(in, o, compute_dtype_of(in.hidden.dtype()), a);
  fused_head_loop(a);
  auto node = make_node<FusedHeadRecomputeBackward>({&in.hidden, &in.head});
  node->config = o.loss;
  node->chunk_rows = chunk;
  node->pipelined = o.pipelined;
  node->save(a.hidden);
  node->save(a.head);
  if (a.teacher_hidden.defined()) {
    node->save(a.teacher_hidden);
    node->save(a.teacher_head);
  }
  if (a.labels.defined()) node->save(a.labels);
  set_history(node, r.per_token);
  return reduced(std::move(r), in, o);
}

}  // namespace

HeadLossResult fused_head_loss(const HeadLossInputs& in, const HeadLossOptions& o, int64_t chunk) {
  const bool records =
      GradMode::is_enabled() && (in.hidden.requires_grad() || in.head.requires_grad());
  HeadLossResult r = !records                  ? no_graph(in, o, chunk)
                     : o.recompute_in_backward ? recompute(in, o, chunk)
                     : in.head.requires_grad() ? trainable_head(in, o, chunk)
                                               : frozen_head(in, o, chunk);
  r.chunk_rows = chunk;
  return r;
}

size_t fused_head_chunk_bytes(const HeadLossInputs& in, const HeadLossOptions& o, int64_t rows) {
  FusedHeadLoopArgs a = base_args(in, o, std::max<int64_t>(rows, 1));
  a.pipelined = o.pipelined && o.path == HeadLossPath::fused;  // chunked: one stream's bytes
  const bool records =
      GradMode::is_enabled() && (in.hidden.requires_grad() || in.head.requires_grad());
  a.gradients = records;
  if (records && in.hidden.requires_grad()) a.grad_hidden = a.hidden;  // shape and dtype only
  if (records && in.head.requires_grad()) {
    a.grad_head = raw::empty({0}, compute_dtype_of(in.head.dtype()), in.head.device());
  }
  return fused_head_loop_bytes(a, rows);
}

}  // namespace cg
