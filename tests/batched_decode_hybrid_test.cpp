// Why this file exists: `chunkgrad regenerate` with a Qwen3.5 / Qwen3.6 target runs its
// ragged batch decoder (train/batched_decode.h) over Gated DeltaNet layers, whose state is
// per row and cannot be right-aligned like keys (Note [Ragged batch]). A row must decode
// what it decodes alone whatever it shares a batch with and however often the batch is
// rebuilt, so this holds decode_batched with a tiny random hybrid target (DeltaNet and
// gated full-attention layers, partial rotary, zero-centred norms) to generate() and to the
// uncached full forward token for token, with prompts shorter than the conv kernel, EOS
// stops that force rebuilds, and sampling. The cache half of a rebuild (set_linear_state:
// rows copied between caches, in another order) is checked directly, and a rejected block
// verified after it and rolled back leaves every row as if it never saw it (Note [DeltaNet
// rollback]). The same decoder on the GPU: cuda_regenerate_test.cpp.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/views.h"
#include "decode_test_util.h"
#include "error_helpers.h"
#include "nn/kv_cache.h"
#include "nn/qwen3.h"
#include "ops/join_ops.h"
#include "ops/shape_ops.h"
#include "train/batched_decode.h"
#include "train/generate.h"

namespace cg {
namespace {

using testing_decode::greedy_without_cache;
using testing_decode::random_ids;

struct Fixture {
  Fixture() { testing_decode::perturb_and_freeze(lm, 58); }
  Generator gen{57};
  nn::Qwen3Config config = testing_decode::tiny_hybrid_target_config();
  nn::Qwen3ForCausalLM lm{config, {.generator = &gen}};
};

// Lengths 1 and 2 are shorter than the conv history (K - 1 = 3).
std::vector<train::DecodePrompt> mixed_prompts(Fixture& f) {
  std::vector<train::DecodePrompt> prompts;
  uint64_t seed = 1;
  for (int64_t P : {5, 1, 9, 3, 12, 2, 7, 4})
    prompts.push_back({.ids = random_ids(P, f.config.vocab_size, f.gen), .seed = seed++});
  return prompts;
}

std::map<int64_t, train::DecodedSample> decode_all(const nn::Qwen3ForCausalLM& lm,
                                                   const std::vector<train::DecodePrompt>& prompts,
                                                   const train::BatchedDecodeOptions& options,
                                                   train::DecodeStats* stats = nullptr) {
  std::map<int64_t, train::DecodedSample> out;
  const train::DecodeStats s =
      train::decode_batched(lm, prompts, options, [&](auto&& d) { out[d.index] = d; });
  if (stats) *stats = s;
  EXPECT_EQ(out.size(), prompts.size());
  return out;
}

TEST(BatchedDecodeHybrid, MixedLengthBatchEqualsEachPromptAloneAndTheFullForward) {
  Fixture f;
  const auto prompts = mixed_prompts(f);
  for (int64_t batch : {1, 3, 8}) {
    train::DecodeStats stats;
    const auto got = decode_all(f.lm, prompts, {.max_new_tokens = 8, .batch_size = batch}, &stats);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto alone = train::generate(f.lm, prompts[i].ids, {.max_new_tokens = 8});
      EXPECT_EQ(got.at(static_cast<int64_t>(i)).new_tokens, alone.new_tokens())
          << "prompt " << i << " (length " << prompts[i].ids.size() << "), batch " << batch;
    }
    EXPECT_EQ(stats.new_tokens, 64);
    if (batch == 3) EXPECT_GE(stats.rebuilds, 3);  // rows replaced: states copied across
  }
  // And against the uncached forward over the whole sequence for every token.
  const auto got = decode_all(f.lm, prompts, {.max_new_tokens = 6, .batch_size = 4});
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto want = greedy_without_cache(f.lm, prompts[i].ids, 6);
    want.erase(want.begin(), want.begin() + static_cast<int64_t>(prompts[i].ids.size()));
    EXPECT_EQ(got.at(static_cast<int64_t>(i)).new_tokens, want) << i;
  }
}

TEST(BatchedDecodeHybrid, RowsStopAtEosAndRebuiltRowsKeepTheirStates) {
  Fixture f;
  const auto prompts = mixed_prompts(f);
  std::vector<std::vector<int64_t>> free(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    free[i] = train::generate(f.lm, prompts[i].ids, {.max_new_tokens = 14}).new_tokens();
  const std::vector<int64_t> eos{free[0][2], free[3][5]};
  train::DecodeStats stats;
  const auto got =
      decode_all(f.lm, prompts, {.max_new_tokens = 14, .eos_ids = eos, .batch_size = 3}, &stats);
  int64_t stopped = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int64_t> want;
    for (int64_t t : free[i]) {
      want.push_back(t);
      if (t == eos[0] || t == eos[1]) break;
    }
    EXPECT_EQ(got.at(static_cast<int64_t>(i)).new_tokens, want) << i;
    stopped += got.at(static_cast<int64_t>(i)).stopped_at_eos ? 1 : 0;
  }
  EXPECT_GE(stopped, 2);
  EXPECT_GE(stats.rebuilds, 3);
}

TEST(BatchedDecodeHybrid, SamplingDependsOnTheSampleSeedNotOnTheBatch) {
  Fixture f;
  const auto prompts = mixed_prompts(f);
  const train::SamplingOptions sampling{.temperature = 1.2, .top_k = 10};
  const auto one =
      decode_all(f.lm, prompts, {.max_new_tokens = 6, .batch_size = 1, .sampling = sampling});
  const auto many =
      decode_all(f.lm, prompts, {.max_new_tokens = 6, .batch_size = 5, .sampling = sampling});
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(one.at(static_cast<int64_t>(i)).new_tokens,
              many.at(static_cast<int64_t>(i)).new_tokens)
        << i;
}

