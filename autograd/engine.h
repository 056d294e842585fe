// Why this file exists: backward() walks the graph from the roots to the leaves, running
// each node once all the gradients flowing into it have been summed, and frees each
// node's saved tensors right after it ran -- which is why a graph's memory goes away
// during backward, not after it.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"

namespace cg {

class Node;
struct Edge;

// Backpropagates grad_roots[i] from roots[i] (all together, gradients summed where
// paths meet). An undefined grad_roots[i] is allowed for a one-element root (ones).
// retain_graph keeps saved tensors so backward can run again.
//
// Order: dependency counts come from a DFS from the roots; a node runs when all its
// consumers have run; among ready nodes the one created last runs first (highest
// sequence number), so the order is deterministic. Grad mode is off while it runs.
// Memory: gradients made along the way are allocated as MemoryCategory::temporary;
// leaves' .grad as MemoryCategory::gradient (AccumulateGrad).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots,
              bool retain_graph = false);

// The edge a gradient for t flows along: t's grad_fn, or for a leaf that requires grad
// its AccumulateGrad (created on first use, kept alive by the graph, remembered weakly
// in TensorImpl::grad_accumulator). Invalid edge when t does not require grad.
Edge gradient_edge(const Tensor& t);
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

}  // namespace cg
