// Why this file exists: the fused head loss's row pass at the drafter's loss (forward KL to
// the teacher at tau 1, plus a share of hard CE) over bf16 logits, reading each row from
// memory once instead of twice (Note [Rows held on chip]). The general row kernel
// (head_loss_kernels.cu) serves every other loss, dtype and shape, and is the reference
// this one is tested against (tests/cuda_head_rows_cluster_test.cpp).
#include "cuda/head_rows_cluster.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"
#include "ops/loss_row_math.h"

namespace cg::cuda {

namespace {

// Note [Rows held on chip]: the general row kernel reads a row twice (statistics, then the
// gradient) and, at V = 248320, a row of logits and the teacher's is 970 KB, so with a row
// per CTA the second read misses L2 and a 1536-row chunk moves 3.8 GB (ncu on the H200:
// 3.6 GB of DRAM traffic, 1.40 ms at 1.5 GHz, 56 instructions per logit). Here a cluster
// of `parts` CTAs splits each row, every CTA holding its slice of both operands in shared
// memory from the first pass to the second:
//   per row, in each CTA:  slots j < kSlots of 16-byte packs, thread x owning packs
//       slice_begin + j * kRowThreads + x of the logits and of the teacher
//   pass 1: statistics from shared memory (the loads were issued by the previous row's
//           pass 2, one cp.async group per slot, waited for slot by slot)
//   reduce: warp, CTA, then the cluster's CTAs through distributed shared memory, in warp
//           0 (one cluster barrier a row; partials in two buffers by row parity)
//   pass 2: the gradient from shared memory, stored over the logits; then the slot's
//           packs of the cluster's next row are requested into the slot just read
// so a chunk moves 2.3 GB: the logits and the teacher's read once, the gradient written
// once (ncu: 1.53 GB read). A thread only ever reads the shared memory its own cp.async
// wrote, so no barrier guards the slots; the per-logit work is the general kernel's fast
// loops (Note [Fast KL rows]) with 32-bit offsets and each thread's sums in fp32 for a slot
// of 8 logits, flushed into doubles.
// Shapes (CHUNKGRAD_HEAD_ROWS_CLUSTER), measured on the H200 at C = 1536, V = 248320
// (head_rows_bench, KL + CE + gradient; the general kernel 1.121 ms): one CTA of 512 an SM,
// clusters of 8: 1.142-1.158 ms; two of 256, clusters of 16: 1.213 ms (only 14 clusters
// fit, 224 of 264 CTA places); three of 256 (80 registers), clusters of 16: 1.010-1.015
// ms, the default. The pass is bound by latency, not by memory or a pipe: ncu counts 2.7
// warps waiting at barriers per issued instruction (the cluster barrier, behind the row's
// slowest CTA) and 1.6 on fixed-latency dependencies (with two CTAs an SM, the schedulers
// issued on 47% of cycles). Measured and dropped: every warp merging the cluster's
// partials itself (no broadcast, no second CTA barrier) with the slot sums as trees:
// 1.414 ms, 9% more instructions.
constexpr int kSlots = 8;
constexpr int kPack = 8;            // bf16 per 16 bytes
constexpr int kMostParts = 16;      // CTAs a row at most (clusters above 8 are non-portable)
constexpr int64_t kLeastV = 32768;  // shorter rows keep the general kernel
constexpr int64_t kMostV = 262144;  // 16 CTAs of 256 threads, or 8 of 512
constexpr int kDefaultShape = 768;  // cluster_kernel_choice
// The packs of each operand a CTA of kThreads holds, and its shared memory for both.
template <int kThreads>
constexpr int64_t kSlicePacks = int64_t{kSlots} * kThreads;
template <int kThreads>
constexpr size_t kSmemBytes = 2 * kSlicePacks<kThreads> * 16;
constexpr float kL = 1.4426950408889634f;  // log2 e
constexpr float kLowestF = -3.402823466e38f;

struct ClusterRowParams {
  int64_t ignore_index;
  double ce_weight, kl_weight, kl_scale, z_loss;
  bool want_ce, want_grad;
};

// A part of a row's statistics: each operand's max and the first index holding it
// (INT_MAX: none), and the sums relative to the max: sum e, sum e z (entropy), and the
// teacher's sum e_t, sum e_t (t - z).
struct RowStats {
  float zm, tm;
  int zarg, targ;
  double se, sez, sa, ka;
};

__device__ __forceinline__ void unpack_bf16(const uint4& raw, float (&v)[kPack]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = __uint_as_float(w[k] << 16);
    v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 pack_bf16(const float (&v)[kPack]) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    std::memcpy(&w[k], &h, 4);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ float max_of(const float (&v)[kPack]) {
  float a = fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3]));
  float b = fmaxf(fmaxf(v[4], v[5]), fmaxf(v[6], v[7]));
  return fmaxf(a, b);
}

