// Why this file exists: `chunkgrad regenerate` with a Qwen3.5 / Qwen3.6 target runs its
// ragged batch decoder (train/batched_decode.h) over Gated DeltaNet layers, whose states are
// per row and cannot be right-aligned like keys: a rebuild copies each row's recurrent and
// conv state into its row of the new cache with KVCache::set_linear_state (Note [Ragged
// batch]). This checks that copy directly -- rows of one cache put into another in swapped
// order, then a verify block with rejected tokens rolled back (Note [DeltaNet rollback]):
// every row computes, and ends with the states of, its own sequence without the rejected
// tokens -- and what set_linear_state refuses. decode_batched itself with a hybrid target:
// the BatchedDecode.HybridTarget* tests (regenerate_test.cpp); on the GPU,
// cuda_regenerate_test.cpp; with the golden Qwen3.5 folder, regenerate_program_test.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/views.h"
#include "decode_test_util.h"
#include "error_helpers.h"
#include "golden_test_util.h"
#include "nn/kv_cache.h"
#include "nn/qwen3.h"
#include "ops/join_ops.h"
#include "ops/shape_ops.h"

namespace cg {
namespace {

using testing_golden::rel_diff;

struct Fixture {
  Fixture() { testing_decode::perturb_and_freeze(lm, 58); }
  Generator gen{57};
  nn::Qwen3Config config = testing_decode::tiny_hybrid_target_config();
  nn::Qwen3ForCausalLM lm{config, {.generator = &gen}};
};

Tensor ids_of(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return from_ints(flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
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
    EXPECT_LT(rel_diff(raw::narrow(after, 0, r, 1), narrow(full, 1, 7, 2)), 1e-5) << "row " << r;
    // The state too: a single-sequence cache that never saw the rejected tokens.
    nn::KVCache clean = f.lm.make_cache(16);
    f.lm.forward_cached(ids_of({kept}), clean);
    for (int64_t l = 0; l < cache.num_layers(); ++l) {
      if (!cache.is_linear_layer(l)) continue;
      EXPECT_LT(rel_diff(raw::narrow(cache.recurrent_state(l), 0, r, 1), clean.recurrent_state(l)),
                1e-5)
          << "row " << r << " layer " << l;
      EXPECT_LT(rel_diff(raw::narrow(cache.conv_state(l), 0, r, 1), clean.conv_state(l)), 1e-5)
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
