// Why this file exists: the ways to make a tensor from nothing -- constants, ranges,
// host data and seeded random numbers. Every factory fills its tensor on the requested
// device (from_vector/from_ints upload host data, which is their job). Randomness comes
// from cg::Generator, a counter-based generator, so that a seed reproduces a run
// exactly, on any machine and any device.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace cg {

// A seed and an offset (Note [Counter-based random numbers], core/philox.h): the n
// numbers of one draw are Philox4x32-10 blocks of counters offset .. offset + n - 1
// under the seed, and the draw advances the offset by n. rand/randn on any device and
// the scalar draws below share that one counter sequence; the numbers for a seed are
// fixed by this code, not by the C++ library.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed);
  void seed(uint64_t seed);  // restarts: offset 0
  uint64_t initial_seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  // Reserves n counters for one draw; returns the first.
  uint64_t advance(uint64_t n);
  // Host scalar draws, one counter each: the first 64 bits of its block, a uniform in
  // [0, 1) with 53 bits, a standard normal (philox::normal_value).
  uint64_t next_u64();
  double uniform();
  double normal();

 private:
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);  // reseeds default_generator()

Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// [start, end) by step, 1-D. dtype defaults to f32; use i64 for indices.
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
Tensor arange(int64_t end, TensorOptions options = {.dtype = DType::i64});
// Uniform in [low, high) and normal(mean, std); nullptr generator = default_generator().
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr,
            double low = 0.0, double high = 1.0);
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr,
             double mean = 0.0, double std = 1.0);
// Copies host values (row-major) into a new tensor of `shape` (numel must match).
Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                   TensorOptions options = {});
// Integer data (labels, indices): exact for every int64 value.
Tensor from_ints(const std::vector<int64_t>& values, const Shape& shape,
                 TensorOptions options = {.dtype = DType::i64});
Tensor scalar_tensor(double value, TensorOptions options = {});

}  // namespace cg