__device__ __forceinline__ int first_at(const float (&v)[kPack], float x) {
  int at = kPack;
#pragma unroll
  for (int k = kPack - 1; k >= 0; --k) at = v[k] == x ? k : at;
  return at;
}

__device__ __forceinline__ void cp_async_16(void* smem, const void* src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit_group() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most `pending` of this thread's latest groups are in flight (an
// immediate operand: unrolled loops fold the switch).
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;\n" ::: "memory"); break;
  }
  static_assert(kSlots == 8, "one case per slot");
}

// s rescaled from max `from` to max `to` (>= from): 0 while nothing was summed (from -inf,
// where from - to would be NaN when to is -inf too).
__device__ __forceinline__ double rescaled(double s, float from, float to) {
  return from == -INFINITY ? 0.0 : s * static_cast<double>(fast_exp2((from - to) * kL));
}

// Merges the RowStats of the 32 lanes (lanes past `lanes` give nothing); every lane gets
// the result. The first index of a max: the smallest among the lanes holding it.
__device__ __forceinline__ RowStats warp_merge(RowStats s, int lanes) {
  const int lane = threadIdx.x & 31;
  if (lane >= lanes) s = RowStats{-INFINITY, -INFINITY, INT_MAX, INT_MAX, 0, 0, 0, 0};
  float zm = s.zm, tm = s.tm;
  for (int o = 16; o > 0; o >>= 1) {
    zm = fmaxf(zm, __shfl_xor_sync(0xffffffffu, zm, o));
    tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, o));
  }
  int zarg = s.zm == zm ? s.zarg : INT_MAX, targ = s.tm == tm ? s.targ : INT_MAX;
  double v[4] = {rescaled(s.se, s.zm, zm), rescaled(s.sez, s.zm, zm), rescaled(s.sa, s.tm, tm),
                 rescaled(s.ka, s.tm, tm)};
  for (int o = 16; o > 0; o >>= 1) {
    zarg = min(zarg, __shfl_xor_sync(0xffffffffu, zarg, o));
    targ = min(targ, __shfl_xor_sync(0xffffffffu, targ, o));
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
  }
  return RowStats{zm, tm, zarg, targ, v[0], v[1], v[2], v[3]};
}

// What pass 2 and the outputs need of a row, from warp 0 to the CTA.
struct RowResult {
  double lse_z, lse_t;
};

// One persistent cluster of `parts` CTAs per row at a time (rows cluster, cluster +
// clusters, ...). logits, teacher [C, V] bf16; V % 8 == 0.
template <int kRowThreads, int kBlocksPerSm, bool kEntropy>
__global__ void __launch_bounds__(kRowThreads, kBlocksPerSm)
    head_rows_cluster_kernel(__nv_bfloat16* logits, const __nv_bfloat16* teacher,
                             const int64_t* labels, int C, int V, ClusterRowParams p,
                             const float* grad_scale, float* out_loss, float* out_lse,
                             float* out_entropy, int64_t* out_argmax, int64_t* out_targmax) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace coop = ::cooperative_groups;
  extern __shared__ uint4 slots[];  // [2][kSlots][kRowThreads]: logits, then teacher
  __shared__ RowStats warp_parts[kRowThreads / 32];
  __shared__ RowStats cta_parts[2];  // by row parity, read by the cluster's other CTAs
  __shared__ RowResult result;
  uint4* zs = slots;
  uint4* ts = slots + kSlicePacks<kRowThreads>;
  coop::cluster_group cluster = coop::this_cluster();
  const int parts = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int clusters = static_cast<int>(gridDim.x) / parts;
  const int cluster_id = static_cast<int>(blockIdx.x) / parts;
  const int x = static_cast<int>(threadIdx.x), lane = x & 31, warp = x >> 5;
  const int packs = V / kPack;
  const int slice_begin = static_cast<int>(static_cast<int64_t>(packs) * rank / parts);
  const int slice_packs =
      static_cast<int>(static_cast<int64_t>(packs) * (rank + 1) / parts) - slice_begin;
  auto live = [&](int j) { return j * kRowThreads + x < slice_packs; };
  auto pack_of = [&](int j) { return slice_begin + j * kRowThreads + x; };
  // Requests slot j of row `row` (nothing past the rows), one group per slot either way.
  auto request = [&](int row, int j) {
    if (row < C && live(j)) {
      const int64_t at = static_cast<int64_t>(row) * V + static_cast<int64_t>(pack_of(j)) * kPack;
      cp_async_16(zs + j * kRowThreads + x, logits + at);
      cp_async_16(ts + j * kRowThreads + x, teacher + at);
    }
    cp_async_commit_group();
  };
