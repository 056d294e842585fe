// Why this file exists: the CUDA lm_head loss row kernel (see head_loss_kernels.h; the math
// per row is in ops/cpu/head_loss_rows.h and docs/fused_loss.md). One block per row: a few
// streaming passes over the row's V logits (16-bit storage read through fp32) -- softcap
// in place, max and argmax, the sums of exponentials, the teacher terms, then the gradient
// written over the logits -- each element always visited by the same thread, block
// reductions in between. Sums accumulate in double per thread, as the CPU's add float
// blocks into double.
#include "cuda/head_loss_kernels.h"

#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"

namespace cg::cuda {

namespace {

// The loss configuration as the kernel reads it.
struct HeadParams {
  int kind;  // LossKind
  bool want_ce, want_teacher, want_grad, softcap;
  int64_t ignore_index;
  double ce_weight, kl_weight, kl_scale, tau, inv_tau, eps, z_loss, cap;
};

template <typename T>
__global__ void head_rows_kernel(T* logits, T* teacher, const int64_t* labels, int64_t C, int64_t V,
                                 HeadParams p, const compute_t<T>* grad_scale, compute_t<T>* out_loss,
                                 compute_t<T>* out_lse, compute_t<T>* out_entropy,
                                 int64_t* out_argmax, int64_t* out_targmax) {
  using A = compute_t<T>;
  __shared__ double sd[32];
  __shared__ A sa[32];
  __shared__ int64_t si[32];
  const A cap = static_cast<A>(p.cap), inv_cap = p.softcap ? A(1) / cap : A(0);
  for (int64_t i = blockIdx.x; i < C; i += gridDim.x) {
    T* z = logits + i * V;
    T* t = p.want_teacher ? teacher + i * V : nullptr;
    const bool ignored = labels != nullptr && labels[i] == p.ignore_index;

    // Softcap in place, and the row max.
    A m = -m_inf<A>();
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      A v = ld(z + j);
      if (p.softcap) {
        st(z + j, cap * m_tanh(v * inv_cap));
        v = ld(z + j);  // as stored: every later pass reads the rounded value
      }
      if (v > m) m = v;
    }
    const A zmax = block_max(m, sa);

    int64_t first = INT64_MAX;
    double se = 0.0, sez = 0.0, sz = 0.0;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      const A v = ld(z + j);
      if (v == zmax && j < first) first = j;
      const A e = m_exp(v - zmax);
      se += static_cast<double>(e);
      sez += static_cast<double>(e * v);
      sz += static_cast<double>(v);
    }
    first = block_min_i64(first, si);
    const double sum_e = block_sum(se, sd);
    const double sum_ez = block_sum(sez, sd);
    const double sum_z = block_sum(sz, sd);
    const double lse = static_cast<double>(zmax) + log(sum_e);

