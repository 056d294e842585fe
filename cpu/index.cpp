// Why this file exists: the CPU table's index entries (CpuKernels, cpu/cpu_kernels.h): the
// forward and backward of index_select, gather, scatter_add and embedding. Each
// is one strided_loop over the index (or output) shape whose operand strides have the
// indexed dim's stride set to 0; the index value times that stride is added per element.
// So any strides work without contiguous copies, and gathers copy raw bits of any dtype.
#include <cstring>

#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"

namespace cg::cpu {

namespace {

// Calls body.operator()<U>() with U an unsigned integer as wide as one element of
// `dtype`: gathers only move bits, so one instantiation serves f32 and i32 alike.
template <typename Body>
void dispatch_by_size(DType dtype, Body&& body) {
  switch (element_size(dtype)) {
    case 1: body.template operator()<uint8_t>(); return;
    case 2: body.template operator()<uint16_t>(); return;
    case 4: body.template operator()<uint32_t>(); return;
    case 8: body.template operator()<uint64_t>(); return;
    default: break;
  }
  CG_FAIL("index op: dtype ", dtype_name(dtype), " has an unsupported element size");
}

// Calls body.operator()<I>() with I the C++ type of an index tensor's dtype.
template <typename Body>
void dispatch_index(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::i64: body.template operator()<int64_t>(); return;
    case DType::i32: body.template operator()<int32_t>(); return;
    default: break;
  }
  CG_FAIL("index op: indices have dtype ", dtype_name(dtype), "; they must be i32 or i64");
}

// x's strides with the indexed dim's stride zeroed (it comes from the index instead).
Shape strides_without(const Tensor& x, int64_t dim) {
  Shape s = x.strides();
  s[dim] = 0;
  return s;
}

// Runs f(acc) where acc is dst itself (f32/f64) or an fp32 copy of dst that is copied
// back afterwards (bf16/f16): repeated indices then accumulate with one final rounding.
template <typename F>
void accumulate_in_compute_type(const Tensor& dst, F&& f) {
  if (!is_half(dst.dtype())) {
    f(dst);
    return;
  }
  Tensor acc = raw::to_dtype(dst, DType::f32);
  f(acc);
  raw::copy_(dst, acc);
}

// Shared body of index_add_ and scatter_add_: over `shape`, with operand strides
// {acc (indexed dim zeroed), src, idx}, adds src into acc at the index times step.
void add_at_indices(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src,
                    const Shape& shape, const Shape& src_strides, const Shape& idx_strides,
                    int64_t skip) {
  accumulate_in_compute_type(dst, [&](const Tensor& acc) {
    const int64_t step = acc.strides()[dim];
    const Shape acc_strides = strides_without(acc, dim);
    dispatch_floating(src.dtype(), "scatter-add", [&]<typename S>() {
      using A = compute_t<S>;
      A* pd = static_cast<A*>(acc.data_ptr());
      const S* ps = static_cast<const S*>(src.data_ptr());
      dispatch_index(idx.dtype(), [&]<typename I>() {
        const I* pi = static_cast<const I*>(idx.data_ptr());
        strided_loop<3>(shape, {acc_strides, src_strides, idx_strides},
                        [&](const std::array<int64_t, 3>& o) {
                          const int64_t i = static_cast<int64_t>(pi[o[2]]);
                          if (i == skip) return;
                          pd[o[0] + i * step] += static_cast<A>(load(ps + o[1]));
                        });
      });
    });
  });
}

// Strides that walk a 1-D (or 0-d) idx along `dim` of an ndim-dim loop.
Shape index_along(const Tensor& idx, int64_t dim, int64_t ndim) {
  Shape s(ndim, 0);
  if (idx.dim() == 1) s[dim] = idx.strides()[0];
  return s;
}

}  // namespace

void CpuKernels::check_indices(const char* op, const char* noun, const Tensor& idx, int64_t bound,
                               const std::string& what) {
  dispatch_index(idx.dtype(), [&]<typename I>() {
    const I* pi = static_cast<const I*>(idx.data_ptr());
    int64_t position = 0;  // row-major position in idx, for the message
    strided_loop<1>(idx.shape(), {idx.strides()}, [&](const std::array<int64_t, 1>& o) {
      const int64_t v = static_cast<int64_t>(pi[o[0]]);
      CG_CHECK(v >= 0 && v < bound, op, ": ", noun, " ", v, " (at flat position ", position,
               " of the ", shape_str(idx.shape()), " indices) is out of range for ", what,
               "; every ", noun, " must be in [0, ", bound, ")");
      ++position;
    });
  });
}

Tensor CpuKernels::index_select(const Tensor& x, int64_t dim, const Tensor& idx) {
  Shape out_shape = x.shape();
  out_shape[dim] = idx.numel();
  Tensor out = raw::empty(out_shape, x.dtype(), x.device());
  const int64_t step = x.strides()[dim];
  const Shape x_strides = strides_without(x, dim);
  const Shape idx_strides = index_along(idx, dim, x.dim());
  dispatch_by_size(x.dtype(), [&]<typename U>() {
    const U* px = static_cast<const U*>(x.data_ptr());
    U* po = static_cast<U*>(out.data_ptr());
    dispatch_index(idx.dtype(), [&]<typename I>() {
      const I* pi = static_cast<const I*>(idx.data_ptr());
      strided_loop<3>(out_shape, {out.strides(), x_strides, idx_strides},
                      [&](const std::array<int64_t, 3>& o) {
                        po[o[0]] = px[o[1] + static_cast<int64_t>(pi[o[2]]) * step];
                      });
    });
  });
  return out;
}

void CpuKernels::index_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src,
                           int64_t skip) {
  add_at_indices(dst, dim, idx, src, src.shape(), src.strides(), index_along(idx, dim, src.dim()),
                 skip);
}

Tensor CpuKernels::gather(const Tensor& x, int64_t dim, const Tensor& idx) {
  Tensor out = raw::empty(idx.shape(), x.dtype(), x.device());
  const int64_t step = x.strides()[dim];  // x is never 0-d here (Note [0-d scatter_add])
  const Shape x_strides = strides_without(x, dim);
  dispatch_by_size(x.dtype(), [&]<typename U>() {
    const U* px = static_cast<const U*>(x.data_ptr());
    U* po = static_cast<U*>(out.data_ptr());
    dispatch_index(idx.dtype(), [&]<typename I>() {
      const I* pi = static_cast<const I*>(idx.data_ptr());
      strided_loop<3>(idx.shape(), {out.strides(), x_strides, idx.strides()},
                      [&](const std::array<int64_t, 3>& o) {
                        po[o[0]] = px[o[1] + static_cast<int64_t>(pi[o[2]]) * step];
                      });
    });
  });
  return out;
}

void CpuKernels::scatter_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src) {
  // (never 0-d: ops/index_ops.cpp hands 0-d tensors over as 1-d, Note [0-d scatter_add])
  // The loop runs over idx's shape; src (at least as large in every dim) is read there.
  add_at_indices(dst, dim, idx, src, idx.shape(), src.strides(), idx.strides(), -1);
}

}  // namespace cg::cpu
