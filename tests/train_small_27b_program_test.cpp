// Why this file exists: what an outside tester found training reduced copies of
// configs/dflash_27b.json on the CPU (synthetic features, and the toy target's), run on the
// built `chunkgrad train`: config errors that were found only after the run directory was
// written, a stop signal with checkpoints off, a --memory-limit-mb that was blamed on the
// host, an out-of-memory that named no phase, and settings that were silently unused.
#include "tests/train_program_fixture.h"

#include "core/error.h"
#include "train/error_context.h"

namespace {

using train_program_fixture::slurp;
using train_program_fixture::TrainProgram;
using train_program_fixture::TrainRun;

class SmallFullScale : public TrainProgram {
 protected:
  // configs/dflash_27b.json at a CI size, as the tester reduced it: synthetic features,
  // hidden 32, vocabulary 128, 5 layers (4 sliding of window 8, 1 full), block 4, 4
  // anchors, f32, no checkpoints, 3 steps.
  std::string small(const std::string& run_dir) const {
    return "--config '" + std::string(CHUNKGRAD_SOURCE_DIR) + "/configs/dflash_27b.json'" +
           " --run-dir '" + run_dir +
           "' --no-progress --device cpu --set drafter.hidden_size=32"
           " --set drafter.vocab_size=128 --set drafter.num_heads=2 --set drafter.num_kv_heads=1"
           " --set drafter.head_dim=16 --set drafter.intermediate_size=32"
           " --set drafter.mask_token_id=127 --set drafter.sliding_window=8"
           " --set drafter.block_size=4 --set drafter.max_anchors=4 --set drafter.dtype=f32"
           " --set data.num_sequences=8 --set data.max_new_tokens=24"
           " --set eval.accuracy_sequences=2 --set drafter.optim.steps=3";
  }
};

// Config errors found after the run directory was written wiped an earlier run's
// summary.json and replaced its config.json (docs/feature_files.md promised the checks came
// first): a head-loss chunk budget too small for one row, heads that do not divide, and,
// for a synthetic run, num_heads 0 -- "the target's", where there is no target -- taken as
// 1 and refused as "num_heads (1) must be ...", a value the user never gave.
TEST_F(SmallFullScale, AnUnbuildableDrafterLeavesTheRunDirectoryAsItWas) {
  const std::string run = path("good");
  ASSERT_EQ(train(small(run)).exit_code, 0) << slurp(path("err"));
  const auto before = files_of(run);
  ASSERT_EQ(before.count(run + "/summary.json"), 1u);
  expect_error(
      train(small(run) + " --fresh --set drafter.num_heads=0 --set drafter.num_kv_heads=2"),
      "features.source synthetic has no target model whose attention sizes a 0 could "
      "take: give drafter.num_heads, drafter.num_kv_heads and drafter.head_dim (got 0, "
      "2, 16");
  EXPECT_EQ(files_of(run), before);
  expect_error(train(small(run) + " --fresh --set drafter.head_loss_chunk_rows=0" +
                     " --set drafter.head_loss_chunk_budget_mb=0.0001"),
               "cannot hold one row of a chunk at V=128");
  EXPECT_EQ(files_of(run), before);
  // The toy target's run: the same checks, before the target trains.
  const std::string toy = path("toy");
  const std::string config = "--config " + write("c.json", tiny(toy));
  ASSERT_EQ(train(config).exit_code, 0) << slurp(path("err"));
  const auto toy_before = files_of(toy);
  expect_error(train(config + " --fresh --set drafter.head_loss_chunk_rows=0" +
                     " --set drafter.head_loss_chunk_budget_mb=0.0001"),
               "drafter.head_loss_chunk_budget_mb");
  expect_error(train(config + " --fresh --set drafter.num_kv_heads=3"),
               "drafter.num_heads 0 (the target's: 2) is not a multiple of drafter.num_kv_heads "
               "3 (grouped-query attention");
  EXPECT_EQ(files_of(toy), toy_before);
  // A new run directory is not left behind.
  expect_error(train(small(path("new")) + " --set drafter.head_loss_chunk_rows=0" +
                     " --set drafter.head_loss_chunk_budget_mb=0.0001"),
               "drafter.head_loss_chunk_budget_mb");
  EXPECT_FALSE(std::filesystem::exists(path("new")));
}

// Ctrl-C with drafter.checkpoint_every -1 (the full-scale config's) said "training saves a
// checkpoint first" and "run the same command to resume", saved nothing (a rerun started
// over), and metrics.jsonl lacked the steps after the last group of 10.
TEST_F(SmallFullScale, AStopWithoutCheckpointsSaysSoAndLogsEveryStep) {
  const std::string run = path("run");
  const pid_t pid = start_train(small(run) + " --set drafter.optim.steps=100000");
  ASSERT_TRUE(wait_for(run + "/metrics.jsonl", R"("phase":"drafter")")) << slurp(path("err"));
  const TrainRun r = stop(pid, SIGINT);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("chunkgrad: stopping at the next step boundary; drafter.checkpoint_every "
                       "is -1, so the drafter saves no checkpoint"),
            std::string::npos)
      << r.err;
  const size_t at = r.err.find("drafter training: interrupted at step ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const int64_t step = std::stoll(r.err.substr(at + 38));
  EXPECT_NE(r.err.find("; nothing was saved (drafter.checkpoint_every is -1), so the same "
                       "command trains the drafter from the start"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("checkpoint first"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("to resume"), std::string::npos) << r.err;
  const auto steps = steps_logged(run, "drafter");
  EXPECT_EQ(static_cast<int64_t>(steps.size()), step) << "a finished step is missing from the log";
  for (const auto& [s, n] : steps) EXPECT_EQ(n, 1) << "drafter step " << s;
  for (const auto& e : std::filesystem::directory_iterator(run + "/drafter"))
    ADD_FAILURE() << "saved " << e.path();
}

// Settings the run does not use, set to other than their defaults, trained without a word:
// now one warning line each (a contradiction stays an error: ce_weight with kind ce).
TEST_F(SmallFullScale, UnusedSettingsAreWarnedAbout) {
  const TrainRun clean = train(small(path("clean")));
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  EXPECT_EQ(clean.err.find("warning"), std::string::npos) << clean.err;
  const TrainRun r = train(small(path("run")) +
                           " --set 'drafter.target_layers=[1, 2, 4]' --set drafter.loss.kind=ce"
                           " --set drafter.loss.ce_weight=0 --set drafter.loss.mix_ce_weight=0.3"
                           " --set drafter.loss.temperature=2 --set 'drafter.layer_types=[]'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line :
       {"warning: drafter.num_target_features 5 is unused: drafter.target_layers lists 3 layers "
        "([1,2,4]) and the drafter reads those 3",
        "warning: drafter.loss.mix_ce_weight 0.3 is unused: it is the CE weight of kind mix, and "
        "drafter.loss.kind is ce",
        "warning: drafter.loss.temperature 2.0 is unused",
        "warning: drafter.sliding_window 8 is unused: every layer is full_attention"})
    EXPECT_NE(r.err.find(line), std::string::npos) << line << " in:\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 4) << r.err;
  // kl: its CE weight is ce_weight; mix_ce_weight is said to be unused. A synthetic run
  // decodes nothing: eval.block_size is unused too.
  const TrainRun kl =
      train(small(path("kl")) + " --set drafter.loss.mix_ce_weight=0.3 --set eval.block_size=2");
  ASSERT_EQ(kl.exit_code, 0) << kl.err;
  EXPECT_NE(kl.err.find("drafter.loss.kind is kl; for hard CE in this kind set "
                        "drafter.loss.ce_weight"),
            std::string::npos)
      << kl.err;
  EXPECT_NE(kl.err.find("warning: eval.block_size 2 is unused: features.source synthetic runs "
                        "no speculative decoding"),
            std::string::npos)
      << kl.err;
}

// An out-of-memory in training named no phase and no step (error_context.h).
TEST_F(SmallFullScale, AnOutOfMemorySaysWhereItCameFrom) {
  const TrainRun r = train(small(path("run")) +
                           " --set drafter.max_anchors=64 --set data.max_new_tokens=256"
                           " --memory-limit-mb 2");
  expect_error(r, "chunkgrad train: error: at drafter step 1: out of memory on cpu");
  EXPECT_NE(r.err.find("(at core/caching_allocator.cpp:"), std::string::npos) << r.err;
}

// The same before the drafter's loop (a stop-51 tester): an out-of-memory in the toy
// target's training or in making the drafter's data named no phase.
TEST_F(SmallFullScale, AnOutOfMemoryBeforeTheDrafterSaysWhereItCameFrom) {
  const std::string config = "--config " + write("c.json", tiny(path("run")));
  expect_error(train(config + " --set target.seq_len=256 --set target.optim.batch_size=8"
                              " --memory-limit-mb 4"),
               "chunkgrad train: error: at target step 1: out of memory on cpu");
  std::filesystem::remove_all(path("run"));
  expect_error(train(config + " --set data.num_sequences=400 --set data.max_new_tokens=32"
                              " --memory-limit-mb 3"),
               "chunkgrad train: error: making the drafter's data (the target's continuations "
               "and features): out of memory on cpu");
}

// A third tester's --memory-limit-mb 1 (under the allocator's 2 MiB segment) ran out of
// memory in the first stage, naming none, after the run directory was written.
TEST_F(SmallFullScale, AMemoryLimitUnderOneSegmentIsRefusedBeforeAnything) {
  const TrainRun r = train(small(path("run")) + " --memory-limit-mb 1");
  expect_error(r,
               "chunkgrad train: error: --memory-limit-mb 1 is under the CPU allocator's "
               "smallest segment (2 MiB): give 0 (no limit) or at least 2");
  EXPECT_FALSE(std::filesystem::exists(path("run")));
}

// error_context.h: the error rethrown with where it happened said first keeps its type (an
// out-of-memory is still one) and its location.
TEST(ErrorContext, AnErrorKeepsItsTypeAndLocation) {
  std::string what, message;
  try {
    try {
      throw cg::OutOfMemoryError("out of memory", "core/caching_allocator.cpp", 123);
    } catch (const cg::Error&) { cg::train::rethrow_with_context("at drafter step 21: "); }
  } catch (const cg::OutOfMemoryError& e) {
    what = e.what();
    message = e.message();
  }
  EXPECT_EQ(message, "at drafter step 21: out of memory");
  EXPECT_EQ(what, "at drafter step 21: out of memory (at core/caching_allocator.cpp:123)");
}

}  // namespace
