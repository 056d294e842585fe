// Why this file exists: the CPU implementation of head_loss_rows (the math per row is
// ops/loss_row_math.h's). Each row takes a few streaming passes over V -- softcap, max, sums of
// exponentials, the teacher terms, then the gradient written in place -- each a simple
// loop over a contiguous row that compiles to packed vector code (cpu/row_math.h:
// a polynomial exp, float lanes summed into double per block, Note [Row sums]).
#include "cpu/head_loss_rows.h"

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/parallel.h"
#include "cpu/row_math.h"

namespace cg::cpu {

namespace {

// z = c tanh(z / c), Eigen's vectorised tanh.
template <typename T>
void softcap_row(T* z, int64_t V, T c) {
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> a(z, V);
  a = c * (a * (T(1) / c)).tanh();
}

// log sum_j exp((x_j - max) * inv_tau) + max * inv_tau.
template <typename T>
double scaled_lse(const T* x, int64_t V, T max, double inv_tau) {
  const T s = static_cast<T>(inv_tau);
  const double sum = block_sum<T>(V, [&](int64_t j) { return exp_fast((x[j] - max) * s); });
  return max * inv_tau + std::log(sum);
}

// What the gradient pass needs, per row.
template <typename T>
struct GradTerms {
  T g_soft;     // g * ce_soft: times e^(z - lse)
  T g_uniform;  // g * ce_uniform: subtracted everywhere
  T lse;
  T g_kl;  // g * kl_factor
  T inv_tau, lse_a, lse_b, kl_loss;
  T inv_cap;  // 1 / softcap
};

// z_j <- g * d loss / d z_raw_j for every j but the label's one-hot term (added after).
template <typename T, bool kCE, bool kTeacher, bool kReverse, bool kSoftcap>
void grad_row(T* z, const T* t, int64_t V, const GradTerms<T>& k) {
  for (int64_t j = 0; j < V; ++j) {
    const T zj = z[j];
    T d = 0;
    if constexpr (kCE) d += k.g_soft * exp_fast(zj - k.lse) - k.g_uniform;
    if constexpr (kTeacher) {
      const T log_p = t[j] * k.inv_tau - k.lse_a, log_q = zj * k.inv_tau - k.lse_b;
      const T q = exp_fast(log_q);
      if constexpr (kReverse)
        d += k.g_kl * q * ((log_q - log_p) - k.kl_loss);
      else
        d += k.g_kl * (q - exp_fast(log_p));
    }
    if constexpr (kSoftcap) {
      const T r = zj * k.inv_cap;
      d *= T(1) - r * r;
    }
    z[j] = d;
  }
}

template <typename T, bool kCE, bool kTeacher>
void grad_row_for(T* z, const T* t, int64_t V, const GradTerms<T>& k, bool reverse, bool softcap) {
  if (reverse) {
    if (softcap)
      grad_row<T, kCE, kTeacher, true, true>(z, t, V, k);
    else
      grad_row<T, kCE, kTeacher, true, false>(z, t, V, k);
  } else {
    if (softcap)
      grad_row<T, kCE, kTeacher, false, true>(z, t, V, k);
    else
      grad_row<T, kCE, kTeacher, false, false>(z, t, V, k);
  }
}

template <typename T>
void grad_row_any(T* z, const T* t, int64_t V, const GradTerms<T>& k, bool ce, bool teacher,
                  bool reverse, bool softcap) {
  if (ce && teacher)
    grad_row_for<T, true, true>(z, t, V, k, reverse, softcap);
  else if (ce)
    grad_row_for<T, true, false>(z, t, V, k, false, softcap);
  else if (teacher)
    grad_row_for<T, false, true>(z, t, V, k, reverse, softcap);
  else
    grad_row_for<T, false, false>(z, t, V, k, false, softcap);
}

}  // namespace

void check_head_labels(const int64_t* labels, int64_t C, int64_t V, int64_t ignore_index) {
  for (int64_t i = 0; i < C; ++i) {
    CG_CHECK(labels[i] == ignore_index || (labels[i] >= 0 && labels[i] < V), "head loss: label ",
             labels[i], " at row ", i, " is out of range for a vocabulary of ", V,
             " (labels must be in [0, ", V, ") or ignore_index=", ignore_index, " to skip a row)");
  }
}

template <typename T>
void head_loss_rows(T* logits, T* teacher, const int64_t* labels, int64_t C, int64_t V,
                    const LossConfig& cfg, bool want_grad, const T* grad_scale,
                    const HeadRowOutputs<T>& out) {
  check_loss_row_inputs(cfg, teacher != nullptr, labels != nullptr);
  const LossRowTerms row_terms = loss_row_terms(cfg);
  const bool want_teacher = row_terms.want_teacher, want_ce = row_terms.want_ce;
  const double ce_weight = row_terms.ce_weight, kl_weight = row_terms.kl_weight;
  const double tau = row_terms.tau, inv_tau = row_terms.inv_tau, kl_scale = row_terms.kl_scale;
  const double eps = cfg.label_smoothing;
  const bool softcap = cfg.softcap > 0.0f;
  const T cap = static_cast<T>(cfg.softcap);

  // Labels are checked up front: no exception may leave the parallel loop.
  if (labels != nullptr) check_head_labels(labels, C, V, cfg.ignore_index);

  parallel_range(C, C * V, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t i = row_begin; i < row_end; ++i) {
      T* z = logits + i * V;
      T* t_raw = want_teacher ? teacher + i * V : nullptr;
      const bool ignored = labels != nullptr && labels[i] == cfg.ignore_index;
      if (softcap) softcap_row(z, V, cap);

      const T zmax = row_max(z, V);
      // Note [Masked logits]: a -inf logit (a masked token) has probability 0, and its
      // terms in every sum below are 0, not 0 * -inf = NaN: each product of a probability
      // and a logit is taken only where the probability is not 0. sum_z is used only with
      // label smoothing, where a -inf logit makes the loss +inf, as in PyTorch.
      const auto [sum_e, sum_ez, sum_z] = block_sums<T, 3>(V, [&](int64_t j) {
        const T e = exp_fast(z[j] - zmax);
        return std::array<T, 3>{e, e == T(0) ? T(0) : e * z[j], z[j]};
      });
      const double lse = zmax + std::log(sum_e);
      if (out.lse) out.lse[i] = static_cast<T>(lse);
      if (out.argmax) out.argmax[i] = first_index_of(z, V, zmax);
      if (out.entropy) out.entropy[i] = static_cast<T>(lse - sum_ez / sum_e);

      double lse_a = 0.0, lse_b = 0.0, kl_loss = 0.0;
      const T* t = t_raw;
      if (want_teacher) {
        if (softcap) softcap_row(t_raw, V, cap);
        const T tmax = row_max(t, V);
        if (out.teacher_argmax) out.teacher_argmax[i] = first_index_of(t, V, tmax);
        lse_a = scaled_lse(t, V, tmax, inv_tau);                     // teacher, a = t / tau
        lse_b = tau == 1.0 ? lse : scaled_lse(z, V, zmax, inv_tau);  // student, b = z / tau
        // log p - log q = (t - z) / tau - (lse_a - lse_b): the difference of the row
        // constants is taken in double, so a near-zero KL keeps its digits in float.
        const T s = static_cast<T>(inv_tau), la = static_cast<T>(lse_a), lb = static_cast<T>(lse_b);
        const T dl = static_cast<T>(lse_a - lse_b);
        switch (cfg.kind) {
          case LossKind::forward_kl:
            kl_loss = block_sum<T>(V, [&](int64_t j) {
              const T p = exp_fast(t[j] * s - la);
              return p == T(0) ? T(0) : p * ((t[j] - z[j]) * s - dl);
            });
            break;
          case LossKind::soft_cross_entropy:
            kl_loss = -block_sum<T>(V, [&](int64_t j) {
              const T p = exp_fast(t[j] * s - la);
              return p == T(0) ? T(0) : p * (z[j] * s - lb);
            });
            break;
          case LossKind::reverse_kl:
            kl_loss = block_sum<T>(V, [&](int64_t j) {
              const T q = exp_fast(z[j] * s - lb);
              return q == T(0) ? T(0) : q * ((z[j] - t[j]) * s + dl);
            });
            break;
          case LossKind::cross_entropy: break;
        }
      }

      double ce_loss = 0.0;
      int64_t y = -1;
      T zy = 0;
      if (want_ce && !ignored) {
        y = labels[i];
        zy = z[y];
        const double smoothing = eps == 0.0 ? 0.0 : eps / static_cast<double>(V) * sum_z;
        ce_loss = lse - (1.0 - eps) * zy - smoothing + cfg.z_loss * lse * lse;
      }
      const double loss = ignored ? 0.0 : ce_weight * ce_loss + kl_weight * kl_scale * kl_loss;
      if (out.loss) out.loss[i] = static_cast<T>(loss);

      if (!want_grad) continue;
      const double g = ignored                 ? 0.0
                       : grad_scale != nullptr ? static_cast<double>(grad_scale[i])
                                               : 1.0;
      const double ce_soft = ce_weight * (1.0 + 2.0 * cfg.z_loss * lse);
      const double ce_uniform = ce_weight * eps / static_cast<double>(V);
      const double kl_factor = kl_weight * kl_scale * inv_tau;
      const GradTerms<T> terms{static_cast<T>(g * ce_soft), static_cast<T>(g * ce_uniform),
                               static_cast<T>(lse),         static_cast<T>(g * kl_factor),
                               static_cast<T>(inv_tau),     static_cast<T>(lse_a),
                               static_cast<T>(lse_b),       static_cast<T>(kl_loss),
                               softcap ? T(1) / cap : T(0)};
      grad_row_any<T>(z, t, V, terms, want_ce, want_teacher, cfg.kind == LossKind::reverse_kl,
                      softcap);
      if (y >= 0) {  // the one-hot term of CE, with the softcap factor at the label
        double onehot = g * ce_weight * (1.0 - eps);
        if (softcap) {
          const double r = static_cast<double>(zy) / cfg.softcap;
          onehot *= 1.0 - r * r;
        }
        z[y] = static_cast<T>(static_cast<double>(z[y]) - onehot);
      }
    }
  });
}

