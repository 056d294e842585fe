// Why this file exists: the launchers of the CUDA reductions and row kernels behind the
// kernel table's sum, max_along_dim, logsumexp_along_dim, scatter_along_dim, softmax and
// softmax_backward entries (ops/kernels.h). A "row" is the run of n elements along the
// reduced dim; `rows` is a Strided geometry over every other index (the dim taken out)
// whose operands are the row starts, and each operand's stride along the dim is passed
// apart. Raw device pointers, launched on `stream` without waiting.
#pragma once

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "cuda/kernel_args.h"

namespace cg::cuda {

// How launch_sum cuts the work: a thread or a block per (output, piece), `splits` pieces
// per output. coalesced: neighbouring outputs are neighbours in a's memory.
struct SumPlan {
  bool per_thread = false;
  int splits = 1;
};
SumPlan sum_plan(int64_t outputs, int64_t reduced, bool coalesced);

// out (outputs,) = scale * sum of a over `reduced` (operand 0: a's strides) at each output;
// kept: geometry over the outputs, operands {a, out}. partial: outputs * plan.splits
// doubles of scratch (null when splits == 1). Sums accumulate in double, in a fixed order.
void launch_sum(DType dtype, const void* a, void* out, const Strided& kept, const Strided& reduced,
                double scale, double* partial, const SumPlan& plan, cudaStream_t stream);

// out (a [] tensor of a's compute dtype) = sum of a[i]^2 over n contiguous elements:
// kSquaresBlocks blocks each sum one contiguous piece in double into partial (kSquaresBlocks
// doubles of scratch), then one block adds the pieces in order (the same result every run).
constexpr int kSquaresBlocks = 1024;
void launch_sum_of_squares(DType dtype, const void* a, int64_t n, void* out, double* partial,
                           cudaStream_t stream);

// rows {a, indices, values}: indices[r] (i64) = first argmax (a NaN wins), values[r] =
// a at it (copied as stored); values may be null.
void launch_max_rows(DType dtype, const void* a, int64_t* indices, void* values,
                     const Strided& rows, int64_t n, int64_t stride, cudaStream_t stream);
// rows {a, out}: out[r] = log sum exp a[r, :].
void launch_logsumexp_rows(DType dtype, const void* a, void* out, const Strided& rows, int64_t n,
                           int64_t stride, cudaStream_t stream);
// rows {out, src, index}: out[r, index[r]] = src[r] (out already zero).
void launch_scatter_rows(DType dtype, void* out, const void* src, const int64_t* index,
                         const Strided& rows, int64_t out_stride, cudaStream_t stream);
// rows {a, out}: out = softmax (log_softmax when log) of each row; strides sa, so.
void launch_softmax_rows(DType dtype, bool log, const void* a, void* out, const Strided& rows,
                         int64_t n, int64_t sa, int64_t so, cudaStream_t stream);
// rows {grad, y, out}: the backward from the output y.
void launch_softmax_backward_rows(DType dtype, bool log, const void* grad, const void* y, void* out,
                                  const Strided& rows, int64_t n, int64_t sg, int64_t sy,
                                  int64_t so, cudaStream_t stream);

}  // namespace cg::cuda
