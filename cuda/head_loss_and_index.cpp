// Why this file exists: the CUDA table's lm_head loss rows, label/index checks, row
// weights and index entries (CudaKernels, cuda/cuda_kernels.h), each calling the launcher
// beside its kernel in cuda/head_loss_kernels.cu or cuda/index_kernels.cu.
//
// Note [Checks sync]: check_labels and check_indices must throw the CPU's message, which
// names the first bad value and its position, so they read a result on the host: a kernel
// writes the first bad position (atomicMin) and its value into a two-element device
// buffer, and one copy to the host brings both back. That copy waits for the compute
// stream -- the one host synchronisation of these entries, as ops/kernels.h allows ("the
// checks do"). Labels and indices uploaded by from_ints carry bounds the host already
// knows (Note [Host-known values], core/storage.h); where those prove the check, it passes
// without the kernel or the read, so a training step whose labels, indices and ids come
// from the host never waits here. Everything else (device-made indices, a write since the
// upload) still runs the device check and gives its message at the op, as on the CPU.
#include "core/memory_trace.h"
#include "core/views.h"
#include "cuda/cuda_kernels.h"
#include "cuda/head_loss_kernels.h"
#include "cuda/index_kernels.h"
#include "cuda/launch_helpers.h"

namespace cg::cuda {

namespace {

void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

Tensor small_scratch(int64_t n, DType dtype, Device device) {
  CategoryGuard temporary(MemoryCategory::temporary);
  return raw::empty({n}, dtype, device);
}

// The two values of a first-bad buffer, on the host (Note [Checks sync]).
std::pair<int64_t, int64_t> read_first_bad(const Tensor& buf) {
  const Tensor host = raw::to_device(buf, kCPU);
  const int64_t* p = host.data<int64_t>();
  return {p[0], p[1]};
}

Shape strides_without(const Tensor& x, int64_t dim) {
  Shape s = x.strides();
  s[static_cast<size_t>(dim)] = 0;
  return s;
}

Shape index_along(const Tensor& idx, int64_t dim, int64_t ndim) {
  Shape s(static_cast<size_t>(ndim), 0);
  if (idx.dim() == 1) s[static_cast<size_t>(dim)] = idx.strides()[0];
  return s;
}

// Runs f(acc) on dst itself (f32/f64) or on an f32 copy copied back after (bf16/f16):
// repeated indices then accumulate with one final rounding, as the CPU.
template <typename F>
void accumulate_in_compute_type(const Tensor& dst, F&& f) {
  if (dst.dtype() == DType::f32 || dst.dtype() == DType::f64) {
    f(dst);
    return;
  }
  Tensor acc;
  {
    CategoryGuard temporary(MemoryCategory::temporary);
    acc = raw::to_dtype(dst, DType::f32);  // a new tensor: the dtype differs
  }
  f(acc);
  raw::copy_(dst, acc);
}

void add_at_indices(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src,
                    const Shape& shape, const Shape& src_strides, const Shape& idx_strides,
                    int64_t skip) {
  accumulate_in_compute_type(dst, [&](const Tensor& acc) {
    const Shape acc_strides = strides_without(acc, dim);
    const Strided g =
        strided_of<3>(shape, {&acc_strides, &src_strides, &idx_strides}, "scatter-add");
    launch_scatter_add_elements(acc.dtype(), acc.data_ptr(), src.dtype(), src.data_ptr(),
                                idx.data_ptr(), idx.dtype(), acc.strides()[dim], skip, g,
                                stream_of(acc));
  });
}

}  // namespace

void CudaKernels::head_loss_rows(const HeadRowsArgs& a) {
  const int64_t C = a.logits.size(0), V = a.logits.size(1);
  if (C == 0) return;
  HeadRowPointers out;
  out.loss = ptr_or_null(a.loss);
  out.lse = ptr_or_null(a.lse);
  out.entropy = ptr_or_null(a.entropy);
  out.argmax = a.argmax.defined() ? a.argmax.data<int64_t>() : nullptr;
  out.teacher_argmax = a.teacher_argmax.defined() ? a.teacher_argmax.data<int64_t>() : nullptr;
  launch_head_loss_rows(a.logits.dtype(), a.logits.data_ptr(), ptr_or_null(a.teacher),
                        a.labels.defined() ? a.labels.data<int64_t>() : nullptr, C, V, a.config,
                        a.want_grad, ptr_or_null(a.grad_scale), out, stream_of(a.logits));
}

void CudaKernels::check_labels(const Tensor& labels, int64_t vocab, int64_t ignore_index) {
  if (labels.storage()->known_values_within(0, vocab, ignore_index)) return;  // Note [Checks sync]
  const Tensor y = raw::contiguous(labels);
  const Tensor buf = small_scratch(2, DType::i64, labels.device());
  launch_find_bad_label(y.data<int64_t>(), y.numel(), 1, vocab, ignore_index, buf.data<int64_t>(),
                        stream_of(y));
  const auto [row, label] = read_first_bad(buf);
  CG_CHECK(row == INT64_MAX, "head loss: label ", label, " at row ", row,
           " is out of range for a vocabulary of ", vocab, " (labels must be in [0, ", vocab,
           ") or ignore_index=", ignore_index, " to skip a row)");
}

void CudaKernels::row_weights(const Tensor& labels, const Tensor& weights, int64_t ignore_index,
                              bool normalize, const Tensor& out) {
  launch_row_weights(labels.defined() ? labels.data<int64_t>() : nullptr,
                     labels.defined() && labels.dim() > 0 ? labels.stride(0) : 1,
                     ptr_or_null(weights), weights.defined() ? weights.dtype() : DType::f32,
                     weights.defined() && weights.dim() > 0 ? weights.stride(0) : 1, ignore_index,
                     normalize, out.data_ptr(), out.dtype(), out.dim() > 0 ? out.stride(0) : 1,
                     out.numel(), stream_of(out));
}

Tensor CudaKernels::index_select(const Tensor& x, int64_t dim, const Tensor& idx) {
  Shape out_shape = x.shape();
  out_shape[static_cast<size_t>(dim)] = idx.numel();
  Tensor out = raw::empty(out_shape, x.dtype(), x.device());
  const Shape xs = strides_without(x, dim), is = index_along(idx, dim, x.dim());
  const Strided g = strided_of<3>(out_shape, {&out.strides(), &xs, &is}, "index_select");
  launch_gather_elements(element_size(x.dtype()), out.data_ptr(), x.data_ptr(), idx.data_ptr(),
                         idx.dtype(), x.strides()[dim], g, stream_of(x));
  return out;
}

void CudaKernels::index_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src,
                            int64_t skip) {
  add_at_indices(dst, dim, idx, src, src.shape(), src.strides(), index_along(idx, dim, src.dim()),
                 skip);
}

