// Why this file exists: see gemm.h. A plain version on top of cpu::matmul: operands are
// converted to the compute dtype, multiplied, then scaled and added into out.
#include "ops/cpu/gemm.h"

#include "core/views.h"
#include "ops/cpu/kernels.h"

namespace cg::cpu {

namespace {

DType gemm_compute_dtype(const Tensor& a, const Tensor& b, const Tensor& out) {
  const bool all64 = a.dtype() == DType::f64 && b.dtype() == DType::f64 && out.dtype() == DType::f64;
  return all64 ? DType::f64 : DType::f32;
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  const DType cd = gemm_compute_dtype(a, b, out);
  Tensor prod = matmul(raw::to_dtype(a, cd), raw::to_dtype(b, cd));  // [M, N]
  if (alpha != 1.0) inplace_scalar(UnaryOp::scale, prod, alpha);
  if (beta == 0.0) {
    raw::copy_(out, prod);
    return;
  }
  if (beta != 1.0) inplace_scalar(UnaryOp::scale, out, beta);
  inplace(InplaceOp::add, out, raw::to_dtype(prod, out.dtype()), 1.0);
}

size_t gemm_scratch_bytes(const GemmDesc& g) {
  const DType cd = g.a == DType::f64 && g.b == DType::f64 && g.out == DType::f64 ? DType::f64 : DType::f32;
  const size_t cs = element_size(cd);
  const size_t m = static_cast<size_t>(g.m), n = static_cast<size_t>(g.n), k = static_cast<size_t>(g.k);
  size_t bytes = m * n * cs;                       // the product
  if (g.a != cd) bytes += m * k * cs;              // converted operands
  if (g.b != cd) bytes += k * n * cs;
  if (g.out != cd) bytes += m * n * element_size(g.out);
  return bytes;
}

}  // namespace cg::cpu
