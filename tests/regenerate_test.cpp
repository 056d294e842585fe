// Why this file exists: `chunkgrad regenerate` writes the data a drafter learns from, so its
// decoder is held to per-prompt greedy decoding token for token with prompts of mixed
// lengths in one batch (Note [Ragged batch]), EOS and max_new_tokens stop each row where
// generate() stops it, and sampling does not depend on the batch -- for a Qwen3 target and
// a hybrid (Qwen3.5-style) one -- and the output resumes after a kill (a torn last line is
// redone) and refuses an output from other data or options.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "decode_test_util.h"
#include "error_helpers.h"
#include "nn_test_util.h"
#include "train/batched_decode.h"
#include "train/regenerate.h"

namespace cg {
namespace {

using testing_decode::greedy_without_cache;
using testing_decode::random_ids;
using testing_nn::read_bytes;
using testing_nn::TempDir;
using testing_nn::write_bytes;

// The tiny Qwen3 target, or its Qwen3.5-style hybrid twin (Gated DeltaNet and gated
// attention layers): a DeltaNet row keeps its own recurrent and conv states, copied at
// every rebuild (Note [Ragged batch]); the batched_decode_hybrid_test.cpp checks the copy.
struct Fixture {
  explicit Fixture(bool hybrid = false)
      : config(hybrid ? testing_decode::tiny_hybrid_target_config()
                      : testing_decode::tiny_target_config()),
        lm(config, {.generator = &gen}) {
    if (hybrid) testing_decode::perturb_and_freeze(lm, 58);
  }
  Generator gen{91};
  nn::Qwen3Config config;
  nn::Qwen3ForCausalLM lm;
};

std::vector<train::DecodePrompt> mixed_prompts(Fixture& f) {
  std::vector<train::DecodePrompt> prompts;
  uint64_t seed = 1;
  for (int64_t P : {5, 1, 9, 3, 12, 2, 7, 4})
    prompts.push_back({.ids = random_ids(P, f.config.vocab_size, f.gen), .seed = seed++});
  return prompts;
}

// Every prompt's response, by index.
std::map<int64_t, train::DecodedSample> decode_all(const nn::Qwen3ForCausalLM& lm,
                                                   const std::vector<train::DecodePrompt>& prompts,
                                                   const train::BatchedDecodeOptions& options,
                                                   train::DecodeStats* stats = nullptr) {
  std::map<int64_t, train::DecodedSample> out;
  const train::DecodeStats s = train::decode_batched(lm, prompts, options, [&](auto&& d) {
    EXPECT_EQ(out.count(d.index), 0u) << "reported twice: " << d.index;
    out[d.index] = d;
  });
  if (stats) *stats = s;
  EXPECT_EQ(out.size(), prompts.size());
  return out;
}

void check_mixed_lengths(Fixture& f) {
  const auto prompts = mixed_prompts(f);
  for (int64_t batch : {1, 3, 8, 64}) {
    train::DecodeStats stats;
    const auto got = decode_all(f.lm, prompts, {.max_new_tokens = 10, .batch_size = batch}, &stats);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto alone = train::generate(f.lm, prompts[i].ids, {.max_new_tokens = 10});
      EXPECT_EQ(got.at(static_cast<int64_t>(i)).new_tokens, alone.new_tokens())
          << "prompt " << i << " (length " << prompts[i].ids.size() << "), batch " << batch;
      EXPECT_FALSE(got.at(static_cast<int64_t>(i)).stopped_at_eos);
    }
    EXPECT_EQ(stats.prefills, 8);
    EXPECT_EQ(stats.new_tokens, 80);
    if (batch >= 8) EXPECT_EQ(stats.steps, 9);  // one batch; the prefill gave each first token
  }
  // And against decoding with no cache at all.
  const auto got = decode_all(f.lm, prompts, {.max_new_tokens = 6, .batch_size = 4});
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto want = greedy_without_cache(f.lm, prompts[i].ids, 6);
    want.erase(want.begin(), want.begin() + static_cast<int64_t>(prompts[i].ids.size()));
    EXPECT_EQ(got.at(static_cast<int64_t>(i)).new_tokens, want) << i;
  }
}

