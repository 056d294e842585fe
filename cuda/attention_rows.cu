// Why this file exists: the simple, slow attention kernels -- the fallback for what the
// flash kernels (cuda/attention_flash*.cu) don't take: dense boolean masks, f32 and f64,
// head dims other than 64 and 128 (up to 256). They follow the CPU reference
// (cpu/attention.cpp) step for step, one warp per row, no tensor cores, no shared
// memory, no [Sq, Sk] buffer:
//   - forward: a warp per query row walks the row's visible keys with an online softmax
//     (lanes split the head dim; each score is a warp-wide dot product);
//   - backward: a warp per query row makes dq (recomputing p from lse), a warp per key row
//     makes dk and dv, walking the query rows that see that key -- so nothing is written
//     by two warps and no atomics are needed.
// Work is O(visible keys * hd) per row like the CPU's, but each key costs a warp shuffle
// reduction: use it for correctness, not for speed. Also here: the backward's delta =
// rowsum(dO * O), which the flash path uses too (launch_attention_delta), read 16 bytes a
// thread where the rows allow it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "cuda/attention_common.cuh"
#include "cuda/attention_kernels.h"
#include "cuda/cuda_check.h"

namespace cg::cuda {

namespace {

using attn::dense_allows;
using attn::DevKeyRanges;
using attn::from_compute;
using attn::key_ranges;
using attn::to_float;

constexpr int kRowsWarps = 4;  // rows per block of 128 threads

template <typename C>
__device__ inline C warp_sum(C x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <typename C>
__device__ inline C neg_inf() {
  return static_cast<C>(-INFINITY);  // (std::numeric_limits is host-only in nvcc)
}

// Loads element lane + 32 * p of a row (0 past hd) in compute type.
template <typename T, typename C, int PL>
__device__ inline void load_row(C (&dst)[PL], const T* row, int64_t hd, int lane) {
#pragma unroll
  for (int p = 0; p < PL; ++p) {
    const int64_t e = lane + 32 * p;
    dst[p] = e < hd ? static_cast<C>(to_float(row[e])) : C(0);
  }
}

template <typename T, typename C, int PL>
__device__ inline C row_dot(const C (&a)[PL], const T* row, int64_t hd, int lane) {
  C acc = 0;
#pragma unroll
  for (int p = 0; p < PL; ++p) {
    const int64_t e = lane + 32 * p;
    if (e < hd) acc += a[p] * static_cast<C>(to_float(row[e]));
  }
  return warp_sum(acc);
}

template <typename T, typename C, int PL>
__device__ inline void store_row(T* row, const C (&src)[PL], C factor, int64_t hd, int lane) {
#pragma unroll
  for (int p = 0; p < PL; ++p) {
    const int64_t e = lane + 32 * p;
    if (e < hd) row[e] = from_compute<T>(src[p] * factor);
  }
}

template <typename T>
__device__ inline const T* row_ptr(const AttnOperand& x, int64_t b, int64_t h, int64_t i) {
  return static_cast<const T*>(x.data) + b * x.sb + h * x.sh + i * x.ss;
}

// ---------------------------------------------------------------------------------------
// kernels

// out: (B, Hq, Sq, hd) contiguous; lse: (B, Hq, Sq). One warp per query row.
template <typename T, typename C, int PL>
__global__ void rows_forward_kernel(AttnShape s, AttnOperand q, AttnOperand k, AttnOperand v,
                                    T* out, C* lse, AttnMaskArgs m, C scale) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsWarps + threadIdx.x / 32;
  if (row >= s.B * s.Hq * s.Sq) return;
  const int64_t i = row % s.Sq, h = (row / s.Sq) % s.Hq, b = row / (s.Sq * s.Hq);
  const int64_t hk = h / (s.Hq / s.Hkv);
  C qr[PL], acc[PL];
  load_row<T, C, PL>(qr, row_ptr<T>(q, b, h, i), s.hd, lane);
#pragma unroll
  for (int p = 0; p < PL; ++p) acc[p] = 0;
  C mx = neg_inf<C>(), l = 0;
  const DevKeyRanges r = key_ranges(m, s.Sq, s.Sk, b, i);
  for (int ri = 0; ri < r.count; ++ri) {
    for (int64_t j = r.begin[ri]; j < r.end[ri]; ++j) {
      if (m.kind == AttnMaskKind::dense && !dense_allows(m, b, h, i, j)) continue;
      const C sc = scale * row_dot<T, C, PL>(qr, row_ptr<T>(k, b, hk, j), s.hd, lane);
      const C mn = sc > mx ? sc : mx;
      const C corr = exp(mx - mn);  // 0 on the first key (mx = -inf)
      const C p = exp(sc - mn);
      l = l * corr + p;
      const T* vr = row_ptr<T>(v, b, hk, j);
#pragma unroll
      for (int pi = 0; pi < PL; ++pi) {
        const int64_t e = lane + 32 * pi;
        const C ve = e < s.hd ? static_cast<C>(to_float(vr[e])) : C(0);
        acc[pi] = acc[pi] * corr + p * ve;
      }
      mx = mn;
    }
  }
  T* o = out + row * s.hd;
  if (l == C(0)) {  // sees no key: output 0, lse -inf
    store_row<T, C, PL>(o, acc, C(0), s.hd, lane);
    if (lane == 0) lse[row] = neg_inf<C>();
    return;
  }
  store_row<T, C, PL>(o, acc, C(1) / l, s.hd, lane);
  if (lane == 0) lse[row] = mx + log(l);
}

// delta: (B, Hq, Sq) = rowsum(grad_out * out). One warp per row.
template <typename T, typename C, int PL>
__global__ void delta_kernel(AttnShape s, AttnOperand g, AttnOperand o, C* delta) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsWarps + threadIdx.x / 32;
  if (row >= s.B * s.Hq * s.Sq) return;
  const int64_t i = row % s.Sq, h = (row / s.Sq) % s.Hq, b = row / (s.Sq * s.Hq);
  C gr[PL];
  load_row<T, C, PL>(gr, row_ptr<T>(g, b, h, i), s.hd, lane);
  const C d = row_dot<T, C, PL>(gr, row_ptr<T>(o, b, h, i), s.hd, lane);
  if (lane == 0) delta[row] = d;
}

// delta again, 16 bytes a thread: G = hd / 8 threads a row (a power of two, G <= 32), each
// taking 8 elements of dO and of O, the row's sum closed by shuffles inside the G lanes.
// For 2-byte types whose rows start 16-byte aligned (the launcher checks). Every thread
// reaches the shuffles (no early return) so that the full-warp mask holds. Why: the
// warp-a-row kernel above reads 2 bytes a lane per load and moved about 1.7 TB/s on the
// H200 (Note [The backward's other kernels], cuda/attention_flash_backward.cu).
template <typename T, int G>
__global__ void delta_vec_kernel(AttnShape s, AttnOperand g, AttnOperand o, float* delta) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = t / G, rows = s.B * s.Hq * s.Sq;
  const int part = static_cast<int>(t % G);
  float d = 0;
  if (row < rows) {
    const int64_t i = row % s.Sq, h = (row / s.Sq) % s.Hq, b = row / (s.Sq * s.Hq);
    const uint4 gw = __ldg(reinterpret_cast<const uint4*>(row_ptr<T>(g, b, h, i) + 8 * part));
    const uint4 ow = __ldg(reinterpret_cast<const uint4*>(row_ptr<T>(o, b, h, i) + 8 * part));
    const uint32_t gs[4] = {gw.x, gw.y, gw.z, gw.w}, os[4] = {ow.x, ow.y, ow.z, ow.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      d += attn::unpack<T>(gs[w], 0) * attn::unpack<T>(os[w], 0) +
           attn::unpack<T>(gs[w], 1) * attn::unpack<T>(os[w], 1);
    }
  }
#pragma unroll
  for (int off = G / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
  if (row < rows && part == 0) delta[row] = d;
}

// dq: (B, Hq, Sq, hd) contiguous. One warp per query row:
// dq_i = scale * sum_j p_ij (dO_i . v_j - D_i) k_j, p_ij = exp(scale q_i . k_j - lse_i).
template <typename T, typename C, int PL>
__global__ void rows_dq_kernel(AttnShape s, AttnOperand q, AttnOperand k, AttnOperand v,
                               AttnOperand g, const C* lse, const C* delta, AttnMaskArgs m, C scale,
                               T* dq) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsWarps + threadIdx.x / 32;
  if (row >= s.B * s.Hq * s.Sq) return;
  const int64_t i = row % s.Sq, h = (row / s.Sq) % s.Hq, b = row / (s.Sq * s.Hq);
  const int64_t hk = h / (s.Hq / s.Hkv);
  C acc[PL];
#pragma unroll
  for (int p = 0; p < PL; ++p) acc[p] = 0;
  const C L = lse[row];
  if (L != neg_inf<C>()) {
    C qr[PL], gr[PL];
    load_row<T, C, PL>(qr, row_ptr<T>(q, b, h, i), s.hd, lane);
    load_row<T, C, PL>(gr, row_ptr<T>(g, b, h, i), s.hd, lane);
    const C D = delta[row];
    const DevKeyRanges r = key_ranges(m, s.Sq, s.Sk, b, i);
    for (int ri = 0; ri < r.count; ++ri) {
      for (int64_t j = r.begin[ri]; j < r.end[ri]; ++j) {
        if (m.kind == AttnMaskKind::dense && !dense_allows(m, b, h, i, j)) continue;
        const T* kr = row_ptr<T>(k, b, hk, j);
        const C p = exp(scale * row_dot<T, C, PL>(qr, kr, s.hd, lane) - L);
        const C ds = p * (row_dot<T, C, PL>(gr, row_ptr<T>(v, b, hk, j), s.hd, lane) - D);
#pragma unroll
        for (int pi = 0; pi < PL; ++pi) {
          const int64_t e = lane + 32 * pi;
          if (e < s.hd) acc[pi] += ds * static_cast<C>(to_float(kr[e]));
        }
      }
    }
  }
  store_row<T, C, PL>(dq + row * s.hd, acc, scale, s.hd, lane);
}

