// Why this file exists: reading, checking and writing TrainConfig (train_config.h). One
// list of fields (visit_fields) serves both directions, so the file a run writes and the
// file it reads cannot drift apart.
#include "train/train_config.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>

#include "core/backend.h"
#include "core/error.h"
#include "core/json_input.h"
#include "nn/dflash_drafter.h"
#include "ops/head_loss.h"

namespace cg::train {
namespace {

// Reads fields of one JSON object, remembering which it consumed; unknown() lists the rest.
struct Reader {
  const nlohmann::json& j;
  std::string path;  // "drafter." for messages
  std::set<std::string> seen;

  template <typename T>
  void field(const char* name, T& value) {
    seen.insert(name);
    auto it = j.find(name);
    if (it == j.end()) return;
    const std::string where = path + name;
    // An array's bad element by its index and value: "got an array of 5 values" did not say
    // which of [1.5, 2, 4, 5, 6] was wrong.
    std::string element;
    auto check_elements = [&](auto good) {
      for (size_t i = 0; i < it->size() && element.empty(); ++i) {
        if (!good((*it)[i]))
          element = "element " + std::to_string(i) + " is " + describe_json((*it)[i]);
      }
    };
    try {
      if constexpr (std::is_same_v<T, bool>) {
        CG_CHECK(it->is_boolean(), "must be true or false");
      } else if constexpr (std::is_same_v<T, std::string>) {
        CG_CHECK(it->is_string(), "must be a string");
        // ("nul\u0000x" as a run_dir became the folder "nul" and a cut-off lock error)
        CG_CHECK(it->template get_ref<const std::string&>().find('\0') == std::string::npos,
                 "must not contain a NUL character");
      } else if constexpr (std::is_floating_point_v<T>) {
        CG_CHECK(it->is_number(), "must be a number");
      } else if constexpr (std::is_integral_v<T>) {
        CG_CHECK(it->is_number_integer() || it->is_number_unsigned(), "must be an integer");
        // get<T>() would wrap silently: -1 into a uint64 seed of 18446744073709551615, and
        // 2^64 - 1 into an int64 of -1 ("steps: must be from 1 ..., got -1").
        if constexpr (std::is_unsigned_v<T>) {
          CG_CHECK(it->is_number_unsigned(), "must be a non-negative integer");
        } else {
          CG_CHECK(
              !it->is_number_unsigned() || it->template get<uint64_t>() <=
                                               static_cast<uint64_t>(std::numeric_limits<T>::max()),
              "must be an integer of at most ", std::numeric_limits<T>::max());
        }
      } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
        CG_CHECK(it->is_array(), "must be an array of strings");
        check_elements([](const nlohmann::json& e) {
          return e.is_string() &&
                 e.template get_ref<const std::string&>().find('\0') == std::string::npos;
        });
        CG_CHECK(element.empty(), "must be an array of strings without NUL characters");
      } else {
        CG_CHECK(it->is_array(), "must be an array of integers");
        check_elements([](const nlohmann::json& e) { return e.is_number_integer(); });
        CG_CHECK(element.empty(), "must be an array of integers");
      }
      value = it->template get<T>();
    } catch (const Error& e) {  // message(): one "(at ...)" in the line, not two
      CG_FAIL("train config: ", where, ": ", e.message(), ", got ",
              element.empty() ? describe_json(*it) : "an array whose " + element);
    }
  }
  template <typename F>
  void object(const char* name, F&& body) {
    seen.insert(name);
    auto it = j.find(name);
    if (it == j.end()) return;
    CG_CHECK(it->is_object(), "train config: ", path, name, ": must be an object, got ",
             describe_json(*it));
    Reader sub{*it, path + name + ".", {}};
    body(sub);
    sub.check_unknown();
  }
  void check_unknown() const {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (seen.count(it.key())) continue;
      std::string known;
      for (const auto& s : seen) known += (known.empty() ? "" : ", ") + s;
      // (control bytes shown as '?': a NUL or a newline in a key would cut the one error line)
      std::string key = path + it.key();
      for (char& c : key) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
      }
      CG_FAIL("train config: unknown field '", key, "' (known fields here: ", known,
              "; docs/train_config.md lists them all)");
    }
  }
};

