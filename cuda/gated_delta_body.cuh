// Why this file exists: the bodies of the CUDA gated delta rule and causal conv1d kernels
// (cuda/gated_delta_kernels.cu), written as __host__ __device__ functions of (thread id,
// thread count) so that the same code runs as a CUDA block and, with one thread and no
// barriers, on the host, where tests/gated_delta_host_emulation.cu checks the indexing
// against a plain recurrence on machines without a GPU (Note [Bodies that run on the host
// too]). Every loop is `for (e = tid; e < n; e += nthr)`; gd_sync() is a block barrier on
// the device. Included by gated_delta_kernels.cu and that test only.
//
// Note [Bodies that run on the host too]: no warp shuffles, no register arrays indexed by
// lane, no assumption on blockDim: a phase between two barriers only reads what earlier
// phases wrote, and every element is written by exactly one e. With nthr = 1 the phases
// run in order and compute what the block computes (the order of each sum is the same).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace cg::cuda::gated_delta {

constexpr int kChunk = 64;       // tokens per chunk of the chunked algorithm
constexpr int kMaxDim = 128;     // dk, dv at most this (Qwen3.5 / Qwen3.6: 128)
constexpr int kRowStride = 129;  // a [64, <=128] f32 tile's row stride in shared memory
constexpr int kSlice = 32;       // state columns (of dv) per block in the state passes
constexpr int kTriStride = kChunk + 1;

__host__ __device__ inline void gd_sync() {
#ifdef __CUDA_ARCH__
  __syncthreads();
#endif
}

template <typename T>
__host__ __device__ inline float load_f(const T* p) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(*p);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(*p);
  } else {
    return static_cast<float>(*p);
  }
}
template <typename T>
__host__ __device__ inline void store_f(T* p, float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    *p = __float2bfloat16_rn(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    *p = __float2half_rn(v);
  } else {
    *p = static_cast<T>(v);
  }
}

// The problem: q, k [B, T, Hk, dk]; v, out [B, T, Hv, dv]; g, beta [B, T, Hv] f32;
// state [B, Hv, dk, dv] f32 (read, then overwritten with the final state).
struct Problem {
  int B = 0, T = 0, Hk = 0, Hv = 0, dk = 0, dv = 0;
  bool l2norm = true;
  float scale = 1.f;
  __host__ __device__ int chunks() const { return (T + kChunk - 1) / kChunk; }
  __host__ __device__ int slices() const { return (dv + kSlice - 1) / kSlice; }
};

// The chunked algorithm's per-chunk products, f32, Tp = chunks * 64 padded rows per (b, h)
// (bh = b * Hv + h; rows past T are zero):
//   w   [B*Hv, Tp, dk]  W = T_c (k * beta * exp(gc))        (T_c: Note [The chunk's solve])
//   u   [B*Hv, Tp, dv]  U = T_c (v * beta)
//   qs  [B*Hv, Tp, dk]  qn * exp(gc)                        (qn = l2norm(q) * scale)
//   kd  [B*Hv, Tp, dk]  kn * exp(gc_last - gc)
//   aqk [B*Hv, Tp, 64]  (qn_i . kn_j) exp(gc_i - gc_j) for j <= i, else 0
//   eg  [B*Hv, chunks]  exp(gc_last)
// gc: the cumulative sum of g inside the chunk (padding rows add g = 0).
struct ChunkScratch {
  float *w, *u, *qs, *kd, *aqk, *eg;
};

// Shared floats the prepare body uses.
constexpr int kPrepareSharedFloats = 2 * kChunk * kRowStride + 2 * kChunk * kTriStride + 4 * kChunk;
// Shared floats the chunked state pass uses.
constexpr int kStateSharedFloats =
    kMaxDim * kSlice + kChunk * kRowStride + kChunk * kTriStride + kChunk * (kSlice + 1);
// Shared floats the recurrent body uses.
constexpr int kRecurrentSharedFloats = kMaxDim * kSlice + 2 * kMaxDim + 2;

