// Why this file exists: target-only decoding with a KV cache (generate.h, Note [Greedy
// decoding]) and the host-side token pickers it shares with speculative decoding.
#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "autograd/grad_mode.h"
#include "core/backend.h"
#include "core/views.h"
#include "ops/join_ops.h"
#include "ops/shape_ops.h"

namespace cg::train {

namespace {

// logits as a contiguous host f32 tensor (itself when it already is one: the usual case).
Tensor host_f32(const Tensor& logits) {
  return raw::contiguous(raw::to_dtype(raw::to_device(logits, kCPU), DType::f32));
}

int64_t argmax_row(const float* row, int64_t vocab) {
  int64_t best = 0;
  for (int64_t j = 1; j < vocab; ++j) {
    if (row[j] > row[best]) best = j;  // strict: the first maximum wins ties
  }
  return best;
}

}  // namespace

std::vector<int64_t> greedy_tokens(const Tensor& logits) {
  CG_CHECK(
      logits.defined() && logits.dim() >= 1 && logits.size(-1) > 0 && is_floating(logits.dtype()),
      "greedy_tokens: logits must be a floating [..., vocab] tensor, got ",
      logits.defined() ? std::string(dtype_name(logits.dtype())) + " " + shape_str(logits.shape())
                       : std::string("undefined"));
  const Tensor h = host_f32(logits);
  const int64_t vocab = h.size(-1), rows = h.numel() / vocab;
  const float* p = h.data<float>();
  std::vector<int64_t> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) out[static_cast<size_t>(r)] = argmax_row(p + r * vocab, vocab);
  return out;
}

int64_t pick_token(const Tensor& logits, const SamplingOptions& sampling) {
  CG_CHECK(std::isfinite(sampling.temperature) && sampling.temperature >= 0.0,
           "pick_token: temperature must be finite and >= 0 (0 = greedy), got ",
           sampling.temperature);
  CG_CHECK(sampling.top_k >= 0, "pick_token: top_k must be >= 0 (0 = no limit), got ",
           sampling.top_k);
  CG_CHECK(logits.defined() && logits.dim() >= 1 && logits.numel() == logits.size(-1),
           "pick_token: logits must be one row [vocab] (leading dims of size 1), got ",
           logits.defined() ? shape_str(logits.shape()) : std::string("undefined"));
  if (sampling.temperature == 0.0) return greedy_tokens(logits)[0];

  const Tensor h = host_f32(logits);
  const int64_t vocab = h.size(-1);
  const float* p = h.data<float>();
  std::vector<double> scaled(static_cast<size_t>(vocab));
  for (int64_t j = 0; j < vocab; ++j) scaled[static_cast<size_t>(j)] = p[j] / sampling.temperature;
  // top-k: everything below the k-th largest value is out (ties at the k-th stay in).
  if (sampling.top_k > 0 && sampling.top_k < vocab) {
    std::vector<double> sorted = scaled;
    std::nth_element(sorted.begin(), sorted.begin() + (sampling.top_k - 1), sorted.end(),
                     std::greater<double>());
    const double kth = sorted[static_cast<size_t>(sampling.top_k - 1)];
    for (double& s : scaled) {
      if (s < kth) s = -std::numeric_limits<double>::infinity();
    }
  }
  const double m = *std::max_element(scaled.begin(), scaled.end());
  CG_CHECK(std::isfinite(m),
           "pick_token: the logits have no finite maximum (NaN or inf); "
           "cannot sample");
  double total = 0.0;
  for (double& s : scaled) total += (s = std::exp(s - m));
  Generator& gen = sampling.generator ? *sampling.generator : default_generator();
  double u = gen.uniform() * total;
  for (int64_t j = 0; j < vocab; ++j) {
    u -= scaled[static_cast<size_t>(j)];
    if (u < 0.0) return j;
  }
  // Rounding left u >= 0 after the last term: the last token with weight.
  for (int64_t j = vocab - 1; j >= 0; --j) {
    if (scaled[static_cast<size_t>(j)] > 0.0) return j;
  }
  return 0;
}

