// Why this file exists: target-only decoding (train/generate.h) is the reference that
// speculative decoding must equal, so it is itself checked against decoding with no cache
// at all; EOS and max_new_tokens stop where they should; the captured features are the
// target's layer outputs of every position; sampling is seeded and honours top_k.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "decode_test_util.h"
#include "error_helpers.h"
#include "train/generate.h"

namespace cg {
namespace {

using testing_decode::greedy_without_cache;
using testing_decode::random_ids;

struct Fixture {
  Generator gen{77};
  nn::Qwen3Config config = testing_decode::tiny_target_config();
  nn::Qwen3ForCausalLM lm{config, {.generator = &gen}};
};

TEST(Generate, GreedyWithCacheEqualsGreedyWithoutCache) {
  Fixture f;
  for (int64_t P : {1, 3, 8}) {
    for (int64_t max_new : {0, 1, 5, 20}) {
      const auto prompt = random_ids(P, f.config.vocab_size, f.gen);
      const auto g = train::generate(f.lm, prompt, {.max_new_tokens = max_new});
      EXPECT_EQ(g.tokens, greedy_without_cache(f.lm, prompt, max_new)) << P << " " << max_new;
      EXPECT_EQ(g.prompt_length, P);
      EXPECT_EQ(static_cast<int64_t>(g.new_tokens().size()), max_new);
      EXPECT_EQ(g.target_forwards, max_new);  // the prompt's forward yields the first token
      EXPECT_FALSE(g.stopped_at_eos);
    }
  }
}

TEST(Generate, StopsAfterEosAndKeepsIt) {
  Fixture f;
  const auto prompt = random_ids(4, f.config.vocab_size, f.gen);
  const auto free_run = greedy_without_cache(f.lm, prompt, 12);
  const int64_t eos = free_run[4 + 5];  // the 6th new token
  // Its first occurrence among the new tokens decides where greedy stops.
  const auto expected = greedy_without_cache(f.lm, prompt, 12, eos);
  const auto g = train::generate(f.lm, prompt, {.max_new_tokens = 12, .eos_ids = {eos}});
  EXPECT_EQ(g.tokens, expected);
  EXPECT_TRUE(g.stopped_at_eos);
  EXPECT_EQ(g.tokens.back(), eos);
  EXPECT_LE(g.tokens.size(), 4u + 6u);
}

TEST(Generate, FeaturesAreTheTargetLayersOfEveryPosition) {
  Fixture f;
  const auto prompt = random_ids(5, f.config.vocab_size, f.gen);
  const std::vector<int64_t> layers{0, 2};
  const auto g = train::generate(f.lm, prompt, {.max_new_tokens = 7, .capture_layers = layers});
  ASSERT_EQ(g.tokens.size(), 12u);
  EXPECT_EQ(g.tokens, greedy_without_cache(f.lm, prompt, 7));
  ASSERT_TRUE(g.features.defined());
  EXPECT_EQ(g.features.shape(), (Shape{12, 2 * f.config.hidden_size}));
  const auto ref = train::target_features(f.lm, g.tokens, layers).to_vector();
  const auto got = g.features.to_vector();
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], 1e-4 * (1 + std::abs(ref[i]))) << i;
  // max_new_tokens = 0 still returns the prompt's features.
  const auto p0 = train::generate(f.lm, prompt, {.max_new_tokens = 0, .capture_layers = {1}});
  EXPECT_EQ(p0.features.shape(), (Shape{5, f.config.hidden_size}));
}

TEST(Generate, BatchRunsEachPromptAlone) {
  Fixture f;
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t P : {2, 9, 1, 4}) prompts.push_back(random_ids(P, f.config.vocab_size, f.gen));
  const auto all = train::generate_all(f.lm, prompts, {.max_new_tokens = 6});
  ASSERT_EQ(all.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(all[i].tokens, greedy_without_cache(f.lm, prompts[i], 6)) << i;
  }
}

