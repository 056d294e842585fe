// Why this file exists: what the row kernels of cuda/norm_kernels.cu (rms_norm) and
// cuda/rotary_kernels.cu share to run near memory bandwidth -- a group of lanes per row
// (Note [Row groups]), 16-byte packs where a geometry allows them, and a grid no larger
// than what the GPU holds at once. Included by .cu files only.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"

namespace cg::cuda {

// Note [Row groups]
// ~~~~~~~~~~~~~~~~~
// A row kernel gives each row to a group of lanes: kLanes (4..32, a power of two) lanes of
// a warp for short rows, so one warp takes 32 / kLanes rows at once and a row of 128 bf16
// is one 16-byte pack per lane of 16; or, kLanes == 0, the whole block for long rows (one
// row per block). Groups walk the rows grid-stride from a grid sized to one wave of
// resident blocks (row_grid), so a long tensor costs no block launches per row. The
// loop's bound is tested on the block's first row, the same for every lane of a warp,
// so the shuffles of a group sum run with every lane present; a lane past the last row
// is "not live": it loads nothing and stores nothing but still joins the sum.
//
// The fast path reads and writes whole 16-byte packs (kPack<T> elements) and keeps a
// row's packs in registers between the sum and the write (kPacks per lane). It needs
// unit element strides, a row length that is a multiple of the pack, every row start
// 16-byte aligned (packs_fit) and aligned outputs; any other layout takes the general
// path, one element at a time through the strides.

template <typename T>
constexpr int kPack = static_cast<int>(16 / sizeof(T));

// Whether operand `operand` of `rows`, from base p, starts every row on a 16-byte boundary
// when rows are `pack` elements apart in each stride.
inline bool packs_fit(const void* p, const Strided& rows, int operand, int pack) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  for (int d = 0; d < rows.ndim; ++d) {
    if (rows.sizes[d] > 1 && rows.strides[operand][d] % pack != 0) return false;
  }
  return true;
}
// A 16-byte pack kept raw in registers (half the registers of its fp32 values for 16-bit
// types), and its elements in the compute type. p must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ uint4 load_raw(const T* p) {
  return *reinterpret_cast<const uint4*>(p);
}
template <typename T>
__device__ __forceinline__ compute_t<T> raw_at(const uint4& u, int e) {
  return ld(reinterpret_cast<const T*>(&u) + e);
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Blocks of `kernel` at `threads` threads the current device holds at once, all SMs
// together; asked of the runtime once per (device, kernel, threads), then remembered.
inline int64_t resident_blocks(const void* kernel, int threads) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int>, int64_t> known;
  int device = 0;
  CG_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_tuple(device, kernel, threads);
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int sms = 0, per_sm = 0;
  CG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  const int64_t blocks = std::max<int64_t>(1, static_cast<int64_t>(sms) * per_sm);
  known.emplace(key, blocks);
  return blocks;
}

// Blocks for `rows` rows at `rows_per_block`, at most one wave of what the device holds
// of `kernel` at `threads` threads (the kernels grid-stride over the rest).
template <typename K>
unsigned row_grid(K kernel, int threads, int64_t rows, int64_t rows_per_block) {
  const int64_t wanted = (rows + rows_per_block - 1) / rows_per_block;
  const int64_t wave = resident_blocks(reinterpret_cast<const void*>(kernel), threads);
  return static_cast<unsigned>(std::clamp<int64_t>(wanted, 1, wave));
}

// Where a thread sits in Note [Row groups]: lane `lane` of `lanes`, in group `group` of
// the block's `per_block`. A block's first row is blockIdx.x * per_block; it steps
// gridDim.x * per_block.
template <int kLanes>
struct RowLanes {
  int lane, lanes;
  int64_t group, per_block;
  __device__ __forceinline__ RowLanes() {
    if constexpr (kLanes == 0) {
      lane = static_cast<int>(threadIdx.x);
      lanes = static_cast<int>(blockDim.x);
      group = 0;
      per_block = 1;
    } else {
      lane = static_cast<int>(threadIdx.x) % kLanes;
      lanes = kLanes;
      group = threadIdx.x / kLanes;
      per_block = blockDim.x / kLanes;
    }
  }
};

// The grid-stride walk over row groups (Note [Row groups]): body(r, live, lane, lanes)
// once per group this thread belongs to, r the group's row and live = r < rows. Every
// thread of a block makes the same calls, live or not, as group_sum's barriers need.
template <int kLanes, typename Body>
__device__ __forceinline__ void for_each_row(int64_t rows, Body&& body) {
  const RowLanes<kLanes> at;
  for (int64_t base = blockIdx.x * at.per_block; base < rows; base += gridDim.x * at.per_block) {
    const int64_t r = base + at.group;
    body(r, r < rows, at.lane, at.lanes);
  }
}

// The sum of v over a row's group (Note [Row groups]), to every lane of it. kLanes == 0:
// the block (scratch: 32 doubles of shared memory); otherwise kLanes lanes of a warp.
template <int kLanes>
__device__ __forceinline__ double group_sum(double v, double* scratch) {
  if constexpr (kLanes == 0) {
    return block_sum(v, scratch);
  } else {
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  }
}

}  // namespace cg::cuda
