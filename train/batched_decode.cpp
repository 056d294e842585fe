// Why this file exists: the ragged-batch decoder of batched_decode.h -- prompts of
// different lengths decoded together with one KV cache, rows dropped as they finish and
// replaced by waiting prompts.
#include "train/batched_decode.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <set>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/views.h"
#include "ops/attention_mask.h"
#include "ops/elementwise.h"
#include "ops/join_ops.h"
#include "ops/reduce.h"
#include "ops/shape_ops.h"

namespace cg::train {

// Note [Ragged batch]: the rows of one KV cache share its length L (every step appends
// one slot to every row), so rows of different lengths are right-aligned: a row that
// holds c tokens keeps them in slots L - c .. L - 1 and slots before are padding (zeros,
// so that a masked key times a zero weight can never be NaN). A token step feeds each row
// its last token with
//   - its own RoPE position c (the position it has when decoded alone), as [B, 1]
//     positions, and
//   - a dense key mask [B, 1, 1, L + 1]: row r sees slots >= L - c_r, i.e. exactly its own
//     tokens and the new one, never another row's padding.
// So a row computes what it computes alone: the same keys, values, positions and visible
// set. Only the floating-point order differs (the masked slots are extra zero terms in the
// softmax sums, and a GEMM may block differently for more rows), which can flip a greedy
// pick at a near-tie and nowhere else; the tests hold batched decoding to per-prompt
// decoding token for token.
// A prompt enters the batch after running alone through a cache of its own (its prefill:
// causal, no padding, bit for bit what generate() runs; it also yields its first token).
// Rows that finish stay in the batch, their outputs ignored, until a rebuild: when an
// eighth of the rows (at least one) has finished, or all have, a new cache is made for
// the rows still running plus waiting prompts up to batch_size, each row's tokens copied
// right-aligned to the new length max(c). Rebuilding copies the cache once (about what one
// attention step reads), so the batch stays full while prompts wait and shrinks at the end
// instead of feeding finished rows until the longest response ends.
// Left padding with per-row positions was chosen over per-row cache lengths: KVCache keeps
// one length for all rows (kv_cache.h) and the attention ops take a dense mask as is, so
// the cached forward runs unchanged with two extra arguments (per-row positions and the
// mask, Qwen3DecoderLayer::forward_cached). The cost: the mask covers the padding (O(L) per
// row and step), and on a GPU a dense mask takes the generic row kernel
// (cuda/attention_rows.cu), not the flash kernels.
// Hybrid targets (Qwen3.5 / Qwen3.6): a Gated DeltaNet layer keeps no slots, only each
// row's recurrent state and conv state (the row's last K-1 conv inputs), and has no mask.
// None is needed: a padding token never runs through a layer here (a prompt prefills
// alone; a step feeds each row its own real token; padding slots get zero keys written
// directly), so a row's state is the one it has alone. A rebuild copies each kept row's two
// states into its row of the new cache (KVCache::set_linear_state); right alignment does
// not apply to them. There is no speculative rollback here (one token a step), so
// Note [DeltaNet rollback] is never exercised; a rebuilt cache has nothing to roll back
// into until its next step.
// Note [Sample seeds]: with sampling, each prompt draws from its own Generator seeded by the
// caller (regenerate: from --seed and the sample's line), so a sample's response does not
// depend on which rows it shared a batch with, on --batch-size, or on a resume.

namespace {

constexpr size_t kRebuildFraction = 8;  // rebuild when 1/8 of the rows finished

// One new token a row -> logits [R, 1, vocab]: Qwen3ForCausalLM::forward_cached (nn/qwen3.cpp)
// with the two things it does not take, each row's own RoPE positions [R, 1] and a key
// mask over [R, Hq, 1, length + 1] for the full-attention layers; the same ops in the same
// order.
Tensor ragged_step(const nn::Qwen3ForCausalLM& lm, const Tensor& ids, nn::KVCache& cache,
                   const Tensor& positions, const AttentionMask& mask) {
  const nn::Qwen3Model& model = *lm.model;
  Tensor h = model.embed_tokens->forward(ids);  // [R, 1, hidden]
  for (size_t i = 0; i < model.layers->size(); ++i)
    h = model.layer(i).forward_cached(h, cache, static_cast<int64_t>(i), positions, mask);
  cache.advance(1);
  return lm.lm_head->forward(model.norm->forward(h));
}

struct Row {
  int64_t index = 0;
  std::vector<int64_t> tokens;  // new tokens so far; tokens.back() is fed next
  int64_t cached = 0;           // tokens in the cache (prompt + fed new tokens)
  Generator gen;
  bool done = false;
  bool stopped_at_eos = false;
};

// A prompt that ran alone: its cache (batch 1) holds the prompt.
struct Prefilled {
  Row row;
  nn::KVCache cache;
};

class Decoder {
 public:
  Decoder(const nn::Qwen3ForCausalLM& lm, const std::vector<DecodePrompt>& prompts,
          const BatchedDecodeOptions& options, const std::function<void(DecodedSample&&)>& on_done)
      : lm_(lm),
        prompts_(prompts),
        options_(options),
        on_done_(on_done),
        eos_(options.eos_ids.begin(), options.eos_ids.end()) {}

