// Why this file exists: the loss vocabulary end to end. Every loss kind has its names and
// parses back (ops/loss_config.h); every kind the train config accepts maps to the
// LossConfig of that kind (train/drafter_step.cpp's switch), and a training step with it
// trains that loss: its loss equals the head loss of a LossConfig built by hand at the ops
// level, and no two kinds train the same loss. And the drafter's chunk fields
// (drafter.head_loss_chunk_rows, _budget_mb): checked up front, used by the trainer and
// the memory report.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <set>

#include "core/factories.h"
#include "nn/qwen3.h"
#include "nn/safetensors.h"
#include "ops/head_loss.h"
#include "ops/index_ops.h"
#include "ops/shape_ops.h"
#include "train/drafter_data.h"
#include "train/drafter_step.h"
#include "train/drafter_trainer.h"
#include "train/in_memory_features.h"
#include "train/memory_report.h"
#include "train/target_lm.h"
#include "train/tokenizer.h"
#include "train/train_config.h"
#include "train_test_util.h"

namespace cg {
namespace {

using testing_train::ci_train_config;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) { return e.what(); }
  return "no error";
}

TEST(LossVocabulary, EveryKindHasNamesThatParseBack) {
  std::set<std::string> seen;
  for (const LossKindInfo& k : kLossKinds) {
    EXPECT_EQ(&loss_kind_info(k.kind), &k);
    EXPECT_EQ(parse_loss_kind(k.short_name), k.kind);
    EXPECT_EQ(parse_loss_kind(k.name), k.kind);
    EXPECT_STREQ(loss_kind_name(k.kind), k.name);
    EXPECT_STREQ(loss_kind_short_name(k.kind), k.short_name);
    EXPECT_TRUE(seen.insert(k.short_name).second && seen.insert(k.name).second)
        << k.name << ": a name twice";
    LossConfig c;
    c.kind = k.kind;
    EXPECT_EQ(loss_needs_teacher(c), k.needs_teacher) << k.name;
    EXPECT_EQ(loss_needs_labels(c), k.needs_labels) << k.name;
  }
  EXPECT_EQ(loss_kind_short_names().size(), std::size(kLossKinds));
  EXPECT_EQ(loss_kind_choices(), "ce | kl | rkl | soft_ce");
  // An unknown name says where it came from and what is accepted.
  const std::string e = error_of([] { parse_loss_kind("jsd", "--loss"); });
  EXPECT_NE(e.find("--loss: unknown loss kind 'jsd'"), std::string::npos) << e;
  EXPECT_NE(e.find("rkl (reverse_kl)"), std::string::npos) << e;
}

train::TrainConfig config_with_loss(const std::string& kind, double ce_weight) {
  nlohmann::json j = {{"drafter", {{"loss", {{"kind", kind}, {"temperature", 0.7}}}}}};
  if (ce_weight != 0) j["drafter"]["loss"]["ce_weight"] = ce_weight;
  return train::TrainConfig::from_json(j);
}

// Every kind the config accepts (short and long names, and mix) maps to its own kind.
TEST(DrafterLossKinds, EveryConfigKindMapsToTheLossConfigOfThatKind) {
  for (const LossKindInfo& k : kLossKinds) {
    for (const char* name : {k.short_name, k.name}) {
      SCOPED_TRACE(name);
      const double a = k.needs_teacher ? 0.25 : 0.0;
      const LossConfig c = train::drafter_head_loss(config_with_loss(name, a).drafter).loss;
      EXPECT_EQ(c.kind, k.kind);
      EXPECT_EQ(c.ignore_index, train::kIgnoreLabel);
      EXPECT_FLOAT_EQ(c.hard_ce_weight, static_cast<float>(a));
      EXPECT_FLOAT_EQ(c.temperature, k.needs_teacher ? 0.7f : 1.0f);
    }
  }
  train::TrainConfig mix = config_with_loss("mix", 0);
  mix.drafter.loss.mix_ce_weight = 0.4;
  const LossConfig m = train::drafter_loss_config(mix.drafter.loss);
  EXPECT_EQ(m.kind, LossKind::forward_kl);
  EXPECT_FLOAT_EQ(m.hard_ce_weight, 0.4f);
  // What the config refuses, naming the field.
  std::string e = error_of([] { config_with_loss("jsd", 0); });
  EXPECT_NE(e.find("drafter.loss.kind: unknown loss kind 'jsd'"), std::string::npos) << e;
  EXPECT_NE(e.find("soft_ce"), std::string::npos) << e;
  EXPECT_NE(e.find("or mix"), std::string::npos) << e;
  e = error_of([] { config_with_loss("ce", 0.3); });
  EXPECT_NE(e.find("drafter.loss.ce_weight"), std::string::npos) << e;
  e = error_of([] { config_with_loss("mix", 0.3); });
  EXPECT_NE(e.find("mix_ce_weight"), std::string::npos) << e;
}

