// Why this file exists: the main job's first stages (pipeline_stages.h): the run directory
// locked and checked, the corpus or the offline feature files opened, the resume
// checkpoint chosen -- everything that must hold before a stage writes -- and the helpers
// every stage prints with. The later stages are in train/pipeline.cpp.
#include "train/pipeline_stages.h"
#include "train/stop_signal.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/atomic_file.h"
#include "nn/safetensors.h"
#include "ops/loss_config.h"
#include "ops/threads.h"
#include "train/corpus.h"
#include "train/dflash_batch.h"
#include "train/fingerprint.h"
#include "train/offline_run.h"
#include "train/target_features.h"

namespace cg::train::pipeline_stages {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A stage's time as people read it: "12.3 s", "3:05" from a minute on.
std::string seconds_text(double seconds) {
  char buf[32];
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else {
    const int64_t s = static_cast<int64_t>(seconds + 0.5);
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

void say(const TrainConfig& c, const std::string& line) {
  if (c.progress) {
    std::fprintf(stderr, "chunkgrad train: %s\n", line.c_str());
    std::fflush(stderr);
  }
}

// A warning goes to stderr with or without progress (--no-progress drops stage lines only).
void warn(const std::string& line) {
  std::fprintf(stderr, "chunkgrad train: warning: %s\n", line.c_str());
  std::fflush(stderr);
}

// A progress bar for a stage without a loss (generation, decoding), fed by generate_all's
// or evaluate_speculative's callback: prompts done of `total`, tokens/s and an ETA, the
// line ended when the last prompt is done (Note [Batched generation on a GPU]: on a GPU a
// batch of prompts ends at once).
GenerateProgress progress_bar(const std::string& phase, size_t total, const TrainConfig& c,
                              const std::string& stop_message) {
  auto bar = std::make_shared<ProgressBar>(phase, static_cast<int64_t>(total), c.progress);
  return [bar, phase, stop_message](int64_t done, int64_t all, int64_t tokens) {
    bar->update(done, tokens);
    if (done == all) bar->finish();
    if (!stop_message.empty() && done < all && stop_agreed()) {
      bar->finish();  // ends the progress line before the message
      throw Interrupted::with_message(phase, done, stop_message);
    }
  };
}

// Text for the summary: printable ASCII and newlines as they are, other bytes as \xNN
// (a small target may emit bytes that are not UTF-8, which JSON cannot hold).
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n' || (c >= 0x20 && c < 0x7f)) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

namespace {

std::vector<std::string> train_prompts(const TrainConfig& c, const std::string& text, int64_t count,
                                       int64_t* cut) {
  if (c.corpus.path.empty()) {
    std::vector<std::string> p;
    for (const auto& l : generate_corpus_lines(c.corpus.seed, count)) p.push_back(l.prompt);
    return p;
  }
  return prompts_from_text(text, count, 16, c.seed, PromptSplit::training, cut);
}

std::vector<std::string> eval_prompts(const TrainConfig& c, const std::string& text, int64_t count,
                                      int64_t* cut) {
  if (c.corpus.path.empty()) {  // held out: another seed than the corpus and the drafter data
    std::vector<std::string> p;
    for (const auto& l : generate_corpus_lines(c.corpus.seed + 1000003, count))
      p.push_back(l.prompt);
    return p;
  }
  return prompts_from_text(text, count, 16, c.seed + 1000003, PromptSplit::evaluation, cut);
}

// A folder a later stage writes into, made and probed now (a file is created in it and
// removed): a folder that cannot be made or written fails before the minutes of training,
// with the system's reason, not after them.
void probe_output_dir(const std::string& dir, const std::string& what, const std::string& advice) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  CG_CHECK(!ec && std::filesystem::is_directory(dir), what, ": cannot create the directory ", dir,
           ": ", ec ? ec.message() : std::string("a file is in the way"), "; ", advice);
  check_writable_dir(dir, what);
}

}  // namespace

// Stage 0: the run directory, locked for this run (run_lock.h) before anything in it is
// read or written.
void lock_run_directory(RunState& s) {
  std::filesystem::create_directories(s.config.run_dir);
  s.lock = std::make_unique<RunLock>(s.config.run_dir);
  if (s.lock->stale_pid() > 0) {
    say(s.config, "run_dir: took over the lock of pid " + std::to_string(s.lock->stale_pid()) +
                      ", which is no longer running");
  }
  remove_stale_temporaries(s.config);
}

void remove_stale_temporaries(const TrainConfig& config) {
  for (const std::string& path : remove_checkpoint_temporaries(config.run_dir)) {
    std::fprintf(stderr,
                 "chunkgrad train: removed %s, left by a checkpoint save that was cut off\n",
                 path.c_str());
    std::fflush(stderr);
  }
}

// Before any stage: what the config allows but the user probably did not mean. A setting
// the run does not use, set to other than its default, is one warning line (a setting that
// contradicts another is an error, TrainConfig::validate): an outside tester's
// num_target_features 5 beside three target_layers, mix_ce_weight with kind kl, temperature
// with kind ce and a sliding_window with every layer full all trained without a word.
void warn_about_config(const TrainConfig& c) {
  const DrafterConfig& d = c.drafter;
  const DrafterConfig defaults;
  auto text = [](double v) { return nlohmann::json(v).dump(); };
  const auto listed = static_cast<int64_t>(d.target_layers.size());
  if (listed > 0 && d.num_target_features != listed &&
      d.num_target_features != defaults.num_target_features) {
    warn("drafter.num_target_features " + std::to_string(d.num_target_features) +
         " is unused: drafter.target_layers lists " + std::to_string(listed) + " layers (" +
         nlohmann::json(d.target_layers).dump() + ") and the drafter reads those " +
         std::to_string(listed) + "; list " + std::to_string(d.num_target_features) +
         (d.num_target_features == 1 ? " layer" : " layers") + ", or drop num_target_features");
  }
  if (d.loss.kind != "mix" && d.loss.mix_ce_weight != defaults.loss.mix_ce_weight) {
    warn("drafter.loss.mix_ce_weight " + text(d.loss.mix_ce_weight) +
         " is unused: it is the CE weight of kind mix, and drafter.loss.kind is " + d.loss.kind +
         (loss_kind_info(d.loss.loss_kind()).needs_teacher
              ? "; for hard CE in this kind set drafter.loss.ce_weight"
              : "; drop it"));
  }
  if (!loss_kind_info(d.loss.loss_kind()).needs_teacher &&
      d.loss.temperature != defaults.loss.temperature) {
    warn("drafter.loss.temperature " + text(d.loss.temperature) +
         " is unused: it softens the teacher of kl, rkl, soft_ce and mix, and drafter.loss.kind " +
         d.loss.kind + " has none; drop it, or pick a teacher kind");
  }
  const bool slides = std::find(d.layer_types.begin(), d.layer_types.end(), "sliding_attention") !=
                      d.layer_types.end();
  if (!slides && d.sliding_window != defaults.sliding_window) {
    warn("drafter.sliding_window " + std::to_string(d.sliding_window) +
         " is unused: every layer is full_attention (drafter.layer_types " +
         nlohmann::json(d.layer_types).dump() +
         "); make some sliding_attention, or set sliding_window to 0");
  }
  if (c.eval.block_size > 0 && c.features.source != "online") {
    warn("eval.block_size " + std::to_string(c.eval.block_size) + " is unused: features.source " +
         c.features.source +
         " runs no speculative decoding, and its per-slot accuracy is at drafter.block_size; "
         "set it to 0");
  } else if (c.eval.block_size > 0 && c.eval.block_size != c.drafter.block_size) {
    warn(
        "eval.block_size " + std::to_string(c.eval.block_size) +
        " differs from drafter.block_size " + std::to_string(c.drafter.block_size) +
        ": the drafter is trained on blocks of " + std::to_string(c.drafter.block_size) +
        " and evaluated on blocks of " + std::to_string(c.eval.block_size) +
        (c.eval.block_size > c.drafter.block_size ? " (the slots beyond were never trained)" : "") +
        "; set eval.block_size to 0 to evaluate at the trained size");
  }
}

// Stage 1: the corpus text, its byte tokens and the content fingerprint. Reads only.
void read_corpus(RunState& s) {
  const TrainConfig& config = s.config;
  s.text = config.corpus.path.empty()
               ? corpus_text(generate_corpus_lines(config.corpus.seed, config.corpus.lines))
               : read_corpus_file(config.corpus.path);
  s.tokens = s.tok.encode(s.text);
  s.data_fingerprint = data_fingerprint(config, s.text).dump();
  // What the target stage (after the run directory is written) would find wrong, found
  // here instead: an unreadable target.checkpoint, a corpus too short to train on.
  if (!config.target.checkpoint.empty()) {
    try {  // (a sharded checkpoint: every shard's header too, not only the index)
      const std::unique_ptr<safetensors::Reader> r = safetensors::open(config.target.checkpoint);
      if (const auto* sharded = dynamic_cast<const safetensors::Sharded*>(r.get())) {
        const std::filesystem::path dir = std::filesystem::path(sharded->path()).parent_path();
        for (const std::string& f : sharded->shard_files())
          (void)safetensors::File((dir / f).string());
      }
    } catch (const Error& e) {
      CG_FAIL("target.checkpoint '", config.target.checkpoint, "': ", e.message());
    }
  } else if (config.features.source == "online") {
    check_corpus_trains_target(static_cast<int64_t>(s.tokens.size()), config.target.seq_len);
  }
  say(config, "corpus: " + std::to_string(s.tokens.size()) + " byte tokens (" +
                  (config.corpus.path.empty() ? std::string("generated") : config.corpus.path) +
                  ")");
  // The prompts of the later stages, taken now: a corpus they cannot come from fails
  // before the target is trained, and prompts that had to be cut are named up front.
  int64_t cut = 0;
  s.train_prompts = train_prompts(config, s.text, config.data.num_sequences, &cut);
  s.eval_prompts =
      eval_prompts(config, s.text, config.eval.prompts + config.eval.accuracy_sequences, &cut);
  s.accuracy_prompts.assign(s.eval_prompts.begin() + config.eval.prompts, s.eval_prompts.end());
  s.eval_prompts.resize(static_cast<size_t>(config.eval.prompts));
  if (cut > 0) {
    warn("corpus: " + std::to_string(cut) + " of " +
         std::to_string(config.data.num_sequences + config.eval.prompts +
                        config.eval.accuracy_sequences) +
         " prompts (the text before a line's first \": \") were longer than " +
         std::to_string(kMaxPromptBytes) + " bytes and were cut to their last " +
         std::to_string(kMaxPromptBytes) + " bytes");
  }
}

// Stage 1 of an offline run, instead of the corpus: the feature folder and the target it
// names, opened and checked (offline_run.h). Reads only.
void open_offline_features(RunState& s) {
  OfflineRun r = open_offline_run(s.config, s.device);
  // The masks are read at open: a folder with nothing to anchor (the trainer's own check)
  // is refused before the run directory is written, not after.
  const auto& seqs = r.train->sequences();
  CG_CHECK(
      std::any_of(seqs.begin(), seqs.end(),
                  [](const DrafterSequence& q) { return !anchor_candidates(q.loss_mask).empty(); }),
      "feature files: none of the ", seqs.size(), " training samples of ", s.config.features.dir,
      " has two loss positions in a row (loss_mask 1 on a token and the next), so no block "
      "can be anchored and the loss would be 0: write features from data with answers "
      "(assistant turns, or a loss_mask with 1s)");
  s.offline = true;
  s.offline_train = r.train;
  s.offline_held = r.held;
  s.data_fingerprint = r.data_fingerprint;
  s.target.lm = std::move(r.target.lm);
  s.target.source = "features (" + r.target.kind + " " + r.target.path + ")";
  say(s.config, "features: " + s.offline_train->describe() + ", target " + r.target.path);
}

// Stage 1 of a run from a Hugging Face target (features.source target), instead of the
// corpus: the target folder and the samples, opened and checked (target_features.h).
void open_target_features(RunState& s, const PipelineOptions& options) {
  ChatDataOptions data{.encode = options.encode};
  data.no_tokenizer_hint = options.no_tokenizer_hint;
  data.template_problem = options.template_problem;
  data.template_problem_is_error = options.template_problem_is_error;
  TargetRun r = open_target_run(s.config, s.device, data);
  s.offline = true;
  s.offline_train = r.train;
  s.offline_held = r.held;
  s.data_fingerprint = r.data_fingerprint;
  s.target.lm = std::move(r.target.lm);
  s.target.source = "features (" + r.target.kind + " " + r.target.path + ", computed each step)";
  say(s.config, "features: " + s.offline_train->describe());
}

std::string replaced_checkpoints_go(const TrainConfig& config) {
  return config.drafter.checkpoint_every >= 0
             ? "when this run saves its first checkpoint"
             : "when this run's training completes (drafter.checkpoint_every -1 saves none)";
}

// Stage 2: the resume decision (drafter_checkpoints.h): the newest drafter checkpoint, or
// the one --resume-from names, its header and its tensors (shapes and finiteness): a run
// with another config or other data, or a mismatched checkpoint, is refused here, before
// any stage writes, so the refusal's "the run directory is unchanged" is true. A damaged
// newest checkpoint is skipped for the one before, in one line each.
void check_resume(RunState& s, const PipelineOptions& options) {
  s.resume = choose_resume_checkpoint(s.config, s.data_fingerprint, options.resume_from);
  const std::string when = replaced_checkpoints_go(s.config);
  for (const std::string& skipped : s.resume.skipped) {
    warn("resume: " + skipped + "; skipped it, resuming from " + s.resume.path +
         " (the skipped one is removed " + when + ")");
  }
  if (!options.resume_from.empty()) {
    int64_t later = 0;
    for (const auto& [step, path] : drafter_checkpoint_files(s.config.run_dir))
      later += step > s.resume.step ? 1 : 0;
    if (later > 0) {
      warn("resume: from " + options.resume_from + " (step " + std::to_string(s.resume.step) +
           ") as --resume-from asks; the run directory's " +
           (later == 1 ? std::string("later checkpoint is")
                       : std::to_string(later) + " later checkpoints are") +
           " removed " + when);
    }
  }
}

// Stage 3: the run directory made ready: the folders the later stages write into probed
// (target/, drafter/, the trace folder), the metrics log, this run's config.json, and the
// previous run's results invalidated (a run that fails must not leave an old summary.json
// beside the new config.json).
void prepare_run_directory(RunState& s) {
  const TrainConfig& config = s.config;
  if (config.threads > 0) set_num_threads(static_cast<int>(config.threads));
  const std::string fix = "make it a writable folder, or give another run_dir";
  if (config.memory.enabled && !config.memory.trace_dir.empty()) {
    probe_output_dir(config.run_dir + "/" + config.memory.trace_dir, "memory.trace_dir",
                     "give another trace_dir or \"\" for no traces");
  }
  if (config.target.checkpoint.empty() && !s.offline)
    probe_output_dir(config.run_dir + "/target", "the target cache", fix);
  probe_output_dir(config.run_dir + "/drafter", "the drafter checkpoints", fix);
  s.log = MetricsLog(config.run_dir + "/metrics.jsonl");
  std::error_code ec;
  std::filesystem::remove(config.run_dir + "/summary.json", ec);
  CG_CHECK(!ec, "cannot remove the previous run's ", config.run_dir,
           "/summary.json: ", ec.message());
  if (!config.memory.trace_dir.empty()) {
    const std::filesystem::path dir =
        std::filesystem::path(config.run_dir) / config.memory.trace_dir;
    if (std::filesystem::is_directory(dir)) {
      for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        const bool ours = (name.starts_with("trace_") && name.ends_with(".json")) ||
                          (name.starts_with("report_") && name.ends_with(".html"));
        if (ours && e.is_regular_file()) std::filesystem::remove(e.path(), ec);
      }
    }
  }
  write_file_atomically(config.run_dir + "/config.json", config.to_json().dump(2) + "\n",
                        "the run's config");
}

}  // namespace cg::train::pipeline_stages
