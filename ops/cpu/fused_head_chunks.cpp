// Why this file exists: see fused_head_chunks.h. Shapes per chunk (C rows), per vocabulary
// tile [v0, v0 + Vt) of the head:
//   Hc [C, D]  hidden rows (or their fp32 copy)    L [C, V] = Hc W^T, then dlogits in place
//   Tc [C, Dt] teacher rows                        P [C, V] = Tc Wt^T
//   dHc [C, D] = sum over tiles L[:, tile] W[tile]  dW[tile] += L[:, tile]^T Hc
// Temporaries (allocator-accounted, category temporary): L and P; fp32 tiles of a 16-bit
// W (and Wt) [Vt, D]; fp32 row buffers for 16-bit hidden rows and their dh. Every product
// is a cpu::gemm on these compute-dtype views (read in place: no scratch), so it runs on
// all the pool's threads.
#include "ops/cpu/fused_head_chunks.h"

#include <optional>
#include <utility>

#include <Eigen/Core>

#include "core/memory_trace.h"
#include "core/views.h"
#include "ops/cpu/compute_copy.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/head_loss_rows.h"

namespace cg::cpu {

namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using MutMap = Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>>;

// True when x's rows can be read in place as `compute` values (no conversion buffer).
bool rows_dense(const Tensor& x, DType compute) {
  return x.dtype() == compute && (x.stride(1) == 1 || x.size(1) == 1);
}

// Rows [r0, r0 + n) of a 2-D tensor as a compute-dtype matrix: the tensor's own memory
// when its rows are dense in that dtype, else converted into `buffer` ([>= n, cols]).
template <typename T>
ConstMap<T> rows_of(const Tensor& x, int64_t r0, int64_t n, const Tensor& buffer) {
  const int64_t cols = x.size(1);
  if (rows_dense(x, dtype_of<T>())) {
    return ConstMap<T>(x.data<T>() + r0 * x.stride(0), n, cols, Eigen::OuterStride<>(x.stride(0)));
  }
  raw::copy_(raw::narrow(buffer, 0, 0, n), raw::narrow(x, 0, r0, n));
  return ConstMap<T>(buffer.data<T>(), n, cols, Eigen::OuterStride<>(cols));
}

// A compute-dtype matrix view for cpu::gemm, and its transpose.
template <typename M>
GemmMatrix gemm_view(const M& m) {
  using T = typename M::Scalar;
  return {const_cast<T*>(m.data()), dtype_of<T>(), m.rows(), m.cols(), m.outerStride(), 1};
}
GemmMatrix transposed(GemmMatrix m) {
  std::swap(m.rows, m.cols);
  std::swap(m.row_stride, m.col_stride);
  return m;
}

template <typename T>
T* opt(const Tensor& t, int64_t offset) {
  return t.defined() ? t.data<T>() + offset : nullptr;
}

bool same_tensor_memory(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset() == b.offset() && a.shape() == b.shape() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

template <typename T>
void run(const FusedHeadChunkArgs& a) {
  CategoryGuard category(MemoryCategory::temporary);
  const DType cd = dtype_of<T>();
  const Tensor& h = a.hidden;
  const Device dev = h.device();
  const int64_t rows = h.size(0), d = h.size(1), v = a.head.size(0);
  const int64_t chunk = std::min<int64_t>(a.chunk_rows, std::max<int64_t>(rows, 1));
  const int64_t tile = std::min(v, kHeadTileRows);
  const bool teacher = loss_needs_teacher(a.config);
  const Tensor& th = a.teacher_hidden;
  const Tensor& wt = a.teacher_head.defined() ? a.teacher_head : a.head;
  const bool shared_head = same_tensor_memory(wt, a.head);
  const int64_t dt = teacher ? th.size(1) : 0;

  auto buffer_unless_dense = [&](const Tensor& x, Shape shape) {
    return rows_dense(x, cd) ? Tensor() : raw::empty(shape, cd, dev);
  };
  const Tensor logits = raw::empty({chunk, v}, cd, dev);
  const Tensor teacher_logits = teacher ? raw::empty({chunk, v}, cd, dev) : Tensor();
  const Tensor w_tile = buffer_unless_dense(a.head, {tile, d});
  const Tensor wt_tile = teacher && !shared_head ? buffer_unless_dense(wt, {tile, dt}) : Tensor();
  const Tensor h_buf = buffer_unless_dense(h, {chunk, d});
  const Tensor th_buf = teacher ? buffer_unless_dense(th, {chunk, dt}) : Tensor();
  const bool dh_direct = a.grad_hidden.defined() && a.grad_hidden.dtype() == cd;
  const Tensor dh_buf = a.grad_hidden.defined() && !dh_direct ? raw::empty({chunk, d}, cd, dev) : Tensor();

  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t c = std::min(chunk, rows - r0);
    const ConstMap<T> Hc = rows_of<T>(h, r0, c, h_buf);
    MutMap<T> L(logits.data<T>(), c, v, Eigen::OuterStride<>(v));
    T* p = nullptr;
    if (teacher) p = teacher_logits.data<T>();
    MutMap<T> P(p, teacher ? c : 0, v, Eigen::OuterStride<>(v));
    std::optional<ConstMap<T>> Tc;
    if (teacher) Tc.emplace(rows_of<T>(th, r0, c, th_buf));
    for (int64_t v0 = 0; v0 < v; v0 += tile) {
      const int64_t vt = std::min(tile, v - v0);
      const ConstMap<T> W = rows_of<T>(a.head, v0, vt, w_tile);
      gemm(gemm_view(Hc), transposed(gemm_view(W)), gemm_view(L.middleCols(v0, vt)), 1.0, 0.0);
      if (teacher) {
        const ConstMap<T> Wt = shared_head ? W : rows_of<T>(wt, v0, vt, wt_tile);
        gemm(gemm_view(*Tc), transposed(gemm_view(Wt)), gemm_view(P.middleCols(v0, vt)), 1.0, 0.0);
      }
    }
    HeadRowOutputs<T> out;
    out.loss = opt<T>(a.loss, r0);
    out.lse = opt<T>(a.lse, r0);
    out.entropy = opt<T>(a.entropy, r0);
    out.argmax = opt<int64_t>(a.argmax, r0);
    out.teacher_argmax = opt<int64_t>(a.teacher_argmax, r0);
    head_loss_rows<T>(L.data(), p, opt<int64_t>(a.labels, r0), c, v, a.config, a.gradients,
                      opt<T>(a.grad_scale, r0), out);
    if (!a.gradients || (!a.grad_hidden.defined() && !a.grad_head.defined())) continue;

    T* dh_rows = a.grad_hidden.defined() ? (dh_direct ? a.grad_hidden.data<T>() + r0 * d : dh_buf.data<T>()) : nullptr;
    MutMap<T> dHc(dh_rows, dh_rows ? c : 0, d, Eigen::OuterStride<>(d));
    if (dh_rows) dHc.setZero();
    for (int64_t v0 = 0; v0 < v; v0 += tile) {
      const int64_t vt = std::min(tile, v - v0);
      const ConstMap<T> W = rows_of<T>(a.head, v0, vt, w_tile);
      if (dh_rows) gemm(gemm_view(L.middleCols(v0, vt)), gemm_view(W), gemm_view(dHc), 1.0, 1.0);
      if (a.grad_head.defined()) {
        MutMap<T> dW(a.grad_head.data<T>() + v0 * d, vt, d, Eigen::OuterStride<>(d));
        gemm(transposed(gemm_view(L.middleCols(v0, vt))), gemm_view(Hc), gemm_view(dW), 1.0, 1.0);
      }
    }
    if (dh_rows && !dh_direct) raw::copy_(raw::narrow(a.grad_hidden, 0, r0, c), raw::narrow(dh_buf, 0, 0, c));
  }
}

}  // namespace

