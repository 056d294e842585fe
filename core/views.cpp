// Why this file exists: every view in chunkgrad is new geometry (sizes, strides, offset)
// over the same Storage. Each function here checks its arguments against the tensor's
// shape and says what was wrong; none of them copies, except reshape when it must.
// Copies, conversions and element access are in copy.cpp.
#include <algorithm>
#include <optional>

#include "core/checked_math.h"
#include "core/views.h"

namespace cg::raw {

namespace {

void check_defined(const Tensor& t, const char* what) {
  CG_CHECK(t.defined(), what, ": the tensor is undefined (default-constructed)");
}

// t.offset() + index * stride: where a view that starts at `index` along a dim begins.
// Only an empty tensor (which may carry any strides) can overflow here.
int64_t view_offset(const Tensor& t, int64_t index, int64_t stride, const char* what) {
  const std::optional<int64_t> step = checked_mul(index, stride);
  const std::optional<int64_t> offset = step ? checked_add(t.offset(), *step) : std::nullopt;
  CG_CHECK(offset.has_value(), what, ": start ", index, " times stride ", stride,
           " overflows 64 bits (shape ", shape_str(t.shape()), ", strides ", shape_str(t.strides()),
           ")");
  return *offset;
}

// PyTorch's computeStride (aten/src/ATen/TensorUtils.cpp): the strides that let a tensor
// of `old_sizes`/`old_strides` be seen as `new_sizes` without moving data, or nullopt.
// Dims are grouped into chunks that are contiguous among themselves; a view may regroup
// the elements inside a chunk but never merge two chunks.
std::optional<Shape> view_strides(const Shape& old_sizes, const Shape& old_strides,
                                  const Shape& new_sizes) {
  if (old_sizes.empty()) return Shape(new_sizes.size(), 1);
  const int64_t numel = shape_numel(old_sizes);
  if (numel == 0 && old_sizes == new_sizes) return old_strides;
  if (numel == 0) return contiguous_strides(new_sizes);

  Shape new_strides(new_sizes.size());

  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();  // stride of the chunk's innermost dim
  int64_t tensor_numel = 1;                        // elements in the chunk so far
  int64_t view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[tensor_d];
    const bool chunk_ends =
        tensor_d == 0 || (old_sizes[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[tensor_d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

}  // namespace

Tensor make_tensor(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype) {
  CG_CHECK(storage != nullptr, "make_tensor: the storage is null");
  CG_CHECK(sizes.size() == strides.size(), "make_tensor: ", sizes.size(), " sizes ",
           shape_str(sizes), " but ", strides.size(), " strides ", shape_str(strides));
  CG_CHECK(offset >= 0, "make_tensor: negative storage offset ", offset);
  int64_t last = offset;  // the furthest element the geometry reaches
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    CG_CHECK(sizes[i] >= 0, "make_tensor: negative size in shape ", shape_str(sizes));
    CG_CHECK(strides[i] >= 0, "make_tensor: negative stride in strides ", shape_str(strides),
             " (chunkgrad supports only non-negative strides)");
    empty = empty || sizes[i] == 0;
    if (sizes[i] > 0 && last >= 0) {
      // A reach past int64 is as out of bounds as any other (last = -1 marks it).
      const std::optional<int64_t> step = checked_mul(sizes[i] - 1, strides[i]);
      const std::optional<int64_t> next = step ? checked_add(last, *step) : std::nullopt;
      last = next.value_or(-1);
    }
  }
  const auto capacity = static_cast<int64_t>(storage->nbytes() / element_size(dtype));
  CG_CHECK(empty || (last >= 0 && last < capacity), "make_tensor: shape ", shape_str(sizes),
           " with strides ", shape_str(strides), " and offset ", offset, " reaches element ",
           last >= 0 ? std::to_string(last) : std::string("beyond 2^63"),
           " but the storage holds only ", capacity, " ", dtype_name(dtype), " elements");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) { CG_CHECK(s >= 0, "empty: negative size in shape ", shape_str(shape)); }
  // numel, strides and bytes are checked: a shape that overflows 64 bits is an error, and
  // one that fits but no allocator can serve is an OutOfMemoryError from the allocator.
  const int64_t numel = shape_numel(shape);
  const std::optional<size_t> nbytes = checked_mul(static_cast<size_t>(numel), element_size(dtype));
  CG_CHECK(nbytes.has_value(), "empty: shape ", shape_str(shape), " of ", dtype_name(dtype),
           " needs more bytes than 64 bits can count; check the sizes");
  Shape strides = contiguous_strides(shape);
  return make_tensor(make_storage(*nbytes, device), shape, std::move(strides), 0, dtype);
}

Tensor empty_like(const Tensor& t) {
  check_defined(t, "empty_like");
  return empty(t.shape(), t.dtype(), t.device());
}

// ---- views ---------------------------------------------------------------------------

Tensor as_strided(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  check_defined(t, "as_strided");
  return make_tensor(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype());
}

Shape infer_shape(const Shape& shape, int64_t numel) {
  int64_t known = 1;
  int64_t infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      CG_CHECK(infer_at < 0, "shape ", shape_str(shape),
               " has more than one -1; only one "
               "dim can be inferred");
      infer_at = static_cast<int64_t>(i);
    } else {
      CG_CHECK(shape[i] >= 0, "shape ", shape_str(shape),
               " has a negative size (only -1, "
               "meaning 'infer', is allowed)");
      const std::optional<int64_t> next = checked_mul(known, shape[i]);
      CG_CHECK(next.has_value(), "shape ", shape_str(shape),
               " has more elements than a "
               "64-bit count can hold, so it cannot match a tensor of ",
               numel, " elements");
      known = *next;
    }
  }
  Shape out = shape;
  if (infer_at >= 0) {
    CG_CHECK(known != 0 && numel % known == 0, "shape ", shape_str(shape),
             " is invalid for a tensor of ", numel, " elements: the -1 cannot be inferred");
    out[infer_at] = numel / known;
  } else {
    CG_CHECK(known == numel, "shape ", shape_str(shape), " (", known,
             " elements) is invalid for a tensor of ", numel, " elements");
  }
  return out;
}

Tensor view(const Tensor& t, Shape shape) {
  check_defined(t, "view");
  Shape sizes = infer_shape(shape, t.numel());
  std::optional<Shape> strides = view_strides(t.shape(), t.strides(), sizes);
  CG_CHECK(strides.has_value(), "view: cannot view a tensor of shape ", shape_str(t.shape()),
           " and strides ", shape_str(t.strides()), " as ", shape_str(sizes),
           ": the new shape would merge dims that are not contiguous in memory. Use "
           "reshape() (which copies when needed) or call contiguous() first");
  return as_strided(t, std::move(sizes), std::move(*strides), t.offset());
}

Tensor reshape(const Tensor& t, Shape shape) {
  check_defined(t, "reshape");
  Shape sizes = infer_shape(shape, t.numel());
  if (std::optional<Shape> strides = view_strides(t.shape(), t.strides(), sizes)) {
    return as_strided(t, std::move(sizes), std::move(*strides), t.offset());
  }
  const Tensor copy = clone(t);
  return as_strided(copy, sizes, contiguous_strides(sizes), 0);
}

Tensor transpose(const Tensor& t, int64_t d0, int64_t d1) {
  check_defined(t, "transpose");
  d0 = normalize_dim(d0, t.dim(), "transpose");
  d1 = normalize_dim(d1, t.dim(), "transpose");
  Shape sizes = t.shape();
  Shape strides = t.strides();
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  return as_strided(t, std::move(sizes), std::move(strides), t.offset());
}

Tensor permute(const Tensor& t, const Shape& dims) {
  check_defined(t, "permute");
  CG_CHECK(static_cast<int64_t>(dims.size()) == t.dim(), "permute: got ", dims.size(), " dims ",
           shape_str(dims), " for a ", t.dim(), "-d tensor of shape ", shape_str(t.shape()),
           "; name every dim exactly once");
  Shape sizes(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = normalize_dim(dims[i], t.dim(), "permute");
    CG_CHECK(!seen[d], "permute: dim ", d, " appears twice in ", shape_str(dims),
             "; name every dim exactly once");
    seen[d] = true;
    sizes[i] = t.shape()[d];
    strides[i] = t.strides()[d];
  }
  return as_strided(t, std::move(sizes), std::move(strides), t.offset());
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  check_defined(t, "narrow");
  dim = normalize_dim(dim, t.dim(), "narrow");
  const int64_t size = t.shape()[dim];
  CG_CHECK(start >= -size && start <= size, "narrow: start ", start, " out of range for dim ", dim,
           " of size ", size, " (shape ", shape_str(t.shape()), ")");
  if (start < 0) start += size;
  CG_CHECK(length >= 0 && length <= size - start, "narrow: start ", start, " + length ", length,
           " exceeds dim ", dim, " of size ", size, " (shape ", shape_str(t.shape()), ")");
  Shape sizes = t.shape();
  sizes[dim] = length;
  return as_strided(t, std::move(sizes), t.strides(),
                    view_offset(t, start, t.strides()[dim], "narrow"));
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined(t, "slice");
  dim = normalize_dim(dim, t.dim(), "slice");
  CG_CHECK(step > 0, "slice: step must be positive, got ", step,
           " (negative steps would need negative strides, which chunkgrad does not support)");
  const int64_t size = t.shape()[dim];
  // Python slicing: negatives count from the end, then everything clamps to [0, size].
  auto clamp = [size](int64_t i) {
    if (i < 0) i += size;
    return std::clamp<int64_t>(i, 0, size);
  };
  start = clamp(start);
  end = std::max(clamp(end), start);
  Shape sizes = t.shape();
  Shape strides = t.strides();
  // ceil((end - start) / step), without forming end - start + step (step may be huge).
  sizes[dim] = end == start ? 0 : (end - start - 1) / step + 1;
  const int64_t offset = view_offset(t, start, strides[dim], "slice");
  // A dim of size 0 or 1 is never stepped over, so its stride may stay when step * stride
  // does not fit.
  const std::optional<int64_t> stepped = checked_mul(strides[dim], step);
  CG_CHECK(stepped.has_value() || sizes[dim] <= 1, "slice: step ", step, " times stride ",
           strides[dim], " of dim ", dim, " overflows 64 bits (shape ", shape_str(t.shape()), ")");
  strides[dim] = stepped.value_or(strides[dim]);
  return as_strided(t, std::move(sizes), std::move(strides), offset);
}

Tensor expand(const Tensor& t, const Shape& shape) {
  check_defined(t, "expand");
  const auto ndim = static_cast<int64_t>(shape.size());
  CG_CHECK(ndim >= t.dim(), "expand: cannot expand shape ", shape_str(t.shape()), " to ",
           shape_str(shape), ", which has fewer dims");
  const int64_t lead = ndim - t.dim();  // new leading dims
  Shape sizes(ndim), strides(ndim);
  for (int64_t i = 0; i < ndim; ++i) {
    if (i < lead) {
      CG_CHECK(shape[i] >= 0, "expand: a new leading dim needs an explicit size, got ", shape[i],
               " in ", shape_str(shape));
      sizes[i] = shape[i];
      strides[i] = 0;
      continue;
    }
    const int64_t have = t.shape()[i - lead];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    if (want == have) {
      sizes[i] = have;
      strides[i] = t.strides()[i - lead];
    } else {
      CG_CHECK(have == 1 && want >= 0, "expand: cannot expand shape ", shape_str(t.shape()), " to ",
               shape_str(shape), ": dim ", i - lead, " has size ", have,
               ", which is neither 1 nor ", want);
      sizes[i] = want;
      strides[i] = 0;
    }
  }
  return as_strided(t, std::move(sizes), std::move(strides), t.offset());
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  check_defined(t, "unsqueeze");
  dim = normalize_dim(dim, t.dim() + 1, "unsqueeze");
  Shape sizes = t.shape();
  Shape strides = t.strides();
  // The new dim has size 1 and is never stepped over, so any stride is right; PyTorch's
  // size * stride is used when it fits (an empty tensor may carry any strides).
  const int64_t stride = dim < t.dim() ? checked_mul(sizes[dim], strides[dim]).value_or(1) : 1;
  sizes.insert(sizes.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return as_strided(t, std::move(sizes), std::move(strides), t.offset());
}

// As in PyTorch, squeezing a dim whose size is not 1 returns the tensor unchanged.
Tensor squeeze(const Tensor& t, int64_t dim) {
  check_defined(t, "squeeze");
  dim = normalize_dim(dim, t.dim(), "squeeze");
  if (t.shape()[dim] != 1) return as_strided(t, t.shape(), t.strides(), t.offset());
  Shape sizes = t.shape();
  Shape strides = t.strides();
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  return as_strided(t, std::move(sizes), std::move(strides), t.offset());
}

// ---- broadcasting --------------------------------------------------------------------

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what) {
  const size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    // Align from the right: dim i of the result is dim i - (ndim - x.size()) of x.
    const int64_t ai = static_cast<int64_t>(i) - static_cast<int64_t>(ndim - a.size());
    const int64_t bi = static_cast<int64_t>(i) - static_cast<int64_t>(ndim - b.size());
    const int64_t sa = ai >= 0 ? a[ai] : 1;
    const int64_t sb = bi >= 0 ? b[bi] : 1;
    CG_CHECK(sa == sb || sa == 1 || sb == 1, what, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast (dim ", i, ": ", sa, " vs ", sb,
             "); sizes must match or be 1, aligned from the last dim");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

}  // namespace cg::raw
