// Why this file exists: the one CPU matrix product every other kernel builds on (matmul,
// the head loss's logits and gradients). Eigen multiplies; this file decides how the work
// is cut: the output is split into blocks of whole 64-row (or 64-column) panels, one per
// thread of the pool, each an Eigen GEMM on Map views of the tensors' own memory. Operands
// Eigen cannot read in place (16-bit, another dtype than the compute one, no unit stride)
// are converted to the compute type one tile at a time, so the scratch is bounded by
// gemm_scratch_bytes whatever the sizes.
//
// Note [GEMM blocking]: at most a piece per thread, the pieces a grid over out (rows x
// columns) cut on multiples of kGemmCut, chosen so that the largest piece is as small as
// possible: a 1-D cut left threads idle when the split dim was short (a fused-loss chunk of
// 512 rows against D = 1280 columns gave 6 pieces to 16 threads; measured on the 16-core
// H200 host, fused/512 ran at 0.55x the GEMM rate before the grid). Among equal grids the
// squarer pieces win, since Eigen packs each piece's operands. Products below
// kGemmParallelWork multiply-adds stay on one thread. Within a
// piece, a converted operand or output is walked in tiles of at most kGemmTileRows x
// kGemmTileRows: a converted tile is reused for a whole row (or column) of output tiles,
// so conversion costs O(1/kGemmTileRows) of the multiply.
// Every cut (pieces and tiles) falls on a multiple of 48 in both dims: Eigen's kernel
// computes the rows of its destination (our columns when out is row major) in groups of
// up to 3 packets (48 floats with AVX-512, 24 with AVX2) and a partial group with another
// accumulation order, so cuts anywhere else would make the last bits depend on where the
// pieces start -- on the thread count. With these cuts
// every element is computed the same way for any thread count (Note [Deterministic
// threads] in cpu/parallel.h; tests/gemm_test.cpp checks it).
// Internal to ops/: not a public header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace cg::cpu {

inline constexpr int64_t kGemmTileRows = 480;          // rows (and columns) of a converted tile
inline constexpr int64_t kGemmCut = 48;                // pieces are cut on multiples of this
inline constexpr int64_t kGemmParallelWork = 1 << 18;  // M * N * K below which one thread does it

// out [M, N] = alpha * a [M, K] @ b [K, N] + beta * out
// a, b, out: 2-D tensors with any strides as long as each has a unit stride in one dim
// (row- or column-major with any leading dimension: transposed views pass as they are,
// no copy). Any floating dtypes, mixed allowed (e.g. a f32, b bf16, out bf16): computes in
// f64 when a, b and out are all f64, else in f32; a 16-bit (or non-unit-stride) operand is
// converted to f32 one tile at a time (at most kGemmTileRows rows of it at once), so the
// scratch memory stays bounded by gemm_scratch_bytes. beta == 0: out is not read.
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta);

// Upper bound of the bytes gemm allocates (through the caching allocator) for these operands
// (for operands known by shape only: the CPU table's gemm_scratch_bytes entry).
size_t gemm_scratch_bytes(const Tensor& a, const Tensor& b, const Tensor& out);

// The same on raw matrices (element pointer, dtype, sizes, strides in elements), for
// kernels that loop over many matrices of one tensor (batched matmul) without making a
// Tensor for each. Checks nothing; gemm() checks and calls this.
struct GemmMatrix {
  void* data;
  DType dtype;
  int64_t rows, cols;
  int64_t row_stride, col_stride;
};
GemmMatrix gemm_matrix(const Tensor& t);  // a 2-D CPU tensor as a GemmMatrix
void gemm(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out, double alpha,
          double beta);
size_t gemm_scratch_bytes(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out);
// True when gemm reads and writes all three in place (no scratch at all).
bool gemm_in_place(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out);

}  // namespace cg::cpu
