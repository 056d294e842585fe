// Why this file exists: the DFlash training recipe is easy to get subtly wrong and the
// damage only shows as a drafter that never gets accepted (a shifted label once ruined
// public runs). These tests pin each rule: the block mask, label alignment, anchor
// sampling, slot weights, the three head-loss paths agreeing on the drafter's gradients,
// the cached inference path agreeing with training, the optimiser, a CI-sized run that
// learns, and bad configs / checkpoints failing clearly without touching the run dir.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "autograd/grad_mode.h"
#include "core/allocator_stats.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/views.h"
#include "nn/dflash_drafter.h"
#include "nn_test_util.h"
#include "ops/ops.h"
#include "ops/optim.h"
#include "trace/trace_analysis.h"
#include "trace/trace_file.h"
#include "train/corpus.h"
#include "train/dflash_batch.h"
#include "train/dflash_block_drafter.h"
#include "train/drafter_step.h"
#include "train/drafter_trainer.h"
#include "train/memory_report.h"
#include "train/optimizer.h"
#include "train/pipeline.h"
#include "train/train_config.h"
#include "train_test_util.h"

namespace cg {
namespace {

using testing_nn::TempDir;
using train::BlockBatch;
using train::DrafterSequence;

nn::DFlashDrafterConfig tiny_drafter_config(int64_t vocab = 40, int64_t layers = 1) {
  nn::DFlashDrafterConfig c;
  c.layers.vocab_size = vocab;
  c.layers.hidden_size = 16;
  c.layers.num_layers = layers;
  c.layers.num_heads = 2;
  c.layers.num_kv_heads = 1;
  c.layers.head_dim = 8;
  c.layers.intermediate_size = 24;
  c.layers.rope_theta = 10000;
  c.target_layers = {0, 1};
  c.mask_token_id = vocab - 1;
  return c;
}

struct TinyDrafter {
  explicit TinyDrafter(int64_t layers = 1, DType dtype = DType::f32) : gen(5) {
    cfg = tiny_drafter_config(40, layers);
    embed = randn({40, 16}, {.dtype = dtype}, &gen, 0, 0.5);
    head = randn({40, 16}, {.dtype = dtype}, &gen, 0, 0.5);
    drafter = std::make_unique<nn::DFlashDrafter>(
        cfg, embed, head, nn::InitOptions{.dtype = dtype, .generator = &gen});
  }
  Generator gen;
  nn::DFlashDrafterConfig cfg;
  Tensor embed, head;
  std::unique_ptr<nn::DFlashDrafter> drafter;
};

using testing_train::make_sequence;

TEST(DFlashBatch, LabelsAreNotShifted) {
  const DrafterSequence s = make_sequence(20, 5, 1);
  const BlockBatch b = train::build_block_batch({&s}, {{6, 11, 17}}, 4, 4, 4.0, 39, 0);
  for (int64_t blk = 0; blk < 3; ++blk) {
    const int64_t a = b.anchors[static_cast<size_t>(blk)];
    EXPECT_EQ(b.block_ids[static_cast<size_t>(blk * 4)], s.ids[static_cast<size_t>(a)]);
    for (int64_t k = 0; k < 4; ++k) {
      const size_t i = static_cast<size_t>(blk * 4 + k);
      EXPECT_EQ(b.positions[i], a + k);
      if (k > 0) EXPECT_EQ(b.block_ids[i], 39) << "slot " << k << " is MASK";
      if (k > 0 && a + k < 20) {
        EXPECT_EQ(b.labels[i], s.ids[static_cast<size_t>(a + k)])
            << "slot " << k << " of anchor " << a;
        EXPECT_EQ(b.teacher_rows[i], a + k - 1) << "the teacher of slot k is the target at a+k-1";
      }
    }
    EXPECT_EQ(b.labels[static_cast<size_t>(blk * 4)], train::kIgnoreLabel) << "slot 0 has no label";
  }
  // Anchor 17 of a 20-token sequence: slots reaching 20+ have no label and no weight.
  EXPECT_EQ(b.labels[2 * 4 + 3], train::kIgnoreLabel);
  EXPECT_EQ(b.weights[2 * 4 + 3], 0.0);
  // The fourth block is padding: nothing.
  EXPECT_EQ(b.anchors[3], -1);
  EXPECT_EQ(b.padded[3], 1);
  for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(b.weights[static_cast<size_t>(12 + k)], 0.0);
}

TEST(DFlashBatch, WeightsFollowTheFormula) {
  DrafterSequence s = make_sequence(30, 2, 2);
  s.loss_mask[12] = 0;  // a hole in the mask
  for (double gamma : {4.0, 7.0, 0.0}) {
    const BlockBatch b = train::build_block_batch({&s}, {{8}}, 1, 8, gamma, 39, 0);
    for (int64_t k = 0; k < 8; ++k) {
      const double expect =
          k == 0 || 8 + k == 12 ? 0.0 : (gamma > 0 ? std::exp(-(k - 1) / gamma) : 1.0);
      EXPECT_DOUBLE_EQ(b.weights[static_cast<size_t>(k)], expect)
          << "gamma " << gamma << " slot " << k;
    }
  }
}

TEST(DFlashBatch, AnchorSamplingRespectsMaskAndMaximum) {
  DrafterSequence s = make_sequence(60, 10, 3);
  s.loss_mask[30] = 0;
  s.loss_mask[59] = 1;
  const std::vector<int64_t> cands = train::anchor_candidates(s.loss_mask);
  for (int64_t t : cands)
    EXPECT_TRUE(s.loss_mask[static_cast<size_t>(t)] && s.loss_mask[static_cast<size_t>(t + 1)]);
  EXPECT_EQ(cands.size(), 60u - 10u - 1u - 2u);  // not 29, 30 (mask hole), not 59 (no successor)
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Generator g(seed);
    for (int64_t max : {1, 7, 1000}) {
      const auto a = train::sample_anchors(s.loss_mask, max, g);
      EXPECT_EQ(a.size(), std::min<size_t>(cands.size(), static_cast<size_t>(max)));
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(std::count(cands.begin(), cands.end(), a[i])) << a[i] << " is not a candidate";
        if (i) EXPECT_LT(a[i - 1], a[i]) << "sorted, without repeats";
      }
    }
  }
}