    // Teacher terms.
    double lse_a = 0.0, lse_b = 0.0, kl_loss = 0.0;
    const A s = static_cast<A>(p.inv_tau);
    if (p.want_teacher) {
      A tm = -m_inf<A>();
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        A v = ld(t + j);
        if (p.softcap) {
          st(t + j, cap * m_tanh(v * inv_cap));
          v = ld(t + j);
        }
        if (v > tm) tm = v;
      }
      const A tmax = block_max(tm, sa);
      int64_t tfirst = INT64_MAX;
      double sa_sum = 0.0, sb_sum = 0.0;
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        const A tv = ld(t + j);
        if (tv == tmax && j < tfirst) tfirst = j;
        sa_sum += static_cast<double>(m_exp((tv - tmax) * s));
        if (p.tau != 1.0) sb_sum += static_cast<double>(m_exp((ld(z + j) - zmax) * s));
      }
      tfirst = block_min_i64(tfirst, si);
      sa_sum = block_sum(sa_sum, sd);
      lse_a = static_cast<double>(tmax) * p.inv_tau + log(sa_sum);
      if (p.tau != 1.0) {
        sb_sum = block_sum(sb_sum, sd);
        lse_b = static_cast<double>(zmax) * p.inv_tau + log(sb_sum);
      } else {
        lse_b = lse;
      }
      if (threadIdx.x == 0 && out_targmax) out_targmax[i] = tfirst == INT64_MAX ? 0 : tfirst;
      const A la = static_cast<A>(lse_a), lb = static_cast<A>(lse_b);
      const A dl = static_cast<A>(lse_a - lse_b);
      double kl = 0.0;
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        const A tv = ld(t + j), zv = ld(z + j);
        A term = 0;
        switch (static_cast<LossKind>(p.kind)) {
          case LossKind::forward_kl: term = m_exp(tv * s - la) * ((tv - zv) * s - dl); break;
          case LossKind::soft_cross_entropy: term = -(m_exp(tv * s - la) * (zv * s - lb)); break;
          case LossKind::reverse_kl: term = m_exp(zv * s - lb) * ((zv - tv) * s + dl); break;
          case LossKind::cross_entropy: break;
        }
        kl += static_cast<double>(term);
      }
      kl_loss = block_sum(kl, sd);
    }

    double ce_loss = 0.0;
    int64_t y = -1;
    A zy = 0;
    if (p.want_ce && !ignored) {
      y = labels[i];
      zy = ld(z + y);
      ce_loss = lse - (1.0 - p.eps) * static_cast<double>(zy) -
                p.eps / static_cast<double>(V) * sum_z + p.z_loss * lse * lse;
    }
    __syncthreads();  // every thread has read z[y] before any gradient overwrites it
    const double loss = ignored ? 0.0 : p.ce_weight * ce_loss + p.kl_weight * p.kl_scale * kl_loss;
    if (threadIdx.x == 0) {
      if (out_loss) out_loss[i] = static_cast<A>(loss);
      if (out_lse) out_lse[i] = static_cast<A>(lse);
      if (out_entropy) out_entropy[i] = static_cast<A>(lse - sum_ez / sum_e);
      if (out_argmax) out_argmax[i] = first == INT64_MAX ? 0 : first;
    }
    if (!p.want_grad) continue;

    const double g = ignored ? 0.0 : grad_scale != nullptr ? static_cast<double>(grad_scale[i]) : 1.0;
    const A g_soft = static_cast<A>(g * p.ce_weight * (1.0 + 2.0 * p.z_loss * lse));
    const A g_uniform = static_cast<A>(g * p.ce_weight * p.eps / static_cast<double>(V));
    const A g_kl = static_cast<A>(g * p.kl_weight * p.kl_scale * p.inv_tau);
    const A lse_c = static_cast<A>(lse), lse_ac = static_cast<A>(lse_a),
            lse_bc = static_cast<A>(lse_b), kl_c = static_cast<A>(kl_loss);
    const bool reverse = static_cast<LossKind>(p.kind) == LossKind::reverse_kl;
    double onehot = g * p.ce_weight * (1.0 - p.eps);
    if (p.softcap) {
      const double r = static_cast<double>(zy) / p.cap;
      onehot *= 1.0 - r * r;
    }
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      const A zj = ld(z + j);
      A d = 0;
      if (p.want_ce) d += g_soft * m_exp(zj - lse_c) - g_uniform;
      if (p.want_teacher) {
        const A log_p = ld(t + j) * s - lse_ac, log_q = zj * s - lse_bc;
        const A q = m_exp(log_q);
        if (reverse) d += g_kl * q * ((log_q - log_p) - kl_c);
        else d += g_kl * (q - m_exp(log_p));
      }
      if (p.softcap) {
        const A r = zj * inv_cap;
        d *= A(1) - r * r;
      }
      if (j == y) d = static_cast<A>(static_cast<double>(d) - onehot);
      st(z + j, d);
    }
  }
}

__global__ void init_bad_kernel(int64_t* first_bad) {
  first_bad[0] = INT64_MAX;
  first_bad[1] = 0;
}

__global__ void find_bad_label_kernel(const int64_t* labels, int64_t n, int64_t stride, int64_t V,
                                      int64_t ignore_index, int64_t* first_bad) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t y = labels[i * stride];
    if (!(y == ignore_index || (y >= 0 && y < V))) {
      atomicMin(reinterpret_cast<unsigned long long*>(first_bad), static_cast<unsigned long long>(i));
    }
  }
}

__global__ void bad_label_value_kernel(const int64_t* labels, int64_t stride, int64_t* first_bad) {
  if (first_bad[0] != INT64_MAX) first_bad[1] = labels[first_bad[0] * stride];
}