// ---- the cache half of a rebuild: DeltaNet states copied between caches ------------------

Tensor ids_of(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return from_ints(flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// A 2-row cache assembled from another cache's rows in swapped order (the DeltaNet states
// by set_linear_state, the keys copied as the rebuild copies them), then a verify block of 4
// with the last 2 rejected: each row's logits after the rollback are those of its own
// sequence without the rejected tokens, and the states those of a cache that never saw them.
TEST(BatchedDecodeHybrid, AssembledCacheVerifiesAndRollsBackPerRow) {
  Fixture f;
  NoGradGuard no_grad;
  const std::vector<std::vector<int64_t>> prompt{{3, 17, 5, 29, 11}, {8, 2, 36, 14, 1}};
  const std::vector<std::vector<int64_t>> block{{21, 9, 30, 31}, {4, 12, 33, 38}};
  const std::vector<std::vector<int64_t>> next{{6, 19}, {25, 7}};
  nn::KVCache source = f.lm.make_cache(16, 2);
  f.lm.forward_cached(ids_of(prompt), source);
  // Row r of the assembled cache is row 1 - r of the source.
  nn::KVCache cache = f.lm.make_cache(16, 2);
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    if (cache.is_linear_layer(l)) {
      auto swapped = [](const Tensor& t) {
        return cat({raw::narrow(t, 0, 1, 1), raw::narrow(t, 0, 0, 1)}, 0);
      };
      cache.set_linear_state(l, swapped(source.recurrent_state(l)), swapped(source.conv_state(l)),
                             5);
      continue;
    }
    const auto [k, v] = cache.write(l, zeros({2, 5, cache.num_kv_heads(), cache.head_dim()}),
                                    zeros({2, 5, cache.num_kv_heads(), cache.head_dim()}));
    for (int64_t r = 0; r < 2; ++r) {
      raw::copy_(raw::narrow(k, 0, r, 1), raw::narrow(source.keys(l), 0, 1 - r, 1));
      raw::copy_(raw::narrow(v, 0, r, 1), raw::narrow(source.values(l), 0, 1 - r, 1));
    }
  }
  cache.advance(5);
  EXPECT_ERROR_HAS(cache.truncate(3), "truncate(3)", "Gated DeltaNet");  // nothing to replay
  auto swap = [](std::vector<std::vector<int64_t>> rows) {
    std::swap(rows[0], rows[1]);
    return rows;
  };
  f.lm.forward_cached(ids_of(swap(block)), cache);
  cache.truncate(5 + 2);
  const Tensor after = f.lm.forward_cached(ids_of(swap(next)), cache).logits;  // [2, 2, V]
  for (int64_t r = 0; r < 2; ++r) {
    const std::vector<int64_t>& p = prompt[static_cast<size_t>(1 - r)];
    std::vector<int64_t> kept = p;
    kept.insert(kept.end(), block[static_cast<size_t>(1 - r)].begin(),
                block[static_cast<size_t>(1 - r)].begin() + 2);
    kept.insert(kept.end(), next[static_cast<size_t>(1 - r)].begin(),
                next[static_cast<size_t>(1 - r)].end());
    const Tensor full = f.lm.forward(ids_of({kept})).logits;  // [1, 9, V]
    EXPECT_LT(max_abs_diff(raw::narrow(after, 0, r, 1), narrow(full, 1, 7, 2)), 1e-4)
        << "row " << r;
    // The state too: a single-sequence cache that never saw the rejected tokens.
    nn::KVCache clean = f.lm.make_cache(16);
    f.lm.forward_cached(ids_of({kept}), clean);
    for (int64_t l = 0; l < cache.num_layers(); ++l) {
      if (!cache.is_linear_layer(l)) continue;
      EXPECT_LT(
          max_abs_diff(raw::narrow(cache.recurrent_state(l), 0, r, 1), clean.recurrent_state(l)),
          1e-5)
          << "row " << r << " layer " << l;
      EXPECT_LT(max_abs_diff(raw::narrow(cache.conv_state(l), 0, r, 1), clean.conv_state(l)), 1e-5)
          << "row " << r << " layer " << l;
    }
  }
}

TEST(BatchedDecodeHybrid, SetLinearStateChecksWhatItIsGiven) {
  Fixture f;
  nn::KVCache cache = f.lm.make_cache(8, 2);
  const Tensor state = cache.recurrent_state(0), conv = cache.conv_state(0);
  EXPECT_ERROR_HAS(cache.set_linear_state(1, state, conv, 0), "layer 1 is a full-attention");
  EXPECT_ERROR_HAS(cache.set_linear_state(0, raw::narrow(state, 0, 0, 1), conv, 0),
                   "set_linear_state", "f32 [2, 4, 4, 6]");
  EXPECT_ERROR_HAS(cache.set_linear_state(0, state, to_dtype(conv, DType::f64), 0),
                   "set_linear_state");
  EXPECT_ERROR_HAS(cache.set_linear_state(0, state, conv, 9), "seen must be in [0, 8]");
  // A state for 3 positions: advance(3) needs every DeltaNet layer to have one.
  cache.set_linear_state(0, state, conv, 3);
  EXPECT_ERROR_HAS(cache.advance(3), "layer 2 did not write positions 0..2");
  cache.set_linear_state(2, cache.recurrent_state(2), cache.conv_state(2), 3);
  EXPECT_NO_THROW(cache.advance(3));
  EXPECT_EQ(cache.length(), 3);
}

}  // namespace
}  // namespace cg