// Writes fields into a JSON object.
struct Writer {
  nlohmann::json& j;
  template <typename T>
  void field(const char* name, T& value) {
    j[name] = value;
  }
  template <typename F>
  void object(const char* name, F&& body) {
    nlohmann::json sub = nlohmann::json::object();
    Writer w{sub};
    body(w);
    j[name] = sub;
  }
};

template <typename V>
void visit_optim(V& v, OptimConfig& o) {
  v.field("steps", o.steps);
  v.field("batch_size", o.batch_size);
  v.field("grad_accum", o.grad_accum);
  v.field("lr", o.lr);
  v.field("warmup_ratio", o.warmup_ratio);
  v.field("min_lr_ratio", o.min_lr_ratio);
  v.field("beta1", o.beta1);
  v.field("beta2", o.beta2);
  v.field("eps", o.eps);
  v.field("weight_decay", o.weight_decay);
  v.field("grad_clip", o.grad_clip);
}

template <typename V>
void visit_fields(V& v, TrainConfig& c) {
  v.field("run_dir", c.run_dir);
  v.field("seed", c.seed);
  v.field("threads", c.threads);
  v.field("device", c.device);
  v.field("resume", c.resume);
  v.field("progress", c.progress);
  v.object("corpus", [&](auto& s) {
    s.field("path", c.corpus.path);
    s.field("lines", c.corpus.lines);
    s.field("seed", c.corpus.seed);
  });
  v.object("target", [&](auto& s) {
    auto& t = c.target;
    s.field("checkpoint", t.checkpoint);
    s.field("hf_config", t.hf_config);
    s.field("hidden_size", t.hidden_size);
    s.field("num_layers", t.num_layers);
    s.field("num_heads", t.num_heads);
    s.field("num_kv_heads", t.num_kv_heads);
    s.field("head_dim", t.head_dim);
    s.field("intermediate_size", t.intermediate_size);
    s.field("rope_theta", t.rope_theta);
    s.field("seq_len", t.seq_len);
    s.object("optim", [&](auto& o) { visit_optim(o, t.optim); });
  });
  v.object("data", [&](auto& s) {
    s.field("num_sequences", c.data.num_sequences);
    s.field("max_new_tokens", c.data.max_new_tokens);
  });
  v.object("drafter", [&](auto& s) {
    auto& d = c.drafter;
    s.field("num_layers", d.num_layers);
    s.field("intermediate_size", d.intermediate_size);
    s.field("num_heads", d.num_heads);
    s.field("num_kv_heads", d.num_kv_heads);
    s.field("head_dim", d.head_dim);
    s.field("rope_theta", d.rope_theta);
    s.field("rms_eps", d.rms_eps);
    s.field("layer_types", d.layer_types);
    s.field("sliding_window", d.sliding_window);
    s.field("mask_token_id", d.mask_token_id);
    s.field("hidden_size", d.hidden_size);
    s.field("vocab_size", d.vocab_size);
    s.field("num_target_layers", d.num_target_layers);
    s.field("num_target_features", d.num_target_features);
    s.field("target_layers", d.target_layers);
    s.field("block_size", d.block_size);
    s.field("max_anchors", d.max_anchors);
    s.field("gamma", d.gamma);
    s.object("loss", [&](auto& l) {
      l.field("kind", d.loss.kind);
      l.field("ce_weight", d.loss.ce_weight);
      l.field("mix_ce_weight", d.loss.mix_ce_weight);
      l.field("temperature", d.loss.temperature);
    });
    s.field("head_loss_path", d.head_loss_path);
    s.field("head_loss_chunk_rows", d.head_loss_chunk_rows);
    s.field("head_loss_chunk_budget_mb", d.head_loss_chunk_budget_mb);
    s.field("dtype", d.dtype);
    s.field("activation_checkpointing", d.activation_checkpointing);
    s.field("init_from", d.init_from);
    s.field("checkpoint_every", d.checkpoint_every);
    s.field("keep_checkpoints", d.keep_checkpoints);
    s.object("optim", [&](auto& o) { visit_optim(o, d.optim); });
  });
  v.object("eval", [&](auto& s) {
    s.field("prompts", c.eval.prompts);
    s.field("max_new_tokens", c.eval.max_new_tokens);
    s.field("block_size", c.eval.block_size);
    s.field("accuracy_sequences", c.eval.accuracy_sequences);
    s.field("timing_repeats", c.eval.timing_repeats);
    s.field("threads", c.eval.threads);
  });
  v.object("memory", [&](auto& s) {
    auto& m = c.memory;
    s.field("enabled", m.enabled);
    s.field("large_vocab", m.large_vocab);
    s.field("large_hidden", m.large_hidden);
    s.field("large_anchors", m.large_anchors);
    s.field("large_block_size", m.large_block_size);
    s.field("large_seq_len", m.large_seq_len);
    s.field("trace_dir", m.trace_dir);
  });
  v.object("features", [&](auto& s) {
    s.field("source", c.features.source);
    s.field("dir", c.features.dir);
    s.field("target", c.features.target);
    s.field("data", c.features.data);
    s.field("tokenizer", c.features.tokenizer);
  });
  v.object("dist", [&](auto& s) {
    s.field("mode", c.dist.mode);
    s.field("zero1", c.dist.zero1);
    s.field("bucket_mb", c.dist.bucket_mb);
    s.field("check_every", c.dist.check_every);
  });
}

