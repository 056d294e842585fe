// Why this file exists: the speculative decoding loop (Note [Speculative step] in
// speculative_decoding.h) and its evaluation against target-only greedy decoding.
#include "train/speculative_decoding.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "ops/shape_ops.h"
#include "train/generate.h"

namespace cg::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check_options(int64_t block_size, int64_t max_new_tokens, const char* what) {
  CG_CHECK(block_size >= 2, what,
           ": block_size must be >= 2 (the anchor plus at least one "
           "drafted token), got ",
           block_size);
  CG_CHECK(max_new_tokens >= 0, what, ": max_new_tokens must be >= 0, got ", max_new_tokens);
  // Far beyond any real use, and low enough that prompt + max_new_tokens + block_size
  // cannot overflow (INT64_MAX once gave a cache of -9223372036854775727 positions).
  constexpr int64_t kLimit = int64_t{1} << 30;
  CG_CHECK(block_size <= kLimit && max_new_tokens <= kLimit, what,
           ": block_size and max_new_tokens must be at most ", kLimit, ", got ", block_size,
           " and ", max_new_tokens);
}

// The drafter's guesses, checked: block_size - 1 tokens, each a token id of the target.
std::vector<int64_t> checked_draft(BlockDrafter& drafter, int64_t anchor, int64_t position,
                                   int64_t block_size, int64_t vocab) {
  std::vector<int64_t> draft = drafter.propose(anchor, position, block_size);
  CG_CHECK(static_cast<int64_t>(draft.size()) == block_size - 1,
           "speculative decoding: the "
           "drafter proposed ",
           draft.size(), " tokens for block_size ", block_size,
           "; propose() must return block_size - 1 = ", block_size - 1);
  for (size_t i = 0; i < draft.size(); ++i) {
    CG_CHECK(draft[i] >= 0 && draft[i] < vocab,
             "speculative decoding: the drafter proposed "
             "token ",
             draft[i], " (slot ", i + 1, ") outside the target's vocabulary [0, ", vocab, ")");
  }
  return draft;
}

}  // namespace

SpeculativeGeneration speculative_generate(const nn::Qwen3ForCausalLM& target,
                                           BlockDrafter& drafter,
                                           const std::vector<int64_t>& prompt,
                                           const SpeculativeOptions& options, nn::KVCache* cache) {
  check_options(options.block_size, options.max_new_tokens, "speculative_generate");
  CG_CHECK(!prompt.empty(),
           "speculative_generate: the prompt is empty; start it with at "
           "least one token (e.g. BOS)");
  CG_CHECK(!drafter.target_layers().empty(),
           "speculative_generate: the drafter reads no "
           "target layers (target_layers() is empty)");
  NoGradGuard no_grad;
  const int64_t P = static_cast<int64_t>(prompt.size()), B = options.block_size;
  const int64_t max_new = options.max_new_tokens, vocab = target.config().vocab_size;
  const int64_t needed = P + max_new + B;
  std::optional<nn::KVCache> own;
  if (cache == nullptr) {
    own.emplace(target.make_cache(needed));
    cache = &*own;
  }
  CG_CHECK(cache->max_length() >= needed, "speculative_generate: the cache holds ",
           cache->max_length(), " positions but prompt (", P, ") + max_new_tokens (", max_new,
           ") + block_size (", B, ") needs ", needed);
  cache->clear();

  SpeculativeGeneration g;
  g.tokens = prompt;
  g.prompt_length = P;
  if (max_new == 0) return g;
  auto timed = [&g](auto&& call) {
    const auto start = Clock::now();
    call();
    g.drafter_seconds += seconds_since(start);
  };

  // The prompt: its features become the drafter's context, its last logits the first token.
  nn::CachedForwardOptions forward{.capture_layers = drafter.target_layers(),
                                   .last_logits_only = true};
  nn::DecoderOutput out =
      target.forward_cached(from_ints(prompt, {1, P}, ids_on(target)), *cache, forward);
  ++g.target_forwards;
  timed([&] {
    drafter.reset();
    drafter.append_context(concat_features(out.layer_hidden), 0);
  });
  int64_t anchor = greedy_tokens(out.logits)[0];
  g.tokens.push_back(anchor);
  int64_t produced = 1;
  g.stopped_at_eos = is_eos(options.eos_ids, anchor);

  forward.last_logits_only = false;
  std::vector<int64_t> block;
  for (int64_t a = P; !g.stopped_at_eos && produced < max_new;) {
    const int64_t L = std::min(B, max_new - produced);  // emits at most L tokens
    block.assign(1, anchor);
    if (L >= 2) {
      std::vector<int64_t> draft;
      timed([&] { draft = checked_draft(drafter, anchor, a, B, vocab); });
      block.insert(block.end(), draft.begin(), draft.begin() + (L - 1));
    }
    out = target.forward_cached(from_ints(block, {1, L}, ids_on(target)), *cache,
                                forward);  // positions a..a+L-1
    ++g.target_forwards;
    const std::vector<int64_t> verified = greedy_tokens(out.logits);  // [L]
    int64_t k = 0;                                                    // accepted drafts
    while (k < L - 1 && block[static_cast<size_t>(k + 1)] == verified[static_cast<size_t>(k)]) ++k;
    int64_t emitted = 0;
    for (int64_t i = 0; i <= k && !g.stopped_at_eos; ++i) {
      g.tokens.push_back(verified[static_cast<size_t>(i)]);
      ++emitted;
      g.stopped_at_eos = is_eos(options.eos_ids, verified[static_cast<size_t>(i)]);
    }
    produced += emitted;
    g.emitted_per_verify.push_back(emitted);
    if (g.stopped_at_eos || produced >= max_new) break;
    // Keep positions a .. a+k (anchor + accepted drafts); the bonus is the next anchor.
    cache->truncate(a + k + 1);
    timed(
        [&] { drafter.append_context(narrow(concat_features(out.layer_hidden), 0, 0, k + 1), a); });
    anchor = verified[static_cast<size_t>(k)];
    a += k + 1;
  }
  return g;
}

