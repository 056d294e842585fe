// Why this file exists: `chunkgrad eval`'s parts below the command line
// (train/eval_inputs.h, train/speculative_eval.h): prompts cut before the last response
// and grouped by dataset; per-slot acceptance from the histogram; an oracle accepting
// every slot and an always-wrong drafter none, dataset by dataset; a drafter exported in
// the public layout running losslessly on a Hugging Face folder (and, when it knows the
// target's output, as an oracle); a drafter for another target refused field by field.
// The same on the GPU where there is one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "decode_test_util.h"
#include "error_helpers.h"
#include "eval_test_util.h"
#include "nn_test_util.h"
#include "ops/inplace.h"
#include "train/dflash_block_drafter.h"
#include "train/eval_inputs.h"
#include "train/generate.h"
#include "train/speculative_eval.h"

namespace cg {
namespace {

using testing_eval::token_line;

TEST(SpeculativeEval, ThePromptIsWhatPrecedesTheLastResponse) {
  const std::vector<int64_t> ids{1, 2, 3, 4, 5, 6, 7, 8, 9};
  using M = std::vector<uint8_t>;
  EXPECT_EQ(train::prompt_before_last_response(ids, M{0, 0, 1, 1, 0, 0, 1, 1, 0}),
            (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(train::prompt_before_last_response(ids, M{0, 1, 1, 1, 1, 1, 1, 1, 1}),
            (std::vector<int64_t>{1}));
  EXPECT_EQ(train::prompt_before_last_response(ids, M{}), ids);           // no mask
  EXPECT_EQ(train::prompt_before_last_response(ids, M(9, 0)), ids);       // no response
  EXPECT_TRUE(train::prompt_before_last_response(ids, M(9, 1)).empty());  // no prompt
}

TEST(SpeculativeEval, PromptsAreGroupedByDatasetWithALimitPerDataset) {
  testing_nn::TempDir dir;
  std::ofstream(dir.file("chat.jsonl"))
      << token_line({5, 6, 7, 8}, {0, 0, 1, 1}, "x") << "\n"
      << token_line({5, 6, 7}, {}, "") << token_line({9, 9, 9, 4}, {0, 1, 0, 1}, "x");
  std::ofstream(dir.file("more.jsonl")) << token_line({1, 2}) << token_line({3, 4});
  const auto all =
      train::read_eval_prompts({dir.file("chat.jsonl"), dir.file("more.jsonl")}, 10, 0);
  std::vector<std::string> names;
  for (const auto& p : all) names.push_back(p.dataset);
  EXPECT_EQ(names, (std::vector<std::string>{"x", "x", "chat", "more", "more"}));
  EXPECT_EQ(all[0].ids, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(all[1].ids, (std::vector<int64_t>{9, 9, 9}));
  EXPECT_EQ(all[2].ids, (std::vector<int64_t>{5, 6, 7}));  // no loss_mask: all of it
  const auto one =
      train::read_eval_prompts({dir.file("chat.jsonl"), dir.file("more.jsonl")}, 10, 1);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_EQ(one[1].dataset, "chat");

  std::ofstream(dir.file("bad.jsonl")) << token_line({1, 2}) << token_line({3, 4}, {1, 1});
  // A mask of all 1s (as a line without one reads) leaves no response to cut: the whole
  // line is the prompt.
  const auto whole = train::read_eval_prompts({dir.file("bad.jsonl")}, 10, 0);
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[1].ids, (std::vector<int64_t>{3, 4}));
  std::ofstream(dir.file("late.jsonl")) << token_line({3, 4, 5}, {1, 1, 0});
  EXPECT_ERROR_HAS(train::read_eval_prompts({dir.file("late.jsonl")}, 10, 0), "late.jsonl:1",
                   "leaves no prompt");
  std::ofstream(dir.file("vocab.jsonl")) << token_line({1, 12});
  EXPECT_ERROR_HAS(train::read_eval_prompts({dir.file("vocab.jsonl")}, 10, 0), "vocab.jsonl:1",
                   "12");
  std::ofstream(dir.file("name.jsonl")) << "{\"input_ids\": [1, 2], \"dataset\": 3}\n";
  EXPECT_ERROR_HAS(train::read_eval_prompts({dir.file("name.jsonl")}, 10, 0), "name.jsonl:1",
                   "\"dataset\" must be a string");
}

TEST(SpeculativeEval, SlotAcceptanceComesFromTheHistogramAndNeverRises) {
  // Block 4: four verify steps emitting 1, 1, 2 and 4 tokens: tau 2.
  const std::vector<double> a = train::slot_acceptance({0, 2, 1, 0, 1});
  ASSERT_EQ(a.size(), 3u);
  EXPECT_DOUBLE_EQ(a[0], 0.5);                      // steps emitting >= 2
  EXPECT_DOUBLE_EQ(a[1], 0.25);                     // >= 3
  EXPECT_DOUBLE_EQ(a[2], 0.25);                     // 4
  EXPECT_DOUBLE_EQ(a[0] + a[1] + a[2], 2.0 - 1.0);  // tau - 1
  EXPECT_EQ(train::slot_acceptance({0, 0, 0}), (std::vector<double>{0.0}));
}

// Knows the target's greedy continuation of each prompt (told apart by their lengths)
// and proposes it, right (`right`) or always wrong.
class KnowingDrafter : public train::BlockDrafter {
 public:
  KnowingDrafter(std::vector<int64_t> layers, int64_t vocab, bool right)
      : layers_(std::move(layers)), vocab_(vocab), right_(right) {}
  void add(const std::vector<int64_t>& prompt, std::vector<int64_t> greedy) {
    scripts_[static_cast<int64_t>(prompt.size())] = std::move(greedy);
  }
  const std::vector<int64_t>& target_layers() const override { return layers_; }
  void reset() override { length_ = 0; }
  void append_context(const Tensor& features, int64_t first) override {
    if (first == 0) script_ = &scripts_.at(features.size(0));
    length_ = first + features.size(0);
  }
  void truncate_context(int64_t length) override { length_ = length; }
  int64_t context_length() const override { return length_; }
  std::vector<int64_t> propose(int64_t, int64_t at, int64_t block_size) override {
    std::vector<int64_t> draft;
    for (int64_t i = 1; i < block_size; ++i) {
      const size_t pos = static_cast<size_t>(at + i);
      const int64_t truth = pos < script_->size() ? (*script_)[pos] : 0;
      draft.push_back(right_ ? truth : (truth + 1) % vocab_);
    }
    return draft;
  }

 private:
  std::vector<int64_t> layers_;
  int64_t vocab_;
  bool right_;
  std::map<int64_t, std::vector<int64_t>> scripts_;
  const std::vector<int64_t>* script_ = nullptr;
  int64_t length_ = 0;
};

TEST(SpeculativeEval, AnOracleAcceptsEverySlotAndAWrongDrafterNoneDatasetByDataset) {
  Generator gen(7);
  const nn::Qwen3Config c = testing_decode::tiny_target_config();
  nn::Qwen3ForCausalLM lm(c, {.generator = &gen});
  const int64_t B = 4, max_new = 1 + 3 * B;  // the first token, then three whole blocks
  std::vector<train::EvalPrompt> prompts;
  for (int64_t n = 3; n < 8; ++n)
    prompts.push_back(
        {n < 5 ? "first" : "second", testing_decode::random_ids(n, c.vocab_size, gen)});
  KnowingDrafter oracle({0, 2}, c.vocab_size, true), wrong({0, 2}, c.vocab_size, false);
  for (const auto& p : prompts) {
    const auto g = train::generate(lm, p.ids, {.max_new_tokens = max_new + B}).tokens;
    oracle.add(p.ids, g);
    wrong.add(p.ids, g);
  }
  const train::EvalReport o =
      train::evaluate_by_dataset(lm, oracle, prompts, B, {.max_new_tokens = max_new});
  ASSERT_EQ(o.datasets.size(), 2u);
  EXPECT_EQ(o.datasets[0].name, "first");
  EXPECT_EQ(o.datasets[0].report.num_prompts, 2);
  EXPECT_EQ(o.datasets[1].report.num_prompts, 3);
  EXPECT_DOUBLE_EQ(o.tau, static_cast<double>(B));
  EXPECT_EQ(o.verify_forwards, 3 * 5);
  EXPECT_EQ(o.slot_acceptance, (std::vector<double>(B - 1, 1.0)));
  EXPECT_EQ(o.datasets[1].slot_acceptance, (std::vector<double>(B - 1, 1.0)));
  EXPECT_TRUE(o.identical());
  EXPECT_EQ(o.identical_prompts, 5);
  EXPECT_EQ(o.new_tokens, 5 * max_new);
  EXPECT_NE(o.str().find("all 5 prompts equal target-only decoding token for token"),
            std::string::npos)
      << o.str();
  const nlohmann::json j = o.json();
  EXPECT_EQ(j["datasets"].size(), 2u);
  EXPECT_EQ(j["datasets"][1]["dataset"], "second");
  EXPECT_EQ(j["mismatched_prompts"], 0);

  const train::EvalReport w =
      train::evaluate_by_dataset(lm, wrong, prompts, B, {.max_new_tokens = max_new});
  EXPECT_DOUBLE_EQ(w.tau, 1.0);
  EXPECT_EQ(w.slot_acceptance, (std::vector<double>(B - 1, 0.0)));
  EXPECT_TRUE(w.identical());
}

// Turns the target's lm_head around at its first proposal: speculative decoding then
// differs from the greedy run made before it (as speculative_decoding_test's sabotage).
class SabotagingDrafter : public KnowingDrafter {
 public:
  SabotagingDrafter(const nn::Qwen3ForCausalLM& lm)
      : KnowingDrafter({0, 2}, lm.config().vocab_size, false), lm_(lm) {}
  std::vector<int64_t> propose(int64_t anchor, int64_t at, int64_t block_size) override {
    if (!done_) {
      NoGradGuard no_grad;
      mul_(lm_.lm_head->weight, -1.0);
      done_ = true;
    }
    return KnowingDrafter::propose(anchor, at, block_size);
  }

 private:
  const nn::Qwen3ForCausalLM& lm_;
  bool done_ = false;
};

// Note [Eval losslessness]: a mismatch says NOT LOSSLESS; a near tie is counted apart;
// neither is ever called identical, in the text or the JSON.
TEST(SpeculativeEval, AMismatchOrANearTieIsNeverCalledIdentical) {
  Generator gen(7);
  const nn::Qwen3Config c = testing_decode::tiny_target_config();
  nn::Qwen3ForCausalLM lm(c, {.generator = &gen});
  const std::vector<train::EvalPrompt> prompts{
      {"first", testing_decode::random_ids(4, c.vocab_size, gen)},
      {"second", testing_decode::random_ids(5, c.vocab_size, gen)}};
  SabotagingDrafter bad(lm);
  for (const auto& p : prompts) bad.add(p.ids, p.ids);
  const train::EvalReport r =
      train::evaluate_by_dataset(lm, bad, prompts, 4, {.max_new_tokens = 10, .warmup = false});
  EXPECT_GE(r.mismatched_prompts, 1);
  EXPECT_FALSE(r.identical());
  EXPECT_FALSE(r.lossless_up_to_near_ties());
  EXPECT_NE(r.str().find("NOT LOSSLESS"), std::string::npos) << r.str();
  EXPECT_NE(r.str().find("MISMATCHED"), std::string::npos) << r.str();
  EXPECT_NE(r.first_mismatch.find("dataset first"), std::string::npos) << r.first_mismatch;
  EXPECT_EQ(r.str().find("token for token\n"), std::string::npos) << r.str();
  EXPECT_FALSE(r.json()["identical"].get<bool>());

  train::EvalReport tie;
  tie.num_prompts = 3;
  tie.identical_prompts = 2;
  tie.tie_divergences = 1;
  EXPECT_FALSE(tie.identical());
  EXPECT_TRUE(tie.lossless_up_to_near_ties());
  EXPECT_EQ(tie.outcome().find("all 3"), std::string::npos) << tie.outcome();
  EXPECT_NE(tie.outcome().find("2 of 3 prompts equal"), std::string::npos) << tie.outcome();
  EXPECT_NE(tie.outcome().find("1 diverged at a near tie"), std::string::npos) << tie.outcome();
  EXPECT_NE(tie.str().find("1 near tie"), std::string::npos) << tie.str();
  EXPECT_EQ(tie.str().find("identical"), std::string::npos) << tie.str();
  EXPECT_FALSE(tie.json()["identical"].get<bool>());
}

// A tiny Hugging Face target and a public-layout drafter for it, in a temporary folder.
struct Folders {
  testing_nn::TempDir dir;
  nn::Qwen3Config c = testing_decode::tiny_target_config();
  std::string target = dir.file("target"), drafter = dir.file("drafter");
  Folders(bool knowing = false, int64_t block = 4) {
    testing_eval::write_hf_target(target, c, 11, c.vocab_size - 1, knowing);
    testing_eval::write_public_drafter_for(drafter, c, {0, 2}, block, c.vocab_size - 2, 12,
                                           knowing);
  }
};

std::vector<train::EvalPrompt> random_prompts(int64_t vocab) {
  Generator gen(3);
  std::vector<train::EvalPrompt> p;
  for (int i = 0; i < 4; ++i)
    p.push_back({i < 2 ? "a" : "b", testing_decode::random_ids(4 + i, vocab, gen)});
  return p;
}

void expect_sane(const train::EvalReport& r) {
  EXPECT_GE(r.tau, 1.0);
  EXPECT_LE(r.tau, static_cast<double>(r.block_size));
  for (size_t k = 0; k < r.slot_acceptance.size(); ++k) {
    EXPECT_GE(r.slot_acceptance[k], 0.0);
    EXPECT_LE(r.slot_acceptance[k], 1.0);
    if (k > 0) EXPECT_LE(r.slot_acceptance[k], r.slot_acceptance[k - 1]);
  }
  EXPECT_EQ(r.mismatched_prompts, 0) << r.first_mismatch;
}

void run_exported(Device device, DType dtype, double tolerance) {
  Folders f;
  const train::EvalTarget t = train::load_eval_target(f.target, device, dtype);
  EXPECT_EQ(t.eos_ids, std::vector<int64_t>{f.c.vocab_size - 1});
  const train::PublicDrafter d = train::load_drafter_for_target(f.drafter, *t.lm);
  EXPECT_EQ(d.info.block_size, 4);
  EXPECT_EQ(d.config.target_layers, (std::vector<int64_t>{0, 2}));
  train::DFlashBlockDrafter block(*d.drafter);
  const train::EvalReport r = train::evaluate_by_dataset(
      *t.lm, block, random_prompts(f.c.vocab_size), d.info.block_size,
      {.max_new_tokens = 20, .eos_ids = t.eos_ids, .tie_tolerance = tolerance});
  ASSERT_EQ(r.datasets.size(), 2u);
  expect_sane(r);
  if (dtype == DType::f32) EXPECT_TRUE(r.identical()) << r.str();
  EXPECT_EQ(r.str().find("NOT LOSSLESS"), std::string::npos) << r.str();
}

// An outside tester: eval stopped only at the first id of an eos_token_id list, ignored a
// string and generation_config.json -- unlike regenerate and transformers. Now every id
// ends a turn, generation_config.json first, and a bad value is an error.
TEST(SpeculativeEval, EveryEosIdOfTheTargetStops) {
  Folders f;
  auto rewrite = [&](const char* file, const nlohmann::json& eos) {
    const std::string path = f.target + "/" + file;
    nlohmann::json j = nlohmann::json::object();
    if (std::ifstream in(path); in) j = nlohmann::json::parse(in);
    j["eos_token_id"] = eos;
    std::ofstream(path) << j.dump();
  };
  rewrite("config.json", {5, 7});
  EXPECT_EQ(train::load_eval_target(f.target, kCPU, DType::f32).eos_ids,
            (std::vector<int64_t>{5, 7}));
  rewrite("generation_config.json", {9, 5});
  EXPECT_EQ(train::load_eval_target(f.target, kCPU, DType::f32).eos_ids,
            (std::vector<int64_t>{9, 5}));
  rewrite("generation_config.json", "9");
  EXPECT_ERROR_HAS(train::load_eval_target(f.target, kCPU, DType::f32), "generation_config.json",
                   "eos_token_id");
  rewrite("generation_config.json", f.c.vocab_size);
  EXPECT_ERROR_HAS(train::load_eval_target(f.target, kCPU, DType::f32), "outside the vocabulary");
  // eval's --eos-id replaces the folder's fields: they are not read then (a second tester).
  EXPECT_TRUE(train::load_eval_target(f.target, kCPU, DType::f32, false).eos_ids.empty());
  // Decoding stops at the second id of a list as at the first.
  std::filesystem::remove(f.target + "/generation_config.json");
  rewrite("config.json", f.c.vocab_size - 1);
  const train::EvalTarget t = train::load_eval_target(f.target, kCPU, DType::f32);
  Generator gen(4);
  const std::vector<int64_t> prompt = testing_decode::random_ids(5, f.c.vocab_size, gen);
  const auto free_run = train::generate(*t.lm, prompt, {.max_new_tokens = 8});
  const std::vector<int64_t> eos = {f.c.vocab_size - 1, free_run.tokens.at(prompt.size() + 2)};
  size_t stop = prompt.size();
  while (!train::is_eos(eos, free_run.tokens.at(stop))) ++stop;
  const auto stopped = train::generate(*t.lm, prompt, {.max_new_tokens = 8, .eos_ids = eos});
  EXPECT_EQ(stopped.tokens.size(), stop + 1);
  EXPECT_TRUE(stopped.stopped_at_eos);
}

TEST(SpeculativeEval, AnExportedDrafterRunsLosslesslyOnAHuggingFaceTarget) {
  run_exported(kCPU, DType::f32, 1e-4);
}

// Target and drafter both emit token 0 whatever they see (zero final norms): the
// exported drafter is an oracle, and every block is accepted whole.
void run_knowing(Device device, DType dtype) {
  Folders f(true, 4);
  const train::EvalTarget t = train::load_eval_target(f.target, device, dtype);
  const train::PublicDrafter d = train::load_drafter_for_target(f.drafter, *t.lm);
  train::DFlashBlockDrafter block(*d.drafter);
  const train::EvalReport r = train::evaluate_by_dataset(
      *t.lm, block, random_prompts(f.c.vocab_size), 4, {.max_new_tokens = 1 + 3 * 4});
  EXPECT_DOUBLE_EQ(r.tau, 4.0);
  EXPECT_EQ(r.slot_acceptance, (std::vector<double>(3, 1.0)));
  EXPECT_TRUE(r.identical());
}

TEST(SpeculativeEval, ADrafterThatKnowsTheTargetsOutputAcceptsWholeBlocks) {
  run_knowing(kCPU, DType::f32);
}

// bf16 on the CPU: the target cast (Note [Eval target dtype]), the drafter in its dtype;
// outputs may diverge only at near ties.
TEST(SpeculativeEval, ABf16TargetDivergesAtMostAtNearTies) {
  run_exported(kCPU, DType::bf16, 2e-2);
  run_knowing(kCPU, DType::bf16);
}

TEST(SpeculativeEval, ADrafterForAnotherTargetIsRefusedFieldByField) {
  Folders f;
  const train::EvalTarget t = train::load_eval_target(f.target, kCPU, DType::f32);
  const nlohmann::json good = nlohmann::json::parse(std::ifstream(f.drafter + "/config.json"));
  auto with = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json c = good;
    change(c);
    std::ofstream(f.drafter + "/config.json") << c.dump(2);
    return f.drafter;
  };
  EXPECT_ERROR_HAS(
      train::load_drafter_for_target(with([](auto& c) { c["hidden_size"] = 32; }), *t.lm),
      "--drafter", "hidden_size 32 in the drafter's config.json, 16 in the target");
  EXPECT_ERROR_HAS(
      train::load_drafter_for_target(with([](auto& c) { c["vocab_size"] = 50; }), *t.lm),
      "vocab_size 50 in the drafter's config.json, 40 in the target");
  EXPECT_ERROR_HAS(train::load_drafter_for_target(with([](auto& c) {
                                                    c["dflash_config"]["target_layer_ids"] = {0, 3};
                                                  }),
                                                  *t.lm),
                   "target_layer_ids holds 3, beyond the target's 3 decoder layers");
  EXPECT_ERROR_HAS(train::load_drafter_for_target(
                       with([](auto& c) { c["dflash_config"]["mask_token_id"] = 40; }), *t.lm),
                   "mask_token_id 40 is outside the target's vocabulary (0 .. 39)");
  EXPECT_ERROR_HAS(train::load_drafter_for_target(
                       with([](auto& c) { c["dflash_config"]["mask_token_id"] = nullptr; }), *t.lm),
                   "mask_token_id is null");
  EXPECT_ERROR_HAS(
      train::load_drafter_for_target(with([](auto& c) { c["num_target_layers"] = 36; }), *t.lm),
      "num_target_layers 36");
  EXPECT_ERROR_HAS(train::load_drafter_for_target(
                       with([](auto& c) { c["architectures"] = {"Qwen3ForCausalLM"}; }), *t.lm),
                   "DFlashDraftModel");
  EXPECT_ERROR_HAS(
      train::load_drafter_for_target(with([](auto& c) { c.erase("intermediate_size"); }), *t.lm),
      "no intermediate_size");
  // Several at once: all in one line.
  EXPECT_ERROR_HAS(train::load_drafter_for_target(with([](auto& c) {
                                                    c["hidden_size"] = 32;
                                                    c["vocab_size"] = 50;
                                                  }),
                                                  *t.lm),
                   "(2 field(s))");
  // The original loads.
  with([](auto&) {});
  EXPECT_NO_THROW(train::load_drafter_for_target(f.drafter, *t.lm));
}

// The same on the GPU: f32 equals target-only decoding token for token; bf16 may diverge
// only at near ties (Note [Eval losslessness]); the knowing drafter accepts whole blocks.
TEST(SpeculativeEval, OnTheGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  const Device cuda = Device::parse("cuda");
  run_exported(cuda, DType::f32, 1e-4);
  run_exported(cuda, DType::bf16, 2e-2);
  run_knowing(cuda, DType::f32);
  run_knowing(cuda, DType::bf16);
}

}  // namespace
}  // namespace cg