TEST(BatchedDecode, MixedLengthBatchEqualsEachPromptDecodedAlone) {
  Fixture f;
  check_mixed_lengths(f);
}

TEST(BatchedDecode, HybridTargetMixedLengthBatchEqualsEachPromptDecodedAlone) {
  Fixture f(/*hybrid=*/true);
  check_mixed_lengths(f);
}

// EOS ids taken from the free runs (token `at` of prompt `prompt`), so that rows stop at
// different steps and rows after the first are kept when the batch is rebuilt.
struct EosPick {
  size_t prompt, at;
};
void check_eos_and_refills(Fixture& f, const std::vector<EosPick>& picks) {
  const auto prompts = mixed_prompts(f);
  std::vector<std::vector<int64_t>> free(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    free[i] = train::generate(f.lm, prompts[i].ids, {.max_new_tokens = 16}).new_tokens();
  std::vector<int64_t> eos;
  for (const EosPick& p : picks) eos.push_back(free[p.prompt][p.at]);
  auto is_eos = [&](int64_t t) { return std::find(eos.begin(), eos.end(), t) != eos.end(); };
  train::DecodeStats stats;
  const auto got =
      decode_all(f.lm, prompts, {.max_new_tokens = 16, .eos_ids = eos, .batch_size = 3}, &stats);
  int64_t stopped = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int64_t> want;
    for (int64_t t : free[i]) {
      want.push_back(t);
      if (is_eos(t)) break;
    }
    const auto& d = got.at(static_cast<int64_t>(i));
    EXPECT_EQ(d.new_tokens, want) << i;
    EXPECT_EQ(d.stopped_at_eos, is_eos(want.back())) << i;
    stopped += d.stopped_at_eos ? 1 : 0;
  }
  EXPECT_GE(stopped, 2);
  EXPECT_GE(stats.rebuilds, 3);  // rows were dropped and replaced
  EXPECT_LE(stats.row_steps, stats.steps * 3);
}

TEST(BatchedDecode, RowsStopAtAnyEosIdAndTheBatchRefills) {
  Fixture f;
  check_eos_and_refills(f, {{0, 3}, {2, 0}});
}

TEST(BatchedDecode, HybridTargetRowsStopAtAnyEosIdAndTheBatchRefills) {
  Fixture f(/*hybrid=*/true);
  check_eos_and_refills(f, {{0, 3}, {2, 0}, {5, 6}, {7, 9}});
}

void check_sampling(Fixture& f) {
  const auto prompts = mixed_prompts(f);
  const train::SamplingOptions sampling{.temperature = 1.3, .top_k = 12};
  const auto one = decode_all(
      f.lm, prompts, {.max_new_tokens = 8, .batch_size = 1, .sampling = sampling, .top_p = 0.9});
  const auto many = decode_all(
      f.lm, prompts, {.max_new_tokens = 8, .batch_size = 5, .sampling = sampling, .top_p = 0.9});
  bool differs_from_greedy = false;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& a = one.at(static_cast<int64_t>(i)).new_tokens;
    EXPECT_EQ(a, many.at(static_cast<int64_t>(i)).new_tokens) << i;
    differs_from_greedy |=
        a != train::generate(f.lm, prompts[i].ids, {.max_new_tokens = 8}).new_tokens();
  }
  EXPECT_TRUE(differs_from_greedy);
  auto reseeded = prompts;
  for (auto& p : reseeded) p.seed += 100;
  const auto other = decode_all(
      f.lm, reseeded, {.max_new_tokens = 8, .batch_size = 5, .sampling = sampling, .top_p = 0.9});
  bool any_differs = false;
  for (size_t i = 0; i < prompts.size(); ++i)
    any_differs |=
        other.at(static_cast<int64_t>(i)).new_tokens != one.at(static_cast<int64_t>(i)).new_tokens;
  EXPECT_TRUE(any_differs);
}

TEST(BatchedDecode, SamplingDependsOnTheSampleSeedNotOnTheBatch) {
  Fixture f;
  check_sampling(f);
}

TEST(BatchedDecode, HybridTargetSamplingDependsOnTheSampleSeedNotOnTheBatch) {
  Fixture f(/*hybrid=*/true);
  check_sampling(f);
}

