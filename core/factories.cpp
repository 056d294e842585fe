// Why this file exists: constants, ranges, host data and seeded random tensors. Each
// factory makes its tensor on the requested device and fills it there through that
// device's backend (Note [Device primitives], core/backend.h); only from_vector and
// from_ints build on the host and upload. Random numbers are counter-based (Note
// [Counter-based random numbers], core/philox.h), so a seed gives the same numbers on
// CPU and GPU.
#include "core/factories.h"

#include <algorithm>
#include <cmath>

#include "core/backend.h"
#include "core/dtype_dispatch.h"
#include "core/philox.h"
#include "core/views.h"

namespace cg {

// ---- Generator -----------------------------------------------------------------------

Generator::Generator(uint64_t seed) { this->seed(seed); }

void Generator::seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::advance(uint64_t n) {
  const uint64_t first = offset_;
  offset_ += n;
  return first;
}

uint64_t Generator::next_u64() { return philox::low_u64(philox::random_block(seed_, advance(1))); }

double Generator::uniform() { return philox::uniform_value(next_u64(), 53, 0.0, 1.0); }

double Generator::normal() {
  return philox::normal_value(philox::random_block(seed_, advance(1)), 0.0, 1.0);
}

// Static initialisation is thread-safe; concurrent draws are not (seed per thread with
// your own Generator when that matters).
Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().seed(seed); }

// ---- factories -----------------------------------------------------------------------

namespace {

void check_requires_grad(const TensorOptions& options) {
  CG_CHECK(!options.requires_grad || is_floating(options.dtype),
           "requires_grad=true needs a "
           "floating dtype (f32, f64, f16 or bf16) but the dtype is ",
           dtype_name(options.dtype), ": only floating-point tensors can have gradients");
}

// Marks a tensor made for `options` as requiring grad.
Tensor finish(Tensor t, const TensorOptions& options) {
  check_requires_grad(options);
  t.impl()->requires_grad = options.requires_grad;
  return t;
}

// A fresh contiguous tensor for `options`, filled by its device with value + i * step.
Tensor filled(const Shape& shape, const TensorOptions& options, double value, double step) {
  check_requires_grad(options);
  Tensor t = raw::empty(shape, options.dtype, options.device);
  if (t.numel() > 0) {
    backend_for(t.device())
        .fill(t.device(), t.data_ptr(), t.dtype(), t.shape(), t.strides(), value, step);
  }
  return finish(t, options);
}

void check_floating(DType dtype, const char* what) {
  CG_CHECK(is_floating(dtype), what, ": dtype ", dtype_name(dtype),
           " is not a floating "
           "dtype; ask for f32, f64, f16 or bf16 (and convert afterwards if needed)");
}

// Fills a contiguous host tensor element by element from draw().
template <typename Draw>
void fill_drawn(const Tensor& t, Draw&& draw) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* p = static_cast<T*>(t.data_ptr());
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = cast_element<T>(draw());
  });
}

// Uploads a host-built tensor to options.device and marks it as requiring grad.
Tensor upload(const Tensor& host, const TensorOptions& options) {
  check_requires_grad(options);
  return finish(raw::to_device(host, options.device), options);
}

}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) {
  check_requires_grad(options);
  Tensor t = raw::empty(shape, options.dtype, options.device);
  t.impl()->requires_grad = options.requires_grad;
  return t;
}

// Zero is all-zero bits in every dtype (0.0f, bf16/f16 +0, false, 0): the backend's
// constant fill of 0 is a memset where it can be.
Tensor zeros(const Shape& shape, TensorOptions options) { return filled(shape, options, 0.0, 0.0); }

Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }

Tensor full(const Shape& shape, double value, TensorOptions options) {
  return filled(shape, options, value, 0.0);
}

Tensor zeros_like(const Tensor& t) {
  CG_CHECK(t.defined(), "zeros_like: the tensor is undefined (default-constructed)");
  return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}

