// Why this file exists: the main job's stages in order (pipeline.h; its summary as text is
// summary_text.cpp; the first stages and what the stages share: pipeline_setup.cpp and
// pipeline_stages.h).
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
#include "core/json_input.h"
#include "core/memory_trace.h"
#include "ops/index_ops.h"
#include "ops/shape_ops.h"
#include "ops/threads.h"
#include "train/corpus.h"
#include "train/data_parallel.h"
#include "train/dflash_block_drafter.h"
#include "train/drafter_checkpoints.h"
#include "train/drafter_data.h"
#include "train/drafter_export.h"
#include "train/drafter_model.h"
#include "train/drafter_trainer.h"
#include "train/error_context.h"
#include "train/eval_inputs.h"
#include "train/fingerprint.h"
#include "train/generate.h"
#include "train/in_memory_features.h"
#include "train/memory_report.h"
#include "train/offline_run.h"
#include "train/pipeline_stages.h"
#include "train/progress.h"
#include "train/run_lock.h"
#include "train/speculative_decoding.h"
#include "train/stop_signal.h"
#include "train/synthetic_pipeline.h"
#include "train/target_lm.h"
#include "train/tokenizer.h"

namespace cg::train {
namespace {

using namespace pipeline_stages;

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
  s.train_seqs = make_drafter_sequences(
      s.lm(), s.train_prompts, config.data.max_new_tokens,
      progress_bar("data", s.train_prompts.size(), config,
                   std::string("interrupted while making the drafter's data (the target's "
                               "continuations); ") +
                       (config.target.checkpoint.empty()
                            ? "the target is kept in the run directory, the data is not"
                            : "the data is not kept (the target is read from target.checkpoint "
                              "again)") +
                       ": run the same command to make it again and train"));
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
  if (s.resume.path.empty() && !config.drafter.init_from.empty()) {
    load_public_drafter(*s.drafter, public_drafter_info(config), config.drafter.init_from);
    say(config, "drafter: weights from " + config.drafter.init_from);
  }
  // Note [Export uses what training used], drafter_export.h.
  s.data.target_record = run_target_record(config).dump();
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
  if (const int64_t n = trainer.drop_replaced_checkpoints(); n > 0) {
    say(config, "drafter: removed " + std::to_string(n) +
                    " checkpoint(s) of the run this one replaced (drafter.checkpoint_every -1: "
                    "this run saved none)");
  }
  if (const std::string note = trainer.unsaved_steps_note(s.first_step); !note.empty()) warn(note);
  s.final_step = trainer.step();
  s.drafter->eval();
}

// What a stop signal during the evaluation (or after the training's last step) says: the
// training is complete, and the same command evaluates it without training a step again
// (an outside tester was told "drafter training: interrupted at step 30" after step 30 of
// 30, once the evaluation it had asked to stop had run to its end).
std::string interrupted_evaluation(const RunState& s) {
  const bool saved = s.config.drafter.checkpoint_every >= 0;
  return "interrupted in the evaluation stage; the drafter's training is complete (step " +
         std::to_string(s.final_step) +
         (saved ? ", saved): run the same command to evaluate it and write the summary (no "
                  "step is trained again)"
                : ", not saved: drafter.checkpoint_every is -1): the same command trains it "
                  "again");
}

// Stage 7 of an offline run (Note [Offline runs], offline_run.h): per-slot accuracy on the
// held-out samples; no decoding.
void evaluate_offline(RunState& s) {
  s.eval_block = s.config.drafter.block_size;
  s.eval_skipped = s.config.features.source == "target"
                       ? "speculative decoding (run `chunkgrad eval` on the exported drafter)"
                       : "speculative decoding (offline features hold no prompts to decode)";
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
  std::vector<DrafterSequence> held = make_drafter_sequences(
      s.lm(), s.accuracy_prompts, config.data.max_new_tokens,
      progress_bar("held-out", s.accuracy_prompts.size(), config, interrupted_evaluation(s)));
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
       .on_progress = progress_bar("decoding", s.eval_prompts.size() * config.eval.timing_repeats,
                                   config, interrupted_evaluation(s))});
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
  if (!s.eval_skipped.empty()) {
    // No decoding ran: its figures are null, not zeros a reader could take for results.
    summary["evaluation_skipped"] = s.eval_skipped;
    for (const char* key :
         {"tau", "speedup", "lossless", "identical", "tie_divergences", "mismatch",
          "target_tokens_per_s", "speculative_tokens_per_s", "ceiling_speedup", "speedup_spread",
          "ceiling_spread", "timing_noisy", "speculative"})
      summary[key] = nullptr;
  }
  summary["features"] = s.data.source->describe();
  if (!s.eval_prompt_ids.empty()) {
    const std::vector<int64_t> sample(s.eval_prompt_ids[0].begin(), s.eval_prompt_ids[0].end());
    const Generation g = generate(s.lm(), sample, {.max_new_tokens = config.eval.max_new_tokens});
    summary["sample"] = {{"prompt", printable(s.eval_prompts[0])},
                         {"target_greedy", printable(s.tok.decode_for_display(g.new_tokens()))}};
  }
  s.slots.write_to(summary);
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
  s.log.write({{"phase", "summary"}, {"tau", summary["tau"]}, {"speedup", summary["speedup"]}});
  return summary;
}