TEST(BatchedDecode, TopPKeepsTheMostLikelyTokens) {
  // Probabilities about 0.64, 0.24, 0.09, 0.03: top_p 0.5 leaves only id 2.
  const Tensor logits = from_vector({1.0, 0.0, 2.0, -1.0}, {4});
  Generator gen(3);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(train::pick_nucleus_token(logits, {.temperature = 1.0, .generator = &gen}, 0.5), 2);
  std::map<int64_t, int> seen;
  for (int i = 0; i < 400; ++i)
    ++seen[train::pick_nucleus_token(logits, {.temperature = 1.0, .generator = &gen}, 0.8)];
  EXPECT_EQ(seen.size(), 2u);  // 0.64 + 0.24 >= 0.8: ids 2 and 0
  EXPECT_GT(seen[0], 0);
  EXPECT_ERROR_HAS(train::pick_nucleus_token(logits, {.temperature = 1.0}, 0.0), "top_p");
}

// ---- regenerate: input, output, resume -----------------------------------------------

TEST(Regenerate, ThePromptIsEverythingBeforeTheLastResponse) {
  TempDir dir;
  write_bytes(dir.file("d.jsonl"),
              "{\"input_ids\": [1, 2, 3, 4, 5, 6, 7], \"loss_mask\": [0, 1, 1, 0, 1, 1, 0], "
              "\"dataset\": \"chat\"}\n\n"
              "{\"input_ids\": [8, 9], \"loss_mask\": [0, 1]}\n");
  const auto s = train::read_regenerate_inputs(dir.file("d.jsonl"), 40);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].prompt(), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(s[0].dataset, "chat");
  EXPECT_EQ(s[1].source_line, 3);  // the blank line counts
  const auto line = nlohmann::json::parse(train::regenerated_line(s[0], {30, 31, 32}));
  EXPECT_EQ(line["input_ids"], nlohmann::json({1, 2, 3, 4, 30, 31, 32}));
  EXPECT_EQ(line["loss_mask"], nlohmann::json({0, 1, 1, 0, 1, 1, 1}));  // earlier turn kept
  EXPECT_EQ(line["dataset"], "chat");
  EXPECT_EQ(line["source_line"], 1);

  auto error_of = [&](const std::string& text) {
    write_bytes(dir.file("bad.jsonl"), text);
    return testing::error_of([&] { train::read_regenerate_inputs(dir.file("bad.jsonl"), 40); });
  };
  EXPECT_NE(error_of("{\"input_ids\": [1, 2], \"loss_mask\": [0, 0]}\n")
                .find("line 1: loss_mask has no 1"),
            std::string::npos);
  EXPECT_NE(error_of("{\"input_ids\": [1, 2], \"loss_mask\": [1, 1]}").find("no prompt"),
            std::string::npos);
  EXPECT_NE(
      error_of("\n{\"input_ids\": [1, 2], \"loss_mask\": [0]}").find("line 2: loss_mask has 1"),
      std::string::npos);
  EXPECT_NE(error_of("{\"input_ids\": [1, 40], \"loss_mask\": [0, 1]}").find("[0, 40)"),
            std::string::npos);
  EXPECT_NE(error_of("{\"input_ids\": [1, 2]}").find("no \"loss_mask\""), std::string::npos);
}

TEST(Regenerate, EosIdsComeFromGenerationConfigThenConfig) {
  TempDir dir;
  write_bytes(dir.file("config.json"), "{\"eos_token_id\": 7}");
  EXPECT_EQ(train::eos_ids_of_folder(dir.str()), (std::vector<int64_t>{7}));
  write_bytes(dir.file("generation_config.json"), "{\"eos_token_id\": [151645, 151643]}");
  EXPECT_EQ(train::eos_ids_of_folder(dir.str()), (std::vector<int64_t>{151645, 151643}));
  write_bytes(dir.file("generation_config.json"), "{\"eos_token_id\": null}");
  write_bytes(dir.file("config.json"), "{}");
  EXPECT_TRUE(train::eos_ids_of_folder(dir.str()).empty());
}