Tensor concat_features(const std::vector<Tensor>& layer_hidden) {
  CG_CHECK(!layer_hidden.empty(), "concat_features: no layers were captured");
  const Tensor joined = layer_hidden.size() == 1 ? layer_hidden[0] : cat(layer_hidden, -1);
  return reshape(joined, {joined.numel() / joined.size(-1), joined.size(-1)});
}

Tensor target_features(const nn::Qwen3ForCausalLM& lm, const std::vector<int64_t>& tokens,
                       const std::vector<int64_t>& layers) {
  CG_CHECK(!tokens.empty(), "target_features: tokens must not be empty");
  CG_CHECK(!layers.empty(), "target_features: name at least one target layer");
  NoGradGuard no_grad;
  const auto out =
      lm.forward(from_ints(tokens, {1, static_cast<int64_t>(tokens.size())}, ids_on(lm)),
                 {.capture_layers = layers, .logits = false});
  return concat_features(out.layer_hidden);
}

Generation generate(const nn::Qwen3ForCausalLM& lm, const std::vector<int64_t>& prompt,
                    const GenerateOptions& options, nn::KVCache* cache) {
  CG_CHECK(!prompt.empty(),
           "generate: the prompt is empty; start it with at least one token "
           "(e.g. BOS)");
  CG_CHECK(options.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ",
           options.max_new_tokens);
  NoGradGuard no_grad;
  const int64_t P = static_cast<int64_t>(prompt.size());
  const int64_t needed = P + options.max_new_tokens;
  std::optional<nn::KVCache> own;
  if (cache == nullptr) {
    own.emplace(lm.make_cache(needed));
    cache = &*own;
  }
  CG_CHECK(cache->max_length() >= needed, "generate: the cache holds ", cache->max_length(),
           " positions but the prompt (", P, ") plus max_new_tokens (", options.max_new_tokens,
           ") needs ", needed);
  cache->clear();

  Generation g;
  g.tokens = prompt;
  g.prompt_length = P;
  const bool capture = !options.capture_layers.empty();
  if (options.max_new_tokens == 0 && !capture) return g;

  nn::CachedForwardOptions step{.capture_layers = options.capture_layers, .last_logits_only = true};
  std::vector<Tensor> features;
  Tensor input = from_ints(prompt, {1, P}, ids_on(lm));
  int64_t produced = 0;
  for (;;) {
    const bool last = g.stopped_at_eos || produced == options.max_new_tokens;
    step.logits = !last;  // the final feed only fetches the last token's features
    const nn::DecoderOutput out = lm.forward_cached(input, *cache, step);
    ++g.target_forwards;
    if (capture) features.push_back(concat_features(out.layer_hidden));
    if (last) break;
    const int64_t next = pick_token(out.logits, options.sampling);
    g.tokens.push_back(next);
    ++produced;
    g.stopped_at_eos = is_eos(options.eos_ids, next);
    if (!capture && (g.stopped_at_eos || produced == options.max_new_tokens)) break;
    input = from_ints({next}, {1, 1}, ids_on(lm));
  }
  if (capture) g.features = features.size() == 1 ? features[0] : cat(features, 0);
  return g;
}

