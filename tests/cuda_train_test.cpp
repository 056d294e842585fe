// Why this file exists: the toy drafter must train on the GPU as it does on the CPU. These
// tests pin that: one DFlash drafter step on the GPU equals the CPU step (loss, every
// gradient, the parameters after AdamW) on each head-loss path in fp32, a bf16 step stays
// close, a small `chunkgrad train` run on the GPU learns and its speculative decoding is
// token-identical to greedy, and after warm-up a training step neither takes a new
// device segment (cudaMalloc) nor makes the host wait (Note [Host sync count],
// core/backend.h). Every test skips, saying why, on a machine without a GPU.
#include <gtest/gtest.h>

#include <execinfo.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "autograd/grad_mode.h"
#include "core/allocator_stats.h"
#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/views.h"
#include "nn/dflash_drafter.h"
#include "nn_test_util.h"
#include "ops/embedding.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "train/dflash_batch.h"
#include "train/drafter_data.h"
#include "train/drafter_step.h"
#include "train/drafter_trainer.h"
#include "train/generate.h"
#include "train/in_memory_features.h"
#include "train/optimizer.h"
#include "train/pipeline.h"
#include "train/target_lm.h"
#include "train/tokenizer.h"
#include "train/train_config.h"
#include "train_test_util.h"

