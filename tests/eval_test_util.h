// Why this file exists: the `chunkgrad eval` tests (speculative_eval_test.cpp,
// eval_program_test.cpp) need what a user brings: a Hugging Face Qwen3 folder (here a tiny
// random one, config.json as transformers writes it + model.safetensors) and a drafter in
// the public DFlash layout (written by chunkgrad's exporter), plus pre-tokenized JSONL.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "nn/checkpoint.h"
#include "nn/dflash_drafter.h"
#include "nn/qwen3.h"
#include "ops/inplace.h"
#include "train/drafter_export.h"

namespace cg::testing_eval {

// A random Qwen3 target of shape `c` written to `dir` as a Hugging Face folder.
// zero_final_norm: the final norm's weight is 0, so every logit is 0 and greedy decoding
// emits token 0 forever (argmax takes the first of equal values) -- a target whose output
// a drafter can know.
inline void write_hf_target(const std::string& dir, const nn::Qwen3Config& c, uint64_t seed,
                            int64_t eos_id, bool zero_final_norm = false) {
  std::filesystem::create_directories(dir);
  Generator gen(seed);
  nn::Qwen3ForCausalLM lm(c, {.generator = &gen});
  NoGradGuard no_grad;
  if (zero_final_norm) zero_(lm.model->norm->weight);
  nn::save_checkpoint(lm, dir + "/model.safetensors");
  const nlohmann::json config = {{"architectures", {"Qwen3ForCausalLM"}},
                                 {"model_type", "qwen3"},
                                 {"vocab_size", c.vocab_size},
                                 {"hidden_size", c.hidden_size},
                                 {"num_hidden_layers", c.num_layers},
                                 {"num_attention_heads", c.num_heads},
                                 {"num_key_value_heads", c.num_kv_heads},
                                 {"head_dim", c.head_dim},
                                 {"intermediate_size", c.intermediate_size},
                                 {"rope_theta", c.rope_theta},
                                 {"rms_norm_eps", c.rms_eps},
                                 {"hidden_act", "silu"},
                                 {"tie_word_embeddings", false},
                                 {"max_position_embeddings", 512},
                                 {"eos_token_id", eos_id}};
  std::ofstream(dir + "/config.json") << config.dump(2) << "\n";
}

// A random drafter for a target of shape `target` written in the public layout to `dir`
// (train/drafter_export.h). zero_norm: its final norm's weight is 0, so it always
// proposes token 0 (see write_hf_target).
inline void write_public_drafter_for(const std::string& dir, const nn::Qwen3Config& target,
                                     std::vector<int64_t> layers, int64_t block_size,
                                     int64_t mask_id, uint64_t seed, bool zero_norm = false) {
  nn::DFlashDrafterConfig dc;
  dc.layers = target;
  dc.layers.num_layers = 1;
  dc.layers.intermediate_size = 2 * target.hidden_size;
  dc.target_layers = std::move(layers);
  dc.mask_token_id = mask_id;
  const Tensor table = randn({target.vocab_size, target.hidden_size});
  Generator gen(seed);
  nn::DFlashDrafter drafter(dc, table, table, {.generator = &gen});
  NoGradGuard no_grad;
  if (zero_norm) zero_(drafter.norm->weight);
  train::write_public_drafter(drafter,
                              {.block_size = block_size,
                               .num_target_layers = target.num_layers,
                               .max_position_embeddings = 512},
                              dir);
}

// A JSONL line: ids, and the loss mask when given.
inline std::string token_line(const std::vector<int64_t>& ids, const std::vector<int>& mask = {},
                              const std::string& dataset = "") {
  nlohmann::json j = {{"input_ids", ids}};
  if (!mask.empty()) j["loss_mask"] = mask;
  if (!dataset.empty()) j["dataset"] = dataset;
  return j.dump() + "\n";
}

}  // namespace cg::testing_eval
