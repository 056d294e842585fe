// Why this file exists: so that an op records its history in three lines. The pattern
// every op in ops/ follows:
//
//   Tensor mul(const Tensor& a, const Tensor& b) {
//     Tensor out = mul_kernel(a, b);                          // compute, no graph
//     if (auto node = make_node<MulBackward>({&a, &b})) {     // nullptr: nothing to record
//       if (node->needs_input_grad(0)) node->b = node->save(b);  // save only what's needed
//       if (node->needs_input_grad(1)) node->a = node->save(a);
//       set_history(node, out);                               // out.grad_fn = node
//     }
//     return out;
//   }
//
// make_node returns nullptr when grad mode is off or no input requires grad, so ops pay
// nothing outside training. It fills next_edges (each input's grad_fn, or a leaf's
// AccumulateGrad created lazily) and input_meta.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace cg {

// True when grad mode is on and at least one input requires grad.
inline bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs) {
    if (t && t->defined() && t->requires_grad()) return true;
  }
  return false;
}
bool should_record(const std::vector<Tensor>& inputs);

// Wires `node` to its inputs: one edge and one TensorMeta per input.
void connect_inputs(Node& node, std::initializer_list<const Tensor*> inputs);
void connect_inputs(Node& node, const std::vector<Tensor>& inputs);

// Makes the op's output(s) point at `node` (grad_fn, output_nr, requires_grad) and
// records their metadata as the node's outputs. Outputs must be fresh tensors the op
// just made (views get their own TensorImpl), never an input returned as is.
void set_history(const std::shared_ptr<Node>& node, const Tensor& output);
void set_history(const std::shared_ptr<Node>& node, const std::vector<Tensor>& outputs);

// The node for an op over `inputs`, or nullptr when nothing needs recording.
template <typename NodeT, typename... Args>
std::shared_ptr<NodeT> make_node(std::initializer_list<const Tensor*> inputs, Args&&... args) {
  if (!should_record(inputs)) return nullptr;
  auto node = std::make_shared<NodeT>(std::forward<Args>(args)...);
  connect_inputs(*node, inputs);
  return node;
}
template <typename NodeT, typename... Args>
std::shared_ptr<NodeT> make_node(const std::vector<Tensor>& inputs, Args&&... args) {
  if (!should_record(inputs)) return nullptr;
  auto node = std::make_shared<NodeT>(std::forward<Args>(args)...);
  connect_inputs(*node, inputs);
  return node;
}

}  // namespace cg