namespace {

// Note [Near ties]: whether greedy decoding's pick `a` and speculative decoding's pick `b`
// after `prefix` are both within tolerance of the prefix's largest logit.
bool is_near_tie(const nn::Qwen3ForCausalLM& target, const std::vector<int64_t>& prefix, int64_t a,
                 int64_t b, double tolerance) {
  NoGradGuard no_grad;
  const int64_t S = static_cast<int64_t>(prefix.size());
  const auto out = target.forward(from_ints(prefix, {1, S}, ids_on(target)));
  const std::vector<double> row = narrow(out.logits, 1, S - 1, 1).to_vector();
  const double top = *std::max_element(row.begin(), row.end());
  const double slack = tolerance * (1.0 + std::abs(top));
  auto near_top = [&](int64_t t) {
    return t >= 0 && t < static_cast<int64_t>(row.size()) &&
           top - row[static_cast<size_t>(t)] <= slack;
  };
  return near_top(a) && near_top(b);
}

// Note [Speedup ceiling]: proposes the tokens the greedy decoder emitted, for free.
class ReplayDrafter : public BlockDrafter {
 public:
  explicit ReplayDrafter(std::vector<int64_t> layers) : layers_(std::move(layers)) {}
  void set_tokens(const std::vector<int64_t>* tokens) { tokens_ = tokens; }
  const std::vector<int64_t>& target_layers() const override { return layers_; }
  void reset() override { length_ = 0; }
  void append_context(const Tensor& features, int64_t first) override {
    length_ = first + features.size(0);
  }
  void truncate_context(int64_t length) override { length_ = std::min(length_, length); }
  int64_t context_length() const override { return length_; }
  std::vector<int64_t> propose(int64_t, int64_t anchor_position, int64_t block_size) override {
    std::vector<int64_t> draft(static_cast<size_t>(block_size - 1), 0);
    for (int64_t i = 1; i < block_size; ++i) {
      const size_t at = static_cast<size_t>(anchor_position + i);
      if (at < tokens_->size()) draft[static_cast<size_t>(i - 1)] = (*tokens_)[at];
    }
    return draft;
  }

 private:
  std::vector<int64_t> layers_;
  const std::vector<int64_t>* tokens_ = nullptr;
  int64_t length_ = 0;
};

std::string describe_tokens(const std::vector<int64_t>& tokens, size_t from, size_t count) {
  std::ostringstream s;
  s << "[";
  for (size_t i = from; i < std::min(tokens.size(), from + count); ++i) {
    s << (i > from ? ", " : "") << tokens[i];
  }
  s << (from + count < tokens.size() ? ", ...]" : "]");
  return s.str();
}

}  // namespace

TimingSpread spread_of(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double median = n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  return {values.front(), median, values.back()};
}

