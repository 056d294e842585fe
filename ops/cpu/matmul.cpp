// Why this file exists: the CPU matrix product, via Eigen's GEMM on the tensors' own
// memory (Eigen::Map; a transposed operand maps as column-major, no copy). Batch dims
// broadcast; each batch is one GEMM. bf16/f16 are converted to f32, multiplied, and
// rounded back (the conversions are allocator-accounted temporaries).
#include <Eigen/Core>

#include "core/views.h"
#include "ops/cpu/kernels.h"

namespace cg::cpu {

namespace {

template <typename T, int Order>
using MatMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, 0,
                          Eigen::OuterStride<>>;

// How a [rows, cols] matrix with strides (row_stride, col_stride) maps onto Eigen.
enum class Layout { row_major, col_major, other };
struct MatrixLayout {
  Layout layout;
  int64_t outer_stride;
};

MatrixLayout layout_of(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  // Size-1 dims may carry any stride; give them the one a dense layout would have.
  const int64_t cs = cols == 1 ? 1 : col_stride;
  const int64_t rs = rows == 1 ? std::max<int64_t>(cols, 1) : row_stride;
  if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) return {Layout::row_major, rs};
  const int64_t rs2 = rows == 1 ? 1 : row_stride;
  const int64_t cs2 = cols == 1 ? std::max<int64_t>(rows, 1) : col_stride;
  if (rs2 == 1 && cs2 >= std::max<int64_t>(rows, 1)) return {Layout::col_major, cs2};
  return {Layout::other, 0};
}

MatrixLayout matrix_layout(const Tensor& t) {
  const int64_t nd = t.dim();
  return layout_of(t.shape()[nd - 2], t.shape()[nd - 1], t.strides()[nd - 2], t.strides()[nd - 1]);
}

template <typename T, int OrderA, int OrderB>
void gemm(const T* a, const T* b, T* c, int64_t n, int64_t k, int64_t m, int64_t lda,
          int64_t ldb) {
  MatMap<T, OrderA> A(a, n, k, Eigen::OuterStride<>(lda));
  MatMap<T, OrderB> B(b, k, m, Eigen::OuterStride<>(ldb));
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> C(c, n, m);
  if (k == 0) {
    C.setZero();
  } else {
    C.noalias() = A * B;
  }
}

template <typename T>
void gemm_any(const T* a, MatrixLayout la, const T* b, MatrixLayout lb, T* c, int64_t n,
              int64_t k, int64_t m) {
  const bool ra = la.layout == Layout::row_major, rb = lb.layout == Layout::row_major;
  if (ra && rb) gemm<T, Eigen::RowMajor, Eigen::RowMajor>(a, b, c, n, k, m, la.outer_stride, lb.outer_stride);
  if (ra && !rb) gemm<T, Eigen::RowMajor, Eigen::ColMajor>(a, b, c, n, k, m, la.outer_stride, lb.outer_stride);
  if (!ra && rb) gemm<T, Eigen::ColMajor, Eigen::RowMajor>(a, b, c, n, k, m, la.outer_stride, lb.outer_stride);
  if (!ra && !rb) gemm<T, Eigen::ColMajor, Eigen::ColMajor>(a, b, c, n, k, m, la.outer_stride, lb.outer_stride);
}

template <typename T>
Tensor matmul_typed(Tensor a, Tensor b) {
  const int64_t na = a.dim(), nb = b.dim();
  const int64_t n = a.shape()[na - 2], k = a.shape()[na - 1], m = b.shape()[nb - 1];
  const Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  const Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = raw::broadcast_shapes(batch_a, batch_b, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(n);
  out_shape.push_back(m);
  Tensor out = raw::empty(out_shape, a.dtype(), a.device());

  // Matrices whose strides Eigen cannot map (e.g. a stride-0 expand) are made dense.
  MatrixLayout la = matrix_layout(a), lb = matrix_layout(b);
  if (la.layout == Layout::other) { a = raw::clone(a); la = matrix_layout(a); }
  if (lb.layout == Layout::other) { b = raw::clone(b); lb = matrix_layout(b); }

  // Batch strides of a and b at the broadcast batch shape (0 where broadcast).
  const int64_t nbatch = static_cast<int64_t>(batch.size());
  Shape sa(nbatch, 0), sb(nbatch, 0);
  for (int64_t i = 0; i < na - 2; ++i) {
    const int64_t o = nbatch - (na - 2) + i;
    sa[o] = a.shape()[i] == 1 ? 0 : a.strides()[i];
  }
  for (int64_t i = 0; i < nb - 2; ++i) {
    const int64_t o = nbatch - (nb - 2) + i;
    sb[o] = b.shape()[i] == 1 ? 0 : b.strides()[i];
  }
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* pc = static_cast<T*>(out.data_ptr());
  const int64_t count = shape_numel(batch);
  if (n * m == 0) return out;
  Shape index(nbatch, 0);
  for (int64_t bi = 0; bi < count; ++bi) {
    int64_t oa = 0, ob = 0;
    for (int64_t d = 0; d < nbatch; ++d) { oa += index[d] * sa[d]; ob += index[d] * sb[d]; }
    gemm_any<T>(pa + oa, la, pb + ob, lb, pc + bi * n * m, n, k, m);
    for (int64_t d = nbatch - 1; d >= 0; --d) {
      if (++index[d] < batch[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  switch (a.dtype()) {
    case DType::f32: return matmul_typed<float>(a, b);
    case DType::f64: return matmul_typed<double>(a, b);
    case DType::bf16:
    case DType::f16: {
      Tensor out = matmul_typed<float>(raw::to_dtype(a, DType::f32), raw::to_dtype(b, DType::f32));
      return raw::to_dtype(out, a.dtype());
    }
    default: break;
  }
  CG_FAIL("matmul: dtype ", dtype_name(a.dtype()), " is not supported; it computes on f32, f64, "
          "bf16 and f16 tensors");
}

}  // namespace cg::cpu