void fused_head_chunks(const FusedHeadChunkArgs& a) {
  if (compute_dtype_of(a.hidden.dtype()) == DType::f64) run<double>(a);
  else run<float>(a);
}

FusedHeadFootprint fused_head_footprint(const Tensor& hidden, const Tensor& head,
                                        const Tensor& teacher_hidden, const Tensor& teacher_head,
                                        bool teacher) {
  const DType cd = compute_dtype_of(hidden.dtype());
  const size_t cs = element_size(cd);
  const size_t v = static_cast<size_t>(head.size(0)), d = static_cast<size_t>(hidden.size(1));
  const size_t tile = std::min<size_t>(v, kHeadTileRows);
  FusedHeadFootprint f;
  f.per_row = v * cs * (teacher ? 2 : 1);  // logits (+ teacher logits)
  if (!rows_dense(hidden, cd)) f.per_row += d * cs;  // converted hidden rows
  if (hidden.dtype() != cd) f.per_row += d * cs;      // their dh before rounding
  if (!rows_dense(head, cd)) f.fixed += tile * d * cs;
  if (teacher) {
    const Tensor& wt = teacher_head.defined() ? teacher_head : head;
    const size_t dt = static_cast<size_t>(teacher_hidden.size(1));
    if (!rows_dense(teacher_hidden, cd)) f.per_row += dt * cs;
    if (!same_tensor_memory(wt, head) && !rows_dense(wt, cd)) f.fixed += tile * dt * cs;
  }
  return f;
}

}  // namespace cg::cpu