// The longest block, for training and for evaluation (docs/train_config.md).
constexpr int64_t kMaxBlockSize = 4096;

// A bound or value as people write it: 1048576 and 1000000000, not 1.04858e+06 and 1e+09.
std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

void in_range(const char* name, double v, double lo, double hi) {
  CG_CHECK(std::isfinite(v) && v >= lo && v <= hi, "train config: ", name, ": must be from ",
           number(lo), " to ", number(hi), ", got ", number(v));
}

void check_optim(const std::string& p, const OptimConfig& o) {
  in_range((p + "steps").c_str(), static_cast<double>(o.steps), 1, 1e9);
  in_range((p + "batch_size").c_str(), static_cast<double>(o.batch_size), 1, 1e6);
  in_range((p + "grad_accum").c_str(), static_cast<double>(o.grad_accum), 1, 1e6);
  in_range((p + "lr").c_str(), o.lr, 0, 10);
  in_range((p + "warmup_ratio").c_str(), o.warmup_ratio, 0, 1);
  in_range((p + "min_lr_ratio").c_str(), o.min_lr_ratio, 0, 1);
  in_range((p + "beta1").c_str(), o.beta1, 0, 0.999999);
  in_range((p + "beta2").c_str(), o.beta2, 0, 0.999999);
  in_range((p + "eps").c_str(), o.eps, 1e-30, 1);
  in_range((p + "weight_decay").c_str(), o.weight_decay, 0, 10);
  in_range((p + "grad_clip").c_str(), o.grad_clip, 0, 1e9);
}

