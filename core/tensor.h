// Why this file exists: the Tensor -- shape, strides and an offset over a shared Storage,
// plus the autograd metadata the engine needs. A Tensor is a cheap handle (one
// shared_ptr); views share storage, copies don't.
//
// Layering: core/ knows nothing about autograd or ops. The raw, non-differentiable view
// and copy functions live in core/views.h (cg::raw::reshape, ...). The differentiable
// views and conversions are free functions of ops/shape_ops.h (cg::reshape(x, ...),
// cg::transpose, cg::to(x, DType::f64), ...), not methods here: a method would have to
// be defined in ops/ and make core depend on ops. Autograd methods are declared here and
// defined in autograd/ (autograd/tensor_autograd.cpp).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/storage.h"

namespace cg {

class Node;  // autograd/node.h
struct TensorImpl;
using Shape = std::vector<int64_t>;

// Options for factories: cg::zeros({2, 3}, {.dtype = DType::f64, .requires_grad = true}).
struct TensorOptions {
  DType dtype = DType::f32;
  Device device{};
  bool requires_grad = false;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor (e.g. a leaf's grad before backward)
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata ----
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t dim() const;
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t offset() const;  // in elements, into the storage
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  size_t nbytes() const;  // numel * element_size (not the storage's size)
  const Storage& storage() const;
  void* data_ptr() const;    // first element (storage data + offset)
  uint64_t version() const;  // in-place writes to the storage (Note [Version counter])
  template <typename T>
  T* data() const;  // checks that T matches dtype()

  // ---- values (copy to host when needed) ----
  double item() const;                    // the single element, as double
  std::vector<double> to_vector() const;  // every element in row-major order
  std::string str() const;                // readable print, PyTorch style

  // ---- autograd (autograd/tensor_autograd.cpp) ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // leaves only
  Tensor grad() const;                     // undefined until a backward reaches it
  void set_grad(const Tensor& grad) const;
  bool is_leaf() const;  // no grad_fn
  const std::shared_ptr<Node>& grad_fn() const;
  // Backpropagates from this tensor. A scalar needs no gradient; anything else needs
  // one of its shape. retain_graph keeps saved tensors for a second backward.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same storage, no graph

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  Storage storage;
  Shape sizes;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;

  // Autograd metadata; plain data here, meaning given by autograd/.
  bool requires_grad = false;            // leaves: set by the user; results: any input requires
  Tensor grad;                           // leaves' accumulated gradient
  std::shared_ptr<Node> grad_fn;         // the node that made this tensor (null for leaves)
  uint32_t output_nr = 0;                // which output of grad_fn this is
  std::weak_ptr<Node> grad_accumulator;  // leaves: the node that accumulates into grad
};

std::ostream& operator<<(std::ostream& out, const Tensor& t);

// ---- shape helpers used across the framework ----
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"
Shape contiguous_strides(const Shape& shape);
// Maps d in [-ndim, ndim) to [0, ndim); throws naming `what` (the op) otherwise.
int64_t normalize_dim(int64_t d, int64_t ndim, const char* what = "dim");

// ---- inline accessors ----
inline const Shape& Tensor::shape() const { return impl_->sizes; }
inline const Shape& Tensor::strides() const { return impl_->strides; }
inline int64_t Tensor::dim() const { return static_cast<int64_t>(impl_->sizes.size()); }
inline int64_t Tensor::offset() const { return impl_->offset; }
inline DType Tensor::dtype() const { return impl_->dtype; }
inline Device Tensor::device() const { return impl_->storage->device(); }
inline const Storage& Tensor::storage() const { return impl_->storage; }
inline uint64_t Tensor::version() const { return impl_->storage->version(); }

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<f16>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::boolean;
}

template <typename T>
T* Tensor::data() const {
  CG_CHECK(defined(), "data<T>() on an undefined tensor");
  CG_CHECK(dtype_of<T>() == dtype(), "data<T>(): tensor has dtype ", dtype_name(dtype()), " but ",
           dtype_name(dtype_of<T>()), " was asked for");
  return static_cast<T*>(data_ptr());
}

}  // namespace cg
