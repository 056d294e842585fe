// Why this file exists: training, loading and caching the target LM (target_lm.h).
#include "train/target_lm.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "nn/checkpoint.h"
#include "nn/safetensors.h"
#include "ops/elementwise.h"
#include "ops/head_loss.h"
#include "ops/shape_ops.h"
#include "train/error_context.h"
#include "train/generate.h"
#include "train/optimizer.h"
#include "train/pipeline_stages.h"
#include "train/stop_signal.h"
#include "train/tokenizer.h"

namespace cg::train {

nn::Qwen3Config target_model_config(const TargetConfig& t, int64_t vocab_size) {
  nn::Qwen3Config c;
  c.vocab_size = vocab_size;
  c.hidden_size = t.hidden_size;
  c.num_layers = t.num_layers;
  c.num_heads = t.num_heads;
  c.num_kv_heads = t.num_kv_heads;
  c.head_dim = t.head_dim;
  c.intermediate_size = t.intermediate_size;
  c.rope_theta = t.rope_theta;
  c.tie_embeddings = false;
  c.validate();
  return c;
}

void check_corpus_trains_target(int64_t tokens, int64_t seq_len) {
  CG_CHECK(tokens > seq_len + 1, "target training: the corpus has ", tokens,
           " tokens, fewer than target.seq_len + 2 = ", seq_len + 2,
           "; give a longer corpus (corpus.lines, or a larger corpus.path) or a smaller "
           "target.seq_len");
}

nn::Qwen3Config target_architecture(const TargetConfig& t) {
  if (t.hf_config.empty()) return target_model_config(t, ByteTokenizer::kVocabSize);
  nn::Qwen3Config mc;
  try {  // Qwen3Config's messages say "config.json"; name the file the user gave
    mc = nn::Qwen3Config::from_hf_file(t.hf_config);
  } catch (const Error& e) { CG_FAIL("target.hf_config '", t.hf_config, "': ", e.message()); }
  CG_CHECK(mc.vocab_size >= ByteTokenizer::kVocabSize, "target.hf_config '", t.hf_config,
           "': vocab_size ", mc.vocab_size, " is smaller than the byte tokenizer's ",
           ByteTokenizer::kVocabSize,
           " ids (train/tokenizer.h): the target must read byte-level tokens");
  return mc;
}

namespace {

constexpr const char* kInterruptedFormat = "chunkgrad-target-interrupted-1";

void save_interrupted(const nn::Qwen3ForCausalLM& lm, const AdamW& opt,
                      const TargetTrainingHooks& hooks) {
  std::filesystem::create_directories(std::filesystem::path(hooks.resume_file).parent_path());
  safetensors::NamedTensors tensors;
  for (auto& [n, t] : lm.named_parameters()) tensors.emplace_back("model." + n, t.detach());
  for (auto& [n, t] : opt.state()) tensors.emplace_back("optim." + n, t);
  safetensors::save_file(tensors, hooks.resume_file,
                         {{"format", kInterruptedFormat},
                          {"fingerprint", hooks.fingerprint},
                          {"step", std::to_string(opt.steps_taken())}});
}

// The step of the interrupted state in hooks.resume_file, loaded into lm and opt; 0 when
// there is none for this fingerprint (or it is unreadable: then training starts over).
int64_t load_interrupted(nn::Qwen3ForCausalLM& lm, AdamW& opt, const TargetTrainingHooks& hooks) {
  if (hooks.resume_file.empty() || !std::filesystem::exists(hooks.resume_file)) return 0;
  try {
    auto reader = safetensors::open(hooks.resume_file);
    const auto& meta = reader->metadata();
    auto at = [&](const char* key) {
      auto it = meta.find(key);
      return it == meta.end() ? std::string() : it->second;
    };
    if (at("format") != kInterruptedFormat || at("fingerprint") != hooks.fingerprint) return 0;
    const int64_t step = std::stoll(at("step"));
    std::vector<std::pair<std::string, Tensor>> params, optim;
    for (auto& [n, t] : lm.named_parameters()) params.emplace_back(n, reader->load("model." + n));
    for (auto& [n, t] : opt.state()) optim.emplace_back(n, reader->load("optim." + n));
    lm.load_state_dict(nn::StateDict(params.begin(), params.end()));
    opt.load_state(optim, step);
    return step;
  } catch (const std::exception&) {
    return 0;  // a damaged state is trained again, not fatal (as the cache)
  }
}

}  // namespace

double train_target(nn::Qwen3ForCausalLM& lm, const std::vector<int64_t>& tokens,
                    const TargetConfig& config, uint64_t seed, const TargetTrainingHooks& hooks) {
  const StepCallback& on_step = hooks.on_step;
  const OptimConfig& o = config.optim;
  const int64_t S = config.seq_len;
  check_corpus_trains_target(static_cast<int64_t>(tokens.size()), S);
  lm.train();
  AdamW opt(lm.parameters(), {.beta1 = o.beta1,
                              .beta2 = o.beta2,
                              .eps = o.eps,
                              .weight_decay = o.weight_decay,
                              .grad_clip = o.grad_clip});
  Generator gen(seed);
  const int64_t warmup = static_cast<int64_t>(o.warmup_ratio * static_cast<double>(o.steps));
  const uint64_t starts = tokens.size() - static_cast<uint64_t>(S) - 1;
  double last = 0;
  // The step losses stay on the device and are read every few steps (one wait for all
  // of them), as the drafter's (Note [Steps that do not wait], drafter_trainer.h).
  std::vector<std::pair<int64_t, Tensor>> queued;
  const int64_t first = load_interrupted(lm, opt, hooks);
  // The windows of the steps already taken are drawn and dropped: the generator is then
  // where an uninterrupted run's would be, and the resumed steps are the same steps.
  for (int64_t i = 0; i < first * o.grad_accum * o.batch_size; ++i) gen.next_u64();
  if (hooks.on_start) hooks.on_start(first);
  auto finish_queued = [&] {
    for (const auto& [s, loss] : queued) {
      last = loss.item() / static_cast<double>(o.grad_accum);
      // As the drafter's (DrafterTrainer::finish): a diverged target stops here, before it
      // is cached and before the drafter is blamed for the NaN it then inherits.
      CG_CHECK(std::isfinite(last), "the target loss became ", last, " at step ", s,
               "; lower target.optim.lr or raise target.optim.warmup_ratio");
      if (on_step) on_step(s, o.steps, last, o.batch_size * o.grad_accum * S);
    }
    queued.clear();
  };
  for (int64_t step = first + 1; step <= o.steps; ++step) {
    Tensor loss_sum;
    try {  // error_context.h: an out-of-memory here named no phase
      for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
        std::vector<int64_t> in, lab;
        for (int64_t b = 0; b < o.batch_size; ++b) {
          const size_t s0 = static_cast<size_t>(gen.next_u64() % starts);
          in.insert(in.end(), tokens.begin() + s0, tokens.begin() + s0 + S);
          lab.insert(lab.end(), tokens.begin() + s0 + 1, tokens.begin() + s0 + S + 1);
        }
        // The batch is an input and what the forward allocates an activation (what an
        // out-of-memory error names).
        Tensor ids, labels;
        {
          CategoryGuard inputs(MemoryCategory::input);
          ids = from_ints(in, {o.batch_size, S}, ids_on(lm));
          labels = from_ints(lab, {o.batch_size * S}, ids_on(lm));
        }
        CategoryGuard activations(MemoryCategory::activation);
        nn::DecoderOutput out = lm.forward(ids, {.logits = false});
        HeadLossOptions hl;
        hl.with_metrics = false;
        HeadLossInputs hin;
        hin.hidden = reshape(out.hidden, {o.batch_size * S, config.hidden_size});
        hin.head = lm.lm_head->weight;
        hin.labels = labels;
        HeadLossResult r = head_loss(hin, hl);
        r.loss.backward();
        const Tensor l = r.loss.detach();
        loss_sum = loss_sum.defined() ? loss_sum + l : l;
      }
      opt.step(warmup_cosine_lr(step, o.steps, warmup, o.lr, o.min_lr_ratio),
               1.0 / static_cast<double>(o.grad_accum));
    } catch (const Error&) {
      rethrow_with_context("at target step " + std::to_string(step) + ": ");
    }
    queued.emplace_back(step, loss_sum);
    const bool stop = stop_agreed() && step < o.steps;  // Note [Stopping together]
    if (stop || static_cast<int64_t>(queued.size()) >= 10 || step == o.steps) finish_queued();
    if (stop && !hooks.resume_file.empty()) {
      save_interrupted(lm, opt, hooks);
      throw Interrupted("target", step);
    }
  }
  lm.eval();
  return last;
}