namespace {

// Note [Batched generation on a GPU]: a greedy token step of the toy target is a few
// hundred tiny kernels and one wait for the logits; on a GPU the step's cost is that
// launch-and-wait latency, nearly the same for 1 row as for 64. Prompts of the same
// length share positions, so they run as one batch with one KV cache and no padding: the
// rows are independent (attention never mixes rows), each row's tokens are its greedy
// continuation, and a row that reached EOS is fed on but its tokens are dropped. It
// applies to every device whose work is queued (DeviceCapabilities::queued_work, core/
// backend.h). The host keeps batch 1 (its cost is arithmetic; and its figures stay those
// of the README).
constexpr size_t kGenerateBatch = 64;

std::vector<Generation> generate_batch(const nn::Qwen3ForCausalLM& lm,
                                       const std::vector<const std::vector<int64_t>*>& prompts,
                                       const GenerateOptions& options) {
  NoGradGuard no_grad;
  const int64_t rows = static_cast<int64_t>(prompts.size());
  const int64_t P = static_cast<int64_t>(prompts[0]->size());
  std::vector<Generation> out(prompts.size());
  std::vector<int64_t> ids;
  for (size_t r = 0; r < prompts.size(); ++r) {
    out[r].tokens = *prompts[r];
    out[r].prompt_length = P;
    ids.insert(ids.end(), prompts[r]->begin(), prompts[r]->end());
  }
  if (options.max_new_tokens == 0) return out;
  nn::KVCache cache = lm.make_cache(P + options.max_new_tokens, rows);
  const nn::CachedForwardOptions step{.last_logits_only = true};
  Tensor input = from_ints(ids, {rows, P}, ids_on(lm));
  int64_t running = rows;
  for (int64_t produced = 0; produced < options.max_new_tokens && running > 0; ++produced) {
    const nn::DecoderOutput o = lm.forward_cached(input, cache, step);
    const std::vector<int64_t> next = greedy_tokens(o.logits);  // [rows]
    for (size_t r = 0; r < out.size(); ++r) {
      Generation& g = out[r];
      if (g.stopped_at_eos) continue;
      ++g.target_forwards;
      g.tokens.push_back(next[r]);
      g.stopped_at_eos = is_eos(options.eos_ids, next[r]);
      running -= g.stopped_at_eos ? 1 : 0;
    }
    input = from_ints(next, {rows, 1}, ids_on(lm));
  }
  return out;
}

}  // namespace

std::vector<Generation> generate_all(const nn::Qwen3ForCausalLM& lm,
                                     const std::vector<std::vector<int64_t>>& prompts,
                                     const GenerateOptions& options,
                                     const GenerateProgress& on_progress) {
  const int64_t total = static_cast<int64_t>(prompts.size());
  int64_t done = 0;
  auto finished = [&](const Generation* first, size_t count) {
    if (!on_progress) return;
    int64_t fresh = 0;
    for (size_t i = 0; i < count; ++i)
      fresh += static_cast<int64_t>(first[i].tokens.size()) - first[i].prompt_length;
    done += static_cast<int64_t>(count);
    on_progress(done, total, fresh);
  };
  const Device device = lm.lm_head->weight.device();
  const bool batched = backend_for(device).capabilities().queued_work &&
                       options.capture_layers.empty() && options.sampling.temperature == 0.0;
  if (batched) {  // Note [Batched generation on a GPU]
    CG_CHECK(options.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ",
             options.max_new_tokens);
    std::vector<Generation> out(prompts.size());
    std::map<size_t, std::vector<size_t>> by_length;
    for (size_t i = 0; i < prompts.size(); ++i) {
      CG_CHECK(!prompts[i].empty(),
               "generate: the prompt is empty; start it with at least one token (e.g. BOS)");
      by_length[prompts[i].size()].push_back(i);
    }
    for (const auto& [length, members] : by_length) {
      for (size_t g0 = 0; g0 < members.size(); g0 += kGenerateBatch) {
        std::vector<const std::vector<int64_t>*> group;
        for (size_t j = g0; j < std::min(members.size(), g0 + kGenerateBatch); ++j)
          group.push_back(&prompts[members[j]]);
        std::vector<Generation> batch = generate_batch(lm, group, options);
        finished(batch.data(), batch.size());
        for (size_t j = 0; j < batch.size(); ++j) out[members[g0 + j]] = std::move(batch[j]);
      }
    }
    return out;
  }
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<int64_t>(p.size()));
  std::vector<Generation> out;
  if (prompts.empty()) return out;
  nn::KVCache cache = lm.make_cache(std::max<int64_t>(1, longest + options.max_new_tokens));
  for (const auto& p : prompts) {
    out.push_back(generate(lm, p, options, &cache));
    finished(&out.back(), 1);
  }
  return out;
}

}  // namespace cg::train
