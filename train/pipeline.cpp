// Why this file exists: the main job's stages in order, and its summary (pipeline.h).
#include "train/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/allocator_stats.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "ops/index_ops.h"
#include "ops/shape_ops.h"
#include "ops/threads.h"
#include "train/corpus.h"
#include "train/dflash_drafter.h"
#include "train/drafter_data.h"
#include "train/drafter_trainer.h"
#include "train/memory_report.h"
#include "train/progress.h"
#include "train/speculative_decoding.h"
#include "train/target_lm.h"
#include "train/generate.h"
#include "train/tokenizer.h"

namespace cg::train {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void say(const TrainConfig& c, const std::string& line) {
  if (c.progress) {
    std::fprintf(stderr, "chunkgrad train: %s\n", line.c_str());
    std::fflush(stderr);
  }
}

// Per-slot accuracy with every candidate anchor of each held-out sequence (up to 256).
SlotMetrics slot_metrics(const nn::DFlashDrafter& drafter, const std::vector<DrafterSequence>& seqs,
                         const TargetFeatures& tf, int64_t block_size) {
  NoGradGuard no_grad;
  SlotMetrics m(block_size);
  LossConfig ce;
  ce.ignore_index = kIgnoreLabel;
  for (size_t i = 0; i < seqs.size(); ++i) {
    std::vector<int64_t> anchors = anchor_candidates(seqs[i].loss_mask);
    if (anchors.empty()) continue;
    if (anchors.size() > 256) anchors.resize(256);
    const int64_t n = static_cast<int64_t>(anchors.size());
    BlockBatch b = build_block_batch({&seqs[i]}, {anchors}, n, block_size, 0.0,
                                     drafter.config().mask_token_id, ByteTokenizer::kPad, tf.seq_len);
    const Tensor f = index_select(tf.features, 0, from_ints({static_cast<int64_t>(i)}, {1}, {.dtype = DType::i64, .device = tf.features.device()}));
    HeadLossResult r = drafter_loss(drafter, {&b, f, Tensor()}, ce, HeadLossPath::fused);
    const std::vector<double> am = r.argmax.to_vector();
    m.add(b, std::vector<int64_t>(am.begin(), am.end()));
  }
  return m;
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

std::vector<std::string> train_prompts(const TrainConfig& c, const std::string& text, int64_t count) {
  if (c.corpus.path.empty()) {
    std::vector<std::string> p;
    for (const auto& l : generate_corpus_lines(c.corpus.seed, count)) p.push_back(l.prompt);
    return p;
  }
  return prompts_from_text(text, count, 16, c.seed, PromptSplit::training);
}

std::vector<std::string> eval_prompts(const TrainConfig& c, const std::string& text, int64_t count) {
  if (c.corpus.path.empty()) {  // held out: another seed than the corpus and the drafter data
    std::vector<std::string> p;
    for (const auto& l : generate_corpus_lines(c.corpus.seed + 1000003, count)) p.push_back(l.prompt);
    return p;
  }
  return prompts_from_text(text, count, 16, c.seed + 1000003, PromptSplit::evaluation);
}

}  // namespace

nlohmann::json run_pipeline(const TrainConfig& config) {
  config.validate();
  const Device device = config.compute_device();
  const auto t_start = std::chrono::steady_clock::now();
  if (config.threads > 0) set_num_threads(static_cast<int>(config.threads));
  std::filesystem::create_directories(config.run_dir);
  MetricsLog log(config.run_dir + "/metrics.jsonl");
  if (config.memory.enabled && !config.memory.trace_dir.empty()) {
    // Made now, not at the memory stage: a path that cannot be a directory (a file called
    // "traces" in run_dir) fails before the minutes of training, not after them.
    const std::string dir = config.run_dir + "/" + config.memory.trace_dir;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    CG_CHECK(!ec && std::filesystem::is_directory(dir), "memory.trace_dir: cannot create the directory ", dir, ": ",
             ec ? ec.message() : std::string("a file is in the way"), "; give another trace_dir or \"\" for no traces");
  }
  ByteTokenizer tok;

  // 1. Corpus.
  const std::string text = config.corpus.path.empty()
                               ? corpus_text(generate_corpus_lines(config.corpus.seed, config.corpus.lines))
                               : read_corpus_file(config.corpus.path);
  const std::vector<int64_t> tokens = tok.encode(text);
  say(config, "corpus: " + std::to_string(tokens.size()) + " byte tokens (" +
                  (config.corpus.path.empty() ? std::string("generated") : config.corpus.path) + ")");

  // 2. Target.
  nlohmann::json fp = {{"target", config.to_json()["target"]}, {"corpus", config.to_json()["corpus"]},
                       {"seed", config.seed}, {"version", 1}};
  ProgressBar target_bar("target", config.target.optim.steps, config.progress);
  TargetResult target = obtain_target(config, tokens, fp.dump(), [&](int64_t step, int64_t, double loss, int64_t n) {
    target_bar.update(step, loss, n);
    log.write({{"phase", "target"}, {"step", step}, {"loss", loss}});
  });
  if (target.source == "trained") target_bar.finish();
  say(config, "target: " + target.source + " (" + std::to_string(target.lm->num_parameters()) +
                  " parameters, " + std::to_string(target.seconds) + " s)");
  const nn::Qwen3ForCausalLM& lm = *target.lm;

  // 3. Drafter data: the target's own continuations.
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<DrafterSequence> train_seqs = make_drafter_sequences(
      lm, train_prompts(config, text, config.data.num_sequences), config.data.max_new_tokens);
  auto drafter = make_drafter(lm, config.drafter, ByteTokenizer::kMask, config.seed + 23);
  const std::vector<int64_t>& layers = drafter->config().target_layers;
  const bool teacher = config.drafter.loss.kind != "ce";
  DrafterTrainData data{&train_seqs, compute_target_features(lm, train_seqs, layers, teacher, ByteTokenizer::kPad)};
  const double data_seconds = seconds_since(t0);
  say(config, "drafter data: " + std::to_string(train_seqs.size()) + " target generations, " +
                  std::to_string(data_seconds) + " s");

  // 4. Drafter training (resumed when the run directory has a checkpoint).
  DrafterTrainer trainer(*drafter, config, data);
  const std::string ckpt = config.resume ? trainer.latest_checkpoint() : "";
  if (!ckpt.empty()) {
    trainer.load_checkpoint(ckpt);
    say(config, "resumed from " + ckpt + " at step " + std::to_string(trainer.step()));
  }
  {  // after the resume check: a failed resume leaves the run directory as it was
    std::ofstream out(config.run_dir + "/config.json");
    out << config.to_json().dump(2) << "\n";
    CG_CHECK(out.good(), "cannot write ", config.run_dir, "/config.json");
  }
  if (!config.resume) {  // --fresh: the old run's checkpoints must not outlive it
    const int64_t removed = trainer.remove_checkpoints();
    if (removed > 0) say(config, "fresh: removed " + std::to_string(removed) + " checkpoints of the earlier run");
  }
  const int64_t first_step = trainer.step();
  log.drop_after("drafter", first_step);  // MetricsLog::drop_after: each step once, this run's
  if (first_step >= config.drafter.optim.steps) {
    say(config, "drafter: the checkpoint is at step " + std::to_string(first_step) + ", drafter.optim.steps is " +
                    std::to_string(config.drafter.optim.steps) + ": nothing to train (raise steps, or --fresh)");
  }
  t0 = std::chrono::steady_clock::now();
  const double train_tokens_per_s = trainer.run(&log);
  const double drafter_seconds = seconds_since(t0);
  drafter->eval();

  // 5. Evaluation on held-out prompts.
  t0 = std::chrono::steady_clock::now();
  const int64_t eval_block = config.eval.block_size > 0 ? config.eval.block_size : config.drafter.block_size;
  const std::vector<std::string> prompts = eval_prompts(config, text, config.eval.prompts);
  std::vector<std::string> acc_prompts = eval_prompts(config, text, config.eval.prompts + config.eval.accuracy_sequences);
  acc_prompts.erase(acc_prompts.begin(), acc_prompts.begin() + config.eval.prompts);
  const std::vector<DrafterSequence> held = make_drafter_sequences(lm, acc_prompts, config.data.max_new_tokens);
  const TargetFeatures held_features = compute_target_features(lm, held, layers, false, ByteTokenizer::kPad);
  const SlotMetrics slots = slot_metrics(*drafter, held, held_features, config.drafter.block_size);
  DFlashBlockDrafter block_drafter(*drafter);
  std::vector<std::vector<int64_t>> prompt_ids;
  for (const auto& p : prompts) prompt_ids.push_back(tok.encode(p, {.bos = true}));
  say(config, "speculative decoding of " + std::to_string(prompts.size()) + " held-out prompts, block " +
                  std::to_string(eval_block));
  // Note [Decoding threads]: a decoding step is a few hundred small ops (one to eight rows
  // each); on two cores shared with other work, waking a second thread for the verify's
  // GEMMs costs more than it saves, and it would tilt the comparison (one-token greedy
  // steps stay below the threading threshold, verify steps do not). Both decoders run
  // with eval.threads threads (1 by default), training keeps its own count. The decoders
  // alternate prompt by prompt and the fastest of eval.timing_repeats runs counts
  // (evaluate_speculative's repeats), so a burst of load from other processes does not
  // land on one decoder only.
  const int training_threads = get_num_threads();
  if (config.eval.threads > 0) set_num_threads(static_cast<int>(config.eval.threads));
  const SpeculativeReport spec = evaluate_speculative(
      lm, block_drafter, prompt_ids,
      {.block_size = eval_block, .max_new_tokens = config.eval.max_new_tokens,
       .repeats = config.eval.timing_repeats, .throw_on_mismatch = false});
  set_num_threads(training_threads);
  const double eval_seconds = seconds_since(t0);

  // 6. Memory story.
  std::vector<MemoryReport> memory;
  if (config.memory.enabled) {
    t0 = std::chrono::steady_clock::now();
    std::string trace_dir;
    if (!config.memory.trace_dir.empty()) {
      trace_dir = config.run_dir + "/" + config.memory.trace_dir;
      std::filesystem::create_directories(trace_dir);
    }
    const nn::Qwen3Config& tc = lm.config();
    MemoryShape toy{"toy", tc.vocab_size, tc.hidden_size, tc.num_heads, tc.num_kv_heads, tc.head_dim,
                    config.drafter.intermediate_size, config.drafter.num_layers,
                    static_cast<int64_t>(layers.size()), data.features.seq_len, config.drafter.max_anchors,
                    config.drafter.block_size, config.drafter.optim.batch_size, 256};
    const MemoryConfig& m = config.memory;
    const int64_t heads = std::max<int64_t>(1, m.large_hidden / 64);
    MemoryShape large{"large_vocab", m.large_vocab, m.large_hidden, heads, std::max<int64_t>(1, heads / 4),
                      64, 3 * m.large_hidden, 1, 3, m.large_seq_len, m.large_anchors,
                      m.large_block_size, 1, 256};
    for (const MemoryShape& s : {toy, large}) {
      say(config, "memory: one drafter step per head-loss path at the " + s.name + " config");
      memory.push_back(measure_drafter_step_memory(s, trace_dir, config.seed + 31, device));
    }
    say(config, "memory: " + std::to_string(seconds_since(t0)) + " s");
  }

  // 7. Summary.
  nlohmann::json summary;
  summary["tau"] = spec.tau;
  summary["speedup"] = spec.speedup;
  summary["lossless"] = spec.lossless;
  summary["eval_block_size"] = eval_block;
  summary["identical"] = spec.identical;
  summary["mismatch"] = spec.mismatch;
  summary["target_tokens_per_s"] = spec.greedy_tokens_per_second;
  summary["speculative_tokens_per_s"] = spec.speculative_tokens_per_second;
  summary["ceiling_speedup"] = spec.ceiling_speedup;
  summary["speculative"] = spec.json();
  {
    const std::vector<int64_t> sample(prompt_ids[0].begin(), prompt_ids[0].end());
    const Generation g = generate(lm, sample, {.max_new_tokens = config.eval.max_new_tokens});
    summary["sample"] = {{"prompt", printable(prompts[0])}, {"target_greedy", printable(tok.decode(g.new_tokens()))}};
  }
  summary["per_slot_accuracy"] = slots.accuracy();
  summary["expected_acceptance_length"] = slots.expected_acceptance_length();
  summary["measured_acceptance_length"] = slots.mean_acceptance_length();
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& r : memory) {
    nlohmann::json p = nlohmann::json::object();
    for (const auto& pm : r.paths) p[pm.path] = pm.oom_phase.empty() ? nlohmann::json(pm.step_peak) : nlohmann::json();
    peaks[r.shape.name] = p;
  }
  summary["peak_bytes"] = peaks;
  nlohmann::json mem = nlohmann::json::array();
  for (const auto& r : memory) mem.push_back(to_json(r));
  summary["memory"] = mem;
  summary["memory_table"] = memory_table(memory);
  summary["drafter_train_tokens_per_s"] = train_tokens_per_s;
  summary["drafter_steps"] = {{"resumed_at", first_step}, {"trained", trainer.step() - first_step},
                              {"final", trainer.step()}};
  summary["target_source"] = target.source;
  summary["seconds"] = {{"target", target.seconds}, {"drafter_data", data_seconds},
                        {"drafter_training", drafter_seconds}, {"evaluation", eval_seconds},
                        {"total", seconds_since(t_start)}};
  summary["peak_allocated_bytes"] = allocator_for(kCPU).stats().allocated_bytes.peak;
  summary["device"] = device.str();
  if (device.is_cuda()) summary["device_peak_allocated_bytes"] = allocator_for(device).stats().allocated_bytes.peak;
  summary["config"] = config.to_json();
  {
    std::ofstream out(config.run_dir + "/summary.json");
    out << summary.dump(2) << "\n";
    CG_CHECK(out.good(), "cannot write ", config.run_dir, "/summary.json");
  }
  log.write({{"phase", "summary"}, {"tau", spec.tau}, {"speedup", spec.speedup}});
  return summary;
}

