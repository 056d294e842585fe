// Why this file exists: the one strided copy loop every op falls back on (contiguous(),
// to(dtype), to(device), fill_, clone), with its fast paths, plus single-element access.
//
// Note [Host copy]: the loop nest is simplified before it runs: size-1 dims are dropped
// and neighbouring dims that are contiguous with each other in BOTH tensors are merged,
// so a contiguous copy (or a copy of a broadcast row) becomes one flat loop. Contiguous
// same-dtype copies are a memcpy; contiguous conversions (e.g. f32 <-> bf16) are one
// tight loop the compiler can vectorise.
// Note [Device copy]: core/ has no GPU kernels. A copy that touches a GPU is a plain
// byte transfer (backend.copy) when both sides are contiguous and share a dtype;
// anything else -- strided, broadcast or converting -- is staged through host memory.
// That is correct but slow; CUDA kernels for strided copies and casts replace it later.
#include <algorithm>
#include <cstring>

#include "core/backend.h"
#include "core/dtype_dispatch.h"
#include "core/overlap.h"
#include "core/views.h"

namespace cg::raw {

namespace {

// A copy's loops after Note [Host copy]: outermost dim first, never empty, strides in
// elements.
struct LoopNest {
  Shape sizes;
  Shape dst_strides;
  Shape src_strides;
};

LoopNest simplify(const Shape& sizes, const Shape& dst_strides, const Shape& src_strides) {
  LoopNest nest;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 1) continue;
    // Stepping the outer dim once == stepping this dim sizes[i] times, in both tensors.
    if (!nest.sizes.empty() && nest.dst_strides.back() == sizes[i] * dst_strides[i] &&
        nest.src_strides.back() == sizes[i] * src_strides[i]) {
      nest.sizes.back() *= sizes[i];
      nest.dst_strides.back() = dst_strides[i];
      nest.src_strides.back() = src_strides[i];
      continue;
    }
    nest.sizes.push_back(sizes[i]);
    nest.dst_strides.push_back(dst_strides[i]);
    nest.src_strides.push_back(src_strides[i]);
  }
  if (nest.sizes.empty()) nest = LoopNest{{1}, {1}, {1}};
  return nest;
}

// dst[i] = cast(src[i]) over n contiguous elements.
template <typename D, typename S>
void convert_contiguous(D* dst, const S* src, int64_t n) {
  if constexpr (std::is_same_v<D, S>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(D));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = cast_element<D>(src[i]);
  }
}

// One row: n elements, dst stride ds, src stride ss.
template <typename D, typename S>
void copy_row(D* d, const S* s, int64_t n, int64_t ds, int64_t ss) {
  if (ds == 1 && ss == 1) {
    convert_contiguous(d, s, n);
  } else if (ss == 0) {
    const D v = cast_element<D>(s[0]);
    for (int64_t i = 0; i < n; ++i) d[i * ds] = v;
  } else {
    for (int64_t i = 0; i < n; ++i) d[i * ds] = cast_element<D>(s[i * ss]);
  }
}

// A transposed 2-D block: d[r * d_row + c] = s[r + c * s_col]. Walking it in square tiles
// keeps both sides' cache lines in use (a plain row loop reads one element per line).
template <typename D, typename S>
void copy_transposed(D* d, const S* s, int64_t rows, int64_t cols, int64_t d_row,
                     int64_t s_col) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) d[r * d_row + c] = cast_element<D>(s[r + c * s_col]);
      }
    }
  }
}

// The general loop: an odometer over the outer dims; per step, either one strided row or
// (when the source runs along the second-to-last dim and dst along the last, as in
// contiguous() of a transpose) a tiled 2-D block.
template <typename D, typename S>
void strided_copy(D* dst, const S* src, const LoopNest& nest) {
  const size_t nd = nest.sizes.size();
  const bool transposed = nd >= 2 && nest.dst_strides[nd - 1] == 1 &&
                          nest.src_strides[nd - 2] == 1 && nest.src_strides[nd - 1] > 1;
  const size_t outer = nd - (transposed ? 2 : 1);  // dims the odometer walks
  int64_t outer_count = 1;
  for (size_t k = 0; k < outer; ++k) outer_count *= nest.sizes[k];

  Shape index(outer, 0);
  int64_t dst_at = 0, src_at = 0;
  for (int64_t o = 0; o < outer_count; ++o) {
    if (transposed) {
      copy_transposed(dst + dst_at, src + src_at, nest.sizes[nd - 2], nest.sizes[nd - 1],
                      nest.dst_strides[nd - 2], nest.src_strides[nd - 1]);
    } else {
      copy_row(dst + dst_at, src + src_at, nest.sizes[nd - 1], nest.dst_strides[nd - 1],
               nest.src_strides[nd - 1]);
    }
    for (size_t k = outer; k-- > 0;) {  // advance the odometer
      dst_at += nest.dst_strides[k];
      src_at += nest.src_strides[k];
      if (++index[k] < nest.sizes[k]) break;
      dst_at -= nest.dst_strides[k] * nest.sizes[k];
      src_at -= nest.src_strides[k] * nest.sizes[k];
      index[k] = 0;
    }
  }
}