// Note [The chunk's solve]: with L the strictly lower [64, 64] matrix
// L[i][j] = beta_i (kn_i . kn_j) exp(gc_i - gc_j) (j < i), T_c = (I + L)^-1, the unit lower
// triangular inverse flash-linear-attention's chunk_gated_delta_rule and transformers'
// torch_chunk_gated_delta_rule build. Its columns are independent: column j solves
// (I + L) x = e_j by forward substitution, one thread per column, no barriers.

// One block per (bh, chunk n): fills the chunk's rows of every ChunkScratch tensor.
template <typename T>
__host__ __device__ void prepare_chunk(const Problem& p, const T* q, const T* k, const T* v,
                                       const float* g, const float* beta, ChunkScratch s, int bh,
                                       int n, float* smem, int tid, int nthr) {
  const int b = bh / p.Hv, h = bh % p.Hv, kh = h / (p.Hv / p.Hk);
  const int t0 = n * kChunk, dk = p.dk, dv = p.dv;
  const int64_t Tp = static_cast<int64_t>(p.chunks()) * kChunk;
  float* kb = smem;                      // [64, kRowStride] kn, later kn beta exp(gc)
  float* xb = kb + kChunk * kRowStride;  // [64, kRowStride] qn, later v beta
  float* lm = xb + kChunk * kRowStride;  // [64, 65] L
  float* tm = lm + kChunk * kTriStride;  // [64, 65] T_c = (I + L)^-1
  float* gc = tm + kChunk * kTriStride;  // [64] cumulative g
  float* bt = gc + kChunk;               // [64] beta (0 on padding rows)
  float* rk = bt + kChunk;               // [64] k's inverse norm
  float* rq = rk + kChunk;               // [64] q's inverse norm times scale
  const int64_t row0 = static_cast<int64_t>(bh) * Tp + t0;  // this chunk's scratch row

  for (int e = tid; e < kChunk; e += nthr) {
    float acc = 0.f;
    for (int r = 0; r <= e && t0 + r < p.T; ++r) {
      acc += g[(static_cast<int64_t>(b) * p.T + t0 + r) * p.Hv + h];
    }
    gc[e] = acc;
    bt[e] = t0 + e < p.T ? beta[(static_cast<int64_t>(b) * p.T + t0 + e) * p.Hv + h] : 0.f;
  }
  for (int e = tid; e < kChunk * dk; e += nthr) {
    const int r = e / dk, m = e % dk;
    float kx = 0.f, qx = 0.f;
    if (t0 + r < p.T) {
      const int64_t at = ((static_cast<int64_t>(b) * p.T + t0 + r) * p.Hk + kh) * dk + m;
      kx = load_f(k + at);
      qx = load_f(q + at);
    }
    kb[r * kRowStride + m] = kx;
    xb[r * kRowStride + m] = qx;
  }
  gd_sync();
  for (int e = tid; e < 2 * kChunk; e += nthr) {
    const int r = e % kChunk;
    const float* row = (e < kChunk ? kb : xb) + r * kRowStride;
    float ss = 0.f;
    for (int m = 0; m < dk; ++m) ss += row[m] * row[m];
    const float inv = p.l2norm ? 1.f / sqrtf(ss + 1e-6f) : 1.f;
    if (e < kChunk) {
      rk[r] = inv;
    } else {
      rq[r] = inv * p.scale;
    }
  }
  gd_sync();
  for (int e = tid; e < kChunk * dk; e += nthr) {
    const int r = e / dk, m = e % dk;
    kb[r * kRowStride + m] *= rk[r];
    xb[r * kRowStride + m] *= rq[r];
  }
  gd_sync();
  // L, the decayed q k^T, qs, kd, eg: reads kb / xb only.
  for (int e = tid; e < kChunk * kChunk; e += nthr) {
    const int i = e / kChunk, j = e % kChunk;  // a warp: one i, 32 consecutive j
    float dqk = 0.f, dkk = 0.f;
    if (j <= i) {
      const float* ki = kb + i * kRowStride;
      const float* qi = xb + i * kRowStride;
      const float* kj = kb + j * kRowStride;
      for (int m = 0; m < dk; ++m) {
        dqk += qi[m] * kj[m];
        dkk += ki[m] * kj[m];
      }
    }
    const float decay = j <= i ? expf(gc[i] - gc[j]) : 0.f;
    s.aqk[(row0 + i) * kChunk + j] = dqk * decay;
    lm[i * kTriStride + j] = j < i ? bt[i] * dkk * decay : 0.f;
  }
  for (int e = tid; e < kChunk * dk; e += nthr) {
    const int r = e / dk, m = e % dk;
    s.qs[(row0 + r) * dk + m] = xb[r * kRowStride + m] * expf(gc[r]);
    s.kd[(row0 + r) * dk + m] = kb[r * kRowStride + m] * expf(gc[kChunk - 1] - gc[r]);
  }
  if (tid == 0) s.eg[static_cast<int64_t>(bh) * p.chunks() + n] = expf(gc[kChunk - 1]);
  gd_sync();
  // T_c by columns (Note [The chunk's solve]); meanwhile xb <- v beta, kb <- kn beta exp(gc).
  for (int j = tid; j < kChunk; j += nthr) {
    for (int i = 0; i < kChunk; ++i) {
      float x = i == j ? 1.f : 0.f;
      if (i > j) {
        for (int m = j; m < i; ++m) x -= lm[i * kTriStride + m] * tm[m * kTriStride + j];
      }
      tm[i * kTriStride + j] = x;
    }
  }
  for (int e = tid; e < kChunk * dv; e += nthr) {
    const int r = e / dv, c = e % dv;
    float vx = 0.f;
    if (t0 + r < p.T) {
      vx = load_f(v + ((static_cast<int64_t>(b) * p.T + t0 + r) * p.Hv + h) * dv + c) * bt[r];
    }
    xb[r * kRowStride + c] = vx;
  }
  for (int e = tid; e < kChunk * dk; e += nthr) {
    const int r = e / dk, m = e % dk;
    kb[r * kRowStride + m] *= bt[r] * expf(gc[r]);
  }
  gd_sync();
  // U = T_c (v beta), W = T_c (kn beta exp(gc)); T_c is unit lower triangular.
  for (int e = tid; e < kChunk * dv; e += nthr) {
    const int i = e / dv, c = e % dv;
    float acc = 0.f;
    for (int m = 0; m <= i; ++m) acc += tm[i * kTriStride + m] * xb[m * kRowStride + c];
    s.u[(row0 + i) * dv + c] = acc;
  }
  for (int e = tid; e < kChunk * dk; e += nthr) {
    const int i = e / dk, c = e % dk;
    float acc = 0.f;
    for (int m = 0; m <= i; ++m) acc += tm[i * kTriStride + m] * kb[m * kRowStride + c];
    s.w[(row0 + i) * dk + c] = acc;
  }
}

