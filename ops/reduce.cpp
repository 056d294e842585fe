// Why this file exists: the entry points and backward nodes of the reductions (sum,
// mean, max, argmax, logsumexp; declared in ops/reduce.h). The kernels are the device's
// reduction entries (ops/kernels.h).
#include "ops/reduce.h"

#include "autograd/function.h"
#include "core/views.h"
#include "ops/elementwise.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"
#include "ops/shape_ops.h"

namespace cg {

namespace {

// reduce[d] for each dim of a tensor of `ndim` dims; dims may be negative, no repeats.
std::vector<bool> reduce_mask(const char* op, const Shape& dims, int64_t ndim) {
  std::vector<bool> mask(ndim, false);
  for (int64_t d : dims) {
    const int64_t n = normalize_dim(d, ndim, op);
    CG_CHECK(!mask[n], op, ": dim ", d, " appears twice in dims ", shape_str(dims));
    mask[n] = true;
  }
  return mask;
}

Tensor run_sum(const char* op, const Tensor& a, const std::vector<bool>& mask, bool keepdim,
               double scale) {
  return kernels_for(a.device(), op).sum(a, mask, keepdim, scale);
}

// d(scale * sum)/da = scale, broadcast over the reduced dims. The gradient is returned as
// an expanded view of the (small) incoming gradient: nothing is saved, nothing copied.
struct SumBackward : Node {
  SumBackward(const char* name, std::vector<bool> mask, bool keepdim, double scale)
      : node_name(name), mask(std::move(mask)), keepdim(keepdim), scale(scale) {}
  const char* node_name;
  std::vector<bool> mask;
  bool keepdim;
  double scale;
  std::string name() const override { return node_name; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const Shape& in_shape = input_meta[0].shape;
    Tensor g = scale == 1.0 ? grads[0] : cg::scale(grads[0], scale);
    Shape kept(in_shape);  // in_shape with reduced dims as 1
    for (size_t d = 0; d < kept.size(); ++d) {
      if (mask[d]) kept[d] = 1;
    }
    if (!keepdim) g = raw::reshape(g, kept);
    return {raw::expand(g, in_shape)};
  }
};

Tensor reduce(const char* op, const char* node_name, const Tensor& a, const std::vector<bool>& mask,
              bool keepdim, bool average) {
  check_defined(op, a);
  check_floating(op, a);
  int64_t count = 1;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (mask[d]) count *= a.shape()[d];
  }
  const double scale = average ? 1.0 / static_cast<double>(count) : 1.0;
  Tensor out = run_sum(op, a, mask, keepdim, scale);
  if (auto node = make_node<SumBackward>({&a}, node_name, mask, keepdim, scale)) {
    set_history(node, out);
  }
  return out;
}

// ---- along one dim: max, argmax, logsumexp ----------------------------------------

// Checks a floating input and its dim; returns the dim in [0, ndim). With
// need_elements, an empty dim is an error (a maximum needs an element).
int64_t check_dim_reduce(const char* op, const Tensor& a, int64_t dim, bool need_elements) {
  check_defined(op, a);
  check_floating(op, a);
  const int64_t d = normalize_dim(dim, a.dim(), op);
  CG_CHECK(!need_elements || a.shape()[d] > 0, op, ": dim ", dim, " of the input of shape ",
           shape_str(a.shape()),
           " has size 0, and an empty row has no maximum; reduce over "
           "a dim with at least one element");
  return d;
}

void check_not_empty(const char* op, const Tensor& a) {
  check_defined(op, a);
  check_floating(op, a);
  CG_CHECK(a.numel() > 0, op, ": the input of shape ", shape_str(a.shape()),
           " is empty, and an empty tensor has no maximum; check where its size-0 dim comes from");
}

Tensor run_max(const char* op, const Tensor& a, int64_t dim, Tensor* values) {
  return kernels_for(a.device(), op).max_along_dim(a, dim, values);
}

Tensor run_logsumexp(const Tensor& a, int64_t dim) {
  return kernels_for(a.device(), "logsumexp").logsumexp_along_dim(a, dim);
}

Tensor run_scatter(const char* op, const Tensor& src, const Tensor& index, int64_t dim,
                   const Shape& shape) {
  return kernels_for(src.device(), op).scatter_along_dim(src, index, dim, shape);
}

// Routes each row's gradient to its argmax position; zeros elsewhere.
struct MaxBackward : Node {
  MaxBackward(int64_t dim, bool keepdim) : dim(dim), keepdim(keepdim) {}
  int64_t dim;
  bool keepdim;
  size_t indices = SIZE_MAX;
  std::string name() const override { return "MaxBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    Tensor g = grads[0], idx = saved(indices);
    if (!keepdim) {
      g = raw::unsqueeze(g, dim);
      idx = raw::unsqueeze(idx, dim);
    }
    return {run_scatter("max_backward", g, idx, dim, input_meta[0].shape)};
  }
};

// d lse / da = exp(a - lse) (the softmax of the row), recomputed from input and output.
struct LogsumexpBackward : Node {
  LogsumexpBackward(int64_t dim, bool keepdim) : dim(dim), keepdim(keepdim) {}
  int64_t dim;
  bool keepdim;
  size_t input = SIZE_MAX, output = SIZE_MAX;
  std::string name() const override { return "LogsumexpBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    Tensor g = grads[0], out = saved(output);
    if (!keepdim) {
      g = raw::unsqueeze(g, dim);
      out = raw::unsqueeze(out, dim);
    }
    return {mul(g, exp(sub(saved(input), out)))};
  }
};

}  // namespace