// The drafter's own sizes (0 = the target's), its layer types and window.
void check_drafter_layout(const DrafterConfig& d) {
  in_range("drafter.num_heads", static_cast<double>(d.num_heads), 0, 1024);
  in_range("drafter.num_kv_heads", static_cast<double>(d.num_kv_heads), 0, 1024);
  in_range("drafter.head_dim", static_cast<double>(d.head_dim), 0, 4096);
  CG_CHECK(d.head_dim % 2 == 0,
           "train config: drafter.head_dim: must be even (RoPE rotates pairs), got ", d.head_dim);
  CG_CHECK(d.num_heads == 0 || d.num_kv_heads == 0 || d.num_heads % d.num_kv_heads == 0,
           "train config: drafter.num_heads ", d.num_heads, " must be a multiple of num_kv_heads ",
           d.num_kv_heads);
  CG_CHECK(d.rope_theta == 0 ||
               (std::isfinite(d.rope_theta) && d.rope_theta >= 1 && d.rope_theta <= 1e12),
           "train config: drafter.rope_theta: must be 0 (the target's) or from 1 to 1e12, got ",
           number(d.rope_theta));
  in_range("drafter.rms_eps", d.rms_eps, 0, 1);
  in_range("drafter.sliding_window", static_cast<double>(d.sliding_window), 0, 1 << 24);
  in_range("drafter.mask_token_id", static_cast<double>(d.mask_token_id), -1, 1 << 30);
  in_range("drafter.hidden_size", static_cast<double>(d.hidden_size), 0, 65536);
  in_range("drafter.vocab_size", static_cast<double>(d.vocab_size), 0, 1 << 30);
  in_range("drafter.num_target_layers", static_cast<double>(d.num_target_layers), 0, 1024);
  CG_CHECK(d.layer_types.empty() || static_cast<int64_t>(d.layer_types.size()) == d.num_layers,
           "train config: drafter.layer_types: has ", d.layer_types.size(), " entries for ",
           d.num_layers, " layers (drafter.num_layers); give one per layer, or [] for all full");
  bool slides = false;
  for (const std::string& t : d.layer_types) {
    CG_CHECK(t == "full_attention" || t == "sliding_attention",
             "train config: drafter.layer_types: unknown type '", t,
             "'; the types are full_attention and sliding_attention");
    slides = slides || t == "sliding_attention";
  }
  CG_CHECK(!slides || d.sliding_window > 0,
           "train config: drafter.sliding_window: sliding_attention layers need a window > 0, got ",
           d.sliding_window);
}

// What features.source synthetic needs: the target's sizes, no target checkpoint.
void check_synthetic_features(const TrainConfig& c) {
  if (c.features.source != "synthetic") return;
  const DrafterConfig& d = c.drafter;
  CG_CHECK(d.hidden_size > 0 && d.vocab_size > 0 && d.num_target_layers > 0,
           "train config: features.source synthetic has no target model: give the target's "
           "sizes as drafter.hidden_size, drafter.vocab_size and drafter.num_target_layers "
           "(got ",
           d.hidden_size, ", ", d.vocab_size, ", ", d.num_target_layers, ")");
  // 0 means "the target's", and there is no target: an outside tester's num_heads 0 was
  // taken as 1 and refused as "num_heads (1) must be a multiple of num_kv_heads (2)".
  CG_CHECK(d.num_heads > 0 && d.num_kv_heads > 0 && d.head_dim > 0,
           "train config: features.source synthetic has no target model whose attention sizes "
           "a 0 could take: give drafter.num_heads, drafter.num_kv_heads and drafter.head_dim "
           "(got ",
           d.num_heads, ", ", d.num_kv_heads, ", ", d.head_dim,
           "; the published 27B-class drafter: 32, 8, 128)");
  CG_CHECK(c.target.checkpoint.empty(),
           "train config: target.checkpoint: features.source synthetic uses no target; drop the "
           "checkpoint or use features.source online");
  CG_CHECK(d.mask_token_id < d.vocab_size, "train config: drafter.mask_token_id ", d.mask_token_id,
           " is not in the vocabulary (drafter.vocab_size ", d.vocab_size, ")");
  CG_CHECK(d.vocab_size >= 128,
           "train config: drafter.vocab_size: the synthetic task draws its tokens from 64 of "
           "them and needs at least 128, got ",
           d.vocab_size);
}

}  // namespace

