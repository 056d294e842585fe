// Why this file exists: the copy entry points every op falls back on (copy_,
// contiguous(), clone, to(dtype), to(device), fill_, raw::add_), plus single-element
// access. They check their tensors and hand the loops to the backend of the tensors'
// device (Note [Device primitives], core/backend.h): the host's loops are in
// core/host_backend.cpp, a GPU's are kernels in cuda/.
//
// Note [Device copy]: a copy within one device runs on that device: a byte copy when
// both sides are contiguous and share a dtype, the backend's copy_strided otherwise
// (strided, broadcast or converting). A copy between devices moves one contiguous
// buffer: the source is made contiguous on its own device first (and converted to the
// destination's dtype there, unless that device is the host: conversions run on the
// GPU side), the bytes cross once, and whatever layout, broadcast or conversion is left
// runs on the destination's device. Nothing stages a GPU's data through host memory
// except to deliver it to the host.
#include <cstring>

#include "core/backend.h"
#include "core/dtype_dispatch.h"
#include "core/overlap.h"
#include "core/views.h"

namespace cg::raw {

namespace {

// Bytes of the contiguous `src` into the contiguous `dst` (same dtype, same numel).
void transfer(const Tensor& dst, const Tensor& src) {
  const Device gpu = dst.device().is_cpu() ? src.device() : dst.device();
  backend_for(gpu).copy(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(), dst.nbytes());
}

// dst = src on one device, same shape, no overlap.
void same_device_copy(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    transfer(dst, src);
    return;
  }
  backend_for(dst.device())
      .copy_strided(dst.device(), dst.data_ptr(), dst.dtype(), dst.shape(), dst.strides(),
                    src.data_ptr(), src.dtype(), src.strides());
}

// Note [Device copy]: `src` has its own shape (broadcastable to dst's).
void cross_device_copy(const Tensor& dst, const Tensor& src) {
  const bool convert_at_source = !src.device().is_cpu() && src.dtype() != dst.dtype();
  const Tensor packed = convert_at_source ? to_dtype(src, dst.dtype()) : contiguous(src);
  if (packed.shape() == dst.shape() && packed.dtype() == dst.dtype() && dst.is_contiguous()) {
    transfer(dst, packed);
    return;
  }
  const Tensor landed = empty(packed.shape(), packed.dtype(), dst.device());
  transfer(landed, packed);
  copy_(dst, landed);  // layout, broadcast and conversion on dst's device
}

// src expanded to dst's shape, or a clear error naming `what`.
Tensor broadcast_source(const Tensor& src, const Tensor& dst, const char* what) {
  if (src.shape() == dst.shape()) return src;
  try {
    return expand(src, dst.shape());
  } catch (const Error&) {
    CG_FAIL(what, ": source of shape ", shape_str(src.shape()),
            " cannot be broadcast to the destination's shape ", shape_str(dst.shape()));
  }
}

}  // namespace

void copy_(const Tensor& dst, const Tensor& src) {
  CG_CHECK(dst.defined() && src.defined(), "copy_: ", dst.defined() ? "source" : "destination",
           " tensor is undefined");
  Tensor source = broadcast_source(src, dst, "copy_");
  if (dst.numel() == 0) return;
  check_no_internal_overlap("copy_", dst);
  if (dst.device() != src.device()) {
    dst.storage()->bump_version();  // Note [Version counter] in core/storage.h
    cross_device_copy(dst, src);    // different storages: no overlap
    return;
  }
  // Note [raw::copy_ and overlap]: unlike the public in-place ops (ops/inplace.h, which
  // refuse a partial overlap as PyTorch does), raw::copy_ has memmove semantics: a source
  // that shares memory with the destination is read in full before anything is written.
  // Kernels rely on that when they shift data inside one buffer, and the answer is the one
  // a user expects (copy 1 2 3 4 onto 2 3 4 5 of 1 2 3 4 5 gives 1 1 2 3 4).
  switch (memory_overlap(dst, source)) {
    case MemOverlap::full: return;  // copying a tensor onto itself
    case MemOverlap::partial: source = clone(source); break;
    case MemOverlap::none: break;
  }
  dst.storage()->bump_version();  // Note [Version counter] in core/storage.h
  same_device_copy(dst, source);
}

void add_(const Tensor& dst, const Tensor& src) {
  CG_CHECK(dst.defined() && src.defined(), "add_: ", dst.defined() ? "source" : "destination",
           " tensor is undefined");
  CG_CHECK(dst.device() == src.device(), "add_: the destination is on ", dst.device().str(),
           " but the source is on ", src.device().str(), "; move one with to_device");
  CG_CHECK(is_floating(dst.dtype()) && is_floating(src.dtype()),
           "add_: accumulates floating "
           "tensors only, got ",
           dtype_name(dst.dtype()), " += ", dtype_name(src.dtype()));
  Tensor source = broadcast_source(src, dst, "add_");
  if (dst.numel() == 0) return;
  check_no_internal_overlap("add_", dst);
  dst.storage()->bump_version();
  // Overlapping but not identical geometry: read the source before writing. (Identical
  // geometry is x += x, which each element reads before it writes.)
  if (dst.storage() == source.storage() &&
      (dst.offset() != source.offset() || dst.strides() != source.strides())) {
    source = clone(source);
  }
  backend_for(dst.device())
      .accumulate(dst.device(), dst.data_ptr(), dst.dtype(), dst.shape(), dst.strides(),
                  source.data_ptr(), source.dtype(), source.strides());
}

Tensor contiguous(const Tensor& t) {
  CG_CHECK(t.defined(), "contiguous: the tensor is undefined (default-constructed)");
  return t.is_contiguous() ? t : clone(t);
}

Tensor clone(const Tensor& t) {
  CG_CHECK(t.defined(), "clone: the tensor is undefined (default-constructed)");
  Tensor out = empty_like(t);
  copy_(out, t);
  return out;
}

Tensor to_dtype(const Tensor& t, DType dtype) {
  CG_CHECK(t.defined(), "to_dtype: the tensor is undefined (default-constructed)");
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.shape(), dtype, t.device());
  copy_(out, t);
  return out;
}

Tensor to_device(const Tensor& t, Device device) {
  CG_CHECK(t.defined(), "to_device: the tensor is undefined (default-constructed)");
  if (t.device() == device) return t;
  Tensor out = empty(t.shape(), t.dtype(), device);
  copy_(out, t);
  return out;
}

void fill_(const Tensor& t, double value) {
  CG_CHECK(t.defined(), "fill_: the tensor is undefined (default-constructed)");
  if (t.numel() == 0) return;
  check_no_internal_overlap("fill_", t);
  t.storage()->bump_version();  // Note [Version counter] in core/storage.h
  backend_for(t.device())
      .fill(t.device(), t.data_ptr(), t.dtype(), t.shape(), t.strides(), value, 0.0);
}

// ---- elements ------------------------------------------------------------------------

double load_element(const void* p, DType dtype) {
  return visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T x;
    std::memcpy(&x, p, sizeof(T));
    return cast_element<double>(x);
  });
}

void store_element(void* p, DType dtype, double value) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T x = cast_element<T>(value);
    std::memcpy(p, &x, sizeof(T));
  });
}

}  // namespace cg::raw