Tensor CudaKernels::gather(const Tensor& x, int64_t dim, const Tensor& idx) {
  Tensor out = raw::empty(idx.shape(), x.dtype(), x.device());
  const int64_t step = x.strides()[dim];  // x is never 0-d here (Note [0-d scatter_add])
  const Shape xs = strides_without(x, dim);
  const Strided g = strided_of<3>(idx.shape(), {&out.strides(), &xs, &idx.strides()}, "gather");
  launch_gather_elements(element_size(x.dtype()), out.data_ptr(), x.data_ptr(), idx.data_ptr(),
                         idx.dtype(), step, g, stream_of(x));
  return out;
}

void CudaKernels::scatter_add(const Tensor& dst, int64_t dim, const Tensor& idx,
                              const Tensor& src) {
  // (never 0-d: ops/index_ops.cpp hands 0-d tensors over as 1-d, Note [0-d scatter_add])
  add_at_indices(dst, dim, idx, src, idx.shape(), src.strides(), idx.strides(), -1);
}

void CudaKernels::check_indices(const char* op, const char* noun, const Tensor& idx, int64_t bound,
                                const std::string& what) {
  if (idx.dtype() == DType::i64 && idx.storage()->known_values_within(0, bound)) return;
  const Tensor buf = small_scratch(2, DType::i64, idx.device());
  const Strided g = strided_of<1>(idx.shape(), {&idx.strides()}, op);
  launch_find_bad_index(idx.data_ptr(), idx.dtype(), bound, g, buf.data<int64_t>(), stream_of(idx));
  const auto [position, value] = read_first_bad(buf);
  CG_CHECK(position == INT64_MAX, op, ": ", noun, " ", value, " (at flat position ", position,
           " of the ", shape_str(idx.shape()), " indices) is out of range for ", what, "; every ",
           noun, " must be in [0, ", bound, ")");
}

}  // namespace cg::cuda
