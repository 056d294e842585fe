// Why this file exists: the CPU's AdamW update (CpuKernels::adamw_step, cpu/cpu_kernels.h;
// the contract in ops/kernels.h). One pass over each parameter reads its gradient, updates
// the two moments and the fp32 weight (the master copy when the model computes in 16 bits)
// and writes the model's weight back, so an optimiser step touches each byte once and never
// leaves the device. The gradient scale (clipping times accumulation normalisation) is read
// from a device tensor, so the step needs no host readback of the gradient norm.
#include <cmath>

#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"
#include "cpu/parallel.h"
#include "ops/compute_copy.h"

namespace cg::cpu {

void CpuKernels::adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& masters,
                            const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
                            const std::vector<Tensor>& exp_avg_sqs, const Tensor& grad_scale,
                            const AdamWArgs& args) {
  const float scale =
      grad_scale.defined() ? *static_cast<const float*>(grad_scale.data_ptr()) : 1.0f;
  const double bc1 = 1.0 - std::pow(args.beta1, static_cast<double>(args.step));
  const double bc2 = 1.0 - std::pow(args.beta2, static_cast<double>(args.step));
  const float b1 = static_cast<float>(args.beta1), b2 = static_cast<float>(args.beta2);
  const float step_size = static_cast<float>(args.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float eps = static_cast<float>(args.eps);
  const float decay = static_cast<float>(args.lr * args.weight_decay);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = compute_copy(grads[i], DType::f32);  // contiguous f32 (no copy when it is)
    const bool has_master = i < masters.size() && masters[i].defined();
    const Tensor& w = has_master ? masters[i] : params[i];
    float* pw = static_cast<float*>(w.data_ptr());
    float* pm = static_cast<float*>(exp_avgs[i].data_ptr());
    float* pv = static_cast<float*>(exp_avg_sqs[i].data_ptr());
    const float* pg = static_cast<const float*>(g.data_ptr());
    const int64_t n = w.numel();
    parallel_range(n, n * 8, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const float gk = pg[k] * scale;
        pm[k] = b1 * pm[k] + (1.0f - b1) * gk;
        pv[k] = b2 * pv[k] + (1.0f - b2) * gk * gk;
        const float denom = std::sqrt(pv[k]) * inv_sqrt_bc2 + eps;
        pw[k] -= step_size * pm[k] / denom + decay * pw[k];
      }
    });
    if (has_master) {
      dispatch_floating(params[i].dtype(), "adamw_step", [&]<typename T>() {
        T* pp = static_cast<T*>(params[i].data_ptr());
        parallel_range(n, n, [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) store(pp + k, static_cast<compute_t<T>>(pw[k]));
        });
      });
    }
  }
}

}  // namespace cg::cpu
