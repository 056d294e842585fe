// Why this file exists: see fused_head_loop.h. Shapes per chunk of c rows starting at r0:
//   Hc [c, D]  = hidden[r0 : r0 + c]          L [c, V] = Hc W^T, then dlogits in place
//   Tc [c, Dt] = teacher_hidden[r0 : r0 + c]  P [c, V] = Tc Wt^T
//   dH[r0 : r0 + c] [c, D] = L W               dW [V, D] += L^T Hc   (fp32 or f64)
// L and P are in the device's head_logits_dtype (the CPU: fp32; a GPU: bf16 for bf16, fp32
// for f16: Note [16-bit logits on the GPU] in cuda/cuda_kernels.h).
#include "ops/fused_head_loop.h"

#include <algorithm>

#include "core/memory_trace.h"
#include "core/stream_guard.h"
#include "core/views.h"
#include "ops/kernels.h"

namespace cg {

namespace {

// The side stream of the pipelined loop's row passes and gradient GEMMs.
constexpr StreamId kRowsStream = 1;

const Tensor& teacher_head_or_head(const FusedHeadLoopArgs& a) {
  return a.teacher_head.defined() ? a.teacher_head : a.head;
}

Tensor rows_of(const Tensor& t, int64_t r0, int64_t c) {
  return t.defined() ? raw::narrow(t, 0, r0, c) : Tensor();
}

// Pipelined where asked, where the device has the side stream, and where there is a next
// chunk to overlap with.
bool runs_pipelined(const FusedHeadLoopArgs& a, const DeviceKernels& k, int64_t chunk) {
  return a.pipelined && k.side_streams() >= static_cast<int>(kRowsStream) &&
         a.hidden.size(0) > chunk;
}

// Note [Separate teacher GEMM]: with a shared frozen head the student's and the teacher's
// chunk rows could be stacked into one [2c, D] x [D, V] GEMM. Measured on the H200 at the
// DFlash shape (bench/fused_loss_bench's two floors), cuBLASLt ran the stacked GEMM 2-4%
// slower than two [c, D] ones (280 vs 270 ms for the whole loop's GEMMs at c = 1536), so
// the loop makes two GEMMs into two [c, V] slots of one buffer.

// The steps of one chunk, shared by both loops. `student` and `teacher` are the chunk's
// [c, V] logits slots (teacher undefined without a teacher loss).
struct ChunkSteps {
  const FusedHeadLoopArgs& a;
  DeviceKernels& k;
  bool teacher;
  Tensor head_t, teacher_head_t;  // [D, V], [Dt, V]

  void student_logits(int64_t r0, const Tensor& student) const {
    k.gemm(raw::narrow(a.hidden, 0, r0, student.size(0)), head_t, student, 1.0, 0.0);
  }
  void teacher_logits(int64_t r0, const Tensor& out) const {
    k.gemm(raw::narrow(a.teacher_hidden, 0, r0, out.size(0)), teacher_head_t, out, 1.0, 0.0);
  }
  void rows(int64_t r0, const Tensor& student, const Tensor& teacher_slot) const {
    const int64_t c = student.size(0);
    HeadRowsArgs r;
    r.logits = student;
    r.teacher = teacher_slot;
    r.labels = rows_of(a.labels, r0, c);
    r.config = a.config;
    r.want_grad = a.gradients;
    r.grad_scale = rows_of(a.grad_scale, r0, c);
    r.loss = rows_of(a.loss, r0, c);
    r.lse = rows_of(a.lse, r0, c);
    r.entropy = rows_of(a.entropy, r0, c);
    r.argmax = rows_of(a.argmax, r0, c);
    r.teacher_argmax = rows_of(a.teacher_argmax, r0, c);
    k.head_loss_rows(r);
  }
  // dh rows = dlogits W; dW += dlogits^T Hc.
  void grads(int64_t r0, const Tensor& dlogits) const {
    if (!a.gradients) return;
    const int64_t c = dlogits.size(0);
    if (a.grad_hidden.defined())
      k.gemm(dlogits, a.head, raw::narrow(a.grad_hidden, 0, r0, c), 1.0, 0.0);
    if (a.grad_head.defined())
      k.gemm(raw::transpose(dlogits, 0, 1), raw::narrow(a.hidden, 0, r0, c), a.grad_head, 1.0, 1.0);
  }
};

void one_stream_loop(const ChunkSteps& s, const Tensor& logits, int64_t rows, int64_t chunk) {
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t c = std::min(chunk, rows - r0);
    const Tensor student = raw::narrow(logits, 0, 0, c);
    const Tensor teacher = s.teacher ? raw::narrow(logits, 0, chunk, c) : Tensor();
    s.student_logits(r0, student);
    if (s.teacher) s.teacher_logits(r0, teacher);
    s.rows(r0, student, teacher);
    s.grads(r0, student);
  }
}

// Joins the side stream back into the compute stream when the loop ends, also when a call
// throws: the chunk buffers, freed right after, go back to the compute stream's pool.
class JoinSideStream {
 public:
  JoinSideStream(DeviceKernels& k, Device dev) : k_(k), dev_(dev) {}
  ~JoinSideStream() {
    try {
      k_.stream_wait(dev_, kDefaultStream, kRowsStream);
    } catch (...) {  // unwinding already: the first error is the one to report
    }
  }
  JoinSideStream(const JoinSideStream&) = delete;
  JoinSideStream& operator=(const JoinSideStream&) = delete;