namespace cg {
namespace {

using testing_nn::TempDir;
using train::BlockBatch;
using train::DrafterSequence;

#define SKIP_WITHOUT_GPU()                                                               \
  do {                                                                                   \
    if (!cuda_available()) {                                                             \
      DeviceBackend* b = find_backend(DeviceType::cuda);                                 \
      GTEST_SKIP() << "no GPU: "                                                         \
                   << (b ? b->unavailable_reason() : std::string("built without CUDA")); \
    }                                                                                    \
  } while (0)

const Device kGpu = cuda_device(0);

// A tiny drafter (vocab 40, hidden 16) made on the host from a seed; `device` then moves it.
// sliding_window > 0: its first layer is a sliding layer of that window, with its own
// query width (3 x 8 = 24 at hidden 16).
struct TinyDrafter {
  TinyDrafter(DType dtype, Device device, int64_t sliding_window = 0) : gen(5) {
    cfg.layers.vocab_size = 40;
    cfg.layers.hidden_size = 16;
    cfg.layers.num_layers = 2;
    cfg.layers.num_heads = 2;
    cfg.layers.num_kv_heads = 1;
    cfg.layers.head_dim = 8;
    cfg.layers.intermediate_size = 24;
    cfg.layers.rope_theta = 10000;
    cfg.target_layers = {0, 1};
    cfg.mask_token_id = 39;
    if (sliding_window > 0) {
      cfg.layers.num_heads = 3;
      cfg.layer_types = {nn::DrafterAttention::sliding, nn::DrafterAttention::full};
      cfg.sliding_window = sliding_window;
    }
    // The frozen embed/head are the caller's tensors (not parameters): made here in the
    // compute dtype on the device; the drafter's own layers are made on the host, then moved.
    embed = raw::to_device(raw::to_dtype(randn({40, 16}, {}, &gen, 0, 0.5), dtype), device);
    head = raw::to_device(raw::to_dtype(randn({40, 16}, {}, &gen, 0, 0.5), dtype), device);
    drafter =
        std::make_unique<nn::DFlashDrafter>(cfg, embed, head, nn::InitOptions{.generator = &gen});
    drafter->to(device);
    if (dtype != DType::f32) drafter->to(dtype);
  }
  Generator gen;
  nn::DFlashDrafterConfig cfg;
  Tensor embed, head;
  std::unique_ptr<nn::DFlashDrafter> drafter;
};

using testing_train::make_sequence;

struct StepResult {
  double loss = 0;
  std::vector<std::vector<double>> grads, params;  // per parameter (trainable ones)
};

// One drafter step: forward + head loss on `path`, backward, AdamW.
StepResult drafter_step(DType dtype, Device device, const char* kind, HeadLossPath path,
                        int64_t sliding_window = 0) {
  TinyDrafter t(dtype, device, sliding_window);
  const DrafterSequence s0 = make_sequence(24, 4, 6), s1 = make_sequence(20, 6, 7);
  Generator g(9);
  const std::vector<std::vector<int64_t>> anchors = {train::sample_anchors(s0.loss_mask, 5, g),
                                                     train::sample_anchors(s1.loss_mask, 5, g)};
  const BlockBatch b = train::build_block_batch({&s0, &s1}, anchors, 5, 4, 4.0, 39, 0);
  Generator data_gen(11);
  const Tensor features = raw::to_device(randn({2, 24, 32}, {}, &data_gen), device);
  const Tensor teacher = raw::to_device(randn({48, 16}, {}, &data_gen), device);
  train::LossSpec spec;
  spec.kind = kind;
  std::vector<Tensor> trainable;
  for (const Tensor& p : t.drafter->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  // A large eps keeps the update linear in tiny gradients, whose sign may differ between
  // devices (a sign flip would move a parameter by 2 lr whatever the tolerance).
  train::AdamW opt(trainable, {.eps = 1e-3, .grad_clip = 1.0});
  HeadLossResult r = train::drafter_loss(*t.drafter, {&b, features, teacher},
                                         {train::drafter_loss_config(spec), path, 7});
  r.loss.backward();
  StepResult out;
  out.loss = r.loss.item();
  for (const Tensor& p : trainable) out.grads.push_back(p.grad().to_vector());
  opt.step(1e-2, 1.0);
  for (const Tensor& p : trainable) out.params.push_back(p.to_vector());
  return out;
}

// max over elements of |a - b| / (atol + rtol |b|); <= 1 passes.
double worst(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b,
             double atol, double rtol) {
  double w = 0;
  for (size_t p = 0; p < b.size(); ++p) {
    for (size_t e = 0; e < b[p].size(); ++e) {
      w = std::max(w, std::abs(a[p][e] - b[p][e]) / (atol + rtol * std::abs(b[p][e])));
    }
  }
  return w;
}

TEST(CudaTrain, DrafterStepEqualsTheCpuStepInFp32) {
  SKIP_WITHOUT_GPU();
  for (const char* kind : {"ce", "mix"}) {
    for (HeadLossPath path : {HeadLossPath::naive, HeadLossPath::chunked, HeadLossPath::fused}) {
      SCOPED_TRACE(std::string(kind) + " / " + head_loss_path_name(path));
      const StepResult cpu = drafter_step(DType::f32, kCPU, kind, path);
      const StepResult gpu = drafter_step(DType::f32, kGpu, kind, path);
      EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * (1 + std::abs(cpu.loss)));
      ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
      // fp32 tolerance: different summation orders (GEMM, reductions), no TF32.
      EXPECT_LE(worst(gpu.grads, cpu.grads, 2e-6, 1e-4), 1.0) << "gradients";
      EXPECT_LE(worst(gpu.params, cpu.params, 1e-5, 1e-5), 1.0) << "parameters after AdamW";
    }
  }
}

// The same with a sliding layer (issue 19): the sliding rule in the CUDA flash kernels,
// forward and backward, against the CPU's. Window 3 cuts the context of every anchor past
// 2 and the block's own slots; window 64 cuts nothing but the block's causal part.
TEST(CudaTrain, SlidingDrafterStepEqualsTheCpuStepInFp32) {
  SKIP_WITHOUT_GPU();
  for (int64_t window : {3, 64}) {
    SCOPED_TRACE("window " + std::to_string(window));
    const StepResult cpu = drafter_step(DType::f32, kCPU, "mix", HeadLossPath::fused, window);
    const StepResult gpu = drafter_step(DType::f32, kGpu, "mix", HeadLossPath::fused, window);
    EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * (1 + std::abs(cpu.loss)));
    ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
    EXPECT_LE(worst(gpu.grads, cpu.grads, 2e-6, 1e-4), 1.0) << "gradients";
    EXPECT_LE(worst(gpu.params, cpu.params, 1e-5, 1e-5), 1.0) << "parameters after AdamW";
  }
}

// bf16 compute (fp32 masters in AdamW): the GPU step against the CPU bf16 step. Both round
// every op to 8 mantissa bits, in different orders, so the tolerance is bf16's: loss
// within 2% and each gradient within 5% relative L2 norm.
TEST(CudaTrain, Bf16DrafterStepStaysCloseToTheCpu) {
  SKIP_WITHOUT_GPU();
  for (HeadLossPath path : {HeadLossPath::naive, HeadLossPath::fused}) {
    SCOPED_TRACE(head_loss_path_name(path));
    const StepResult cpu = drafter_step(DType::bf16, kCPU, "ce", path);
    const StepResult gpu = drafter_step(DType::bf16, kGpu, "ce", path);
    EXPECT_NEAR(gpu.loss, cpu.loss, 2e-2 * std::abs(cpu.loss));
    for (size_t p = 0; p < cpu.grads.size(); ++p) {
      double diff = 0, norm = 0;
      for (size_t e = 0; e < cpu.grads[p].size(); ++e) {
        diff += (gpu.grads[p][e] - cpu.grads[p][e]) * (gpu.grads[p][e] - cpu.grads[p][e]);
        norm += cpu.grads[p][e] * cpu.grads[p][e];
      }
      EXPECT_LE(std::sqrt(diff), 5e-2 * std::sqrt(norm) + 1e-6) << "parameter " << p;
    }
  }
}

// The CI-sized run of tests/dflash_train_test.cpp, on the GPU.
train::TrainConfig gpu_ci_config(const std::string& run_dir) {
  return testing_train::ci_train_config(run_dir, "cuda");
}

TEST(CudaTrain, ACiSizedRunOnTheGpuLearnsAndDecodesLosslessly) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  const train::TrainConfig c = gpu_ci_config(dir.file("run"));
  const nlohmann::json s = train::run_pipeline(c);
  const auto acc = s["per_slot_accuracy"].get<std::vector<double>>();
  std::printf("[ gpu ci run ] tau %.3f, slot-1 accuracy %.3f, identical %d, speedup %.2f\n",
              s["tau"].get<double>(), acc[1], s["identical"].get<bool>() ? 1 : 0,
              s["speedup"].get<double>());
  EXPECT_EQ(s["device"], "cuda:0");
  EXPECT_GT(acc[1], 0.2) << "slot-1 accuracy (chance: 1/260)";
  EXPECT_GT(s["tau"].get<double>(), 1.3);
  EXPECT_TRUE(s["identical"].get<bool>()) << "speculative decoding must emit greedy's tokens";
  EXPECT_TRUE(std::filesystem::exists(dir.file("run/drafter/step_00000080.safetensors")));

