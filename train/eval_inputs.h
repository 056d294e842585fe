// Why this file exists: `chunkgrad eval` (examples/chunkgrad/eval_command.cpp) measures a
// drafter against the target it was trained for, and each of its three inputs comes from
// a folder or file a user brings: the target (a Hugging Face Qwen3 folder, or a chunkgrad
// run with a cached toy target), the drafter (the public DFlash layout that `chunkgrad
// export` writes, docs/export.md) and the prompts (JSONL). This file turns them into a
// model, a drafter that fits it, and prompts grouped by dataset -- or one error line that
// says which field of which file disagrees with what. The decoding and its report are
// train/speculative_eval.h's.
//
//   EvalTarget target = load_eval_target("/models/Qwen3-8B", device, DType::bf16);
//   PublicDrafter drafter = load_drafter_for_target("/runs/a/public", *target.lm);
//   auto prompts = read_eval_prompts({"chat.jsonl"}, target.lm->config().vocab_size, 50);
//
// Note [Eval prompts]: a line of pre-tokenized JSONL is a whole conversation
// (`input_ids`, optional `loss_mask`, optional `dataset`). The prompt is everything before
// the last assistant response, which the loss mask marks: the ids before the last run of
// 1s (its first id, the response's first token, is what the target must produce). With no
// loss_mask, a mask of all 1s (the reader cannot tell it from none: a missing mask reads as
// all 1s) or a mask without any 1, the whole line is the prompt. A mask whose last run
// starts at id 0 and is followed by 0s leaves no prompt: that line is an error naming it.
// The dataset is the
// line's "dataset" string, else the file's stem (`gsm8k.jsonl` -> gsm8k), so several
// --data files are several datasets. read_eval_prompts is the one place that reads
// prompts: chat JSONL (train/chat_data.h) plugs in here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nn/dflash_drafter.h"
#include "nn/qwen3.h"
#include "train/chat_data.h"
#include "train/drafter_export.h"

namespace cg::train {

struct EvalPrompt {
  std::string dataset;
  std::vector<int64_t> ids;  // the prompt only (Note [Eval prompts])
};

// Note [Eval prompts]: the ids before the last run of 1s in loss_mask; all of them when
// loss_mask is empty or has no 1. Empty when the last run starts at 0.
std::vector<int64_t> prompt_before_last_response(const std::vector<int64_t>& ids,
                                                 const std::vector<uint8_t>& loss_mask);

// Prompts of every file in order, at most `limit` per dataset (0: all), grouped by
// dataset in the order datasets first appear. Ids must be below vocab_size. Errors name
// the file and line.
std::vector<EvalPrompt> read_eval_prompts(const std::vector<std::string>& files, int64_t vocab_size,
                                          int64_t limit);
// The same from samples read by train/chat_data.h (conversations rendered with the Qwen3
// template, or pre-tokenized lines): a loss mask of all 1s (a pre-tokenized line without
// one) means the whole line is the prompt. Errors name the sample's file:line.
std::vector<EvalPrompt> eval_prompts(const ChatData& data, int64_t limit);

// The target, frozen, in eval mode, on `device`, its weights in `dtype`.
struct EvalTarget {
  std::unique_ptr<nn::Qwen3ForCausalLM> lm;
  std::string kind;  // "hugging face" or "chunkgrad run"
  // The ids that end a turn: generation_config.json's eos_token_id, else config.json's
  // (an id or a list; train/regenerate.h's eos_ids_of_folder, as regenerate reads them).
  std::vector<int64_t> eos_ids;
};
// Note [Eval target dtype]: load_feature_target (train/feature_target.h) builds the model
// in `dtype` on the device and converts each checkpoint tensor as it is read: no f32 copy
// of an 8B target on the way to bf16.
// read_eos false: eos_ids stays empty and the folder's EOS fields are not read (eval's
// --eos-id replaces them, also where they are damaged).
EvalTarget load_eval_target(const std::string& dir, Device device, DType dtype,
                            bool read_eos = true);

// A drafter read from a public DFlash folder, built for the target it runs with (the
// target's embed_tokens and lm_head, its device and dtype).
struct PublicDrafter {
  nn::DFlashDrafterConfig config;
  PublicDrafterInfo info;  // block_size, num_target_layers, max_position_embeddings
  std::unique_ptr<nn::DFlashDrafter> drafter;
};

// The drafter's architecture as config.json states it (the fields docs/export.md lists:
// dflash_config first, then the top level, as z-lab's reader looks them up). Throws
// naming the field when one is missing or of the wrong type, or when mask_token_id is
// null (a published config may leave it to the tokenizer; eval needs the number).
PublicDrafter public_drafter_from_config(const nlohmann::json& config, const std::string& where);

// One line per way the drafter cannot run with `target`: hidden size, vocabulary, a
// target layer id beyond the target's depth, num_target_layers, the mask id outside the
// vocabulary. Empty when it fits.
std::vector<std::string> drafter_target_mismatches(const PublicDrafter& drafter,
                                                   const nn::Qwen3Config& target);

// Reads dir/config.json, refuses a drafter that does not fit the target (every mismatch
// in one error line), then loads dir/model.safetensors (load_public_drafter) and puts the
// drafter on the target's device in the target's dtype.
PublicDrafter load_drafter_for_target(const std::string& dir, const nn::Qwen3ForCausalLM& target);

}  // namespace cg::train
