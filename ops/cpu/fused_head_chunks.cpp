// Why this file exists: see fused_head_chunks.h. Shapes per chunk (C rows):
//   Hc [C, D] = hidden rows (or their fp32 copy)    L [C, V] = Hc W^T, then dlogits in place
//   Tc [C, D] = teacher rows                        P [C, V] = Tc Wt^T
//   dHc [C, D] = L W                                dW [V, D] += L^T Hc
// Temporaries (allocator-accounted, category temporary): L and P; an fp32 copy of W (and
// of Wt) when they are 16-bit; fp32 row buffers for 16-bit hidden rows and their dh.
#include "ops/cpu/fused_head_chunks.h"

#include <Eigen/Core>

#include "core/memory_trace.h"
#include "core/views.h"
#include "ops/cpu/head_loss_rows.h"

namespace cg::cpu {

namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using MutMap = Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>>;

// t itself when it is already a contiguous tensor of `dtype`, else a converted copy.
Tensor as_compute(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  Tensor out = raw::empty(t.shape(), dtype, t.device());
  raw::copy_(out, t);
  return out;
}

// Rows [r0, r0 + c) of a [T, D] tensor as a compute-dtype matrix: the tensor's own memory
// when its rows are dense in that dtype, else copied into `buffer` ([C, D]).
template <typename T>
ConstMap<T> rows_of(const Tensor& x, int64_t r0, int64_t c, const Tensor& buffer) {
  const int64_t d = x.size(1);
  if (x.dtype() == dtype_of<T>() && (x.stride(1) == 1 || d == 1)) {
    return ConstMap<T>(x.data<T>() + r0 * x.stride(0), c, d, Eigen::OuterStride<>(x.stride(0)));
  }
  Tensor dst = raw::narrow(buffer, 0, 0, c);
  raw::copy_(dst, raw::narrow(x, 0, r0, c));
  return ConstMap<T>(buffer.data<T>(), c, d, Eigen::OuterStride<>(d));
}

template <typename T>
T* opt(const Tensor& t, int64_t offset) {
  return t.defined() ? t.data<T>() + offset : nullptr;
}

template <typename T>
void run(const FusedHeadChunkArgs& a) {
  CategoryGuard category(MemoryCategory::temporary);
  const DType cd = dtype_of<T>();
  const Tensor& h = a.hidden;
  const int64_t rows = h.size(0), d = h.size(1), v = a.head.size(0);
  const int64_t chunk = std::min<int64_t>(a.chunk_rows, std::max<int64_t>(rows, 1));
  const bool teacher = loss_needs_teacher(a.config);
  const bool grads = a.grad_scale.defined();

  const Tensor w = as_compute(a.head, cd);
  const Tensor& teacher_head = a.teacher_head.defined() ? a.teacher_head : a.head;
  const Tensor wt = !teacher ? Tensor()
                    : teacher_head.storage() == a.head.storage() && teacher_head.offset() == a.head.offset()
                        ? w
                        : as_compute(teacher_head, cd);
  const ConstMap<T> W(w.data<T>(), v, d, Eigen::OuterStride<>(d));

  const Tensor logits = raw::empty({chunk, v}, cd, h.device());
  const Tensor teacher_logits = teacher ? raw::empty({chunk, v}, cd, h.device()) : Tensor();
  const bool h_direct = h.dtype() == cd && (h.stride(1) == 1 || d == 1);
  const Tensor h_buf = h_direct ? Tensor() : raw::empty({chunk, d}, cd, h.device());
  const Tensor& th = a.teacher_hidden;
  const Tensor th_buf = teacher && !(th.dtype() == cd && (th.stride(1) == 1 || d == 1))
                            ? raw::empty({chunk, d}, cd, h.device()) : Tensor();
  const bool dh_direct = a.grad_hidden.defined() && a.grad_hidden.dtype() == cd;
  const Tensor dh_buf = a.grad_hidden.defined() && !dh_direct ? raw::empty({chunk, d}, cd, h.device()) : Tensor();

  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t c = std::min(chunk, rows - r0);
    const ConstMap<T> Hc = rows_of<T>(h, r0, c, h_buf);
    MutMap<T> L(logits.data<T>(), c, v, Eigen::OuterStride<>(v));
    L.noalias() = Hc * W.transpose();
    T* p = nullptr;
    if (teacher) {
      const ConstMap<T> Tc = rows_of<T>(th, r0, c, th_buf);
      const ConstMap<T> Wt(wt.data<T>(), v, d, Eigen::OuterStride<>(d));
      MutMap<T> P(teacher_logits.data<T>(), c, v, Eigen::OuterStride<>(v));
      P.noalias() = Tc * Wt.transpose();
      p = P.data();
    }
    HeadRowOutputs<T> out;
    out.loss = opt<T>(a.loss, r0);
    out.lse = opt<T>(a.lse, r0);
    out.entropy = opt<T>(a.entropy, r0);
    out.argmax = opt<int64_t>(a.argmax, r0);
    out.teacher_argmax = opt<int64_t>(a.teacher_argmax, r0);
    head_loss_rows<T>(L.data(), p, opt<int64_t>(a.labels, r0), c, v, a.config,
                      grads ? a.grad_scale.data<T>() + r0 : nullptr, out);
    if (!grads) continue;
    if (a.grad_hidden.defined()) {
      T* dst = dh_direct ? a.grad_hidden.data<T>() + r0 * d : dh_buf.data<T>();
      MutMap<T> dHc(dst, c, d, Eigen::OuterStride<>(d));
      dHc.noalias() = L * W;
      if (!dh_direct) raw::copy_(raw::narrow(a.grad_hidden, 0, r0, c), raw::narrow(dh_buf, 0, 0, c));
    }
    if (a.grad_head.defined()) {
      MutMap<T> dW(a.grad_head.data<T>(), v, d, Eigen::OuterStride<>(d));
      dW.noalias() += L.transpose() * Hc;
    }
  }
}

}  // namespace

DType fused_head_compute_dtype(const Tensor& hidden) {
  return hidden.dtype() == DType::f64 ? DType::f64 : DType::f32;
}

void fused_head_chunks(const FusedHeadChunkArgs& a) {
  if (fused_head_compute_dtype(a.hidden) == DType::f64) run<double>(a);
  else run<float>(a);
}

}  // namespace cg::cpu
