// Why this file exists: the multi-tensor AdamW kernel (see adamw_kernels.h): a training
// step updates hundreds of tensors, and one launch per tensor (times m, v, master and the
// cast) would cost more in launches than in memory traffic for the small ones (norm
// weights). Each block takes one chunk of one tensor, found from the batch's chunk table.
#include "cuda/adamw_kernels.h"

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"

namespace cg::cuda {

namespace {

__global__ void adamw_kernel(AdamWBatch batch, AdamWScalars s) {
  const int64_t b = blockIdx.x;
  int k = 0;
  while (k + 1 < batch.count && batch.first_chunk[k + 1] <= b) ++k;
  const int64_t begin = (b - batch.first_chunk[k]) * kAdamWChunk;
  const int64_t end = min(batch.n[k], begin + kAdamWChunk);
  const float scale =
      s.grad_scale ? static_cast<float>(load_any(s.grad_scale, s.grad_scale_dtype, 0)) : 1.f;
  void* param = batch.param[k];
  float* master = batch.master[k];
  const void* grad = batch.grad[k];
  float* m = batch.m[k];
  float* v = batch.v[k];
  const DType pd = batch.param_dtype[k], gd = batch.grad_dtype[k];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float g = static_cast<float>(load_any(grad, gd, i)) * scale;
    const float mi = s.beta1 * m[i] + (1.f - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1.f - s.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float w = master ? master[i] : static_cast<float>(load_any(param, pd, i));
    const float update =
        (mi / s.bias_correction1) / (sqrtf(vi / s.bias_correction2) + s.eps) + s.weight_decay * w;
    const float w_new = w - s.lr * update;
    if (master) master[i] = w_new;
    store_any(param, pd, i, w_new);
  }
}

}  // namespace

void launch_adamw(const AdamWBatch& batch, const AdamWScalars& s, cudaStream_t stream) {
  if (batch.count == 0) return;
  const int64_t blocks = batch.first_chunk[batch.count];
  if (blocks == 0) return;
  CG_CHECK(blocks < (int64_t{1} << 31), "adamw: ", blocks, " blocks exceed a grid");
  adamw_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(batch, s);
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