std::string summary_text(const nlohmann::json& s) {
  std::ostringstream o;
  char line[256];
  std::snprintf(line, sizeof line, "speculative decoding (block %lld): tau %.2f tokens per target step, speedup %.2fx over target-only greedy (%s)\n",
                static_cast<long long>(s["eval_block_size"].get<int64_t>()), s["tau"].get<double>(),
                s["speedup"].get<double>(), s["lossless"].get<bool>() ? "lossless: identical tokens" : "NOT LOSSLESS");
  o << line;
  std::snprintf(line, sizeof line,
                "  target-only %.1f tok/s, speculative %.1f tok/s; a free, always-right drafter would give %.2fx\n",
                s["target_tokens_per_s"].get<double>(), s["speculative_tokens_per_s"].get<double>(),
                s["ceiling_speedup"].get<double>());
  o << line;
  o << "per-slot accuracy (slot 1..):";
  const auto acc = s["per_slot_accuracy"].get<std::vector<double>>();
  for (size_t k = 1; k < acc.size(); ++k) {
    std::snprintf(line, sizeof line, " %.3f", acc[k]);
    o << line;
  }
  std::snprintf(line, sizeof line, "\nexpected acceptance length %.2f (measured per block %.2f)\n",
                s["expected_acceptance_length"].get<double>(), s["measured_acceptance_length"].get<double>());
  o << line;
  const nlohmann::json& steps = s["drafter_steps"];
  if (steps["trained"].get<int64_t>() > 0) {
    std::snprintf(line, sizeof line, "drafter training: %lld steps, %.0f label tokens/s; total %.1f s\n",
                  static_cast<long long>(steps["trained"].get<int64_t>()), s["drafter_train_tokens_per_s"].get<double>(),
                  s["seconds"]["total"].get<double>());
  } else {  // resumed at or past the last step: there is no training speed to report
    std::snprintf(line, sizeof line, "drafter training: none (resumed at step %lld, the last); total %.1f s\n",
                  static_cast<long long>(steps["final"].get<int64_t>()), s["seconds"]["total"].get<double>());
  }
  o << line;
  if (s.contains("device") && s["device"] != "cpu") o << "device: " << s["device"].get<std::string>() << "\n";
  o << "memory of one drafter training step (caching allocator):\n" << s["memory_table"].get<std::string>();
  // The traces' HTML reports (timelines by category, the holders at the peak), when traced.
  if (s.contains("memory") && s["memory"].is_array()) {
    for (const auto& m : s["memory"]) {
      if (m.contains("report") && !m["report"].get<std::string>().empty()) {
        o << "memory timeline: " << m["report"].get<std::string>() << "\n";
      }
    }
  }
  return o.str();
}

}  // namespace cg::train
