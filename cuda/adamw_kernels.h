// Why this file exists: the launcher of the multi-tensor AdamW kernel behind
// CudaKernels::adamw_step (cuda/cuda_adamw.cpp): one launch updates up to kAdamWTensors
// tensors, their pointers and sizes passed by value in the kernel's parameters (no device
// array to fill, so no host-to-device copy and no synchronisation per step).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace cg::cuda {

constexpr int kAdamWTensors = 32;
constexpr int64_t kAdamWChunk = 16384;  // elements per block

// One launch's tensors: element i of tensor k is param[k][i] (param_dtype[k]), master[k][i]
// (f32, or null: then param is updated directly), grad[k][i] (grad_dtype[k]), m[k][i] and
// v[k][i] (f32); n[k] elements, all contiguous.
struct AdamWBatch {
  int count = 0;
  int64_t first_chunk[kAdamWTensors + 1] = {};  // block b works on tensor k where
                                                // first_chunk[k] <= b < first_chunk[k + 1]
  void* param[kAdamWTensors] = {};
  float* master[kAdamWTensors] = {};
  const void* grad[kAdamWTensors] = {};
  float* m[kAdamWTensors] = {};
  float* v[kAdamWTensors] = {};
  int64_t n[kAdamWTensors] = {};
  DType param_dtype[kAdamWTensors] = {};
  DType grad_dtype[kAdamWTensors] = {};
};

struct AdamWScalars {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1, bias_correction2;  // 1 - beta^step, computed in double
  const void* grad_scale;                    // one element of grad_scale_dtype, or null
  DType grad_scale_dtype;
};

// g = grad * grad_scale[0]; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// w -= lr (m/bc1 / (sqrt(v/bc2) + eps) + wd w) on master (then param = cast(master)) or
// on param, all in fp32.
void launch_adamw(const AdamWBatch& batch, const AdamWScalars& s, cudaStream_t stream);

}  // namespace cg::cuda
