// Why this file exists: the CUDA lm_head loss row kernel (see head_loss_kernels.h; the math
// per row is the device-neutral spec in ops/loss_row_math.h, derived in docs/fused_loss.md;
// the drafter's KL + CE at a large vocabulary goes to cuda/head_rows_cluster.cu, Note [Rows
// held on chip], first). One block per row, two streaming passes over the row's V logits
// (16-bit storage read through fp32, 16-byte loads): softcap in place with every statistic
// at once (Note [One-pass row statistics]), then the gradient written over the logits;
// each element is always visited by the same thread, block reductions in between.
#include "cuda/head_loss_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"
#include "cuda/head_rows_cluster.h"
#include "cuda/head_rows_device.cuh"
#include "ops/loss_row_math.h"

namespace cg::cuda {

namespace {

using namespace head_rows;  // cuda/head_rows_device.cuh

// The loss configuration as the kernel reads it.
struct HeadParams {
  int kind;  // LossKind
  bool want_ce, want_teacher, want_grad, softcap;
  int64_t ignore_index;
  double ce_weight, kl_weight, kl_scale, tau, inv_tau, eps, z_loss, cap;
  int prefetch;  // groups ahead asked of L2 (0: none; Note [Row kernel bandwidth])
};

// x rounded to T and read back (what a later pass reads after x is stored).
template <typename T>
__device__ __forceinline__ compute_t<T> rounded(compute_t<T> x) {
  T t;
  st(&t, x);
  return ld(&t);
}

// exp(from - to) for rescaling a running sum to a new max; 0 when nothing was summed yet.
__device__ __forceinline__ double rescale(double from, double to, double s) {
  return isinf(from) && from < 0 ? 0.0 : exp((from - to) * s);
}

// Note [One-pass row statistics]: every statistic of a row is a sum of exponentials
// relative to a max, so each thread keeps running sums relative to its running max and
// rescales them when the max grows (the online softmax); the block then rescales each
// thread's sums to the row max before adding them. One read of the row (two with the
// teacher's) gives lse, entropy, argmax, the teacher's lse and argmax and the KL sum:
//   forward KL = sum_j p_j (t_j - z_j) s - (lse_a - lse_b)     p = softmax(t s)
//   soft CE    = -sum_j p_j z_j s + lse_b
//   reverse KL = sum_j q_j (z_j - t_j) s + (lse_a - lse_b)     q = softmax(z s)
// A second pass writes the gradient. Sums run in double per thread (cheap next to the
// memory traffic), each pack's terms first added in the compute type; exponentials in the
// compute type.
//
// Note [Row kernel bandwidth]: the kernel is bound by HBM (a row of V = 248320 bf16 is
// 485 KiB; a 2048-row chunk 1 GiB, read twice and written once). What keeps it at
// bandwidth: (1) each thread issues kUnroll 16-byte loads (per operand) before using any,
// so enough bytes are in flight per SM; (2) several blocks per SM (__launch_bounds__), so
// one block's reductions between the passes overlap another's streaming: cross-entropy
// runs 2 blocks of 512 threads (64 registers), the teacher's variant (128 registers) 2
// blocks of 256 (CHUNKGRAD_HEAD_ROWS_THREADS=256|512 overrides both, for measuring:
// 256 gives cross-entropy 4 blocks of 256, 512 the teacher's one block of 512); (3) the
// block's statistics are reduced together (one pair of barriers for all sums, and one
// for both maxima and both argmaxes);
// (4) pass 2 walks the row backwards: what pass 1 read last is the likeliest still in L2
// (ncu on the H200, head_rows_bench --C 1536, KL + CE: 1.52 GB read for the two 763 MB
// operands, so pass 2 reads come from L2; 58% L2 hit rate. A later ncu, 2026-12-04, with
// the caches flushed before the kernel, saw 2.6 TB/s of DRAM traffic for 1.40 ms, about
// 3.6 GB with the gradient's 0.76: most of pass 2 then missed L2). Splitting each row over
// a cluster of 4 or 8 CTAs, so fewer rows are in flight, was measured and dropped: 1.38 and
// 1.64 ms against 1.13 in one run (2026-12-02); a cluster that holds its rows in shared
// memory instead is cuda/head_rows_cluster.cu (Note [Rows held on chip]).
// The teacher's variant holds 2 packs per operand in flight in each pass (its tiles of
// Note [Fast KL rows] fill its 128 registers); CHUNKGRAD_HEAD_ROWS_UNROLL=4 gives its pass
// 2 four (about 50 bytes of spills where the compiler puts them), for measuring; and
// CHUNKGRAD_HEAD_ROWS_PREFETCH=d makes every variant ask L2 for the group d ahead of the
// one it loads (prefetch.global.L2: no registers held), so that more of the row is in
// flight than the registers hold (on by default for the teacher's variant: Note [Row
// prefetch default]).
constexpr int kHeadThreads = 512;  // the most threads per row

// The per-thread running sums of pass 1 (Note [One-pass row statistics]).
struct RowSums {
  double se = 0, sez = 0, sz = 0;  // relative to m: sum e, sum e z; sum z
  double sb = 0, kb = 0;           // relative to m at temperature: sum e_s, sum e_s (z - t) s
  double sa = 0, ka = 0;           // relative to tm: sum e_t, sum e_t w
};

// Note [Fast KL rows]: forward KL (or soft CE) against a teacher at tau 1 -- the drafter's
// loss -- and cross-entropy alone take lean element loops, chosen once per tile by uniform
// flags; the general loops serve the rest (reverse KL, tau != 1; softcap in pass 2).
//   pass 1 per logit: e = 2^(z L + bz) and et = 2^(t L + bt), each one fma and one bare
//     ex2 (fast_exp2), then pe += e, pez += e max(z, lowest), pa += et,
//     pka += et max(t - z, lowest): the -inf guards are clamps, not branches (a -inf
//     logit gives e = 0 and a clamped finite factor, so the term is 0 and never NaN);
//   pass 2 per logit: q = 2^(z L - lse_z L), p = 2^(t L - lse_t L), then
//     d = fma(g_kl, q - p, fma(g_soft, q, -g_uniform)) -- no logarithms, and q - p taken
//     before scaling as in the general loop (it can cancel); the label's one-hot term (in
//     double) in a branch that one pack of the row takes.
// Both loops share the tile structure: the running maxima are taken over a tile of kTile
// packs before any exponential, so the running sums are rescaled (and the argmax looked
// for) at most once per tile, not per pack, and a tile's sums are added in fp32 and
// flushed into the per-thread double totals once per tile (a float-to-double conversion
// and a double add per sum, which cost as much as an exponential each). Cross-entropy's
// tile is one pack (its kernel holds 64 registers); the teacher's is its whole group of 2.
template <typename T, int N, bool kTeacher, int kThreads, int kBlocksPerSm, int kTeacherUnroll2 = 2>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    head_rows_kernel(T* logits, T* teacher, const int64_t* labels, int64_t C, int64_t V,
                     HeadParams p, const compute_t<T>* grad_scale, compute_t<T>* out_loss,
                     compute_t<T>* out_lse, compute_t<T>* out_entropy, int64_t* out_argmax,
                     int64_t* out_targmax) {
  using A = compute_t<T>;
  constexpr int kUnroll = kTeacher ? 2 : 4;  // packs in flight per operand per thread, pass 1
  constexpr int kUnroll2 = kTeacher ? kTeacherUnroll2 : 4;  // and pass 2
  // Packs whose values are held at once for the max-first step (Note [Fast KL rows]):
  // cross-entropy's 64 registers hold one.
  constexpr int kTile = kTeacher ? kUnroll : 1;
  constexpr A L = kExpScale<A>;
  __shared__ double sd[32 * 7];
  __shared__ A sa_max[64];
  __shared__ int64_t si[64];
  const A cap = static_cast<A>(p.cap), inv_cap = p.softcap ? A(1) / cap : A(0);
  const A s = static_cast<A>(p.inv_tau);
  const bool forward = static_cast<LossKind>(p.kind) == LossKind::forward_kl;
  const bool soft = static_cast<LossKind>(p.kind) == LossKind::soft_cross_entropy;
  const bool reverse = static_cast<LossKind>(p.kind) == LossKind::reverse_kl;
  const bool unit_tau = p.tau == 1.0;  // then e^((z - m) / tau) is e^(z - m)
  const A as = s * L;                  // exponent scale at temperature
  // The sums at temperature (sb, kb) serve reverse KL and lse_b at tau != 1 only.
  const bool need_b = reverse || !unit_tau;
  const bool need_sz = p.eps != 0.0;  // sum z serves label smoothing only
  // Note [Fast KL rows]. Pass 1 (0: the general loop, 1: forward KL or cross-entropy alone,
  // 2: soft CE) needs no sums at temperature; pass 2 also tau 1 and no softcap.
  const int fast1 = !kTeacher ? 1 : need_b ? 0 : forward ? 1 : soft ? 2 : 0;
  const bool fast2 = kTeacher && fast1 != 0 && unit_tau && !p.softcap;
  const int64_t packs = V / N;  // V % N == 0 (the launcher picks N so)
  const int64_t stride = static_cast<int64_t>(blockDim.x);
  const int64_t groups = (packs + stride * kUnroll - 1) / (stride * kUnroll);
  for (int64_t i = blockIdx.x; i < C; i += gridDim.x) {
    T* z = logits + i * V;
    T* t = kTeacher ? teacher + i * V : nullptr;
    const bool ignored = labels != nullptr && labels[i] == p.ignore_index;

    // ---- pass 1: softcap in place and the running statistics of this thread ----
    A m = -m_inf<A>(), tm = -m_inf<A>();
    int64_t arg = INT64_MAX, targ = INT64_MAX;
    // -m L and -tm s L (0 while the max is -inf, so that a -inf logit gives 2^-inf = 0)
    A bz = 0, bt = 0;
    RowSums r;
    for (int64_t g = 0; g < groups; ++g) {
      RawPack<T, N> zr[kUnroll], tr[kUnroll];
      load_group<T, N, kUnroll, kTeacher>(z, t, g, stride, packs, zr, tr);
      if (p.prefetch)
        prefetch_group<T, N, kUnroll, kTeacher>(z, t, g + p.prefetch, groups, stride, packs);
#pragma unroll
      for (int u0 = 0; u0 < kUnroll; u0 += kTile) {  // a tile of kTile packs
        A zv[kTile][N], tv[kTile][N];
        A gz = -m_inf<A>(), gt = -m_inf<A>();  // the tile's maxima (a NaN never wins)
        const int64_t pk0 = (g * kUnroll + u0) * stride + threadIdx.x;  // the tile's first pack
        // The packs of the tile that lie in the row: the first `live` (all but in the last group).
        const int64_t rest = pk0 < packs ? (packs - pk0 + stride - 1) / stride : 0;
        const int live = rest < kTile ? static_cast<int>(rest) : kTile;
#pragma unroll
        for (int u = 0; u < kTile; ++u) {
          if (u >= live) break;
          const int64_t j0 = (pk0 + u * stride) * N;
          // One operand's pack: unpacked, softcapped in place when asked (and stored back
          // for pass 2), and its max.
          auto take = [&](const auto& raw, A(&v)[N], T* row) {
            unpack<T, N>(raw, v);
            if (p.softcap) {
#pragma unroll
              for (int k = 0; k < N; ++k) v[k] = rounded<T>(cap * m_tanh(v[k] * inv_cap));
              store_pack<T, N>(row + j0, v);
            }
            return pack_max<A, N>(v);
          };
          gz = fmax(gz, take(zr[u0 + u], zv[u], z));
          if (kTeacher) gt = fmax(gt, take(tr[u0 + u], tv[u], t));
        }
        // The argmax is looked for only when the max grows (rare after the first tiles of a
        // row): the first pack of the tile holding it, then its first place there.
        auto first_at = [&](const A(&v)[kTile][N], A x) {
          int64_t at = INT64_MAX;
#pragma unroll
          for (int u = kTile - 1; u >= 0; --u) {
            const int k = u < live ? first_equal<A, N>(v[u], x) : N;
            if (k < N) at = (pk0 + u * stride) * N + k;
          }
          return at;
        };
        if (gz > m) {
          arg = first_at(zv, gz);
          const double f = rescale(m, gz, 1.0);
          r.se *= f;
          r.sez *= f;
          if (kTeacher && need_b) {
            const double fs = unit_tau ? f : rescale(m, gz, p.inv_tau);
            r.sb *= fs;
            r.kb *= fs;
          }
          m = gz;
          bz = -m * L;
        }
        if (kTeacher && gt > tm) {
          targ = first_at(tv, gt);
          const double f = rescale(tm, gt, p.inv_tau);
          r.sa *= f;
          r.ka *= f;
          tm = gt;
          bt = -tm * as;
        }
        // The tile's sums in the compute type, added to the double totals once per tile
        // (Note [Fast KL rows]).
        A pe = 0, pez = 0, pb = 0, pkb = 0, pa = 0, pka = 0;
        if (fast1 != 0) {  // Note [Fast KL rows]
#pragma unroll
          for (int u = 0; u < kTile; ++u) {
            if (u >= live) break;
#pragma unroll
            for (int k = 0; k < N; ++k) {
              const A zk = zv[u][k];
              const A e = exp_fma(zk, L, bz);
              pe += e;
              pez = fma(e, fmax(zk, kLowest<A>), pez);  // e = 0 at z = -inf
              if (!kTeacher) continue;
              const A tk = tv[u][k], et = exp_fma(tk, as, bt);
              pa += et;
              // et = 0 at t = -inf, where t - z is -inf or NaN: clamped, the term is 0
              if (fast1 == 1)
                pka = fma(et, fmax(tk - zk, kLowest<A>), pka);
              else if (tk != -m_inf<A>())  // soft CE: a -inf logit under teacher mass is +inf
                pka = fma(et, zk, pka);
            }
          }
        } else {
#pragma unroll
          for (int u = 0; u < kTile; ++u) {
            if (u >= live) break;
#pragma unroll
            for (int k = 0; k < N; ++k) {
              const A zk = zv[u][k];
              // A -inf logit adds e = 0 (computed, e * z would be 0 * -inf = NaN).
              const bool z_finite_below = zk != -m_inf<A>();
              A e = 0;
              if (z_finite_below) {
                e = exp_fma(zk, L, bz);
                pe += e;
                pez += e * zk;
              }
              if (kTeacher) {
                const A tk = tv[u][k];
                if (need_b && z_finite_below) {
                  const A es = unit_tau ? e : exp_fma(zk, as, -m * as);
                  pb += es;
                  pkb += es * ((zk - tk) * s);
                }
                if (tk != -m_inf<A>()) {
                  const A et = exp_fma(tk, as, bt);
                  pa += et;
                  pka += et * (soft ? zk : tk - zk);  // times s once per tile, below
                }
              }
            }
          }
        }
        if (need_sz) {
          A pz = 0;
#pragma unroll
          for (int u = 0; u < kTile; ++u) {
            if (u >= live) break;
#pragma unroll
            for (int k = 0; k < N; ++k) pz += zv[u][k];
          }
          r.sz += static_cast<double>(pz);
        }
        r.se += static_cast<double>(pe);
        r.sez += static_cast<double>(pez);
        if (kTeacher) {
          if (need_b) {
            r.sb += static_cast<double>(pb);
            r.kb += static_cast<double>(pkb);
          }
          r.sa += static_cast<double>(pa);
          r.ka += static_cast<double>(pka * s);
        }
      }
    }

    // ---- the block's statistics: maxima, then first argmaxes, then every sum at once ----
    A zmax = m, tmax = tm;
    int64_t first = INT64_MAX, tfirst = INT64_MAX;
    if (kTeacher) {  // both rows' maxima, then both argmaxes, one pair of barriers each
      block_reduce2(zmax, tmax, sa_max, -m_inf<A>(), MaxOp{});
      first = m == zmax ? arg : INT64_MAX;
      tfirst = tm == tmax ? targ : INT64_MAX;
      block_reduce2(first, tfirst, si, int64_t{INT64_MAX}, MinOp{});
    } else {
      zmax = block_max(m, sa_max);
      first = block_min_i64(m == zmax ? arg : INT64_MAX, si);
    }
    const double f = rescale(m, zmax, 1.0);
    double lse_a = 0.0, lse_b = 0.0, kl_loss = 0.0, sum_e = 0.0, sum_ez = 0.0, sum_z = 0.0;
    if (kTeacher) {
      const double fs = unit_tau ? f : rescale(m, zmax, p.inv_tau);
      const double ft = rescale(tm, tmax, p.inv_tau);
      double v[7] = {r.se * f, r.sez * f, r.sz, r.sb * fs, r.kb * fs, r.sa * ft, r.ka * ft};
      block_sums<7>(v, sd);
      sum_e = v[0], sum_ez = v[1], sum_z = v[2];
      const double sum_b = v[3], sum_kb = v[4], sum_a = v[5], sum_ka = v[6];
      const double lse0 = static_cast<double>(zmax) + log(sum_e);
      lse_a = static_cast<double>(tmax) * p.inv_tau + log(sum_a);
      lse_b = unit_tau ? lse0 : static_cast<double>(zmax) * p.inv_tau + log(sum_b);
      if (forward)
        kl_loss = sum_ka / sum_a - (lse_a - lse_b);
      else if (soft)
        kl_loss = -sum_ka / sum_a + lse_b;
      else if (reverse)
        kl_loss = sum_kb / sum_b + (lse_a - lse_b);
      if (threadIdx.x == 0 && out_targmax) out_targmax[i] = tfirst == INT64_MAX ? 0 : tfirst;
    } else {
      double v[3] = {r.se * f, r.sez * f, r.sz};
      block_sums<3>(v, sd);
      sum_e = v[0], sum_ez = v[1], sum_z = v[2];
    }
    const double lse = static_cast<double>(zmax) + log(sum_e);

    double ce_loss = 0.0;
    int64_t y = -1;
    A zy = 0;
    if (p.want_ce && !ignored) {
      y = labels[i];
      zy = ld(z + y);  // written (softcapped) in pass 1; the block reductions synchronised
      // Without smoothing sum_z is not used: a -inf logit would make it 0 * -inf = NaN
      // (Note [Masked logits] in cpu/head_loss_rows.cpp).
      const double smoothing = p.eps == 0.0 ? 0.0 : p.eps / static_cast<double>(V) * sum_z;
      ce_loss = lse - (1.0 - p.eps) * static_cast<double>(zy) - smoothing + p.z_loss * lse * lse;
    }
    if (threadIdx.x == 0) {
      const double loss =
          ignored ? 0.0 : p.ce_weight * ce_loss + p.kl_weight * p.kl_scale * kl_loss;
      if (out_loss) out_loss[i] = static_cast<A>(loss);
      if (out_lse) out_lse[i] = static_cast<A>(lse);
      if (out_entropy) out_entropy[i] = static_cast<A>(lse - sum_ez / sum_e);
      if (out_argmax) out_argmax[i] = first == INT64_MAX ? 0 : first;
    }
    if (!p.want_grad) continue;
    __syncthreads();  // every thread has read z[y] before any gradient overwrites it

    // ---- pass 2: the gradient over the logits, last group first (Note [Row kernel bandwidth]) ----
    const double gs = ignored                 ? 0.0
                      : grad_scale != nullptr ? static_cast<double>(grad_scale[i])
                                              : 1.0;
    const A g_soft = static_cast<A>(gs * p.ce_weight * (1.0 + 2.0 * p.z_loss * lse));
    const A g_uniform = static_cast<A>(gs * p.ce_weight * p.eps / static_cast<double>(V));
    const A g_kl = static_cast<A>(gs * p.kl_weight * p.kl_scale * p.inv_tau);
    const A lse_c = static_cast<A>(lse), lse_ac = static_cast<A>(lse_a),
            lse_bc = static_cast<A>(lse_b), kl_c = static_cast<A>(kl_loss);
    const A b_ce = -lse_c * kExpScale<A>, b_q = -lse_bc * kExpScale<A>,
            b_p = -lse_ac * kExpScale<A>;
    double onehot = gs * p.ce_weight * (1.0 - p.eps);
    if (p.softcap) {
      const double rr = static_cast<double>(zy) / p.cap;
      onehot *= 1.0 - rr * rr;
    }
    // Note [Fast KL rows]: d = g_ce q - g_uni + g_kl (q - p) at tau 1 (q is CE's softmax too).
    const A g_ce = p.want_ce ? g_soft : A(0), g_uni = p.want_ce ? g_uniform : A(0);
    const int64_t groups2 = (packs + stride * kUnroll2 - 1) / (stride * kUnroll2);
    for (int64_t g = groups2 - 1; g >= 0; --g) {
      RawPack<T, N> zr[kUnroll2], tr[kUnroll2];
      load_group<T, N, kUnroll2, kTeacher>(z, t, g, stride, packs, zr, tr);
      if (p.prefetch)
        prefetch_group<T, N, kUnroll2, kTeacher>(z, t, g - p.prefetch, groups2, stride, packs);
#pragma unroll
      for (int u = 0; u < kUnroll2; ++u) {
        const int64_t pk = (g * kUnroll2 + u) * stride + threadIdx.x;
        if (pk >= packs) continue;
        const int64_t j0 = pk * N;
        A zv[N], tv[N], d[N];
        unpack<T, N>(zr[u], zv);
        if (kTeacher) unpack<T, N>(tr[u], tv);
        if (kTeacher && fast2) {
#pragma unroll
          for (int k = 0; k < N; ++k) {
            const A q = exp_fma(zv[k], L, b_q), pt = exp_fma(tv[k], L, b_p);
            d[k] = fma(g_kl, q - pt, fma(g_ce, q, -g_uni));  // q - p as the general loop
          }
        } else {
#pragma unroll
          for (int k = 0; k < N; ++k) {
            const A zj = zv[k];
            A dk = 0;
            // q = softmax(z / tau)_j; at tau 1 it is CE's softmax too (lse_b is lse then).
            const A q = kTeacher ? exp_fma(zj, as, b_q) : A(0);
            if (p.want_ce)
              dk += g_soft * (kTeacher && unit_tau ? q : exp_fma(zj, L, b_ce)) - g_uniform;
            if (kTeacher) {
              if (reverse) {
                const A log_p = tv[k] * s - lse_ac, log_q = zj * s - lse_bc;
                dk += g_kl * q * ((log_q - log_p) - kl_c);
              } else {
                dk += g_kl * (q - exp_fma(tv[k], as, b_p));
              }
            }
            if (p.softcap) {
              const A rr = zj * inv_cap;
              dk *= A(1) - rr * rr;
            }
            d[k] = dk;
          }
        }
        // The label's one-hot term, in double (it cancels most of d there): one pack of the
        // row takes this branch.
        const int64_t y_at = y - j0;  // the label's place in this pack, when in [0, N)
        if (y_at >= 0 && y_at < N) {
          const int yk = static_cast<int>(y_at);
#pragma unroll
          for (int k = 0; k < N; ++k)
            if (k == yk) d[k] = static_cast<A>(static_cast<double>(d[k]) - onehot);
        }
        store_pack<T, N>(z + j0, d);
      }
    }
  }
}

// The value of environment variable `name` when it is one of `allowed`, else `fallback`.
int env_choice(const char* name, std::initializer_list<int> allowed, int fallback) {
  const char* e = std::getenv(name);
  if (e == nullptr) return fallback;
  const std::string s(e);
  for (int a : allowed) {
    if (s == std::to_string(a)) return a;
  }
  return fallback;
}

// CHUNKGRAD_HEAD_ROWS_THREADS=256 or 512 (0 when unset or anything else): read once.
int threads_override() {
  static const int v = env_choice("CHUNKGRAD_HEAD_ROWS_THREADS", {256, 512}, 0);
  return v;
}

// CHUNKGRAD_HEAD_ROWS_UNROLL=2 or 4 (0 when unset or anything else): packs per operand a
// thread of the teacher's variant loads at once in pass 2 (Note [Row kernel bandwidth]).
// Read once.
int unroll_override() {
  static const int v = env_choice("CHUNKGRAD_HEAD_ROWS_UNROLL", {2, 4}, 0);
  return v;
}

// CHUNKGRAD_HEAD_ROWS_PREFETCH=0..4: groups ahead of its loads each thread asks L2 for
// (-1 when unset or anything else: the variant's default). Read once.
int prefetch_override() {
  static const int v = env_choice("CHUNKGRAD_HEAD_ROWS_PREFETCH", {0, 1, 2, 3, 4}, -1);
  return v;
}

// Note [Row prefetch default]: measured on the H200 at C = 1536, V = 248320, bf16
// (head_rows_bench, one run, 20 repeats): forward KL + CE + gradient 1.235 ms without the
// L2 prefetch, 1.123 ms with the group 2 ahead; cross-entropy + gradient 0.821 ms without,
// 0.865 ms with. So the teacher variant prefetches 2 groups ahead, cross-entropy none.
constexpr int kTeacherPrefetch = 2;

// The kinds the kernel above computes. One case per kind and no default: a kind added
// to LossKind makes the host compiler warn here (-Wswitch), and until it has a case the
// launcher throws rather than run a kernel that would compute another loss.
bool kernel_has_kind(LossKind kind) {
  switch (kind) {
    case LossKind::cross_entropy:
    case LossKind::forward_kl:
    case LossKind::reverse_kl:
    case LossKind::soft_cross_entropy: return true;
  }
  return false;
}

}  // namespace

void launch_head_loss_rows(DType dtype, void* logits, void* teacher, const int64_t* labels,
                           int64_t C, int64_t V, const LossConfig& cfg, bool want_grad,
                           const void* grad_scale, const HeadRowPointers& out,
                           cudaStream_t stream) {
  if (C == 0) return;
  CG_CHECK(kernel_has_kind(cfg.kind), "head loss: the CUDA row kernel does not compute ",
           loss_kind_name(cfg.kind),
           " (cuda/head_loss_kernels.cu; Note [Adding a loss kind], ops/loss_config.h)");
  check_loss_row_inputs(cfg, teacher != nullptr, labels != nullptr);
  // The drafter's loss at a large vocabulary: rows held on chip (Note [Rows held on chip]).
  if (launch_head_rows_cluster(dtype, logits, teacher, labels, C, V, cfg, want_grad, grad_scale,
                               out, stream))
    return;
  const LossRowTerms terms = loss_row_terms(cfg);
  HeadParams p;
  p.kind = static_cast<int>(cfg.kind);
  p.want_teacher = terms.want_teacher;
  p.want_ce = terms.want_ce;
  p.want_grad = want_grad;
  p.softcap = cfg.softcap > 0.0f;
  p.ignore_index = cfg.ignore_index;
  p.ce_weight = terms.ce_weight;
  p.kl_weight = terms.kl_weight;
  p.tau = terms.tau;
  p.inv_tau = terms.inv_tau;
  p.kl_scale = terms.kl_scale;
  p.eps = cfg.label_smoothing;
  p.z_loss = cfg.z_loss;
  p.cap = cfg.softcap;
  p.prefetch =
      prefetch_override() >= 0 ? prefetch_override() : (terms.want_teacher ? kTeacherPrefetch : 0);
  // Threads per row (block): Note [Row kernel bandwidth]; short rows take fewer.
  const int wide = threads_override() ? threads_override() : (p.want_teacher ? 256 : kHeadThreads);
  const int threads = V >= 8192 ? wide : (V >= 2048 ? 256 : 32);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(C, 1 << 20));
  visit_floating(dtype, "head loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    constexpr int kPack = static_cast<int>(16 / sizeof(T));
    // 16-byte packs when every row starts 16-byte aligned (Note [One-pass row statistics]).
    const bool packed = V % kPack == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0 &&
                        (teacher == nullptr || reinterpret_cast<uintptr_t>(teacher) % 16 == 0);
    auto launch = [&](auto kernel, int most_threads) {
      CG_CHECK(threads <= most_threads, "head loss: ", threads, " threads for a kernel built for ",
               most_threads);
      kernel<<<blocks, threads, 0, stream>>>(
          static_cast<T*>(logits), static_cast<T*>(teacher), labels, C, V, p,
          static_cast<const A*>(grad_scale), static_cast<A*>(out.loss), static_cast<A*>(out.lse),
          static_cast<A*>(out.entropy), out.argmax, out.teacher_argmax);
    };
    // The teacher's statistics are a separate instantiation: cross-entropy alone then needs
    // fewer registers per thread, so more rows run at once.
    // 512 threads per SM for the teacher's variant (128 registers each), 1024 for
    // cross-entropy's (64): Note [Row kernel bandwidth].
    const bool narrow = wide == 256;
    const bool deep = unroll_override() == 4;
    if (p.want_teacher) {
      if (!packed)
        launch(head_rows_kernel<T, 1, true, 512, 1>, 512);
      else if (narrow)
        launch(deep ? head_rows_kernel<T, kPack, true, 256, 2, 4>
                    : head_rows_kernel<T, kPack, true, 256, 2, 2>,
               256);
      else
        launch(deep ? head_rows_kernel<T, kPack, true, 512, 1, 4>
                    : head_rows_kernel<T, kPack, true, 512, 1, 2>,
               512);
    } else {
      if (!packed)
        launch(head_rows_kernel<T, 1, false, 512, 1>, 512);
      else if (narrow)
        launch(head_rows_kernel<T, kPack, false, 256, 4>, 256);
      else
        launch(head_rows_kernel<T, kPack, false, 512, 2>, 512);
    }
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