  DecodeStats run() {
    for (;;) {
      const size_t finished = static_cast<size_t>(
          std::count_if(rows_.begin(), rows_.end(), [](const Row& r) { return r.done; }));
      const bool all_done = finished == rows_.size();
      if (all_done || finished * kRebuildFraction >= rows_.size()) {
        if (all_done && next_ == prompts_.size()) break;
        rebuild();
        if (rows_.empty()) break;
      }
      step();
    }
    return stats_;
  }

 private:
  // Appends `token` to the row; reports and marks it done at EOS or max_new_tokens.
  void take(Row& row, int64_t token) {
    row.tokens.push_back(token);
    ++stats_.new_tokens;
    row.stopped_at_eos = eos_.count(token) > 0;
    if (row.stopped_at_eos || static_cast<int64_t>(row.tokens.size()) == options_.max_new_tokens) {
      row.done = true;
      on_done_(
          {.index = row.index, .new_tokens = row.tokens, .stopped_at_eos = row.stopped_at_eos});
    }
  }

  int64_t pick(const Tensor& logits_row, Row& row) const {
    SamplingOptions s = options_.sampling;
    s.generator = &row.gen;
    return pick_nucleus_token(logits_row, s, options_.top_p);
  }

  // The next waiting prompt run alone; nullopt when it finished at its first token.
  std::optional<Prefilled> prefill(size_t index) {
    const std::vector<int64_t>& ids = prompts_[index].ids;
    const int64_t P = static_cast<int64_t>(ids.size());
    Prefilled p{.row = {.index = static_cast<int64_t>(index),
                        .cached = P,
                        .gen = Generator(prompts_[index].seed)},
                .cache = lm_.make_cache(P)};
    const nn::DecoderOutput out = lm_.forward_cached(from_ints(ids, {1, P}, ids_on(lm_)), p.cache,
                                                     {.last_logits_only = true});
    ++stats_.prefills;
    take(p.row, pick(out.logits, p.row));
    if (p.row.done) return std::nullopt;
    return p;
  }