#pragma unroll
  for (int j = 0; j < kSlots; ++j) request(cluster_id, j);

  int parity = 0;
  for (int row = cluster_id; row < C; row += clusters, parity ^= 1) {
    __nv_bfloat16* z = logits + static_cast<int64_t>(row) * V;
    const bool ignored = labels != nullptr && labels[row] == p.ignore_index;

    // ---- pass 1: this thread's statistics, slot by slot as they land ----
    float m = -INFINITY, tm = -INFINITY, bz = 0.0f, bt = 0.0f;  // bz = -m L (0 while m is -inf)
    int arg = INT_MAX, targ = INT_MAX;
    double se = 0, sez = 0, sa = 0, ka = 0;
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      cp_async_wait_pending(kSlots - 1 - j);
      if (!live(j)) continue;
      float zv[kPack], tv[kPack];
      unpack_bf16(zs[j * kRowThreads + x], zv);
      unpack_bf16(ts[j * kRowThreads + x], tv);
      const float gz = max_of(zv), gt = max_of(tv);
      if (gz > m) {  // rare after a row's first slots
        arg = pack_of(j) * kPack + first_at(zv, gz);
        const double f = fast_exp2((m - gz) * kL);
        se *= f;
        sez *= f;
        m = gz;
        bz = -m * kL;
      }
      if (gt > tm) {
        targ = pack_of(j) * kPack + first_at(tv, gt);
        const double f = fast_exp2((tm - gt) * kL);
        sa *= f;
        ka *= f;
        tm = gt;
        bt = -tm * kL;
      }
      float pe = 0, pez = 0, pa = 0, pka = 0;
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        const float e = fast_exp2(fmaf(zv[k], kL, bz));
        pe += e;
        if (kEntropy) pez = fmaf(e, fmaxf(zv[k], kLowestF), pez);  // e = 0 at z = -inf
        const float et = fast_exp2(fmaf(tv[k], kL, bt));
        pa += et;
        pka = fmaf(et, fmaxf(tv[k] - zv[k], kLowestF), pka);  // et = 0 at t = -inf
      }
      se += pe;
      if (kEntropy) sez += pez;
      sa += pa;
      ka += pka;
    }
    if (!p.want_grad) {
#pragma unroll
      for (int j = 0; j < kSlots; ++j) request(row + clusters, j);
    }

    // ---- the row's statistics: warps, the CTA, then the cluster ----
    RowStats s = warp_merge(RowStats{m, tm, arg, targ, se, sez, sa, ka}, 32);
    if (lane == 0) warp_parts[warp] = s;
    __syncthreads();
    float zy = 0.0f;
    int64_t y = -1;
    if (warp == 0) {
      s = warp_merge(lane < kRowThreads / 32 ? warp_parts[lane] : s, kRowThreads / 32);
      if (lane == 0) {
        cta_parts[parity] = s;
        if (p.want_ce && !ignored) {
          y = labels[row];
          zy = __bfloat162float(z[y]);  // no CTA writes this row before the cluster barrier
        }
      }
    }
    cluster.sync();
    if (warp == 0) {
      RowStats c = s;
      if (lane < parts) c = *cluster.map_shared_rank(&cta_parts[parity], lane);
      c = warp_merge(c, parts);
      const double lse_z = static_cast<double>(c.zm) + log(c.se);
      const double lse_t = static_cast<double>(c.tm) + log(c.sa);
      if (lane == 0) {
        result = RowResult{lse_z, lse_t};
        if (rank == 0) {
          const double kl = c.ka / c.sa - (lse_t - lse_z);
          const double ce = p.want_ce && !ignored
                                ? lse_z - static_cast<double>(zy) + p.z_loss * lse_z * lse_z
                                : 0.0;
          const double loss = ignored ? 0.0 : p.ce_weight * ce + p.kl_weight * p.kl_scale * kl;
          if (out_loss) out_loss[row] = static_cast<float>(loss);
          if (out_lse) out_lse[row] = static_cast<float>(lse_z);
          if (out_entropy) out_entropy[row] = static_cast<float>(lse_z - c.sez / c.se);
          if (out_argmax) out_argmax[row] = c.zarg == INT_MAX ? 0 : c.zarg;
          if (out_targmax) out_targmax[row] = c.targ == INT_MAX ? 0 : c.targ;
        }
      }
    }
    __syncthreads();
    if (!p.want_grad) continue;

    // ---- pass 2: the gradient over the logits; each slot then takes the next row ----
    const double gs = ignored ? 0.0 : grad_scale != nullptr ? grad_scale[row] : 1.0;
    const double lse_z = result.lse_z;
    const float g_ce =
        p.want_ce ? static_cast<float>(gs * p.ce_weight * (1.0 + 2.0 * p.z_loss * lse_z)) : 0.0f;
    const float g_kl = static_cast<float>(gs * p.kl_weight * p.kl_scale);
    const float b_q = -static_cast<float>(lse_z) * kL, b_p = -static_cast<float>(result.lse_t) * kL;
    const double onehot = gs * p.ce_weight;
    const int64_t label = p.want_ce && !ignored ? labels[row] : -1;
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      if (live(j)) {
        float zv[kPack], tv[kPack], d[kPack];
        unpack_bf16(zs[j * kRowThreads + x], zv);
        unpack_bf16(ts[j * kRowThreads + x], tv);
#pragma unroll
        for (int k = 0; k < kPack; ++k) {
          const float q = fast_exp2(fmaf(zv[k], kL, b_q)), pt = fast_exp2(fmaf(tv[k], kL, b_p));
          d[k] = fmaf(g_kl, q - pt, g_ce * q);  // q - p first, as the general kernel
        }
        const int64_t y_at = label - static_cast<int64_t>(pack_of(j)) * kPack;
        if (y_at >= 0 && y_at < kPack) {  // the label's one-hot term, in double
#pragma unroll
          for (int k = 0; k < kPack; ++k)
            if (k == y_at) d[k] = static_cast<float>(static_cast<double>(d[k]) - onehot);
        }
        // Stored from registers computed from the slot: the slot is read before the
        // request below overwrites it.
        *reinterpret_cast<uint4*>(z + static_cast<int64_t>(pack_of(j)) * kPack) = pack_bf16(d);
      }
      request(row + clusters, j);
    }
  }
  cluster.sync();  // no CTA leaves while another may still read its cta_parts
