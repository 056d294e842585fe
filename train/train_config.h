// Why this file exists: everything `chunkgrad train` does is set by one JSON file, and a
// typo in it must be an error, not a silently ignored default. TrainConfig holds every
// field with its default (the toy run); from_json refuses unknown fields, wrong types and
// out-of-range values, naming the field ("drafter.block_size: must be >= 2, got 1").
// docs/train_config.md documents each field; configs/toy.json is the default file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "ops/loss_config.h"

namespace cg::train {

struct CorpusConfig {
  std::string path;       // a UTF-8 text file; "" = the generated corpus
  int64_t lines = 20000;  // generated corpus: number of lines
  uint64_t seed = 7;      // generated corpus: its seed (eval prompts use seed + 1)
};

struct OptimConfig {
  int64_t steps = 100;
  int64_t batch_size = 8;  // sequences per micro-batch
  int64_t grad_accum = 1;  // micro-batches per optimiser step
  double lr = 3e-3;
  double warmup_ratio = 0.04;  // linear warmup over this fraction of the steps
  double min_lr_ratio = 0.1;   // cosine decays to lr * this
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.0;
  double grad_clip = 1.0;  // max global grad norm; 0 = no clipping
};

struct TargetConfig {
  std::string checkpoint;  // a safetensors file/folder to load instead of training ("" = train)
  std::string hf_config;   // its config.json (or its folder) for a Hugging Face checkpoint
  int64_t hidden_size = 64, num_layers = 8, num_heads = 2, num_kv_heads = 1, head_dim = 32;
  int64_t intermediate_size = 192;
  double rope_theta = 10000.0;
  int64_t seq_len = 128;  // training window (bytes)
  OptimConfig optim{.steps = 400, .batch_size = 16, .lr = 4e-3};
};

// The drafter's loss. kind is a loss kind's short or long name (ops/loss_config.h: ce,
// kl, rkl, soft_ce, ...) or "mix", which existing configs use: forward KL with
// mix_ce_weight of hard CE, i.e. kind "kl" with ce_weight = mix_ce_weight.
struct LossSpec {
  std::string kind = "ce";
  double ce_weight = 0.0;      // teacher kinds: ce_weight * CE + (1 - ce_weight) * teacher loss
  double mix_ce_weight = 0.5;  // "mix" only: its ce_weight
  double temperature = 1.0;    // teacher kinds: teacher temperature

