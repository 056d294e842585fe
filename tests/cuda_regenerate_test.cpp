// Why this file exists: `chunkgrad regenerate` runs on the GPU, where the ragged batch's
// dense key mask goes through the CUDA attention kernels (Note [Ragged batch],
// train/batched_decode.cpp); its greedy tokens are held to the CPU's on a tiny target,
// with prompts of mixed lengths, refills and EOS, for a Qwen3 target and a hybrid
// (Qwen3.5-style) one. Skips without a GPU.
#include <gtest/gtest.h>

#include <map>

#include "core/backend.h"
#include "decode_test_util.h"
#include "train/batched_decode.h"

namespace cg {
namespace {

using testing_decode::random_ids;

std::map<int64_t, std::vector<int64_t>> decode(const nn::Qwen3ForCausalLM& lm,
                                               const std::vector<train::DecodePrompt>& prompts,
                                               const train::BatchedDecodeOptions& options) {
  std::map<int64_t, std::vector<int64_t>> out;
  train::decode_batched(lm, prompts, options,
                        [&](train::DecodedSample&& d) { out[d.index] = d.new_tokens; });
  return out;
}

// The same weights on the CPU and the GPU (a hybrid target: norms and dt_bias perturbed,
// frozen); greedy tokens of a ragged batch with refills and EOS on both, and alone on the GPU.
void check_gpu_equals_cpu(const nn::Qwen3Config& config, bool hybrid) {
  Generator gen(5);
  nn::Qwen3ForCausalLM cpu(config, {.generator = &gen});
  Generator same(5);
  nn::Qwen3ForCausalLM gpu(config, {.generator = &same});
  gpu.to(cuda_device(0));
  if (hybrid) {
    testing_decode::perturb_and_freeze(cpu, 7);
    testing_decode::perturb_and_freeze(gpu, 7);
  }
  std::vector<train::DecodePrompt> prompts;
  for (int64_t P : {7, 1, 30, 4, 12, 2, 19, 5, 9, 3})
    prompts.push_back({.ids = random_ids(P, config.vocab_size, gen)});
  const auto free = decode(cpu, prompts, {.max_new_tokens = 12, .batch_size = 1});
  const train::BatchedDecodeOptions options{
      .max_new_tokens = 12, .eos_ids = {free.at(0)[4], free.at(2)[1]}, .batch_size = 4};
  const auto want = decode(cpu, prompts, options);
  const auto got = decode(gpu, prompts, options);
  ASSERT_EQ(got.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(got.at(static_cast<int64_t>(i)), want.at(static_cast<int64_t>(i))) << i;
  // On the GPU alone: the ragged batch equals each prompt decoded by itself.
  auto alone = options;
  alone.batch_size = 1;
  const auto by_itself = decode(gpu, prompts, alone);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(got.at(static_cast<int64_t>(i)), by_itself.at(static_cast<int64_t>(i))) << i;
}

TEST(CudaRegenerate, GpuBatchedDecodingEqualsTheCpu) {
  if (!cuda_available()) {
    DeviceBackend* b = find_backend(DeviceType::cuda);
    GTEST_SKIP() << "no GPU: " << (b ? b->unavailable_reason() : std::string("built without CUDA"));
  }
  check_gpu_equals_cpu(testing_decode::tiny_target_config(64), false);
}

// A hybrid target (Gated DeltaNet and gated full-attention layers): each row's DeltaNet
// states run the CUDA recurrence for one token a row and are copied at every rebuild.
TEST(CudaRegenerate, GpuBatchedDecodingOfAHybridTargetEqualsTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  check_gpu_equals_cpu(testing_decode::tiny_hybrid_target_config(64), true);
}

}  // namespace
}  // namespace cg
