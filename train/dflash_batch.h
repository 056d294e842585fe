// Why this file exists: the DFlash training recipe's bookkeeping, on the host, apart from
// any model so that tests can check it exactly: which positions may be anchors, sampling
// them, and for every block slot its input token, RoPE position, label and weight.
//
//   anchor candidates: t with loss_mask[t] and loss_mask[t+1] (inside the response);
//   sample min(max_anchors, candidates) without replacement, sorted; pad to max_anchors;
//   block b (anchor a): inputs [ids[a], MASK, ..., MASK], positions a .. a+B-1;
//   labels NOT shifted: slot k's label is ids[a+k] (slot 0, the anchor, is excluded);
//   w_k = [k>=1] * keep * [a+k < S] * loss_mask[a+k] * exp(-(k-1)/gamma)  (gamma 0: no decay)
//   a slot of weight 0 gets label ignore_index, so it contributes nothing on any path.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/factories.h"

namespace cg::train {

// One training sequence: token ids and which of them the drafter learns (1 = generated).
struct DrafterSequence {
  std::vector<int64_t> ids;
  std::vector<uint8_t> loss_mask;  // ids.size() entries
};

constexpr int64_t kIgnoreLabel = -100;

std::vector<int64_t> anchor_candidates(const std::vector<uint8_t>& loss_mask);

// Where `id` first occurs in `seqs`: {sample, position}, or {-1, -1}. The MASK id must not
// (block slots read it in place of their token): the checks of every feature source.
std::pair<int64_t, int64_t> find_token(const std::vector<DrafterSequence>& seqs, int64_t id);
// Sorted anchors, at most max_anchors, drawn without replacement from the candidates.
std::vector<int64_t> sample_anchors(const std::vector<uint8_t>& loss_mask, int64_t max_anchors,
                                    Generator& gen);
// exp(-(k-1)/gamma) for k >= 1 (1 when gamma == 0), 0 for k == 0.
double slot_weight(int64_t k, double gamma);

// A batch of B sequences of one length S, N blocks of block_size each per sequence.
struct BlockBatch {
  int64_t batch = 0, seq_len = 0, num_blocks = 0, block_size = 0;
  std::vector<int64_t> context_ids;   // [B, S] (the sequences, padded with pad_id)
  std::vector<int64_t> anchors;       // [B, N]; -1 = padded block
  std::vector<uint8_t> padded;        // [B, N]
  std::vector<int64_t> block_ids;     // [B, N*bs]: anchor token, then MASK
  std::vector<int64_t> positions;     // [B, N*bs]: anchor + k (k for padded blocks)
  std::vector<int64_t> labels;        // [B*N*bs]: ids[a+k], or kIgnoreLabel where weight 0
  std::vector<double> weights;        // [B*N*bs]
  std::vector<int64_t> teacher_rows;  // [B*N*bs]: row b*S + a+k-1 of the target's [B*S]
                                      // hidden states (the teacher of slot k); 0 where weight 0
  std::vector<int64_t> source;        // [B]: the caller's index of each sequence (optional)
  double weight_sum() const;
};

// anchors[b]: sorted anchors of sequence b (from sample_anchors), at most num_blocks.
// Sequences shorter than seq_len (0: the longest) are padded with pad_id and loss mask 0.
BlockBatch build_block_batch(const std::vector<const DrafterSequence*>& sequences,
                             const std::vector<std::vector<int64_t>>& anchors, int64_t num_blocks,
                             int64_t block_size, double gamma, int64_t mask_id, int64_t pad_id,
                             int64_t seq_len = 0);

}  // namespace cg::train
