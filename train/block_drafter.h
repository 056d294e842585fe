// Why this file exists: speculative decoding (train/speculative_decoding.h) and the DFlash
// drafter (train/dflash_block_drafter.h) meet here. The decoder loop knows nothing about how a
// drafter guesses; a drafter knows nothing about verification. Tests drive the loop with
// simple drafters of their own (one that is always right, one that is always wrong), so
// that "the output equals target-only greedy decoding, token for token" is checked apart
// from how good any trained drafter is.
//
// The protocol, for one sequence (DFlash inference):
//   reset();
//   append_context(features of the prompt's positions 0 .. P-1, 0);
//   loop:
//     draft = propose(anchor_token, anchor_position, block_size)
//        // anchor_token: the last token the target produced (its features do not exist
//        // yet, so the drafter sees context positions < anchor_position only);
//        // draft: block_size - 1 guesses for positions anchor_position + 1 ...
//     the target verifies [anchor_token, draft...] in one forward pass, accepts a prefix
//     and adds its own next token (the bonus);
//     append_context(features of the accepted positions, anchor_position);
//     the bonus token becomes the next anchor.
//   truncate_context(length) drops cached context at positions >= length (used when a
//   caller rewinds; the loop above never appends a rejected position).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace cg::train {

class BlockDrafter {
 public:
  virtual ~BlockDrafter() = default;

  // The target layers (0-based decoder layer ids, in order) whose outputs the drafter
  // reads; append_context's features are these layers' outputs concatenated on the last
  // dim.
  virtual const std::vector<int64_t>& target_layers() const = 0;

  // Forgets every cached context position (a new sequence starts).
  virtual void reset() = 0;

  // features: [n, target_layers().size() * hidden] for positions first .. first + n - 1.
  // first must equal the number of positions cached so far.
  virtual void append_context(const Tensor& features, int64_t first) = 0;

  // Drops cached positions >= length.
  virtual void truncate_context(int64_t length) = 0;

  // The number of context positions cached.
  virtual int64_t context_length() const = 0;

  // block_size - 1 proposed tokens for positions anchor_position + 1 ... (slot 0 of the
  // block is the anchor itself). anchor_position == context_length().
  virtual std::vector<int64_t> propose(int64_t anchor_token, int64_t anchor_position,
                                       int64_t block_size) = 0;
};

}  // namespace cg::train
