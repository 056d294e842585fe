// Why this file exists: `chunkgrad features`, `train --target`, `regenerate` and `eval` all
// read the same data files (chat or pre-tokenized JSONL, train/chat_data.h) with the same
// rule for the tokenizer: --tokenizer FILE, else the target folder's tokenizer.json, else
// none (pre-tokenized lines need none; a conversation line then says what to give). The
// tokenizer exists only in builds with PCRE2 and utf8proc, and only the program's files are
// compiled knowing which (CHUNKGRAD_WITH_TOKENIZER), so the rule lives here, once. So does
// what a --target or --tokenizer option stands for as inputs that the same commands'
// outputs must not overwrite (program::check_output_not_input).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "train/chat_data.h"

namespace cg::cli {

// The tokenizer chat lines are read with, and what to say when there is none.
struct DataTokenizer {
  std::string path;              // "" when there is none
  std::shared_ptr<void> holder;  // keeps the tokenizer `encode` uses alive
  train::ChatEncoder encode;     // empty when there is none
  std::string hint;              // for a conversation line read without one
  // Note [Chat template check] (train/chat_template_check.h): what to say of the chat
  // template beside the tokenizer ("" when chunkgrad renders it), and whether it is an error.
  std::string template_problem{};
  bool template_is_error = false;
  // The encoder and hint as train::ChatDataOptions wants them.
  train::ChatDataOptions options(int64_t vocab_size, bool strict) const;
};

// The option that renders conversations with the Qwen3 template whatever the tokenizer's
// folder holds (every command that reads data files has it).
constexpr const char* kAllowChatTemplateFlag = "--allow-chat-template-mismatch";
constexpr const char* kAllowChatTemplateHelp =
    "render conversations with chunkgrad's Qwen3 chat template even when the tokenizer's "
    "folder holds another (default: an error; docs/chat_data.md)";

// `option`: the --tokenizer value ("" = not given); `target_dir`: the target folder whose
// tokenizer.json is the default; `allow_template_mismatch`: kAllowChatTemplateFlag was
// given. Throws naming the file when it cannot be read.
DataTokenizer data_tokenizer(const std::string& option, const std::string& target_dir,
                             bool allow_template_mismatch = false);

// read_chat_data over `files`, errors prefixed with "--data "; a template warning
// (ChatData::template_warning) is one "warning: ..." line on stderr.
train::ChatData read_data_files(const std::vector<std::string>& files, const DataTokenizer& tok,
                                int64_t vocab_size, bool strict);

// Inputs as program::check_output_not_input takes them: (path, what the message calls it).
using NamedPaths = std::vector<std::pair<std::string, std::string>>;

// What a target folder given by `option` is read from: a chunkgrad run's cached target
// (DIR/target, DIR/config.json and a target.checkpoint it names: a report or features
// written beside them in the run folder touch nothing the run reads), else the whole
// folder (a Hugging Face model's).
NamedPaths target_inputs(const std::string& dir, const std::string& option);

// A tokenizer.json given by `option` ("" = none) and the files read beside it
// (chat_template.jinja, tokenizer_config.json: train/chat_template_check.h).
NamedPaths tokenizer_inputs(const std::string& file, const std::string& option);

}  // namespace cg::cli