struct RegenerateFixture : Fixture {
  TempDir dir;
  std::vector<train::RegenerateSample> samples;
  nlohmann::json record{{"max_new_tokens", 7}, {"seed", 0}};
  train::RegenerateOptions options{.max_new_tokens = 7, .batch_size = 3, .progress = false};

  RegenerateFixture() {
    std::string text;
    for (int64_t P : {4, 2, 6, 3, 5}) {
      nlohmann::json j;
      std::vector<int64_t> ids = random_ids(P + 2, config.vocab_size, gen);
      std::vector<int> mask(static_cast<size_t>(P), 0);
      mask.insert(mask.end(), {1, 1});
      j["input_ids"] = ids;
      j["loss_mask"] = mask;
      text += j.dump() + "\n";
    }
    write_bytes(dir.file("d.jsonl"), text);
    samples = train::read_regenerate_inputs(dir.file("d.jsonl"), config.vocab_size);
  }
  train::RegenerateStats run(const std::string& out) {
    return train::regenerate(lm, samples, options, out, record);
  }
};

TEST(Regenerate, WritesEachSampleInInputOrderAndResumesAfterAKill) {
  RegenerateFixture f;
  const std::string out = f.dir.file("out.jsonl");
  const auto first = f.run(out);
  EXPECT_EQ(first.written, 5);
  EXPECT_EQ(first.skipped, 0);
  const std::string full = read_bytes(out);
  std::istringstream lines(full);
  std::string line;
  for (size_t i = 0; std::getline(lines, line); ++i) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["source_line"], static_cast<int64_t>(i + 1));
    const auto alone = train::generate(f.lm, f.samples[i].prompt(), {.max_new_tokens = 7});
    EXPECT_EQ(j["input_ids"], nlohmann::json(alone.tokens)) << i;
  }
  // A rerun finds every line there and decodes nothing.
  const auto again = f.run(out);
  EXPECT_EQ(again.skipped, 5);
  EXPECT_EQ(again.written, 0);
  EXPECT_EQ(read_bytes(out), full);
  // Killed while writing the fourth line: three lines and a torn one.
  size_t cut = 0;
  for (int n = 0; n < 3; ++n) cut = full.find('\n', cut) + 1;
  write_bytes(out, full.substr(0, cut + 10));
  const auto resumed = f.run(out);
  EXPECT_EQ(resumed.skipped, 3);
  EXPECT_EQ(resumed.written, 2);
  EXPECT_EQ(read_bytes(out), full);
  // Killed between lines.
  write_bytes(out, full.substr(0, cut));
  EXPECT_EQ(f.run(out).written, 2);
  EXPECT_EQ(read_bytes(out), full);
}

TEST(Regenerate, RefusesAnOutputFromOtherOptionsOrData) {
  RegenerateFixture f;
  const std::string out = f.dir.file("out.jsonl");
  f.run(out);
  const std::string full = read_bytes(out);
  auto changed = f.record;
  changed["max_new_tokens"] = 9;
  EXPECT_ERROR_HAS(train::regenerate(f.lm, f.samples, f.options, out, changed),
                   "max_new_tokens = 7", "this run has 9");
  auto reordered = f.samples;
  std::swap(reordered[0], reordered[1]);
  EXPECT_ERROR_HAS(train::regenerate(f.lm, reordered, f.options, out, f.record),
                   "line 1 is the regeneration of input line 1", "is line 2");
  auto fewer = f.samples;  // --limit 3 after a run of 5: nothing to do
  fewer.resize(3);
  const auto none = train::regenerate(f.lm, fewer, f.options, out, f.record);
  EXPECT_EQ(none.skipped, 3);
  EXPECT_EQ(none.written, 0);
  auto other_prompt = f.samples;
  other_prompt[2].ids[0] = (other_prompt[2].ids[0] + 1) % f.config.vocab_size;
  EXPECT_ERROR_HAS(train::regenerate(f.lm, other_prompt, f.options, out, f.record),
                   "line 3 does not start with the prompt");
  std::filesystem::remove(out + ".options.json");
  EXPECT_ERROR_HAS(f.run(out), "options.json", "missing");
  EXPECT_EQ(read_bytes(out), full);  // nothing refused was changed
}

}  // namespace
}  // namespace cg