// dst = src for two host tensors of one shape (no aliasing checks: copy_ does those).
void host_copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    return;
  }
  const bool flat = dst.is_contiguous() && src.is_contiguous();
  const LoopNest nest = flat ? LoopNest{} : simplify(dst.shape(), dst.strides(), src.strides());
  visit_dtype(dst.dtype(), [&](auto dst_tag) {
    using D = typename decltype(dst_tag)::type;
    visit_dtype(src.dtype(), [&](auto src_tag) {
      using S = typename decltype(src_tag)::type;
      auto* d = static_cast<D*>(dst.data_ptr());
      const auto* s = static_cast<const S*>(src.data_ptr());
      if (flat) {
        convert_contiguous(d, s, dst.numel());
      } else {
        strided_copy(d, s, nest);
      }
    });
  });
}

// Elements from the first to the furthest one t's geometry reaches (t.numel() > 0).
int64_t span_elements(const Tensor& t) {
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i) last += (t.shape()[i] - 1) * t.strides()[i];
  return last + 1;
}

// A host tensor with t's sizes and strides over a host copy of the memory t spans.
Tensor download_span(const Tensor& t) {
  const size_t bytes = static_cast<size_t>(span_elements(t)) * element_size(t.dtype());
  Storage host = make_storage(bytes, kCPU);
  backend_for(t.device()).copy(host->data(), kCPU, t.data_ptr(), t.device(), bytes);
  return make_tensor(std::move(host), t.shape(), t.strides(), 0, t.dtype());
}

// Writes back the span of device tensor `dst` from `host`, made by download_span(dst).
void upload_span(const Tensor& dst, const Tensor& host) {
  const size_t bytes = static_cast<size_t>(span_elements(dst)) * element_size(dst.dtype());
  backend_for(dst.device()).copy(dst.data_ptr(), dst.device(), host.data_ptr(), kCPU, bytes);
}

// Note [Device copy].
void device_copy(const Tensor& dst, const Tensor& src) {
  const Device gpu = dst.device().is_cpu() ? src.device() : dst.device();
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    backend_for(gpu).copy(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(),
                          dst.nbytes());
    return;
  }
  // Slow path: stage through host memory.
  const Tensor host_src = src.device().is_cpu() ? src : download_span(src);
  if (dst.device().is_cpu()) {
    host_copy(dst, host_src);
  } else if (dst.is_contiguous()) {
    const Tensor staging = empty(dst.shape(), dst.dtype(), kCPU);
    host_copy(staging, host_src);
    backend_for(dst.device()).copy(dst.data_ptr(), dst.device(), staging.data_ptr(), kCPU,
                                   dst.nbytes());
  } else {
    // Read-modify-write of the span, so the bytes between dst's elements keep their values.
    const Tensor host_dst = download_span(dst);
    host_copy(host_dst, host_src);
    upload_span(dst, host_dst);
  }
}

}  // namespace

void copy_(const Tensor& dst, const Tensor& src) {
  CG_CHECK(dst.defined() && src.defined(), "copy_: ", dst.defined() ? "source" : "destination",
           " tensor is undefined");
  Tensor source = src;
  if (src.shape() != dst.shape()) {
    try {
      source = expand(src, dst.shape());
    } catch (const Error&) {
      CG_FAIL("copy_: source of shape ", shape_str(src.shape()),
              " cannot be broadcast to the destination's shape ", shape_str(dst.shape()));
    }
  }
  if (dst.numel() == 0) return;
  check_no_internal_overlap("copy_", dst);
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
  if (dst.device().is_cpu() && source.device().is_cpu()) {
    host_copy(dst, source);
  } else {
    device_copy(dst, source);
  }
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

// For a GPU tensor this stages through host memory for now (Note [Device copy]).
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
  if (!t.device().is_cpu()) {
    const Tensor scalar = empty({}, t.dtype(), kCPU);
    store_element(scalar.data_ptr(), t.dtype(), value);
    copy_(t, scalar);  // broadcast, staged through the host
    return;
  }
  t.storage()->bump_version();  // Note [Version counter] in core/storage.h
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = cast_element<T>(value);
    auto* p = static_cast<T*>(t.data_ptr());
    if (t.is_contiguous()) {
      std::fill_n(p, t.numel(), v);
    } else {
      strided_copy(p, &v, simplify(t.shape(), t.strides(), Shape(t.dim(), 0)));
    }
  });
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
