// Why this file exists: the loops every row kernel (head loss rows, softmax, norms) spends
// its time in -- a max, sums of exponentials, dot products over a contiguous row -- written
// so that the compiler turns them into packed vector code (AVX2/AVX-512 with
// CHUNKGRAD_NATIVE) without -ffast-math: the exponential is a branch-free polynomial, and
// sums run in kRowLanes independent float lanes (no reassociation needed), each block of
// kRowBlock elements then added to a double.
//
// Note [Row sums]: a float lane sums at most kRowBlock / kRowLanes = 16 terms before its
// block total goes into a double, so a sum over V = 248320 terms loses no more than a
// 16-term float sum per block (relative error ~1e-6 of the block, and blocks add in
// double): what "sums accumulate in double" promised, within float rounding of each
// block. For T = double everything runs in double.
// Internal to ops/: not a public header.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace cg::cpu {

inline constexpr int64_t kRowBlock = 256;
inline constexpr int kRowLanes = 16;

// e^x for float to within 2 ulp (Cephes' polynomial on x - m ln 2, |r| <= ln 2 / 2),
// exactly 0 below -86.5 (e^-86.5 = 2.7e-38: nothing a sum of probabilities can see) and
// for -inf, NaN for NaN. Branch-free, so loops over it vectorise. double: std::exp.
inline float exp_fast(float x) {
  const float xc = std::min(std::max(x, -86.5f), 88.5f);
  const float m = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  float r = std::fma(m, -0.693359375f, xc);
  r = std::fma(m, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p, r * r, r + 1.0f);
  // 2^m as 2^(m-1) * 2, so that m = 128 (x up to 88.5) stays finite.
  const float scale = std::bit_cast<float>((static_cast<int32_t>(m) + 126) << 23);
  const float y = p * scale * 2.0f;
  return x < -86.5f ? 0.0f : (x > 88.5f ? x * std::numeric_limits<float>::infinity() : y);
}
inline double exp_fast(double x) { return std::exp(x); }

// max_j x[j], ignoring NaN (-inf for an empty or all-NaN row).
template <typename T>
T row_max(const T* x, int64_t n) {
  T lanes[kRowLanes];
  for (int l = 0; l < kRowLanes; ++l) lanes[l] = -std::numeric_limits<T>::infinity();
  int64_t j = 0;
  for (; j + kRowLanes <= n; j += kRowLanes) {
    for (int l = 0; l < kRowLanes; ++l) lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
  }
  T m = -std::numeric_limits<T>::infinity();
  for (int l = 0; l < kRowLanes; ++l) m = lanes[l] > m ? lanes[l] : m;
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// row_max over x[0], x[stride], ... (the same result as row_max on a contiguous copy:
// max ignores order).
template <typename T>
T row_max_strided(const T* x, int64_t n, int64_t stride) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) m = x[j * stride] > m ? x[j * stride] : m;
  return m;
}

// The first j with x[j] == m (m from row_max), 0 when there is none (all-NaN row).
template <typename T>
int64_t first_index_of(const T* x, int64_t n, T m) {
  for (int64_t j = 0; j < n; ++j) {
    if (x[j] == m) return j;
  }
  return 0;
}

// K sums over j in [0, n) of f(j) (a std::array<T, K>), Note [Row sums].
template <typename T, size_t K, typename F>
std::array<double, K> block_sums(int64_t n, F&& f) {
  std::array<double, K> total{};
  for (int64_t j0 = 0; j0 < n; j0 += kRowBlock) {
    const int64_t len = std::min(kRowBlock, n - j0);
    T lanes[K][kRowLanes] = {};
    int64_t j = 0;
    for (; j + kRowLanes <= len; j += kRowLanes) {
      for (int l = 0; l < kRowLanes; ++l) {
        const std::array<T, K> v = f(j0 + j + l);
        for (size_t k = 0; k < K; ++k) lanes[k][l] += v[k];
      }
    }
    for (size_t k = 0; k < K; ++k) {
      T s = 0;
      for (int l = 0; l < kRowLanes; ++l) s += lanes[k][l];
      total[k] += static_cast<double>(s);
    }
    for (; j < len; ++j) {
      const std::array<T, K> v = f(j0 + j);
      for (size_t k = 0; k < K; ++k) total[k] += static_cast<double>(v[k]);
    }
  }
  return total;
}

// One sum: block_sums with K = 1 and f returning a T.
template <typename T, typename F>
double block_sum(int64_t n, F&& f) {
  return block_sums<T, 1>(n, [&](int64_t j) { return std::array<T, 1>{f(j)}; })[0];
}

}  // namespace cg::cpu
