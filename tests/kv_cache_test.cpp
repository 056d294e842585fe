// Why this file exists: decoding with a KV cache (nn/kv_cache.h, Qwen3ForCausalLM::
// forward_cached) must give what the uncached forward over the whole sequence gives --
// logits within fp32 rounding, the same greedy tokens, the same captured layer outputs
// -- whatever the appends look like (a prompt at once, one token at a time, several at a
// time) and after truncating rejected positions. Speculative decoding's "lossless" claim
// rests on this.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "decode_test_util.h"
#include "error_helpers.h"
#include "nn/qwen3.h"
#include "ops/ops.h"

namespace cg {
namespace {

using testing_decode::random_ids;

Tensor ids_tensor(const std::vector<int64_t>& ids, size_t begin, size_t end) {
  std::vector<int64_t> part(ids.begin() + static_cast<std::ptrdiff_t>(begin),
                            ids.begin() + static_cast<std::ptrdiff_t>(end));
  return from_ints(part, {1, static_cast<int64_t>(part.size())});
}

// Rows [row0, row0 + n) of a [1, S, D] tensor vs a [1, n, D] one, elementwise.
void expect_rows_near(const Tensor& full, int64_t row0, const Tensor& part, double tol,
                      const std::string& what) {
  ASSERT_EQ(part.dim(), 3);
  const int64_t n = part.size(1), D = part.size(2);
  const auto f = full.to_vector(), p = part.to_vector();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < D; ++d) {
      const double a = f[static_cast<size_t>((row0 + i) * D + d)];
      const double b = p[static_cast<size_t>(i * D + d)];
      ASSERT_NEAR(a, b, tol * (1.0 + std::abs(a)))
          << what << " position " << row0 + i << " dim " << d;
    }
  }
}

std::vector<int64_t> argmax_rows(const Tensor& logits) {
  std::vector<int64_t> out;
  for (double v : argmax(logits, -1).to_vector()) out.push_back(static_cast<int64_t>(v));
  return out;
}

struct Fixture {
  Generator gen{1234};
  nn::Qwen3Config config = testing_decode::tiny_target_config();
  nn::Qwen3ForCausalLM lm{config, {.generator = &gen}};
};

// Appends `ids` in pieces of the given sizes and checks every piece's logits and
// captured layers against the uncached forward of the whole sequence.
void check_pieces(Fixture& f, const std::vector<int64_t>& ids, const std::vector<size_t>& pieces) {
  const int64_t S = static_cast<int64_t>(ids.size());
  const std::vector<int64_t> layers{0, 2};
  const auto full = f.lm.forward(ids_tensor(ids, 0, ids.size()), {.capture_layers = layers});
  const auto full_greedy = argmax_rows(full.logits);
  nn::KVCache cache = f.lm.make_cache(S + 3);
  size_t at = 0;
  for (size_t piece : pieces) {
    const auto out =
        f.lm.forward_cached(ids_tensor(ids, at, at + piece), cache, {.capture_layers = layers});
    const int64_t row0 = static_cast<int64_t>(at);
    expect_rows_near(full.logits, row0, out.logits, 1e-4, "logits");
    expect_rows_near(full.layer_hidden[0], row0, out.layer_hidden[0], 1e-4, "layer 0");
    expect_rows_near(full.layer_hidden[1], row0, out.layer_hidden[1], 1e-4, "layer 2");
    const auto greedy = argmax_rows(out.logits);
    for (size_t i = 0; i < piece; ++i) EXPECT_EQ(greedy[i], full_greedy[at + i]) << at + i;
    at += piece;
    EXPECT_EQ(cache.length(), static_cast<int64_t>(at));
  }
  ASSERT_EQ(at, ids.size());
}

TEST(KVCache, OneTokenAtATimeEqualsTheUncachedForward) {
  Fixture f;
  for (int64_t S : {1, 2, 7, 19}) {
    const auto ids = random_ids(S, f.config.vocab_size, f.gen);
    check_pieces(f, ids, std::vector<size_t>(static_cast<size_t>(S), 1));
  }
}

TEST(KVCache, PromptThenMixedPiecesEqualTheUncachedForward) {
  Fixture f;
  const auto ids = random_ids(24, f.config.vocab_size, f.gen);
  check_pieces(f, ids, {5, 1, 3, 1, 1, 8, 2, 3});
  check_pieces(f, ids, {24});
  check_pieces(f, ids, {1, 23});
}

