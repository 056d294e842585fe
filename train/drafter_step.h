// Why this file exists: one DFlash forward + loss on a batch of blocks, shared by training,
// evaluation and the memory report, and the per-slot metrics read off its result.
//
//   context = drafter.fuse(features)                     [B, S, H]
//   x       = target_embed(block_ids)                    [B, N*bs, H]
//   hidden  = drafter(x, positions, dflash_blocks mask, context) -> [B*N*bs, H]
//   loss    = head_loss(hidden, target lm_head (frozen), labels, weights[, teacher rows])
//             mean = sum(w * l) / sum(w)   (the recipe's normalisation)
#pragma once

#include <cstdint>
#include <vector>

#include "nn/dflash_drafter.h"
#include "ops/head_loss.h"
#include "train/dflash_batch.h"
#include "train/train_config.h"

namespace cg::train {

// The head-loss LossConfig of a loss spec: ce -> cross_entropy; kl -> forward KL against
// the target's next-token distribution; mix -> forward KL plus mix_ce_weight * CE.
LossConfig drafter_loss_config(const LossSpec& spec);

struct DrafterLossInputs {
  const BlockBatch* batch = nullptr;
  Tensor features;        // [B, S, n*H] (the batch's rows, S == batch->seq_len)
  Tensor teacher_hidden;  // [B*S, H] target final hidden states (teacher losses), or undefined
};

// Runs the drafter and the head loss; the result's loss is the weighted mean.
HeadLossResult drafter_loss(const nn::DFlashDrafter& drafter, const DrafterLossInputs& inputs,
                            const LossConfig& loss, HeadLossPath path, int64_t chunk_rows = 0);

// Accuracy per block slot and acceptance lengths, accumulated over batches. Slot k >= 1
// counts where its weight is > 0 (a real label); a block's acceptance length is 1 + the
// number of leading slots the drafter got right (its first miss or invalid slot ends it).
struct SlotMetrics {
  explicit SlotMetrics(int64_t block_size = 0);
  void add(const BlockBatch& batch, const std::vector<int64_t>& argmax);
  std::vector<double> accuracy() const;       // [block_size]; slot 0 is reported as 1
  // 1 + sum_k prod_{i<=k} acc_i: the expected tokens per target step if slot misses were
  // independent (the notes' EAL, plus the bonus token).
  double expected_acceptance_length() const;
  double mean_acceptance_length() const;      // the measured 1 + correct prefix per block
  int64_t block_size;
  std::vector<int64_t> correct, total;
  double accept_sum = 0;
  int64_t blocks = 0;
};

}  // namespace cg::train
