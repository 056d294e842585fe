// Why this file exists: see fused_head_loop.h. Shapes per chunk of c rows starting at r0:
//   Hc [c, D]  = hidden[r0 : r0 + c]          L [c, V] = Hc W^T, then dlogits in place
//   Tc [c, Dt] = teacher_hidden[r0 : r0 + c]  P [c, V] = Tc Wt^T
//   dH[r0 : r0 + c] [c, D] = L W               dW [V, D] += L^T Hc   (fp32 or f64)
// L and P are in the device's head_logits_dtype (the CPU: fp32; a GPU: 16-bit storage).
#include "ops/fused_head_loop.h"

#include <algorithm>

#include "core/memory_trace.h"
#include "core/views.h"
#include "ops/kernels.h"

namespace cg {

namespace {

const Tensor& teacher_head_or_head(const FusedHeadLoopArgs& a) {
  return a.teacher_head.defined() ? a.teacher_head : a.head;
}

Tensor rows_of(const Tensor& t, int64_t r0, int64_t c) {
  return t.defined() ? raw::narrow(t, 0, r0, c) : Tensor();
}

// Note [Stacked logits GEMM]: when the teacher's head is the student's (the DFlash drafter
// shares the target's frozen lm_head), a chunk's student and teacher rows are copied into
// one [2c, D] operand and one GEMM makes both logits, [2c, V] = [Hc; Tc] W^T, into one
// buffer whose first c rows are the student's and last c the teacher's (each a
// contiguous [c, V]). One GEMM of twice the rows reads W once instead of twice and fills
// the GPU's last wave better; the copy is 2 c D elements next to the GEMM's 2 c D V FLOPs.
bool stacks_rows(const FusedHeadLoopArgs& a) {
  if (!loss_needs_teacher(a.config)) return false;
  const Tensor& wt = teacher_head_or_head(a);
  return wt.data_ptr() == a.head.data_ptr() && wt.shape() == a.head.shape() && wt.strides() == a.head.strides() &&
         wt.dtype() == a.head.dtype() && a.teacher_hidden.dtype() == a.hidden.dtype() &&
         a.teacher_hidden.size(1) == a.hidden.size(1);
}

}  // namespace

size_t fused_head_loop_bytes(const FusedHeadLoopArgs& a, int64_t rows) {
  DeviceKernels& k = kernels_for(a.hidden.device(), "head_loss (fused)");
  const DType work = k.head_logits_dtype(a.hidden.dtype());
  const int64_t v = a.head.size(0), d = a.hidden.size(1);
  const bool teacher = loss_needs_teacher(a.config);
  const DType compute = compute_dtype_of(a.hidden.dtype());
  const size_t logits = static_cast<size_t>(rows) * static_cast<size_t>(v) * element_size(work);
  size_t gemm = 0;
  auto need = [&](GemmDesc g) { gemm = std::max(gemm, k.gemm_scratch_bytes(g)); };
  const bool stack = stacks_rows(a);
  need({rows, v, d, a.hidden.dtype(), a.head.dtype(), work, a.hidden.stride(1) == 1, true, true});
  if (stack) {
    need({2 * rows, v, d, a.hidden.dtype(), a.head.dtype(), work, true, true, true});
  } else if (teacher) {
    const Tensor& wt = teacher_head_or_head(a);
    need({rows, v, a.teacher_hidden.size(1), a.teacher_hidden.dtype(), wt.dtype(), work,
          a.teacher_hidden.stride(1) == 1, true, true});
  }
  if (a.gradients && a.grad_hidden.defined()) {
    need({rows, d, v, work, a.head.dtype(), a.grad_hidden.dtype(), true, true, true});
  }
  if (a.gradients && a.grad_head.defined()) {
    need({v, d, rows, work, a.hidden.dtype(), compute, true, a.hidden.stride(1) == 1, true});
  }
  const size_t stacked = stack ? 2 * static_cast<size_t>(rows) * static_cast<size_t>(d) * element_size(a.hidden.dtype()) : 0;
  return logits * (teacher ? 2 : 1) + stacked + gemm;
}

void fused_head_loop(const FusedHeadLoopArgs& a) {
  const Tensor& h = a.hidden;
  const Device dev = h.device();
  DeviceKernels& k = kernels_for(dev, "head_loss (fused)");
  CategoryGuard category(MemoryCategory::temporary);
  const DType work = k.head_logits_dtype(h.dtype());
  const int64_t rows = h.size(0), v = a.head.size(0);
  if (rows == 0) return;
  const int64_t chunk = std::clamp<int64_t>(a.chunk_rows, 1, rows);
  const bool teacher = loss_needs_teacher(a.config);
  const bool stack = stacks_rows(a);
  const Tensor head_t = raw::transpose(a.head, 0, 1);                        // [D, V]
  const Tensor teacher_head_t = teacher ? raw::transpose(teacher_head_or_head(a), 0, 1) : Tensor();
  // Reused per chunk: [chunk, V] student logits, then [chunk, V] teacher logits.
  const Tensor logits = raw::empty({teacher ? 2 * chunk : chunk, v}, work, dev);
  const Tensor stacked_rows = stack ? raw::empty({2 * chunk, h.size(1)}, h.dtype(), dev) : Tensor();

  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t c = std::min(chunk, rows - r0);
    const Tensor hc = raw::narrow(h, 0, r0, c);
    HeadRowsArgs rows_args;
    if (stack) {  // Note [Stacked logits GEMM]
      const Tensor both = raw::narrow(stacked_rows, 0, 0, 2 * c);
      raw::copy_(raw::narrow(both, 0, 0, c), hc);
      raw::copy_(raw::narrow(both, 0, c, c), raw::narrow(a.teacher_hidden, 0, r0, c));
      k.gemm(both, head_t, raw::narrow(logits, 0, 0, 2 * c), 1.0, 0.0);
      rows_args.teacher = raw::narrow(logits, 0, c, c);
    } else {
      k.gemm(hc, head_t, raw::narrow(logits, 0, 0, c), 1.0, 0.0);
      if (teacher) {
        rows_args.teacher = raw::narrow(logits, 0, chunk, c);
        k.gemm(raw::narrow(a.teacher_hidden, 0, r0, c), teacher_head_t, rows_args.teacher, 1.0, 0.0);
      }
    }
    const Tensor lc = raw::narrow(logits, 0, 0, c);
    rows_args.logits = lc;
    rows_args.labels = rows_of(a.labels, r0, c);
    rows_args.config = a.config;
    rows_args.want_grad = a.gradients;
    rows_args.grad_scale = rows_of(a.grad_scale, r0, c);
    rows_args.loss = rows_of(a.loss, r0, c);
    rows_args.lse = rows_of(a.lse, r0, c);
    rows_args.entropy = rows_of(a.entropy, r0, c);
    rows_args.argmax = rows_of(a.argmax, r0, c);
    rows_args.teacher_argmax = rows_of(a.teacher_argmax, r0, c);
    k.head_loss_rows(rows_args);
    if (!a.gradients) continue;
    if (a.grad_hidden.defined()) k.gemm(lc, a.head, raw::narrow(a.grad_hidden, 0, r0, c), 1.0, 0.0);
    if (a.grad_head.defined()) k.gemm(raw::transpose(lc, 0, 1), hc, a.grad_head, 1.0, 1.0);
  }
}

}  // namespace cg