SpeedupVerdict judge_speedup(const TimingSpread& speedup, const TimingSpread& ceiling,
                             int64_t repeats) {
  SpeedupVerdict v;
  char buf[400];
  const char* advice = "rerun on a quieter machine, or raise eval.timing_repeats";
  auto wide = [](const TimingSpread& t) {
    return t.median > 0 && t.max - t.min > kNoisySpread * t.median;
  };
  if (ceiling.median > 0 && speedup.median > ceiling.median) {
    v.noisy = v.above_ceiling = true;
    std::snprintf(buf, sizeof buf,
                  "the timing is noise: the speedup came out at %.2fx, above its own ceiling "
                  "%.2fx (a free drafter that is always right), which no drafter can beat "
                  "(%lld repeat(s): speedup %.2fx to %.2fx, ceiling %.2fx to %.2fx); %s",
                  speedup.median, ceiling.median, static_cast<long long>(repeats), speedup.min,
                  speedup.max, ceiling.min, ceiling.max, advice);
  } else if (repeats > 1 && (wide(speedup) || wide(ceiling))) {
    v.noisy = true;
    std::snprintf(buf, sizeof buf,
                  "the timing is noisy: over %lld repeats the speedup went from %.2fx to %.2fx "
                  "and the ceiling from %.2fx to %.2fx (more than %.0f%% of the median apart: "
                  "the machine's load changed while timing); %s",
                  static_cast<long long>(repeats), speedup.min, speedup.max, ceiling.min,
                  ceiling.max, kNoisySpread * 100, advice);
  } else if (repeats > 1) {
    std::snprintf(buf, sizeof buf, "median of %lld repeats, which gave %.2fx to %.2fx",
                  static_cast<long long>(repeats), speedup.min, speedup.max);
  } else {
    std::snprintf(buf, sizeof buf, "one repeat: no spread measured (eval.timing_repeats)");
  }
  v.note = buf;
  return v;
}