// Note [Register tiles of the state pass]: its three products are cut into kTiles = 256
// register tiles, one per thread of a 256-thread block: item e takes columns
// e % 8 + {0, 8, 16, 24} of the slice and rows e / 8 + {0, 32} of a [64, 32] product
// (v_new, out) or state rows e / 8 + {0, 32, 64, 96} (the update; those below dk). Per step
// of the inner sum a warp then reads 8 distinct state/v_new words and 4 distinct rows,
// each one shared-memory wavefront, instead of two loads per multiply-add.
constexpr int kTiles = 256;
static_assert(kSlice == 32 && kChunk == 64 && kMaxDim == 128, "the tiles assume these sizes");

// One block per (bh, column slice sl): walks the chunks in order with the state's columns
// [sl*32, sl*32 + 32) in shared memory, per chunk
//   v_new = U - W S;  out = qs S + aqk v_new;  S = eg S + kd^T v_new
// then writes the final state over `state`.
template <typename T>
__host__ __device__ void chunked_state_pass(const Problem& p, ChunkScratch s, float* state, T* out,
                                            int bh, int sl, float* smem, int tid, int nthr) {
  const int b = bh / p.Hv, h = bh % p.Hv, dk = p.dk, dv = p.dv;
  const int c0 = sl * kSlice, wc = dv - c0 < kSlice ? dv - c0 : kSlice;
  const int64_t Tp = static_cast<int64_t>(p.chunks()) * kChunk;
  float* st = smem;                       // [dk, 32] the state's slice
  float* buf = st + kMaxDim * kSlice;     // [64, kRowStride] W, then qs, then kd rows
  float* am = buf + kChunk * kRowStride;  // [64, 65] aqk
  float* vn = am + kChunk * kTriStride;   // [64, 33] v_new
  float* st_g = state + static_cast<int64_t>(bh) * dk * dv;

  for (int e = tid; e < dk * kSlice; e += nthr) {
    const int m = e / kSlice, c = e % kSlice;
    st[e] = c < wc ? st_g[static_cast<int64_t>(m) * dv + c0 + c] : 0.f;
  }
  for (int n = 0; n < p.chunks(); ++n) {
    const int t0 = n * kChunk;
    const int64_t row0 = static_cast<int64_t>(bh) * Tp + t0;
    gd_sync();
    for (int e = tid; e < kChunk * dk; e += nthr) {
      buf[(e / dk) * kRowStride + e % dk] = s.w[row0 * dk + e];
    }
    for (int e = tid; e < kChunk * kChunk; e += nthr) {
      am[(e / kChunk) * kTriStride + e % kChunk] = s.aqk[row0 * kChunk + e];
    }
    gd_sync();
    for (int e = tid; e < kTiles; e += nthr) {  // Note [Register tiles of the state pass]
      const int ci = e % 8, ri = e / 8;
      float acc[2][4];
      for (int rr = 0; rr < 2; ++rr) {
        for (int cc = 0; cc < 4; ++cc) {
          const int c = ci + 8 * cc;
          acc[rr][cc] = c < wc ? s.u[(row0 + ri + 32 * rr) * dv + c0 + c] : 0.f;
        }
      }
      for (int m = 0; m < dk; ++m) {
        float sv[4], bv[2];
        for (int cc = 0; cc < 4; ++cc) sv[cc] = st[m * kSlice + ci + 8 * cc];
        for (int rr = 0; rr < 2; ++rr) bv[rr] = buf[(ri + 32 * rr) * kRowStride + m];
        for (int rr = 0; rr < 2; ++rr) {
          for (int cc = 0; cc < 4; ++cc) acc[rr][cc] -= bv[rr] * sv[cc];
        }
      }
      for (int rr = 0; rr < 2; ++rr) {
        for (int cc = 0; cc < 4; ++cc)
          vn[(ri + 32 * rr) * (kSlice + 1) + ci + 8 * cc] = acc[rr][cc];
      }
    }
    gd_sync();
    for (int e = tid; e < kChunk * dk; e += nthr) {
      buf[(e / dk) * kRowStride + e % dk] = s.qs[row0 * dk + e];
    }
    gd_sync();
    for (int e = tid; e < kTiles; e += nthr) {
      const int ci = e % 8, ri = e / 8;
      float acc[2][4] = {};
      for (int m = 0; m < dk; ++m) {
        float sv[4], bv[2];
        for (int cc = 0; cc < 4; ++cc) sv[cc] = st[m * kSlice + ci + 8 * cc];
        for (int rr = 0; rr < 2; ++rr) bv[rr] = buf[(ri + 32 * rr) * kRowStride + m];
        for (int rr = 0; rr < 2; ++rr) {
          for (int cc = 0; cc < 4; ++cc) acc[rr][cc] += bv[rr] * sv[cc];
        }
      }
      // aqk is zero above its diagonal: row ri's terms past j = ri add nothing.
      for (int j = 0; j <= ri + 32; ++j) {
        float vv[4];
        for (int cc = 0; cc < 4; ++cc) vv[cc] = vn[j * (kSlice + 1) + ci + 8 * cc];
        const float a0 = am[ri * kTriStride + j], a1 = am[(ri + 32) * kTriStride + j];
        for (int cc = 0; cc < 4; ++cc) {
          acc[0][cc] += a0 * vv[cc];
          acc[1][cc] += a1 * vv[cc];
        }
      }
      for (int rr = 0; rr < 2; ++rr) {
        const int i = ri + 32 * rr;
        if (t0 + i >= p.T) continue;
        T* orow = out + ((static_cast<int64_t>(b) * p.T + t0 + i) * p.Hv + h) * dv + c0;
        for (int cc = 0; cc < 4; ++cc) {
          if (ci + 8 * cc < wc) store_f(orow + ci + 8 * cc, acc[rr][cc]);
        }
      }
    }
    gd_sync();
    for (int e = tid; e < kChunk * dk; e += nthr) {
      buf[(e / dk) * kRowStride + e % dk] = s.kd[row0 * dk + e];
    }
    gd_sync();
    const float eg = s.eg[static_cast<int64_t>(bh) * p.chunks() + n];
    for (int e = tid; e < kTiles; e += nthr) {
      const int ci = e % 8, mi = e / 8;  // rows mi + 32 rr of the state (those below dk)
      float acc[4][4];
      for (int rr = 0; rr < 4; ++rr) {
        for (int cc = 0; cc < 4; ++cc) {
          const int m = mi + 32 * rr;
          acc[rr][cc] = m < dk ? eg * st[m * kSlice + ci + 8 * cc] : 0.f;
        }
      }
      for (int j = 0; j < kChunk; ++j) {
        float vv[4], bb[4];
        for (int cc = 0; cc < 4; ++cc) vv[cc] = vn[j * (kSlice + 1) + ci + 8 * cc];
        for (int rr = 0; rr < 4; ++rr) bb[rr] = buf[j * kRowStride + mi + 32 * rr];
        for (int rr = 0; rr < 4; ++rr) {
          for (int cc = 0; cc < 4; ++cc) acc[rr][cc] += bb[rr] * vv[cc];
        }
      }
      for (int rr = 0; rr < 4; ++rr) {
        const int m = mi + 32 * rr;
        if (m >= dk) continue;
        for (int cc = 0; cc < 4; ++cc) st[m * kSlice + ci + 8 * cc] = acc[rr][cc];
      }
    }
  }
  gd_sync();
  for (int e = tid; e < dk * kSlice; e += nthr) {
    const int m = e / kSlice, c = e % kSlice;
    if (c < wc) st_g[static_cast<int64_t>(m) * dv + c0 + c] = st[e];
  }
}

