// Why this file exists: the recomputation behind checkpoint() (activation_checkpoint.h):
// the node that stands for a whole function in the graph, and the node that catches the
// gradients of that function's inputs in the backward.
#include "autograd/activation_checkpoint.h"

#include <string>
#include <unordered_set>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/node.h"
#include "core/memory_trace.h"
#include "core/views.h"

namespace cg {

// Note [Activation checkpointing]:
// What: checkpoint(f, inputs, parameters) records one node, CheckpointBackward, in place of
// the graph f would have made. Forward: f runs under NoGradGuard, so none of its ops
// records a node or saves a tensor; every intermediate is freed as soon as f stops using
// it, as in inference. The node saves only `inputs` (SavedTensor: version-checked) and
// keeps f itself (the closure: a module pointer, masks, positions).
// Backward: the engine calls the node with the gradients of f's outputs. The node
//  1. makes a fresh alias of each saved input (same storage, no history); an input that
//     required grad gets a GradCatcher node as its grad_fn, the only way into it;
//  2. re-runs f on the aliases with grad mode on (under the trace scope "recompute" and
//     the activation category): a normal graph of f, from the aliases and f's parameters;
//  3. runs a nested engine backward from the recomputed outputs that require grad, with the
//     incoming gradients. The parameters' AccumulateGrad nodes add into their .grad exactly
//     as in the plain path (same ops, same order inside f, the same AccumulateGrad node:
//     a leaf has one, remembered in its TensorImpl); the GradCatchers keep the inputs'
//     gradients, which the node returns to the outer engine;
//  4. drops the recomputed outputs. The nested engine released each recomputed node's
//     saved tensors as it ran, so nothing of f's graph outlives this call.
// The engine is reentrant (it keeps its state on the stack), so f may itself call
// checkpoint(): under the forward's NoGradGuard the inner call just runs, and in the
// recompute it records its own node, recomputed once more in the nested backward.
// Before the nested backward the recomputed graph is walked once: a node created before
// this checkpoint (other than a leaf's AccumulateGrad) means f read a tensor with history
// through its closure; the nested engine would run that outer node early and the outer
// one then run it a second time, so it is refused, naming the node.
//
// The memory trade, for a stack of L checkpointed layers: the forward keeps L layer
// inputs (one [T, H] each, plus once what every layer reads: the drafter's context) in
// place of L layers' intermediates (norms, q/k/v, attention output and lse, o_proj, the
// MLP's gate, up and product: at the full-scale drafter, H 5120 and MLP 17408, the MLP's
// three [T, 17408] tensors alone are ten times the layer's input, everything about
// fifteen to twenty times). In the backward only one layer's intermediates and its
// backward temporaries are alive at a time, and each layer input goes as soon as its
// layer's backward is done. The price is one more forward of every layer (about a third
// more layer FLOPs; MFU counts do not include it). Outputs of f are not saved by the node:
// they are the next layer's inputs, saved once there.
//
// Randomness: f runs twice and must compute the same values both times. There is no RNG
// state to stash and restore here: the DFlash drafter has no dropout and its layers draw
// no random numbers. A function that does (dropout) would need its generator's state
// saved with the inputs and restored before the recompute -- not done, so do not
// checkpoint one.

namespace {

// The grad_fn of a recomputed input alias: keeps the gradient the nested backward sums
// for it (one call: the engine sums every path first) and passes nothing on.
class GradCatcher : public Node {
 public:
  std::string name() const override { return "CheckpointGradCatcher"; }
  Tensor grad;

 protected:
  std::vector<Tensor> backward(std::vector<Tensor>&& grad_outputs) override {
    grad = std::move(grad_outputs[0]);
    return {};
  }
};

class CheckpointBackward : public Node {
 public:
  explicit CheckpointBackward(CheckpointFunction f) : f_(std::move(f)) {}
  std::string name() const override { return "CheckpointBackward"; }

