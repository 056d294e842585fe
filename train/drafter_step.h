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

#include <nlohmann/json.hpp>

#include "nn/dflash_drafter.h"
#include "ops/head_loss.h"
#include "train/dflash_batch.h"
#include "train/feature_source.h"
#include "train/train_config.h"

namespace cg::train {

// The head-loss LossConfig of a loss spec: ce -> cross_entropy on the target's tokens; a
// teacher kind (kl, rkl, soft_ce) -> that kind against the target's next-token
// distribution at the same position, at the spec's temperature, with its hard-CE weight
// (mix -> forward KL plus mix_ce_weight * CE). Every kind the config accepts maps to
// itself: a switch with no default (Note [Adding a loss kind], ops/loss_config.h).
LossConfig drafter_loss_config(const LossSpec& spec);

// Note [The drafter's chunk]: the chunked and fused paths take their rows per chunk from
// drafter.head_loss_chunk_rows (at 0, as many as drafter.head_loss_chunk_budget_mb holds),
// one setting for every place the drafter step runs: training, the per-slot evaluation
// and the memory report, which therefore measures the chunk training uses. The default,
// 256 rows, is the chunk the memory report has always shown (at large_vocab a fused chunk
// of 64 MiB where naive makes 256 MiB of logits). On the CPU the chunk changes the memory
// and, at most, the last bits: the row kernel is per row, but which OpenBLAS kernel sums a
// row over k, and in what grouping, depends on the call's shape and on the core type
// (with the AVX-512 kernels chunks of 16 and 32 rows gave the same bits as one chunk;
// with the Haswell ones, forced by OPENBLAS_CORETYPE=Haswell, not). A GPU
// at scale wants 0: a budget-sized chunk of thousands of rows keeps its GEMMs fast
// (ops/head_loss.h).
struct DrafterHeadLoss {
  LossConfig loss;
  HeadLossPath path = HeadLossPath::fused;
  int64_t chunk_rows = 0;                       // 0: from the budget
  size_t chunk_budget_bytes = size_t{3} << 29;  // head_loss's default, 1.5 GiB
};
// What the drafter trains with: the loss spec, head_loss_path and the chunk fields.
DrafterHeadLoss drafter_head_loss(const DrafterConfig& config);
// What evaluation runs: cross-entropy on the fused path, with the config's chunk.
DrafterHeadLoss drafter_eval_head_loss(const DrafterConfig& config);
// Throws naming drafter.head_loss_chunk_budget_mb when, with chunk rows 0, the budget
// cannot hold one row of a chunk of a head [vocab, hidden] of `dtype` on `device` (with a
// teacher's logits when the loss has one). Allocates one row, not the head: called before
// any work, for every shape the run will step.
// The head loss's temporaries for a micro-batch of `rows` rows (the fused loop's chunk,
// chunked or not; the naive path's whole logits): what a memory check before the first
// step must count beside the weights (an outside tester's synthetic run at V = 16.7M passed
// its check without it and was killed by the host's OOM killer).
size_t drafter_head_loss_bytes(const DrafterHeadLoss& head_loss, int64_t vocab, int64_t hidden,
                               DType dtype, Device device, int64_t rows);
void check_drafter_chunk(const DrafterHeadLoss& head_loss, int64_t vocab, int64_t hidden,
                         DType dtype, Device device);

struct DrafterLossInputs {
  const BlockBatch* batch = nullptr;
  Tensor features;        // [B, S, n*H] (the batch's rows, S == batch->seq_len)
  Tensor teacher_hidden;  // [B*S, H] target final hidden states (teacher losses), or undefined
};

// Runs the drafter and the head loss; the result's loss is the weighted mean.
HeadLossResult drafter_loss(const nn::DFlashDrafter& drafter, const DrafterLossInputs& inputs,
                            const DrafterHeadLoss& head_loss);

// Accuracy per block slot and acceptance lengths, accumulated over batches. Slot k >= 1
// counts where its weight is > 0 (a real label); a block's acceptance length is 1 + the
// number of leading slots the drafter got right (its first miss or invalid slot ends it).
struct SlotMetrics {
  explicit SlotMetrics(int64_t block_size = 0);
  void add(const BlockBatch& batch, const std::vector<int64_t>& argmax);
  std::vector<double> accuracy() const;  // [block_size]; slot 0 is reported as 1
  // 1 + sum_k prod_{i<=k} acc_i: the expected tokens per target step if slot misses were
  // independent (the notes' EAL, plus the bonus token).
  double expected_acceptance_length() const;
  double mean_acceptance_length() const;  // the measured 1 + correct prefix per block
  // The three as summary fields (per_slot_accuracy, expected_ and measured_acceptance_length),
  // null when no block was measured (no held-out samples): never a made-up 0.
  void write_to(nlohmann::json& summary) const;
  int64_t block_size;
  std::vector<int64_t> correct, total;
  double accept_sum = 0;
  int64_t blocks = 0;
};

// Per-slot accuracy of `drafter` on every sample of `source` (held-out data), with every
// candidate anchor of each (beyond 256 candidates, 256 spread evenly over them), CE only,
// no graph, in forwards of at most d.max_anchors x d.optim.batch_size blocks (Note
// [Evaluation in training's blocks], drafter_step.cpp).
SlotMetrics held_out_slot_metrics(const nn::DFlashDrafter& drafter, FeatureSource& source,
                                  const DrafterConfig& d);

}  // namespace cg::train
