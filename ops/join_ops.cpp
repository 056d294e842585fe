// Why this file exists: cat, stack, split, chunk and pad (declared in ops/join_ops.h).
// Forward and backward are raw copies into/out of views, so no kernel is needed: the
// copy path in core/copy.cpp already handles strides, dtypes and devices.
#include "ops/join_ops.h"

#include <algorithm>
#include <optional>
#include <string>

#include "autograd/function.h"
#include "core/checked_math.h"
#include "core/views.h"
#include "ops/op_checks.h"

namespace cg {

namespace {

// cat and stack: each input's gradient is its slice of the output's gradient (a view;
// for stack the slice is squeezed back).
struct JoinBackward : Node {
  JoinBackward(const char* name, int64_t dim, std::vector<int64_t> sizes, bool stacked)
      : node_name(name), dim(dim), sizes(std::move(sizes)), stacked(stacked) {}
  const char* node_name;
  int64_t dim;
  std::vector<int64_t> sizes;  // each input's length along dim (1 for stack)
  bool stacked;
  std::string name() const override { return node_name; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> out(sizes.size());
    int64_t start = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (needs_input_grad(i)) {
        Tensor piece = raw::narrow(grads[0], dim, start, sizes[i]);
        out[i] = stacked ? raw::squeeze(piece, dim) : piece;
      }
      start += sizes[i];
    }
    return out;
  }
};

// split: the pieces' gradients (zeros where a piece got none) joined along dim.
struct SplitBackward : Node {
  explicit SplitBackward(int64_t dim) : dim(dim) {}
  int64_t dim;
  std::string name() const override { return "SplitBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const TensorMeta& m = input_meta[0];
    Tensor full = raw::empty(m.shape, grads[0].dtype(), m.device);
    int64_t start = 0;
    for (const Tensor& g : grads) {
      const int64_t len = g.shape()[dim];
      raw::copy_(raw::narrow(full, dim, start, len), g);
      start += len;
    }
    return {full};
  }
};

struct PadBackward : Node {
  explicit PadBackward(std::vector<int64_t> pads) : pads(std::move(pads)) {}
  std::vector<int64_t> pads;
  std::string name() const override { return "PadBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    Tensor g = grads[0];
    const Shape& in = input_meta[0].shape;
    for (size_t k = 0; k < pads.size() / 2; ++k) {
      const int64_t d = static_cast<int64_t>(in.size()) - 1 - static_cast<int64_t>(k);
      g = raw::narrow(g, d, pads[2 * k], in[d]);
    }
    return {g};
  }
};

// The checks cat and stack share: a non-empty list of defined tensors of one dtype
// and device.
void check_list(const char* op, const std::vector<Tensor>& ts) {
  CG_CHECK(!ts.empty(), op, ": got an empty list of tensors; pass at least one");
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string arg = "tensor " + std::to_string(i);
    check_defined(op, ts[i], arg.c_str());
    CG_CHECK(ts[i].dtype() == ts[0].dtype(), op, ": tensor ", i, " has dtype ",
             dtype_name(ts[i].dtype()), " but tensor 0 has ", dtype_name(ts[0].dtype()),
             "; convert with cg::to(t, dtype) so all match");
    check_same_device(op, ts[0], ts[i]);
  }
}

// Copies each tensor into consecutive slices of `out` along dim and records the node.
Tensor join(const char* op, const char* node_name, const std::vector<Tensor>& ts, const Tensor& out,
            int64_t dim, bool stacked) {
  std::vector<int64_t> sizes;
  int64_t start = 0;
  for (const Tensor& t : ts) {
    const int64_t len = stacked ? 1 : t.shape()[dim];
    Tensor dst = raw::narrow(out, dim, start, len);
    raw::copy_(dst, stacked ? raw::unsqueeze(t, dim) : t);
    sizes.push_back(len);
    start += len;
  }
  if (auto node = make_node<JoinBackward>(ts, node_name, dim, sizes, stacked)) {
    set_history(node, out);
  }
  return out;
}