// The block rule, through gradients: block b's outputs depend on context positions < its
// anchor and on its own block only; padded blocks output nothing.
TEST(DFlashDrafter, BlockSeesOnlyEarlierContextAndItself) {
  TinyDrafter t(2);
  const DrafterSequence s = make_sequence(16, 2, 4);
  const BlockBatch b = train::build_block_batch({&s}, {{3, 9}}, 3, 4, 0.0, 39, 0);
  Tensor features = randn({1, 16, 32}, {}, &t.gen).requires_grad_();
  Tensor x = randn({1, 12, 16}, {}, &t.gen).requires_grad_();
  std::vector<int64_t> padded(b.padded.begin(), b.padded.end());
  const AttentionMask mask = AttentionMask::dflash_blocks(
      16, 4, from_ints(b.anchors, {1, 3}), to_dtype(from_ints(padded, {1, 3}), DType::boolean));
  const Tensor out =
      t.drafter->forward(x, from_ints(b.positions, {1, 12}), mask, t.drafter->fuse(features));
  for (int64_t blk = 0; blk < 3; ++blk) {
    features.set_grad(Tensor());
    x.set_grad(Tensor());
    sum(narrow(out, 1, blk * 4, 4)).backward(Tensor(), true);
    const auto gf = sum(mul(features.grad(), features.grad()), {2}).to_vector();
    const auto gx = sum(mul(x.grad(), x.grad()), {2}).to_vector();
    const int64_t anchor = b.anchors[static_cast<size_t>(blk)];
    for (int64_t j = 0; j < 16; ++j) {
      if (anchor >= 0 && j < anchor) continue;
      EXPECT_EQ(gf[static_cast<size_t>(j)], 0.0) << "block " << blk << " saw context " << j;
    }
    for (int64_t q = 0; q < 12; ++q) {
      if (q / 4 == blk) continue;  // its own tokens (a padded block still has its residual)
      EXPECT_EQ(gx[static_cast<size_t>(q)], 0.0) << "block " << blk << " saw block token " << q;
    }
  }
  // Context before the anchor matters (the test can fail).
  features.set_grad(Tensor());
  sum(narrow(out, 1, 4, 4)).backward(Tensor(), true);
  EXPECT_GT(sum(mul(narrow(features.grad(), 1, 0, 9), narrow(features.grad(), 1, 0, 9))).item(),
            0.0);
}

