// Why this file exists: see kernel_shapes.h.
#include "ops/kernel_shapes.h"

#include <algorithm>

#include "core/views.h"

namespace cg {

GemmLayout gemm_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  GemmLayout l;
  // Row-major: unit column stride, rows at least a row apart.
  const int64_t cs_r = cols == 1 ? 1 : col_stride;
  const int64_t rs_r = rows == 1 ? std::max<int64_t>(cols, 1) : row_stride;
  if (cs_r == 1 && rs_r >= std::max<int64_t>(cols, 1)) {
    l.in_place = l.row_major = true;
    l.ld = rs_r;
    return l;
  }
  // Column-major: unit row stride, columns at least a column apart.
  const int64_t rs_c = rows == 1 ? 1 : row_stride;
  const int64_t cs_c = cols == 1 ? std::max<int64_t>(rows, 1) : col_stride;
  if (rs_c == 1 && cs_c >= std::max<int64_t>(rows, 1)) {
    l.in_place = true;
    l.ld = cs_c;
  }
  return l;
}

ReductionSplit split_reduction(const Tensor& a, const std::vector<bool>& reduce, bool keepdim) {
  ReductionSplit s;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (reduce[d]) {
      s.reduced_shape.push_back(a.shape()[d]);
      s.reduced_strides.push_back(a.strides()[d]);
      if (keepdim) s.out_shape.push_back(1);
    } else {
      s.kept_shape.push_back(a.shape()[d]);
      s.kept_strides.push_back(a.strides()[d]);
      s.out_shape.push_back(a.shape()[d]);
    }
  }
  // The output is contiguous and its kept dims are in the same order as the input's.
  s.out_kept_strides = contiguous_strides(s.kept_shape);
  return s;
}

namespace {

int64_t folded_row_stride(const Tensor& t) {
  int64_t stride = -1, expected = 0;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.shape()[d] == 1) continue;
    if (stride >= 0 && t.strides()[d] != expected) return -1;
    if (stride < 0) stride = t.strides()[d];
    expected = t.strides()[d] * t.shape()[d];
  }
  return stride < 0 ? 1 : stride;  // every dim 1: a single row, any stride
}

Shape broadcast_batch_strides(const Tensor& t, int64_t nbatch) {
  const int64_t nt = t.dim() - 2;
  Shape s(nbatch, 0);
  for (int64_t i = 0; i < nt; ++i) s[nbatch - nt + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return s;
}

}  // namespace

MatmulShape matmul_shape(const Tensor& a, const Tensor& b) {
  MatmulShape s;
  const int64_t na = a.dim(), nb = b.dim();
  s.n = a.shape()[na - 2];
  s.k = a.shape()[na - 1];
  s.m = b.shape()[nb - 1];
  const Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  const Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  s.batch = raw::broadcast_shapes(batch_a, batch_b, "matmul");
  s.out_shape = s.batch;
  s.out_shape.push_back(s.n);
  s.out_shape.push_back(s.m);
  s.count = shape_numel(s.batch);
  s.folded_a_row_stride = nb == 2 ? folded_row_stride(a) : -1;
  const auto nbatch = static_cast<int64_t>(s.batch.size());
  s.batch_strides_a = broadcast_batch_strides(a, nbatch);
  s.batch_strides_b = broadcast_batch_strides(b, nbatch);
  return s;
}

}  // namespace cg