// One block per (bh, column slice sl), the plain recurrence token by token (decoding a few
// tokens; any T): one thread per state column does
//   S = exp(g) S;  delta = beta (v - S^T kn);  S += kn delta^T;  out = S^T qn.
template <typename T>
__host__ __device__ void recurrent_pass(const Problem& p, const T* q, const T* k, const T* v,
                                        const float* g, const float* beta, float* state, T* out,
                                        int bh, int sl, float* smem, int tid, int nthr) {
  const int b = bh / p.Hv, h = bh % p.Hv, kh = h / (p.Hv / p.Hk), dk = p.dk, dv = p.dv;
  const int c0 = sl * kSlice, wc = dv - c0 < kSlice ? dv - c0 : kSlice;
  float* st = smem;                   // [dk, 32]
  float* kv = st + kMaxDim * kSlice;  // [dk] kn
  float* qv = kv + kMaxDim;           // [dk] qn
  float* inv = qv + kMaxDim;          // [2] k's, q's inverse norms (q's times scale)
  float* st_g = state + static_cast<int64_t>(bh) * dk * dv;

  for (int e = tid; e < dk * kSlice; e += nthr) {
    const int m = e / kSlice, c = e % kSlice;
    st[e] = c < wc ? st_g[static_cast<int64_t>(m) * dv + c0 + c] : 0.f;
  }
  for (int t = 0; t < p.T; ++t) {
    const int64_t tok = static_cast<int64_t>(b) * p.T + t;
    gd_sync();
    for (int m = tid; m < dk; m += nthr) {
      kv[m] = load_f(k + (tok * p.Hk + kh) * dk + m);
      qv[m] = load_f(q + (tok * p.Hk + kh) * dk + m);
    }
    gd_sync();
    for (int e = tid; e < 2; e += nthr) {
      const float* x = e == 0 ? kv : qv;
      float ss = 0.f;
      for (int m = 0; m < dk; ++m) ss += x[m] * x[m];
      const float r = p.l2norm ? 1.f / sqrtf(ss + 1e-6f) : 1.f;
      inv[e] = e == 0 ? r : r * p.scale;
    }
    gd_sync();
    const float decay = expf(g[tok * p.Hv + h]), bet = beta[tok * p.Hv + h];
    for (int c = tid; c < wc; c += nthr) {
      float kvc = 0.f;
      for (int m = 0; m < dk; ++m) {
        const float x = st[m * kSlice + c] * decay;
        st[m * kSlice + c] = x;
        kvc += x * kv[m] * inv[0];
      }
      const float vc = load_f(v + (tok * p.Hv + h) * dv + c0 + c);
      const float delta = bet * (vc - kvc);
      float o = 0.f;
      for (int m = 0; m < dk; ++m) {
        const float x = st[m * kSlice + c] + kv[m] * inv[0] * delta;
        st[m * kSlice + c] = x;
        o += x * qv[m] * inv[1];
      }
      store_f(out + (tok * p.Hv + h) * dv + c0 + c, o);
    }
  }
  gd_sync();
  for (int e = tid; e < dk * kSlice; e += nthr) {
    const int m = e / kSlice, c = e % kSlice;
    if (c < wc) st_g[static_cast<int64_t>(m) * dv + c0 + c] = st[e];
  }
}