 protected:
  std::vector<Tensor> backward(std::vector<Tensor>&& grad_outputs) override {
    const size_t n = next_edges.size();
    std::vector<Tensor> aliases(n);
    std::vector<std::shared_ptr<GradCatcher>> catchers(n);
    for (size_t i = 0; i < n; ++i) {
      const Tensor& x = saved(i);
      if (!x.defined()) continue;
      aliases[i] = raw::as_strided(x, x.shape(), x.strides(), x.offset());
      if (needs_input_grad(i)) {
        catchers[i] = std::make_shared<GradCatcher>();
        set_history(catchers[i], aliases[i]);
      }
    }
    std::vector<Tensor> outputs;
    {
      AutoGradMode grad_mode(true);
      ScopeGuard scope("recompute");
      CategoryGuard category(MemoryCategory::activation);
      outputs = f_(aliases);
    }
    check_same_outputs(outputs);
    std::vector<Tensor> roots, root_grads;
    for (size_t j = 0; j < outputs.size(); ++j) {
      if (!outputs[j].requires_grad()) continue;  // depends on nothing trainable
      roots.push_back(outputs[j]);
      root_grads.push_back(std::move(grad_outputs[j]));
    }
    if (!roots.empty()) {
      check_no_outer_history(roots);
      cg::backward(roots, root_grads);
    }
    roots.clear();
    outputs.clear();
    std::vector<Tensor> grads(n);
    for (size_t i = 0; i < n; ++i) {
      if (catchers[i]) grads[i] = std::move(catchers[i]->grad);
    }
    return grads;
  }

 private:
  // The recompute must give what the forward gave (f is deterministic and pure).
  void check_same_outputs(const std::vector<Tensor>& outputs) const {
    CG_CHECK(outputs.size() == output_meta.size(), "checkpoint: the recomputed function returned ",
             outputs.size(), " tensors but the forward returned ", output_meta.size(),
             "; the function must do the same thing each time it runs");
    for (size_t j = 0; j < outputs.size(); ++j) {
      const TensorMeta& m = output_meta[j];
      CG_CHECK(outputs[j].defined() && outputs[j].shape() == m.shape &&
                   outputs[j].dtype() == m.dtype && outputs[j].device() == m.device,
               "checkpoint: output ", j, " of the recomputed function is not the forward's (",
               shape_str(m.shape), " ", dtype_name(m.dtype), " on ", m.device.str(),
               "); the function must do the same thing each time it runs");
    }
  }

  // See Note [Activation checkpointing]: f's closure must not bring in outer history.
  void check_no_outer_history(const std::vector<Tensor>& roots) const {
    std::vector<Node*> stack;
    std::unordered_set<Node*> seen;
    for (const Tensor& r : roots) {
      if (seen.insert(r.grad_fn().get()).second) stack.push_back(r.grad_fn().get());
    }
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      if (node == nullptr || dynamic_cast<AccumulateGrad*>(node) != nullptr) continue;
      CG_CHECK(node->sequence_nr() > sequence_nr(),
               "checkpoint: the checkpointed function reads a tensor made by ", node->name(),
               " before the checkpoint, through its closure; pass that tensor in the inputs of "
               "checkpoint() (only tensors that need no gradient may be captured)");
      for (const Edge& e : node->next_edges) {
        if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
      }
    }
  }

  CheckpointFunction f_;
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFunction& f, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& parameters) {
  CG_CHECK(f != nullptr, "checkpoint: the function is empty");
  if (!should_record(inputs) && !should_record(parameters)) return f(inputs);
  auto node = std::make_shared<CheckpointBackward>(f);
  connect_inputs(*node, inputs);
  // Saved before f runs, so that f writing into an input shows up as a version change.
  for (const Tensor& x : inputs) node->save(x, "input");
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = f(inputs);
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    Tensor& out = outputs[j];
    CG_CHECK(out.defined(), "checkpoint: output ", j, " of the function is undefined");
    CG_CHECK(is_floating(out.dtype()), "checkpoint: output ", j, " is ", dtype_name(out.dtype()),
             "; only floating-point outputs carry gradients: compute integer results outside "
             "the checkpointed function");
    // A fresh impl: f may have returned an input (or a leaf) as is, which has its own history.
    out = raw::as_strided(out, out.shape(), out.strides(), out.offset());
  }
  set_history(node, outputs);
  return outputs;
}

}  // namespace cg