Tensor ones_like(const Tensor& t) {
  CG_CHECK(t.defined(), "ones_like: the tensor is undefined (default-constructed)");
  return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}

Tensor arange(double start, double end, double step, TensorOptions options) {
  CG_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: start ",
           start, ", end ", end, " and step ", step, " must be finite");
  CG_CHECK(step != 0.0, "arange: step must not be 0 (start ", start, ", end ", end, ")");
  CG_CHECK(end == start || (end > start) == (step > 0), "arange: step ", step,
           " goes away from end (start ", start, ", end ", end, "); flip the sign of step");
  // Checked before the cast: a double count at or above 2^63 has no int64 value.
  const double steps = std::ceil((end - start) / step);
  CG_CHECK(steps < 0x1p63, "arange: start ", start, ", end ", end, " and step ", step, " give ",
           steps, " elements, more than a 64-bit count can hold");
  return filled({static_cast<int64_t>(steps)}, options, start, step);
}

Tensor arange(int64_t end, TensorOptions options) {
  CG_CHECK(end >= 0, "arange: end ", end, " is negative; arange(end) counts 0, 1, ..., end-1");
  return arange(0.0, static_cast<double>(end), 1.0, options);
}

Tensor rand(const Shape& shape, TensorOptions options, Generator* gen, double low, double high) {
  check_floating(options.dtype, "rand");
  CG_CHECK(low < high, "rand: low (", low, ") must be below high (", high, ")");
  check_requires_grad(options);
  Generator& g = gen != nullptr ? *gen : default_generator();
  Tensor t = raw::empty(shape, options.dtype, options.device);
  const uint64_t offset = g.advance(static_cast<uint64_t>(t.numel()));
  if (t.numel() > 0) {
    backend_for(t.device())
        .random_uniform(t.device(), t.data_ptr(), t.dtype(), t.shape(), t.strides(),
                        g.initial_seed(), offset, low, high);
  }
  return finish(t, options);
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* gen, double mean, double std) {
  check_floating(options.dtype, "randn");
  CG_CHECK(std >= 0.0, "randn: std must be >= 0, got ", std);
  check_requires_grad(options);
  Generator& g = gen != nullptr ? *gen : default_generator();
  Tensor t = raw::empty(shape, options.dtype, options.device);
  const uint64_t offset = g.advance(static_cast<uint64_t>(t.numel()));
  if (t.numel() > 0) {
    backend_for(t.device())
        .random_normal(t.device(), t.data_ptr(), t.dtype(), t.shape(), t.strides(),
                       g.initial_seed(), offset, mean, std);
  }
  return finish(t, options);
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  Tensor t = raw::empty(shape, options.dtype, kCPU);  // checks the shape
  CG_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: ", values.size(),
           " values given for shape ", shape_str(shape), ", which has ", t.numel(), " elements");
  size_t i = 0;
  fill_drawn(t, [&] { return values[i++]; });
  return upload(t, options);
}

Tensor from_ints(const std::vector<int64_t>& values, const Shape& shape, TensorOptions options) {
  Tensor t = raw::empty(shape, options.dtype, kCPU);
  CG_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_ints: ", values.size(),
           " values given for shape ", shape_str(shape), ", which has ", t.numel(), " elements");
  size_t i = 0;
  fill_drawn(t, [&] { return values[i++]; });  // int64 -> T directly: exact for i64
  Tensor out = upload(t, options);
  if (options.dtype == DType::i64 && !values.empty()) {  // Note [Host-known values]
    StorageImpl::KnownValues k{values[0], values[0], values[0]};
    for (int64_t v : values) {
      k.max = std::max(k.max, v);
      if (v < k.min) {
        k.next_min = k.min;
        k.min = v;
      } else if (v > k.min && (k.next_min == k.min || v < k.next_min)) {
        k.next_min = v;
      }
    }
    out.storage()->set_known_values(k);
  }
  return out;
}

Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

}  // namespace cg
