// Why this file exists: the flash attention forward's argument block, shared by its two
// kernels -- the mma.sync one (attention_flash_forward.cu, any sm_80+ card, both head
// dims) and the warpgroup-MMA one for Hopper (attention_flash_forward_wgmma.cu, head dim
// 128, Note [wgmma forward]) -- so that each lives in a file of its own.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "cuda/attention_kernels.h"

namespace cg::cuda::flash {

struct FwdArgs {
  AttnShape s;
  AttnOperand q, k, v;
  AttnOutput out;  // (B, Hq, Sq, hd), any even strides (a [B, Sq, Hq, hd] tensor's view)
  float* lse;      // (B, Hq, Sq)
  AttnMaskArgs m;
  float scale, scale_log2;
  int64_t tiles_per_unit, units;
};

// Launches the warpgroup-MMA forward when this build and card have it (a build for sm_90a,
// a compute capability 9.0 card, head dim 128, CHUNKGRAD_FLASH_WGMMA not 0); false when
// the caller should launch the mma.sync kernel instead.
bool launch_flash_forward_wgmma(DType dtype, const FwdArgs& a, cudaStream_t stream);

}  // namespace cg::cuda::flash