// A CI-sized target and its generated sequences: what a drafter trains on.
struct SmallTarget {
  train::TrainConfig config = ci_train_config("unused");
  Generator init{3};
  nn::Qwen3ForCausalLM lm{
      train::target_model_config(config.target, train::ByteTokenizer::kVocabSize),
      nn::InitOptions{.generator = &init}};
  std::vector<train::DrafterSequence> seqs;
  SmallTarget() {
    lm.eval();
    lm.freeze();
    seqs = train::make_drafter_sequences(lm, {"the first prompt: ", "and another one: "}, 16);
  }
  std::unique_ptr<nn::DFlashDrafter> drafter() const {
    return train::make_drafter(lm, config.drafter, train::ByteTokenizer::kMask, 5);
  }
  train::DrafterTrainData data(const nn::DFlashDrafter& drafter) const {
    return {std::make_shared<train::InMemoryFeatureSource>(
        seqs, train::compute_target_features(lm, seqs, drafter.config().target_layers, true,
                                             train::ByteTokenizer::kPad))};
  }
};

const train::TargetFeatures& features_of(const train::DrafterTrainData& data) {
  return dynamic_cast<const train::InMemoryFeatureSource&>(*data.source).features();
}

// drafter_loss's inputs for a batch of the trainer's, made as the trainer makes them.
train::DrafterLossInputs step_inputs(const train::BlockBatch& b, const train::TargetFeatures& tf) {
  const Tensor idx = from_ints(b.source, {b.batch}, {.dtype = DType::i64});
  return {&b, index_select(tf.features, 0, idx),
          reshape(index_select(tf.final_hidden, 0, idx),
                  {b.batch * b.seq_len, tf.final_hidden.size(2)})};
}

// The trainer's step with each kind: its loss is the ops-level head loss of a LossConfig
// of that kind built here, on the same batch, and differs from every other kind's.
TEST(DrafterLossKinds, ATrainingStepTrainsTheConfiguredKind) {
  SmallTarget target;
  train::TrainConfig& c = target.config;
  c.drafter.optim.grad_accum = 1;
  c.drafter.loss.temperature = 0.7;
  std::vector<double> step_losses;
  for (const LossKindInfo& k : kLossKinds) {
    SCOPED_TRACE(k.name);
    c.drafter.loss.kind = k.short_name;
    c.drafter.loss.ce_weight = k.needs_teacher ? 0.25 : 0.0;
    auto drafter = target.drafter();
    const train::DrafterTrainData data = target.data(*drafter);
    train::DrafterTrainer trainer(*drafter, c, data);
    // The step's batch, and its loss with a LossConfig made by hand (before the step
    // changes the drafter).
    const std::vector<train::BlockBatch> batches = trainer.step_batches(1);
    ASSERT_EQ(batches.size(), 1u);
    train::DrafterHeadLoss expected;
    expected.loss.kind = k.kind;
    expected.loss.ignore_index = train::kIgnoreLabel;
    if (k.needs_teacher) {
      expected.loss.temperature = 0.7f;
      expected.loss.hard_ce_weight = 0.25f;
    }
    expected.path = parse_head_loss_path(c.drafter.head_loss_path);
    expected.chunk_rows = c.drafter.head_loss_chunk_rows;
    const double want =
        train::drafter_loss(*drafter, step_inputs(batches[0], features_of(data)), expected)
            .loss.item();
    const train::StepRecord step = trainer.train_step();
    EXPECT_NEAR(step.loss, want, 1e-6 * std::max(1.0, std::abs(want)));
    for (double other : step_losses)
      EXPECT_GT(std::abs(step.loss - other), 1e-4) << "the same loss as another kind";
    step_losses.push_back(step.loss);
  }
}

