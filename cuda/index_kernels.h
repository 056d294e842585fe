// Why this file exists: the launchers of the CUDA index kernels behind the kernel table's
// index_select, index_add, gather, scatter_add and check_indices entries (ops/kernels.h).
// Each walks a Strided geometry whose operand order the comment gives; the indexed operand's
// stride along the indexed dim is zero there and `step` apart. Raw device pointers,
// launched on `stream` without waiting.
#pragma once

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "cuda/kernel_args.h"

namespace cg::cuda {

// g {out, x, idx}: out[o0] = x[o1 + idx[o2] * step], raw elements of `elem_size` bytes.
void launch_gather_elements(size_t elem_size, void* out, const void* x, const void* idx,
                            DType idx_dtype, int64_t step, const Strided& g, cudaStream_t stream);
// g {acc, src, idx}: acc[o0 + idx[o2] * step] += src[o1] unless idx == skip; acc is f32 or
// f64 (atomicAdd), src of dtype src_dtype (floating).
void launch_scatter_add_elements(DType acc_dtype, void* acc, DType src_dtype, const void* src,
                                 const void* idx, DType idx_dtype, int64_t step, int64_t skip,
                                 const Strided& g, cudaStream_t stream);
// g {idx}: first_bad[0] = the smallest row-major position whose value is outside
// [0, bound) (INT64_MAX when none), first_bad[1] = that value.
void launch_find_bad_index(const void* idx, DType idx_dtype, int64_t bound, const Strided& g,
                           int64_t* first_bad, cudaStream_t stream);

}  // namespace cg::cuda
