// Why this file exists: activation checkpointing per drafter layer on the GPU. The
// recompute runs the CUDA attention kernels (sliding and full) and GEMMs a second time
// inside the backward, under the nested engine; a checkpointed drafter step on the GPU must
// equal the CPU's and the GPU's own plain step (fp32), and lower the device allocator's
// peak where the layers' activations dominate. Every test skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "checkpoint_test_util.h"
#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "ops/ops.h"
#include "train/dflash_batch.h"
#include "train/drafter_step.h"
#include "train_test_util.h"

namespace cg {
namespace {

using nn::ActivationCheckpointing;
using testing_checkpoint::small_drafter;

// Empty with a GPU; else why there is none (the test skips, saying so).
std::string no_gpu_reason() {
  if (cuda_available()) return "";
  DeviceBackend* b = find_backend(DeviceType::cuda);
  return b ? b->unavailable_reason() : std::string("built without CUDA");
}

struct Step {
  double loss = 0;
  std::vector<std::vector<double>> grads;
  int64_t peak_above_start = 0;
};

// One drafter step (fused head loss, KL + CE) forward and backward: loss and gradients.
Step drafter_step(Device device, ActivationCheckpointing mode, int64_t H = 16, int64_t mlp = 24,
                  int64_t anchors = 5) {
  auto d = small_drafter(H, mlp, 3, device);
  d->set_activation_checkpointing(mode);
  const int64_t S = 2 * anchors + 30;
  const train::DrafterSequence s = testing_train::make_sequence(S, 4, 6);
  Generator g(9);
  const train::BlockBatch b = train::build_block_batch(
      {&s}, {train::sample_anchors(s.loss_mask, anchors, g)}, anchors, 4, 4.0, 39, 0);
  Generator data_gen(11);
  const Tensor features = raw::to_device(randn({1, S, 2 * H}, {}, &data_gen), device);
  const Tensor teacher = raw::to_device(randn({S, H}, {}, &data_gen), device);
  train::LossSpec spec;
  spec.kind = "kl";
  spec.ce_weight = 0.1;
  CachingAllocator& alloc = allocator_for(device);
  backend_for(device).synchronize(device.index);
  const int64_t start = alloc.stats().allocated_bytes.current;
  alloc.reset_peak_stats();
  HeadLossResult r = train::drafter_loss(*d, {&b, features, teacher},
                                         {train::drafter_loss_config(spec), HeadLossPath::fused});
  r.loss.backward();
  Step out;
  out.peak_above_start = alloc.stats().allocated_bytes.peak - start;
  out.loss = r.loss.item();
  for (const Tensor& p : d->parameters()) out.grads.push_back(p.grad().to_vector());
  return out;
}

// max over elements of |a - b| / (atol + rtol |b|); <= 1 passes.
double worst(const Step& a, const Step& b, double atol, double rtol) {
  double w = 0;
  for (size_t p = 0; p < b.grads.size(); ++p)
    for (size_t e = 0; e < b.grads[p].size(); ++e)
      w = std::max(
          w, std::abs(a.grads[p][e] - b.grads[p][e]) / (atol + rtol * std::abs(b.grads[p][e])));
  return w;
}

TEST(CudaCheckpoint, CheckpointedDrafterStepEqualsCpuAndPlainInFp32) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << "no GPU: " << why;
  const Device gpu = cuda_device(0);
  const Step cpu = drafter_step(kCPU, ActivationCheckpointing::layers);
  const Step ckpt = drafter_step(gpu, ActivationCheckpointing::layers);
  const Step plain = drafter_step(gpu, ActivationCheckpointing::none);
  ASSERT_EQ(ckpt.grads.size(), cpu.grads.size());
  EXPECT_NEAR(ckpt.loss, cpu.loss, 1e-5 * (1 + std::abs(cpu.loss)));
  // fp32: GEMM and reduction orders differ between devices, no TF32 (as CudaTrain's).
  EXPECT_LE(worst(ckpt, cpu, 2e-6, 1e-4), 1.0) << "GPU checkpointed vs CPU checkpointed";
  EXPECT_NEAR(ckpt.loss, plain.loss, 1e-6 * (1 + std::abs(plain.loss)));
  EXPECT_LE(worst(ckpt, plain, 1e-6, 1e-5), 1.0) << "GPU checkpointed vs GPU plain";
}

// MLP 1024 at hidden 64 over 96 x 4 positions: the plain step keeps three layers of MLP
// activations, the checkpointed one a layer at a time.
TEST(CudaCheckpoint, PeakIsLowerWhereActivationsDominate) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << "no GPU: " << why;
  const Device gpu = cuda_device(0);
  const Step plain = drafter_step(gpu, ActivationCheckpointing::none, 64, 1024, 96);
  const Step ckpt = drafter_step(gpu, ActivationCheckpointing::layers, 64, 1024, 96);
  EXPECT_LT(ckpt.peak_above_start, plain.peak_above_start * 7 / 10)
      << "plain " << plain.peak_above_start << " B, checkpointed " << ckpt.peak_above_start << " B";
}

}  // namespace
}  // namespace cg