// Issue 18 item 23: the drafter-data and evaluation stages had no progress; generate_all
// tells a progress bar each prompt that finishes, with its new tokens.
TEST(Generate, GenerateAllTellsEachFinishedPrompt) {
  Fixture f;
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t P : {2, 9, 1, 4, 3}) prompts.push_back(random_ids(P, f.config.vocab_size, f.gen));
  std::vector<int64_t> done;
  int64_t tokens = 0;
  const auto all = train::generate_all(f.lm, prompts, {.max_new_tokens = 6},
                                       [&](int64_t d, int64_t total, int64_t fresh) {
                                         EXPECT_EQ(total, 5);
                                         done.push_back(d);
                                         tokens += fresh;
                                       });
  EXPECT_EQ(done, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(tokens, 5 * 6);
  EXPECT_EQ(all.size(), prompts.size());
}

TEST(Generate, SamplingIsSeededAndTopOneIsGreedy) {
  Fixture f;
  const auto prompt = random_ids(3, f.config.vocab_size, f.gen);
  Generator a(5), b(5);
  const auto s1 = train::generate(
      f.lm, prompt, {.max_new_tokens = 15, .sampling = {.temperature = 1.0, .generator = &a}});
  const auto s2 = train::generate(
      f.lm, prompt, {.max_new_tokens = 15, .sampling = {.temperature = 1.0, .generator = &b}});
  EXPECT_EQ(s1.tokens, s2.tokens);
  const auto top1 = train::generate(
      f.lm, prompt,
      {.max_new_tokens = 15, .sampling = {.temperature = 0.7, .top_k = 1, .generator = &a}});
  EXPECT_EQ(top1.tokens, greedy_without_cache(f.lm, prompt, 15));
}

TEST(Generate, PickTokenFollowsSoftmaxWithinTopK) {
  const Tensor logits = from_vector({0.0, std::log(3.0), -1e9, std::log(2.0), 0.0}, {1, 1, 5});
  EXPECT_EQ(train::pick_token(logits, {}), 1);
  EXPECT_EQ(train::greedy_tokens(from_vector({1, 3, 3, 0, 5, 5}, {2, 3})),
            (std::vector<int64_t>{1, 1}));  // first maximum on ties
  Generator gen(9);
  std::map<int64_t, int> counts;
  const int draws = 6000;
  for (int i = 0; i < draws; ++i)
    ++counts[train::pick_token(logits, {.temperature = 1.0, .generator = &gen})];
  EXPECT_EQ(counts.count(2), 0u);
  // weights 1 : 3 : 0 : 2 : 1 (sum 7)
  EXPECT_NEAR(counts[1] / double(draws), 3.0 / 7, 0.03);
  EXPECT_NEAR(counts[3] / double(draws), 2.0 / 7, 0.03);
  EXPECT_NEAR(counts[0] / double(draws), 1.0 / 7, 0.03);
  counts.clear();
  for (int i = 0; i < draws; ++i) {
    ++counts[train::pick_token(logits, {.temperature = 1.0, .top_k = 2, .generator = &gen})];
  }
  EXPECT_EQ(counts.size(), 2u);  // tokens 1 and 3 only
  EXPECT_NEAR(counts[1] / double(draws), 0.6, 0.03);
}

TEST(Generate, BadInputIsRefused) {
  Fixture f;
  EXPECT_ERROR_HAS(train::generate(f.lm, std::vector<int64_t>{}, {}), "prompt is empty");
  EXPECT_ERROR_HAS(train::generate(f.lm, {1, 2}, {.max_new_tokens = -1}), "max_new_tokens");
  nn::KVCache small = f.lm.make_cache(4);
  EXPECT_ERROR_HAS(train::generate(f.lm, {1, 2}, {.max_new_tokens = 3}, &small), "holds 4",
                   "needs 5");
  EXPECT_ERROR_HAS(
      train::generate(f.lm, {1}, {.max_new_tokens = 2, .sampling = {.temperature = -1}}),
      "temperature");
  EXPECT_ERROR_HAS(train::generate(f.lm, {1}, {.max_new_tokens = 2, .capture_layers = {9}}),
                   "layer 9");
  EXPECT_ERROR_HAS(train::pick_token(from_vector({1, 2, 3, 4}, {2, 2}), {}), "one row");
}

}  // namespace
}  // namespace cg
