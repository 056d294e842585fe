// Why this file exists: head_loss's checks, chunk sizing, and the naive and chunked paths
// (ordinary ops under autograd). The fused path is in fused_head_loss.cpp.
#include "ops/head_loss.h"

#include "autograd/grad_mode.h"
#include "core/memory_trace.h"
#include "core/views.h"
#include "ops/fused_head_loss.h"
#include "ops/join_ops.h"
#include "ops/kernels.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/op_checks.h"
#include "ops/shape_ops.h"

namespace cg {

const char* head_loss_path_name(HeadLossPath path) {
  switch (path) {
    case HeadLossPath::naive: return "naive";
    case HeadLossPath::chunked: return "chunked";
    case HeadLossPath::fused: return "fused";
  }
  return "?";
}

HeadLossPath parse_head_loss_path(const std::string& name) {
  for (HeadLossPath p : {HeadLossPath::naive, HeadLossPath::chunked, HeadLossPath::fused}) {
    if (name == head_loss_path_name(p)) return p;
  }
  CG_FAIL("unknown head-loss path '", name, "': expected naive, chunked or fused");
}

namespace {

void check_inputs(const HeadLossInputs& in, const HeadLossOptions& o) {
  const char* op = "head_loss";
  check_defined(op, in.hidden, "hidden");
  check_defined(op, in.head, "head");
  check_floating(op, in.hidden);
  CG_CHECK(in.hidden.dim() == 2, op, ": hidden must be [T, D], got ", shape_str(in.hidden.shape()),
           "; flatten batch and sequence dims first");
  CG_CHECK(in.head.dim() == 2 && in.head.size(1) == in.hidden.size(1), op,
           ": head must be [V, D=", in.hidden.size(1), "] to match hidden ",
           shape_str(in.hidden.shape()), ", got ", shape_str(in.head.shape()));
  check_same_dtype(op, in.hidden, in.head);
  check_same_device(op, in.hidden, in.head);
  const int64_t t = in.hidden.size(0);
  if (loss_needs_labels(o.loss)) {
    CG_CHECK(in.labels.defined(), op, ": ", loss_description(o.loss), " needs labels [", t, "]");
  }
  if (in.labels.defined()) {
    CG_CHECK(in.labels.dtype() == DType::i64, op, ": labels must be i64, got ",
             dtype_name(in.labels.dtype()));
    CG_CHECK(in.labels.dim() == 1 && in.labels.size(0) == t, op, ": labels must be [T=", t,
             "] to match hidden ", shape_str(in.hidden.shape()), ", got ",
             shape_str(in.labels.shape()));
    check_same_device(op, in.hidden, in.labels);
  }
  if (in.weights.defined()) {
    CG_CHECK(in.weights.dim() == 1 && in.weights.size(0) == t, op, ": weights must be [T=", t,
             "] (one per row of hidden), got ", shape_str(in.weights.shape()));
    check_same_device(op, in.hidden, in.weights);
  }
  if (loss_needs_teacher(o.loss)) {
    const Tensor& th = in.teacher_hidden;
    CG_CHECK(th.defined(), op, ": ", loss_kind_name(o.loss.kind), " needs teacher_hidden [T, D]");
    CG_CHECK(th.dim() == 2 && th.size(0) == t, op, ": teacher_hidden has ",
             th.dim() == 2 ? th.size(0) : -1, " rows but hidden has T=", t, " (",
             shape_str(th.shape()), " vs ", shape_str(in.hidden.shape()),
             "); they must be the same positions");
    const Tensor& wt = teacher_head_of(in);
    CG_CHECK(wt.dim() == 2 && wt.size(0) == in.head.size(0), op, ": teacher head ",
             shape_str(wt.shape()), " must have the student's vocabulary V=", in.head.size(0));
    CG_CHECK(th.size(1) == wt.size(1), op, ": teacher_hidden D=", th.size(1),
             " does not match the teacher head ", shape_str(wt.shape()));
    check_same_dtype(op, in.hidden, th);
    check_same_device(op, in.hidden, th);
    check_same_dtype(op, in.hidden, wt);
    check_same_device(op, in.hidden, wt);
  }
  CG_CHECK(o.chunk_rows >= 0, op, ": chunk_rows must be >= 0 (0 = from the byte budget), got ",
           o.chunk_rows);
  CG_CHECK(o.chunk_rows > 0 || o.chunk_budget_bytes > 0, op,
           ": chunk_budget_bytes must be > 0 when chunk_rows is 0 (sized from the budget)");
  check_loss_config(op, o.loss);
}

// The teacher's logits for rows [r0, r0 + c): constants, so no graph.
Tensor teacher_logits(const HeadLossInputs& in, int64_t r0, int64_t c) {
  NoGradGuard no_grad;
  return matmul(narrow(in.teacher_hidden.detach(), 0, r0, c),
                transpose(teacher_head_of(in).detach(), 0, 1));
}

HeadLossResult finish(HeadLossResult r, const HeadLossInputs& in, const HeadLossOptions& o) {
  r.loss = reduce_rows(r.per_token, in.weights, in.labels, o.loss.ignore_index, o.reduction);
  return r;
}

HeadLossResult naive_path(const HeadLossInputs& in, const HeadLossOptions& o) {
  const int64_t t = in.hidden.size(0);
  const Tensor logits = matmul(in.hidden, transpose(in.head, 0, 1));  // [T, V], kept by the graph
  const Tensor teacher = loss_needs_teacher(o.loss) ? teacher_logits(in, 0, t) : Tensor();
  const RowLosses rows = row_losses(logits, in.labels, teacher, o.loss, o.with_metrics);
  HeadLossResult r;
  r.per_token = rows.loss;
  r.argmax = rows.argmax;
  r.lse = rows.lse;
  r.entropy = rows.entropy;
  r.teacher_argmax = rows.teacher_argmax;
  r.chunk_rows = t;
  return finish(std::move(r), in, o);
}

HeadLossResult chunked_path(const HeadLossInputs& in, const HeadLossOptions& o) {
  const int64_t t = in.hidden.size(0);
  const int64_t chunk = head_loss_chunk_rows(in, o);
  std::vector<Tensor> losses, argmax, lse, entropy, teacher_argmax;
  // An empty batch still runs one (empty) chunk, so every path returns the same tensors.
  for (int64_t r0 = 0; r0 < t || (t == 0 && r0 == 0); r0 += chunk) {
    const int64_t c = std::min(chunk, t - r0);
    const Tensor logits = matmul(narrow(in.hidden, 0, r0, c), transpose(in.head, 0, 1));  // [c, V]
    const Tensor teacher = loss_needs_teacher(o.loss) ? teacher_logits(in, r0, c) : Tensor();
    const Tensor labels = in.labels.defined() ? raw::narrow(in.labels, 0, r0, c) : Tensor();
    RowLosses rows = row_losses(logits, labels, teacher, o.loss, o.with_metrics);
    losses.push_back(rows.loss);
    if (o.with_metrics) {
      argmax.push_back(rows.argmax);
      lse.push_back(rows.lse);
      entropy.push_back(rows.entropy);
      if (rows.teacher_argmax.defined()) teacher_argmax.push_back(rows.teacher_argmax);
    }
  }
  HeadLossResult r;
  r.per_token = cat(losses, 0);
  if (o.with_metrics) {
    NoGradGuard no_grad;
    r.argmax = cat(argmax, 0);
    r.lse = cat(lse, 0);
    r.entropy = cat(entropy, 0);
    if (!teacher_argmax.empty()) r.teacher_argmax = cat(teacher_argmax, 0);
  }
  r.chunk_rows = chunk;
  return finish(std::move(r), in, o);
}

}  // namespace

size_t head_loss_chunk_bytes(const HeadLossInputs& in, const HeadLossOptions& o, int64_t rows) {
  return fused_head_chunk_bytes(in, o, rows);
}

int64_t head_loss_chunk_rows(const HeadLossInputs& in, const HeadLossOptions& o) {
  const int64_t t = std::max<int64_t>(in.hidden.size(0), 1);
  if (o.chunk_rows > 0) return std::min(o.chunk_rows, t);
  const size_t one_row = head_loss_chunk_bytes(in, o, 1);
  CG_CHECK(o.chunk_budget_bytes >= one_row, "head_loss: chunk_budget_bytes=", o.chunk_budget_bytes,
           " is too small for one row: a chunk of one row of V=", in.head.size(0), " needs ",
           one_row,
           " bytes of temporaries (logits and GEMM scratch); raise the budget or set chunk_rows");
  // The bytes grow with the rows: the largest chunk within the budget, by bisection.
  int64_t lo = 1, hi = t;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (head_loss_chunk_bytes(in, o, mid) <= o.chunk_budget_bytes)
      lo = mid;
    else
      hi = mid - 1;
  }
  // GEMM tiles are 64-256 rows: 1555 rows would run a last, mostly empty row of tiles in
  // every logits GEMM, so a chunk of a thousand rows or more is a multiple of 128.
  if (lo >= 1024 && lo < t) lo -= lo % 128;
  return lo;
}