// Element e of out [B, T, C]: act(sum_j w[c, j] xx[b, t + j, c]), xx = cat(history, x).
// Accumulates in the table's compute dtype: f64 for f64 inputs, fp32 otherwise.
template <typename T>
__host__ __device__ inline void causal_conv1d_element(const T* x, const T* w, const T* history,
                                                      T* out, int64_t T_len, int64_t C, int K,
                                                      bool silu, int64_t e) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  auto load = [](const T* p) -> Acc {
    if constexpr (std::is_same_v<T, double>) {
      return *p;
    } else {
      return load_f(p);
    }
  };
  const int64_t c = e % C, t = (e / C) % T_len, b = e / (C * T_len);
  Acc acc = 0;
  for (int j = 0; j < K; ++j) {
    const int64_t src = t + j - (K - 1);  // index into x; negative: into history
    Acc xv = 0;
    if (src >= 0) {
      xv = load(x + (b * T_len + src) * C + c);
    } else if (history != nullptr) {
      xv = load(history + (b * (K - 1) + (K - 1) + src) * C + c);
    }
    acc += load(w + c * K + j) * xv;
  }
  if (silu) {
    if constexpr (std::is_same_v<Acc, double>) {
      acc = acc / (1.0 + exp(-acc));
    } else {
      acc = acc / (1.f + expf(-acc));
    }
  }
  if constexpr (std::is_same_v<T, double>) {
    out[e] = acc;
  } else {
    store_f(out + e, acc);
  }
}

}  // namespace cg::cuda::gated_delta