std::vector<Tensor> split_pieces(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t len : sizes) {
    // as_strided: a fresh impl even when one piece is all of x (set_history needs it).
    const Tensor v = raw::narrow(x, dim, start, len);
    pieces.push_back(raw::as_strided(v, v.shape(), v.strides(), v.offset()));
    start += len;
  }
  if (auto node = make_node<SplitBackward>({&x}, dim)) set_history(node, pieces);
  return pieces;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  check_list("cat", ts);
  const Tensor& first = ts[0];
  CG_CHECK(first.dim() > 0, "cat: tensor 0 is 0-d; cat needs at least one dim (use stack)");
  const int64_t d = normalize_dim(dim, first.dim(), "cat");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Shape& s = ts[i].shape();
    bool match = s.size() == first.shape().size();
    for (size_t k = 0; match && k < s.size(); ++k) {
      match = static_cast<int64_t>(k) == d || s[k] == first.shape()[k];
    }
    CG_CHECK(match, "cat: tensor ", i, " has shape ", shape_str(s), " but tensor 0 has shape ",
             shape_str(first.shape()), "; all sizes must match except along dim ", d);
    const std::optional<int64_t> grown = checked_add(out_shape[d], s[d]);
    CG_CHECK(grown.has_value(), "cat: the sizes along dim ", d,
             " add up to more than 64 bits hold (", out_shape[d], " + ", s[d], " at tensor ", i,
             ")");
    out_shape[d] = *grown;
  }
  Tensor out = raw::empty(out_shape, first.dtype(), first.device());
  return join("cat", "CatBackward", ts, out, d, /*stacked=*/false);
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  check_list("stack", ts);
  const Shape& shape = ts[0].shape();
  const int64_t d = normalize_dim(dim, ts[0].dim() + 1, "stack");
  for (size_t i = 0; i < ts.size(); ++i) {
    CG_CHECK(ts[i].shape() == shape, "stack: tensor ", i, " has shape ", shape_str(ts[i].shape()),
             " but tensor 0 has shape ", shape_str(shape),
             "; stack needs equal shapes (cat joins along an existing dim)");
  }
  Shape out_shape = shape;
  out_shape.insert(out_shape.begin() + d, static_cast<int64_t>(ts.size()));
  Tensor out = raw::empty(out_shape, ts[0].dtype(), ts[0].device());
  return join("stack", "StackBackward", ts, out, d, /*stacked=*/true);
}

std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes,
                                     int64_t dim) {
  check_defined("split", x);
  CG_CHECK(x.dim() > 0, "split: x is 0-d; there is no dim to split");
  const int64_t d = normalize_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    CG_CHECK(s >= 0, "split: negative piece size ", s, " in ", shape_str(sizes));
    total += s;
  }
  CG_CHECK(total == x.shape()[d], "split: sizes ", shape_str(sizes), " sum to ", total, " but dim ",
           d, " of x ", shape_str(x.shape()), " has ", x.shape()[d]);
  return split_pieces(x, sizes, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_defined("split", x);
  CG_CHECK(x.dim() > 0, "split: x is 0-d; there is no dim to split");
  CG_CHECK(split_size > 0, "split: split_size must be > 0, got ", split_size);
  const int64_t d = normalize_dim(dim, x.dim(), "split");
  const int64_t n = x.shape()[d];
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += split_size) {
    sizes.push_back(std::min(split_size, n - start));
  }
  if (sizes.empty()) sizes.push_back(0);  // as torch: one empty piece of an empty dim
  return split_pieces(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_defined("chunk", x);
  CG_CHECK(chunks > 0, "chunk: chunks must be > 0, got ", chunks);
  CG_CHECK(x.dim() > 0, "chunk: x is 0-d; there is no dim to split");
  const int64_t n = x.shape()[normalize_dim(dim, x.dim(), "chunk")];
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, 1), dim);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  check_defined("pad", x);
  CG_CHECK(pads.size() % 2 == 0 && pads.size() <= 2 * static_cast<size_t>(x.dim()), "pad: pads ",
           shape_str(pads), " must have an even length of at most 2 * rank = ", 2 * x.dim(),
           " for x ", shape_str(x.shape()),
           " ({left, right} of the last dim, then {top, bottom} of the one before, ...)");
  Shape out_shape = x.shape();
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    CG_CHECK(pads[2 * k] >= 0 && pads[2 * k + 1] >= 0, "pad: pads ", shape_str(pads),
             " has a negative value; only padding is supported (use narrow to crop)");
    out_shape[x.dim() - 1 - k] += pads[2 * k] + pads[2 * k + 1];
  }
  Tensor out = raw::empty(out_shape, x.dtype(), x.device());
  raw::fill_(out, value);
  Tensor interior = out;
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(k);
    interior = raw::narrow(interior, d, pads[2 * k], x.shape()[d]);
  }
  raw::copy_(interior, x);
  if (auto node = make_node<PadBackward>({&x}, pads)) set_history(node, out);
  return out;
}

}  // namespace cg
