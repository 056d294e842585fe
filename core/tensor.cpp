// Why this file exists: the Tensor handle's metadata queries and value readers, and the
// shape helpers every layer uses. Printing lives in tensor_print.cpp; views and copies
// in views.cpp and copy.cpp.
#include "core/tensor.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/checked_math.h"
#include "core/views.h"

namespace cg {

namespace {

const TensorImpl& checked(const Tensor& t, const char* what) {
  CG_CHECK(t.defined(), what,
           " on an undefined tensor (a default-constructed Tensor, or a "
           "gradient that no backward has reached yet)");
  return *t.impl();
}

}  // namespace

// ---- shape helpers -------------------------------------------------------------------

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    const std::optional<int64_t> next = checked_mul(n, s);
    CG_CHECK(next.has_value(), "shape ", shape_str(shape),
             " has more elements than a 64-bit count can hold; check the sizes");
    n = *next;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    if (i == 0) break;  // the outermost size steps nothing
    // A size-0 dim keeps the strides of a size-1 dim (PyTorch's rule), so an empty shape
    // such as {0, 2^62, 4} still has strides that must fit int64.
    const std::optional<int64_t> next = checked_mul(s, std::max<int64_t>(shape[i], 1));
    CG_CHECK(next.has_value(), "shape ", shape_str(shape),
             " is too large: its contiguous strides overflow 64 bits; check the sizes");
    s = *next;
  }
  return strides;
}

int64_t normalize_dim(int64_t d, int64_t ndim, const char* what) {
  CG_CHECK(ndim > 0, what, ": dim ", d,
           " out of range for a 0-d tensor (it has no dims; "
           "unsqueeze or reshape it first)");
  CG_CHECK(d >= -ndim && d < ndim, what, ": dim ", d, " out of range for a ", ndim,
           "-d tensor (expected ", -ndim, "..", ndim - 1, ")");
  return d < 0 ? d + ndim : d;
}

// ---- metadata ------------------------------------------------------------------------

int64_t Tensor::size(int64_t d) const {
  const TensorImpl& impl = checked(*this, "size()");
  return impl.sizes[normalize_dim(d, dim(), "size")];
}

int64_t Tensor::stride(int64_t d) const {
  const TensorImpl& impl = checked(*this, "stride()");
  return impl.strides[normalize_dim(d, dim(), "stride")];
}

int64_t Tensor::numel() const { return shape_numel(checked(*this, "numel()").sizes); }

bool Tensor::is_contiguous() const {
  const TensorImpl& impl = checked(*this, "is_contiguous()");
  if (shape_numel(impl.sizes) == 0) return true;  // no elements: any strides will do
  int64_t expected = 1;
  for (size_t i = impl.sizes.size(); i-- > 0;) {
    const int64_t size = impl.sizes[i];
    if (size == 1) continue;  // a size-1 dim is never stepped over
    if (impl.strides[i] != expected) return false;
    expected *= size;
  }
  return true;
}

size_t Tensor::nbytes() const {
  // An expanded tensor may count more elements than its storage holds bytes.
  const std::optional<size_t> n = checked_mul(static_cast<size_t>(numel()), element_size(dtype()));
  CG_CHECK(n.has_value(), "nbytes(): shape ", shape_str(shape()), " of ", dtype_name(dtype()),
           " spans more bytes than 64 bits can count");
  return *n;
}

void* Tensor::data_ptr() const {
  const TensorImpl& impl = checked(*this, "data_ptr()");
  auto* base = static_cast<char*>(impl.storage->data());
  if (base == nullptr) return nullptr;
  return base + impl.offset * static_cast<int64_t>(element_size(impl.dtype));
}

// ---- values --------------------------------------------------------------------------

double Tensor::item() const {
  checked(*this, "item()");
  CG_CHECK(numel() == 1, "item(): the tensor has ", numel(), " elements (shape ",
           shape_str(shape()),
           ") but item() needs exactly one; index or reduce it first, "
           "or use to_vector()");
  const Tensor host = raw::to_device(*this, kCPU);
  return raw::load_element(host.data_ptr(), host.dtype());
}

std::vector<double> Tensor::to_vector() const {
  checked(*this, "to_vector()");
  std::vector<double> values(static_cast<size_t>(numel()));
  if (values.empty()) return values;
  // Convert to contiguous f64 on the host, then one memcpy.
  const Tensor host = raw::contiguous(raw::to_dtype(raw::to_device(*this, kCPU), DType::f64));
  std::memcpy(values.data(), host.data_ptr(), values.size() * sizeof(double));
  return values;
}

}  // namespace cg