// dk, dv: (B, Hkv, Sk, hd) contiguous (either may be null). One warp per key row j,
// walking every query row of its head group that sees j:
// dv_j = sum_i p_ij dO_i, dk_j = scale * sum_i p_ij (dO_i . v_j - D_i) q_i.
template <typename T, typename C, int PL>
__global__ void rows_dkdv_kernel(AttnShape s, AttnOperand q, AttnOperand k, AttnOperand v,
                                 AttnOperand g, const C* lse, const C* delta, AttnMaskArgs m,
                                 C scale, T* dk, T* dv) {
  const int lane = threadIdx.x % 32;
  const int64_t krow = static_cast<int64_t>(blockIdx.x) * kRowsWarps + threadIdx.x / 32;
  if (krow >= s.B * s.Hkv * s.Sk) return;
  const int64_t j = krow % s.Sk, hk = (krow / s.Sk) % s.Hkv, b = krow / (s.Sk * s.Hkv);
  const int64_t group = s.Hq / s.Hkv;
  C kr[PL], vr[PL], dka[PL], dva[PL];
  load_row<T, C, PL>(kr, row_ptr<T>(k, b, hk, j), s.hd, lane);
  load_row<T, C, PL>(vr, row_ptr<T>(v, b, hk, j), s.hd, lane);
#pragma unroll
  for (int p = 0; p < PL; ++p) dka[p] = dva[p] = 0;

  for (int64_t gi = 0; gi < group; ++gi) {
    const int64_t h = hk * group + gi;
    // Query rows [lo, hi) that may see key j (the mask rule, inverted).
    auto visit = [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        if (m.kind == AttnMaskKind::dense && !dense_allows(m, b, h, i, j)) continue;
        const int64_t row = (b * s.Hq + h) * s.Sq + i;
        const C L = lse[row];
        if (L == neg_inf<C>()) continue;
        const T* qi = row_ptr<T>(q, b, h, i);
        const T* gi_row = row_ptr<T>(g, b, h, i);
        const C p = exp(scale * row_dot<T, C, PL>(kr, qi, s.hd, lane) - L);
        const C ds = p * (row_dot<T, C, PL>(vr, gi_row, s.hd, lane) - delta[row]);
#pragma unroll
        for (int pi = 0; pi < PL; ++pi) {
          const int64_t e = lane + 32 * pi;
          if (e < s.hd) {
            dva[pi] += p * static_cast<C>(to_float(gi_row[e]));
            dka[pi] += ds * static_cast<C>(to_float(qi[e]));
          }
        }
      }
    };
    switch (m.kind) {
      case AttnMaskKind::none:
      case AttnMaskKind::dense: visit(0, s.Sq); break;
      case AttnMaskKind::causal:  // i sees j iff j <= i + (Sk - Sq)
        visit(max(int64_t{0}, j - (s.Sk - s.Sq)), s.Sq);
        break;
      case AttnMaskKind::dflash: {
        // Full rule: every slot of the block. Sliding (W = w1 + 1): slot k sees a key at
        // position p iff anchor + k - w1 <= p <= anchor + k, so the slots that see it are
        // k in [p - anchor, p - anchor + w1], clipped to the block.
        const int64_t bs = m.block_size, w1 = m.sliding_window - 1;
        auto visit_slots = [&](int64_t blk, int64_t rel) {  // rel = key position - anchor
          if (m.sliding_window == 0) {
            visit(blk * bs, (blk + 1) * bs);
            return;
          }
          const int64_t lo = max(int64_t{0}, rel), hi = min(bs, rel + w1 + 1);
          if (lo < hi) visit(blk * bs + lo, blk * bs + hi);
        };
        if (j >= m.context_len) {  // a block key: its own block's rows, unless padded
          const int64_t blk = (j - m.context_len) / bs;
          if (attn::dflash_anchor(m, b, blk) >= 0) visit_slots(blk, j - m.context_len - blk * bs);
        } else {  // a context key: every block whose anchor is past it
          for (int64_t blk = 0; blk < m.num_blocks; ++blk) {
            const int64_t anchor = attn::dflash_anchor(m, b, blk);
            if (anchor > j) visit_slots(blk, j - anchor);
          }
        }
        break;
      }
    }
  }
  if (dk != nullptr) store_row<T, C, PL>(dk + krow * s.hd, dka, scale, s.hd, lane);
  if (dv != nullptr) store_row<T, C, PL>(dv + krow * s.hd, dva, C(1), s.hd, lane);
}

