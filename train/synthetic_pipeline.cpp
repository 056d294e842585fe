// Why this file exists: the stages of a synthetic-features run (synthetic_pipeline.h).
#include "train/synthetic_pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "autograd/grad_mode.h"
#include "core/allocator_stats.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "train/data_parallel.h"
#include "train/drafter_checkpoints.h"
#include "train/drafter_export.h"
#include "train/drafter_model.h"
#include "train/drafter_step.h"
#include "train/drafter_trainer.h"
#include "train/error_context.h"
#include "train/flop_count.h"
#include "train/pipeline_stages.h"
#include "train/progress.h"
#include "train/run_lock.h"
#include "train/stop_signal.h"
#include "train/synthetic_features.h"
#include "train/target_lm.h"

namespace cg::train {
namespace {

using pipeline_stages::say;
using pipeline_stages::seconds_since;
using pipeline_stages::warn;

// The drafter's architecture without a target model: the target's sizes from drafter.*,
// MASK = drafter.mask_token_id or the vocabulary's last id.
nn::DFlashDrafterConfig synthetic_drafter_config(const TrainConfig& c) {
  return drafter_model_config(synthetic_target_architecture(c.drafter), c.drafter,
                              c.drafter.vocab_size - 1);
}

// What the host has available (MemAvailable of /proc/meminfo; free pages elsewhere).
int64_t host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return static_cast<int64_t>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGESIZE);
}

// "12.34 MiB (12939264 bytes)": a small need is not "0.0 GiB".
std::string bytes_text(int64_t bytes) {
  return format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

// The end of a refusal for a run on the host that needs `need` bytes: "" when it fits what
// the run may use -- MemAvailable (`host`, -1: read it), or the CPU allocator's limit
// (--memory-limit-mb) when that is lower -- else which of the two it does not fit, and
// what to change (`advice` for the host's memory). An outside tester's --memory-limit-mb 1
// was reported as "the host has 0.0 GiB available" on a host with 23 GiB.
std::string host_shortfall(int64_t need, int64_t host, const std::string& advice) {
  if (host < 0) host = host_available_bytes();
  const auto limit = static_cast<int64_t>(allocator_for(kCPU).memory_limit());
  if (need <= (limit > 0 ? std::min(host, limit) : host)) return "";
  if (limit > 0 && limit < host) {
    const int64_t mib = (need + (int64_t{1} << 20) - 1) >> 20;
    return "--memory-limit-mb caps the CPU allocator at " + bytes_text(limit) +
           "; raise --memory-limit-mb to at least " + std::to_string(mib) +
           " (or 0, no limit: the host has " + format_bytes(host) + " available)";
  }
  return "the host has " + bytes_text(host) + " available; " + advice;
}

// The data fingerprint saved with each checkpoint: the task is fixed by the config (seed,
// sizes), which the resume check compares already; this names the kind of data.
const char* kSyntheticFingerprint = R"({"synthetic_task":1})";

}  // namespace

int64_t synthetic_static_bytes(const TrainConfig& config) {
  const DrafterConfig& d = config.drafter;
  const int64_t params = synthetic_drafter_config(config).parameter_count();
  const int64_t bytes = d.dtype == "bf16" ? 2 : 4;
  const int64_t tables = 2 * d.vocab_size * d.hidden_size * bytes;
  const int64_t masters = d.dtype == "bf16" ? 4 * params : 0;
  return tables + params * bytes /* weights */ + params * bytes /* gradients */ + masters +
         8 * params /* AdamW moments */;
}

int64_t synthetic_memory_need(const TrainConfig& config, Device device) {
  const DrafterConfig& d = config.drafter;
  const int64_t rows = d.optim.batch_size * d.max_anchors * d.block_size;  // a micro-batch's
  return synthetic_static_bytes(config) + static_cast<int64_t>(drafter_head_loss_bytes(
                                              drafter_head_loss(d), d.vocab_size, d.hidden_size,
                                              parse_dtype(d.dtype), device, rows));
}

void check_synthetic_memory(const TrainConfig& config, Device device, int64_t available) {
  if (backend_for(device).capabilities().own_memory) return;  // the device allocator's to say
  const int64_t need = synthetic_memory_need(config, device);
  const std::string shortfall =
      host_shortfall(need, available,
                     "run it on a GPU (--device cuda) or shrink drafter.vocab_size, "
                     "hidden_size, num_layers or intermediate_size");
  CG_CHECK(shortfall.empty(), "train config: this synthetic run needs at least ", bytes_text(need),
           " on the ", device.str(),
           " before its first activation (the frozen embedding and lm_head, the drafter's "
           "weights and gradients, AdamW's masters and moments, the head loss's logits for "
           "one chunk) and ",
           shortfall);
}

