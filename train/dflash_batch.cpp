// Why this file exists: anchors, labels and weights of DFlash blocks (dflash_batch.h).
#include "train/dflash_batch.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace cg::train {

std::pair<int64_t, int64_t> find_token(const std::vector<DrafterSequence>& seqs, int64_t id) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto at = std::find(seqs[i].ids.begin(), seqs[i].ids.end(), id);
    if (at != seqs[i].ids.end()) return {static_cast<int64_t>(i), at - seqs[i].ids.begin()};
  }
  return {-1, -1};
}

std::vector<int64_t> anchor_candidates(const std::vector<uint8_t>& loss_mask) {
  std::vector<int64_t> out;
  for (size_t t = 0; t + 1 < loss_mask.size(); ++t) {
    if (loss_mask[t] && loss_mask[t + 1]) out.push_back(static_cast<int64_t>(t));
  }
  return out;
}

std::vector<int64_t> sample_anchors(const std::vector<uint8_t>& loss_mask, int64_t max_anchors,
                                    Generator& gen) {
  CG_CHECK(max_anchors >= 1, "sample_anchors: max_anchors must be >= 1, got ", max_anchors);
  std::vector<int64_t> c = anchor_candidates(loss_mask);
  const size_t take = std::min(c.size(), static_cast<size_t>(max_anchors));
  for (size_t i = 0; i < take; ++i) {  // partial Fisher-Yates
    const size_t j = i + static_cast<size_t>(gen.next_u64() % (c.size() - i));
    std::swap(c[i], c[j]);
  }
  c.resize(take);
  std::sort(c.begin(), c.end());
  return c;
}

double slot_weight(int64_t k, double gamma) {
  if (k < 1) return 0.0;
  return gamma > 0 ? std::exp(-static_cast<double>(k - 1) / gamma) : 1.0;
}

double BlockBatch::weight_sum() const {
  double s = 0;
  for (double w : weights) s += w;
  return s;
}

BlockBatch build_block_batch(const std::vector<const DrafterSequence*>& sequences,
                             const std::vector<std::vector<int64_t>>& anchors, int64_t num_blocks,
                             int64_t block_size, double gamma, int64_t mask_id, int64_t pad_id,
                             int64_t seq_len) {
  CG_CHECK(!sequences.empty() && anchors.size() == sequences.size(),
           "build_block_batch: need one anchor list per sequence");
  CG_CHECK(block_size >= 2, "build_block_batch: block_size must be >= 2, got ", block_size);
  BlockBatch b;
  b.batch = static_cast<int64_t>(sequences.size());
  b.num_blocks = num_blocks;
  b.block_size = block_size;
  for (const auto* s : sequences) {
    CG_CHECK(s->ids.size() == s->loss_mask.size(),
             "build_block_batch: ids and loss_mask differ in length");
    b.seq_len = std::max(b.seq_len, static_cast<int64_t>(s->ids.size()));
  }
  CG_CHECK(seq_len == 0 || seq_len >= b.seq_len, "build_block_batch: seq_len ", seq_len,
           " is shorter than a sequence (", b.seq_len, ")");
  if (seq_len > 0) b.seq_len = seq_len;
  const int64_t S = b.seq_len, N = num_blocks, T = N * block_size;
  b.context_ids.assign(static_cast<size_t>(b.batch * S), pad_id);
  b.anchors.assign(static_cast<size_t>(b.batch * N), -1);
  b.padded.assign(static_cast<size_t>(b.batch * N), 1);
  b.block_ids.assign(static_cast<size_t>(b.batch * T), mask_id);
  b.positions.assign(static_cast<size_t>(b.batch * T), 0);
  b.labels.assign(static_cast<size_t>(b.batch * T), kIgnoreLabel);
  b.weights.assign(static_cast<size_t>(b.batch * T), 0.0);
  b.teacher_rows.assign(static_cast<size_t>(b.batch * T), 0);
  for (int64_t r = 0; r < b.batch; ++r) {
    const DrafterSequence& seq = *sequences[static_cast<size_t>(r)];
    const int64_t len = static_cast<int64_t>(seq.ids.size());
    std::copy(seq.ids.begin(), seq.ids.end(), b.context_ids.begin() + r * S);
    const auto& a = anchors[static_cast<size_t>(r)];
    CG_CHECK(static_cast<int64_t>(a.size()) <= N, "build_block_batch: ", a.size(), " anchors for ",
             N, " blocks");
    for (int64_t blk = 0; blk < N; ++blk) {
      const bool keep = blk < static_cast<int64_t>(a.size());
      const int64_t anchor = keep ? a[static_cast<size_t>(blk)] : -1;
      if (keep) {
        CG_CHECK(anchor >= 0 && anchor < len, "build_block_batch: anchor ", anchor,
                 " is outside the sequence of length ", len);
        b.anchors[static_cast<size_t>(r * N + blk)] = anchor;
        b.padded[static_cast<size_t>(r * N + blk)] = 0;
      }
      for (int64_t k = 0; k < block_size; ++k) {
        const size_t i = static_cast<size_t>(r * T + blk * block_size + k);
        b.positions[i] = (keep ? anchor : 0) + k;
        if (!keep) continue;
        if (k == 0) b.block_ids[i] = seq.ids[static_cast<size_t>(anchor)];
        const int64_t t = anchor + k;
        const double w = (k >= 1 && t < len && seq.loss_mask[static_cast<size_t>(t)])
                             ? slot_weight(k, gamma)
                             : 0.0;
        if (w <= 0) continue;
        b.weights[i] = w;
        b.labels[i] = seq.ids[static_cast<size_t>(t)];
        b.teacher_rows[i] = r * S + t - 1;
      }
    }
  }
  return b;
}

}  // namespace cg::train
