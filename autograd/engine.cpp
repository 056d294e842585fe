// Why this file exists: the backward pass (see engine.h for the contract).
#include "autograd/engine.h"

#include <optional>
#include <queue>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/memory_trace.h"
#include "core/views.h"

namespace cg {

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  TensorImpl* impl = leaf.impl();
  CG_CHECK(impl != nullptr, "grad_accumulator: undefined tensor");
  CG_CHECK(impl->grad_fn == nullptr,
           "grad_accumulator: only leaves have one; this tensor was made by ",
           impl->grad_fn->name());
  if (auto existing = impl->grad_accumulator.lock()) return existing;
  auto node = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
  impl->grad_accumulator = node;
  return node;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  if (t.impl()->grad_fn) return Edge{t.impl()->grad_fn, t.impl()->output_nr};
  if (t.impl()->requires_grad) return Edge{grad_accumulator(t), 0};
  return {};
}

namespace {

// Note [Summing in place]: where two paths' gradients meet, the sum may go into one of
// them when nothing else can see its bytes: this Tensor is the only handle on its
// TensorImpl and that the only one on its storage (no view, no saved copy, no user
// reference), and it covers its storage densely. A fresh sum (clone, then add) costs
// one more full read and write of the gradient -- on a drafter layer's [T, H] residual
// gradients, two kernels where one does.
bool sole_owner(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1 && t.is_contiguous() &&
         t.offset() == 0 &&
         t.storage()->nbytes() == static_cast<size_t>(t.numel()) * element_size(t.dtype());
}

struct ReadyLess {  // priority_queue pops the largest: the highest sequence number
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

// Checks a gradient an op's backward returned against what its input looked like.
void check_input_gradient(const Node& node, size_t i, const Tensor& grad) {
  const TensorMeta& m = node.input_meta[i];
  CG_CHECK(grad.shape() == m.shape, node.name(), " returned a gradient of shape ",
           shape_str(grad.shape()), " for input ", i, " of shape ", shape_str(m.shape),
           " (a bug in the op's backward)");
  CG_CHECK(grad.dtype() == m.dtype, node.name(), " returned a ", dtype_name(grad.dtype()),
           " gradient for input ", i, " of dtype ", dtype_name(m.dtype),
           " (a bug in the op's backward)");
  CG_CHECK(grad.device() == m.device, node.name(), " returned a gradient on ", grad.device().str(),
           " for input ", i, " on ", m.device.str(), " (a bug in the op's backward)");
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots,
              bool retain_graph) {
  CG_CHECK(roots.size() == grad_roots.size(), "backward: ", roots.size(), " tensors but ",
           grad_roots.size(), " gradients; pass one gradient (or an undefined Tensor) per tensor");
  NoGradGuard no_grad;
  CategoryGuard category(MemoryCategory::temporary);

  // Root edges and their gradients.
  std::vector<Edge> root_edges;
  std::vector<Tensor> root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    CG_CHECK(root.defined(), "backward: element ", i, " of tensors is undefined");
    Edge edge = gradient_edge(root);
    CG_CHECK(edge.valid(), "element ", i,
             " of tensors does not require grad and does not have a grad_fn");
    Tensor grad = grad_roots[i];
    if (!grad.defined()) {
      CG_CHECK(root.numel() == 1,
               "grad can be implicitly created only for scalar outputs; pass a "
               "gradient of shape ",
               shape_str(root.shape()), " to backward()");
      grad = raw::empty(root.shape(), root.dtype(), root.device());
      raw::fill_(grad, 1.0);
    } else {
      CG_CHECK(grad.shape() == root.shape(), "backward: the gradient has shape ",
               shape_str(grad.shape()), " but the tensor has shape ", shape_str(root.shape()),
               "; pass a gradient of the tensor's shape");
      CG_CHECK(grad.dtype() == root.dtype(), "backward: the gradient is ", dtype_name(grad.dtype()),
               " but the tensor is ", dtype_name(root.dtype()),
               "; convert it with cg::to(grad, dtype)");
      CG_CHECK(grad.device() == root.device(), "backward: the gradient is on ", grad.device().str(),
               " but the tensor is on ", root.device().str(),
               "; move it with cg::to(grad, device)");
    }
    root_edges.push_back(std::move(edge));
    root_grads.push_back(std::move(grad));
  }

