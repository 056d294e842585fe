// Why this file exists: the CUDA table's adamw_step entry (CudaKernels, cuda/cuda_kernels.h;
// the contract in ops/kernels.h): a fused AdamW over many tensors with optional fp32 master
// weights, launched as few multi-tensor kernels (the launcher beside them in
// cuda/adamw_kernels.cu) on the compute stream, never synchronising. Checks the lists (a
// mistake names the tensor and what to change), then packs up to kAdamWTensors tensors per
// launch.
#include <cmath>

#include "core/views.h"
#include "cuda/adamw_kernels.h"
#include "cuda/cuda_kernels.h"
#include "cuda/launch_helpers.h"

namespace cg::cuda {

namespace {

void check_tensor(const Tensor& t, const char* what, size_t i, Device device, int64_t numel,
                  bool must_be_f32, bool may_be_strided = false) {
  CG_CHECK(t.defined(), "adamw_step: ", what, "[", i, "] is undefined");
  CG_CHECK(t.device() == device, "adamw_step: ", what, "[", i, "] is on ", t.device().str(),
           " but params[0] is on ", device.str(), "; move every tensor to one device");
  CG_CHECK(may_be_strided || t.is_contiguous(), "adamw_step: ", what, "[", i,
           "] is not contiguous; pass "
           "contiguous parameters and optimizer state");
  CG_CHECK(t.numel() == numel, "adamw_step: ", what, "[", i, "] has ", t.numel(),
           " elements but params[", i, "] has ", numel);
  CG_CHECK(is_floating(t.dtype()), "adamw_step: ", what, "[", i, "] has dtype ",
           dtype_name(t.dtype()), "; it must be floating");
  CG_CHECK(!must_be_f32 || t.dtype() == DType::f32, "adamw_step: ", what, "[", i, "] has dtype ",
           dtype_name(t.dtype()), "; optimizer state and master weights are f32");
}

}  // namespace

void CudaKernels::adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& masters,
                             const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
                             const std::vector<Tensor>& exp_avg_sqs, const Tensor& grad_scale,
                             const AdamWArgs& args) {
  const size_t count = params.size();
  CG_CHECK(grads.size() == count && exp_avgs.size() == count && exp_avg_sqs.size() == count &&
               (masters.empty() || masters.size() == count),
           "adamw_step: ", count, " params but ", grads.size(), " grads, ", exp_avgs.size(),
           " exp_avgs, ", exp_avg_sqs.size(), " exp_avg_sqs and ", masters.size(),
           " masters; pass one of each per parameter (masters may be empty)");
  CG_CHECK(args.step >= 1, "adamw_step: step must be >= 1, got ", args.step);
  if (count == 0) return;
  const Device device = params[0].device();
  CG_CHECK(device.is_cuda(), "adamw_step (CUDA): params[0] is on ", device.str());
  for (size_t i = 0; i < count; ++i) {
    const int64_t n = params[i].numel();
    check_tensor(params[i], "params", i, device, n, false);
    // A gradient may be any view (the CPU entry reads any layout): strided ones are copied
    // to contiguous scratch below; parameters and state are updated in place, so they
    // must be contiguous.
    check_tensor(grads[i], "grads", i, device, n, false, /*may_be_strided=*/true);
    check_tensor(exp_avgs[i], "exp_avgs", i, device, n, true);
    check_tensor(exp_avg_sqs[i], "exp_avg_sqs", i, device, n, true);
    if (!masters.empty() && masters[i].defined())
      check_tensor(masters[i], "masters", i, device, n, true);
  }
  if (grad_scale.defined()) {
    CG_CHECK(
        grad_scale.device() == device && grad_scale.numel() >= 1 && is_floating(grad_scale.dtype()),
        "adamw_step: grad_scale must be a floating tensor of at least one element on ",
        device.str());
  }
  AdamWScalars s;
  s.lr = static_cast<float>(args.lr);
  s.beta1 = static_cast<float>(args.beta1);
  s.beta2 = static_cast<float>(args.beta2);
  s.eps = static_cast<float>(args.eps);
  s.weight_decay = static_cast<float>(args.weight_decay);
  s.bias_correction1 =
      static_cast<float>(1.0 - std::pow(args.beta1, static_cast<double>(args.step)));
  s.bias_correction2 =
      static_cast<float>(1.0 - std::pow(args.beta2, static_cast<double>(args.step)));
  s.grad_scale = grad_scale.defined() ? grad_scale.data_ptr() : nullptr;
  s.grad_scale_dtype = grad_scale.defined() ? grad_scale.dtype() : DType::f32;
  const cudaStream_t stream = stream_of(params[0]);
  std::vector<Tensor> dense_grads(count);  // kept alive until every launch is queued
  for (size_t i = 0; i < count; ++i) {
    dense_grads[i] = grads[i].is_contiguous() ? grads[i] : raw::contiguous(grads[i]);
  }
  AdamWBatch batch;
  auto flush = [&] {
    launch_adamw(batch, s, stream);
    batch = AdamWBatch();
  };
  for (size_t i = 0; i < count; ++i) {
    const int64_t n = params[i].numel();
    if (n == 0) continue;
    const int k = batch.count;
    batch.param[k] = params[i].data_ptr();
    batch.master[k] = !masters.empty() && masters[i].defined() ? masters[i].data<float>() : nullptr;
    batch.grad[k] = dense_grads[i].data_ptr();
    batch.m[k] = exp_avgs[i].data<float>();
    batch.v[k] = exp_avg_sqs[i].data<float>();
    batch.n[k] = n;
    batch.param_dtype[k] = params[i].dtype();
    batch.grad_dtype[k] = dense_grads[i].dtype();
    batch.first_chunk[k + 1] = batch.first_chunk[k] + (n + kAdamWChunk - 1) / kAdamWChunk;
    batch.count = k + 1;
    if (batch.count == kAdamWTensors) flush();
  }
  if (batch.count > 0) flush();
}

}  // namespace cg::cuda
