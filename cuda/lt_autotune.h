// Why this file exists: the optional autotuning of cuBLASLt algorithms for the GEMMs of
// cuda/lt_gemm.cpp (Note [Autotune] in lt_autotune.cpp), kept apart so the plan cache there
// reads without it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace cg::cuda {

constexpr int kLtAutotuneCandidates = 8;

// CHUNKGRAD_LT_AUTOTUNE=1 (read once).
bool lt_autotune_enabled();

// The index of the fastest of `found` heuristic results for this descriptor and these
// layouts, timed on the operands a, b -> d (alpha 1, beta 0: d is overwritten; median of 3
// runs after a warm-up each) on `stream` of device `index`. Synchronises the host.
int lt_fastest_algorithm(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                         cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                         cublasLtMatrixLayout_t lc, const cublasLtMatmulHeuristicResult_t* results,
                         int found, int index, cudaStream_t stream, const void* a, const void* b,
                         const void* d, bool f64);

}  // namespace cg::cuda
