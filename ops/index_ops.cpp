// Why this file exists: index_select, gather and scatter_add's entry points, shape
// checks and backward nodes (declared in ops/index_ops.h). The kernels are entries of the
// device's table (ops/kernels.h), index checks included.
#include "ops/index_ops.h"

#include <string>

#include "autograd/function.h"
#include "core/views.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"

namespace cg {

namespace {

std::string dim_bound(int64_t dim, const Tensor& x) {
  return "dim " + std::to_string(dim) + " of x " + shape_str(x.shape()) + " (size " +
         std::to_string(x.dim() == 0 ? 1 : x.shape()[dim]) + ")";
}

Tensor zeros_of(const TensorMeta& m, DType dtype) {
  Tensor z = raw::empty(m.shape, dtype, m.device);
  raw::fill_(z, 0.0);
  return z;
}

// Note [0-d scatter_add]: a 0-d x has one element, at index 0, and its index and src are
// 0-d too (same rank). The tables' scatter_add and gather entries never see 0-d tensors:
// they are called through these functions, with 1-element 1-d views of the same storage,
// which the general strided loops handle.
void scatter_add_entry(DeviceKernels& k, const Tensor& dst, int64_t dim, const Tensor& idx,
                       const Tensor& src) {
  if (dst.dim() == 0) {
    k.scatter_add(raw::unsqueeze(dst, 0), 0, raw::unsqueeze(idx, 0), raw::unsqueeze(src, 0));
    return;
  }
  k.scatter_add(dst, dim, idx, src);
}

Tensor gather_entry(DeviceKernels& k, const Tensor& x, int64_t dim, const Tensor& idx) {
  if (x.dim() == 0)
    return raw::squeeze(k.gather(raw::unsqueeze(x, 0), 0, raw::unsqueeze(idx, 0)), 0);
  return k.gather(x, dim, idx);
}

// The gradient of a gather-like op: g scatter-added into zeros of the input's shape.
struct IndexSelectBackward : Node {
  explicit IndexSelectBackward(int64_t dim) : dim(dim) {}
  int64_t dim;
  size_t idx = SIZE_MAX;
  std::string name() const override { return "IndexSelectBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    Tensor dx = zeros_of(input_meta[0], grads[0].dtype());
    kernels_for(dx.device(), "index_select backward").index_add(dx, dim, saved(idx), grads[0], -1);
    return {dx};
  }
};

struct GatherBackward : Node {
  explicit GatherBackward(int64_t dim) : dim(dim) {}
  int64_t dim;
  size_t idx = SIZE_MAX;
  std::string name() const override { return "GatherBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    Tensor dx = zeros_of(input_meta[0], grads[0].dtype());
    scatter_add_entry(kernels_for(dx.device(), "gather backward"), dx, dim, saved(idx), grads[0]);
    return {dx};
  }
};

struct ScatterAddBackward : Node {
  explicit ScatterAddBackward(int64_t dim) : dim(dim) {}
  int64_t dim;
  size_t idx = SIZE_MAX;
  std::string name() const override { return "ScatterAddBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    Tensor dx, dsrc;
    if (needs_input_grad(0)) dx = g;
    if (needs_input_grad(1)) {
      const Tensor& index = saved(idx);
      dsrc = gather_entry(kernels_for(g.device(), "scatter_add backward"), g, dim, index);
      const Shape& src_shape = input_meta[1].shape;
      if (dsrc.shape() != src_shape) {  // src larger than idx: the rest got no gradient
        Tensor full = zeros_of(input_meta[1], g.dtype());
        Tensor region = full;
        for (int64_t d = 0; d < index.dim(); ++d)
          region = raw::narrow(region, d, 0, index.shape()[d]);
        raw::copy_(region, dsrc);
        dsrc = full;
      }
    }
    return {dx, dsrc};
  }
};

// gather and scatter_add: idx has x's rank and fits x in every dim but `dim`.
void check_gather_shape(const char* op, const Tensor& x, int64_t dim, const Tensor& idx) {
  CG_CHECK(idx.dim() == x.dim(), op, ": index ", shape_str(idx.shape()), " has rank ", idx.dim(),
           " but x ", shape_str(x.shape()), " has rank ", x.dim(),
           "; they must match (unsqueeze/expand the index)");
  for (int64_t d = 0; d < x.dim(); ++d) {
    CG_CHECK(d == dim || idx.shape()[d] <= x.shape()[d], op, ": index ", shape_str(idx.shape()),
             " is larger than x ", shape_str(x.shape()), " in dim ", d, "; outside dim ", dim,
             " the index must fit in x");
  }
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& idx) {
  check_defined("index_select", x, "x");
  check_defined("index_select", idx, "index");
  check_index_dtype("index_select", idx);
  check_same_device("index_select", x, idx);
  CG_CHECK(x.dim() > 0, "index_select: x is 0-d; there is no dim to index");
  CG_CHECK(idx.dim() <= 1, "index_select: index has shape ", shape_str(idx.shape()),
           "; it must be 1-D (use gather for per-element indices)");
  const int64_t d = normalize_dim(dim, x.dim(), "index_select");
  DeviceKernels& k = kernels_for(x.device(), "index_select");
  k.check_indices("index_select", "index", idx, x.shape()[d], dim_bound(d, x));
  Tensor out = k.index_select(x, d, idx);
  if (auto node = make_node<IndexSelectBackward>({&x}, d)) {
    node->idx = node->save(idx);
    set_history(node, out);
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& idx) {
  check_defined("gather", x, "x");
  check_defined("gather", idx, "index");
  check_index_dtype("gather", idx);
  check_same_device("gather", x, idx);
  const int64_t d = x.dim() == 0 ? 0 : normalize_dim(dim, x.dim(), "gather");
  check_gather_shape("gather", x, d, idx);
  DeviceKernels& k = kernels_for(x.device(), "gather");
  k.check_indices("gather", "index", idx, x.dim() == 0 ? 1 : x.shape()[d], dim_bound(d, x));
  Tensor out = gather_entry(k, x, d, idx);
  if (auto node = make_node<GatherBackward>({&x}, d)) {
    node->idx = node->save(idx);
    set_history(node, out);
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& src) {
  check_binary("scatter_add", x, src);
  check_defined("scatter_add", idx, "index");
  check_index_dtype("scatter_add", idx);
  check_same_device("scatter_add", x, idx);
  const int64_t d = x.dim() == 0 ? 0 : normalize_dim(dim, x.dim(), "scatter_add");
  check_gather_shape("scatter_add", x, d, idx);
  CG_CHECK(src.dim() == idx.dim(), "scatter_add: src ", shape_str(src.shape()), " has rank ",
           src.dim(), " but index ", shape_str(idx.shape()), " has rank ", idx.dim(),
           "; they must match");
  for (int64_t k = 0; k < idx.dim(); ++k) {
    CG_CHECK(idx.shape()[k] <= src.shape()[k], "scatter_add: index ", shape_str(idx.shape()),
             " is larger than src ", shape_str(src.shape()), " in dim ", k,
             "; every index needs a src element");
  }
  DeviceKernels& k = kernels_for(x.device(), "scatter_add");
  k.check_indices("scatter_add", "index", idx, x.dim() == 0 ? 1 : x.shape()[d], dim_bound(d, x));
  Tensor out = raw::clone(x);
  scatter_add_entry(k, out, d, idx, src);
  if (auto node = make_node<ScatterAddBackward>({&x, &src}, d)) {
    if (node->needs_input_grad(1)) node->idx = node->save(idx);
    set_history(node, out);
  }
  return out;
}

}  // namespace cg