SpeculativeReport evaluate_speculative(const nn::Qwen3ForCausalLM& target, BlockDrafter& drafter,
                                       const std::vector<std::vector<int64_t>>& prompts,
                                       const EvaluateOptions& options) {
  check_options(options.block_size, options.max_new_tokens, "evaluate_speculative");
  CG_CHECK(!prompts.empty(), "evaluate_speculative: no prompts");
  CG_CHECK(options.repeats >= 1, "evaluate_speculative: repeats must be >= 1, got ",
           options.repeats);
  int64_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    CG_CHECK(!prompts[i].empty(), "evaluate_speculative: prompt ", i, " is empty");
    longest = std::max(longest, static_cast<int64_t>(prompts[i].size()));
  }
  const GenerateOptions greedy{.max_new_tokens = options.max_new_tokens,
                               .eos_ids = options.eos_ids};
  const SpeculativeOptions spec{.block_size = options.block_size,
                                .max_new_tokens = options.max_new_tokens,
                                .eos_ids = options.eos_ids};
  nn::KVCache greedy_cache = target.make_cache(longest + options.max_new_tokens + 1);
  nn::KVCache spec_cache = target.make_cache(longest + options.max_new_tokens + options.block_size);
  if (options.warmup) {
    generate(target, prompts[0], greedy, &greedy_cache);
    speculative_generate(target, drafter, prompts[0], spec, &spec_cache);
  }

  SpeculativeReport r;
  r.block_size = options.block_size;
  r.max_new_tokens = options.max_new_tokens;
  r.num_prompts = static_cast<int64_t>(prompts.size());
  r.repeats = options.repeats;
  // Note [Timing noise]: every repeat is a pass over all prompts, and in each pass every
  // prompt is decoded by greedy, speculative and (for the ceiling) the replaying decoder
  // one right after the other, the first of the three rotating, so that a change in load
  // lands on all of them alike. Each repeat gives its own speedups; the report takes their
  // median and keeps their spread.
  std::vector<Generation> reference(prompts.size());
  std::vector<SpeculativeGeneration> results(prompts.size());
  ReplayDrafter replay(drafter.target_layers());
  if (options.warmup && options.measure_ceiling) {
    const Generation g = generate(target, prompts[0], greedy, &greedy_cache);
    replay.set_tokens(&g.tokens);
    speculative_generate(target, replay, prompts[0], spec, &spec_cache);
  }
  std::vector<double> greedy_totals, spec_totals, ceiling_totals;
  std::vector<double> speedups, ceilings;
  int64_t ceiling_steps = 0, ceiling_emitted = 0;
  for (int64_t rep = 0; rep < options.repeats; ++rep) {
    double greedy_total = 0, spec_total = 0, ceiling_total = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const int decoders = options.measure_ceiling ? 3 : 2;
      int64_t emitted = 0;  // by the decoders of this prompt, for on_progress
      for (int k = 0; k < decoders; ++k) {
        // Greedy first in the first pass: the replaying decoder needs its output.
        const int which = rep == 0 ? k : static_cast<int>((k + rep + i) % decoders);
        const auto start = Clock::now();
        if (which == 0) {
          Generation g = generate(target, prompts[i], greedy, &greedy_cache);
          greedy_total += seconds_since(start);
          emitted += static_cast<int64_t>(g.tokens.size()) - g.prompt_length;
          if (rep == 0) reference[i] = std::move(g);
        } else if (which == 1) {
          SpeculativeGeneration g =
              speculative_generate(target, drafter, prompts[i], spec, &spec_cache);
          spec_total += seconds_since(start);
          emitted += static_cast<int64_t>(g.tokens.size()) - g.prompt_length;
          if (rep == 0) results[i] = std::move(g);
        } else {
          replay.set_tokens(&reference[i].tokens);
          const SpeculativeGeneration g =
              speculative_generate(target, replay, prompts[i], spec, &spec_cache);
          ceiling_total += seconds_since(start);
          emitted += static_cast<int64_t>(g.tokens.size()) - g.prompt_length;
          if (rep == 0) {
            ceiling_steps += static_cast<int64_t>(g.emitted_per_verify.size());
            for (int64_t n : g.emitted_per_verify) ceiling_emitted += n;
          }
        }
      }
      if (options.on_progress) {
        const int64_t n = static_cast<int64_t>(prompts.size());
        options.on_progress(rep * n + static_cast<int64_t>(i) + 1, options.repeats * n, emitted);
      }
    }
    greedy_totals.push_back(greedy_total);
    spec_totals.push_back(spec_total);
    speedups.push_back(spec_total > 0 ? greedy_total / spec_total : 0.0);
    if (options.measure_ceiling) {
      ceiling_totals.push_back(ceiling_total);
      ceilings.push_back(ceiling_total > 0 ? greedy_total / ceiling_total : 0.0);
    }
  }
  r.greedy_seconds = spread_of(greedy_totals).median;
  r.speculative_seconds = spread_of(spec_totals).median;
  r.speedup_spread = spread_of(speedups);
  r.speedup = r.speedup_spread.median;
  if (options.measure_ceiling) {
    r.ceiling_seconds = spread_of(ceiling_totals).median;
    r.ceiling_spread = spread_of(ceilings);
    r.ceiling_speedup = r.ceiling_spread.median;
    r.ceiling_tau = ceiling_steps > 0 ? static_cast<double>(ceiling_emitted) / ceiling_steps : 0.0;
  }
  const SpeedupVerdict verdict = judge_speedup(r.speedup_spread, r.ceiling_spread, r.repeats);
  r.timing_noisy = verdict.noisy;
  r.timing_note = verdict.note;

  r.acceptance_histogram.assign(static_cast<size_t>(options.block_size + 1), 0);
  int64_t verified_tokens = 0;
  for (const auto& g : reference) {
    r.greedy_new_tokens += static_cast<int64_t>(g.new_tokens().size());
    r.greedy_forwards += g.target_forwards;
  }
  for (const auto& s : results) {
    r.new_tokens += static_cast<int64_t>(s.new_tokens().size());
    r.verify_forwards += static_cast<int64_t>(s.emitted_per_verify.size());
    r.drafter_seconds += s.drafter_seconds;
    for (int64_t n : s.emitted_per_verify) {
      ++r.acceptance_histogram[static_cast<size_t>(n)];
      verified_tokens += n;
    }
  }
  r.tau = r.verify_forwards > 0 ? static_cast<double>(verified_tokens) / r.verify_forwards : 0.0;
  r.greedy_tokens_per_second = r.greedy_seconds > 0 ? r.greedy_new_tokens / r.greedy_seconds : 0;
  r.speculative_tokens_per_second =
      r.speculative_seconds > 0 ? r.new_tokens / r.speculative_seconds : 0;

  r.identical = true;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& want = reference[i].tokens;
    const auto& got = results[i].tokens;
    if (want == got) continue;
    r.identical = false;
    size_t j = 0;
    while (j < want.size() && j < got.size() && want[j] == got[j]) ++j;
    const bool both_continue = j < want.size() && j < got.size();
    if (both_continue &&
        is_near_tie(target, {want.begin(), want.begin() + static_cast<std::ptrdiff_t>(j)}, want[j],
                    got[j], options.tie_tolerance)) {
      ++r.tie_divergences;
      continue;
    }
    ++r.mismatched_prompts;
    if (r.mismatch.empty()) {
      std::ostringstream s;
      s << "prompt " << i << " (length " << prompts[i].size() << "): speculative decoding "
        << "differs from greedy decoding at new token "
        << static_cast<int64_t>(j) - static_cast<int64_t>(prompts[i].size()) << ": greedy "
        << describe_tokens(want, j, 6) << ", speculative " << describe_tokens(got, j, 6)
        << " (not a near tie of the logits)";
      r.mismatch = s.str();
    }
  }
  r.lossless = r.mismatch.empty();
  CG_CHECK(r.lossless || !options.throw_on_mismatch,
           "evaluate_speculative: output is not "
           "lossless: ",
           r.mismatch,
           ". This is a bug in the decoding loop or the KV cache, "
           "not in the drafter");
  return r;
}

