// Why this file exists: the raw (non-differentiable) building blocks that every op and
// every differentiable view is made of: strided views over the same storage, strided
// copies with dtype conversion, moves between devices and accumulation. Nothing here
// records a graph; ops/ wraps these with autograd nodes.
#pragma once

#include "core/tensor.h"

namespace cg::raw {

// A tensor over `storage` with the given geometry (checked against the storage's size).
Tensor make_tensor(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype);
// A fresh contiguous tensor (uninitialised contents).
Tensor empty(const Shape& shape, DType dtype, Device device);
Tensor empty_like(const Tensor& t);  // same shape/dtype/device, contiguous

// ---- views: share storage ----
Tensor as_strided(const Tensor& t, Shape sizes, Shape strides, int64_t offset);
Tensor view(const Tensor& t, Shape shape);     // throws when strides don't allow it
Tensor reshape(const Tensor& t, Shape shape);  // view when possible, else copy
Tensor transpose(const Tensor& t, int64_t d0, int64_t d1);
Tensor permute(const Tensor& t, const Shape& dims);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor expand(const Tensor& t, const Shape& shape);  // size-1 dims -> stride 0
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t, int64_t dim);  // unchanged when that dim is not 1, as PyTorch
// One -1 in `shape` is inferred; throws when numel does not match.
Shape infer_shape(const Shape& shape, int64_t numel);

// ---- copies ----
// dst[i] = src[i] elementwise, any strides, any dtypes (converting by cast_element's
// rules, core/dtype_dispatch.h), any devices. src broadcasts to dst's shape; dst may
// not have elements that share memory (an expanded view); a src that overlaps dst is
// read in full first (memmove semantics, Note [raw::copy_ and overlap] in copy.cpp).
// copy_, fill_ and add_ count as in-place writes (Note [Version counter], core/storage.h).
// The work runs on the tensors' device; a copy between devices moves one contiguous
// buffer (Note [Device copy] in copy.cpp).
void copy_(const Tensor& dst, const Tensor& src);
Tensor contiguous(const Tensor& t);                // t itself when already contiguous
Tensor clone(const Tensor& t);                     // always a fresh contiguous copy
Tensor to_dtype(const Tensor& t, DType dtype);     // t itself when dtype matches
Tensor to_device(const Tensor& t, Device device);  // t itself when device matches
void fill_(const Tensor& t, double value);
// dst += src elementwise on their (common) device, both floating; src broadcasts to
// dst's shape and may have another floating dtype (f32 += bf16); the sum is taken in
// f64 when either is f64, in f32 otherwise. Records no graph: autograd adds gradients
// with it (a fresh sum is clone(a) then add_, or add_ into a gradient no one else holds).
void add_(const Tensor& dst, const Tensor& src);

// ---- elements, slow path (printing, item, tests) ----
double load_element(const void* p, DType dtype);
void store_element(void* p, DType dtype, double value);

// ---- broadcasting ----
// The broadcast of two shapes (numpy rules) or a clear error naming `what`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what = "broadcast");

}  // namespace cg::raw
