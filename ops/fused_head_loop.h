// Why this file exists: the chunk loop of the fused head loss, written once for every
// device in terms of kernel-table entries (ops/kernels.h): per chunk of C rows it runs
// the logits GEMM (and the teacher's), the row kernel (loss, metrics, gradient in place
// over the logits), then dh_chunk = dlogits W and dW += dlogits^T h_chunk. A device
// supplies gemm and head_loss_rows, never a loop of its own. The [C, V] buffers are
// allocated once and reused, so the loop's memory is one chunk's plus what the GEMMs
// need (gemm_scratch_bytes), which head_loss_chunk_bytes() adds up for the chunk budget.
// On a device with side streams the loop can run pipelined: chunk i's row pass and
// gradient GEMMs on a side stream beside chunk i + 1's logits GEMMs, with a second slot
// for the student's logits (Note [Pipelined chunks] in the .cpp). The results are the
// one-stream loop's: the same calls on the same rows, dW accumulated in the same order.
// Internal to ops/: only ops/fused_head_loss.cpp and ops/head_loss.cpp use it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "ops/loss_config.h"

namespace cg {

struct FusedHeadLoopArgs {
  Tensor hidden;          // [T, D] f32/f64/bf16/f16, rows may be strided; no graph
  Tensor head;            // [V, D], hidden's dtype
  Tensor teacher_hidden;  // [T, Dt] or undefined (teacher losses only)
  Tensor teacher_head;    // [V, Dt] or undefined (then `head`)
  Tensor labels;          // [T] i64 contiguous, values checked, or undefined
  LossConfig config;
  int64_t chunk_rows = 0;
  bool pipelined = false;  // overlap chunks on a side stream where the device has one
  bool gradients = false;  // compute d loss / d logits (and dh, dW where asked for)
  Tensor grad_scale;       // [T] compute dtype, contiguous; undefined: every row scaled by 1
  // Outputs, each optional; [T] contiguous, compute dtype (i64 for the argmaxes).
  Tensor loss, lse, entropy, argmax, teacher_argmax;
  Tensor grad_hidden;  // [T, D] contiguous, hidden's dtype: receives dh rows
  Tensor grad_head;    // [V, D] contiguous compute dtype, accumulated into (dW +=)
};

void fused_head_loop(const FusedHeadLoopArgs& args);

// Bytes the loop allocates for chunks of `rows` rows (logits slots and the GEMMs' scratch;
// pipelined: the second student slot and two GEMMs' scratch at once), for `args`'s
// operands and outputs (only defined-ness and shapes of the outputs matter).
size_t fused_head_loop_bytes(const FusedHeadLoopArgs& args, int64_t rows);

}  // namespace cg