 private:
  DeviceKernels& k_;
  Device dev_;
};

// Note [Pipelined chunks]: on a device with side streams the row pass (memory- and
// instruction-bound) of chunk i overlaps the logits GEMMs of chunk i + 1 (tensor cores).
// Logits live in three [chunk, V] slots: the student's of even chunks, of odd chunks, and
// one teacher slot. In host order, with S0 the compute stream and S1 the rows stream:
//   S0: L(0), P(0)
//   for each chunk i:
//     S0 waits for S1      -- grads(i - 1) read slot (i + 1) % 2: it may be overwritten
//     S1 waits for S0      -- L(i), P(i) are written
//     S1: rows(i)          -- beside S0's L(i + 1)
//     S0: L(i + 1)
//     S0 waits for S1      -- rows(i) read the teacher slot (teacher losses only)
//     S0: P(i + 1)
//     S1: grads(i)         -- dh = L W, dW += L^T Hc, beside S0's P(i + 1)
//   S0 waits for S1        -- the join: everything after the loop sees S1's work
// One teacher slot instead of two keeps the bytes at 3 chunks of logits, not 4 (1024 rows
// instead of 768 at V = 248320 in bf16 within head_loss's 1.5 GiB budget); P(i + 1) then
// waits for rows(i), which is shorter than L(i + 1). Every wait is an event on the
// device (stream_wait), never a host wait.
// Memory: the slots and the outputs are allocated on S0 before the loop and freed after
// the join, so S0's later users of those blocks are ordered after S1's work without
// record_stream; what an entry allocates on S1 (a GEMM's workspace) comes from S1's pool
// (core/stream_guard.h) and is reused only by S1. (record_stream on the slots would keep
// them out of the pool until S1's events complete, and the next call, queued while S1
// still runs, would take fresh segments.)
// Measured on the H200 at the DFlash shape (KL + 0.1 CE, frozen head), the pipelined loop
// was slower than one stream: 317.2 ms against 307.1, because its 1024-row chunks make the
// GEMMs alone 283.4 ms instead of 269.6 at 1536 rows and a GEMM of this size leaves the row
// pass few multiprocessors to run on. So HeadLossOptions::pipelined is off by default; the
// loop stays, tested, for shapes where the row pass is a larger share (small D).
void pipelined_loop(const ChunkSteps& s, const Tensor& logits, int64_t rows, int64_t chunk) {
  const Device dev = logits.device();
  DeviceKernels& k = s.k;
  auto rows_in = [&](int64_t i) { return std::min(chunk, rows - i * chunk); };
  auto student = [&](int64_t i) { return raw::narrow(logits, 0, (i % 2) * chunk, rows_in(i)); };
  auto teacher = [&](int64_t i) {
    return s.teacher ? raw::narrow(logits, 0, 2 * chunk, rows_in(i)) : Tensor();
  };
  const int64_t n = (rows + chunk - 1) / chunk;
  JoinSideStream join(k, dev);
  s.student_logits(0, student(0));
  if (s.teacher) s.teacher_logits(0, teacher(0));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r0 = i * chunk;
    const bool next = i + 1 < n;
    k.stream_wait(dev, kDefaultStream, kRowsStream);
    k.stream_wait(dev, kRowsStream, kDefaultStream);
    {
      StreamGuard side(dev, kRowsStream);
      s.rows(r0, student(i), teacher(i));
    }
    if (next) s.student_logits(r0 + chunk, student(i + 1));
    if (s.teacher) {
      k.stream_wait(dev, kDefaultStream, kRowsStream);
      if (next) s.teacher_logits(r0 + chunk, teacher(i + 1));
    }
    StreamGuard side(dev, kRowsStream);
    s.grads(r0, student(i));
  }
}

}  // namespace

