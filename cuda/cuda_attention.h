// Why this file exists: which path the CUDA table's two attention entries take
// (CudaKernels::attention_forward / attention_backward, cuda/cuda_kernels.h, defined in
// cuda_attention.cpp), and how tests and benchmarks pick one: they make a table of their
// own, CudaKernels(AttentionPath::flash), and call its entries.
//
// Note [Which attention path runs on cuda]:
//   - cudnn (cuDNN's fused flash attention through its backend graph API,
//     cuda/cudnn_sdpa.h): what automatic takes first for masks none / causal, bf16 or f16,
//     head_dim 64 or 128, scale > 0, when cuDNN finalizes a plan for the shape (asked once per
//     shape/dtype/strides and cached). When it does not (or causal has Sq > Sk: rows that
//     see no key), automatic falls back to flash and remembers that for the shape; the
//     string overload of cuda_attention_path() says why. Forcing cudnn throws cuDNN's
//     reason instead. The lse contract is the same on every path, so a forward of one path
//     feeds a backward of another. Its backward computes dq, dk and dv in one pass (asking
//     for one of them costs the same).
//   - flash (tensor cores, cuda/attention_flash_*.cu): bf16 or f16, head_dim 64 or 128,
//     masks none / causal / dflash_blocks (full and sliding rules), scale > 0. Work
//     proportional to the keys each query may see; nothing [Sq, Sk] in memory.
//   - rows (cuda/attention_rows.cu): everything else -- f32, f64, dense boolean masks,
//     other head dims up to 256 (the sliding rule too). Correct but slow (no tensor
//     cores): a warp per row. cudnn never takes the DFlash rules.
//   - head_dim above 256 throws "... not supported on cuda ..." (move the tensors to the
//     CPU for those).
// cuda_attention_path() says which one a call takes.
//
// Note [Attention speed on the H200] (bf16, hd 128, GQA 40/8, fwd + bwd, ms; 2026-11-30;
// attention_bench --path auto,cudnn,flash beside bench/attention_torch.py, cuDNN 9.14):
//   causal, 4096 tokens:                 cudnn 1.28-1.36 (fwd 0.31-0.34, bwd 0.97-1.07)
//                                        torch SDPA 1.36-1.45 (fwd 0.34, bwd 0.94-1.09)
//                                        flash 4.23 (over three runs, medians of 10-20)
//   DFlash, 1024 blocks x 24, 4096 ctx:  flash 29.3   torch flex_attention 35.2
// So the causal target runs on cuDNN's fused kernels at PyTorch's speed (cuDNN's
// heuristics offer 2 engine configs for each graph; the first is also the faster one when
// timed: CHUNKGRAD_CUDNN_AUTOTUNE=1), and the block rule on our flash kernels (mma.sync,
// no wgmma/TMA), faster there than FlexAttention. flash alone on the causal target: fwd
// 0.87, dq 1.46, dk/dv 2.02.
#pragma once

#include <string>

#include "core/tensor.h"
#include "ops/attention_mask.h"
#include "ops/kernels.h"

namespace cg::cuda {

enum class AttentionPath { automatic, flash, rows, cudnn };

// By rule, before cuDNN is asked about the shape: "cudnn" (tried first; flash if cuDNN
// has no plan), "flash" or "rows".
const char* cuda_attention_path(DType dtype, int64_t head_dim, const ResolvedAttentionMask& mask,
                                double scale);

// The path an automatic forward of these operands takes: "cudnn", "flash", "rows", or
// "flash (cudnn not taken: <why>)". Asks cuDNN (and caches its answer) for this shape.
std::string cuda_attention_path(const Tensor& q, const Tensor& k, const ResolvedAttentionMask& mask,
                                double scale);

}  // namespace cg::cuda
