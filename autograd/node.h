// Why this file exists: the autograd graph is made of Nodes. Each op that records
// history creates one Node (its "backward function") holding edges to the nodes that
// made its inputs and the tensors its backward formula needs. Saved tensors live in a
// SavedTensor wrapper owned by the Node base class, so that every node can say how many
// bytes it keeps alive (saved_bytes) and drop them (release_saved) without knowing what
// the op was: the memory story is read off the graph, not guessed.
//
// Note [Saved tensors do not own the graph]: a SavedTensor keeps a fresh TensorImpl over
// the same storage, without grad_fn. Saving an op's own output (relu saves its output)
// therefore makes no reference cycle output -> node -> output, and backward formulas only
// ever need the values. The storage is what is kept alive, and what saved_bytes counts.
//
// Note [Saved tensor versions]: a SavedTensor also records its storage's version (Note
// [Version counter] in core/storage.h) when it is saved. If an in-place write changed the
// bytes before backward reads them -- through the saved tensor itself, any view of it,
// under NoGradGuard or not -- the gradient would be computed from the new values and be
// silently wrong; get() throws instead, naming the saved tensor and the node, as
// PyTorch does ("... has been modified by an inplace operation").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace cg {

class Node;

// Where a gradient goes: input `input_nr` of node `fn` (fn's input_nr-th output grad).
// An invalid edge (fn == nullptr) marks an input that does not require grad.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// What backward needs to know about a tensor without keeping its storage: its shape,
// dtype and device (to check gradients, reduce broadcasts, make zeros).
struct TensorMeta {
  Shape shape;
  DType dtype = DType::f32;
  Device device{};
  static TensorMeta of(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }
};

// One tensor a node keeps for its backward formula (see Note [Saved tensors ...]).
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);

  bool defined() const { return data_.defined(); }
  // The saved values. Throws the "backward a second time" error when released, and the
  // "modified by an inplace operation" error (Note [Saved tensor versions]) when the
  // values changed since they were saved. `index` is this tensor's place among the node's
  // saved tensors, for the message.
  const Tensor& get(const std::string& node_name, size_t index) const;
  // The storage's version when the tensor was saved.
  uint64_t saved_version() const { return version_; }
  // Bytes of the storage kept alive (the whole storage, even when a view was saved).
  size_t storage_nbytes() const;
  const StorageImpl* storage() const;
  void release();
  bool released() const { return released_; }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  bool released_ = false;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();  // iterative, see Note [Deep graphs] in node.cpp
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // "MatmulBackward", "AccumulateGrad", ...
  virtual std::string name() const = 0;

  // Runs backward: one gradient per output of the forward op in, one gradient per
  // next_edges entry out (undefined where the edge is invalid). Throws the "backward a
  // second time" error when this node's saved tensors were released.
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs);

  // ---- the graph ----
  std::vector<Edge> next_edges;         // one per input of the forward op
  std::vector<TensorMeta> input_meta;   // same order as next_edges
  std::vector<TensorMeta> output_meta;  // one per output of the forward op
  uint32_t num_outputs() const { return static_cast<uint32_t>(output_meta.size()); }
  bool needs_input_grad(size_t i) const { return i < next_edges.size() && next_edges[i].valid(); }
  // Creation order; later nodes run first when several are ready (deterministic order).
  uint64_t sequence_nr() const { return sequence_nr_; }

  // ---- saved tensors ----
  // Stores t for backward; returns its index for saved(i). `what` names the tensor
  // ("logits", "dh") for memory traces: while tracing, its block is marked as held by
  // "<name()>:<what>" (or "<name()>:saved<i>"), Note [Who holds a block] in
  // trace/trace_analysis.h.
  size_t save(const Tensor& t, const char* what = nullptr);
  const Tensor& saved(size_t i) const;
  const std::vector<SavedTensor>& saved_tensors() const { return saved_; }
  size_t saved_bytes() const;  // sum of saved storages' nbytes (a storage counted once)
  void release_saved();        // frees what backward needed; apply() then throws
  bool released() const { return released_; }

 protected:
  // The op's gradient formula. grad_outputs are all defined (zeros are made for outputs
  // that got none); return one entry per input (undefined where !needs_input_grad).
  virtual std::vector<Tensor> backward(std::vector<Tensor>&& grad_outputs) = 0;

 private:
  std::vector<SavedTensor> saved_;
  uint64_t sequence_nr_;
  bool released_ = false;
};

// The node at a leaf that requires grad: adds the incoming gradient into leaf.grad().
// It holds the leaf strongly (the leaf only points back weakly, through
// TensorImpl::grad_accumulator) and saves nothing.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::string name() const override { return "AccumulateGrad"; }
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 protected:
  std::vector<Tensor> backward(std::vector<Tensor>&& grad_outputs) override;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The text of the error thrown when a released node runs again.
extern const char* const kBackwardTwiceMessage;

}  // namespace cg