std::string SpeculativeReport::str() const {
  std::ostringstream s;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "speculative decoding: block_size %lld, %lld prompts, "
                "max_new_tokens %lld\n",
                static_cast<long long>(block_size), static_cast<long long>(num_prompts),
                static_cast<long long>(max_new_tokens));
  s << buf;
  std::snprintf(buf, sizeof buf,
                "  tau %.3f tokens per verify forward (bonus included), "
                "%lld verify forwards\n",
                tau, static_cast<long long>(verify_forwards));
  s << buf << "  emitted per verify forward:";
  for (size_t n = 1; n < acceptance_histogram.size(); ++n) {
    s << " " << n << ":" << acceptance_histogram[n];
  }
  std::snprintf(buf, sizeof buf, "\n  greedy      %lld tokens in %.3f s (%.1f tokens/s)\n",
                static_cast<long long>(greedy_new_tokens), greedy_seconds,
                greedy_tokens_per_second);
  s << buf;
  std::snprintf(buf, sizeof buf,
                "  speculative %lld tokens in %.3f s (%.1f tokens/s; "
                "drafter %.3f s)\n",
                static_cast<long long>(new_tokens), speculative_seconds,
                speculative_tokens_per_second, drafter_seconds);
  s << buf;
  std::snprintf(buf, sizeof buf, "  speedup %.2fx (%s); outputs %s\n", speedup, timing_note.c_str(),
                identical  ? "identical token for token"
                : lossless ? "equal up to floating-point near ties"
                           : "DIFFERENT (not lossless)");
  s << buf;
  if (ceiling_seconds > 0) {
    std::snprintf(buf, sizeof buf,
                  "  ceiling (a free drafter that is always right): tau %.2f, "
                  "speedup %.2fx\n",
                  ceiling_tau, ceiling_speedup);
    s << buf;
  }
  if (tie_divergences > 0) s << "  prompts diverged at near ties: " << tie_divergences << "\n";
  if (!mismatch.empty()) s << "  first mismatch: " << mismatch << "\n";
  return s.str();
}

nlohmann::json SpeculativeReport::json() const {
  return {{"block_size", block_size},
          {"max_new_tokens", max_new_tokens},
          {"num_prompts", num_prompts},
          {"tau", tau},
          {"acceptance_histogram", acceptance_histogram},
          {"verify_forwards", verify_forwards},
          {"greedy_forwards", greedy_forwards},
          {"new_tokens", new_tokens},
          {"greedy_new_tokens", greedy_new_tokens},
          {"greedy_seconds", greedy_seconds},
          {"speculative_seconds", speculative_seconds},
          {"drafter_seconds", drafter_seconds},
          {"speedup", speedup},
          {"repeats", repeats},
          {"speedup_spread", {speedup_spread.min, speedup_spread.median, speedup_spread.max}},
          {"ceiling_spread", {ceiling_spread.min, ceiling_spread.median, ceiling_spread.max}},
          {"timing_noisy", timing_noisy},
          {"timing_note", timing_note},
          {"greedy_tokens_per_second", greedy_tokens_per_second},
          {"speculative_tokens_per_second", speculative_tokens_per_second},
          {"ceiling_tau", ceiling_tau},
          {"ceiling_seconds", ceiling_seconds},
          {"ceiling_speedup", ceiling_speedup},
          {"identical", identical},
          {"lossless", lossless},
          {"tie_divergences", tie_divergences},
          {"mismatched_prompts", mismatched_prompts},
          {"mismatch", mismatch}};
}

}  // namespace cg::train