HeadLossResult head_loss(const HeadLossInputs& in, const HeadLossOptions& o) {
  check_inputs(in, o);
  // The logits and the loss's other blocks carry this scope into traces and into what an
  // out-of-memory error says held the memory (core/allocator_holders.h).
  ScopeGuard scope("head_loss");
  if (in.labels.defined()) {
    // A bad label fails before any GEMM, whichever path runs (checked on its device).
    kernels_for(in.labels.device(), "head_loss")
        .check_labels(in.labels, in.head.size(0), o.loss.ignore_index);
  }
  switch (o.path) {
    case HeadLossPath::naive: return naive_path(in, o);
    case HeadLossPath::chunked: return chunked_path(in, o);
    case HeadLossPath::fused: return fused_head_loss(in, o, head_loss_chunk_rows(in, o));
  }
  CG_FAIL("head_loss: unknown path");
}

namespace {

// Fraction of rows where a[i] == b[i], over rows whose label (when given) is not ignored.
double match_rate(const char* op, const Tensor& a, const Tensor& b, const Tensor& labels,
                  int64_t ignore_index) {
  const int64_t n = a.numel();
  CG_CHECK(b.numel() == n && (!labels.defined() || labels.numel() == n), op, ": expected ", n,
           " rows everywhere, got ", b.numel(),
           labels.defined() ? " and " + std::to_string(labels.numel()) : "");
  // A metric is read on the host: the three [n] vectors are copied there once.
  auto host_i64 = [](const Tensor& x) {
    return raw::contiguous(raw::to_device(raw::to_dtype(x, DType::i64), kCPU));
  };
  const Tensor ac = host_i64(a);
  const Tensor bc = host_i64(b);
  const Tensor yc = labels.defined() ? host_i64(labels) : Tensor();
  const int64_t* av = ac.data<int64_t>();
  const int64_t* bv = bc.data<int64_t>();
  const int64_t* yv = yc.defined() ? yc.data<int64_t>() : nullptr;
  int64_t counted = 0, hits = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (yv != nullptr && yv[i] == ignore_index) continue;
    ++counted;
    hits += av[i] == bv[i];
  }
  return counted == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(counted);
}

}  // namespace

double token_accuracy(const HeadLossResult& r, const Tensor& labels, int64_t ignore_index) {
  CG_CHECK(r.argmax.defined(), "token_accuracy: the result has no argmax (run with with_metrics)");
  CG_CHECK(labels.defined(), "token_accuracy: labels are needed");
  return match_rate("token_accuracy", r.argmax, labels, labels, ignore_index);
}

double teacher_agreement(const HeadLossResult& r, const Tensor& labels, int64_t ignore_index) {
  CG_CHECK(
      r.argmax.defined() && r.teacher_argmax.defined(),
      "teacher_agreement: the result has no teacher argmax (a teacher loss with with_metrics)");
  return match_rate("teacher_agreement", r.argmax, r.teacher_argmax, labels, ignore_index);
}

}  // namespace cg
