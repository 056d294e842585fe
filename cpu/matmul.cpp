// Why this file exists: the CPU table's matrix product (CpuKernels::matmul,
// cpu/cpu_kernels.h): batch dims broadcast, each batch one cpu::gemm (cpu/gemm.h) on the
// tensors' own memory -- transposed operands are read as they are, and bf16/f16 operands
// are converted one tile at a time, never whole.
// When b has no batch dims and a's batch dims fold into its rows (a [B, S, K] contiguous
// @ w [K, N]), the whole product is one GEMM of B*S rows. Many small GEMMs go to the
// pool one batch per piece instead.
#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/gemm.h"
#include "cpu/thread_pool.h"
#include "ops/kernel_shapes.h"

namespace cg::cpu {

Tensor CpuKernels::matmul(const Tensor& a, const Tensor& b) {
  CG_CHECK(is_floating(a.dtype()), "matmul: dtype ", dtype_name(a.dtype()),
           " is not supported; "
           "it computes on f32, f64, bf16 and f16 tensors");
  const int64_t na = a.dim(), nb = b.dim();
  const MatmulShape ms = matmul_shape(a, b);
  const int64_t n = ms.n, k = ms.k, m = ms.m, count = ms.count;
  const Shape& batch = ms.batch;
  Tensor out = raw::empty(ms.out_shape, a.dtype(), a.device());
  if (n * m == 0 || count == 0) return out;

  const GemmMatrix b0{b.data_ptr(), b.dtype(), k, m, b.strides()[nb - 2], b.strides()[nb - 1]};
  const int64_t a_rows_stride = ms.folded_a_row_stride;
  if (a_rows_stride >= 0) {  // one GEMM over every row of a
    const int64_t rows = count * n;
    const GemmMatrix a0{a.data_ptr(), a.dtype(), rows, k, a_rows_stride, a.strides()[na - 1]};
    cpu::gemm(a0, b0, {out.data_ptr(), out.dtype(), rows, m, m, 1}, 1.0, 0.0);
    return out;
  }

  // Batch strides of a and b at the broadcast batch shape (0 where broadcast).
  const int64_t nbatch = static_cast<int64_t>(batch.size());
  const Shape& sa = ms.batch_strides_a;
  const Shape& sb = ms.batch_strides_b;
  const size_t ea = element_size(a.dtype()), eb = element_size(b.dtype()),
               eo = element_size(out.dtype());
  auto matrices = [&](int64_t bi) {
    int64_t oa = 0, ob = 0, rest = bi;
    for (int64_t d = nbatch - 1; d >= 0; --d) {
      const int64_t index = rest % batch[d];
      rest /= batch[d];
      oa += index * sa[d];
      ob += index * sb[d];
    }
    struct {
      GemmMatrix a, b, out;
    } mats{{static_cast<char*>(a.data_ptr()) + oa * static_cast<int64_t>(ea), a.dtype(), n, k,
            a.strides()[na - 2], a.strides()[na - 1]},
           {static_cast<char*>(b.data_ptr()) + ob * static_cast<int64_t>(eb), b.dtype(), k, m,
            b.strides()[nb - 2], b.strides()[nb - 1]},
           {static_cast<char*>(out.data_ptr()) + bi * n * m * static_cast<int64_t>(eo), out.dtype(),
            n, m, m, 1}};
    return mats;
  };
  // Small GEMMs that need no scratch: one batch per piece (each gemm then runs inline).
  const auto first = matrices(0);
  const bool small = static_cast<double>(n) * static_cast<double>(m) * static_cast<double>(k) <
                     static_cast<double>(kGemmParallelWork);
  if (count > 1 && gemm_in_place(first.a, first.b, first.out) &&
      (small || count >= num_threads())) {
    parallel_for(count, [&](int64_t begin, int64_t end) {
      for (int64_t bi = begin; bi < end; ++bi) {
        const auto mats = matrices(bi);
        cpu::gemm(mats.a, mats.b, mats.out, 1.0, 0.0);
      }
    });
    return out;
  }
  for (int64_t bi = 0; bi < count; ++bi) {
    const auto mats = matrices(bi);
    cpu::gemm(mats.a, mats.b, mats.out, 1.0, 0.0);
  }
  return out;
}

}  // namespace cg::cpu