#elif defined(__CUDA_ARCH__)
  __trap();  // no clusters below sm_90: the launcher never runs this (binaryVersion)
#endif
}

// CHUNKGRAD_HEAD_ROWS_CLUSTER: unset, the default shape; 0, the general kernel; 512 (CTAs of
// 512 threads, one an SM), 256 (two of 256) or 768 (three of 256), for measuring (Note
// [Rows held on chip]). Read at every call (the tests set it).
int cluster_kernel_choice() {
  const char* e = std::getenv("CHUNKGRAD_HEAD_ROWS_CLUSTER");
  if (e == nullptr) return kDefaultShape;
  for (int shape : {0, 256, 512, 768}) {
    if (std::strcmp(e, std::to_string(shape).c_str()) == 0) return shape;
  }
  return kDefaultShape;
}

std::atomic<int64_t> launches{0};

struct RowsCall {
  __nv_bfloat16* logits;
  const __nv_bfloat16* teacher;
  const int64_t* labels;
  int C, V;
  ClusterRowParams p;
  const float* grad_scale;
  const HeadRowPointers& out;
  cudaStream_t stream;
};

// The clusters of `parts` CTAs a kernel runs at once on a device, set up and asked once
// per (kernel, device, parts) (the attributes and the occupancy query cost microseconds a
// call, 16 calls a fused loss): 0 not asked yet, -1 it cannot run there (no sm_90 code for
// this device, a device below sm_90, or no cluster of that size fits). A failed attribute
// or query call answers kNotNow: that call falls back and the next one asks again. The
// attributes belong to the device's primary context, which chunkgrad never resets (a
// cudaDeviceReset would need this cache cleared).
constexpr int kMostDevices = 64;
constexpr int kNotNow = -2;
struct ClusterFit {
  std::atomic<int> most[kMostDevices][kMostParts + 1] = {};
};

