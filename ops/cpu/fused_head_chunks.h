// Why this file exists: the CPU chunk loop of the fused head loss. Per chunk of C rows it
// runs the logits GEMM (and the teacher's), the row kernel (loss, metrics, gradient in
// place over the logits), then dh_chunk = dlogits W and dW += dlogits^T h_chunk. The
// [C, V] buffers are allocated once and reused, so the loop's memory is one chunk's.
#pragma once

#include "core/tensor.h"
#include "ops/loss_config.h"

namespace cg::cpu {

struct FusedHeadChunkArgs {
  Tensor hidden;          // [T, D] f32/f64/bf16/f16, rows may be strided
  Tensor head;            // [V, D]
  Tensor teacher_hidden;  // [T, D] or undefined
  Tensor teacher_head;    // [V, D] or undefined (then `head`)
  Tensor labels;          // [T] i64 contiguous, or undefined
  LossConfig config;
  int64_t chunk_rows = 0;
  Tensor grad_scale;      // [T] compute dtype, contiguous; undefined: no gradients at all
  // Outputs, each optional (undefined = not wanted); [T], contiguous, compute dtype or i64.
  Tensor loss, lse, entropy, argmax, teacher_argmax;
  Tensor grad_hidden;     // [T, D] contiguous, hidden's dtype: receives dh rows
  Tensor grad_head;       // [V, D] contiguous compute dtype, accumulated into (dW +=)
};

// The compute dtype of the loop: f64 for f64 hidden states (gradient checks), else f32.
DType fused_head_compute_dtype(const Tensor& hidden);

void fused_head_chunks(const FusedHeadChunkArgs& args);

}  // namespace cg::cpu