// Between the stages after training: a stop signal that came during a stage that does
// not check it ends the run here (the drafter's state is saved at its last checkpoint,
// unless drafter.checkpoint_every is -1).
void stop_if_asked(const RunState& s) {
  if (!stop_agreed()) return;
  if (s.final_step >= s.config.drafter.optim.steps)  // (training is done: say so)
    throw Interrupted::with_message("evaluation", s.final_step, interrupted_evaluation(s));
  throw Interrupted("drafter", s.final_step, s.config.drafter.checkpoint_every >= 0);
}

// drafter.init_from is a drafter folder eval would take (an outside tester trained from one
// whose two block_size fields disagreed, and from model_type "llama"): its config.json
// passes eval's reader before the run compares it field by field with its own drafter.
void check_init_from(const std::string& dir) {
  check_public_drafter_folder(dir);
  const std::string where = "drafter.init_from '" + dir + "'";
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  (void)public_drafter_from_config(
      parse_untrusted_json(read_text_file(file, where + " config.json"), where + " config.json"),
      where);
}

}  // namespace

nlohmann::json run_pipeline(const TrainConfig& config, const PipelineOptions& options) {
  config.validate();
  if (!config.drafter.init_from.empty()) check_init_from(config.drafter.init_from);
  if (config.features.source == "synthetic") return run_synthetic_pipeline(config, options);
  // Data parallel (docs/data_parallel.md): every rank opens the features and trains; rank 0
  // alone locks and writes the run directory, evaluates, measures and writes the summary.
  dist::Communicator* comm = options.comm;
  const bool rank0 = comm == nullptr || comm->rank() == 0;
  CG_CHECK(comm == nullptr || comm->world_size() == 1 || config.features.source != "online",
           "data-parallel training (", comm ? comm->world_size() : 1,
           " ranks) needs features made without training a target in each process: "
           "features.source online trains the target and generates the drafter's data in one "
           "process; run `chunkgrad features` first and train from the folder (--features DIR), "
           "or use features.source target or synthetic (docs/data_parallel.md)");
  RunState s(config, config.compute_device());
  check_memory_chunk(config, s.device);  // a chunk budget too small for the large config fails now
  // SIGINT/SIGTERM: finish the step, save (unless checkpoint_every is -1), stop (stop_signal.h)
  StopSignals signals(config.drafter.checkpoint_every >= 0);
  warn_about_config(config);
  // The toy target's drafter follows from the config alone: a drafter.* value it cannot
  // be built with (num_kv_heads 3 for 2 heads, a MASK id outside the vocabulary, the 27B
  // layout's hidden size on the toy target) fails now, not after the target has trained.
  if (config.features.source == "online") {
    check_online_target_memory(config, s.device);  // before the target is made
    // The toy data is bytes, BOS, EOS and PAD (0 .. 258): as the MASK, any of them would
    // make a masked slot read like a real token. The one id left is the byte tokenizer's own.
    CG_CHECK(
        config.drafter.mask_token_id < 0 || config.drafter.mask_token_id >= ByteTokenizer::kMask,
        "train config: drafter.mask_token_id is ", config.drafter.mask_token_id,
        ", a token of the toy target's data (bytes, BOS, EOS and PAD: 0 .. ",
        ByteTokenizer::kMask - 1, "); its MASK is the byte tokenizer's ", ByteTokenizer::kMask,
        ": leave drafter.mask_token_id at -1");
    check_run_drafter(config, run_target_architecture(config), ByteTokenizer::kMask, s.device);
  }
  // The configs first: a rank started with another one would otherwise fail its own resume
  // check alone (Note [Ranks started alike], Note [Failing together]).
  check_ranks_started_alike(comm, config, -1);
  if (rank0) lock_run_directory(s);
  if (config.features.source == "offline") {
    open_offline_features(s);
  } else if (config.features.source == "target") {
    open_target_features(s, options);
  } else {
    read_corpus(s);
  }
  // The drafter on the target just opened, checked before the run directory is written.
  if (s.offline) check_run_drafter(config, s.lm().config(), ByteTokenizer::kMask, s.device);
  run_on_every_rank(comm, [&] { check_resume(s, options); });  // Note [Failing together]
  // Every rank has chosen before rank 0 writes, and chose alike, from the same data bytes
  // (Note [Ranks started alike]).
  check_ranks_started_alike(comm, config, s.resume.step, s.data_fingerprint);
  if (rank0) {
    prepare_run_directory(s);
  } else if (config.threads > 0) {
    set_num_threads(static_cast<int>(config.threads));  // as prepare_run_directory does
  }
  obtain_target_model(s);
  try {
    CategoryGuard inputs(MemoryCategory::input);  // the feature store the steps read
    make_drafter_data(s);
  } catch (const Error&) {  // error_context.h
    rethrow_with_context("making the drafter's data (the target's continuations and features): ");
  }
  s.data.comm = comm;
  train_drafter(s);
  stop_if_asked(s);
  if (!rank0) return nlohmann::json::object();  // rank 0 evaluates and writes the summary
  try {
    evaluate_drafter(s);
  } catch (const Error&) {  // error_context.h: an out-of-memory here named no phase
    rethrow_with_context("in the held-out evaluation after drafter step " +
                         std::to_string(s.final_step) + ": ");
  }
  stop_if_asked(s);
  measure_memory(s);
  return write_summary(s);
}

}  // namespace cg::train
