// Why this file exists: token embedding lookup. The drafter reuses the target's frozen
// embed_tokens, so most runs need only the forward; the backward exists for trainable
// tables and is a scatter-add of rows, never a [N, V] one-hot matmul.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace cg {

// out[..., :] = weight[ids[...], :].
//   weight  [V, D], any dtype, any strides
//   ids     i32 or i64, any shape (0-d too) and strides; every id in [0, V)
//   padding_idx  a row (negative counts from V, as in PyTorch) that receives no
//                gradient; its forward row is returned as stored
// -> [ids.shape..., D], contiguous, weight's dtype.
// Saves ids only (the gradient is the incoming rows scatter-added into a zero [V, D];
// repeated ids accumulate, in fp32 for bf16/f16 weights).
Tensor embedding(const Tensor& weight, const Tensor& ids,
                 std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace cg