// Note [The drafter's chunk]: on the CPU the chunk changes memory, and the numbers at most
// in the last bits (which BLAS kernel sums over k depends on the shape and the core type):
// the loss and every gradient agree to a few ulps at one chunk of 128 rows, at 32 and at 16.
TEST(DrafterChunk, TheChunkDoesNotChangeTheCpuNumbers) {
  SmallTarget target;
  train::TrainConfig& c = target.config;
  c.drafter.loss.kind = "mix";  // CE and a teacher: both GEMMs and both row terms
  auto drafter = target.drafter();
  const train::DrafterTrainData data = target.data(*drafter);
  train::DrafterTrainer trainer(*drafter, c, data);
  const train::BlockBatch b = trainer.step_batches(1)[0];
  const train::DrafterLossInputs in = step_inputs(b, features_of(data));
  std::vector<std::vector<double>> results;
  for (int64_t rows : {0, 32, 16}) {  // 0: the budget holds all 128 rows
    train::DrafterHeadLoss h = train::drafter_head_loss(c.drafter);
    h.chunk_rows = rows;
    drafter->zero_grad();
    HeadLossResult r = train::drafter_loss(*drafter, in, h);
    r.loss.backward();
    std::vector<double> got = r.per_token.to_vector();
    got.push_back(r.loss.item());
    for (const Tensor& p : drafter->parameters()) {
      if (!p.grad().defined()) continue;
      const std::vector<double> g = p.grad().to_vector();
      got.insert(got.end(), g.begin(), g.end());
    }
    results.push_back(got);
  }
  for (size_t k = 1; k < results.size(); ++k) {
    ASSERT_EQ(results[k].size(), results[0].size());
    for (size_t e = 0; e < results[0].size(); ++e) {
      ASSERT_NEAR(results[k][e], results[0][e], 1e-6 * std::max(1.0, std::abs(results[0][e])))
          << "chunk " << (k == 1 ? 32 : 16) << ", value " << e;
    }
  }
}

TEST(DrafterChunk, ConfigFieldsAreCheckedUpFront) {
  const auto error = [](const std::string& json) {
    return error_of([&] { train::TrainConfig::from_json(nlohmann::json::parse(json)); });
  };
  std::string e = error(R"({"drafter": {"head_loss_chunk_rows": -1}})");
  EXPECT_NE(e.find("drafter.head_loss_chunk_rows: must be from 0"), std::string::npos) << e;
  e = error(R"({"drafter": {"head_loss_chunk_budget_mb": 0}})");
  EXPECT_NE(e.find("drafter.head_loss_chunk_budget_mb: must be above 0"), std::string::npos) << e;
  e = error(R"({"drafter": {"head_loss_path": "fast"}})");
  EXPECT_NE(e.find("drafter.head_loss_path: unknown head-loss path 'fast'"), std::string::npos)
      << e;
  // Written and read back.
  train::TrainConfig c;
  c.drafter.head_loss_chunk_rows = 0;
  c.drafter.head_loss_chunk_budget_mb = 0.5;
  const train::TrainConfig back = train::TrainConfig::from_json(c.to_json());
  EXPECT_EQ(back.drafter.head_loss_chunk_rows, 0);
  EXPECT_EQ(back.drafter.head_loss_chunk_budget_mb, 0.5);
  // A budget that cannot hold one row of the large-vocabulary config fails before any
  // work, naming the field (one row of V = 65536 in f32 is 256 KiB).
  c.drafter.head_loss_chunk_budget_mb = 0.125;
  e = error_of([&] { train::check_memory_chunk(c, kCPU); });
  EXPECT_NE(e.find("drafter.head_loss_chunk_budget_mb: 131072 bytes cannot hold one row"),
            std::string::npos)
      << e;
  c.drafter.head_loss_chunk_budget_mb = 1;
  EXPECT_NO_THROW(train::check_memory_chunk(c, kCPU));
}

// A checkpoint written before the chunk and ce_weight fields existed resumes: a field its
// config lacks counts as the default; a ce_weight given since is named. (The chunk may
// change on resume: it changes memory, not what is trained.)
TEST(DrafterChunk, ACheckpointThatPredatesTheFieldsResumes) {
  const std::string run =
      std::filesystem::temp_directory_path() / ("cg_chunk_resume_" + std::to_string(::getpid()));
  std::filesystem::create_directories(run + "/drafter");
  train::TrainConfig c;
  c.run_dir = run;
  nlohmann::json old_config = c.to_json();
  old_config["drafter"].erase("head_loss_chunk_rows");
  old_config["drafter"].erase("head_loss_chunk_budget_mb");
  old_config["drafter"]["loss"].erase("ce_weight");
  const std::string path = run + "/drafter/step_00000002.safetensors";
  safetensors::save_file(
      {{"w", zeros({1})}}, path,
      {{"format", "chunkgrad-dflash-drafter-1"}, {"step", "2"}, {"config", old_config.dump()}});
  EXPECT_EQ(train::checked_resume_checkpoint(c, ""), path);
  c.drafter.head_loss_chunk_rows = 64;
  EXPECT_EQ(train::checked_resume_checkpoint(c, ""), path);
  c.drafter.loss.kind = "kl";
  c.drafter.loss.ce_weight = 0.5;
  const std::string e = error_of([&] { train::checked_resume_checkpoint(c, ""); });
  EXPECT_NE(e.find("drafter.loss.ce_weight: 0.0 then, 0.5 now"), std::string::npos) << e;
  std::filesystem::remove_all(run);
}

