// Why this file exists: the launchers of the CUDA attention kernels, in raw pointers and
// sizes (cuda/cuda_attention.cpp turns tensors into these). Two families:
//   - flash (cuda/attention_flash*.cu): tiled, tensor cores (mma.sync m16n8k16), online
//     softmax, no [Sq, Sk] buffer; bf16/f16 with fp32 math, head_dim 64 or 128, masks
//     none / causal / dflash_blocks (full and sliding rules). Each query tile visits only the key tiles its rows
//     may see (Note [Flash tiles] in attention_flash_common.cuh).
//   - rows (cuda/attention_rows.cu): one warp per query row (forward, dq) or key row (dk,
//     dv); every dtype (f32, f64, bf16, f16), head_dim up to 256, every mask kind
//     including dense. The slow, simple fallback (and the only path for dense masks).
// All launch on the stream given and return without waiting.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/dtype.h"

namespace cg::cuda {

// [B, H, S, hd] operand with element strides for B, H and S; the hd stride is 1.
struct AttnOperand {
  const void* data = nullptr;
  int64_t sb = 0, sh = 0, ss = 0;
};

// Where a kernel writes (B, H, S, hd) rows: element (b, h, i, d) at data + b sb + h sh + i ss
// + d. Contiguous is (H S hd, S hd, hd); the layout a [B, S, H, hd] tensor gives through
// transpose(1, 2) is (S H hd, hd, H hd).
struct AttnOutput {
  void* data = nullptr;
  int64_t sb = 0, sh = 0, ss = 0;
};

struct AttnShape {
  int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, Sk = 0, hd = 0;
};

enum class AttnMaskKind : int { none = 0, causal = 1, dflash = 2, dense = 3 };

// The resolved mask (ops/attention_mask.h) in device-readable form.
struct AttnMaskArgs {
  AttnMaskKind kind = AttnMaskKind::none;
  // dflash: block b of batch row bb sees context keys j < visible_context[bb * stride + b]
  // and its own block's keys; -1 marks a padded block (sees nothing). sliding_window W > 0:
  // the sliding rule (ops/attention_mask.h): slot k of block b at position anchor_b + k sees
  // only the keys at positions anchor_b + k - (W - 1) .. anchor_b + k (causal in the block).
  int64_t context_len = 0, block_size = 1, num_blocks = 0;
  int64_t sliding_window = 0;                // 0 = the full rule
  const int64_t* visible_context = nullptr;  // device memory
  int64_t context_batch_stride = 0;
  // Every batch row's anchors ascend (padded blocks aside), as the trainer's do: then
  // neighbouring blocks see nearly the same keys (Note [Dense DFlash rows]).
  bool anchors_sorted = false;
  // dense: allowed[b * s0 + h * s1 + i * s2 + j * s3] (device memory).
  const bool* allowed = nullptr;
  int64_t allowed_strides[4] = {0, 0, 0, 0};
};

// dst[0, n) = host[0, n) on the stream, without a host synchronisation: the values travel
// as kernel parameters (Note [Anchors as kernel parameters] in attention_rows.cu).
void launch_upload_int64(int64_t* dst, const int64_t* host, int64_t n, cudaStream_t stream);

// ---- rows: every dtype, every mask (slow fallback) ----

// out [B, Hq, Sq, hd] (contiguous, q's dtype), lse [B, Hq, Sq] (f32, or f64 for f64).
void launch_attention_rows_forward(DType dtype, const AttnShape& s, AttnOperand q, AttnOperand k,
                                   AttnOperand v, void* out, void* lse, const AttnMaskArgs& m,
                                   double scale, cudaStream_t stream);
// delta [B, Hq, Sq] (lse's dtype) = rowsum(grad_out * out). Used by both families.
void launch_attention_delta(DType dtype, const AttnShape& s, AttnOperand grad_out, AttnOperand out,
                            void* delta, cudaStream_t stream);
// dq [B, Hq, Sq, hd], dk / dv [B, Hkv, Sk, hd] (contiguous, q's dtype; null = not wanted).
// lse and delta contiguous [B, Hq, Sq].
void launch_attention_rows_backward(DType dtype, const AttnShape& s, AttnOperand q, AttnOperand k,
                                    AttnOperand v, AttnOperand grad_out, const void* lse,
                                    const void* delta, const AttnMaskArgs& m, double scale,
                                    void* dq, void* dk, void* dv, cudaStream_t stream);
// The largest head_dim the rows kernels take.
constexpr int64_t kAttnRowsMaxHeadDim = 256;

// ---- flash: bf16/f16, head_dim 64/128, masks none/causal/dflash ----

bool flash_attention_supports(DType dtype, int64_t head_dim, AttnMaskKind kind);
// Which kernel the flash forward runs for this dtype and head dim on the current device:
// "wgmma" (Hopper's warpgroup MMA: an sm_90a build on a compute capability 9.0 card, head
// dim 128, CHUNKGRAD_FLASH_WGMMA not 0; Note [wgmma forward]) or "mma.sync".
const char* flash_forward_kernel_name(DType dtype, int64_t head_dim);
// Whether this build has the wgmma kernels (CHUNKGRAD_CUDA_ARCHS holds 90a).
bool flash_wgmma_built();
// How many times the backward's 128-key CTAs ran the wgmma dq (Note [wgmma dq],
// cuda/attention_flash_dkdv.cu), counted since the process started.
int64_t flash_dq_wgmma_launches();
// and how many times they walked 48-row query tiles (Note [48-row query tiles]).
int64_t flash_dkdv_wide48_launches();
// Operands: hd stride 1, the other strides multiples of 8 elements, 16-byte aligned data.
// out (q's dtype): hd stride 1, the others even (each thread stores pairs of elements);
// lse f32 contiguous.
void launch_flash_attention_forward(DType dtype, const AttnShape& s, AttnOperand q, AttnOperand k,
                                    AttnOperand v, AttnOutput out, float* lse,
                                    const AttnMaskArgs& m, double scale, cudaStream_t stream);
// Bytes of fp32 scratch the flash backward takes for this problem on the current device (0:
// none), given which gradients it computes: the partial dk/dv sums of DFlash context keys
// whose query blocks are split among several CTAs (Note [Context key parts]) and the fp32
// dq of a dq taken inside the dk/dv pass (Note [Fused dq]; both in attention_flash_dkdv.cu).
size_t flash_attention_backward_scratch_bytes(const AttnShape& s, const AttnMaskArgs& m,
                                              bool want_dq, bool want_dkdv);
// dq / dk / dv contiguous (null = not wanted); lse, delta f32 contiguous [B, Hq, Sq];
// scratch: flash_attention_backward_scratch_bytes() of device memory (null when that is 0).
void launch_flash_attention_backward(DType dtype, const AttnShape& s, AttnOperand q, AttnOperand k,
                                     AttnOperand v, AttnOperand grad_out, const float* lse,
                                     const float* delta, const AttnMaskArgs& m, double scale,
                                     void* dq, void* dk, void* dv, float* scratch,
                                     cudaStream_t stream);

}  // namespace cg::cuda