// The three head-loss paths give the drafter the same gradients (CE and KL).
TEST(DFlashDrafter, ThreeHeadLossPathsGiveTheSameGradients) {
  for (const char* kind : {"ce", "mix"}) {
    TinyDrafter t(1);
    const DrafterSequence s0 = make_sequence(24, 4, 6), s1 = make_sequence(20, 6, 7);
    Generator g(9);
    const std::vector<std::vector<int64_t>> anchors = {train::sample_anchors(s0.loss_mask, 5, g),
                                                       train::sample_anchors(s1.loss_mask, 5, g)};
    const BlockBatch b = train::build_block_batch({&s0, &s1}, anchors, 5, 4, 4.0, 39, 0);
    const Tensor features = randn({2, 24, 32}, {}, &t.gen);
    const Tensor teacher = randn({48, 16}, {}, &t.gen);
    train::LossSpec spec;
    spec.kind = kind;
    const LossConfig loss = train::drafter_loss_config(spec);
    std::vector<std::vector<double>> grads[3];
    double losses[3];
    int i = 0;
    for (HeadLossPath path : {HeadLossPath::naive, HeadLossPath::chunked, HeadLossPath::fused}) {
      t.drafter->zero_grad();
      HeadLossResult r = train::drafter_loss(*t.drafter, {&b, features, teacher}, {loss, path, 7});
      r.loss.backward();
      losses[i] = r.loss.item();
      for (const Tensor& p : t.drafter->parameters()) grads[i].push_back(p.grad().to_vector());
      ++i;
    }
    for (int k = 1; k < 3; ++k) {
      EXPECT_NEAR(losses[k], losses[0], 1e-5) << kind;
      for (size_t p = 0; p < grads[0].size(); ++p) {
        for (size_t e = 0; e < grads[0][p].size(); ++e) {
          ASSERT_NEAR(grads[k][p][e], grads[0][p][e], 1e-5 + 1e-4 * std::abs(grads[0][p][e]))
              << kind << " path " << k << " parameter " << p << " element " << e;
        }
      }
    }
  }
}

// What the speculative decoder gets from the cached drafter equals the argmax of the
// training forward for the same anchor.
TEST(DFlashDrafter, CachedProposalsMatchTheTrainingForward) {
  TinyDrafter t(2);
  const DrafterSequence s = make_sequence(18, 2, 8);
  const Tensor features = randn({1, 18, 32}, {}, &t.gen);
  train::DFlashBlockDrafter bd(*t.drafter);
  EXPECT_EQ(bd.target_layers(), (std::vector<int64_t>{0, 1}));
  for (int64_t anchor : {1, 7, 12}) {
    const BlockBatch b = train::build_block_batch({&s}, {{anchor}}, 1, 6, 0.0, 39, 0);
    LossConfig ce;
    ce.ignore_index = train::kIgnoreLabel;
    NoGradGuard no_grad;
    HeadLossResult r =
        train::drafter_loss(*t.drafter, {&b, features, Tensor()}, {ce, HeadLossPath::naive});
    const std::vector<double> am = r.argmax.to_vector();
    bd.reset();
    // In two appends, as decoding does.
    bd.append_context(reshape(narrow(features, 1, 0, anchor / 2 + 1), {anchor / 2 + 1, 32}), 0);
    bd.append_context(reshape(narrow(features, 1, anchor / 2 + 1, anchor - anchor / 2 - 1),
                              {anchor - anchor / 2 - 1, 32}),
                      anchor / 2 + 1);
    EXPECT_EQ(bd.context_length(), anchor);
    const std::vector<int64_t> p = bd.propose(s.ids[static_cast<size_t>(anchor)], anchor, 6);
    ASSERT_EQ(p.size(), 5u);
    for (size_t k = 0; k < 5; ++k)
      EXPECT_EQ(p[k], static_cast<int64_t>(am[k + 1])) << "anchor " << anchor << " slot " << k + 1;
    bd.truncate_context(anchor - 1);
    EXPECT_EQ(bd.context_length(), anchor - 1);
  }
}

