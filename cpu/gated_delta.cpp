// Why this file exists: the CPU's Gated DeltaNet kernels (CpuKernels::gated_delta_rule and
// CpuKernels::causal_conv1d, cpu/cpu_kernels.h): the reference every other device is
// checked against (tests/backend_compare_test.cpp, the CUDA tests), so it is written as
// the math reads, one token after another, with no chunking.
//
// gated_delta_rule, per (batch row b, value head h), key head kh = h / (Hv / Hk) (each key
// head serves Hv / Hk consecutive value heads: transformers' repeat_interleave), with the
// state S [dk, dv] in the compute type (float; double for f64 inputs), per token t:
//   kn = l2norm(k[b, t, kh]),  qn = l2norm(q[b, t, kh]) * scale   (l2norm optional)
//   S  = exp(g[b, t, h]) * S
//   u  = beta[b, t, h] * (v[b, t, h] - S^T kn)     [dv]: what kn should read, minus what it reads
//   S += kn u^T
//   out[b, t, h] = S^T qn
// l2norm(x) = x / sqrt(sum(x^2) + 1e-6), in the compute type (fp32 as transformers and fla).
// Each (b, h) is one task of the thread pool and touches only its own state and outputs,
// so the result does not depend on the number of threads (Note [Deterministic threads]).
//
// causal_conv1d: out[b, t, c] = act(sum_j w[c, j] * xx[b, t + j, c]) with xx the K-1
// history rows followed by x; each (b, t) row of C channels is one task.
#include <cmath>
#include <vector>

#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"
#include "cpu/parallel.h"

namespace cg::cpu {

namespace {

constexpr double kL2NormEps = 1e-6;

// x[0..n) *= 1 / sqrt(sum(x^2) + eps), then *= extra.
template <typename C>
void l2_normalise(C* x, int64_t n, bool normalise, C extra) {
  C factor = extra;
  if (normalise) {
    C sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
    factor = extra / std::sqrt(sum + static_cast<C>(kL2NormEps));
  }
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

template <typename C>
C silu_of(C x) {
  return x / (C(1) + std::exp(-x));
}

}  // namespace

Tensor CpuKernels::gated_delta_rule(const GatedDeltaArgs& a) {
  const int64_t B = a.q.size(0), T = a.q.size(1), Hk = a.q.size(2), dk = a.q.size(3);
  const int64_t Hv = a.v.size(2), dv = a.v.size(3), group = Hv / Hk;
  Tensor out = raw::empty({B, T, Hv, dv}, a.v.dtype(), a.v.device());
  const float* g = a.g.data<float>();
  const float* beta = a.beta.data<float>();
  float* state = a.state.data<float>();
  dispatch_floating(a.v.dtype(), "gated_delta_rule", [&]<typename Elem>() {
    using C = compute_t<Elem>;
    const Elem* q = static_cast<const Elem*>(a.q.data_ptr());
    const Elem* k = static_cast<const Elem*>(a.k.data_ptr());
    const Elem* v = static_cast<const Elem*>(a.v.data_ptr());
    Elem* o = static_cast<Elem*>(out.data_ptr());
    const C scale = static_cast<C>(a.scale);
    const int64_t pairs = B * Hv;
    parallel_range(pairs, pairs * T * dk * dv * 4, [&](int64_t begin, int64_t end) {
      std::vector<C> S(static_cast<size_t>(dk * dv)), qn(dk), kn(dk), u(dv), out_row(dv);
      for (int64_t pair = begin; pair < end; ++pair) {
        const int64_t b = pair / Hv, h = pair % Hv, kh = h / group;
        float* s_io = state + pair * dk * dv;  // [b, h] of [B, Hv, dk, dv]
        for (int64_t i = 0; i < dk * dv; ++i) S[i] = static_cast<C>(s_io[i]);
        for (int64_t t = 0; t < T; ++t) {
          const int64_t qk_row = ((b * T + t) * Hk + kh) * dk;  // [b, t, kh, :]
          const int64_t v_row = ((b * T + t) * Hv + h) * dv;    // [b, t, h, :]
          const int64_t gate = (b * T + t) * Hv + h;            // [b, t, h]
          for (int64_t i = 0; i < dk; ++i) {
            qn[i] = load(q + qk_row + i);
            kn[i] = load(k + qk_row + i);
          }
          l2_normalise(qn.data(), dk, a.l2norm_qk, scale);
          l2_normalise(kn.data(), dk, a.l2norm_qk, C(1));
          const C decay = std::exp(static_cast<C>(g[gate]));
          const C beta_t = static_cast<C>(beta[gate]);
          // S = decay * S; u = beta * (v - S^T kn).
          for (int64_t j = 0; j < dv; ++j) u[j] = 0;
          for (int64_t i = 0; i < dk; ++i) {
            C* row = S.data() + i * dv;
            for (int64_t j = 0; j < dv; ++j) {
              row[j] *= decay;
              u[j] += row[j] * kn[i];
            }
          }
          for (int64_t j = 0; j < dv; ++j) u[j] = beta_t * (load(v + v_row + j) - u[j]);
          // S += kn u^T; out = S^T qn.
          for (int64_t i = 0; i < dk; ++i) {
            C* row = S.data() + i * dv;
            for (int64_t j = 0; j < dv; ++j) row[j] += kn[i] * u[j];
          }
          for (int64_t j = 0; j < dv; ++j) out_row[j] = 0;
          for (int64_t i = 0; i < dk; ++i) {
            const C* row = S.data() + i * dv;
            for (int64_t j = 0; j < dv; ++j) out_row[j] += row[j] * qn[i];
          }
          for (int64_t j = 0; j < dv; ++j) store(o + v_row + j, out_row[j]);
        }
        for (int64_t i = 0; i < dk * dv; ++i) s_io[i] = static_cast<float>(S[i]);
      }
    });
  });
  return out;
}

Tensor CpuKernels::causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& history,
                                 bool silu) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), K = weight.size(1);
  Tensor out = raw::empty(x.shape(), x.dtype(), x.device());
  dispatch_floating(x.dtype(), "causal_conv1d", [&]<typename Elem>() {
    using Acc = compute_t<Elem>;
    const Elem* px = static_cast<const Elem*>(x.data_ptr());
    const Elem* pw = static_cast<const Elem*>(weight.data_ptr());
    const Elem* ph = history.defined() ? static_cast<const Elem*>(history.data_ptr()) : nullptr;
    Elem* po = static_cast<Elem*>(out.data_ptr());
    parallel_range(B * T, B * T * C * K, [&](int64_t begin, int64_t end) {
      std::vector<Acc> acc(static_cast<size_t>(C));
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / T, t = row % T;
        for (int64_t c = 0; c < C; ++c) acc[c] = 0;
        // Tap j reads position p = t + j - (K-1) of x: a history row when p < 0 (zeros
        // without history).
        for (int64_t j = 0; j < K; ++j) {
          const int64_t p = t + j - (K - 1);
          const Elem* src = nullptr;
          if (p >= 0) {
            src = px + (b * T + p) * C;
          } else if (ph != nullptr) {
            src = ph + (b * (K - 1) + (K - 1) + p) * C;
          }
          if (src == nullptr) continue;
          for (int64_t c = 0; c < C; ++c) acc[c] += load(pw + c * K + j) * load(src + c);
        }
        Elem* dst = po + row * C;
        for (int64_t c = 0; c < C; ++c) store(dst + c, silu ? silu_of(acc[c]) : acc[c]);
      }
    });
  });
  return out;
}

}  // namespace cg::cpu
