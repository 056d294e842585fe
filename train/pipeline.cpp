// Why this file exists: the main job's stages in order (pipeline.h; its summary as text is
// summary_text.cpp).
// run_pipeline reads as the list of stages; each stage is one function below that takes
// what the earlier stages made (RunState) and adds its own part.
#include "train/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/allocator_stats.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "ops/index_ops.h"
#include "ops/shape_ops.h"
#include "ops/threads.h"
#include "train/corpus.h"
#include "train/dflash_block_drafter.h"
#include "train/drafter_checkpoints.h"
#include "train/drafter_data.h"
#include "train/drafter_trainer.h"
#include "train/fingerprint.h"
#include "train/generate.h"
#include "train/in_memory_features.h"
#include "train/memory_report.h"
#include "train/offline_run.h"
#include "train/progress.h"
#include "train/run_lock.h"
#include "train/speculative_decoding.h"
#include "train/stop_signal.h"
#include "train/synthetic_pipeline.h"
#include "train/target_lm.h"
#include "train/tokenizer.h"

namespace cg::train {
namespace {

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
GenerateProgress progress_bar(const std::string& phase, size_t total, const TrainConfig& c) {
  auto bar = std::make_shared<ProgressBar>(phase, static_cast<int64_t>(total), c.progress);
  return [bar](int64_t done, int64_t all, int64_t tokens) {
    bar->update(done, tokens);
    if (done == all) bar->finish();
  };
}

// What the stages hand each other, filled in stage by stage.
struct RunState {
  RunState(const TrainConfig& c, Device d) : config(c), device(d) {}
  const TrainConfig& config;
  const Device device;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ByteTokenizer tok;
  std::unique_ptr<RunLock> lock;  // held to the end (run_lock.h)
  MetricsLog log;

  std::string text;  // the corpus (stage 1)
  std::vector<int64_t> tokens;
  std::vector<std::string> train_prompts, eval_prompts, accuracy_prompts;
  std::string data_fingerprint;  // of the corpus and target.checkpoint (fingerprint.h)
  ResumeChoice resume;           // the checked drafter checkpoint (path "" for none)

  TargetResult target;  // stage 2
  // features.source offline (Note [Offline runs], offline_run.h): the training samples and
  // the held-out ones, opened and checked before any stage writes.
  bool offline = false;
  std::shared_ptr<OfflineFeatureSource> offline_train, offline_held;

  std::vector<DrafterSequence> train_seqs;  // stage 3
  std::unique_ptr<nn::DFlashDrafter> drafter;
  DrafterTrainData data;
  double data_seconds = 0;

  int64_t first_step = 0, final_step = 0;  // stage 4
  double train_tokens_per_s = 0, drafter_seconds = 0;

  int64_t eval_block = 0;  // stage 5
  std::vector<std::vector<int64_t>> eval_prompt_ids;
  SpeculativeReport spec;
  SlotMetrics slots;
  std::string eval_skipped;  // what the evaluation could not do, in words ("": nothing)
  double eval_seconds = 0;

  std::vector<MemoryReport> memory;  // stage 6

