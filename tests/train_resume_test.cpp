// Why this file exists: what users of PyTorch and Hugging Face trainers expect of
// `chunkgrad train` (issue 18 item 24), run on the built program with tiny configs:
// `--set key=value` overrides, `--resume-from PATH`, the fallback past a damaged newest
// checkpoint, drafter.keep_checkpoints, and the line a resume with another
// drafter.optim.steps says about the learning-rate schedule; a resume may switch
// activation checkpointing.
#include "tests/train_program_fixture.h"

namespace {

using train_program_fixture::slurp;
using train_program_fixture::TrainProgram;
using train_program_fixture::TrainRun;

class TrainResume : public TrainProgram {
 protected:
  // The drafter checkpoints' steps in `run`, oldest first.
  static std::vector<int64_t> checkpoint_steps(const std::string& run) {
    std::vector<int64_t> steps;
    for (const auto& e : std::filesystem::directory_iterator(run + "/drafter")) {
      const std::string name = e.path().filename().string();
      if (name.starts_with("step_") && name.ends_with(".safetensors"))
        steps.push_back(std::stoll(name.substr(5)));
    }
    std::sort(steps.begin(), steps.end());
    return steps;
  }
  static std::string checkpoint(const std::string& run, int step) {
    char name[64];
    std::snprintf(name, sizeof name, "/drafter/step_%08d.safetensors", step);
    return run + name;
  }
  TrainRun run_export(const std::string& run_dir) const {
    return run("export --run-dir '" + run_dir + "' --out '" + path("pub") + "'");
  }
  // The step the summary says the drafter resumed at.
  static int64_t resumed_at(const TrainRun& r) {
    return nlohmann::json::parse(r.out)["drafter_steps"]["resumed_at"].get<int64_t>();
  }
};

TEST_F(TrainResume, SetOverridesFieldsAndNamesTheBadOnes) {
  const std::string config = write("c.json", tiny(path("run")));
  const TrainRun r = train("--print-config --config " + config +
                           " --set drafter.optim.lr=1e-3 --set drafter.loss.kind=kl"
                           " --set 'drafter.target_layers=[0]' --set run_dir=elsewhere"
                           " --run-dir " +
                           path("wins"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["drafter"]["optim"]["lr"], 1e-3);
  EXPECT_EQ(j["drafter"]["loss"]["kind"], "kl");
  EXPECT_EQ(j["drafter"]["target_layers"], nlohmann::json::array({0}));
  EXPECT_EQ(j["drafter"]["optim"]["steps"], 2);  // the file's, not the default's
  EXPECT_EQ(j["run_dir"], path("wins"));         // --run-dir after --set
  // Keys that name no field: the nearest ones are named; a section is not a field.
  expect_error(train("--print-config --set lr=1"),
               "'lr' is not a config field; did you mean drafter.optim.lr or target.optim.lr?");
  expect_error(train("--print-config --set drafter.blok_size=4"),
               "did you mean drafter.block_size?");
  expect_error(train("--print-config --set drafter.optim=3"), "is a section, not a field");
  expect_error(train("--print-config --set seed"), "expected KEY=VALUE");
  // Types and ranges: the config reader's own errors, saying the --set gave the value.
  expect_error(train("--print-config --set drafter.optim.lr=abc"),
               "drafter.optim.lr: must be a number, got \"abc\" (set by --set drafter.optim.lr");
  expect_error(train("--print-config --set drafter.block_size=1"), "drafter.block_size");
  expect_error(train("--print-config --set run_dir=123"), "quote it");
  // A target too shallow for the layer rule: refused before the target trains.
  expect_error(train("--print-config --set target.num_layers=4"),
               "drafter.target_layers is empty, so the layer rule picks 3 of the target's 4");
  // --features against a --set of the same fields: an error, not one silently winning.
  const std::string feats = path("feats");
  const TrainRun same =
      train("--print-config --features " + feats + " --set features.dir=" + feats);
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(nlohmann::json::parse(same.out)["features"]["source"], "offline");
  expect_error(train("--print-config --features " + feats + " --set features.source=online"),
               "disagree");
  expect_error(train("--print-config --features " + feats + " --set features.dir=elsewhere"),
               "name two folders");
}

// A newest checkpoint that is unreadable or holds NaN was a refusal that left the user to
// find and delete it; the run now resumes from the one before and says which it skipped.
TEST_F(TrainResume, ADamagedNewestCheckpointFallsBackToThePreviousOne) {
  const std::string run = path("run");
  const std::string args = "--json --config " + write("c.json", tiny(run)) +
                           " --set drafter.optim.steps=4 --set drafter.checkpoint_every=2";
  ASSERT_EQ(train(args).exit_code, 0);
  ASSERT_EQ(checkpoint_steps(run), (std::vector<int64_t>{2, 4}));
  const std::string good = slurp(checkpoint(run, 4));
  // "flipped": one bit of an fp32 weight's exponent, a finite value still (an outside
  // tester's 0.036 -> 1e37), found by its checksum (Note [Tensor checksums]).
  for (const std::string damage : {"truncated", "nan", "flipped"}) {
    SCOPED_TRACE(damage);
    const std::string damaged = damage == "nan"       ? with_nan(checkpoint(run, 2), 0)
                                : damage == "flipped" ? with_flipped_bit(checkpoint(run, 4), 3, 6)
                                                      : good.substr(0, good.size() / 2);
    std::ofstream(checkpoint(run, 4), std::ios::binary | std::ios::trunc) << damaged;
    const TrainRun r = train(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(resumed_at(r), 2);
    const std::string line = "chunkgrad train: warning: resume: " + checkpoint(run, 4) + " is ";
    const size_t at = r.err.find(line);
    ASSERT_NE(at, std::string::npos) << r.err;
    const std::string said = r.err.substr(at, r.err.find('\n', at) - at);
    EXPECT_NE(said.find("skipped it, resuming from " + checkpoint(run, 2)), std::string::npos)
        << said;
    EXPECT_NE(said.find(damage == "nan"       ? "holds nan"
                        : damage == "flipped" ? "does not match the checksum written with it"
                                              : "unreadable"),
              std::string::npos)
        << said;
    EXPECT_EQ(slurp(checkpoint(run, 4)).size(), good.size());  // saved again by this run
  }
  // A checkpoint the user names is never replaced by another: refused, nothing changed.
  std::ofstream(checkpoint(run, 2), std::ios::binary | std::ios::trunc) << "garbage";
  const auto before = files_of(run);
  const TrainRun named = train(args + " --resume-from " + checkpoint(run, 2));
  expect_error(named, "is unreadable");
  EXPECT_NE(named.err.find("(given by --resume-from)"), std::string::npos) << named.err;
  EXPECT_EQ(files_of(run), before);
  // Every checkpoint damaged: the newest one's damage is the refusal.
  std::ofstream(checkpoint(run, 4), std::ios::binary | std::ios::trunc) << "garbage";
  expect_error(train(args), "the earlier checkpoint is damaged too");
}

TEST_F(TrainResume, ResumeFromANamedCheckpointReplacesTheLaterOnes) {
  const std::string run = path("run");
  const std::string args = "--json --config " + write("c.json", tiny(run)) +
                           " --set drafter.optim.steps=4 --set drafter.keep_checkpoints=0";
  ASSERT_EQ(train(args + " --set drafter.checkpoint_every=1").exit_code, 0);
  ASSERT_EQ(checkpoint_steps(run), (std::vector<int64_t>{1, 2, 3, 4}));
  const std::string saved = path("step2.safetensors");  // anywhere, not only in run_dir
  std::filesystem::copy_file(checkpoint(run, 2), saved);
  const TrainRun r = train(args + " --resume-from " + saved);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(resumed_at(r), 2);
  EXPECT_NE(r.err.find("2 later checkpoints are removed when this run saves its first"),
            std::string::npos)
      << r.err;
  // This run saved only its last step (checkpoint_every 250): the other run's step 3 went.
  EXPECT_EQ(checkpoint_steps(run), (std::vector<int64_t>{1, 2, 4}));
  // Options checked up front: a file that is not there, and --fresh with it.
  expect_error(train(args + " --resume-from " + path("none.safetensors")), "none.safetensors");
  // A step's checkpoint named as the docs once spelled it names the files there (an outside
  // tester's step_10.safetensors, where the file is step_00000010.safetensors).
  expect_error(train(args + " --resume-from " + run + "/drafter/step_2.safetensors"),
               "drafter/step_2.safetensors; " + run +
                   "/drafter holds step_00000004.safetensors, step_00000002.safetensors, "
                   "step_00000001.safetensors (checkpoints are named by their step in 8 digits)");
  expect_error(train(args + " --fresh --resume-from " + saved), "excludes");
  // A checkpoint of another config is refused as a resume is, naming the field.
  expect_error(train(args + " --set drafter.gamma=2 --resume-from " + saved),
               "drafter.gamma: 4.0 then, 2.0 now");
}

// An outside tester flipped a bit in the target cache: the cache was retrained, silently,
// from the weights read before the damage was found (the damaged tensor among them), so the
// "same" target differed from a fresh run's and the drafter resumed against another one.
// Now it is retrained from its seed, with a warning: the cache comes back byte for byte.
TEST_F(TrainResume, ADamagedTargetCacheIsTrainedAgainFromItsSeed) {
  const std::string run = path("run");
  const std::string args = "--config " + write("c.json", tiny(run));
  ASSERT_EQ(train(args).exit_code, 0);
  const std::string cache = run + "/target/model.safetensors";
  const std::string good = slurp(cache);
  const std::string damaged = with_flipped_bit(cache, 42, 0);
  std::ofstream(cache, std::ios::binary | std::ios::trunc) << damaged;
  const TrainRun r = train(args + " --fresh");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("chunkgrad train: warning: the target cache " + cache + " is damaged"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("does not match the checksum written with it"), std::string::npos) << r.err;
  EXPECT_TRUE(slurp(cache) == good) << "the retrained cache differs from the seeded one";
}

TEST_F(TrainResume, OnlyTheNewestCheckpointsAreKept) {
  const std::string run = path("run");
  const std::string args = "--config " + write("c.json", tiny(run)) +
                           " --set drafter.optim.steps=5 --set drafter.checkpoint_every=1";
  ASSERT_EQ(train(args + " --set drafter.keep_checkpoints=2").exit_code, 0);
  EXPECT_EQ(checkpoint_steps(run), (std::vector<int64_t>{4, 5}));
  expect_error(train(args + " --set drafter.keep_checkpoints=-1 --print-config"),
               "drafter.keep_checkpoints");
}

// A --fresh run with drafter.checkpoint_every -1 saves nothing, so the earlier run's
// checkpoints stayed beside its config.json, and export took the newest of them as this
// run's (an outside tester's finding). They go when such a run completes; an interrupted
// or failed one leaves them, as before.
TEST_F(TrainResume, AFreshRunThatSavesNothingLeavesNoCheckpointOfTheRunItReplaced) {
  const std::string run = path("run");
  const std::string args = "--config " + write("c.json", tiny(run));
  ASSERT_EQ(train(args).exit_code, 0);
  ASSERT_EQ(checkpoint_steps(run), (std::vector<int64_t>{2}));
  const TrainRun fresh =
      train(args + " --fresh --set drafter.checkpoint_every=-1 --set drafter.optim.lr=0.01");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_TRUE(checkpoint_steps(run).empty()) << "a checkpoint of the replaced run is left";
  expect_error(run_export(run), "no drafter checkpoint", "export");
}

// A resumed run with drafter.checkpoint_every -1 saves nothing, so `export` then took the
// step it had resumed from, silently (an outside tester's finding): the run now warns which
// steps went unsaved and which step export takes.
TEST_F(TrainResume, AResumedRunThatSavesNothingSaysWhichStepExportTakes) {
  const std::string run = path("run");
  const std::string args = "--config " + write("c.json", tiny(run));
  ASSERT_EQ(train(args).exit_code, 0);
  ASSERT_EQ(checkpoint_steps(run), (std::vector<int64_t>{2}));
  const TrainRun more =
      train(args + " --set drafter.checkpoint_every=-1 --set drafter.optim.steps=4");
  ASSERT_EQ(more.exit_code, 0) << more.err;
  EXPECT_NE(more.err.find("warning: drafter steps 3..4 were not saved (drafter.checkpoint_every "
                          "-1); the newest checkpoint, which `chunkgrad export` takes, is still "
                          "step 2 ("),
            std::string::npos)
      << more.err;
  EXPECT_EQ(checkpoint_steps(run), (std::vector<int64_t>{2}));
  // A run that saves says nothing of the kind.
  const TrainRun saving = train(args + " --set drafter.optim.steps=5");
  ASSERT_EQ(saving.exit_code, 0) << saving.err;
  EXPECT_EQ(saving.err.find("were not saved"), std::string::npos) << saving.err;
}

// A field the run warned was unused (mix_ce_weight outside kind mix, sliding_window with
// every layer full), dropped as the warning said, refused the resume for it (an outside
// tester's finding); a used one still does.
TEST_F(TrainResume, AFieldTheRunCalledUnusedMayBeDroppedOnResume) {
  const std::string run = path("run");
  const std::string args = "--config " + write("c.json", tiny(run));
  const TrainRun first = train(args + " --set drafter.loss.mix_ce_weight=0.3" +
                               " --set drafter.sliding_window=7 --set drafter.loss.kind=ce" +
                               " --set drafter.loss.temperature=2");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.err.find("drafter.loss.mix_ce_weight 0.3 is unused"), std::string::npos)
      << first.err;
  const TrainRun again =
      train(args + " --set drafter.loss.kind=ce --set drafter.optim.steps=3 --json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(resumed_at(again), 2);
  expect_error(train(args + " --set drafter.loss.kind=kl --set drafter.optim.steps=4"),
               "drafter.loss.kind");
  // A kind's long name is the same kind; a list that differs is named whole.
  const TrainRun long_name =
      train(args + " --set drafter.loss.kind=cross_entropy --set drafter.optim.steps=3");
  EXPECT_EQ(long_name.exit_code, 0) << long_name.err;
  expect_error(train(args + " --set drafter.loss.kind=ce --set drafter.optim.steps=4" +
                     " --set 'drafter.target_layers=[0]'"),
               "(drafter.target_layers: [] then, [0] now;");
}

// Note [Resume and the schedule]: the schedule follows the new drafter.optim.steps, and
// the resume says so with both learning rates.
TEST_F(TrainResume, ARunWithOtherStepsSaysWhatItDoesToTheSchedule) {
  const std::string run = path("run");
  const std::string config = write("c.json", tiny(run));
  ASSERT_EQ(train("--config " + config).exit_code, 0);
  const TrainRun r = train("--config " + config + " --set drafter.optim.steps=4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: drafter.optim.steps is 4 now and was 2 when step 2 was saved: "
                       "the learning-rate schedule (warmup and cosine) is recomputed for 4 steps"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // Fewer steps than the checkpoint's: it trains nothing, and says so (an outside tester
  // saw "resumed at step 12, the last" and no word of the 4 asked).
  const TrainRun fewer = train("--config " + config + " --set drafter.optim.steps=1");
  ASSERT_EQ(fewer.exit_code, 0) << fewer.err;
  EXPECT_NE(fewer.err.find("warning: drafter.optim.steps is 1 now and was 4 when step 4 was "
                           "saved: the run is already at or past its last step"),
            std::string::npos)
      << fewer.err;
}

// Activation checkpointing is a memory switch with the same gradients: a run that ran out
// of memory turns it on and resumes (and off again), instead of starting over; so are the
// head loss's path and chunk.
TEST_F(TrainResume, MemorySwitchesMayChangeOnResume) {
  const std::string run = path("run");
  const std::string config = write("c.json", tiny(run));
  ASSERT_EQ(train("--json --config " + config).exit_code, 0);
  TrainRun r = train("--json --config " + config +
                     " --set drafter.optim.steps=3 --set drafter.activation_checkpointing=layers");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(resumed_at(r), 2);
  r = train("--json --config " + config + " --set drafter.optim.steps=4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(resumed_at(r), 3);
  // The head loss's path and chunk are memory switches too (an outside tester's resume with
  // a budget-sized chunk was refused as another config).
  r = train("--json --config " + config +
            " --set drafter.optim.steps=5 --set drafter.head_loss_path=chunked"
            " --set drafter.head_loss_chunk_rows=0 --set drafter.head_loss_chunk_budget_mb=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(resumed_at(r), 4);
}

}  // namespace

// An outside tester: a synthetic run (features.source synthetic, no target model) resumed
// with another drafter.optim.steps, or past a damaged newest checkpoint, said nothing under
// --no-progress, where the online pipeline warns in both cases.
TEST_F(TrainResume, ASyntheticRunWarnsAsTheOthersDo) {
  const std::string run = path("synthetic");
  const std::string args =
      "--config '" + std::string(CHUNKGRAD_SOURCE_DIR) + "/configs/toy.json' --no-progress --json" +
      " --run-dir '" + run +
      "' --set features.source=synthetic --set drafter.hidden_size=32"
      " --set drafter.vocab_size=128 --set drafter.num_target_layers=6"
      " --set drafter.num_heads=2 --set drafter.num_kv_heads=1 --set drafter.head_dim=16"
      " --set data.num_sequences=8 --set data.max_new_tokens=32 --set memory.enabled=false"
      " --set drafter.checkpoint_every=2";
  ASSERT_EQ(train(args + " --set drafter.optim.steps=4").exit_code, 0);
  ASSERT_EQ(checkpoint_steps(run), (std::vector<int64_t>{2, 4}));
  const TrainRun longer = train(args + " --set drafter.optim.steps=6");
  ASSERT_EQ(longer.exit_code, 0) << longer.err;
  EXPECT_NE(longer.err.find("warning: drafter.optim.steps is 6 now and was 4 when step 4 was "
                            "saved"),
            std::string::npos)
      << longer.err;
  ASSERT_EQ(checkpoint_steps(run), (std::vector<int64_t>{2, 4, 6}));
  const std::string good = slurp(checkpoint(run, 6));
  std::ofstream(checkpoint(run, 6), std::ios::binary | std::ios::trunc)
      << good.substr(0, good.size() / 2);
  const TrainRun damaged = train(args + " --set drafter.optim.steps=6");
  ASSERT_EQ(damaged.exit_code, 0) << damaged.err;
  EXPECT_EQ(resumed_at(damaged), 4);
  EXPECT_NE(damaged.err.find("chunkgrad train: warning: resume: " + checkpoint(run, 6) +
                             " is unreadable"),
            std::string::npos)
      << damaged.err;
}