  // Dependency counts: how many edges (from nodes reachable from the roots) point at each node.
  std::unordered_map<Node*, int> dependencies;
  {
    std::vector<Node*> stack;
    std::unordered_map<Node*, bool> seen;
    for (const Edge& e : root_edges) {
      if (!seen[e.fn.get()]) {
        seen[e.fn.get()] = true;
        stack.push_back(e.fn.get());
      }
    }
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      for (const Edge& next : node->next_edges) {
        if (!next.valid()) continue;
        dependencies[next.fn.get()] += 1;
        if (!seen[next.fn.get()]) {
          seen[next.fn.get()] = true;
          stack.push_back(next.fn.get());
        }
      }
    }
  }

  // Gradient buffers: one slot per output of each pending node; sums where paths meet.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto accumulate = [&](Node* node, uint32_t slot, Tensor grad) {
    std::vector<Tensor>& buffer = buffers[node];
    if (buffer.empty()) buffer.resize(node->num_outputs());
    CG_CHECK(slot < buffer.size(), node->name(), " has ", buffer.size(),
             " outputs but a gradient arrived for output ", slot, " (an engine bug)");
    if (!buffer[slot].defined()) {
      buffer[slot] = std::move(grad);
    } else if (sole_owner(buffer[slot])) {
      raw::add_(buffer[slot], grad);  // Note [Summing in place]
    } else if (sole_owner(grad) && grad.dtype() == buffer[slot].dtype() &&
               grad.shape() == buffer[slot].shape()) {
      raw::add_(grad, buffer[slot]);
      buffer[slot] = std::move(grad);
    } else {
      // A fresh sum: either gradient may alias another node's (or the user's) tensor.
      Tensor sum = raw::clone(buffer[slot]);
      raw::add_(sum, grad);
      buffer[slot] = std::move(sum);
    }
  };

  // Nodes hold each other through shared_ptr; keep the ones we run alive while running.
  std::unordered_map<Node*, std::shared_ptr<Node>> owners;
  std::priority_queue<Node*, std::vector<Node*>, ReadyLess> ready;
  for (size_t i = 0; i < root_edges.size(); ++i) {
    Node* node = root_edges[i].fn.get();
    owners[node] = root_edges[i].fn;
    accumulate(node, root_edges[i].input_nr, std::move(root_grads[i]));
  }
  for (const Edge& e : root_edges) {
    Node* node = e.fn.get();
    if (dependencies[node] == 0) {
      ready.push(node);
      dependencies[node] = -1;  // queued
    }
  }

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::shared_ptr<Node> keep_alive = std::move(owners[node]);
    owners.erase(node);
    std::vector<Tensor> grad_outputs = std::move(buffers[node]);
    buffers.erase(node);
    grad_outputs.resize(node->num_outputs());

    bool any_gradient = false;
    for (const Tensor& g : grad_outputs) any_gradient = any_gradient || g.defined();
    // No gradient reached this node (its consumers returned none): nothing to run.
    std::vector<Tensor> grad_inputs;
    {
      // While a trace records, what a node's backward allocates carries its name as a
      // scope ("backward/chunked/NarrowBackward"): `chunkgrad trace` can then name the
      // node that made a gradient block, not only the nodes that saved one.
      std::optional<ScopeGuard> scope;
      if (MemoryTrace::enabled()) scope.emplace(node->name());
      grad_inputs = any_gradient ? node->apply(std::move(grad_outputs))
                                 : std::vector<Tensor>(node->next_edges.size());
    }
    if (!retain_graph) node->release_saved();

    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& next = node->next_edges[i];
      if (!next.valid()) continue;
      Node* next_node = next.fn.get();
      if (grad_inputs[i].defined()) {
        check_input_gradient(*node, i, grad_inputs[i]);
        accumulate(next_node, next.input_nr, std::move(grad_inputs[i]));
      }
      if (!owners.count(next_node)) owners[next_node] = next.fn;
      if (--dependencies[next_node] == 0) ready.push(next_node);
    }
  }
}

}  // namespace cg
