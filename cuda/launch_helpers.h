// Why this file exists: the two steps every CUDA table entry (cuda/cuda_kernels.h) takes
// between tensors and a launcher of cuda/*.cu -- the stream to launch on and the strides
// of a broadcast operand -- written once for all the families (defined in
// cuda/elementwise.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include "core/tensor.h"

namespace cg::cuda {

// Makes t's device current and returns its compute stream (Note [One compute stream]).
cudaStream_t stream_of(const Tensor& t);
// Strides of t viewed at `shape` under numpy broadcasting (0 where broadcast).
Shape broadcast_strides_of(const Tensor& t, const Shape& shape);

}  // namespace cg::cuda
