// Why this file exists: the CPU chunk loop of the fused head loss. Per chunk of C rows it
// runs the logits GEMM (and the teacher's), the row kernel (loss, metrics, gradient in
// place over the logits), then dh_chunk = dlogits W and dW += dlogits^T h_chunk. The
// [C, V] buffers are allocated once and reused, and a 16-bit head is converted to fp32
// one vocabulary tile at a time, never whole, so the loop's memory is one chunk's.
#pragma once

#include <cstddef>

#include "core/tensor.h"
#include "ops/loss_config.h"

namespace cg::cpu {

// Rows of the head converted to fp32 at a time when it is 16-bit (or not dense).
constexpr int64_t kHeadTileRows = 4096;

struct FusedHeadChunkArgs {
  Tensor hidden;          // [T, D] f32/f64/bf16/f16, rows may be strided
  Tensor head;            // [V, D]
  Tensor teacher_hidden;  // [T, Dt] or undefined
  Tensor teacher_head;    // [V, Dt] or undefined (then `head`, and Dt = D)
  Tensor labels;          // [T] i64 contiguous, or undefined
  LossConfig config;
  int64_t chunk_rows = 0;
  bool gradients = false;  // compute d loss / d logits (and dh, dW where asked for)
  Tensor grad_scale;       // [T] compute dtype, contiguous; undefined: every row scaled by 1
  // Outputs, each optional (undefined = not wanted); [T], contiguous, compute dtype or i64.
  Tensor loss, lse, entropy, argmax, teacher_argmax;
  Tensor grad_hidden;     // [T, D] contiguous, hidden's dtype: receives dh rows
  Tensor grad_head;       // [V, D] contiguous compute dtype, accumulated into (dW +=)
};

void fused_head_chunks(const FusedHeadChunkArgs& args);

// What the loop allocates: `fixed` bytes whatever the chunk (head tiles), and `per_row`
// bytes for each row of a chunk (logits, teacher logits, fp32 copies of 16-bit rows).
struct FusedHeadFootprint {
  size_t fixed = 0;
  size_t per_row = 0;
};
FusedHeadFootprint fused_head_footprint(const Tensor& hidden, const Tensor& head,
                                        const Tensor& teacher_hidden, const Tensor& teacher_head,
                                        bool teacher);

}  // namespace cg::cpu
