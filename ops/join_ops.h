// Why this file exists: the ops that join tensors and cut them apart -- cat/stack,
// split/chunk, pad. DFlash builds K = cat(k_proj(ctx), k_proj(block)), concatenates the
// target's layer features, and pads the last block of a sequence. All of them are pure
// data movement over core/views.h copies, so they work on every dtype (ints too) and
// every device the copy path knows. None saves a tensor: their backward only slices the
// gradient (cat, pad) or joins the pieces' gradients (split).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace cg {

// Joins tensors along an existing dim (negative counts from the end). All share dtype,
// device, rank, and every size but `dim`. Saves nothing (each input's gradient is a
// slice of the output's).
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);

// Joins equal-shaped tensors along a new dim (in [-(rank+1), rank]). Saves nothing.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// Views of consecutive pieces of `dim`, each `split_size` long (the last may be shorter),
// as torch.split(x, int). One node for all pieces: its backward joins their gradients
// (zeros for pieces that got none) in one buffer. Saves nothing.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
// Pieces of the given lengths (they must sum to x.size(dim)), as torch.split(x, list).
std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes,
                                     int64_t dim = 0);
// torch.chunk: split with split_size = ceil(size / chunks), so up to `chunks` pieces
// (fewer when the size does not allow that many).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// Constant padding of the last dims, torch.nn.functional.pad order: pads = {left, right}
// for the last dim, then {top, bottom} for the one before, ... (at most 2 * rank values,
// each >= 0). Saves nothing: the gradient is the interior slice of the output's.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0.0);

}  // namespace cg