// Note [Anchors as kernel parameters]: a DFlash mask's N anchors live on the host
// (ResolvedAttentionMask) and the kernels read them on the device. cudaMemcpyAsync from
// pageable host memory may wait for the stream; a kernel's parameters are copied at launch
// and ordered on the stream, so the anchors go as parameters of a tiny copy kernel, in
// chunks that keep each launch under the classic 4 KB parameter limit.
constexpr int kUploadChunk = 496;
struct UploadChunk {
  int64_t* dst;
  int64_t count;
  int64_t values[kUploadChunk];
};
static_assert(sizeof(UploadChunk) <= 4096, "kernel parameters above 4 KB need CUDA 12.1+");

// dst: (count,) = values.
__global__ void upload_kernel(UploadChunk c) {
  for (int64_t i = threadIdx.x; i < c.count; i += blockDim.x) c.dst[i] = c.values[i];
}

// ---------------------------------------------------------------------------------------
// launchers

unsigned blocks_for(int64_t rows) {
  const int64_t n = (rows + kRowsWarps - 1) / kRowsWarps;
  CG_CHECK(n < (int64_t{1} << 31), "attention: ", rows, " rows are too many for one launch");
  return static_cast<unsigned>(n);
}

// Calls f.template operator()<T, C, PL>() for the dtype and head dim.
template <typename F>
void dispatch_rows(DType dtype, int64_t hd, F&& f) {
  CG_CHECK(hd <= kAttnRowsMaxHeadDim, "scaled_dot_product_attention: head_dim ", hd,
           " is not supported on cuda (at most ", kAttnRowsMaxHeadDim, ")");
  auto with_pl = [&]<typename T, typename C>() {
    if (hd <= 32)
      f.template operator()<T, C, 1>();
    else if (hd <= 64)
      f.template operator()<T, C, 2>();
    else if (hd <= 128)
      f.template operator()<T, C, 4>();
    else
      f.template operator()<T, C, 8>();
  };
  switch (dtype) {
    case DType::f32: with_pl.template operator()<float, float>(); break;
    case DType::f64: with_pl.template operator()<double, double>(); break;
    case DType::f16: with_pl.template operator()<__half, float>(); break;
    case DType::bf16: with_pl.template operator()<__nv_bfloat16, float>(); break;
    default:
      CG_CHECK(false, "scaled_dot_product_attention: dtype ", dtype_name(dtype),
               " is not supported on cuda (f32, f64, f16, bf16)");
  }
}

}  // namespace