// The memory report steps with the run's chunk: other rows, another chunk; at 0 rows the
// budget decides.
TEST(DrafterChunk, TheMemoryReportUsesTheConfiguredChunk) {
  train::MemoryShape s{"small", 512, 32, 2, 1, 16, 64, 1, 1, 32, 8, 8, 1};
  train::TrainConfig c;
  int64_t fused_peak_at_256 = 0;
  for (int64_t rows : {256, 16, 0}) {
    SCOPED_TRACE(rows);
    c.drafter.head_loss_chunk_rows = rows;
    c.drafter.head_loss_chunk_budget_mb = 1.0 / 16;  // 64 KiB: 32 rows of V = 512 in f32
    train::set_chunk(s, c.drafter);
    const train::MemoryReport r = train::measure_drafter_step_memory(s, "", 5);
    ASSERT_EQ(r.paths.size(), 3u);
    const int64_t positions = s.batch * s.anchors * s.block_size;  // 64
    EXPECT_EQ(r.paths[0].chunk_rows, positions);                   // naive: all rows
    EXPECT_EQ(r.paths[1].chunk_rows, r.paths[2].chunk_rows);
    if (rows > 0) {
      EXPECT_EQ(r.paths[2].chunk_rows, std::min(rows, positions));
    } else {  // from the budget: at most 32 rows (less when the GEMMs take scratch)
      EXPECT_GE(r.paths[2].chunk_rows, 1);
      EXPECT_LE(r.paths[2].chunk_rows, 32);
    }
    EXPECT_EQ(train::to_json(r)["shape"]["chunk_rows"], rows);
    // The fused forward's peak holds one chunk of logits: a smaller chunk, a lower peak.
    if (rows == 256) fused_peak_at_256 = r.paths[2].forward_peak;
    if (rows == 16) EXPECT_LT(r.paths[2].forward_peak, fused_peak_at_256);
  }
}

}  // namespace
}  // namespace cg

namespace cg {
namespace {

// A feature set without two loss positions in a row anchors no block: refused up front,
// not trained at loss 0.
TEST(DrafterTrainer, ASetWithNoLossPositionsIsRefused) {
  SmallTarget target;
  auto drafter = target.drafter();
  std::vector<train::DrafterSequence> seqs = target.seqs;
  for (auto& s : seqs) {
    for (size_t t = 0; t < s.loss_mask.size(); ++t) s.loss_mask[t] = t % 2;  // never two in a row
  }
  const train::DrafterTrainData data{std::make_shared<train::InMemoryFeatureSource>(
      seqs, train::compute_target_features(target.lm, seqs, drafter->config().target_layers, true,
                                           train::ByteTokenizer::kPad))};
  const std::string e =
      error_of([&] { train::DrafterTrainer trainer(*drafter, target.config, data); });
  EXPECT_NE(e.find("has two loss positions in a row"), std::string::npos) << e;
}

// A finite loss whose gradient norm is not (logged as null) is refused at that step,
// naming the gradient norm, not a step later as a loss that blames the learning rate
// first (an outside tester's finding); the loss's own check and its step-1 wording stay.
TEST(DrafterTrainer, ANonFiniteGradientNormIsRefusedAtItsOwnStep) {
  EXPECT_NO_THROW(train::check_step_is_finite(3, 2.5, 0.7));
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::string e = error_of([&] { train::check_step_is_finite(3, 2.5, inf); });
  EXPECT_NE(e.find("gradient norm is inf at step 3 while its loss is 2.5"), std::string::npos) << e;
  EXPECT_LT(e.find("the inputs may hold"), e.find("lower drafter.optim.lr")) << e;
  e = error_of([&] { train::check_step_is_finite(1, 2.5, nan); });
  EXPECT_NE(e.find("gradient norm is nan at step 1"), std::string::npos) << e;
  EXPECT_NE(e.find("before any update"), std::string::npos) << e;
  EXPECT_EQ(e.find("optim.lr"), std::string::npos) << e;
  e = error_of([&] { train::check_step_is_finite(4, nan, nan); });  // the loss speaks first
  EXPECT_NE(e.find("the drafter loss is nan at step 4"), std::string::npos) << e;
}

}  // namespace
}  // namespace cg
