// Why this file exists: see fused_head_loop.h. Shapes per chunk of c rows starting at r0:
//   Hc [c, D]  = hidden[r0 : r0 + c]          L [c, V] = Hc W^T, then dlogits in place
//   Tc [c, Dt] = teacher_hidden[r0 : r0 + c]  P [c, V] = Tc Wt^T
//   dH[r0 : r0 + c] [c, D] = L W               dW [V, D] += L^T Hc   (fp32 or f64)
// L and P are in the device's head_logits_dtype (the CPU: fp32; a GPU: bf16 for bf16, fp32
// for f16: Note [16-bit logits on the GPU] in cuda/cuda_kernels.h).
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

// Note [Separate teacher GEMM]: with a shared frozen head the student's and the teacher's
// chunk rows could be stacked into one [2c, D] x [D, V] GEMM. Measured on the H200 at the
// DFlash shape (bench/fused_loss_bench's two floors), cuBLASLt ran the stacked GEMM 2-4%
// slower than two [c, D] ones (280 vs 270 ms for the whole loop's GEMMs at c = 1536), so
// the loop makes two GEMMs into one [2c, V] buffer (student rows, then teacher rows).

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
  need({rows, v, d, a.hidden.dtype(), a.head.dtype(), work, a.hidden.stride(1) == 1, true, true});
  if (teacher) {
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
  return logits * (teacher ? 2 : 1) + gemm;
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
  const Tensor head_t = raw::transpose(a.head, 0, 1);  // [D, V]
  const Tensor teacher_head_t = teacher ? raw::transpose(teacher_head_or_head(a), 0, 1) : Tensor();
  // Reused per chunk: [chunk, V] student logits, then [chunk, V] teacher logits
  // (Note [Separate teacher GEMM]).
  const Tensor logits = raw::empty({teacher ? 2 * chunk : chunk, v}, work, dev);

  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t c = std::min(chunk, rows - r0);
    const Tensor hc = raw::narrow(h, 0, r0, c);
    const Tensor lc = raw::narrow(logits, 0, 0, c);
    k.gemm(hc, head_t, lc, 1.0, 0.0);
    HeadRowsArgs rows_args;
    rows_args.logits = lc;
    if (teacher) {
      rows_args.teacher = raw::narrow(logits, 0, chunk, c);
      k.gemm(raw::narrow(a.teacher_hidden, 0, r0, c), teacher_head_t, rows_args.teacher, 1.0, 0.0);
    }
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
