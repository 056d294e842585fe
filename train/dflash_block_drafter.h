// Why this file exists: the trained DFlash drafter behind the speculative decoder's
// interface (train/block_drafter.h). It caches, per drafter layer, the keys and values of
// the fused context features (fc + RMSNorm, then that layer's k_proj/v_proj, k-norm and
// RoPE at positions 0, 1, ...), so each proposal costs one drafter pass over the block
// only: [anchor, MASK, ..., MASK] at positions anchor .. anchor+B-1 attends to every cached
// position (all < anchor) and bidirectionally within the block, as in training.
#pragma once

#include <vector>

#include "nn/dflash_drafter.h"
#include "train/block_drafter.h"

namespace cg::train {

class DFlashBlockDrafter : public BlockDrafter {
 public:
  explicit DFlashBlockDrafter(const nn::DFlashDrafter& drafter);

  const std::vector<int64_t>& target_layers() const override;
  void reset() override;
  void append_context(const Tensor& features, int64_t first) override;
  void truncate_context(int64_t length) override;
  int64_t context_length() const override { return length_; }
  std::vector<int64_t> propose(int64_t anchor_token, int64_t anchor_position,
                               int64_t block_size) override;

 private:
  const nn::DFlashDrafter& drafter_;
  std::vector<nn::DrafterLayerCache> cache_;
  int64_t length_ = 0;
};

}  // namespace cg::train