__global__ void row_weights_kernel(const int64_t* labels, int64_t label_stride, const void* weights,
                                   DType weights_dtype, int64_t weight_stride, int64_t ignore_index,
                                   bool normalize, void* out, DType out_dtype, int64_t out_stride,
                                   int64_t n) {
  __shared__ double sd[32];
  auto weight = [&](int64_t i) {
    double w = weights ? load_any(weights, weights_dtype, i * weight_stride) : 1.0;
    if (labels && labels[i * label_stride] == ignore_index) w = 0.0;
    return w;
  };
  double total = 1.0;
  if (normalize) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += weight(i);
    total = block_sum(s, sd);
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double w = weight(i);
    const double v = !normalize ? w : (total == 0.0 ? 0.0 : w / total);
    store_any(out, out_dtype, i * out_stride, v);
  }
}

}  // namespace

void launch_head_loss_rows(DType dtype, void* logits, void* teacher, const int64_t* labels,
                           int64_t C, int64_t V, const LossConfig& cfg, bool want_grad,
                           const void* grad_scale, const HeadRowPointers& out,
                           cudaStream_t stream) {
  if (C == 0) return;
  HeadParams p;
  p.kind = static_cast<int>(cfg.kind);
  p.want_teacher = loss_needs_teacher(cfg);
  p.want_ce = loss_needs_labels(cfg);
  p.want_grad = want_grad;
  p.softcap = cfg.softcap > 0.0f;
  p.ignore_index = cfg.ignore_index;
  p.ce_weight = cfg.kind == LossKind::cross_entropy ? 1.0 : cfg.hard_ce_weight;
  p.kl_weight = cfg.kind == LossKind::cross_entropy ? 0.0 : 1.0 - cfg.hard_ce_weight;
  p.tau = cfg.temperature;
  p.inv_tau = 1.0 / p.tau;
  p.kl_scale = cfg.hinton_scale ? p.tau * p.tau : 1.0;
  p.eps = cfg.label_smoothing;
  p.z_loss = cfg.z_loss;
  p.cap = cfg.softcap;
  CG_CHECK(!p.want_teacher || teacher != nullptr, "head loss: this loss kind needs teacher logits");
  CG_CHECK(!p.want_ce || labels != nullptr, "head loss: cross-entropy needs labels");
  CG_CHECK(cfg.temperature > 0.0f, "head loss: temperature must be > 0, got ", cfg.temperature);
  const int threads = V >= 8192 ? 512 : (V >= 1024 ? 256 : 32);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(C, 1 << 20));
  visit_floating(dtype, "head loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    head_rows_kernel<T><<<blocks, threads, 0, stream>>>(
        static_cast<T*>(logits), static_cast<T*>(teacher), labels, C, V, p,
        static_cast<const A*>(grad_scale), static_cast<A*>(out.loss), static_cast<A*>(out.lse),
        static_cast<A*>(out.entropy), out.argmax, out.teacher_argmax);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_find_bad_label(const int64_t* labels, int64_t n, int64_t stride, int64_t V,
                           int64_t ignore_index, int64_t* first_bad, cudaStream_t stream) {
  init_bad_kernel<<<1, 1, 0, stream>>>(first_bad);
  CG_CUDA_CHECK(cudaGetLastError());
  if (n == 0) return;
  find_bad_label_kernel<<<blocks_for(n), kThreads, 0, stream>>>(labels, n, stride, V, ignore_index,
                                                               first_bad);
  CG_CUDA_CHECK(cudaGetLastError());
  bad_label_value_kernel<<<1, 1, 0, stream>>>(labels, stride, first_bad);
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_row_weights(const int64_t* labels, int64_t label_stride, const void* weights,
                        DType weights_dtype, int64_t weight_stride, int64_t ignore_index,
                        bool normalize, void* out, DType out_dtype, int64_t out_stride, int64_t n,
                        cudaStream_t stream) {
  if (n == 0) return;
  row_weights_kernel<<<1, 1024, 0, stream>>>(labels, label_stride, weights, weights_dtype,
                                             weight_stride, ignore_index, normalize, out,
                                             out_dtype, out_stride, n);
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
