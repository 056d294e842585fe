// Why this file exists: the geometry behind core/overlap.h (Note [Memory overlap]): byte
// ranges first (cheap, decides almost every call), element lists only when ranges meet.
#include "core/overlap.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/views.h"

namespace cg {

namespace {

struct ByteRange {
  uintptr_t begin = 0;  // first byte
  uintptr_t end = 0;    // one past the last byte
};

// The bytes from t's first element to the end of its furthest one (t.numel() > 0;
// strides are never negative, raw::make_tensor checks that).
ByteRange byte_range(const Tensor& t) {
  const auto es = static_cast<uintptr_t>(element_size(t.dtype()));
  uintptr_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    last += static_cast<uintptr_t>(t.shape()[d] - 1) * static_cast<uintptr_t>(t.strides()[d]);
  }
  const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {begin, begin + (last + 1) * es};
}

// Every element's offset (in elements, from t's first element), in any order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  Shape index(static_cast<size_t>(t.dim()), 0);
  int64_t at = 0;
  for (int64_t& o : out) {
    o = at;
    for (int64_t d = t.dim(); d-- > 0;) {  // advance the odometer
      at += t.strides()[d];
      if (++index[d] < t.shape()[d]) break;
      at -= t.strides()[d] * t.shape()[d];
      index[d] = 0;
    }
  }
  return out;
}

// True when some element of a and some element of b share a byte: the elements as
// [start, start + size) intervals, sorted, swept once.
bool elements_intersect(const Tensor& a, const Tensor& b) {
  struct Interval {
    uintptr_t begin, end;
    bool from_a;
  };
  std::vector<Interval> all;
  all.reserve(static_cast<size_t>(a.numel() + b.numel()));
  for (const Tensor* t : {&a, &b}) {
    const auto base = reinterpret_cast<uintptr_t>(t->data_ptr());
    const auto es = static_cast<uintptr_t>(element_size(t->dtype()));
    for (int64_t o : element_offsets(*t)) {
      const uintptr_t begin = base + static_cast<uintptr_t>(o) * es;
      all.push_back({begin, begin + es, t == &a});
    }
  }
  std::sort(all.begin(), all.end(),
            [](const Interval& x, const Interval& y) { return x.begin < y.begin; });
  // Sorted by start: an interval meets an earlier one of the other tensor iff that
  // tensor's furthest end so far lies beyond its start.
  uintptr_t end_a = 0, end_b = 0;
  for (const Interval& iv : all) {
    if ((iv.from_a ? end_b : end_a) > iv.begin) return true;
    (iv.from_a ? end_a : end_b) = std::max(iv.from_a ? end_a : end_b, iv.end);
  }
  return false;
}

// Every element of dst at the place of the same-index element of src (broadcast).
bool same_elements(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() != src.dtype() || dst.data_ptr() != src.data_ptr()) return false;
  const Tensor s = src.shape() == dst.shape() ? src : raw::expand(src, dst.shape());
  for (int64_t d = 0; d < dst.dim(); ++d) {
    if (dst.shape()[d] != 1 && dst.strides()[d] != s.strides()[d]) return false;
  }
  return true;
}

}  // namespace

MemOverlap memory_overlap(const Tensor& dst, const Tensor& src) {
  if (dst.storage() != src.storage() || dst.numel() == 0 || src.numel() == 0) {
    return MemOverlap::none;
  }
  const ByteRange a = byte_range(dst), b = byte_range(src);
  if (a.end <= b.begin || b.end <= a.begin) return MemOverlap::none;
  if (same_elements(dst, src)) return MemOverlap::full;
  if (dst.numel() > kOverlapExactLimit || src.numel() > kOverlapExactLimit) {
    return MemOverlap::partial;
  }
  return elements_intersect(dst, src) ? MemOverlap::partial : MemOverlap::none;
}

bool has_internal_overlap(const Tensor& t) {
  if (t.numel() <= 1 || t.is_contiguous()) return false;
  // Dims that are stepped over, by stride. When each stride passes the end of every
  // smaller-stride dim, every element has its own offset (the usual case: any view made
  // by slicing, transposing or narrowing a tensor without overlap).
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.shape()[d] == 1) continue;
    if (t.strides()[d] == 0) return true;  // expanded
    dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(),
            [&](int64_t x, int64_t y) { return t.strides()[x] < t.strides()[y]; });
  int64_t reach = 0;  // furthest offset reached by the dims so far
  bool separated = true;
  for (int64_t d : dims) {
    if (t.strides()[d] <= reach) {
      separated = false;
      break;
    }
    reach += (t.shape()[d] - 1) * t.strides()[d];
  }
  if (separated) return false;
  // Folded strides (sizes [2, 3], strides [3, 2] has none; [2, 3], [2, 1] has): count.
  if (t.numel() > kOverlapExactLimit) return true;  // conservative, Note [Memory overlap]
  std::vector<int64_t> offsets = element_offsets(t);
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end();
}

void check_no_internal_overlap(const char* op, const Tensor& dst) {
  CG_CHECK(!has_internal_overlap(dst), op, ": the tensor written to (shape ",
           shape_str(dst.shape()), ", strides ", shape_str(dst.strides()),
           ") has several elements at one memory location",
           dst.numel() > kOverlapExactLimit ? " (or is too large to check element by element)" : "",
           ", e.g. an expanded view, so one location would be written many times; write into a "
           "tensor that owns its elements (cg::raw::clone makes one)");
}

void check_no_partial_overlap(const char* op, const Tensor& dst, const Tensor& src,
                              const char* arg) {
  if (memory_overlap(dst, src) != MemOverlap::partial) return;
  const bool checked = dst.numel() <= kOverlapExactLimit && src.numel() <= kOverlapExactLimit;
  CG_FAIL(op, ": ", arg, " (shape ", shape_str(src.shape()), ", strides ", shape_str(src.strides()),
          ", offset ", src.offset(), checked ? ") shares memory with" : ") may share memory with",
          " the tensor written to (shape ", shape_str(dst.shape()), ", strides ",
          shape_str(dst.strides()), ", offset ", dst.offset(), ") without being the same elements",
          checked ? "" : " (too large to check element by element)",
          ", so the op could read values it has already overwritten. Pass a copy of ", arg,
          " instead (cg::raw::clone makes one)");
}

}  // namespace cg