template void head_loss_rows<float>(float*, float*, const int64_t*, int64_t, int64_t,
                                    const LossConfig&, bool, const float*,
                                    const HeadRowOutputs<float>&);
template void head_loss_rows<double>(double*, double*, const int64_t*, int64_t, int64_t,
                                     const LossConfig&, bool, const double*,
                                     const HeadRowOutputs<double>&);

namespace {

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

template <typename T>
void head_loss_rows_typed(const HeadRowsArgs& a) {
  if (a.logits.size(0) == 0) return;  // an empty batch: nothing to compute, nothing to read
  HeadRowOutputs<T> o;
  o.loss = ptr_or_null<T>(a.loss);
  o.lse = ptr_or_null<T>(a.lse);
  o.entropy = ptr_or_null<T>(a.entropy);
  o.argmax = ptr_or_null<int64_t>(a.argmax);
  o.teacher_argmax = ptr_or_null<int64_t>(a.teacher_argmax);
  head_loss_rows<T>(a.logits.data<T>(), ptr_or_null<T>(a.teacher), ptr_or_null<int64_t>(a.labels),
                    a.logits.size(0), a.logits.size(1), a.config, a.want_grad,
                    ptr_or_null<T>(a.grad_scale), o);
}

}  // namespace

void CpuKernels::head_loss_rows(const HeadRowsArgs& a) {
  if (a.logits.dtype() == DType::f64)
    head_loss_rows_typed<double>(a);
  else
    head_loss_rows_typed<float>(a);
}