TEST(DFlashDrafter, PublicLayerRule) {
  EXPECT_EQ(nn::dflash_target_layers(36, 5), (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(nn::dflash_target_layers(6, 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(nn::dflash_target_layers(6, 1), (std::vector<int64_t>{3}));
  EXPECT_THROW(nn::dflash_target_layers(4, 2), Error);
}

TEST(DFlashOptimizer, AdamWMatchesTheFormulaAndClipsOnTheDevice) {
  Tensor w = from_vector({1.0, -2.0, 0.5}, {3}).requires_grad_();
  train::AdamW opt(
      {w}, {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0});
  double m[3] = {0, 0, 0}, v[3] = {0, 0, 0}, ref[3] = {1.0, -2.0, 0.5};
  const double g0[3] = {3.0, 4.0, 0.0};  // norm 5: clipped to 1 (coefficient 0.2)
  for (int64_t step = 1; step <= 3; ++step) {
    w.set_grad(from_vector({g0[0] * 2, g0[1] * 2, g0[2] * 2}, {3}));  // x2, then x0.5 below
    opt.step(0.01, 0.5);
    EXPECT_NEAR(opt.last_grad_norm(), 5.0, 1e-5);
    for (int i = 0; i < 3; ++i) {
      const double g = g0[i] * (1.0 / (5.0 + 1e-6));
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.99 * v[i] + 0.01 * g * g;
      const double mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.99, step));
      ref[i] -= 0.01 * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * ref[i]);
    }
    const auto got = w.detach().to_vector();
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(got[i], ref[i], 1e-6) << "step " << step << " element " << i;
  }
  EXPECT_NEAR(train::warmup_cosine_lr(5, 100, 10, 1.0, 0.1), 0.5, 1e-12);
  EXPECT_NEAR(train::warmup_cosine_lr(11, 100, 10, 1.0, 0.1), 1.0, 1e-12);
  EXPECT_NEAR(train::warmup_cosine_lr(100, 100, 10, 1.0, 0.1), 0.1, 1e-12);
}

// ---- the pipeline -------------------------------------------------------------------------

train::TrainConfig ci_config(const std::string& run_dir) {
  return testing_train::ci_train_config(run_dir);
}

TEST(DFlashPipeline, ACiSizedRunLearns) {
  TempDir dir;
  const train::TrainConfig c = ci_config(dir.file("run"));
  const nlohmann::json s = train::run_pipeline(c);
  const auto acc = s["per_slot_accuracy"].get<std::vector<double>>();
  EXPECT_GT(acc[1], 0.2) << "slot-1 accuracy (chance: 1/260)";
  EXPECT_GT(s["tau"].get<double>(), 1.3);
  EXPECT_TRUE(s["lossless"].get<bool>());
  EXPECT_TRUE(std::filesystem::exists(dir.file("run/summary.json")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("run/metrics.jsonl")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("run/target/model.safetensors")));
  EXPECT_EQ(s["target_source"], "trained");
}

// bf16 compute with fp32 masters runs the whole pipeline and still learns something.
TEST(DFlashPipeline, Bf16ComputeWithFp32Masters) {
  TempDir dir;
  train::TrainConfig c = ci_config(dir.file("run"));
  c.drafter.dtype = "bf16";
  c.drafter.loss.kind = "mix";
  c.drafter.optim.grad_accum = 2;
  const nlohmann::json s = train::run_pipeline(c);
  EXPECT_GT(s["per_slot_accuracy"][1].get<double>(), 0.1);
  EXPECT_TRUE(s["lossless"].get<bool>());
}

// The drafter losses of metrics.jsonl, in order.
std::vector<double> losses_of(const std::string& metrics) {
  std::vector<double> losses;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["phase"] == "drafter") losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

// Resume gives the same next-step loss as an uninterrupted run; a damaged newest
// checkpoint falls back to the previous one; when none is usable, the error is clear and
// leaves the run directory as it was.
TEST(DFlashPipeline, ResumeIsExactAndAFailedResumeChangesNothing) {
  TempDir dir;
  train::TrainConfig c = ci_config(dir.file("run"));
  c.drafter.optim.steps = 12;
  c.eval.prompts = 1;
  c.eval.accuracy_sequences = 1;
  train::run_pipeline(c);  // checkpoints at steps 10 and 12
  const std::string ckpt10 = dir.file("run/drafter/step_00000010.safetensors");
  ASSERT_TRUE(std::filesystem::exists(ckpt10));
  const std::vector<double> losses = losses_of(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(losses.size(), 12u);
  // Rebuild the trainer from the step-10 checkpoint and take step 11.
  std::filesystem::remove(dir.file("run/drafter/step_00000012.safetensors"));
  train::TrainConfig c2 = c;
  c2.drafter.optim.steps = 11;
  const nlohmann::json s2 = train::run_pipeline(c2);
  const std::vector<double> losses2 = losses_of(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(losses2.size(), 11u);  // steps 1..10 kept, 11 and 12 of the first run dropped, 11 again
  EXPECT_EQ(losses2.back(), losses[10]) << "step 11 after resuming from step 10";
  EXPECT_EQ(s2["target_source"], "cache");

  // A damaged latest checkpoint is skipped for the one before (drafter_checkpoints.h):
  // the run resumes from step 10 and takes step 11 again, with the same loss.
  const std::string latest = dir.file("run/drafter/step_00000011.safetensors");
  auto damage = [](const std::string& file) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "not a checkpoint";
  };
  damage(latest);
  const nlohmann::json s3 = train::run_pipeline(c2);
  EXPECT_EQ(s3["drafter_steps"]["resumed_at"], 10);
  EXPECT_EQ(losses_of(dir.file("run/metrics.jsonl")).back(), losses[10]);
  // Every checkpoint damaged: a clear error, and nothing in the run dir changes.
  damage(latest);
  damage(ckpt10);
  std::map<std::string, std::string> before;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.file("run"))) {
    if (e.is_regular_file()) {
      std::ifstream in(e.path(), std::ios::binary);
      before[e.path().string()] = std::string(std::istreambuf_iterator<char>(in), {});
    }
  }
  try {
    train::run_pipeline(c2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step_00000011.safetensors"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("unchanged"), std::string::npos) << e.what();
  }
  std::map<std::string, std::string> after;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.file("run"))) {
    if (e.is_regular_file()) {
      std::ifstream in(e.path(), std::ios::binary);
      after[e.path().string()] = std::string(std::istreambuf_iterator<char>(in), {});
    }
  }
  EXPECT_EQ(before, after);
}

