// Why this file exists: the CPU implementation of head_loss_rows (see the header for the
// math). Each row takes a few streaming passes over V: softcap, max/argmax, sums of
// exponentials, the teacher terms, then the gradient written in place.
#include "ops/cpu/head_loss_rows.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/cpu/parallel.h"

namespace cg::cpu {

namespace {

template <typename T>
struct RowMax {
  T max = -std::numeric_limits<T>::infinity();
  int64_t arg = 0;
};

template <typename T>
RowMax<T> row_max(const T* x, int64_t V) {
  RowMax<T> m;
  for (int64_t j = 0; j < V; ++j) {
    if (x[j] > m.max) {
      m.max = x[j];
      m.arg = j;
    }
  }
  return m;
}

// log sum_j exp(x_j * inv_tau), given max_j x_j.
template <typename T>
double scaled_lse(const T* x, int64_t V, T max, double inv_tau) {
  double sum = 0.0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp((x[j] - max) * inv_tau);
  return max * inv_tau + std::log(sum);
}

template <typename T>
void softcap_row(T* z, int64_t V, T c) {
  for (int64_t j = 0; j < V; ++j) z[j] = c * std::tanh(z[j] / c);
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
  const bool want_teacher = loss_needs_teacher(cfg);
  const bool want_ce = loss_needs_labels(cfg);
  CG_CHECK(!want_teacher || teacher != nullptr, "head loss: this loss kind needs teacher logits");
  CG_CHECK(!want_ce || labels != nullptr, "head loss: cross-entropy needs labels");
  CG_CHECK(cfg.temperature > 0.0f, "head loss: temperature must be > 0, got ", cfg.temperature);
  const double ce_weight = cfg.kind == LossKind::cross_entropy ? 1.0 : cfg.hard_ce_weight;
  const double kl_weight = cfg.kind == LossKind::cross_entropy ? 0.0 : 1.0 - cfg.hard_ce_weight;
  const double tau = cfg.temperature, inv_tau = 1.0 / tau;
  const double kl_scale = cfg.hinton_scale ? tau * tau : 1.0;
  const double eps = cfg.label_smoothing;

  // Labels are checked up front: no exception may leave the parallel loop.
  if (labels != nullptr) check_head_labels(labels, C, V, cfg.ignore_index);

  parallel_range(C, C * V, [&](int64_t row_begin, int64_t row_end) {
  for (int64_t i = row_begin; i < row_end; ++i) {
    T* z = logits + i * V;
    T* t_raw = want_teacher ? teacher + i * V : nullptr;
    const bool ignored = labels != nullptr && labels[i] == cfg.ignore_index;
    if (cfg.softcap > 0.0f) softcap_row(z, V, static_cast<T>(cfg.softcap));

    const RowMax<T> zm = row_max(z, V);
    double sum_e = 0.0, sum_ez = 0.0, sum_z = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      const double e = std::exp(static_cast<double>(z[j] - zm.max));
      sum_e += e;
      sum_ez += e * z[j];
      sum_z += z[j];
    }
    const double lse = zm.max + std::log(sum_e);
    if (out.lse) out.lse[i] = static_cast<T>(lse);
    if (out.argmax) out.argmax[i] = zm.arg;
    if (out.entropy) out.entropy[i] = static_cast<T>(lse - sum_ez / sum_e);

    double lse_a = 0.0, lse_b = 0.0, kl_loss = 0.0;
    const T* t = t_raw;
    if (want_teacher) {
      if (cfg.softcap > 0.0f) softcap_row(t_raw, V, static_cast<T>(cfg.softcap));
      const RowMax<T> tm = row_max(t, V);
      if (out.teacher_argmax) out.teacher_argmax[i] = tm.arg;
      lse_a = scaled_lse(t, V, tm.max, inv_tau);          // teacher, a = t / tau
      lse_b = tau == 1.0 ? lse : scaled_lse(z, V, zm.max, inv_tau);  // student, b = z / tau
      double acc = 0.0;
      for (int64_t j = 0; j < V; ++j) {
        const double a = t[j] * inv_tau, b = z[j] * inv_tau;
        const double log_p = a - lse_a, log_q = b - lse_b;
        switch (cfg.kind) {
          case LossKind::forward_kl: acc += std::exp(log_p) * (log_p - log_q); break;
          case LossKind::soft_cross_entropy: acc -= std::exp(log_p) * log_q; break;
          case LossKind::reverse_kl: acc += std::exp(log_q) * (log_q - log_p); break;
          case LossKind::cross_entropy: break;
        }
      }
      kl_loss = acc;
    }

    double ce_loss = 0.0;
    int64_t y = -1;
    if (want_ce && !ignored) {
      y = labels[i];
      ce_loss = lse - (1.0 - eps) * z[y] - eps / static_cast<double>(V) * sum_z +
                cfg.z_loss * lse * lse;
    }
    const double loss = ignored ? 0.0 : ce_weight * ce_loss + kl_weight * kl_scale * kl_loss;
    if (out.loss) out.loss[i] = static_cast<T>(loss);

    if (!want_grad) continue;
    const double g = ignored ? 0.0 : grad_scale != nullptr ? static_cast<double>(grad_scale[i]) : 1.0;
    const double ce_soft = ce_weight * (1.0 + 2.0 * cfg.z_loss * lse);
    const double ce_uniform = ce_weight * eps / static_cast<double>(V);
    const double kl_factor = kl_weight * kl_scale * inv_tau;
    for (int64_t j = 0; j < V; ++j) {
      const double zj = z[j];
      double d = 0.0;
      if (want_ce) d += ce_soft * std::exp(zj - lse) - ce_uniform - (j == y ? ce_weight * (1.0 - eps) : 0.0);
      if (want_teacher) {
        const double log_p = t[j] * inv_tau - lse_a, log_q = zj * inv_tau - lse_b;
        const double q = std::exp(log_q);
        if (cfg.kind == LossKind::reverse_kl) d += kl_factor * q * ((log_q - log_p) - kl_loss);
        else d += kl_factor * (q - std::exp(log_p));
      }
      if (cfg.softcap > 0.0f) {
        const double r = zj / cfg.softcap;
        d *= 1.0 - r * r;
      }
      z[j] = static_cast<T>(g * d);
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

}  // namespace cg::cpu

namespace cg {

const char* loss_kind_name(LossKind kind) {
  switch (kind) {
    case LossKind::cross_entropy: return "cross_entropy";
    case LossKind::forward_kl: return "forward_kl";
    case LossKind::reverse_kl: return "reverse_kl";
    case LossKind::soft_cross_entropy: return "soft_cross_entropy";
  }
  return "?";
}

}  // namespace cg