size_t fused_head_loop_bytes(const FusedHeadLoopArgs& a, int64_t rows) {
  DeviceKernels& k = kernels_for(a.hidden.device(), "head_loss (fused)");
  const DType work = k.head_logits_dtype(a.hidden.dtype());
  const int64_t v = a.head.size(0), d = a.hidden.size(1);
  const bool teacher = loss_needs_teacher(a.config);
  const bool pipelined = runs_pipelined(a, k, rows);
  const DType compute = compute_dtype_of(a.hidden.dtype());
  const size_t logits = static_cast<size_t>(rows) * static_cast<size_t>(v) * element_size(work);
  // The logits GEMMs' scratch and the gradient GEMMs'; pipelined, one of each may be in
  // use at once (on two streams).
  size_t logits_gemm = 0, grad_gemm = 0;
  auto need = [&](size_t& most, GemmDesc g) { most = std::max(most, k.gemm_scratch_bytes(g)); };
  need(logits_gemm,
       {rows, v, d, a.hidden.dtype(), a.head.dtype(), work, a.hidden.stride(1) == 1, true, true});
  if (teacher) {
    const Tensor& wt = teacher_head_or_head(a);
    need(logits_gemm, {rows, v, a.teacher_hidden.size(1), a.teacher_hidden.dtype(), wt.dtype(),
                       work, a.teacher_hidden.stride(1) == 1, true, true});
  }
  if (a.gradients && a.grad_hidden.defined()) {
    need(grad_gemm, {rows, d, v, work, a.head.dtype(), a.grad_hidden.dtype(), true, true, true});
  }
  if (a.gradients && a.grad_head.defined()) {
    need(grad_gemm,
         {v, d, rows, work, a.hidden.dtype(), compute, true, a.hidden.stride(1) == 1, true});
  }
  const size_t slots = (pipelined ? 2 : 1) + (teacher ? 1 : 0);  // Note [Pipelined chunks]
  const size_t scratch = pipelined ? logits_gemm + grad_gemm : std::max(logits_gemm, grad_gemm);
  return logits * slots + scratch;
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
  const ChunkSteps steps{a, k, teacher, raw::transpose(a.head, 0, 1),
                         teacher ? raw::transpose(teacher_head_or_head(a), 0, 1) : Tensor()};
  // Reused per chunk: the [chunk, V] slots of the student's logits (two when pipelined)
  // and the teacher's (Note [Separate teacher GEMM], Note [Pipelined chunks]).
  const bool pipelined = runs_pipelined(a, k, chunk);
  const int64_t slots = (pipelined ? 2 : 1) + (teacher ? 1 : 0);
  const Tensor logits = raw::empty({slots * chunk, v}, work, dev);
  if (pipelined) {
    pipelined_loop(steps, logits, rows, chunk);
  } else {
    one_stream_loop(steps, logits, rows, chunk);
  }
}

}  // namespace cg
