// Why this file exists: the ways to make a tensor from nothing -- constants, ranges,
// host data and seeded random numbers. Randomness comes from cg::Generator so that a
// seed reproduces a run exactly, on any machine.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace cg {

// Seeded random source: splitmix64-seeded xoshiro256**; normal() by Box-Muller.
// The stream of numbers for a seed is fixed by this code, not by the C++ library.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed);
  void seed(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1)
  double normal();   // mean 0, std 1

 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0.0;
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