void CpuKernels::check_labels(const Tensor& labels, int64_t vocab, int64_t ignore_index) {
  const Tensor y = raw::contiguous(labels);
  check_head_labels(y.data<int64_t>(), y.numel(), vocab, ignore_index);
}

void CpuKernels::row_weights(const Tensor& labels, const Tensor& weights, int64_t ignore_index,
                             bool normalize, const Tensor& out) {
  const int64_t n = out.numel();
  std::vector<double> w(static_cast<size_t>(n), 1.0);
  if (weights.defined()) {
    const Tensor wc = raw::contiguous(raw::to_dtype(weights, DType::f64));
    const double* wv = wc.data<double>();
    for (int64_t i = 0; i < n; ++i) w[i] = wv[i];
  }
  if (labels.defined()) {
    const Tensor y = raw::contiguous(labels);
    const int64_t* yv = y.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (yv[i] == ignore_index) w[i] = 0.0;
    }
  }
  if (normalize) {
    double total = 0.0;
    for (double x : w) total += x;
    for (double& x : w) x = total == 0.0 ? 0.0 : x / total;
  }
  char* base = static_cast<char*>(out.data_ptr());
  const size_t step = element_size(out.dtype()) * static_cast<size_t>(out.stride(0));
  for (int64_t i = 0; i < n; ++i) {
    raw::store_element(base + static_cast<size_t>(i) * step, out.dtype(), w[i]);
  }
}

}  // namespace cg::cpu
