// Why this file exists: a drafter for a real target learns from chat data, and it must see
// the tokens the target sees when a serving engine renders the same conversation. This
// reads JSONL in the three common forms, renders conversations exactly as the Qwen3 chat
// template does with thinking off, tokenizes the whole rendered text with the target's
// tokenizer, and marks the tokens the drafter learns (docs/chat_data.md):
//
//   {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
//   {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]}
//   {"input_ids": [9707, 13], "loss_mask": [0, 1], "dataset": "math"}
//
//   const HfTokenizer tok = HfTokenizer::from_file("Qwen3-8B/tokenizer.json");
//   ChatData data = read_chat_data({"a.jsonl", "b.jsonl"}, {.encode = hf_encoder(tok)});
//   data.samples[0].sequence.ids / .loss_mask / .dataset / .where()
//
// Note [The Qwen3 template] (the chat_template of Qwen3-8B's tokenizer_config.json, copied
// verbatim in tests/golden/make_chat_golden.py, which names its source):
//   - a first message of role system is `<|im_start|>system\n{content}<|im_end|>\n`; there
//     is no system turn unless one is given; a later system message is a turn of its own,
//     `<|im_start|>system\n{content}<|im_end|>\n` like a user's;
//   - user: `<|im_start|>user\n{content}<|im_end|>\n`;
//   - the last query is the last user message whose content is not wrapped in
//     <tool_response> ... </tool_response> (none: no message is after it);
//   - assistant: when the content holds `</think>`, the reasoning is the text before the
//     first `</think>` (newlines stripped at its end, then what follows its last `<think>`,
//     newlines stripped at its start) and the content what follows the last `</think>`
//     (newlines stripped at its start); a "reasoning_content" string replaces that split.
//     An assistant message after the last query that is the conversation's last message,
//     or that has reasoning, renders as
//       `<|im_start|>assistant\n<think>\n{reasoning without outer newlines}\n</think>\n\n`
//       `{content without leading newlines}<|im_end|>\n`
//     (with no reasoning, the empty think block `<think>\n\n</think>\n\n`), every other as
//     `<|im_start|>assistant\n{content}<|im_end|>\n` (the reasoning dropped).
//   - thinking off (`enable_thinking=False`) changes only the generation prompt, which
//     then ends in the empty think block: the prompt a serving engine gives the target.
// Roles other than system/user/assistant (tool, function) and assistant tool_calls are
// refused: such a line is a bad line (skipped, or an error with `strict`).
//
// Note [The loss mask]: the rendered text is tokenized whole (ids equal Hugging Face's
// tokenizer(rendered)), and each token's byte range in it (HfTokenizer Note [Offsets])
// decides its mask: 1 when the range overlaps an assistant answer, 0 otherwise. An answer
// is what the template puts after `<|im_start|>assistant\n` up to and including the
// turn's `<|im_end|>`, less an empty think block `<think>\n\n</think>\n\n` at its start
// (that block is part of the prompt with thinking off). So the header, the empty think
// block, every system and user turn and the `\n` after each `<|im_end|>` are 0; the
// answer's tokens, a non-empty think block and the closing `<|im_end|>` are 1. A token
// that straddles the start of an answer (possible only when the answer starts with
// whitespace that merges with the header's newline) counts as the answer's.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "train/dflash_batch.h"
#include "train/hf_tokenizer.h"

namespace cg::train {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
  std::optional<std::string> reasoning;  // an assistant's "reasoning_content", when given
};

// The template's text of a conversation and its answers' byte ranges (Note [The loss
// mask]), in order.
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> answers;  // [begin, end) in `text`
};
// Note [The Qwen3 template]. Throws for a role other than system/user/assistant.
RenderedChat render_qwen3_chat(const std::vector<ChatMessage>& messages);

// A tokenizer for chat text: ids and each id's byte range (HfTokenizer::encode_with_offsets).
using ChatEncoder = std::function<HfTokenizer::Encoding(std::string_view)>;
// `tok` must outlive the encoder. Inline: a build without the tokenizer links no HfTokenizer.
inline ChatEncoder hf_encoder(const HfTokenizer& tok) {
  return [&tok](std::string_view text) { return tok.encode_with_offsets(text); };
}

// The ids of `chat.text` and their mask (Note [The loss mask]).
DrafterSequence tokenize_chat(const RenderedChat& chat, const ChatEncoder& encode);

// One sample of a data file: its tokens, the dataset it belongs to, and where it came from.
struct DataSample {
  DrafterSequence sequence;
  std::string dataset;  // the line's "dataset", else the file's stem
  std::string file;
  int64_t line = 0;       // 1-based
  bool rendered = false;  // a conversation rendered with the Qwen3 template (not input_ids)
  std::string where() const { return file + ":" + std::to_string(line); }
};

struct ChatDataOptions {
  ChatEncoder encode;  // needed by conversation lines; pre-tokenized lines need none
  int64_t vocab_size = std::numeric_limits<int64_t>::max();  // ids must be below it
  bool strict = false;  // the first bad line is an error instead of skipped
  // Said in the error of a conversation line read without `encode` (e.g. which option
  // gives a tokenizer).
  std::string no_tokenizer_hint = "give a tokenizer";
  // Note [Chat template check] (chat_template_check.h): said about the tokenizer's chat
  // template when it is not one chunkgrad renders ("" when it is). Only conversation lines
  // care: with `template_problem_is_error` the first one is this error (never a skipped bad
  // line), else ChatData::template_warning holds it once a conversation was read.
  std::string template_problem{};
  bool template_problem_is_error = false;
};

// What was read from one file.
struct DataFileReport {
  std::string file;
  int64_t samples = 0, bad_lines = 0;
  int64_t first_bad_line = 0;  // 0: none
  std::string first_bad_reason;
  std::string describe() const;  // "a.jsonl: 98 samples; 2 bad lines skipped (first: ...)"
};

struct ChatData {
  std::vector<DataSample> samples;                 // in file order, then line order
  std::vector<DataFileReport> files;               // one per file given
  std::vector<DrafterSequence> sequences() const;  // the samples' sequences, in order
  std::string template_warning;  // ChatDataOptions::template_problem, when conversations were read
};

// Reads every file (Note [Lines], chat_data.cpp). Bad lines are counted and skipped
// (`strict`: the first is an error naming file:line, why, and what to change). Throws when
// a file cannot be read or, over all files, no sample is left.
ChatData read_chat_data(const std::vector<std::string>& paths, const ChatDataOptions& options);

// Parses one line (no trailing newline) of `file` into a sample; throws cg::Error with the
// reason when the line is bad. A blank line gives std::nullopt.
std::optional<DataSample> parse_chat_line(const std::string& line, const std::string& file,
                                          int64_t line_number, const ChatDataOptions& options);

// One "warning: ..." line on stderr when `positions` (the longest sequence a command will
// run through the target, `what` says whose) passes the target's max_position_embeddings
// (0: unknown, no warning): the model was not trained that far, so its outputs there mean
// little. transformers warns alike; nothing is cut.
void warn_past_context(int64_t max_position_embeddings, int64_t positions, const std::string& what);

}  // namespace cg::train