TEST(KVCache, TruncateForgetsRejectedPositions) {
  Fixture f;
  const auto ids = random_ids(16, f.config.vocab_size, f.gen);
  const auto full = f.lm.forward(ids_tensor(ids, 0, ids.size()));
  nn::KVCache cache = f.lm.make_cache(32);
  f.lm.forward_cached(ids_tensor(ids, 0, 6), cache);
  // A rejected draft of 5 wrong tokens at positions 6..10, then the right ones.
  auto wrong = random_ids(5, f.config.vocab_size, f.gen);
  f.lm.forward_cached(from_ints(wrong, {1, 5}), cache);
  EXPECT_EQ(cache.length(), 11);
  cache.truncate(7);  // keep position 6 as if it had been accepted ... but it was wrong:
  cache.truncate(6);  // truncation nests
  const auto out = f.lm.forward_cached(ids_tensor(ids, 6, 16), cache);
  expect_rows_near(full.logits, 6, out.logits, 1e-4, "logits after truncate");
  // Truncate to 0 and decode again from scratch.
  cache.clear();
  const auto again = f.lm.forward_cached(ids_tensor(ids, 0, 16), cache);
  expect_rows_near(full.logits, 0, again.logits, 1e-4, "logits after clear");
}

TEST(KVCache, LastLogitsOnlyAndNoGraph) {
  Fixture f;
  const auto ids = random_ids(9, f.config.vocab_size, f.gen);
  const auto full = f.lm.forward(ids_tensor(ids, 0, ids.size()));
  nn::KVCache cache = f.lm.make_cache(9);
  ASSERT_TRUE(GradMode::is_enabled());
  const auto out = f.lm.forward_cached(ids_tensor(ids, 0, 9), cache, {.last_logits_only = true});
  EXPECT_TRUE(GradMode::is_enabled());  // restored
  EXPECT_EQ(out.logits.shape(), (Shape{1, 1, f.config.vocab_size}));
  expect_rows_near(full.logits, 8, out.logits, 1e-4, "last logits");
  EXPECT_FALSE(out.logits.requires_grad());
  EXPECT_EQ(out.logits.grad_fn(), nullptr);
  nn::KVCache small = f.lm.make_cache(1);
  const auto no_head = f.lm.forward_cached(from_ints({1}, {1, 1}), small, {.logits = false});
  EXPECT_FALSE(no_head.logits.defined());
}

TEST(KVCache, PreallocatesOnce) {
  Fixture f;
  nn::KVCache cache = f.lm.make_cache(50);
  const size_t per_layer = 2 * 1 * 2 * 50 * 6 * sizeof(float);  // k and v [1, Hkv, 50, hd]
  EXPECT_EQ(cache.nbytes(), 3 * per_layer);
  const auto* storage0 = cache.keys(0).storage().get();
  f.lm.forward_cached(from_ints({1, 2, 3}, {1, 3}), cache);
  f.lm.forward_cached(from_ints({4}, {1, 1}), cache);
  EXPECT_EQ(cache.keys(0).storage().get(), storage0);  // the same buffer, written in place
  EXPECT_EQ(cache.keys(2).shape(), (Shape{1, 2, 4, 6}));
}

TEST(KVCache, BadUseIsRefused) {
  Fixture f;
  nn::KVCache cache = f.lm.make_cache(4);
  f.lm.forward_cached(from_ints({1, 2, 3}, {1, 3}), cache);
  EXPECT_ERROR_HAS(f.lm.forward_cached(from_ints({1, 2}, {1, 2}), cache), "max_length 4",
                   "2 new positions after 3");
  EXPECT_EQ(cache.length(), 3);  // a refused append changes nothing
  EXPECT_ERROR_HAS(cache.truncate(5), "[0, 3]");
  EXPECT_ERROR_HAS(cache.truncate(-1), "[0, 3]");
  EXPECT_ERROR_HAS(f.lm.forward_cached(from_ints({1, 2}, {2, 1}), cache), "batch 2");
  EXPECT_ERROR_HAS(nn::KVCache(f.config, 0), "max_length must be positive");
  nn::Qwen3Config other = f.config;
  other.num_layers = 2;
  nn::KVCache wrong(other, 8);
  EXPECT_ERROR_HAS(f.lm.forward_cached(from_ints({1}, {1, 1}), wrong), "cache has 2 layers");
  EXPECT_ERROR_HAS(f.lm.forward_cached(from_ints({1}, {1, 1}), cache, {.capture_layers = {3}}),
                   "layer 3");
  EXPECT_ERROR_HAS(cache.keys(7), "layer 7");
}

}  // namespace
}  // namespace cg