std::string config_error(const std::string& json) {
  try {
    train::TrainConfig::from_json(nlohmann::json::parse(json));
  } catch (const Error& e) { return e.what(); }
  return "no error";
}

// Note [Out of memory is a row] (train/memory_report.h): under a memory limit the path that
// does not fit is a row of the memory story, not the end of a run that already trained.
TEST(DFlashMemoryReport, APathThatRunsOutOfMemoryIsARow) {
  // Logits [256, 32768] are 32 MiB (each their own segment); fused's chunk is 4 MiB.
  train::MemoryShape s{"small", 32768, 64, 1, 1, 64, 64, 1, 1, 64, 16, 16, 1, 32};
  CachingAllocator& alloc = allocator_for(kCPU);
  const std::string traces =
      std::filesystem::temp_directory_path() / ("cg_mem_" + std::to_string(::getpid()));
  std::filesystem::create_directories(traces);
  const train::MemoryReport free_run = train::measure_drafter_step_memory(s, traces, 5);
  ASSERT_EQ(free_run.paths.size(), 3u);
  // The table's step peak is above the base; the trace's peak is base + step peak.
  for (const train::PathMemory& p : free_run.paths) {
    EXPECT_EQ(analyse_trace(read_trace_file(p.trace_file)).peak.allocated, p.base + p.step_peak)
        << p.path;
  }
  EXPECT_NE(train::memory_table({free_run}).find("allocated before the step"), std::string::npos);
  std::filesystem::remove_all(traces);
  const int64_t naive = free_run.paths[0].step_peak, fused = free_run.paths[2].step_peak;
  ASSERT_GT(naive, fused + (48 << 20));  // the logits and their gradient
  alloc.empty_cache();
  // Room for the weights and data (16.5 MiB, in 20 MiB segments) and fused's step, not naive's.
  const size_t limit = static_cast<size_t>(alloc.stats().reserved_bytes.current) + (80 << 20);
  alloc.set_memory_limit(limit);
  train::MemoryReport r;
  EXPECT_NO_THROW(r = train::measure_drafter_step_memory(s, "", 5));
  alloc.set_memory_limit(0);
  ASSERT_EQ(r.paths.size(), 3u);
  EXPECT_EQ(r.paths[0].oom_phase, "backward") << "limit " << limit;  // the logits' gradient
  EXPECT_NE(r.paths[0].oom_message.find("out of memory"), std::string::npos);
  EXPECT_EQ(r.paths[2].oom_phase, "") << r.paths[2].oom_message;
  EXPECT_EQ(r.paths[2].step_peak, fused);
  EXPECT_EQ(r.naive_over_fused(), 0.0);
  const std::string table = train::memory_table({r});
  EXPECT_NE(table.find("ran out of memory in backward"), std::string::npos) << table;
  EXPECT_EQ(train::to_json(r)["paths"]["naive"]["out_of_memory"]["phase"], "backward");
  // A limit below the weights themselves: every path says so.
  alloc.empty_cache();
  alloc.set_memory_limit(static_cast<size_t>(alloc.stats().reserved_bytes.current) + (1 << 20));
  EXPECT_NO_THROW(r = train::measure_drafter_step_memory(s, "", 5));
  alloc.set_memory_limit(0);
  for (const auto& p : r.paths) EXPECT_EQ(p.oom_phase, "setup");
}