void launch_upload_int64(int64_t* dst, const int64_t* host, int64_t n, cudaStream_t stream) {
  for (int64_t at = 0; at < n; at += kUploadChunk) {
    UploadChunk c{};  // (zeroed: no uninitialised bytes go to the launch)
    c.dst = dst + at;
    c.count = std::min<int64_t>(kUploadChunk, n - at);
    std::memcpy(c.values, host + at, static_cast<size_t>(c.count) * sizeof(int64_t));
    upload_kernel<<<1, 128, 0, stream>>>(c);
  }
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_attention_rows_forward(DType dtype, const AttnShape& s, AttnOperand q, AttnOperand k,
                                   AttnOperand v, void* out, void* lse, const AttnMaskArgs& m,
                                   double scale, cudaStream_t stream) {
  const int64_t rows = s.B * s.Hq * s.Sq;
  if (rows == 0) return;
  dispatch_rows(dtype, s.hd, [&]<typename T, typename C, int PL>() {
    rows_forward_kernel<T, C, PL><<<blocks_for(rows), 32 * kRowsWarps, 0, stream>>>(
        s, q, k, v, static_cast<T*>(out), static_cast<C*>(lse), m, static_cast<C>(scale));
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

namespace {
// Whether every (B, H, S) row of x starts 16-byte aligned (the vectorized delta's loads).
bool rows_16_aligned(const AttnOperand& x, size_t elem) {
  const auto bytes = [elem](int64_t stride) { return stride * static_cast<int64_t>(elem); };
  return reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && bytes(x.sb) % 16 == 0 &&
         bytes(x.sh) % 16 == 0 && bytes(x.ss) % 16 == 0;
}

// delta_vec_kernel<T, hd / 8> for 2-byte T and hd 32, 64, 128 or 256; false otherwise.
template <typename T>
bool launch_delta_vec(const AttnShape& s, AttnOperand g, AttnOperand o, float* delta,
                      cudaStream_t stream) {
  if (!rows_16_aligned(g, sizeof(T)) || !rows_16_aligned(o, sizeof(T))) return false;
  const int64_t threads = s.B * s.Hq * s.Sq * (s.hd / 8);
  const int64_t ctas = (threads + 255) / 256;
  CG_CHECK(ctas < (int64_t{1} << 31), "attention: ", s.B * s.Hq * s.Sq,
           " rows are too many for one launch");
  const dim3 grid(static_cast<unsigned>(ctas));
  switch (s.hd) {
    case 32: delta_vec_kernel<T, 4><<<grid, 256, 0, stream>>>(s, g, o, delta); return true;
    case 64: delta_vec_kernel<T, 8><<<grid, 256, 0, stream>>>(s, g, o, delta); return true;
    case 128: delta_vec_kernel<T, 16><<<grid, 256, 0, stream>>>(s, g, o, delta); return true;
    case 256: delta_vec_kernel<T, 32><<<grid, 256, 0, stream>>>(s, g, o, delta); return true;
    default: return false;
  }
}
}  // namespace

void launch_attention_delta(DType dtype, const AttnShape& s, AttnOperand grad_out, AttnOperand out,
                            void* delta, cudaStream_t stream) {
  const int64_t rows = s.B * s.Hq * s.Sq;
  if (rows == 0) return;
  float* df = static_cast<float*>(delta);  // (2-byte types compute in f32)
  if ((dtype == DType::bf16 && launch_delta_vec<__nv_bfloat16>(s, grad_out, out, df, stream)) ||
      (dtype == DType::f16 && launch_delta_vec<__half>(s, grad_out, out, df, stream))) {
    CG_CUDA_CHECK(cudaGetLastError());
    return;
  }
  dispatch_rows(dtype, s.hd, [&]<typename T, typename C, int PL>() {
    delta_kernel<T, C, PL><<<blocks_for(rows), 32 * kRowsWarps, 0, stream>>>(
        s, grad_out, out, static_cast<C*>(delta));
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_attention_rows_backward(DType dtype, const AttnShape& s, AttnOperand q, AttnOperand k,
                                    AttnOperand v, AttnOperand grad_out, const void* lse,
                                    const void* delta, const AttnMaskArgs& m, double scale,
                                    void* dq, void* dk, void* dv, cudaStream_t stream) {
  dispatch_rows(dtype, s.hd, [&]<typename T, typename C, int PL>() {
    const C* L = static_cast<const C*>(lse);
    const C* D = static_cast<const C*>(delta);
    const int64_t qrows = s.B * s.Hq * s.Sq, krows = s.B * s.Hkv * s.Sk;
    if (dq != nullptr && qrows > 0) {
      rows_dq_kernel<T, C, PL><<<blocks_for(qrows), 32 * kRowsWarps, 0, stream>>>(
          s, q, k, v, grad_out, L, D, m, static_cast<C>(scale), static_cast<T*>(dq));
    }
    if ((dk != nullptr || dv != nullptr) && krows > 0) {
      rows_dkdv_kernel<T, C, PL><<<blocks_for(krows), 32 * kRowsWarps, 0, stream>>>(
          s, q, k, v, grad_out, L, D, m, static_cast<C>(scale), static_cast<T*>(dk),
          static_cast<T*>(dv));
    }
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