Tensor sum(const Tensor& a) {
  check_defined("sum", a);
  return reduce("sum", "SumBackward", a, std::vector<bool>(a.dim(), true), false, false);
}

Tensor sum(const Tensor& a, const Shape& dims, bool keepdim) {
  check_defined("sum", a);
  return reduce("sum", "SumBackward", a, reduce_mask("sum", dims, a.dim()), keepdim, false);
}

Tensor mean(const Tensor& a) {
  check_defined("mean", a);
  return reduce("mean", "MeanBackward", a, std::vector<bool>(a.dim(), true), false, true);
}

Tensor mean(const Tensor& a, const Shape& dims, bool keepdim) {
  check_defined("mean", a);
  return reduce("mean", "MeanBackward", a, reduce_mask("mean", dims, a.dim()), keepdim, true);
}

MaxResult max(const Tensor& a, int64_t dim, bool keepdim) {
  const int64_t d = check_dim_reduce("max", a, dim, /*need_elements=*/true);
  Tensor values;
  Tensor indices = run_max("max", a, d, &values);
  if (!keepdim) {
    values = raw::squeeze(values, d);
    indices = raw::squeeze(indices, d);
  }
  if (auto node = make_node<MaxBackward>({&a}, d, keepdim)) {
    node->indices = node->save(indices);
    set_history(node, values);
  }
  return {values, indices};
}

Tensor max(const Tensor& a) {
  check_not_empty("max", a);
  return max(reshape(a, {-1}), 0).values;
}

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  const int64_t d = check_dim_reduce("argmax", a, dim, /*need_elements=*/true);
  Tensor indices = run_max("argmax", a, d, nullptr);
  return keepdim ? indices : raw::squeeze(indices, d);
}

Tensor argmax(const Tensor& a) {
  check_not_empty("argmax", a);
  return argmax(raw::reshape(a, {-1}), 0);
}

Tensor logsumexp(const Tensor& a, int64_t dim, bool keepdim) {
  const int64_t d = check_dim_reduce("logsumexp", a, dim, /*need_elements=*/false);
  Tensor out = run_logsumexp(a, d);
  if (!keepdim) out = raw::squeeze(out, d);
  if (auto node = make_node<LogsumexpBackward>({&a}, d, keepdim)) {
    node->input = node->save(a);
    node->output = node->save(out);
    set_history(node, out);
  }
  return out;
}

Tensor logsumexp(const Tensor& a) {
  check_defined("logsumexp", a);
  check_floating("logsumexp", a);
  return logsumexp(reshape(a, {-1}), 0);
}

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t nd = g.dim(), sd = static_cast<int64_t>(shape.size());
  CG_CHECK(sd <= nd, "sum_to_shape: cannot reduce a gradient of shape ", shape_str(g.shape()),
           " to the larger rank of ", shape_str(shape));
  // Leading dims the input lacked, and dims where the input had 1, are summed.
  Shape dims;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t sdim = d - (nd - sd);
    if (sdim < 0) {
      dims.push_back(d);
    } else if (shape[sdim] == 1 && g.shape()[d] != 1) {
      dims.push_back(d);
    } else {
      CG_CHECK(shape[sdim] == g.shape()[d], "sum_to_shape: gradient shape ", shape_str(g.shape()),
               " is not a broadcast of ", shape_str(shape));
    }
  }
  Tensor summed = sum(g, dims, /*keepdim=*/true);
  return reshape(summed, shape);  // drop the leading dims
}

}  // namespace cg
