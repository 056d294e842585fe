// Why this file exists: the launchers of the CUDA rms_norm (forward, backward:
// cuda/norm_kernels.cu) and rotary (cuda/rotary_kernels.cu) kernels behind the kernel
// table's entries of those names (ops/kernels.h). Rows are the last dim; `rows` geometries
// give each operand's row starts (see each comment), row elements step by the stride
// passed apart. Raw device pointers, launched on `stream`. Unit strides with 16-byte
// aligned rows take the kernels' fast path (Note [Row groups], cuda/row_groups.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "cuda/kernel_args.h"

namespace cg::cuda {

// rows {x, out}; x row stride sx, weight stride sw (weight may be null: 1). out rows are
// contiguous [D]; rstd [rows] compute dtype. y = x * rstd * w, rstd = 1/sqrt(mean x^2 + eps).
void launch_rms_norm_forward(DType dtype, const void* x, const void* weight, void* out, void* rstd,
                             const Strided& rows, int64_t D, int64_t sx, int64_t sw, double eps,
                             cudaStream_t stream);
// rows {x, grad}; dx contiguous rows (may be null: not asked); dweight [D] contiguous in
// x's dtype (may be null). dw_partial: splits * D doubles of scratch when dweight is asked.
void launch_rms_norm_backward(DType dtype, const void* grad, const void* x, const void* weight,
                              const void* rstd, void* dx, void* dweight, double* dw_partial,
                              int splits, const Strided& rows, int64_t D, int64_t sx, int64_t sg,
                              int64_t sw, cudaStream_t stream);
// Pieces the rows are cut into for dweight (the scratch's first dim), for rows of D.
int rms_norm_dweight_splits(int64_t rows, int64_t D);

// rows {x, out, positions} over x's leading dims [..., S, H]; x row elements step sx; out
// rows contiguous [hd]; positions i64. Rotates pairs (i, i + hd/2) by pos * theta^(-2i/hd)
// (minus that angle when inverse).
void launch_rotary(DType dtype, const void* x, void* out, const int64_t* positions,
                   const Strided& rows, int64_t hd, int64_t sx, double theta, bool inverse,
                   cudaStream_t stream);

}  // namespace cg::cuda
