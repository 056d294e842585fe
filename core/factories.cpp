// Why this file exists: constants, ranges, host data and seeded random tensors. Every
// factory builds its values on the host and then moves them to the requested device,
// so a seed gives the same numbers on CPU and GPU.
#include "core/factories.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "core/dtype_dispatch.h"
#include "core/views.h"

namespace cg {

// ---- Generator -----------------------------------------------------------------------

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Generator::Generator(uint64_t seed) { this->seed(seed); }

void Generator::seed(uint64_t seed) {
  uint64_t state = seed;
  for (uint64_t& word : s_) word = splitmix64(state);  // never all zero
  has_spare_ = false;
  spare_ = 0.0;
}

// xoshiro256** (Blackman and Vigna, 2018).
uint64_t Generator::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Generator::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

// Box-Muller: two uniforms give two independent normals; the second is kept for the
// next call.
double Generator::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - uniform();  // (0, 1]: log() stays finite
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
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
  CG_CHECK(!options.requires_grad || is_floating(options.dtype), "requires_grad=true needs a "
           "floating dtype (f32, f64, f16 or bf16) but the dtype is ", dtype_name(options.dtype),
           ": only floating-point tensors can have gradients");
}

// Moves a host-built tensor to options.device and marks it as requiring grad.
Tensor finish(Tensor host, const TensorOptions& options) {
  check_requires_grad(options);
  Tensor out = raw::to_device(host, options.device);
  out.impl()->requires_grad = options.requires_grad;
  return out;
}

Tensor host_full(const Shape& shape, double value, DType dtype) {
  Tensor t = raw::empty(shape, dtype, kCPU);
  raw::fill_(t, value);
  return t;
}

void check_floating(DType dtype, const char* what) {
  CG_CHECK(is_floating(dtype), what, ": dtype ", dtype_name(dtype), " is not a floating "
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

// Mantissa bits of a dtype (with the implicit one): a uniform draw uses only this many
// random bits, so that [0, 1) stays below 1 after rounding to the dtype (as PyTorch).
// For other [low, high) ranges, rounding to a 16-bit dtype can still land on `high`
// itself, as in PyTorch.
int uniform_bits(DType dtype) {
  switch (dtype) {
    case DType::f64: return 53;
    case DType::f32: return 24;
    case DType::f16: return 11;
    case DType::bf16: return 8;
    default: return 53;
  }
}

}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) {
  check_requires_grad(options);
  Tensor t = raw::empty(shape, options.dtype, options.device);
  t.impl()->requires_grad = options.requires_grad;
  return t;
}

Tensor zeros(const Shape& shape, TensorOptions options) {
  Tensor t = raw::empty(shape, options.dtype, kCPU);
  // Zero is all-zero bits in every dtype (0.0f, bf16/f16 +0, false, 0).
  if (t.nbytes() > 0) std::memset(t.data_ptr(), 0, t.nbytes());
  return finish(t, options);
}

Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }

Tensor full(const Shape& shape, double value, TensorOptions options) {
  return finish(host_full(shape, value, options.dtype), options);
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
  CG_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
           "arange: start ", start, ", end ", end, " and step ", step, " must be finite");
  CG_CHECK(step != 0.0, "arange: step must not be 0 (start ", start, ", end ", end, ")");
  CG_CHECK(end == start || (end > start) == (step > 0), "arange: step ", step,
           " goes away from end (start ", start, ", end ", end, "); flip the sign of step");
  // Checked before the cast: a double count at or above 2^63 has no int64 value.
  const double steps = std::ceil((end - start) / step);
  CG_CHECK(steps < 0x1p63, "arange: start ", start, ", end ", end, " and step ", step,
           " give ", steps, " elements, more than a 64-bit count can hold");
  const auto count = static_cast<int64_t>(steps);
  Tensor t = raw::empty({count}, options.dtype, kCPU);
  int64_t i = 0;
  fill_drawn(t, [&] { return start + static_cast<double>(i++) * step; });
  return finish(t, options);
}

Tensor arange(int64_t end, TensorOptions options) {
  CG_CHECK(end >= 0, "arange: end ", end, " is negative; arange(end) counts 0, 1, ..., end-1");
  return arange(0.0, static_cast<double>(end), 1.0, options);
}

Tensor rand(const Shape& shape, TensorOptions options, Generator* gen, double low, double high) {
  check_floating(options.dtype, "rand");
  CG_CHECK(low < high, "rand: low (", low, ") must be below high (", high, ")");
  Generator& g = gen != nullptr ? *gen : default_generator();
  const int bits = uniform_bits(options.dtype);
  const double unit = std::ldexp(1.0, -bits);
  Tensor t = raw::empty(shape, options.dtype, kCPU);
  fill_drawn(t, [&] {
    const double u = static_cast<double>(g.next_u64() >> (64 - bits)) * unit;
    return low + (high - low) * u;
  });
  return finish(t, options);
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* gen, double mean,
             double std) {
  check_floating(options.dtype, "randn");
  CG_CHECK(std >= 0.0, "randn: std must be >= 0, got ", std);
  Generator& g = gen != nullptr ? *gen : default_generator();
  Tensor t = raw::empty(shape, options.dtype, kCPU);
  fill_drawn(t, [&] { return mean + std * g.normal(); });
  return finish(t, options);
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                   TensorOptions options) {
  Tensor t = raw::empty(shape, options.dtype, kCPU);  // checks the shape
  CG_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: ", values.size(),
           " values given for shape ", shape_str(shape), ", which has ", t.numel(),
           " elements");
  size_t i = 0;
  fill_drawn(t, [&] { return values[i++]; });
  return finish(t, options);
}

Tensor from_ints(const std::vector<int64_t>& values, const Shape& shape,
                 TensorOptions options) {
  Tensor t = raw::empty(shape, options.dtype, kCPU);
  CG_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_ints: ", values.size(),
           " values given for shape ", shape_str(shape), ", which has ", t.numel(),
           " elements");
  size_t i = 0;
  fill_drawn(t, [&] { return values[i++]; });  // int64 -> T directly: exact for i64
  return finish(t, options);
}

Tensor scalar_tensor(double value, TensorOptions options) {
  return full({}, value, options);
}

}  // namespace cg
