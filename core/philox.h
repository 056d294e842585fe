// Why this file exists: the random numbers behind rand/randn, written once for the host
// and for CUDA kernels (this header compiles under nvcc: no Tensor, no std:: calls in
// the functions marked CG_HOST_DEVICE), so that a seed gives the same numbers on every
// device.
//
// Note [Counter-based random numbers]: element i of a random fill that starts at
// generator offset o gets the Philox4x32-10 block of counter o + i under the key `seed`
// (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the same
// generator as PyTorch's CUDA and JAX). An element's value depends on (seed, o + i)
// only, not on which thread or device computes it nor on how the work is split, and a
// Generator is just (seed, offset): a fill of n elements advances the offset by n.
// One block is 128 bits: uniform() uses its first 64, normal() all of them (two 64-bit
// uniforms for one Box-Muller draw; the sine half is not kept, so that every element
// stands alone).
// The arithmetic is pinned so that both devices round alike: u = k * 2^-bits is exact,
// every multiply-add is an explicit fma (so -march=native contraction changes nothing),
// and values are made in double and cast to the dtype by core's rules. Uniform values
// are bit-identical across devices; normal values go through log, cos and sqrt, which
// CUDA computes within 1-2 ulp of the host's libm, so f64 normals can differ in the
// last bit (f32 and 16-bit ones, rounded from those doubles, practically never do).
#pragma once

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define CG_HOST_DEVICE __host__ __device__
#else
#define CG_HOST_DEVICE
#endif

namespace cg::philox {

struct Block {
  uint32_t w[4];
};

// Philox4x32 with 10 rounds, as in Random123 (its known-answer vectors are in
// tests/factories_test.cpp).
CG_HOST_DEVICE inline Block philox4x32_10(Block counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  // Scalars, not an array: compilers then keep the state in registers at -O2.
  uint32_t c0 = counter.w[0], c1 = counter.w[1], c2 = counter.w[2], c3 = counter.w[3];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    c0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ key0;
    c1 = static_cast<uint32_t>(p1);
    c2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ key1;
    c3 = static_cast<uint32_t>(p0);
  }
  return Block{{c0, c1, c2, c3}};
}

// The block of counter `counter` under `seed`: the counter fills the first two words,
// the seed is the key.
CG_HOST_DEVICE inline Block random_block(uint64_t seed, uint64_t counter) {
  const Block c{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u}};
  return philox4x32_10(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

CG_HOST_DEVICE inline uint64_t low_u64(const Block& b) {
  return static_cast<uint64_t>(b.w[0]) | (static_cast<uint64_t>(b.w[1]) << 32);
}
CG_HOST_DEVICE inline uint64_t high_u64(const Block& b) {
  return static_cast<uint64_t>(b.w[2]) | (static_cast<uint64_t>(b.w[3]) << 32);
}

// low + (high - low) * u with u = (the top `bits` bits of x) * 2^-bits in [0, 1).
// `bits` is the dtype's mantissa width (uniform_bits in core/factories.cpp), so that
// [0, 1) stays below 1 after rounding to the dtype, as in PyTorch.
CG_HOST_DEVICE inline double uniform_value(uint64_t x, int bits, double low, double high) {
  // 2^-bits is exact, and so is scaling by it (no libm call, unlike ldexp).
  const double unit = 1.0 / static_cast<double>(uint64_t{1} << bits);
  const double u = static_cast<double>(x >> (64 - bits)) * unit;
  return fma(high - low, u, low);
}

// mean + std * z, z standard normal by Box-Muller from the block's two 64-bit halves.
CG_HOST_DEVICE inline double normal_value(const Block& b, double mean, double std) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double u1 = 1.0 - static_cast<double>(low_u64(b) >> 11) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(high_u64(b) >> 11) * 0x1.0p-53;       // [0, 1)
  const double z = sqrt(-2.0 * log(u1)) * cos(kTwoPi * u2);
  return fma(std, z, mean);
}

}  // namespace cg::philox
