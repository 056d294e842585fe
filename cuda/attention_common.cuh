// Why this file exists: what the attention kernels (cuda/attention_rows.cu and
// cuda/attention_flash*.cu) share on the device: element conversions and the mask rule
// of ops/attention_mask.h -- which keys a query row sees -- written once so both kernel
// families agree with the CPU reference (cpu/attention.cpp) to the key.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/attention_kernels.h"

namespace cg::cuda::attn {

__device__ inline float to_float(float x) { return x; }
__device__ inline double to_float(double x) { return x; }
__device__ inline float to_float(__half x) { return __half2float(x); }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// Value `hi ? high : low` of two packed 16-bit values (the low one first, as in memory),
// as float.
template <typename T>
__device__ inline float unpack(uint32_t packed, int hi) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "unpack takes packed bf16 or f16 elements");
  const uint16_t bits = static_cast<uint16_t>(hi ? packed >> 16 : packed & 0xffffu);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
  } else {
    return __half2float(__ushort_as_half(bits));
  }
}

template <typename T, typename C>
__device__ inline T from_compute(C x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(x));
  } else {
    return static_cast<T>(x);
  }
}

// The keys query row i of batch row b sees: at most two ranges [begin, end), ascending
// (ResolvedAttentionMask::key_ranges). dense gives [0, Sk), refined by dense_allows().
struct DevKeyRanges {
  int64_t begin[2];
  int64_t end[2];
  int count;
};

__device__ inline int64_t dflash_anchor(const AttnMaskArgs& m, int64_t b, int64_t block) {
  return m.visible_context[b * m.context_batch_stride + block];
}

__device__ inline DevKeyRanges key_ranges(const AttnMaskArgs& m, int64_t Sq, int64_t Sk, int64_t b,
                                          int64_t i) {
  DevKeyRanges r;
  r.count = 0;
  switch (m.kind) {
    case AttnMaskKind::none:
    case AttnMaskKind::dense:
      if (Sk > 0) {
        r.begin[0] = 0;
        r.end[0] = Sk;
        r.count = 1;
      }
      break;
    case AttnMaskKind::causal: {
      const int64_t e = min(Sk, i + (Sk - Sq) + 1);
      if (e > 0) {
        r.begin[0] = 0;
        r.end[0] = e;
        r.count = 1;
      }
      break;
    }
    case AttnMaskKind::dflash: {
      const int64_t block = i / m.block_size;
      const int64_t anchor = dflash_anchor(m, b, block);
      if (anchor < 0) break;
      const int64_t block_begin = m.context_len + block * m.block_size;
      if (m.sliding_window == 0) {  // full rule: [0, anchor) and the whole block
        if (anchor > 0) {
          r.begin[0] = 0;
          r.end[0] = anchor;
          r.count = 1;
        }
        r.begin[r.count] = block_begin;
        r.end[r.count] = block_begin + m.block_size;
        ++r.count;
        break;
      }
      // Sliding rule: slot k (position anchor + k) sees positions > anchor + k - W.
      const int64_t k = i - block * m.block_size, w1 = m.sliding_window - 1;
      const int64_t first_context = max(int64_t{0}, anchor + k - w1);
      if (first_context < anchor) {
        r.begin[0] = first_context;
        r.end[0] = anchor;
        r.count = 1;
      }
      r.begin[r.count] = block_begin + max(int64_t{0}, k - w1);
      r.end[r.count] = block_begin + k + 1;
      ++r.count;
      break;
    }
  }
  return r;
}

__device__ inline bool dense_allows(const AttnMaskArgs& m, int64_t b, int64_t h, int64_t i,
                                    int64_t j) {
  return m.allowed[b * m.allowed_strides[0] + h * m.allowed_strides[1] + i * m.allowed_strides[2] +
                   j * m.allowed_strides[3]];
}

}  // namespace cg::cuda::attn
