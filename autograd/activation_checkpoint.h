// Why this file exists: a training step keeps every layer's intermediates alive from the
// forward to the backward, and at the full-scale drafter's shape that is tens of GiB.
// checkpoint() trades compute for that memory: it runs a function without recording its
// graph, keeps only the function's inputs, and re-runs the function inside the backward
// (PyTorch's torch.utils.checkpoint). Note [Activation checkpointing] in
// activation_checkpoint.cpp has the design and the memory trade.
//
//   // h [T, H] and ctx [S, H] require grad; the layer's weights are parameters.
//   std::vector<Tensor> out = checkpoint(
//       [&layer](const std::vector<Tensor>& in) {
//         return std::vector<Tensor>{layer.forward(in[0], in[1])};
//       },
//       {h, ctx}, layer.parameters());
//   h = out[0];  // its graph: one CheckpointBackward node that saved h and ctx
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace cg {

// What checkpoint() runs, twice: inputs in (in checkpoint's order), tensors out.
using CheckpointFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// outputs = f(inputs) without keeping f's intermediates for backward.
// - inputs: the tensors whose gradients f's outputs carry back (undefined entries and
//   inputs that do not require grad are allowed: they get no gradient). They are saved
//   (Note [Saved tensor versions] applies: writing into one before backward is an error).
// - parameters: the leaves f reads besides its inputs (a module's parameters()). With
//   the inputs they decide whether a graph is recorded at all; their .grad is accumulated
//   by the recomputed graph, as the plain call would.
// - f must compute the same outputs when run again (no randomness, no state it changes),
//   must not write into its inputs, and may capture in its closure only tensors that need
//   no gradient (masks, positions): a captured tensor with autograd history is refused in
//   the backward, naming its node -- pass it in `inputs` instead. The closure lives, with
//   what it captured, until the backward has run.
// - outputs are floating-point tensors (each may be used or not; an unused one gets a
//   zero gradient).
// With grad mode off, or nothing among inputs and parameters requiring grad, f is simply
// called: there is nothing to recompute.
std::vector<Tensor> checkpoint(const CheckpointFunction& f, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& parameters = {});

}  // namespace cg
