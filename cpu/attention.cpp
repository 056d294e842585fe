// Why this file exists: scaled dot-product attention on the CPU as one fused kernel, so
// that training a DFlash drafter against thousands of context keys never holds a score
// matrix: the forward keeps one row of scores at a time and saves only the per-row
// logsumexp; the backward rebuilds each row's probabilities from it (FlashAttention's
// recipe, one query row at a time instead of tiles).
//
// Note [CPU attention costs]:
// - Work: per query row, O(visible keys * hd) -- the mask's key ranges decide which keys
//   are scored at all (a DFlash block row touches anchor + block_size keys, not Sk).
//   Forward: two matrix-vector products per row (scores = K q, out = V^T p). Backward:
//   four (s = K q, dp = V dO, dq = K^T ds, plus rank-1 updates dK += ds q^T, dV += p dO^T).
// - Memory: no [Sq, Sk] buffer anywhere. Scratch is (Sk + hd) values per thread in the
//   forward and 2 * Sk in the backward, taken once per call from the allocator as one
//   [threads, ...] tensor. Besides the results (out [B, Hq, Sq, hd], lse [B, Hq, Sq];
//   dq, dk, dv), the only temporaries are compute-type contiguous copies of inputs that
//   are 16-bit or non-contiguous (O(B * H * S * hd)), and f32 gradient accumulators for
//   16-bit inputs. A dense bool mask is read in place (strided, broadcast).
// - Compute type: f64 for f64 inputs, f32 otherwise (bf16/f16 are converted on entry and
//   the output rounded once at the end), as in cpu/loops.h's Note [Compute types].
// - Threads: the forward splits over (batch, head, query row), dealt out round-robin
//   (thread w takes rows w, w + threads, ...) so that a causal mask's long rows are shared
//   evenly; the scratch slot is the pool's worker index. The backward splits over
//   (batch, kv head): one thread owns a kv head's dk/dv rows and the dq rows of every
//   query head in its group, so nothing is written by two threads and no per-thread
//   gradient copies exist. Its parallelism is B * Hkv; when that is below the core count
//   a FlashAttention-2-style split (a dq pass over query rows, a dk/dv pass over keys)
//   is the way to use the rest.
// - Saved for backward (ops/attention.cpp): q, k, v, out and lse -- O(B * H * S * hd)
//   bytes plus 4 (8 for f64) per query row -- and a dense mask when one was given; never
//   the probabilities.
// - A row that sees no key (padded DFlash block, all-false mask row, causal row with
//   Sq > Sk) has output 0, lse -inf, and contributes no gradient: no NaN.
#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"
#include "cpu/thread_pool.h"
#include "ops/compute_copy.h"