void check_online_target_memory(const TrainConfig& config, Device device, int64_t available) {
  if (backend_for(device).capabilities().own_memory) return;  // the device allocator's to say
  const nn::Qwen3Config t = target_architecture(config.target);
  const int64_t params = t.vocab_size * t.hidden_size * (t.tie_embeddings ? 1 : 2) +
                         t.num_layers * t.layer_parameters() + t.hidden_size;
  const int64_t need = 16 * params;  // fp32 weights, gradients, AdamW's two moments
  const std::string shortfall =
      host_shortfall(need, available,
                     "shrink target.hidden_size, num_layers or intermediate_size, or train from "
                     "a target's features (--features, --target)");
  CG_CHECK(shortfall.empty(), "train config: the toy target (target.*: ", params,
           " parameters) needs at least ", bytes_text(need),
           " to train (fp32 weights, gradients and AdamW's moments) and ", shortfall);
}

nlohmann::json run_synthetic_pipeline(const TrainConfig& config, const PipelineOptions& options) {
  config.validate();
  CG_CHECK(config.features.source == "synthetic", "run_synthetic_pipeline: features.source is '",
           config.features.source, "'");
  const Device device = config.compute_device();
  const auto start = std::chrono::steady_clock::now();
  // Before anything is allocated or written: the drafter drafter.* describes, then its memory.
  check_run_drafter(config, synthetic_target_architecture(config.drafter),
                    config.drafter.vocab_size - 1, device);
  check_synthetic_memory(config, device);
  // SIGINT/SIGTERM: finish the step, save (unless checkpoint_every is -1), stop (stop_signal.h)
  StopSignals signals(config.drafter.checkpoint_every >= 0);
  // Data parallel (docs/data_parallel.md): every rank trains, rank 0 alone writes to the
  // run directory (Note [One lock per run], run_lock.h) and evaluates.
  dist::Communicator* comm = options.comm;
  const bool rank0 = comm == nullptr || comm->rank() == 0;
  // The configs first: a rank started with another one would otherwise fail its own resume
  // check alone (Note [Ranks started alike], Note [Failing together]).
  check_ranks_started_alike(comm, config, -1);
  if (rank0) pipeline_stages::warn_about_config(config);  // as run_pipeline does
  std::optional<RunLock> lock;
  if (rank0) {
    std::filesystem::create_directories(config.run_dir);
    lock.emplace(config.run_dir);
    pipeline_stages::remove_stale_temporaries(config);
  }
  // The resume decision before anything is written (as run_pipeline's check_resume); every
  // rank reads the same checkpoint (Note [World-size-free checkpoints], data_parallel.h).
  ResumeChoice resume;
  run_on_every_rank(comm, [&] {  // Note [Failing together]
    resume = choose_resume_checkpoint(config, kSyntheticFingerprint, options.resume_from);
  });
  // (warnings, as run_pipeline's: with or without --no-progress)
  for (const std::string& skipped : resume.skipped) {
    if (rank0) {
      warn("resume: " + skipped + "; skipped it, resuming from " + resume.path +
           " (the skipped one is removed " + pipeline_stages::replaced_checkpoints_go(config) +
           ")");
    }
  }
  // Every rank has chosen before rank 0 writes, and chose alike (Note [Ranks started alike]).
  check_ranks_started_alike(comm, config, resume.step);
  std::optional<MetricsLog> log;
  if (rank0) {
    std::filesystem::create_directories(config.run_dir + "/drafter");
    check_writable_dir(config.run_dir + "/drafter", "the drafter checkpoints");
    log.emplace(config.run_dir + "/metrics.jsonl");
    std::error_code ec;
    std::filesystem::remove(config.run_dir + "/summary.json", ec);
    write_file_atomically(config.run_dir + "/config.json", config.to_json().dump(2) + "\n",
                          "the run's config");
  }

  // The task and its frozen tables, then the drafter over them.
  const DrafterConfig& d = config.drafter;
  const nn::DFlashDrafterConfig dc = synthetic_drafter_config(config);
  SyntheticFeatureOptions o;
  o.vocab = d.vocab_size;
  o.hidden = d.hidden_size;
  o.feature_layers = static_cast<int64_t>(dc.target_layers.size());
  o.seq_len = config.data.max_new_tokens;
  o.num_samples = config.data.num_sequences;
  o.mask_token_id = dc.mask_token_id;
  o.seed = config.seed;
  o.dtype = d.dtype == "bf16" ? DType::bf16 : DType::f32;
  o.device = device;
  o.last_hidden = d.loss.loss_kind() != LossKind::cross_entropy;
  say(config, "features: synthetic, no target model: the frozen embedding and lm_head [" +
                  std::to_string(o.vocab) + ", " + std::to_string(o.hidden) + "] made on " +
                  device.str());
  auto source = std::make_shared<SyntheticFeatureSource>(o);
  say(config, "features: " + source->describe());
  auto drafter = make_drafter(synthetic_target_architecture(d), source->embed_weight(),
                              source->head_weight(), d, dc.mask_token_id, config.seed + 23,
                              /*init_on_device=*/true);
  say(config, "drafter: " + std::to_string(drafter->num_parameters()) + " parameters, " +
                  std::to_string(dc.layers.num_layers) + " layers, target layers " +
                  nlohmann::json(dc.target_layers).dump());

  if (resume.path.empty() && !d.init_from.empty()) {
    load_public_drafter(*drafter, public_drafter_info(config), d.init_from);
    say(config, "drafter: weights from " + d.init_from);
  }
  // Training, resumed from the checkpoint chosen above.
  DrafterTrainer trainer(*drafter, config,
                         DrafterTrainData{source, kSyntheticFingerprint, options.comm});
  if (comm != nullptr && comm->world_size() > 1) {
    say(config, "data parallel: " + std::to_string(comm->world_size()) + " ranks (" +
                    comm->backend_name() + "), dist.mode " + config.dist.mode);
  }
  if (!resume.path.empty()) {
    trainer.load_checkpoint(resume.path);
    say(config, "resumed from " + resume.path + " at step " + std::to_string(trainer.step()));
    // Note [Resume and the schedule], drafter_checkpoints.h.
    const std::string schedule =
        schedule_change_line(config.drafter.optim, resume.saved_steps, trainer.step());
    if (!schedule.empty() && rank0) warn(schedule);
    trainer.replace_checkpoints_after(trainer.step());  // as run_pipeline's train_drafter
  } else if (!config.resume) {
    trainer.replace_checkpoints_after(-1);
  }
  const int64_t first_step = trainer.step();
  if (log) log->drop_after("drafter", first_step);
  const auto t_train = std::chrono::steady_clock::now();
  const double tokens_per_s = trainer.run(log ? &*log : nullptr);
  const double train_seconds = seconds_since(t_train);
  if (const int64_t n = trainer.drop_replaced_checkpoints(); n > 0 && rank0) {
    say(config, "drafter: removed " + std::to_string(n) +
                    " checkpoint(s) of the run this one replaced (drafter.checkpoint_every -1: "
                    "this run saved none)");
  }
  if (const std::string note = trainer.unsaved_steps_note(first_step); !note.empty() && rank0)
    warn(note);
  const int64_t final_step = trainer.step();
  drafter->eval();
  if (stop_agreed()) throw Interrupted("drafter", final_step, d.checkpoint_every >= 0);
  if (!rank0) return nlohmann::json::object();  // rank 0 evaluates and writes the summary

  // Evaluation: held-out samples of the same task (another range of sample ids).
  const auto t_eval = std::chrono::steady_clock::now();
  say(config, "evaluation: per-slot accuracy on " + std::to_string(config.eval.accuracy_sequences) +
                  " held-out synthetic samples; speculative decoding skipped (no target model "
                  "to verify drafts)");
  SyntheticFeatureSource held(*source, int64_t{1} << 40, config.eval.accuracy_sequences);
  SlotMetrics slots;
  try {
    slots = held_out_slot_metrics(*drafter, held, d);
  } catch (const Error&) {  // error_context.h: an out-of-memory here named no phase
    rethrow_with_context("in the held-out evaluation after drafter step " +
                         std::to_string(final_step) + ": ");
  }

  nlohmann::json summary;
  summary["features"] = source->describe();
  summary["evaluation_skipped"] =
      "speculative decoding (features.source synthetic has no target model to verify drafts)";
  summary["eval_block_size"] = d.block_size;
  summary["drafter_block_size"] = d.block_size;
  summary["drafter_parameters"] = drafter->num_parameters();
  summary["step_tflop"] =
      drafter_step_flops(drafter_step_shape(dc, d, source->seq_len())).total() / 1e12;
  slots.write_to(summary);
  summary["drafter_train_tokens_per_s"] = tokens_per_s;
  summary["drafter_steps"] = {
      {"resumed_at", first_step}, {"trained", final_step - first_step}, {"final", final_step}};
  summary["seconds"] = {{"drafter_training", train_seconds},
                        {"evaluation", seconds_since(t_eval)},
                        {"total", seconds_since(start)}};
  summary["memory_skipped"] =
      "features.source synthetic: the memory report's toy and large shapes need a target; "
      "the training step's own peak is in metrics.jsonl (peak_allocated_bytes)";
  summary["peak_allocated_bytes"] = allocator_for(kCPU).stats().allocated_bytes.peak;
  summary["device"] = device.str();
  if (backend_for(device).capabilities().own_memory)
    summary["device_peak_allocated_bytes"] = allocator_for(device).stats().allocated_bytes.peak;
  summary["config"] = config.to_json();
  write_file_atomically(config.run_dir + "/summary.json", summary.dump(2) + "\n", "the summary");
  log->write({{"phase", "summary"},
              {"slot1_accuracy", slots.accuracy().size() > 1 ? slots.accuracy()[1] : 0.0}});
  return summary;
}

}  // namespace cg::train