  // A new cache for the running rows and newcomers (Note [Ragged batch]).
  void rebuild() {
    ++stats_.rebuilds;
    struct Source {
      const nn::KVCache* cache;
      int64_t row;  // in that cache
    };
    std::vector<Row> rows;
    std::vector<Source> sources;
    for (size_t r = 0; r < rows_.size(); ++r) {
      if (rows_[r].done) continue;
      rows.push_back(std::move(rows_[r]));
      sources.push_back({&*cache_, static_cast<int64_t>(r)});
    }
    std::deque<nn::KVCache> fresh;  // the newcomers' own caches (stable addresses)
    const size_t limit = static_cast<size_t>(options_.batch_size);
    while (rows.size() < limit && next_ < prompts_.size()) {
      std::optional<Prefilled> p = prefill(next_++);
      if (!p) continue;
      fresh.push_back(std::move(p->cache));
      rows.push_back(std::move(p->row));
      sources.push_back({&fresh.back(), 0});
    }
    if (rows.empty()) {
      rows_.clear();
      cache_.reset();
      return;
    }
    int64_t length = 0;
    for (const Row& r : rows) length = std::max(length, r.cached);
    const int64_t R = static_cast<int64_t>(rows.size());
    // Any row needs at most max_new_tokens - 1 more slots (its first new token came with
    // its prefill).
    nn::KVCache cache = lm_.make_cache(length + options_.max_new_tokens, R);
    const Tensor zero = zeros({R, length, cache.num_kv_heads(), cache.head_dim()},
                              {.dtype = cache.dtype(), .device = cache.device()});
    for (int64_t layer = 0; layer < cache.num_layers(); ++layer) {
      if (cache.is_linear_layer(layer)) {  // each row's own states, not right-aligned
        std::vector<Tensor> recurrent, conv;
        for (const Source& s : sources) {
          recurrent.push_back(raw::narrow(s.cache->recurrent_state(layer), 0, s.row, 1));
          conv.push_back(raw::narrow(s.cache->conv_state(layer), 0, s.row, 1));
        }
        cache.set_linear_state(layer, cat(recurrent, 0), cat(conv, 0), length);
        continue;
      }
      const auto [keys, values] = cache.write(layer, zero, zero);  // [R, Hkv, length, hd]
      for (int64_t r = 0; r < R; ++r) {
        const Source& s = sources[static_cast<size_t>(r)];
        const int64_t c = rows[static_cast<size_t>(r)].cached, from = s.cache->length() - c;
        auto slots = [&](const Tensor& t, int64_t row, int64_t first) {
          return raw::narrow(raw::narrow(t, 0, row, 1), 2, first, c);
        };
        raw::copy_(slots(keys, r, length - c), slots(s.cache->keys(layer), s.row, from));
        raw::copy_(slots(values, r, length - c), slots(s.cache->values(layer), s.row, from));
      }
    }
    cache.advance(length);
    rows_ = std::move(rows);
    cache_.emplace(std::move(cache));
  }

  void step() {
    nn::KVCache& cache = *cache_;
    const int64_t R = static_cast<int64_t>(rows_.size()), L = cache.length();
    std::vector<int64_t> ids(static_cast<size_t>(R)), positions(static_cast<size_t>(R));
    std::vector<double> allowed(static_cast<size_t>(R * (L + 1)), 0.0);
    for (int64_t r = 0; r < R; ++r) {
      const Row& row = rows_[static_cast<size_t>(r)];
      ids[static_cast<size_t>(r)] = row.tokens.back();
      positions[static_cast<size_t>(r)] = row.cached;
      for (int64_t j = L - row.cached; j <= L; ++j)
        allowed[static_cast<size_t>(r * (L + 1) + j)] = 1;
    }
    const Tensor logits = ragged_step(
        lm_, from_ints(ids, {R, 1}, ids_on(lm_)), cache, from_ints(positions, {R, 1}, ids_on(lm_)),
        AttentionMask::dense(from_vector(allowed, {R, 1, 1, L + 1},
                                         {.dtype = DType::boolean, .device = cache.device()})));
    ++stats_.steps;
    stats_.row_steps += R;
    const bool greedy = options_.sampling.temperature == 0.0;
    std::vector<int64_t> greedy_next;
    Tensor host;
    if (greedy) {
      // argmax where the logits are (first maximum on ties, as greedy_tokens): R ids cross
      // to the host instead of R * vocab logits.
      const Tensor best = raw::contiguous(raw::to_device(argmax(logits, -1), kCPU));  // [R, 1]
      greedy_next.assign(best.data<int64_t>(), best.data<int64_t>() + R);
    } else {
      host = raw::contiguous(raw::to_dtype(raw::to_device(logits, kCPU), DType::f32));
    }
    for (int64_t r = 0; r < R; ++r) {
      Row& row = rows_[static_cast<size_t>(r)];
      if (row.done) continue;
      ++row.cached;
      take(row,
           greedy ? greedy_next[static_cast<size_t>(r)] : pick(raw::narrow(host, 0, r, 1), row));
    }
  }

