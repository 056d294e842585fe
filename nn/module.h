// Why this file exists: a model is a tree of modules, each owning named parameters, and
// everything that works on "all the parameters" -- optimisers, checkpoints, freezing,
// counting, dtype casts -- walks that tree by name. Names are dotted paths built from
// registration names ("model.layers.3.self_attn.q_proj.weight"), chosen to equal the
// Hugging Face names so that real checkpoints load by name.
//
//   class Mlp : public cg::nn::Module {
//    public:
//     Mlp() : Module("Mlp") {
//       fc = register_module("fc", std::make_unique<Linear>(4, 8, LinearOptions{}));
//     }
//     cg::Tensor forward(const cg::Tensor& x) const {
//       auto scope = enter_scope();          // trace scope "<parents>/<this name>"
//       return fc->forward(x);
//     }
//     Linear* fc;
//   };
//
// Parameters are leaves that require grad, allocated under MemoryCategory::parameter.
// A parameter shared by two modules (tied embeddings) is one tensor: named_parameters()
// lists it once, under the name it was first reached by; its other names are aliases
// that load_state_dict accepts. A module's parameters are member Tensors of the
// subclass registered by address, so modules are neither copied nor moved: they live
// behind unique_ptr, owned by their parent.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/memory_trace.h"
#include "core/tensor.h"

namespace cg::nn {

using StateDict = std::map<std::string, Tensor>;
using NamedParameters = std::vector<std::pair<std::string, Tensor>>;

// What load_state_dict found: keys the module expected but did not get, keys it got but
// has no parameter for. Strict loads throw instead of returning non-empty lists.
struct LoadResult {
  std::vector<std::string> missing;
  std::vector<std::string> unexpected;
};

// Where load_state_dict reads values from: a map in memory, or a checkpoint on disk
// (nn/checkpoint.h) that reads each tensor only when it is copied.
class StateSource {
 public:
  virtual ~StateSource() = default;
  virtual std::vector<std::string> keys() const = 0;
  // How the source itself names `key` (a checkpoint may store it under another name). For a
  // key the source lacks, the name it would have there (what a missing-key error shows).
  virtual std::string name_in_source(const std::string& key) const { return key; }
  virtual Shape shape(const std::string& key) const = 0;
  virtual DType dtype(const std::string& key) const = 0;
  // Writes the value of `key` into dst (same shape; dtype equal unless converting).
  virtual void copy_into(const std::string& key, const Tensor& dst) const = 0;
  virtual std::string describe() const = 0;  // "the state dict", "checkpoint '/x'"
};

class Module {
 public:
  explicit Module(std::string type_name);
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // "Linear", "Attention", ... (errors and the root's trace scope use it).
  const std::string& type_name() const { return type_name_; }
  // The name this module pushes as its trace scope: its registration name in its parent
  // ("self_attn"; "layers.3" for list items); the type name for an unnamed root.
  const std::string& name() const { return name_.empty() ? type_name_ : name_; }
  void set_name(std::string name);
  // RAII scope for forward(): traces of allocations inside say ".../<name()>".
  ScopeGuard enter_scope() const { return ScopeGuard(name()); }

  // ---- the tree ----
  // Each parameter once, by its first name, in PyTorch's order: a module's own
  // parameters, then each child's subtree, both in registration order.
  NamedParameters named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Every name a parameter is reachable by, aliases of shared parameters included.
  NamedParameters named_parameters_with_aliases() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  // This module (name "") and every descendant, depth first, by dotted path.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // The descendant at a dotted path ("model.layers.0"); throws naming the path if none.
  Module& submodule(const std::string& path);
  // The parameter at a dotted path ("model.norm.weight"); throws if none.
  Tensor parameter(const std::string& path) const;

  // ---- modes ----
  void train(bool on = true);  // this module and all descendants
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // ---- gradients and freezing ----
  void zero_grad();              // every parameter's grad becomes undefined
  void requires_grad_(bool on);  // on every parameter of the subtree
  void freeze() { requires_grad_(false); }
  void unfreeze() { requires_grad_(true); }
  int64_t num_parameters() const;            // elements, shared parameters counted once
  int64_t num_trainable_parameters() const;  // those that require grad

  // ---- state ----
  // name -> parameter (detached: same storage, no grad), shared parameters once.
  StateDict state_dict() const;
  // Copies values in. Every key is checked (known, shape, dtype) before anything is
  // written, so a failed load leaves the module unchanged. strict: missing or unexpected
  // keys throw (listing them); otherwise they are returned. A shared parameter is
  // satisfied by any of its names. convert_dtype: a value of another dtype is converted
  // (a bf16 checkpoint into an f32 model) instead of refused.
  LoadResult load_state_dict(const StateDict& state, bool strict = true,
                             bool convert_dtype = false);
  LoadResult load_state_dict(const StateSource& source, bool strict = true,
                             bool convert_dtype = false);

  // Casts every floating parameter (and its grad) to `dtype` in place: the tensor
  // objects stay the same (optimisers and tied modules still hold them), their storage
  // is replaced.
  void to(DType dtype);
  // Moves every parameter (and its grad) to `device` in place, as to(DType): the tensor
  // objects stay, their storage is replaced. Parameters already there (a shared one, the
  // frozen embedding a drafter borrows from its target) are left alone. Build a model on
  // the host, then move it: the initial values are the host's, bit for bit, on every device.
  void to(Device device);

 protected:
  // Registers a member Tensor of the subclass as parameter `name`. It becomes a leaf
  // that requires grad; create it under CategoryGuard(MemoryCategory::parameter).
  void register_parameter(const std::string& name, Tensor* slot);
  // Takes ownership of `child` and names it; returns the raw pointer for the member.
  template <typename M>
  M* register_module(const std::string& name, std::unique_ptr<M> child) {
    M* raw = child.get();
    add_child(name, std::unique_ptr<Module>(std::move(child)));
    return raw;
  }
  // Containers (ModuleList) give their items scope names "<container name>.<key>".
  virtual bool is_container() const { return false; }

 private:
  void add_child(const std::string& name, std::unique_ptr<Module> child);
  void collect(const std::string& prefix, NamedParameters& out) const;

  std::string type_name_;
  std::string name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

// An indexed list of modules; items are named "0", "1", ... so their parameters read
// "layers.3.mlp.up_proj.weight". It has no forward: callers loop over it.
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  template <typename M>
  M* push_back(std::unique_ptr<M> item) {
    M* raw = register_module(std::to_string(items_.size()), std::move(item));
    items_.push_back(raw);
    return raw;
  }
  size_t size() const { return items_.size(); }
  Module& operator[](size_t i) const { return *items_.at(i); }
  template <typename M>
  M& at(size_t i) const {
    return dynamic_cast<M&>(*items_.at(i));
  }

 protected:
  bool is_container() const override { return true; }

 private:
  std::vector<Module*> items_;
};

}  // namespace cg::nn