TEST(DFlashConfig, CorpusFileMustBeUtf8Text) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("cg_corpus_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto error = [](const std::string& path) {
    try {
      train::read_corpus_file(path);
    } catch (const Error& e) { return e.message(); }
    return std::string("no error");
  };
  EXPECT_NE(error(dir).find("is a directory"), std::string::npos) << error(dir);  // was "is empty"
  std::ofstream(dir + "/latin1.txt", std::ios::binary) << "caf\xe9 au lait\n";
  EXPECT_NE(error(dir + "/latin1.txt").find("not UTF-8 text (byte 3"), std::string::npos)
      << error(dir + "/latin1.txt");
  std::ofstream(dir + "/binary", std::ios::binary) << std::string("PK\x03\x04\xff\xfe\x00", 7);
  EXPECT_NE(error(dir + "/binary").find("not UTF-8"), std::string::npos);
  std::ofstream(dir + "/cut.txt", std::ios::binary) << "ok \xe2\x82";  // a character cut short
  EXPECT_NE(error(dir + "/cut.txt").find("byte 3"), std::string::npos);
  std::ofstream(dir + "/good.txt", std::ios::binary)
      << "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n";
  EXPECT_EQ(error(dir + "/good.txt"), "no error");
  std::filesystem::remove_all(dir);
}