namespace cg::cpu {

namespace {

template <typename C>
using ConstRows =
    Eigen::Map<const Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <typename C>
using Rows = Eigen::Map<Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <typename C>
using ConstVec = Eigen::Map<const Eigen::Matrix<C, Eigen::Dynamic, 1>>;
template <typename C>
using Vec = Eigen::Map<Eigen::Matrix<C, Eigen::Dynamic, 1>>;

// Multiply-adds (rows x keys x head dim) below which a call stays on one thread.
constexpr int64_t kParallelWork = int64_t{1} << 15;

struct AttentionDims {
  int64_t B, Hq, Hkv, group, Sq, Sk, hd;
};

AttentionDims dims_of(const Tensor& q, const Tensor& k) {
  AttentionDims d;
  d.B = q.shape()[0];
  d.Hq = q.shape()[1];
  d.Sq = q.shape()[2];
  d.hd = q.shape()[3];
  d.Hkv = k.shape()[1];
  d.Sk = k.shape()[2];
  d.group = d.Hkv > 0 ? d.Hq / d.Hkv : 1;
  return d;
}

// Writes scale * K_r q for every visible key of the row into s (packed, range after
// range) and returns how many; keys a dense mask forbids get -inf.
template <typename C>
int64_t row_scores(C* s, const KeyRanges& ranges, const C* kb, const C* qi, int64_t hd, C scale,
                   const ResolvedAttentionMask& mask, const bool* allowed, int64_t b, int64_t h,
                   int64_t i) {
  int64_t n = 0;
  for (int r = 0; r < ranges.count; ++r) {
    const int64_t begin = ranges.begin[r], len = ranges.end[r] - begin;
    Vec<C>(s + n, len).noalias() =
        scale * (ConstRows<C>(kb + begin * hd, len, hd) * ConstVec<C>(qi, hd));
    if (allowed != nullptr) {
      for (int64_t j = 0; j < len; ++j) {
        if (!mask.allows(allowed, b, h, i, begin + j)) {
          s[n + j] = -std::numeric_limits<C>::infinity();
        }
      }
    }
    n += len;
  }
  return n;
}

template <typename T>
AttentionForward forward_typed(const Tensor& q, const Tensor& k, const Tensor& v,
                               const ResolvedAttentionMask& mask, double scale_d) {
  using C = compute_t<T>;
  const DType cd = dtype_of<C>();
  const AttentionDims d = dims_of(q, k);
  const Tensor qc = compute_copy(q, cd), kc = compute_copy(k, cd), vc = compute_copy(v, cd);
  AttentionForward result;
  result.out = raw::empty({d.B, d.Hq, d.Sq, d.hd}, q.dtype(), q.device());
  result.lse = raw::empty({d.B, d.Hq, d.Sq}, cd, q.device());
  const int64_t stride = d.Sk + d.hd;  // per thread: scores [Sk], accumulator [hd]
  const int64_t threads = num_threads();
  const Tensor scratch = raw::empty({threads, stride}, cd, q.device());

  const C* qp = qc.data<C>();
  const C* kp = kc.data<C>();
  const C* vp = vc.data<C>();
  T* op = result.out.data<T>();
  C* lsep = result.lse.data<C>();
  C* sp = scratch.data<C>();
  const bool* allowed = mask.allowed.defined() ? mask.allowed.data<bool>() : nullptr;
  const C scale = static_cast<C>(scale_d);
  const int64_t rows = d.B * d.Hq * d.Sq, hd = d.hd;

  // Piece w of [0, lanes) handles the rows congruent to w modulo `lanes`.
  const int64_t lanes =
      rows * std::max<int64_t>(d.Sk, 1) * hd >= kParallelWork ? std::min(rows, threads) : 1;
  parallel_for(lanes, [&](int64_t lane_begin, int64_t lane_end, int worker) {
    for (int64_t lane = lane_begin; lane < lane_end; ++lane)
      for (int64_t row = lane; row < rows; row += lanes) {
        const int64_t i = row % d.Sq, h = (row / d.Sq) % d.Hq, b = row / (d.Sq * d.Hq);
        const int64_t kv_offset = (b * d.Hkv + h / d.group) * d.Sk * hd;
        C* s = sp + worker * stride;
        C* acc = s + d.Sk;
        T* o = op + row * hd;
        const KeyRanges ranges = mask.key_ranges(b, i);
        const int64_t n =
            row_scores(s, ranges, kp + kv_offset, qp + row * hd, hd, scale, mask, allowed, b, h, i);
        C m = -std::numeric_limits<C>::infinity();
        for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
        if (m == -std::numeric_limits<C>::infinity()) {  // sees nothing: output 0
          for (int64_t e = 0; e < hd; ++e) store(o + e, C(0));
          lsep[row] = m;
          continue;
        }
        Vec<C> p(s, n);
        p = (p.array() - m).exp();
        const C l = p.sum();
        Vec<C> a(acc, hd);
        a.setZero();
        int64_t at = 0;
        for (int r = 0; r < ranges.count; ++r) {
          const int64_t begin = ranges.begin[r], len = ranges.end[r] - begin;
          a.noalias() +=
              ConstRows<C>(vp + kv_offset + begin * hd, len, hd).transpose() * p.segment(at, len);
          at += len;
        }
        const C inv_l = C(1) / l;
        for (int64_t e = 0; e < hd; ++e) store(o + e, acc[e] * inv_l);
        lsep[row] = m + std::log(l);
      }
  });
  return result;
}

template <typename T>
AttentionGrads backward_typed(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& out, const Tensor& lse,
                              const ResolvedAttentionMask& mask, double scale_d, bool need_dq,
                              bool need_dk, bool need_dv) {
  using C = compute_t<T>;
  const DType cd = dtype_of<C>();
  const AttentionDims d = dims_of(q, k);
  const Tensor qc = compute_copy(q, cd), kc = compute_copy(k, cd), vc = compute_copy(v, cd);
  const Tensor oc = compute_copy(out, cd), gc = compute_copy(grad_out, cd);
  const Tensor lc = compute_copy(lse, cd);
  Tensor dq, dk, dv;  // compute type; rounded to T at the end
  if (need_dq) dq = raw::empty(q.shape(), cd, q.device());
  if (need_dk) {
    dk = raw::empty(k.shape(), cd, k.device());
    raw::fill_(dk, 0.0);
  }
  if (need_dv) {
    dv = raw::empty(v.shape(), cd, v.device());
    raw::fill_(dv, 0.0);
  }
  const Tensor scratch = raw::empty({num_threads(), 2 * d.Sk}, cd, q.device());

  const C* qp = qc.data<C>();
  const C* kp = kc.data<C>();
  const C* vp = vc.data<C>();
  const C* opp = oc.data<C>();
  const C* gp = gc.data<C>();
  const C* lsep = lc.data<C>();
  C* dqp = need_dq ? dq.data<C>() : nullptr;
  C* dkp = need_dk ? dk.data<C>() : nullptr;
  C* dvp = need_dv ? dv.data<C>() : nullptr;
  C* sp = scratch.data<C>();
  const bool* allowed = mask.allowed.defined() ? mask.allowed.data<bool>() : nullptr;
  const C scale = static_cast<C>(scale_d);
  const int64_t hd = d.hd, kv_heads = d.B * d.Hkv;

  auto kv_head_pairs = [&](int64_t pair_begin, int64_t pair_end, int worker) {
    for (int64_t pair = pair_begin; pair < pair_end; ++pair) {
      const int64_t b = pair / d.Hkv, hk = pair % d.Hkv;
      const int64_t kv_offset = pair * d.Sk * hd;
      C* p_buf = sp + worker * 2 * d.Sk;
      C* ds_buf = p_buf + d.Sk;
      for (int64_t g = 0; g < d.group; ++g) {
        const int64_t h = hk * d.group + g;
        for (int64_t i = 0; i < d.Sq; ++i) {
          const int64_t row = (b * d.Hq + h) * d.Sq + i;
          const C L = lsep[row];
          if (dqp != nullptr) Vec<C>(dqp + row * hd, hd).setZero();
          if (L == -std::numeric_limits<C>::infinity()) continue;  // sees nothing
          const ConstVec<C> qi(qp + row * hd, hd), doi(gp + row * hd, hd);
          const C Di = doi.dot(ConstVec<C>(opp + row * hd, hd));
          const KeyRanges ranges = mask.key_ranges(b, i);
          const int64_t n = row_scores(p_buf, ranges, kp + kv_offset, qp + row * hd, hd, scale,
                                       mask, allowed, b, h, i);
          Vec<C> p(p_buf, n), ds(ds_buf, n);
          p = (p.array() - L).exp();
          int64_t at = 0;
          for (int r = 0; r < ranges.count; ++r) {  // dp = V_r dO
            const int64_t begin = ranges.begin[r], len = ranges.end[r] - begin;
            ds.segment(at, len).noalias() =
                ConstRows<C>(vp + kv_offset + begin * hd, len, hd) * doi;
            at += len;
          }
          ds = p.cwiseProduct((ds.array() - Di).matrix());
          at = 0;
          for (int r = 0; r < ranges.count; ++r) {
            const int64_t begin = ranges.begin[r], len = ranges.end[r] - begin;
            const ConstRows<C> kr(kp + kv_offset + begin * hd, len, hd);
            if (dqp != nullptr) {
              Vec<C>(dqp + row * hd, hd).noalias() +=
                  scale * (kr.transpose() * ds.segment(at, len));
            }
            if (dkp != nullptr) {
              Rows<C>(dkp + kv_offset + begin * hd, len, hd).noalias() +=
                  (scale * ds.segment(at, len)) * qi.transpose();
            }
            if (dvp != nullptr) {
              Rows<C>(dvp + kv_offset + begin * hd, len, hd).noalias() +=
                  p.segment(at, len) * doi.transpose();
            }
            at += len;
          }
        }
      }
    }
  };
  if (kv_heads * d.group * d.Sq * std::max<int64_t>(d.Sk, 1) * hd >= kParallelWork) {
    parallel_for(kv_heads, kv_head_pairs);
  } else {
    kv_head_pairs(0, kv_heads, 0);
  }
  AttentionGrads grads;
  if (need_dq) grads.dq = raw::to_dtype(dq, q.dtype());
  if (need_dk) grads.dk = raw::to_dtype(dk, k.dtype());
  if (need_dv) grads.dv = raw::to_dtype(dv, v.dtype());
  return grads;
}

}  // namespace

AttentionForward CpuKernels::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                               const ResolvedAttentionMask& mask, double scale) {
  return dispatch_floating(q.dtype(), "scaled_dot_product_attention",
                           [&]<typename T>() { return forward_typed<T>(q, k, v, mask, scale); });
}

AttentionGrads CpuKernels::attention_backward(const Tensor& grad_out, const Tensor& q,
                                              const Tensor& k, const Tensor& v, const Tensor& out,
                                              const Tensor& lse, const ResolvedAttentionMask& mask,
                                              double scale, bool need_dq, bool need_dk,
                                              bool need_dv) {
  return dispatch_floating(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    return backward_typed<T>(grad_out, q, k, v, out, lse, mask, scale, need_dq, need_dk, need_dv);
  });
}

}  // namespace cg::cpu
