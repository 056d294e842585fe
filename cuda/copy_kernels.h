// Why this file exists: the launchers of the CUDA kernels behind the backend's data
// primitives (Note [Device primitives], core/backend.h): fill/arange, strided copy with
// cast and broadcast, accumulate, and the Philox random fills. They take raw device
// pointers, dtypes and a simplified loop nest (Note [Loop nest], core/loop_nest.h) of
// at most kMaxDims dims, and launch on the given stream without waiting.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "core/loop_nest.h"

namespace cg::cuda {

constexpr int kMaxDims = 8;

// dst (sizes, strides): dst[i] = value + i * step (row-major i; step 0: a constant).
void launch_fill(void* dst, DType dtype, const LoopNest<1>& loop, double value, double step,
                 cudaStream_t stream);
// dst[i] = cast(src[i]); loop.strides = {dst, src}.
void launch_copy(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                 const LoopNest<2>& loop, cudaStream_t stream);
// dst[i] += src[i], floating dtypes; loop.strides = {dst, src}.
void launch_accumulate(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                       const LoopNest<2>& loop, cudaStream_t stream);
// dst[i] = philox::uniform_value / normal_value of counter offset + i under seed.
void launch_random_uniform(void* dst, DType dtype, const LoopNest<1>& loop, uint64_t seed,
                           uint64_t offset, int bits, double low, double high, cudaStream_t stream);
void launch_random_normal(void* dst, DType dtype, const LoopNest<1>& loop, uint64_t seed,
                          uint64_t offset, double mean, double std, cudaStream_t stream);

}  // namespace cg::cuda
