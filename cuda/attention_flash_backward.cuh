// Why this file exists: what the two passes of the flash attention backward share -- their
// argument block and their launchers -- so that the dq pass (attention_flash_backward.cu,
// which also holds the public launcher) and the dk/dv pass (attention_flash_dkdv.cu) live
// in files of their own.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "cuda/attention_kernels.h"

namespace cg::cuda::flash {

struct BwdArgs {
  AttnShape s;
  AttnOperand q, k, v, g;  // g = grad_out
  const float* lse;        // (B, Hq, Sq)
  const float* delta;      // (B, Hq, Sq)
  void* dq;                // (B, Hq, Sq, hd) contiguous
  void* dk;                // (B, Hkv, Sk, hd) contiguous, or null
  void* dv;                // (B, Hkv, Sk, hd) contiguous, or null
  AttnMaskArgs m;
  float scale, scale_log2;
  int64_t tiles_per_unit, units;
  // Note [Context key parts]: the CTAs per DFlash context key tile (1: none) and, when
  // more, their partial dk and dv, fp32 [2][B][parts][Hkv][context_len][hd].
  int ctx_parts = 1;
  float* ctx_partial = nullptr;
  // and each split tile's block range [begin, end) per part, [B][ctx_tiles][parts][2].
  int* ctx_ranges = nullptr;
  // Note [Fused dq]: when set, the dk/dv pass also adds dq (fp32, unscaled) into this
  // buffer (zeroed first or stored first: Note [dq first writers]; in the order of Note [dq
  // tile order]) and the dq pass does not run.
  float* dq_acc = nullptr;
  // Note [dq bulk reduce]: the fused dq's partial products go to dq_acc by bulk reductions
  // from shared memory (sm_90 and later; atomics otherwise). dq_acc is then 16-byte aligned.
  bool dq_bulk = false;
  // Note [dq first writers] (cuda/attention_flash_dkdv.cu): this launch's CTAs are the first
  // and only ones to write their dq rows so far, so they store instead of adding.
  bool dq_store = false;
  // Note [128-key CTAs]: the keys of a DFlash context tile of the dk/dv pass (kTile or
  // 2 kTile), and the first key tile a launch's blockIdx.x / Hkv counts from.
  int ctx_key_tile = 64;  // kTile (attention_flash_common.cuh)
  int64_t key_tile_base = 0;
};

// Whether this backward takes dq inside the dk/dv pass (Note [Fused dq]).
bool fused_dq(const AttnShape& s, const AttnMaskArgs& m, bool want_dq, bool want_dkdv);

// The parts each DFlash context key tile's query blocks are split into (1: the tile is one
// CTA) for this problem on the current device.
int dkdv_context_parts(const AttnShape& s, const AttnMaskArgs& m);
// Note [Context key parts] (cuda/attention_flash_context_parts.cu): each split context
// tile's block range into a.ctx_ranges, before the dk/dv pass; and after it, dk and dv of
// the context keys as the sums of the parts' partials.
void launch_context_ranges(const BwdArgs& a, cudaStream_t stream);
void launch_context_parts_sum(DType dtype, const BwdArgs& a, cudaStream_t stream);

// Whether the fused dq adds into dq_acc by bulk reductions (Note [dq bulk reduce]; dq_acc
// must then be 16-byte aligned, which launch_flash_attention_backward checks).
bool dq_bulk();

// dq pass (a.dq set): launches on `stream`. dtype bf16 or f16, hd 64 or 128.
void launch_flash_dq(DType dtype, const BwdArgs& a, cudaStream_t stream);
// dk/dv pass (a.dk or a.dv set); with a.dq_acc also dq (Note [Fused dq]).
void launch_flash_dkdv(DType dtype, const BwdArgs& a, cudaStream_t stream);
// dq = scale * dq_acc in the compute dtype (Note [Fused dq]).
void launch_flash_dq_from_acc(DType dtype, const BwdArgs& a, cudaStream_t stream);

}  // namespace cg::cuda::flash
