// Why this file exists: the shape bookkeeping that every device's table does the same way
// before it launches anything -- which dims a sum keeps and which it reduces, and how a
// matmul's batch dims broadcast and whether they fold into one GEMM's rows. Written once
// here so that the CPU (cpu/) and CUDA (cuda/) tables cannot drift apart; the tables
// keep only what differs: how they loop and what they launch.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace cg {

// sum(a, reduce, keepdim): a's dims split into kept and reduced ones, in a's order.
struct ReductionSplit {
  Shape kept_shape, kept_strides;        // a's kept dims and their strides
  Shape reduced_shape, reduced_strides;  // a's reduced dims and their strides
  Shape out_shape;                       // the result's shape (1 for reduced dims if keepdim)
  Shape out_kept_strides;                // contiguous strides of kept_shape: the result's
};
ReductionSplit split_reduction(const Tensor& a, const std::vector<bool>& reduce, bool keepdim);

// a [..., n, k] @ b [..., k, m] -> [batch..., n, m] with the batch dims broadcast.
struct MatmulShape {
  int64_t n = 0, k = 0, m = 0;
  Shape batch;        // broadcast batch shape
  Shape out_shape;    // batch + [n, m]
  int64_t count = 0;  // product of batch
  // The row stride of a seen as one [count * n, k] matrix when b has no batch dims and a's
  // batch dims fold into its rows (a contiguous [B, S, K], a row slice of one); else -1.
  int64_t folded_a_row_stride = -1;
  Shape batch_strides_a, batch_strides_b;  // at `batch`'s rank, 0 where broadcast
};
MatmulShape matmul_shape(const Tensor& a, const Tensor& b);

// How a GEMM reads a [rows, cols] operand with strides (row_stride, col_stride) in place:
// row-major (element (i, j) at i * ld + j) when the columns have a unit stride and rows do
// not overlap, else column-major (at i + j * ld) when the rows have a unit stride. A
// size-1 dim may carry any stride (it is never stepped). in_place false: neither holds
// and the operand must be copied first. The CPU GEMM (cpu/gemm.cpp) and cuBLASLt's
// (cuda/lt_gemm.cpp) both read their operands by this rule.
struct GemmLayout {
  bool in_place = false;
  bool row_major = false;
  int64_t ld = 0;  // leading dimension, in elements
};
GemmLayout gemm_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

}  // namespace cg
