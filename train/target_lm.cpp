// Why this file exists: training, loading and caching the target LM (target_lm.h).
#include "train/target_lm.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/factories.h"
#include "nn/checkpoint.h"
#include "nn/safetensors.h"
#include "ops/elementwise.h"
#include "ops/head_loss.h"
#include "ops/shape_ops.h"
#include "train/generate.h"
#include "train/optimizer.h"
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

double train_target(nn::Qwen3ForCausalLM& lm, const std::vector<int64_t>& tokens,
                    const TargetConfig& config, uint64_t seed, const StepCallback& on_step) {
  const OptimConfig& o = config.optim;
  const int64_t S = config.seq_len;
  CG_CHECK(static_cast<int64_t>(tokens.size()) > S + 1, "target training: the corpus has ",
           tokens.size(), " tokens, fewer than target.seq_len + 2 = ", S + 2);
  lm.train();
  AdamW opt(lm.parameters(), {.beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps,
                              .weight_decay = o.weight_decay, .grad_clip = o.grad_clip});
  Generator gen(seed);
  const int64_t warmup = static_cast<int64_t>(o.warmup_ratio * static_cast<double>(o.steps));
  const uint64_t starts = tokens.size() - static_cast<uint64_t>(S) - 1;
  double last = 0;
  // The step losses stay on the device and are read every few steps (one wait for all
  // of them), as the drafter's (Note [Steps that do not wait], drafter_trainer.h).
  std::vector<std::pair<int64_t, Tensor>> queued;
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
  for (int64_t step = 1; step <= o.steps; ++step) {
    Tensor loss_sum;
    for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
      std::vector<int64_t> in, lab;
      for (int64_t b = 0; b < o.batch_size; ++b) {
        const size_t s0 = static_cast<size_t>(gen.next_u64() % starts);
        in.insert(in.end(), tokens.begin() + s0, tokens.begin() + s0 + S);
        lab.insert(lab.end(), tokens.begin() + s0 + 1, tokens.begin() + s0 + S + 1);
      }
      const Tensor ids = from_ints(in, {o.batch_size, S}, ids_on(lm));
      nn::DecoderOutput out = lm.forward(ids, {.logits = false});
      HeadLossOptions hl;
      hl.with_metrics = false;
      HeadLossInputs hin;
      hin.hidden = reshape(out.hidden, {o.batch_size * S, config.hidden_size});
      hin.head = lm.lm_head->weight;
      hin.labels = from_ints(lab, {o.batch_size * S}, ids_on(lm));
      HeadLossResult r = head_loss(hin, hl);
      r.loss.backward();
      const Tensor l = r.loss.detach();
      loss_sum = loss_sum.defined() ? loss_sum + l : l;
    }
    opt.step(warmup_cosine_lr(step, o.steps, warmup, o.lr, o.min_lr_ratio),
             1.0 / static_cast<double>(o.grad_accum));
    queued.emplace_back(step, loss_sum);
    if (static_cast<int64_t>(queued.size()) >= 10 || step == o.steps) finish_queued();
  }
  lm.eval();
  return last;
}

TargetResult obtain_target(const TrainConfig& config, const std::vector<int64_t>& corpus_tokens,
                           const std::string& fingerprint, const StepCallback& on_step) {
  const auto t0 = std::chrono::steady_clock::now();
  TargetResult r;
  const TargetConfig& t = config.target;
  nn::Qwen3Config mc = target_model_config(t, ByteTokenizer::kVocabSize);
  if (!t.hf_config.empty()) {
    try {  // Qwen3Config's messages say "config.json"; name the file the user gave
      mc = nn::Qwen3Config::from_hf_file(t.hf_config);
    } catch (const Error& e) {
      CG_FAIL("target.hf_config '", t.hf_config, "': ", e.message());
    }
    CG_CHECK(mc.vocab_size >= ByteTokenizer::kVocabSize, "target.hf_config '", t.hf_config, "': vocab_size ",
             mc.vocab_size, " is smaller than the byte tokenizer's ", ByteTokenizer::kVocabSize,
             " ids (train/tokenizer.h): the target must read byte-level tokens");
  }
  Generator init_gen(config.seed);
  r.lm = std::make_unique<nn::Qwen3ForCausalLM>(mc, nn::InitOptions{.generator = &init_gen});
  r.lm->to(config.compute_device());  // made on the host (same initial values everywhere), then moved
  const std::string dir = config.run_dir + "/target";
  const std::string cached = dir + "/model.safetensors";
  if (!t.checkpoint.empty()) {
    nn::load_checkpoint(*r.lm, t.checkpoint, {.strict = true, .convert_dtype = true});
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
      } catch (const Error&) {
        hit = false;  // a damaged cache is retrained, not fatal
      }
    }
    if (hit) {
      r.source = "cache";
    } else {
      r.final_loss = train_target(*r.lm, corpus_tokens, t, config.seed + 11, on_step);
      std::filesystem::create_directories(dir);
      const std::string tmp = cached + ".tmp";
      nn::save_checkpoint(*r.lm, tmp, {{"fingerprint", fingerprint}, {"config", mc.str()}});
      std::filesystem::rename(tmp, cached);
      r.source = "trained";
    }
  }
  r.lm->eval();
  r.lm->freeze();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace cg::train