  // Resume from the GPU run's checkpoint (saved through the host) on the GPU: nothing to
  // train, same figures.
  train::TrainConfig again = c;
  const nlohmann::json s2 = train::run_pipeline(again);
  EXPECT_EQ(s2["drafter_steps"]["trained"].get<int64_t>(), 0);
  EXPECT_EQ(s2["target_source"], "cache");
  EXPECT_NEAR(s2["per_slot_accuracy"][1].get<double>(), acc[1], 0.05);
}

// Prints the stack of the first few host waits after it is installed (the symbols of
// libchunkgrad's exported functions are enough to see which op waited).
int waits_to_print = 0;
void print_wait_stack() {
  if (waits_to_print <= 0) return;
  --waits_to_print;
  void* frames[24];
  const int n = backtrace(frames, 24);
  std::fprintf(stderr, "---- a host wait inside a step:\n");
  backtrace_symbols_fd(frames, n, 2);
}

// Note [Host sync count]: after two warm-up steps (cuBLASLt's algorithm choice per shape,
// the allocator's first segments, the staging buffers of Note [Staged uploads]), a
// drafter training step neither takes a device segment nor makes the host wait. The
// steps are queued (DrafterTrainer::train_step_queued) and read only at the end.
TEST(CudaTrain, NoNewSegmentAndNoHostWaitInAStepAfterWarmUp) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  train::TrainConfig c = gpu_ci_config(dir.file("run"));
  for (const char* path : {"fused", "naive"}) {
    SCOPED_TRACE(path);
    c.drafter.head_loss_path = path;
    c.drafter.max_anchors = 6;
    Generator init(3);
    nn::Qwen3ForCausalLM lm(train::target_model_config(c.target, train::ByteTokenizer::kVocabSize),
                            nn::InitOptions{.generator = &init});
    lm.to(kGpu);
    lm.eval();
    lm.freeze();
    std::vector<std::string> prompts;
    for (int i = 0; i < 6; ++i) prompts.push_back("prompt number " + std::to_string(i) + ": ");
    const auto seqs = train::make_drafter_sequences(lm, prompts, 20);
    auto drafter = train::make_drafter(lm, c.drafter, train::ByteTokenizer::kMask, 5);
    train::DrafterTrainData data{std::make_shared<train::InMemoryFeatureSource>(
        seqs, train::compute_target_features(lm, seqs, drafter->config().target_layers, false,
                                             train::ByteTokenizer::kPad))};
    train::DrafterTrainer trainer(*drafter, c, data);
    CachingAllocator& alloc = allocator_for(kGpu);
    std::vector<train::QueuedStep> queued;
    std::vector<int64_t> segments;
    std::vector<uint64_t> syncs;
    for (int step = 1; step <= 8; ++step) {
      if (step == 3) {  // from here on, a wait is a failure: show where it came from
        waits_to_print = 3;
        set_host_sync_hook(print_wait_stack);
      }
      queued.push_back(trainer.train_step_queued());
      segments.push_back(alloc.stats().segment.current);
      syncs.push_back(host_sync_count());
    }
    set_host_sync_hook(nullptr);
    for (int step = 1; step <= 8; ++step) {
      std::printf("[ %s step %d ] segments %lld, host syncs so far %llu\n", path, step,
                  static_cast<long long>(segments[step - 1]),
                  static_cast<unsigned long long>(syncs[step - 1]));
    }
    EXPECT_EQ(segments[7], segments[1]) << "new device segments in steps 3..8";
    EXPECT_EQ(syncs[7], syncs[1]) << "the host waited in steps 3..8 ("
                                  << (syncs[7] - syncs[1]) / 6.0 << " times a step)";
    for (const auto& q : queued) EXPECT_TRUE(std::isfinite(trainer.finish(q).loss));
  }
}

