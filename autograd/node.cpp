// Why this file exists: the generic parts of every autograd node -- saved-tensor
// bookkeeping, release, the "backward twice" check -- and AccumulateGrad, the node
// that turns a gradient into a leaf's .grad.
#include "autograd/node.h"

#include <atomic>
#include <unordered_set>

#include "autograd/grad_hook.h"
#include "core/memory_trace.h"
#include "core/views.h"

namespace cg {

const char* const kBackwardTwiceMessage =
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call backward(). Specify retain_graph=true if you need to backward a second "
    "time.";

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}

// ---- SavedTensor ---------------------------------------------------------------

SavedTensor::SavedTensor(const Tensor& t) {
  if (t.defined()) {
    // A fresh impl over the same storage: values only, no grad_fn (no reference cycle).
    data_ = raw::as_strided(t, t.shape(), t.strides(), t.offset());
    version_ = t.version();
  }
}

const Tensor& SavedTensor::get(const std::string& node_name, size_t index) const {
  if (released_) CG_FAIL(node_name, ": ", kBackwardTwiceMessage);
  if (data_.defined() && data_.version() != version_) {
    CG_FAIL(
        "one of the variables needed for gradient computation has been modified by an "
        "inplace operation: saved tensor ",
        index, " of ", node_name, " (", shape_str(data_.shape()), " ", dtype_name(data_.dtype()),
        ") is at version ", data_.version(), "; expected version ", version_,
        " (its version when it was saved). Something wrote into it, or into a view of the "
        "same memory, between the forward pass and backward (add_, copy_, fill_, an "
        "optimizer step, loading weights, ...). Do that write after backward, or give the "
        "forward pass a clone() of the tensor");
  }
  return data_;
}

size_t SavedTensor::storage_nbytes() const {
  return data_.defined() && data_.storage() ? data_.storage()->nbytes() : 0;
}

const StorageImpl* SavedTensor::storage() const {
  return data_.defined() ? data_.storage().get() : nullptr;
}

void SavedTensor::release() {
  data_ = Tensor();
  released_ = true;
}

// ---- Node ----------------------------------------------------------------------

Node::Node() : sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

// Note [Deep graphs]: dropping the last reference to a graph's root would destroy the
// chain of nodes recursively (each node's next_edges hold the next ones), and a graph
// a few hundred thousand ops deep would overflow the stack. Instead each destructor
// hands its edges to a thread-local list that only the outermost destructor drains, one
// node at a time.
namespace {
thread_local std::vector<std::shared_ptr<Node>> nodes_to_release;
thread_local bool releasing_nodes = false;
}  // namespace

Node::~Node() {
  for (Edge& e : next_edges) {
    if (e.fn) nodes_to_release.push_back(std::move(e.fn));
  }
  if (releasing_nodes) return;
  releasing_nodes = true;
  while (!nodes_to_release.empty()) {
    std::shared_ptr<Node> node = std::move(nodes_to_release.back());
    nodes_to_release.pop_back();
    node.reset();  // when this was the last reference, its edges join the list
  }
  releasing_nodes = false;
}

std::vector<Tensor> Node::apply(std::vector<Tensor>&& grad_outputs) {
  // A node that saved nothing can run any number of times (like PyTorch's views).
  if (released_ && !saved_.empty()) CG_FAIL(name(), ": ", kBackwardTwiceMessage);
  CG_CHECK(grad_outputs.size() == output_meta.size(), name(), ": got ", grad_outputs.size(),
           " gradients for ", output_meta.size(), " outputs (an engine bug)");
  for (size_t i = 0; i < grad_outputs.size(); ++i) {
    if (!grad_outputs[i].defined()) {
      // An output nobody used: its gradient is zero.
      const TensorMeta& m = output_meta[i];
      grad_outputs[i] = raw::empty(m.shape, m.dtype, m.device);
      raw::fill_(grad_outputs[i], 0.0);
    }
  }
  std::vector<Tensor> grads = backward(std::move(grad_outputs));
  CG_CHECK(grads.size() == next_edges.size(), name(), " returned ", grads.size(), " gradients for ",
           next_edges.size(), " inputs (a bug in the op's backward)");
  return grads;
}

size_t Node::save(const Tensor& t, const char* what) {
  saved_.emplace_back(t);
  const size_t index = saved_.size() - 1;
  if (MemoryTrace::enabled() && t.defined() && t.storage() && t.storage()->data()) {
    const StorageImpl& storage = *t.storage();
    MemoryTrace::record_saved(
        storage.device(), reinterpret_cast<uint64_t>(storage.data()), storage.nbytes(),
        name() + ":" + (what ? std::string(what) : "saved" + std::to_string(index)));
  }
  return index;
}

const Tensor& Node::saved(size_t i) const {
  CG_CHECK(i < saved_.size(), name(), ": saved tensor ", i, " does not exist (", saved_.size(),
           " saved)");
  return saved_[i].get(name(), i);
}

size_t Node::saved_bytes() const {
  std::unordered_set<const StorageImpl*> seen;
  size_t bytes = 0;
  for (const SavedTensor& s : saved_) {
    if (s.storage() && seen.insert(s.storage()).second) bytes += s.storage_nbytes();
  }
  return bytes;
}

void Node::release_saved() {
  for (SavedTensor& s : saved_) s.release();
  released_ = true;
}

// ---- AccumulateGrad --------------------------------------------------------------

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  Tensor view(leaf_);
  input_meta.clear();
  output_meta.push_back(TensorMeta::of(view));
}

std::vector<Tensor> AccumulateGrad::backward(std::vector<Tensor>&& grad_outputs) {
  Tensor grad = std::move(grad_outputs[0]);
  Tensor leaf(leaf_);
  CategoryGuard category(MemoryCategory::gradient);
  // Every op's backward returns its input's shape (the engine checks it): a gradient of
  // another shape here is a bug, not something to sum away.
  CG_CHECK(grad.shape() == leaf.shape(), name(), ": the gradient for a leaf of shape ",
           shape_str(leaf.shape()), " has shape ", shape_str(grad.shape()),
           " (a bug in the backward that produced it: it must return its input's shape)");
  if (grad.device() != leaf.device()) grad = raw::to_device(grad, leaf.device());
  if (grad.dtype() != leaf.dtype()) grad = raw::to_dtype(grad, leaf.dtype());
  if (!leaf_->grad.defined()) {
    // A fresh tensor owned by the leaf alone (the incoming gradient may alias others').
    leaf_->grad = raw::clone(grad);
  } else {
    raw::add_(leaf_->grad, grad);
  }
  run_grad_accumulated_hook(leaf_);  // the leaf's gradient is complete (grad_hook.h)
  return {};
}

}  // namespace cg
