// Why this file exists: cuDNN's fused flash attention (forward and backward), reached
// through cuDNN's own backend graph API (cudnn_graph.h descriptors; the header-only
// cudnn-frontend is on neither machine). cuDNN recognises its fused SDPA engines from a
// graph of generic nodes -- matmul, pointwise (scale, causal mask, sub, exp, div, log,
// add), reductions (max, sum) -- so cuda/cudnn_sdpa.cpp writes exactly that graph (the
// pattern the frontend's sdpa node emits), asks the heuristics for an engine, finalizes
// an execution plan and caches it per shape, dtype and strides. cuda/cuda_attention.cpp
// takes this path for causal / unmasked bf16 and f16 attention when cuDNN finalizes a
// plan (Note [Which attention path runs on cuda]).
//
// The stats contract is the table's (ops/kernels.h): stats[b, h, i] = logsumexp over the
// visible keys of scale * q_i . k_j, natural log, f32, [B, Hq, Sq] contiguous -- what
// cuDNN's "Stats" output is -- so a forward of any path feeds a backward of any path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace cg::cuda {

// One operand laid out [B, H, S, hd] with these element strides (hd's stride is 1);
// data 16-byte aligned and strides multiples of 8 (the caller copies otherwise).
struct SdpaOperand {
  const void* data = nullptr;
  int64_t sb = 0, sh = 0, ss = 0;
};

struct SdpaProblem {
  DType dtype = DType::bf16;  // bf16 or f16
  int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, Sk = 0, hd = 0;
  bool causal = false;  // bottom-right aligned as ops/attention_mask.h says; needs Sq <= Sk
  SdpaOperand q, k, v;
  SdpaOperand o, dout;  // backward only: the forward's output and its gradient
};

// "" when cuDNN finalizes (or already finalized: the answer is cached per shape, dtype
// and strides) a plan for this problem; otherwise why not, in cuDNN's words. Never throws
// for an unsupported problem.
std::string cudnn_sdpa_forward_support(int device, const SdpaProblem& p);
std::string cudnn_sdpa_backward_support(int device, const SdpaProblem& p);

// Records that this problem is not to run on cuDNN (why: e.g. its execute failed), so the
// support calls above answer `why` from now on.
void cudnn_sdpa_mark_unsupported(int device, const SdpaProblem& p, bool backward,
                                 const std::string& why);

// out [B, Hq, Sq, hd] contiguous in p.dtype; stats [B, Hq, Sq] f32 (the contract above).
// Throws (naming the cuDNN call) when the plan cannot be built or run. Queued on `stream`.
void cudnn_sdpa_forward(int device, const SdpaProblem& p, float scale, void* out, float* stats,
                        cudaStream_t stream);

// dq [B, Hq, Sq, hd], dk and dv [B, Hkv, Sk, hd], each contiguous in p.dtype; stats as the
// forward made them (any path's lse).
void cudnn_sdpa_backward(int device, const SdpaProblem& p, float scale, const float* stats,
                         void* dq, void* dk, void* dv, cudaStream_t stream);

// For diagnostics (the bench): "engine 3, workspace 1048576 B" for the cached plan, or
// "unsupported: <why>". Builds the plan when it is not cached.
std::string cudnn_sdpa_describe(int device, const SdpaProblem& p, bool backward);

// The cuDNN library version the process runs with (cudnnGetVersion), e.g. 91400.
int64_t cudnn_runtime_version();

}  // namespace cg::cuda