// Note [Batched generation on a GPU]: prompts of one length run as one batch; each row's
// tokens equal that prompt's own greedy generation (batch 1), EOS included.
TEST(CudaTrain, BatchedGenerationEqualsOnePromptAtATime) {
  SKIP_WITHOUT_GPU();
  train::TargetConfig tc;
  tc.num_layers = 2;
  Generator init(4);
  nn::Qwen3ForCausalLM lm(train::target_model_config(tc, train::ByteTokenizer::kVocabSize),
                          nn::InitOptions{.generator = &init});
  lm.to(kGpu);
  lm.eval();
  std::vector<std::vector<int64_t>> prompts;
  for (int i = 0; i < 9; ++i) {
    std::vector<int64_t> p{256};
    for (int t = 0; t < 3 + i % 3; ++t) p.push_back((i * 31 + t * 7) % 250);
    prompts.push_back(p);
  }
  const train::GenerateOptions opt{.max_new_tokens = 12, .eos_ids = {17}};
  std::vector<int64_t> done;  // progress after each batch: 3 lengths, 3 prompts each
  int64_t told = 0;
  const std::vector<train::Generation> all =
      train::generate_all(lm, prompts, opt, [&](int64_t d, int64_t total, int64_t fresh) {
        EXPECT_EQ(total, 9);
        done.push_back(d);
        told += fresh;
      });
  ASSERT_EQ(all.size(), prompts.size());
  EXPECT_EQ(done, (std::vector<int64_t>{3, 6, 9}));
  int64_t fresh = 0;
  for (const auto& g : all) fresh += static_cast<int64_t>(g.new_tokens().size());
  EXPECT_EQ(told, fresh);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const train::Generation one = train::generate(lm, prompts[i], opt);
    EXPECT_EQ(all[i].tokens, one.tokens) << "prompt " << i;
    EXPECT_EQ(all[i].stopped_at_eos, one.stopped_at_eos) << "prompt " << i;
    EXPECT_EQ(all[i].target_forwards, one.target_forwards) << "prompt " << i;
  }
}

// Labels uploaded by from_ints carry their host-known bounds (Note [Host-known values]):
// good ones skip the device check; a bad one still fails at the op with the CPU's message.
TEST(CudaTrain, HostKnownLabelsSkipTheDeviceCheckAndBadOnesStillFail) {
  SKIP_WITHOUT_GPU();
  const Tensor logits = zeros({3, 5}, {.device = kGpu});
  const Tensor good = from_ints({1, -100, 4}, {3}, {.dtype = DType::i64, .device = kGpu});
  const uint64_t before = host_sync_count();
  const Tensor loss = cross_entropy(logits, good);
  EXPECT_EQ(host_sync_count(), before) << "the check read the device";
  EXPECT_NEAR(loss.item(), std::log(5.0), 1e-6);
  const Tensor bad = from_ints({1, 7, 2}, {3}, {.dtype = DType::i64, .device = kGpu});
  try {
    cross_entropy(logits, bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 7"), std::string::npos) << e.what();
  }
  const Tensor ids = from_ints({0, 4}, {2}, {.dtype = DType::i64, .device = kGpu});
  EXPECT_THROW(embedding(zeros({4, 2}, {.device = kGpu}), ids), Error);
}

}  // namespace
}  // namespace cg
