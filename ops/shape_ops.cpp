// Why this file exists: the differentiable views and conversions (declared in
// ops/shape_ops.h). Each wraps its core/views.h counterpart with a node that saves only
// shapes (or nothing), so graph_retained_bytes sees no bytes for a view.
#include "ops/shape_ops.h"

#include <numeric>

#include "autograd/function.h"
#include "core/views.h"
#include "ops/op_checks.h"
#include "ops/reduce.h"

namespace cg {

namespace {

// A view op must return a tensor of its own (it gets a grad_fn); raw view functions may
// hand back their input when nothing changes.
Tensor own_impl(const Tensor& out, const Tensor& in) {
  return out.is_same(in) ? raw::as_strided(in, in.shape(), in.strides(), in.offset()) : out;
}

// reshape, view, unsqueeze, squeeze: the gradient is reshaped back.
struct ReshapeBackward : Node {
  explicit ReshapeBackward(const char* name) : node_name(name) {}
  const char* node_name;
  std::string name() const override { return node_name; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {raw::reshape(grads[0], input_meta[0].shape)};
  }
};

struct TransposeBackward : Node {
  TransposeBackward(int64_t d0, int64_t d1) : d0(d0), d1(d1) {}
  int64_t d0, d1;
  std::string name() const override { return "TransposeBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {raw::transpose(grads[0], d0, d1)};
  }
};

struct PermuteBackward : Node {
  explicit PermuteBackward(Shape inverse) : inverse(std::move(inverse)) {}
  Shape inverse;
  std::string name() const override { return "PermuteBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {raw::permute(grads[0], inverse)};
  }
};

// narrow and slice: the gradient lands in its slice of a zero tensor of the input's shape.
struct SliceBackward : Node {
  SliceBackward(const char* name, int64_t dim, int64_t start, int64_t end, int64_t step)
      : node_name(name), dim(dim), start(start), end(end), step(step) {}
  const char* node_name;
  int64_t dim, start, end, step;
  std::string name() const override { return node_name; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const TensorMeta& m = input_meta[0];
    Tensor full = raw::empty(m.shape, m.dtype, m.device);
    raw::fill_(full, 0.0);
    raw::copy_(raw::slice(full, dim, start, end, step), grads[0]);
    return {full};
  }
};

struct ExpandBackward : Node {
  std::string name() const override { return "ExpandBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {sum_to_shape(grads[0], input_meta[0].shape)};
  }
};

// contiguous (when it copies): the gradient passes through.
struct ContiguousBackward : Node {
  std::string name() const override { return "ContiguousBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override { return {grads[0]}; }
};

struct ToDtypeBackward : Node {
  std::string name() const override { return "ToDtypeBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {raw::to_dtype(grads[0], input_meta[0].dtype)};
  }
};

struct ToDeviceBackward : Node {
  std::string name() const override { return "ToDeviceBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {raw::to_device(grads[0], input_meta[0].device)};
  }
};

template <typename NodeT, typename... Args>
Tensor record(Tensor out, const Tensor& in, Args&&... args) {
  out = own_impl(out, in);
  if (auto node = make_node<NodeT>({&in}, std::forward<Args>(args)...)) set_history(node, out);
  return out;
}

}  // namespace

Tensor reshape(const Tensor& t, const Shape& shape) {
  check_defined("reshape", t);
  return record<ReshapeBackward>(raw::reshape(t, shape), t, "ReshapeBackward");
}

Tensor view(const Tensor& t, const Shape& shape) {
  check_defined("view", t);
  return record<ReshapeBackward>(raw::view(t, shape), t, "ViewBackward");
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  check_defined("unsqueeze", t);
  return record<ReshapeBackward>(raw::unsqueeze(t, dim), t, "UnsqueezeBackward");
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  check_defined("squeeze", t);
  return record<ReshapeBackward>(raw::squeeze(t, dim), t, "SqueezeBackward");
}

Tensor transpose(const Tensor& t, int64_t d0, int64_t d1) {
  check_defined("transpose", t);
  const int64_t a = normalize_dim(d0, t.dim(), "transpose");
  const int64_t b = normalize_dim(d1, t.dim(), "transpose");
  return record<TransposeBackward>(raw::transpose(t, a, b), t, a, b);
}

Tensor permute(const Tensor& t, const Shape& dims) {
  check_defined("permute", t);
  Tensor out = raw::permute(t, dims);  // validates dims
  Shape inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    inverse[normalize_dim(dims[i], t.dim(), "permute")] = static_cast<int64_t>(i);
  }
  return record<PermuteBackward>(out, t, inverse);
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  check_defined("narrow", t);
  const int64_t d = normalize_dim(dim, t.dim(), "narrow");
  const int64_t s = start < 0 ? start + t.shape()[d] : start;
  return record<SliceBackward>(raw::narrow(t, dim, start, length), t, "NarrowBackward", d, s,
                               s + length, int64_t{1});
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined("slice", t);
  // Backward slices a zero tensor of t's shape with these same arguments, which gives
  // exactly the forward's geometry (same clamping rules).
  return record<SliceBackward>(raw::slice(t, dim, start, end, step), t, "SliceBackward", dim, start,
                               end, step);
}

Tensor expand(const Tensor& t, const Shape& shape) {
  check_defined("expand", t);
  return record<ExpandBackward>(raw::expand(t, shape), t);
}

Tensor contiguous(const Tensor& t) {
  check_defined("contiguous", t);
  if (t.is_contiguous()) return t;
  return record<ContiguousBackward>(raw::contiguous(t), t);
}

Tensor to_dtype(const Tensor& t, DType dtype) {
  check_defined("to(dtype)", t);
  if (t.dtype() == dtype) return t;
  if (t.requires_grad() && GradMode::is_enabled()) {
    CG_CHECK(is_floating(dtype), "to(dtype): converting a tensor that requires grad to ",
             dtype_name(dtype),
             " would cut the graph; detach() it first or convert to a "
             "floating dtype");
  }
  return record<ToDtypeBackward>(raw::to_dtype(t, dtype), t);
}

Tensor to_device(const Tensor& t, Device device) {
  check_defined("to(device)", t);
  if (t.device() == device) return t;
  return record<ToDeviceBackward>(raw::to_device(t, device), t);
}

}  // namespace cg
