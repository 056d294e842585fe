// Why this file exists: the multi-tensor AdamW kernel (see adamw_kernels.h): a training
// step updates hundreds of tensors, and one launch per tensor (times m, v, master and the
// cast) would cost more in launches than in memory traffic for the small ones (norm
// weights). Each block takes one chunk of one tensor, found from the batch's chunk table.
#include "cuda/adamw_kernels.h"

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"

namespace cg::cuda {

namespace {

// One element's update, in fp32 (the contract in adamw_kernels.h).
struct AdamWMath {
  AdamWScalars s;
  float scale;
  __device__ __forceinline__ float step(float g, float& m, float& v, float w) const {
    g *= scale;
    m = s.beta1 * m + (1.f - s.beta1) * g;
    v = s.beta2 * v + (1.f - s.beta2) * g * g;
    const float update =
        (m / s.bias_correction1) / (sqrtf(v / s.bias_correction2) + s.eps) + s.weight_decay * w;
    return w - s.lr * update;
  }
};

template <typename T>
__device__ __forceinline__ float to_f32(T x) {
  return static_cast<float>(x);
}
template <typename T>
__device__ __forceinline__ T from_f32(float x) {
  return static_cast<T>(x);
}

// Note [AdamW vectors]: with fp32 masters a step moves 28 bytes an element (m, v, master
// read and written, a 16-bit gradient read and weight written): 48 GB for the full-scale
// drafter, so the kernel is a memory copy with arithmetic. Four elements a thread per
// iteration, each array read and written with one vector access (16 bytes of fp32, 8 of
// 16-bit), reach the bandwidth the element-at-a-time loop (dtype switch per element)
// did not. The arithmetic is the same per element, so the result is bit for bit the
// scalar loop's. Where a pointer is not 16-byte aligned the block takes the scalar loop.
template <typename P, typename G>
__device__ void adamw_vector_chunk(P* param, float* master, const G* grad, float* m, float* v,
                                   int64_t begin, int64_t end, const AdamWMath& math) {
  const int64_t vec_end = begin + (end - begin) / 4 * 4;
  for (int64_t i = begin + 4 * static_cast<int64_t>(threadIdx.x); i < vec_end;
       i += 4 * static_cast<int64_t>(blockDim.x)) {
    float4 mi = *reinterpret_cast<const float4*>(m + i);
    float4 vi = *reinterpret_cast<const float4*>(v + i);
    const float4 wi = *reinterpret_cast<const float4*>(master + i);
    float gi[4];
    if constexpr (sizeof(G) == 4) {
      const float4 g4 = *reinterpret_cast<const float4*>(grad + i);
      gi[0] = g4.x, gi[1] = g4.y, gi[2] = g4.z, gi[3] = g4.w;
    } else {
      const uint2 raw = *reinterpret_cast<const uint2*>(grad + i);
      const G* g2 = reinterpret_cast<const G*>(&raw);
#pragma unroll
      for (int j = 0; j < 4; ++j) gi[j] = to_f32(g2[j]);
    }
    float4 wn;
    wn.x = math.step(gi[0], mi.x, vi.x, wi.x);
    wn.y = math.step(gi[1], mi.y, vi.y, wi.y);
    wn.z = math.step(gi[2], mi.z, vi.z, wi.z);
    wn.w = math.step(gi[3], mi.w, vi.w, wi.w);
    *reinterpret_cast<float4*>(m + i) = mi;
    *reinterpret_cast<float4*>(v + i) = vi;
    *reinterpret_cast<float4*>(master + i) = wn;
    if constexpr (sizeof(P) == 4) {
      *reinterpret_cast<float4*>(param + i) = wn;
    } else {
      uint2 out;
      P* p2 = reinterpret_cast<P*>(&out);
      p2[0] = from_f32<P>(wn.x), p2[1] = from_f32<P>(wn.y), p2[2] = from_f32<P>(wn.z),
      p2[3] = from_f32<P>(wn.w);
      *reinterpret_cast<uint2*>(param + i) = out;
    }
  }
  for (int64_t i = vec_end + threadIdx.x; i < end; i += blockDim.x) {
    float mi = m[i], vi = v[i];
    const float wn = math.step(to_f32(grad[i]), mi, vi, master[i]);
    m[i] = mi;
    v[i] = vi;
    master[i] = wn;
    param[i] = from_f32<P>(wn);
  }
}

__device__ bool aligned16(const void* p) {
  return p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

__global__ void adamw_kernel(AdamWBatch batch, AdamWScalars s) {
  const int64_t b = blockIdx.x;
  int k = 0;
  while (k + 1 < batch.count && batch.first_chunk[k + 1] <= b) ++k;
  const int64_t begin = (b - batch.first_chunk[k]) * kAdamWChunk;
  const int64_t end = min(batch.n[k], begin + kAdamWChunk);
  const float scale =
      s.grad_scale ? static_cast<float>(load_any(s.grad_scale, s.grad_scale_dtype, 0)) : 1.f;
  const AdamWMath math{s, scale};
  void* param = batch.param[k];
  float* master = batch.master[k];
  const void* grad = batch.grad[k];
  float* m = batch.m[k];
  float* v = batch.v[k];
  const DType pd = batch.param_dtype[k], gd = batch.grad_dtype[k];
  // Note [AdamW vectors]: the common layouts take the vector loop.
  const bool vector = aligned16(param) && aligned16(master) && aligned16(grad) && aligned16(m) &&
                      aligned16(v) && (pd == DType::bf16 || pd == DType::f32) &&
                      (gd == DType::bf16 || gd == DType::f32);
  if (vector) {
    using bf16 = __nv_bfloat16;
    if (pd == DType::bf16 && gd == DType::bf16) {
      adamw_vector_chunk(static_cast<bf16*>(param), master, static_cast<const bf16*>(grad), m, v,
                         begin, end, math);
    } else if (pd == DType::bf16) {
      adamw_vector_chunk(static_cast<bf16*>(param), master, static_cast<const float*>(grad), m, v,
                         begin, end, math);
    } else if (gd == DType::bf16) {
      adamw_vector_chunk(static_cast<float*>(param), master, static_cast<const bf16*>(grad), m, v,
                         begin, end, math);
    } else {
      adamw_vector_chunk(static_cast<float*>(param), master, static_cast<const float*>(grad), m, v,
                         begin, end, math);
    }
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float mi = m[i], vi = v[i];
    const float w = master ? master[i] : static_cast<float>(load_any(param, pd, i));
    const float w_new = math.step(static_cast<float>(load_any(grad, gd, i)), mi, vi, w);
    m[i] = mi;
    v[i] = vi;
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