  LossKind loss_kind() const;     // "mix" -> forward_kl; throws on an unknown name
  double hard_ce_weight() const;  // the CE weight the kind runs with (0 for ce itself)
};

struct DrafterConfig {
  int64_t num_layers = 1;
  int64_t intermediate_size = 192;
  // The drafter's own attention sizes, RoPE and norm eps (the published 27B-class drafter:
  // 32 x 128 query heads at hidden 5120); 0 = the target's value.
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  double rope_theta = 0;
  double rms_eps = 0;
  // Per layer "full_attention" | "sliding_attention" ([] = every layer full), and the
  // sliding layers' window W (docs/dflash_training.md).
  std::vector<std::string> layer_types;
  int64_t sliding_window = 0;
  int64_t mask_token_id = -1;  // the MASK token; -1 = the tokenizer's (train/tokenizer.h)
  // The target's sizes where there is no target model (features.source "synthetic"):
  // hidden_size (H, the drafter's width), vocab_size (V of the frozen embedding and
  // lm_head) and num_target_layers (L, for the layer-id rule). 0 = the target model's;
  // with a target model a non-zero value must equal it.
  int64_t hidden_size = 0, vocab_size = 0, num_target_layers = 0;
  int64_t num_target_features = 3;     // n of the public layer rule
  std::vector<int64_t> target_layers;  // explicit ids instead of the rule ([] = rule)
  int64_t block_size = 8;
  int64_t max_anchors = 16;  // anchors sampled per sequence per step
  double gamma = 4.0;        // slot weight exp(-(k-1)/gamma); 0 = all 1
  LossSpec loss;
  std::string head_loss_path = "fused";  // "naive" | "chunked" | "fused"
  // Rows per chunk of the chunked and fused paths; 0 = as many as the budget below holds.
  // 256: the memory report's chunk (Note [The drafter's chunk], drafter_step.h).
  int64_t head_loss_chunk_rows = 256;
  double head_loss_chunk_budget_mb = 1536;  // with chunk rows 0: the chunk's temporaries, MiB
  std::string dtype = "f32";                // compute dtype: "f32" | "bf16" (fp32 masters)
  // "none" | "layers": recompute each drafter layer in the backward instead of keeping its
  // activations (nn::ActivationCheckpointing); same gradients, less memory, more time.
  std::string activation_checkpointing = "none";
  // A drafter in the public DFlash layout (config.json + model.safetensors, docs/export.md)
  // whose weights a fresh run starts from instead of random ones ("" = random); its
  // config.json must match this drafter field by field. A resumed run ignores it.
  std::string init_from;
  int64_t checkpoint_every = 250;  // steps between checkpoints (0 = only the last, -1 = none)
  int64_t keep_checkpoints = 3;  // after each save, all but the newest this many go (0 = keep all)
  OptimConfig optim{.steps = 1000};
};

struct DataConfig {
  int64_t num_sequences = 256;  // target generations the drafter trains on
  int64_t max_new_tokens = 96;  // tokens generated per prompt
};

struct EvalConfig {
  int64_t prompts = 16;             // held-out prompts (another seed)
  int64_t max_new_tokens = 96;      // per prompt, both decoders
  int64_t block_size = 0;           // speculative decoding block (0 = drafter.block_size)
  int64_t accuracy_sequences = 32;  // sequences for per-slot accuracy (from held-out data)
  int64_t timing_repeats = 3;       // timed passes over the prompts; the speedup is their median
  int64_t threads = 1;              // CPU threads while decoding (both decoders); 0 = as training
};

struct MemoryConfig {
  bool enabled = true;
  int64_t large_vocab = 65536;       // the large-vocabulary config: V
  int64_t large_hidden = 512;        //                               H
  int64_t large_anchors = 64;        //                               anchors per step
  int64_t large_block_size = 16;     //                              block size
  int64_t large_seq_len = 1024;      //                               context length
  std::string trace_dir = "traces";  // inside the run dir; "" = no traces
};

// Where the drafter's target features come from (issue 19's feature stage;
// train/feature_source.h).
struct FeaturesConfig {
  // "online": the target runs in this process (trained or loaded, then its generations);
  // "offline": shards written by `chunkgrad features` in `dir` (no target training, no
  // data generation; evaluation without decoding); "synthetic": seeded features of a
  // learnable task and seeded frozen tables, no target model (train/synthetic_features.h;
  // the drafter's sizes from drafter.hidden_size, vocab_size, num_target_layers).
  // "target": a Hugging Face Qwen3 folder (`target`) runs in this process, frozen, and
  // computes each step's features from the samples of `data` (train/target_features.h).
  std::string source = "online";
  std::string dir;                // the offline folder (docs/feature_files.md)
  std::string target;             // source "target": the Hugging Face Qwen3 folder
  std::vector<std::string> data;  // source "target": JSONL files of samples
  std::string tokenizer;          // source "target": "" = the target folder's tokenizer.json
};

// Data-parallel training over the ranks of `mpirun -np N` (docs/data_parallel.md); a run
// without MPI is one rank and ignores this section except for its checks.
struct DistConfig {
  // "same_batch": the step's sequences are drawn once, as one process draws them, and
  // each rank trains its slice (drafter.optim.batch_size must be a multiple of the ranks);
  // "weak": each rank trains batch_size sequences of its own (N x the tokens per step: the
  // step of one process with batch_size x N).
  std::string mode = "same_batch";
  bool zero1 = false;       // optimizer state and fp32 masters sharded across the ranks
  double bucket_mb = 25;    // gradients all-reduced in buckets of about this many MiB (fp32)
  int64_t check_every = 0;  // compare a hash of the parameters across ranks every N steps
};

struct TrainConfig {
  std::string run_dir = "runs/toy";
  uint64_t seed = 1;
  int64_t threads = 0;  // 0 = the library's default (CHUNKGRAD_NUM_THREADS or cores)
  std::string device =
      kCPU.str();        // a name of core/device.h's table: where the models train and run
  bool resume = true;    // continue from run_dir's last drafter checkpoint if any
  bool progress = true;  // progress bar on stderr
  CorpusConfig corpus;
  TargetConfig target;
  DataConfig data;
  DrafterConfig drafter;
  EvalConfig eval;
  MemoryConfig memory;
  FeaturesConfig features;
  DistConfig dist;

  // Every field checked (ranges, known names); throws naming the first bad one.
  void validate() const;
  // resolve_device(device): the device, checked to be built in and present (a GPU on a
  // machine without one is an error naming the reason, e.g. the driver's); call before
  // any work.
  Device compute_device() const;
  nlohmann::json to_json() const;
  // Unknown fields, wrong types and bad values are errors naming the field.
  static TrainConfig from_json(const nlohmann::json& j);
  static TrainConfig from_file(const std::string& path);
  // The JSON of a config file, read and parsed (errors name the file), not yet checked:
  // what from_file reads, for a caller that changes it first (config_overrides.h).
  static nlohmann::json file_json(const std::string& path);
};

}  // namespace cg::train