void TrainConfig::validate() const {
  CG_CHECK(!run_dir.empty(), "train config: run_dir: must not be empty");
  in_range("threads", static_cast<double>(threads), 0, 1024);
  try {
    Device::parse(device);  // the name only: compute_device() checks it is present
  } catch (const Error& e) { CG_FAIL("train config: device: ", e.message()); }
  in_range("corpus.lines", static_cast<double>(corpus.lines), 1, 1e8);
  const TargetConfig& t = target;
  CG_CHECK(t.hf_config.empty() || !t.checkpoint.empty(),
           "train config: target.hf_config describes the model in "
           "target.checkpoint, which is empty; give the checkpoint too, or describe a target to "
           "train with "
           "target.hidden_size, num_layers, ...");
  in_range("target.hidden_size", static_cast<double>(t.hidden_size), 1, 65536);
  in_range("target.num_layers", static_cast<double>(t.num_layers), 1, 1024);
  in_range("target.num_heads", static_cast<double>(t.num_heads), 1, 1024);
  in_range("target.num_kv_heads", static_cast<double>(t.num_kv_heads), 1, 1024);
  in_range("target.head_dim", static_cast<double>(t.head_dim), 2, 4096);
  in_range("target.intermediate_size", static_cast<double>(t.intermediate_size), 1, 1 << 20);
  in_range("target.rope_theta", t.rope_theta, 1, 1e12);
  in_range("target.seq_len", static_cast<double>(t.seq_len), 2, 1 << 20);
  check_optim("target.optim.", t.optim);
  in_range("data.num_sequences", static_cast<double>(data.num_sequences), 1, 1e7);
  in_range("data.max_new_tokens", static_cast<double>(data.max_new_tokens), 2, 1 << 20);
  const DrafterConfig& d = drafter;
  CG_CHECK(d.block_size >= 2,
           "train config: drafter.block_size: must be >= 2 (the anchor and at "
           "least one predicted token), got ",
           d.block_size);
  in_range("drafter.block_size", static_cast<double>(d.block_size), 2, kMaxBlockSize);
  in_range("drafter.num_layers", static_cast<double>(d.num_layers), 1, 1024);
  in_range("drafter.intermediate_size", static_cast<double>(d.intermediate_size), 1, 1 << 20);
  in_range("drafter.num_target_features", static_cast<double>(d.num_target_features), 1, 1024);
  check_drafter_layout(d);
  in_range("drafter.max_anchors", static_cast<double>(d.max_anchors), 1, 1 << 20);
  // Anchor candidates lie in the generated part of a sequence: prompt + max_new_tokens
  // tokens, of which at most max_new_tokens - 1 have a successor inside it.
  // (Offline and target runs read their samples from files: data.max_new_tokens is unused.)
  CG_CHECK(features.source == "offline" || features.source == "target" ||
               d.max_anchors <= data.max_new_tokens - 1,
           "train config: drafter.max_anchors ", d.max_anchors,
           " is beyond the sequence: a sequence has at most data.max_new_tokens - 1 = ",
           data.max_new_tokens - 1, " anchor positions; lower max_anchors or raise max_new_tokens");
  // A block's labels are tokens anchor+1 .. anchor+block_size-1 of the generated part, so a
  // longer block has slots that never get a label (and no accuracy to report).
  CG_CHECK(d.block_size <= data.max_new_tokens, "train config: drafter.block_size ", d.block_size,
           " is longer than the generated part of a sequence (data.max_new_tokens ",
           data.max_new_tokens,
           "): its last slots would never have a label; lower block_size or raise max_new_tokens");
  in_range("drafter.gamma", d.gamma, 0, 1e6);
  const LossKind kind = d.loss.loss_kind();  // throws naming the field and the accepted kinds
  in_range("drafter.loss.ce_weight", d.loss.ce_weight, 0, 1);
  if (d.loss.ce_weight != 0) {
    CG_CHECK(d.loss.kind != "mix",
             "train config: drafter.loss.ce_weight: kind mix takes its CE weight from "
             "mix_ce_weight; drop ce_weight, or give kind kl with ce_weight");
    CG_CHECK(loss_kind_info(kind).needs_teacher,
             "train config: drafter.loss.ce_weight: mixes hard CE into a "
             "teacher kind, and kind '",
             d.loss.kind,
             "' is cross-entropy already; drop ce_weight or pick a "
             "teacher kind");
  }
  in_range("drafter.loss.mix_ce_weight", d.loss.mix_ce_weight, 0, 1);
  in_range("drafter.loss.temperature", d.loss.temperature, 1e-3, 1e3);
  try {
    parse_head_loss_path(d.head_loss_path);
  } catch (const Error& e) { CG_FAIL("train config: drafter.head_loss_path: ", e.message()); }
  in_range("drafter.head_loss_chunk_rows", static_cast<double>(d.head_loss_chunk_rows), 0, 1 << 24);
  // A fraction of a MiB is allowed (small shapes); above 1 TiB is a typo. Whether one row
  // fits is checked against the real shape before training (drafter_head_loss).
  CG_CHECK(
      std::isfinite(d.head_loss_chunk_budget_mb) && d.head_loss_chunk_budget_mb > 0 &&
          d.head_loss_chunk_budget_mb <= 1 << 20,
      "train config: drafter.head_loss_chunk_budget_mb: must be above 0 and at most 1048576 (MiB; "
      "used when head_loss_chunk_rows is 0), got ",
      number(d.head_loss_chunk_budget_mb));
  CG_CHECK(d.dtype == "f32" || d.dtype == "bf16",
           "train config: drafter.dtype: must be f32 or bf16, got '", d.dtype, "'");
  CG_CHECK(d.activation_checkpointing == "none" || d.activation_checkpointing == "layers",
           "train config: drafter.activation_checkpointing: must be none (keep every layer's "
           "activations) or layers (recompute each layer in the backward), got '",
           d.activation_checkpointing, "'");
  in_range("drafter.checkpoint_every", static_cast<double>(d.checkpoint_every), -1, 1e9);
  in_range("drafter.keep_checkpoints", static_cast<double>(d.keep_checkpoints), 0, 1e9);
  check_optim("drafter.optim.", d.optim);
  std::set<int64_t> listed;
  const int64_t target_depth = d.num_target_layers > 0 ? d.num_target_layers : t.num_layers;
  // Without a list the public rule picks the layers: a target too shallow for it is an
  // error now, not after the target has trained.
  if (d.target_layers.empty() && features.source == "online" && t.hf_config.empty()) {
    try {
      nn::dflash_target_layers(target_depth, d.num_target_features);
    } catch (const Error& e) {
      CG_FAIL("train config: drafter.target_layers is empty, so the layer rule picks ",
              d.num_target_features, " of the target's ", target_depth,
              " layers (target.num_layers): ", e.message());
    }
  }
  // Offline and target runs learn the target's depth when they open it (its folder, not
  // target.num_layers), and check the ids against it there; so does an online run whose
  // target.hf_config describes the target (target.num_layers is not its depth then).
  const bool depth_known =
      (features.source == "online" && t.hf_config.empty()) || features.source == "synthetic";
  for (int64_t id : d.target_layers) {
    CG_CHECK(id >= 0, "train config: drafter.target_layers: layer ", id,
             " is not a layer id (ids count from 0)");
    CG_CHECK(!depth_known || id < target_depth, "train config: drafter.target_layers: layer ", id,
             " is not a target layer (0..", target_depth - 1, ")");
    // A layer twice would feed the drafter the same features twice under two slots.
    CG_CHECK(listed.insert(id).second, "train config: drafter.target_layers: layer ", id,
             " is listed twice; list each layer once");
  }
  in_range("eval.prompts", static_cast<double>(eval.prompts), 1, 1e6);
  in_range("eval.max_new_tokens", static_cast<double>(eval.max_new_tokens), 1, 1 << 20);
  // The same cap as drafter.block_size's: a block is one verify step of the target, and
  // a block far beyond what the drafter was trained on only measures out-of-range slots
  // (INT64_MAX once overflowed the cache size; 1e8 ran out of memory after training).
  CG_CHECK(eval.block_size == 0 || (eval.block_size >= 2 && eval.block_size <= kMaxBlockSize),
           "train config: eval.block_size: must be 0 (drafter.block_size) or from 2 to ",
           kMaxBlockSize, ", got ", eval.block_size);
  in_range("eval.accuracy_sequences", static_cast<double>(eval.accuracy_sequences), 1, 1e6);
  in_range("eval.timing_repeats", static_cast<double>(eval.timing_repeats), 1, 100);
  in_range("eval.threads", static_cast<double>(eval.threads), 0, 1024);
  in_range("memory.large_vocab", static_cast<double>(memory.large_vocab), 2, 1 << 22);
  in_range("memory.large_hidden", static_cast<double>(memory.large_hidden), 8, 65536);
  in_range("memory.large_anchors", static_cast<double>(memory.large_anchors), 1, 1 << 16);
  in_range("memory.large_block_size", static_cast<double>(memory.large_block_size), 2, 1024);
  in_range("memory.large_seq_len", static_cast<double>(memory.large_seq_len), 2, 1 << 20);
  // Inside run_dir: relative, and no ".." component (a folder called "a..b" is fine).
  bool inside = std::filesystem::path(memory.trace_dir).is_relative();
  for (const auto& part : std::filesystem::path(memory.trace_dir)) inside = inside && part != "..";
  CG_CHECK(memory.trace_dir.empty() || inside,
           "train config: memory.trace_dir: must be a folder inside run_dir (relative, without a "
           ".. component), got '",
           memory.trace_dir, "'");
  const FeaturesConfig& f = features;
  CG_CHECK(f.source == "online" || f.source == "offline" || f.source == "synthetic" ||
               f.source == "target",
           "train config: features.source: must be online, offline, synthetic or target, got '",
           f.source, "'");
  CG_CHECK(f.source != "target" || (!f.target.empty() && !f.data.empty()),
           "train config: features.source is target but features.target or features.data is "
           "empty; give the Hugging Face target folder and at least one JSONL file (chunkgrad "
           "train --target DIR --data FILE)");
  CG_CHECK(f.source == "target" || (f.target.empty() && f.data.empty() && f.tokenizer.empty()),
           "train config: features.target / data / tokenizer are given but features.source is ",
           f.source, "; set source to target to train from them, or remove them");
  for (const std::string& file : f.data)
    CG_CHECK(!file.empty(), "train config: features.data: an empty file name");
  CG_CHECK(f.source != "offline" || !f.dir.empty(),
           "train config: features.source is offline but features.dir is empty; give the folder "
           "`chunkgrad features --out` wrote");
  CG_CHECK(f.source == "offline" || f.dir.empty(), "train config: features.dir '", f.dir,
           "' is given but features.source is ", f.source,
           "; set source to offline to train from it, or remove dir");
  check_synthetic_features(*this);
  CG_CHECK(dist.mode == "same_batch" || dist.mode == "weak",
           "train config: dist.mode: must be same_batch or weak, got '", dist.mode, "'");
  in_range("dist.bucket_mb", dist.bucket_mb, 0.001, 1 << 16);
  in_range("dist.check_every", static_cast<double>(dist.check_every), 0, 1e9);
  CG_CHECK(memory.large_anchors < memory.large_seq_len, "train config: memory.large_anchors ",
           memory.large_anchors, " is beyond the sequence (memory.large_seq_len ",
           memory.large_seq_len, ")");
}