  const nn::Qwen3ForCausalLM& lm_;
  const std::vector<DecodePrompt>& prompts_;
  const BatchedDecodeOptions& options_;
  const std::function<void(DecodedSample&&)>& on_done_;
  std::set<int64_t> eos_;
  std::vector<Row> rows_;
  std::optional<nn::KVCache> cache_;
  size_t next_ = 0;  // the first prompt not yet prefilled
  DecodeStats stats_;
};

}  // namespace

int64_t pick_nucleus_token(const Tensor& logits, const SamplingOptions& sampling, double top_p) {
  CG_CHECK(top_p > 0.0 && top_p <= 1.0,
           "pick_nucleus_token: top_p must be in (0, 1] (1 = no "
           "limit), got ",
           top_p);
  if (top_p == 1.0 || sampling.temperature == 0.0) return pick_token(logits, sampling);
  CG_CHECK(logits.defined() && logits.dim() >= 1 && logits.numel() == logits.size(-1),
           "pick_nucleus_token: logits must be one row [vocab], got ",
           logits.defined() ? shape_str(logits.shape()) : std::string("undefined"));
  const Tensor h = raw::contiguous(raw::to_dtype(raw::to_device(logits, kCPU), DType::f32));
  const float* x = h.data<float>();
  const size_t V = static_cast<size_t>(h.numel());
  // The candidates: every id, or the top_k largest (ties at the k-th stay, as pick_token).
  std::vector<int64_t> ids(V);
  for (size_t j = 0; j < V; ++j) ids[j] = static_cast<int64_t>(j);
  auto larger = [&](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  size_t n = V;
  if (sampling.top_k > 0 && static_cast<size_t>(sampling.top_k) < V) {
    std::nth_element(ids.begin(), ids.begin() + (sampling.top_k - 1), ids.end(), larger);
    const float kth = x[ids[static_cast<size_t>(sampling.top_k - 1)]];
    n = static_cast<size_t>(
        std::partition(ids.begin(), ids.end(), [&](int64_t j) { return x[j] >= kth; }) -
        ids.begin());
  }
  std::sort(ids.begin(), ids.begin() + static_cast<int64_t>(n), larger);
  const double m = x[ids[0]];
  CG_CHECK(std::isfinite(m), "pick_nucleus_token: the logits have no finite maximum (NaN or inf)");
  std::vector<double> weight(n);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i)
    total += weight[i] = std::exp((x[ids[i]] - m) / sampling.temperature);
  // Keep the most likely until they hold top_p; everything else gets -inf.
  std::vector<double> kept(V, -std::numeric_limits<double>::infinity());
  double held = 0.0;
  for (size_t i = 0; i < n && (i == 0 || held < top_p * total); ++i) {
    held += weight[i];
    kept[static_cast<size_t>(ids[i])] = x[ids[i]];
  }
  return pick_token(from_vector(kept, {static_cast<int64_t>(V)}), sampling);
}

DecodeStats decode_batched(const nn::Qwen3ForCausalLM& lm, const std::vector<DecodePrompt>& prompts,
                           const BatchedDecodeOptions& options,
                           const std::function<void(DecodedSample&&)>& on_done) {
  CG_CHECK(options.max_new_tokens >= 1, "decode_batched: max_new_tokens must be >= 1, got ",
           options.max_new_tokens);
  CG_CHECK(options.batch_size >= 1, "decode_batched: batch_size must be >= 1, got ",
           options.batch_size);
  for (size_t i = 0; i < prompts.size(); ++i) {
    CG_CHECK(!prompts[i].ids.empty(), "decode_batched: prompt ", i, " is empty");
  }
  NoGradGuard no_grad;
  Decoder decoder(lm, prompts, options, on_done);
  return decoder.run();
}

}  // namespace cg::train
