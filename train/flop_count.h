// Why this file exists: MFU -- the fraction of the card's dense bf16 peak a drafter step
// uses -- needs the FLOPs the step runs, counted once from the shapes and not measured.
// The count is every GEMM and every attention of the step, forward and backward,
// recomputation not counted (a step that recomputes does more work for the same count):
//
//   fc          2 C (K H) H          forward; backward dW only (the features need no grad)
//   context K/V 2 C H (2 Hkv hd)     per layer, forward + dX + dW
//   block GEMMs 2 P H (Hq hd + 2 Hkv hd) + 2 P (Hq hd) H + 3 * 2 P H I    per layer, x3
//   attention   4 hd Hq per visible (query, key) pair forward, 2.5x that backward
//   head        2 P H V student logits, 2 P V H dh (the head is frozen: no dW),
//               2 P H V teacher logits (teacher losses only)
//
// C = context tokens (sequences x S), P = positions (sequences x anchors x block). The
// visible pairs follow the layer's rule (full or sliding) with anchors spread uniformly
// over the context: the expectation over every anchor position 0 .. S-1. At the seed's
// shape (1024 x 24 anchors, S 4096, 5 x 5120 drafter, 32/8 x 128 heads, MLP 17408, 4
// sliding layers of W 2048 + 1 full, K 5, V 248320, KL) it is about 438 TFLOP per
// sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/dflash_drafter.h"
#include "train/train_config.h"

namespace cg::train {

// H200 SXM dense bf16 tensor-core peak, FLOP/s (no sparsity).
constexpr double kH200DenseBf16Flops = 989.4e12;

struct DrafterStepShape {
  int64_t sequences = 1;    // sequences per optimiser step (batch x grad_accum)
  int64_t context_len = 0;  // S
  int64_t anchors = 0;      // N per sequence (padded blocks included: the kernels run them)
  int64_t block_size = 0;
  int64_t hidden = 0;           // H
  int64_t target_features = 0;  // K
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t intermediate = 0;
  int64_t vocab = 0;
  std::vector<bool> sliding;  // per layer: true = the sliding rule; its size is the depth
  int64_t sliding_window = 0;
  bool teacher = false;  // the loss has teacher logits (kl, rkl, soft_ce)
};

// FLOPs of one optimiser step, forward + backward, by part.
struct DrafterStepFlops {
  double fc = 0, context_kv = 0, block_gemms = 0, attention = 0;
  double student_head = 0, teacher_head = 0;  // student: logits + dh
  double total() const {
    return fc + context_kv + block_gemms + attention + student_head + teacher_head;
  }
};

// Expected visible keys per query of one block, over anchors at every context position
// 0 .. S-1 (uniform), under the full rule (window 0) or the sliding rule (window W).
double mean_visible_keys(int64_t context_len, int64_t block_size, int64_t window);

DrafterStepFlops drafter_step_flops(const DrafterStepShape& shape);

// The shape of one optimiser step of `drafter` under the run's config: batch_size x
// grad_accum sequences of seq_len context tokens, max_anchors blocks each, the teacher's
// logits when the loss kind has a teacher.
DrafterStepShape drafter_step_shape(const nn::DFlashDrafterConfig& drafter,
                                    const DrafterConfig& config, int64_t seq_len);

// What the training log shows per step (train/drafter_trainer.cpp's run()).
struct StepThroughput {
  double ms = 0, context_tokens_per_s = 0, positions_per_s = 0, mfu = 0;
};
StepThroughput step_throughput(const DrafterStepShape& shape, double flops, double seconds);

// flops / seconds / peak (0 when seconds is 0).
double model_flops_utilization(double flops, double seconds, double peak = kH200DenseBf16Flops);

}  // namespace cg::train
