// Why this file exists: the drafter a run makes (drafter_model.h).
#include "train/drafter_model.h"

#include <filesystem>

#include "core/json_input.h"
#include "core/memory_trace.h"
#include "core/views.h"
#include "ops/shape_ops.h"
#include "train/drafter_step.h"
#include "train/offline_features.h"
#include "train/target_lm.h"
#include "train/tokenizer.h"

namespace cg::train {

nn::DFlashDrafterConfig drafter_model_config(const nn::Qwen3Config& tc, const DrafterConfig& config,
                                             int64_t mask_id) {
  auto own = [](int64_t drafter_value, int64_t target_value) {
    return drafter_value > 0 ? drafter_value : target_value;
  };
  auto same = [](const char* field, int64_t drafter_value, int64_t target_value) {
    CG_CHECK(drafter_value == 0 || drafter_value == target_value, "train config: drafter.", field,
             " is ", drafter_value, " but the target's is ", target_value,
             "; set it to 0 (the target's) or to ", target_value);
  };
  same("hidden_size", config.hidden_size, tc.hidden_size);
  same("vocab_size", config.vocab_size, tc.vocab_size);
  same("num_target_layers", config.num_target_layers, tc.num_layers);
  nn::DFlashDrafterConfig dc;
  dc.layers = tc;  // hidden and vocabulary: the target's
  // Issue 21 item 4: a drafter's layers are dense Qwen3 whatever its target. None of a
  // Qwen3.5 target's hybrid fields (DeltaNet layers, gated attention, zero-centred norms,
  // partial rotary / M-RoPE) carries over: its RoPE is plain and full-dim, its norms plain w.
  const nn::Qwen3Config dense;
  dc.layers.family = dense.family;
  dc.layers.layer_types.clear();
  dc.layers.attn_output_gate = false;
  dc.layers.zero_centred_norm = false;
  dc.layers.partial_rotary_factor = 1.0;
  dc.layers.linear_num_key_heads = dense.linear_num_key_heads;
  dc.layers.linear_num_value_heads = dense.linear_num_value_heads;
  dc.layers.linear_key_head_dim = dense.linear_key_head_dim;
  dc.layers.linear_value_head_dim = dense.linear_value_head_dim;
  dc.layers.linear_conv_kernel_dim = dense.linear_conv_kernel_dim;
  dc.layers.num_experts = 0;  // a Qwen3.5-MoE target's drafter has dense MLPs
  dc.layers.num_experts_per_tok = 0;
  dc.layers.moe_intermediate_size = 0;
  dc.layers.shared_expert_intermediate_size = 0;
  dc.layers.num_layers = config.num_layers;
  dc.layers.intermediate_size = config.intermediate_size;
  dc.layers.num_heads = own(config.num_heads, tc.num_heads);
  dc.layers.num_kv_heads = own(config.num_kv_heads, tc.num_kv_heads);
  dc.layers.head_dim = own(config.head_dim, tc.head_dim);
  if (config.rope_theta > 0) dc.layers.rope_theta = config.rope_theta;
  if (config.rms_eps > 0) dc.layers.rms_eps = config.rms_eps;
  dc.target_layers = config.target_layers.empty()
                         ? nn::dflash_target_layers(tc.num_layers, config.num_target_features)
                         : config.target_layers;
  dc.mask_token_id = config.mask_token_id >= 0 ? config.mask_token_id : mask_id;
  for (const std::string& t : config.layer_types)
    dc.layer_types.push_back(nn::parse_drafter_attention(t));
  dc.sliding_window = config.sliding_window;
  dc.activation_checkpointing = nn::parse_activation_checkpointing(config.activation_checkpointing);
  return dc;
}

void check_run_drafter(const TrainConfig& config, const nn::Qwen3Config& target, int64_t mask_id,
                       Device device) {
  const DrafterConfig& d = config.drafter;
  const nn::DFlashDrafterConfig dc = drafter_model_config(target, d, mask_id);  // sizes
  const nn::Qwen3Config& l = dc.layers;
  // "drafter.num_heads 4", or "drafter.num_heads 0 (the target's: 2)": a value the user
  // left at 0 is named with the one it took.
  auto field = [](const char* name, int64_t given, int64_t used) {
    return std::string("drafter.") + name + " " +
           (given > 0 ? std::to_string(given) : "0 (the target's: " + std::to_string(used) + ")");
  };
  CG_CHECK(l.num_heads % l.num_kv_heads == 0,
           "train config: ", field("num_heads", d.num_heads, l.num_heads), " is not a multiple of ",
           field("num_kv_heads", d.num_kv_heads, l.num_kv_heads),
           " (grouped-query attention shares each KV head among a whole number of query heads); "
           "set drafter.num_kv_heads to a divisor of ",
           l.num_heads);
  // The target's own depth (a checkpoint's hf_config, a feature folder's target), which the
  // config's validate() cannot know: an id past it failed in the target's forward, after the
  // run directory was written (an outside tester's finding).
  for (int64_t id : d.target_layers) {
    CG_CHECK(id >= 0 && id < target.num_layers, "train config: drafter.target_layers: layer ", id,
             " is not a layer of the target (0..", target.num_layers - 1, ")");
  }
  CG_CHECK(l.head_dim % 2 == 0, "train config: ", field("head_dim", d.head_dim, l.head_dim),
           " is odd (RoPE rotates pairs); set drafter.head_dim to an even size");
  CG_CHECK(dc.mask_token_id >= 0 && dc.mask_token_id < l.vocab_size,
           "train config: drafter.mask_token_id ", dc.mask_token_id,
           " is not in the target's vocabulary (0 .. ", l.vocab_size - 1,
           "); set it to an id the tokenizer never produces");
  try {
    dc.validate();
  } catch (const Error& e) {
    CG_FAIL("train config: the drafter that drafter.* describes cannot be built on this target: ",
            e.message());
  }
  check_drafter_chunk(drafter_head_loss(d), l.vocab_size, l.hidden_size,
                      d.dtype == "bf16" ? DType::bf16 : DType::f32, device);
}

std::string run_target_hf_config(const TrainConfig& config) {
  namespace fs = std::filesystem;
  std::string folder;
  if (config.features.source == "target") folder = config.features.target;
  if (config.features.source == "offline") {
    try {  // the folder the features were written from, when it is still there
      folder = read_feature_index(config.features.dir).target;
    } catch (const Error&) { folder.clear(); }
  }
  if (!folder.empty()) {
    const fs::path file = fs::path(folder) / "config.json";
    std::error_code ec;
    if (fs::is_regular_file(file, ec)) {
      try {  // a chunkgrad run directory's config.json has a "drafter" section
        const nlohmann::json j =
            parse_untrusted_json(read_text_file(file.string(), "config.json"), file.string());
        if (j.is_object() && !j.contains("drafter")) return file.string();
      } catch (const Error&) {}
    }
  }
  return config.target.hf_config;
}

nn::Qwen3Config run_target_architecture(const TrainConfig& config) {
  if (config.features.source == "synthetic") return synthetic_target_architecture(config.drafter);
  const std::string hf = run_target_hf_config(config);
  if (hf != config.target.hf_config) return nn::Qwen3Config::from_hf_file(hf);
  return target_architecture(config.target);
}

nn::DFlashDrafterConfig run_drafter_config(const TrainConfig& config) {
  const int64_t mask =
      config.features.source == "synthetic" ? config.drafter.vocab_size - 1 : ByteTokenizer::kMask;
  return drafter_model_config(run_target_architecture(config), config.drafter, mask);
}

nn::Qwen3Config synthetic_target_architecture(const DrafterConfig& config) {
  CG_CHECK(config.hidden_size > 0 && config.vocab_size > 0 && config.num_target_layers > 0,
           "train config: without a target model (features.source synthetic) the drafter needs "
           "drafter.hidden_size, drafter.vocab_size and drafter.num_target_layers (the target's "
           "width, vocabulary and depth); got ",
           config.hidden_size, ", ", config.vocab_size, ", ", config.num_target_layers);
  nn::Qwen3Config tc;
  tc.vocab_size = config.vocab_size;
  tc.hidden_size = config.hidden_size;
  tc.num_layers = config.num_target_layers;
  // No target attention exists: the drafter's own sizes must be given (TrainConfig::validate
  // refuses 0 for a synthetic run; the fallback is for configs read from before it did).
  tc.num_heads = config.num_heads > 0 ? config.num_heads : 1;
  tc.num_kv_heads = config.num_kv_heads > 0 ? config.num_kv_heads : 1;
  tc.head_dim = config.head_dim > 0 ? config.head_dim : config.hidden_size;
  tc.intermediate_size = config.intermediate_size;
  if (config.rope_theta > 0) tc.rope_theta = config.rope_theta;
  if (config.rms_eps > 0) tc.rms_eps = config.rms_eps;
  return tc;
}

std::unique_ptr<nn::DFlashDrafter> make_drafter(const nn::Qwen3ForCausalLM& target,
                                                const DrafterConfig& config, int64_t mask_id,
                                                uint64_t seed) {
  const DType dtype = config.dtype == "bf16" ? DType::bf16 : DType::f32;
  Tensor embed = target.model->embed_tokens->weight.detach();
  Tensor head = target.lm_head->weight.detach();
  if (dtype != embed.dtype()) {
    CategoryGuard category(MemoryCategory::parameter);
    embed = raw::contiguous(raw::to_dtype(embed, dtype));
    head = raw::contiguous(raw::to_dtype(head, dtype));
  }
  return make_drafter(target.config(), embed, head, config, mask_id, seed);
}

std::unique_ptr<nn::DFlashDrafter> make_drafter(const nn::Qwen3Config& target, Tensor embed,
                                                Tensor head, const DrafterConfig& config,
                                                int64_t mask_id, uint64_t seed,
                                                bool init_on_device) {
  const nn::DFlashDrafterConfig dc = drafter_model_config(target, config, mask_id);
  const DType dtype = config.dtype == "bf16" ? DType::bf16 : DType::f32;
  Generator gen(seed);
  nn::InitOptions init{.generator = &gen};
  if (init_on_device) {
    init.dtype = dtype;
    init.device = embed.device();
  }
  auto d = std::make_unique<nn::DFlashDrafter>(dc, embed, head, init);
  d->to(embed.device());  // the target's device; its own layers were made on the host
  if (dtype != DType::f32) d->to(dtype);
  return d;
}

}  // namespace cg::train