LossKind LossSpec::loss_kind() const {
  if (kind == "mix") return LossKind::forward_kl;
  try {
    return parse_loss_kind(kind, "train config: drafter.loss.kind");
  } catch (const Error& e) { CG_FAIL(e.message(), ", or mix (kl with mix_ce_weight of hard CE)"); }
}

double LossSpec::hard_ce_weight() const {
  if (kind == "mix") return mix_ce_weight;
  return loss_kind() == LossKind::cross_entropy ? 0.0 : ce_weight;
}

Device TrainConfig::compute_device() const { return resolve_device(device, "device"); }

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  Writer w{j};
  visit_fields(w, const_cast<TrainConfig&>(*this));
  return j;
}

TrainConfig TrainConfig::from_json(const nlohmann::json& j) {
  CG_CHECK(j.is_object(), "train config: must be a JSON object, got ", describe_json(j));
  TrainConfig c;
  Reader r{j, "", {}};
  visit_fields(r, c);
  r.check_unknown();
  c.validate();
  return c;
}

nlohmann::json TrainConfig::file_json(const std::string& path) {
  const std::string what = "train config '" + path + "'";
  return parse_untrusted_json(read_text_file(path, what), what);
}

TrainConfig TrainConfig::from_file(const std::string& path) { return from_json(file_json(path)); }

}  // namespace cg::train
