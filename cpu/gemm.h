// Why this file exists: the one CPU matrix product every other kernel builds on (matmul,
// the head loss's logits and gradients). OpenBLAS multiplies (through CBLAS, f32 and f64,
// each call on one thread); this file decides how the work is cut: the output is split
// into a grid of tiles, a run of tiles per thread of the pool, each tile a BLAS call on
// the tensors' own memory. Operands the BLAS cannot read in place (16-bit, another dtype
// than the compute one, no unit stride) are converted to the compute type one sub-tile at
// a time, so the scratch is bounded by gemm_scratch_bytes whatever the sizes.
//
// Note [GEMM blocking]: the tiles are a grid over out (rows x columns) cut on multiples of
// kGemmCut, chosen from the shapes alone -- never from the thread count -- so that every
// BLAS call, and so every bit of out, is the same for any number of threads (Note
// [Deterministic threads] in cpu/parallel.h; tests/gemm_test.cpp checks it). OpenBLAS picks
// its kernel by the call's sizes (on AVX-512 a direct kernel for small products, on some
// builds a small-matrix one), so a cut that moved with the thread count could change how
// an element is summed; a fixed grid needs no knowledge of the library's internals. K is
// never split. The grid has at most kGemmMaxTiles tiles (16 threads get 4 each), at most
// one per kGemmTileWork multiply-adds, and tiles at least kGemmMinTileUnits x kGemmCut =
// 256 wide where the dim allows: the BLAS packs each tile's rows of a and columns of b,
// about 13 (1/m + 1/n) of an m x n tile's time when K is long (2-core EPYC, one thread,
// [3072, 31040] x [31040, 640]: 77.6 GFLOP/s as one call, 67.4 in 256 x 128 tiles, 62 for
// a 512-row chunk in 128 x 128 tiles). Among the grids within those limits, the one whose
// largest tile is smallest, then the squarest. The price: a product whose output is small
// and K long (a chunk's dh = dlogits W) runs on few threads; chunks of more rows fix that.
// Within a tile, a converted operand or output is walked in sub-tiles of at most
// kGemmTileRows x kGemmTileRows: a converted sub-tile is reused for a whole row (or column)
// of output sub-tiles, so conversion costs O(1/kGemmTileRows) of the multiply. Each
// worker converts into sub-tiles of its own: the scratch is min(tiles, threads) sets, so
// a 16-bit product's scratch (2 x 480 x 480 f32 = 1.76 MiB a worker when both operands
// convert), and any peak that holds it, grows with the thread count. The bits do not.
// Note [BLAS threads] (gemm.cpp): the BLAS's own threads are off.
// Internal to ops/: not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace cg::cpu {

inline constexpr int64_t kGemmTileRows = 480;      // rows (and columns) of a converted sub-tile
inline constexpr int64_t kGemmCut = 64;            // tiles are cut on multiples of this
inline constexpr int64_t kGemmMaxTiles = 64;       // tiles of one product, at most
inline constexpr int64_t kGemmTileWork = 1 << 20;  // multiply-adds per tile, at least
inline constexpr int64_t kGemmMinTileUnits = 4;    // kGemmCut units per tile side, at least
// M * N * K below which a product is one tile (one thread does it).
inline constexpr int64_t kGemmParallelWork = 2 * kGemmTileWork;

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
// The BLAS under gemm, as it describes itself (OpenBLAS's build config and the kernels it
// picked for this CPU), and the threads it uses per call: 1 once gemm has run (Note [BLAS
// threads], gemm.cpp). The benchmarks print the first; tests check the second.
std::string blas_description();
int blas_threads();

// True when gemm reads and writes all three in place (no scratch at all).
bool gemm_in_place(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out);

}  // namespace cg::cpu