int ask_cluster_fit(const void* kernel, int dev, int parts, cudaLaunchConfig_t launch,
                    size_t smem) {
  int major = 0;
  CG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 9) return -1;
  cudaFuncAttributes built{};
  CG_CUDA_CHECK(cudaFuncGetAttributes(&built, kernel));
  if (built.binaryVersion < 90) return -1;  // e.g. a build for sm_80 JIT-run on an H100
  CG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  if (parts > 8 && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed,
                                        1) != cudaSuccess) {
    (void)cudaGetLastError();  // clusters above 8 refused: the general kernel runs
    return kNotNow;
  }
  int most = 0;
  if (cudaOccupancyMaxActiveClusters(&most, kernel, &launch) != cudaSuccess) {
    (void)cudaGetLastError();  // a cluster shape the device cannot run
    return kNotNow;
  }
  return most > 0 ? most : -1;
}

// Launches the kernel of kThreads a CTA when a row fits kMostParts of its CTAs, the build
// has the kernel's sm_90 code for this device and the device can run such a cluster;
// false, launching nothing, otherwise (a cluster the driver refuses included).
template <int kThreads, int kBlocksPerSm>
bool launch_width(const RowsCall& c) {
  const int64_t parts = (c.V / kPack + kSlicePacks<kThreads> - 1) / kSlicePacks<kThreads>;
  if (parts > kMostParts) return false;
  const bool entropy = c.out.entropy != nullptr;
  auto kernel = entropy ? head_rows_cluster_kernel<kThreads, kBlocksPerSm, true>
                        : head_rows_cluster_kernel<kThreads, kBlocksPerSm, false>;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(parts);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t launch = {};
  launch.gridDim = dim3(static_cast<unsigned>(parts));
  launch.blockDim = dim3(kThreads);
  launch.dynamicSmemBytes = kSmemBytes<kThreads>;
  launch.stream = c.stream;
  launch.attrs = attribute;
  launch.numAttrs = 1;
  int dev = 0;
  CG_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= kMostDevices) return false;
  static ClusterFit fits[2];  // per kernel: without and with the entropy output
  std::atomic<int>& fit = fits[entropy ? 1 : 0].most[dev][parts];
  int most_clusters = fit.load(std::memory_order_acquire);
  if (most_clusters == 0) {  // two threads may both ask: the same answer
    most_clusters = ask_cluster_fit(reinterpret_cast<const void*>(kernel), dev,
                                    static_cast<int>(parts), launch, kSmemBytes<kThreads>);
    if (most_clusters != kNotNow) fit.store(most_clusters, std::memory_order_release);
  }
  if (most_clusters < 0) return false;
  launch.gridDim = dim3(static_cast<unsigned>(std::min(c.C, most_clusters) * parts));
  CG_CUDA_CHECK(cudaLaunchKernelEx(
      &launch, kernel, c.logits, c.teacher, c.labels, c.C, c.V, c.p, c.grad_scale,
      static_cast<float*>(c.out.loss), static_cast<float*>(c.out.lse),
      static_cast<float*>(c.out.entropy), c.out.argmax, c.out.teacher_argmax));
  launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

bool launch_head_rows_cluster(DType dtype, void* logits, void* teacher, const int64_t* labels,
                              int64_t C, int64_t V, const LossConfig& config, bool want_grad,
                              const void* grad_scale, const HeadRowPointers& out,
                              cudaStream_t stream) {
  const LossRowTerms terms = loss_row_terms(config);
  const bool aligned = reinterpret_cast<uintptr_t>(logits) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(teacher) % 16 == 0;
  if (dtype != DType::bf16 || teacher == nullptr || config.kind != LossKind::forward_kl ||
      terms.tau != 1.0 || config.softcap > 0.0f || config.label_smoothing != 0.0f ||
      V % kPack != 0 || V < kLeastV || V > kMostV || !aligned || C <= 0 || C > INT_MAX)
    return false;
  const int shape = cluster_kernel_choice();
  if (shape == 0) return false;
  ClusterRowParams p;
  p.ignore_index = config.ignore_index;
  p.ce_weight = terms.ce_weight;
  p.kl_weight = terms.kl_weight;
  p.kl_scale = terms.kl_scale;
  p.z_loss = config.z_loss;
  p.want_ce = terms.want_ce;
  p.want_grad = want_grad;
  const RowsCall call{static_cast<__nv_bfloat16*>(logits),
                      static_cast<const __nv_bfloat16*>(teacher),
                      labels,
                      static_cast<int>(C),
                      static_cast<int>(V),
                      p,
                      static_cast<const float*>(grad_scale),
                      out,
                      stream};
  return shape == 512   ? launch_width<512, 1>(call)
         : shape == 768 ? launch_width<256, 3>(call)
                        : launch_width<256, 2>(call);
}

int64_t head_rows_cluster_launches() { return launches.load(std::memory_order_relaxed); }

}  // namespace cg::cuda