TEST(DFlashConfig, PromptsFromAUserTextAreHeldOutForEvaluation) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "line " + std::to_string(i) + ": body\n";
  const auto train_p = train::prompts_from_text(text, 200, 16, 1, train::PromptSplit::training);
  const auto eval_p = train::prompts_from_text(text, 200, 16, 2, train::PromptSplit::evaluation);
  for (const std::string& p : eval_p) {  // before: both drew from all 40 lines
    EXPECT_EQ(std::count(train_p.begin(), train_p.end(), p), 0) << p;
  }
  EXPECT_EQ(eval_p.front().substr(0, 5), "line ");
  // A one-line file cannot hold a line out; both share it.
  EXPECT_EQ(train::prompts_from_text("only: one\n", 1, 16, 1, train::PromptSplit::evaluation),
            std::vector<std::string>{"only: "});
}

TEST(DFlashConfig, BadConfigsAreClearErrors) {
  EXPECT_NE(
      config_error(R"({"drafter": {"blok_size": 8}})").find("unknown field 'drafter.blok_size'"),
      std::string::npos);
  EXPECT_NE(
      config_error(R"({"drafter": {"block_size": 1}})").find("drafter.block_size: must be >= 2"),
      std::string::npos);
  EXPECT_NE(config_error(R"({"drafter": {"max_anchors": 500}})").find("beyond the sequence"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"seed": "x"})").find("seed: must be an integer"), std::string::npos);
  EXPECT_NE(config_error(R"({"drafter": {"vocab_size": 1024.5}})")
                .find("drafter.vocab_size: must be an integer, got 1024.5"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"drafter": {"loss": {"kind": "jsd"}}})").find("drafter.loss.kind"),
            std::string::npos);
  EXPECT_NE(config_error(R"([1])").find("must be a JSON object"), std::string::npos);
  EXPECT_EQ(config_error(R"({"drafter": {"block_size": 16, "max_anchors": 32}})"), "no error");
  // Integers that do not fit are refused, not wrapped (-1 became a seed of 2^64 - 1, and
  // 2^64 - 1 steps were reported as "got -1"); the line names one location, not two.
  const std::string negative_seed = config_error(R"({"corpus": {"seed": -5}})");
  EXPECT_NE(negative_seed.find("corpus.seed: must be a non-negative integer, got -5"),
            std::string::npos)
      << negative_seed;
  EXPECT_EQ(negative_seed.find("(at "), negative_seed.rfind("(at ")) << negative_seed;
  EXPECT_NE(config_error(R"({"drafter": {"optim": {"steps": 18446744073709551615}}})")
                .find("at most 9223372036854775807"),
            std::string::npos);
  // hf_config describes a checkpoint; alone it silently replaced the sizes of the target to train.
  EXPECT_NE(config_error(R"({"target": {"hf_config": "config.json"}})")
                .find("target.checkpoint, which is empty"),
            std::string::npos);
  // trace_dir lives under run_dir: "/tmp/x" used to become "runs/toy//tmp/x".
  EXPECT_NE(config_error(R"({"memory": {"trace_dir": "/tmp/x"}})")
                .find("memory.trace_dir: must be a folder inside run_dir"),
            std::string::npos);
  // Ranges read as written: "from 1 to 1048576, got 0", not "1.04858e+06".
  EXPECT_NE(
      config_error(R"({"drafter": {"max_anchors": 0}})").find("must be from 1 to 1048576, got 0"),
      std::string::npos);
  // A block longer than the generated part has slots that never get a label.
  EXPECT_NE(
      config_error(R"({"drafter": {"block_size": 200}})").find("longer than the generated part"),
      std::string::npos);
  try {
    train::TrainConfig::from_file("/nonexistent/toy.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/toy.json"), std::string::npos) << e.what();
  }
  // configs/toy.json (what tools/run.sh runs) is the built-in default, field for field.
  EXPECT_EQ(train::TrainConfig::from_file(std::string(CHUNKGRAD_TEST_DATA_DIR) +
                                          "/../../configs/toy.json")
                .to_json(),
            train::TrainConfig().to_json());
  // The written form reads back to the same config.
  train::TrainConfig c;
  c.drafter.block_size = 16;
  EXPECT_EQ(train::TrainConfig::from_json(c.to_json()).to_json(), c.to_json());
}

}  // namespace
}  // namespace cg