TargetResult obtain_target(const TrainConfig& config, const std::vector<int64_t>& corpus_tokens,
                           const std::string& fingerprint, const StepCallback& on_step,
                           const std::function<void(int64_t)>& on_start) {
  const auto t0 = std::chrono::steady_clock::now();
  TargetResult r;
  const TargetConfig& t = config.target;
  const nn::Qwen3Config mc = target_architecture(t);
  // Made on the host (same initial values everywhere), then moved.
  auto fresh_model = [&] {
    Generator init_gen(config.seed);
    auto lm = std::make_unique<nn::Qwen3ForCausalLM>(mc, nn::InitOptions{.generator = &init_gen});
    lm->to(config.compute_device());
    return lm;
  };
  r.lm = fresh_model();
  const std::string dir = config.run_dir + "/target";
  const std::string cached = dir + "/model.safetensors";
  if (!t.checkpoint.empty()) {
    nn::load_checkpoint(*r.lm, t.checkpoint, nn::hf_target_load_options(mc));
    r.source = "checkpoint";
  } else {
    bool hit = false;
    if (std::filesystem::exists(cached)) {
      try {
        auto reader = safetensors::open(cached);
        auto it = reader->metadata().find("fingerprint");
        if (it != reader->metadata().end() && it->second == fingerprint) {
          nn::load_checkpoint(*r.lm, *reader);
          hit = true;
        }
      } catch (const Error& e) {
        // A damaged cache is retrained, not fatal, from the seeded initial weights: the
        // tensors read before the damage was found (and the damaged one itself, read into
        // its parameter before its checksum was checked) would otherwise be where training
        // starts, and the retrained target would not be the one the drafter's checkpoints
        // were trained against (an outside tester's flipped bit).
        hit = false;
        r.lm = fresh_model();
        pipeline_stages::warn("the target cache " + cached + " is damaged (" + e.message() +
                              "); training the target again from its seed");
      }
    }
    if (hit) {
      r.source = "cache";
    } else {
      const std::string interrupted = dir + "/interrupted.safetensors";
      r.final_loss = train_target(*r.lm, corpus_tokens, t, config.seed + 11,
                                  {.on_step = on_step,
                                   .on_start = on_start,
                                   .resume_file = interrupted,
                                   .fingerprint = fingerprint});
      std::filesystem::create_directories(dir);
      nn::save_checkpoint(*r.lm, cached,
                          {{"fingerprint", fingerprint}, {"config", mc.str()}});  // atomic
      std::error_code ec;
      std::filesystem::remove(interrupted, ec);  // done: the interrupted state is spent
      r.source = "trained";
    }
  }
  r.lm->eval();
  r.lm->freeze();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace cg::train