  const nn::Qwen3ForCausalLM& lm() const { return *target.lm; }
  const std::vector<int64_t>& target_layers() const { return drafter->config().target_layers; }
};

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

// Stage 0: the run directory, locked for this run (run_lock.h) before anything in it is
// read or written.
void lock_run_directory(RunState& s) {
  std::filesystem::create_directories(s.config.run_dir);
  s.lock = std::make_unique<RunLock>(s.config.run_dir);
  if (s.lock->stale_pid() > 0) {
    say(s.config, "run_dir: took over the lock of pid " + std::to_string(s.lock->stale_pid()) +
                      ", which is no longer running");
  }
}

// Before any stage: what the config allows but the user probably did not mean.
void warn_about_config(const TrainConfig& c) {
  if (c.eval.block_size > 0 && c.eval.block_size != c.drafter.block_size) {
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
  s.offline = true;
  s.offline_train = r.train;
  s.offline_held = r.held;
  s.data_fingerprint = r.data_fingerprint;
  s.target.lm = std::move(r.target.lm);
  s.target.source = "features (" + r.target.kind + " " + r.target.path + ")";
  say(s.config, "features: " + s.offline_train->describe() + ", target " + r.target.path);
}

// Stage 2: the resume decision (drafter_checkpoints.h): the newest drafter checkpoint, or
// the one --resume-from names, its header and its tensors (shapes and finiteness): a run
// with another config or other data, or a mismatched checkpoint, is refused here, before
// any stage writes, so the refusal's "the run directory is unchanged" is true. A damaged
// newest checkpoint is skipped for the one before, in one line each.
void check_resume(RunState& s, const PipelineOptions& options) {
  s.resume = choose_resume_checkpoint(s.config, s.data_fingerprint, options.resume_from);
  for (const std::string& skipped : s.resume.skipped) {
    warn("resume: " + skipped + "; skipped it, resuming from " + s.resume.path +
         " (the skipped one is removed when this run saves its first checkpoint)");
  }
  if (!options.resume_from.empty()) {
    int64_t later = 0;
    for (const auto& [step, path] : drafter_checkpoint_files(s.config.run_dir))
      later += step > s.resume.step ? 1 : 0;
    if (later > 0) {
      warn("resume: from " + options.resume_from + " (step " + std::to_string(s.resume.step) +
           ") as --resume-from asks; the run directory's " + std::to_string(later) +
           " later checkpoint(s) are removed when this run saves its first checkpoint");
    }
  }
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

// Stage 4: the target LM, trained, or from the run directory's cache or a checkpoint.
void obtain_target_model(RunState& s) {
  const TrainConfig& config = s.config;
  if (s.offline) return;  // open_offline_features loaded it
  // Keyed by content (the corpus's bytes), not by the corpus's path: an edited corpus
  // trains a new target, a moved one does not.
  nlohmann::json corpus = config.to_json()["corpus"];
  corpus.erase("path");
  nlohmann::json fp = {{"target", config.to_json()["target"]},
                       {"corpus", corpus},
                       {"seed", config.seed},
                       {"data", nlohmann::json::parse(s.data_fingerprint)},
                       {"version", 2}};
  ProgressBar target_bar("target", config.target.optim.steps, config.progress);
  auto on_step = [&](int64_t step, int64_t, double loss, int64_t n) {
    target_bar.update(step, loss, n);
    s.log.write({{"phase", "target"}, {"step", step}, {"loss", loss}});
  };
  // Each target step once in metrics.jsonl: an earlier (interrupted or repeated) training's
  // steps after the one this training goes on from are dropped.
  auto on_start = [&](int64_t first) {
    s.log.drop_after("target", first);
    target_bar = ProgressBar("target", config.target.optim.steps, config.progress, first);
  };
  try {
    s.target = obtain_target(config, s.tokens, fp.dump(), on_step, on_start);
  } catch (const Interrupted&) {
    target_bar.finish();  // ends the progress line before the message
    throw;
  }
  if (s.target.source == "trained") target_bar.finish();
  say(config, "target: " + s.target.source + " (" + std::to_string(s.target.lm->num_parameters()) +
                  " parameters, " + seconds_text(s.target.seconds) + ")");
}

// Stage 5: the drafter's training data, the target's own continuations, and the drafter.
void make_drafter_data(RunState& s) {
  const TrainConfig& config = s.config;
  const auto t0 = std::chrono::steady_clock::now();
  if (s.offline) {
    s.drafter = make_drafter(s.lm(), config.drafter, ByteTokenizer::kMask, config.seed + 23);
    s.data = DrafterTrainData{s.offline_train, s.data_fingerprint};
    say(config, "drafter data: " + s.offline_train->describe());
    return;
  }
  // Said before the work: the stage has no bar, and a long one looked like a hang.
  say(config, "drafter data: the target continues " + std::to_string(s.train_prompts.size()) +
                  " prompts by up to " + std::to_string(config.data.max_new_tokens) +
                  " tokens each, then its features are computed");
  s.train_seqs = make_drafter_sequences(s.lm(), s.train_prompts, config.data.max_new_tokens,
                                        progress_bar("data", s.train_prompts.size(), config));
  s.drafter = make_drafter(s.lm(), config.drafter, ByteTokenizer::kMask, config.seed + 23);
  const bool teacher = config.drafter.loss.kind != "ce";
  TargetFeatures features = compute_target_features(s.lm(), s.train_seqs, s.target_layers(),
                                                    teacher, ByteTokenizer::kPad);
  s.data =
      DrafterTrainData{std::make_shared<InMemoryFeatureSource>(s.train_seqs, std::move(features)),
                       s.data_fingerprint};
  s.data_seconds = seconds_since(t0);
  say(config, "drafter data: " + std::to_string(s.train_seqs.size()) + " target generations, " +
                  seconds_text(s.data_seconds));
}

// Stage 6: drafter training, resumed from the checkpoint check_resume chose.
void train_drafter(RunState& s) {
  const TrainConfig& config = s.config;
  DrafterTrainer trainer(*s.drafter, config, s.data);
  if (!s.resume.path.empty()) {
    trainer.load_checkpoint(s.resume.path);
    say(config, "resumed from " + s.resume.path + " at step " + std::to_string(trainer.step()));
    // Note [Resume and the schedule], drafter_checkpoints.h.
    const std::string schedule =
        schedule_change_line(config.drafter.optim, s.resume.saved_steps, trainer.step());
    if (!schedule.empty()) warn(schedule);
    // Checkpoints after this one (skipped as damaged, or later than the one --resume-from
    // named) go when this run has saved its first checkpoint, not before.
    trainer.replace_checkpoints_after(trainer.step());
  } else if (!config.resume) {
    // --fresh: the earlier run's checkpoints go when this run has saved its first one,
    // not before (a fresh run that fails early leaves them).
    trainer.replace_checkpoints_after(-1);
  }
  s.first_step = trainer.step();
  s.log.drop_after("drafter", s.first_step);  // MetricsLog::drop_after: each step once, this run's
  if (s.first_step >= config.drafter.optim.steps) {
    say(config, "drafter: the checkpoint is at step " + std::to_string(s.first_step) +
                    ", drafter.optim.steps is " + std::to_string(config.drafter.optim.steps) +
                    ": nothing to train (raise steps, or --fresh)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  s.train_tokens_per_s = trainer.run(&s.log);
  s.drafter_seconds = seconds_since(t0);
  s.final_step = trainer.step();
  s.drafter->eval();
}

// Stage 7 of an offline run (Note [Offline runs], offline_run.h): per-slot accuracy on the
// held-out samples; no decoding.
void evaluate_offline(RunState& s) {
  s.eval_block = s.config.drafter.block_size;
  s.eval_skipped = "speculative decoding (offline features hold no prompts to decode)";
  if (s.offline_held) {
    say(s.config, "evaluation: per-slot accuracy on " +
                      std::to_string(s.offline_held->sequences().size()) +
                      " held-out feature samples; speculative decoding skipped (offline)");
    s.slots = held_out_slot_metrics(*s.drafter, *s.offline_held, s.config.drafter);
  } else {
    s.slots = SlotMetrics(s.config.drafter.block_size);
    s.eval_skipped += " and per-slot accuracy (fewer than 4 samples: none held out)";
    say(s.config, "evaluation: skipped " + s.eval_skipped);
  }
}

// Stage 7: evaluation on held-out prompts: per-slot accuracy, then speculative decoding
// against target-only greedy decoding.
void evaluate_drafter(RunState& s) {
  const TrainConfig& config = s.config;
  const auto t0 = std::chrono::steady_clock::now();
  s.eval_block = config.eval.block_size > 0 ? config.eval.block_size : config.drafter.block_size;
  if (s.offline) {
    evaluate_offline(s);
    s.eval_seconds = seconds_since(t0);
    return;
  }
  say(config, "evaluation: per-slot accuracy on " + std::to_string(s.accuracy_prompts.size()) +
                  " held-out target generations");
  std::vector<DrafterSequence> held =
      make_drafter_sequences(s.lm(), s.accuracy_prompts, config.data.max_new_tokens,
                             progress_bar("held-out", s.accuracy_prompts.size(), config));
  TargetFeatures held_features =
      compute_target_features(s.lm(), held, s.target_layers(), false, ByteTokenizer::kPad);
  InMemoryFeatureSource held_source(std::move(held), std::move(held_features));
  s.slots = held_out_slot_metrics(*s.drafter, held_source, config.drafter);
  DFlashBlockDrafter block_drafter(*s.drafter);
  for (const auto& p : s.eval_prompts) s.eval_prompt_ids.push_back(s.tok.encode(p, {.bos = true}));
  say(config, "speculative decoding of " + std::to_string(s.eval_prompts.size()) +
                  " held-out prompts, block " + std::to_string(s.eval_block));
  // Note [Decoding threads]: a decoding step is a few hundred small ops (one to eight rows
  // each); on two cores shared with other work, waking a second thread for the verify's
  // GEMMs costs more than it saves, and it would tilt the comparison (one-token greedy
  // steps stay below the threading threshold, verify steps do not). Both decoders run
  // with eval.threads threads (1 by default), training keeps its own count. The decoders
  // run back to back prompt by prompt in each of eval.timing_repeats passes, and the
  // median over the passes counts, with its spread (Note [Timing noise]), so a burst of
  // load from other processes does not land on one decoder only.
  const int training_threads = get_num_threads();
  if (config.eval.threads > 0) set_num_threads(static_cast<int>(config.eval.threads));
  s.spec = evaluate_speculative(
      s.lm(), block_drafter, s.eval_prompt_ids,
      {.block_size = s.eval_block,
       .max_new_tokens = config.eval.max_new_tokens,
       .repeats = config.eval.timing_repeats,
       .throw_on_mismatch = false,
       .on_progress =
           progress_bar("decoding", s.eval_prompts.size() * config.eval.timing_repeats, config)});
  set_num_threads(training_threads);
  s.eval_seconds = seconds_since(t0);
  say(config, "evaluation: " + seconds_text(s.eval_seconds));
}

// Stage 8: the memory story, one drafter step per head-loss path at two shapes.
void measure_memory(RunState& s) {
  const TrainConfig& config = s.config;
  if (!config.memory.enabled) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::string trace_dir;
  if (!config.memory.trace_dir.empty()) {
    trace_dir = config.run_dir + "/" + config.memory.trace_dir;
    std::filesystem::create_directories(trace_dir);
  }
  const nn::Qwen3Config& tc = s.lm().config();
  const nn::Qwen3Config& dl = s.drafter->config().layers;  // the drafter's own heads
  MemoryShape toy{"toy",
                  tc.vocab_size,
                  tc.hidden_size,
                  dl.num_heads,
                  dl.num_kv_heads,
                  dl.head_dim,
                  config.drafter.intermediate_size,
                  config.drafter.num_layers,
                  static_cast<int64_t>(s.target_layers().size()),
                  s.data.source->seq_len(),
                  config.drafter.max_anchors,
                  config.drafter.block_size,
                  config.drafter.optim.batch_size};
  const MemoryConfig& m = config.memory;
  const int64_t heads = std::max<int64_t>(1, m.large_hidden / 64);
  MemoryShape large{"large_vocab",
                    m.large_vocab,
                    m.large_hidden,
                    heads,
                    std::max<int64_t>(1, heads / 4),
                    64,
                    3 * m.large_hidden,
                    1,
                    3,
                    m.large_seq_len,
                    m.large_anchors,
                    m.large_block_size,
                    1};
  for (MemoryShape* shape : {&toy, &large})
    set_chunk(*shape, config.drafter);  // Note [The drafter's chunk]
  for (const MemoryShape& shape : {toy, large}) {
    say(config, "memory: one drafter step per head-loss path at the " + shape.name + " config");
    s.memory.push_back(measure_drafter_step_memory(shape, trace_dir, config.seed + 31, s.device));
  }
  say(config, "memory: " + seconds_text(seconds_since(t0)));
}

// Stage 9: the summary, returned and written to run_dir/summary.json.
nlohmann::json write_summary(RunState& s) {
  const TrainConfig& config = s.config;
  const SpeculativeReport& spec = s.spec;
  nlohmann::json summary;
  summary["tau"] = spec.tau;
  summary["speedup"] = spec.speedup;
  summary["lossless"] = spec.lossless;
  summary["eval_block_size"] = s.eval_block;
  summary["drafter_block_size"] = config.drafter.block_size;
  summary["identical"] = spec.identical;
  summary["tie_divergences"] = spec.tie_divergences;
  summary["mismatch"] = spec.mismatch;
  summary["target_tokens_per_s"] = spec.greedy_tokens_per_second;
  summary["speculative_tokens_per_s"] = spec.speculative_tokens_per_second;
  summary["ceiling_speedup"] = spec.ceiling_speedup;
  // Note [Timing noise], speculative_decoding.h: the spread over eval.timing_repeats.
  summary["speedup_spread"] = spec.json()["speedup_spread"];
  summary["ceiling_spread"] = spec.json()["ceiling_spread"];
  summary["timing_repeats"] = spec.repeats;
  summary["timing_noisy"] = spec.timing_noisy;
  summary["speculative"] = spec.json();
  if (!s.eval_skipped.empty()) summary["evaluation_skipped"] = s.eval_skipped;
  summary["features"] = s.data.source->describe();
  if (!s.eval_prompt_ids.empty()) {
    const std::vector<int64_t> sample(s.eval_prompt_ids[0].begin(), s.eval_prompt_ids[0].end());
    const Generation g = generate(s.lm(), sample, {.max_new_tokens = config.eval.max_new_tokens});
    summary["sample"] = {{"prompt", printable(s.eval_prompts[0])},
                         {"target_greedy", printable(s.tok.decode(g.new_tokens()))}};
  }
  summary["per_slot_accuracy"] = s.slots.accuracy();
  summary["expected_acceptance_length"] = s.slots.expected_acceptance_length();
  summary["measured_acceptance_length"] = s.slots.mean_acceptance_length();
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& r : s.memory) {
    nlohmann::json p = nlohmann::json::object();
    for (const auto& pm : r.paths)
      p[pm.path] = pm.oom_phase.empty() ? nlohmann::json(pm.step_peak) : nlohmann::json();
    peaks[r.shape.name] = p;
  }
  summary["peak_bytes"] = peaks;
  nlohmann::json mem = nlohmann::json::array();
  for (const auto& r : s.memory) mem.push_back(to_json(r));
  summary["memory"] = mem;
  summary["memory_table"] = memory_table(s.memory);
  summary["drafter_train_tokens_per_s"] = s.train_tokens_per_s;
  summary["drafter_steps"] = {{"resumed_at", s.first_step},
                              {"trained", s.final_step - s.first_step},
                              {"final", s.final_step}};
  summary["target_source"] = s.target.source;
  summary["seconds"] = {{"target", s.target.seconds},
                        {"drafter_data", s.data_seconds},
                        {"drafter_training", s.drafter_seconds},
                        {"evaluation", s.eval_seconds},
                        {"total", seconds_since(s.start)}};
  summary["peak_allocated_bytes"] = allocator_for(kCPU).stats().allocated_bytes.peak;
  summary["device"] = s.device.str();
  if (backend_for(s.device).capabilities().own_memory) {
    summary["device_peak_allocated_bytes"] = allocator_for(s.device).stats().allocated_bytes.peak;
  }
  summary["config"] = config.to_json();
  write_file_atomically(config.run_dir + "/summary.json", summary.dump(2) + "\n", "the summary");
  s.log.write({{"phase", "summary"}, {"tau", spec.tau}, {"speedup", spec.speedup}});
  return summary;
}

// Between the stages after training: a stop signal that came during a stage that does
// not check it ends the run here (the drafter's state is saved at its last checkpoint).
void stop_if_asked(const RunState& s) {
  if (stop_agreed()) throw Interrupted("drafter", s.final_step);
}

}  // namespace

nlohmann::json run_pipeline(const TrainConfig& config, const PipelineOptions& options) {
  config.validate();
  if (config.features.source == "synthetic") return run_synthetic_pipeline(config, options);
  RunState s(config, config.compute_device());
  check_memory_chunk(config, s.device);  // a chunk budget too small for the large config fails now
  StopSignals signals;  // SIGINT/SIGTERM: finish the step, save, stop (stop_signal.h)
  warn_about_config(config);
  lock_run_directory(s);
  if (config.features.source == "offline") {
    open_offline_features(s);
  } else {
    read_corpus(s);
  }
  check_resume(s, options);
  prepare_run_directory(s);
  obtain_target_model(s);
  make_drafter_data(s);
  train_drafter(s);
  stop_if_asked(s);
  evaluate_drafter(s);
  stop_if_asked(s);
  measure_memory(s);
  return write_summary(s);
}

}  // namespace cg::train
