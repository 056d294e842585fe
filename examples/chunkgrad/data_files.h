// Why this file exists: `chunkgrad features`, `train --target`, `regenerate` and `eval` all
// read the same data files (chat or pre-tokenized JSONL, train/chat_data.h) with the same
// rule for the tokenizer: --tokenizer FILE, else the target folder's tokenizer.json, else
// none (pre-tokenized lines need none; a conversation line then says what to give). The
// tokenizer exists only in builds with PCRE2 and utf8proc, and only the program's files are
// compiled knowing which (CHUNKGRAD_WITH_TOKENIZER), so the rule lives here, once.
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
  // The encoder and hint as train::ChatDataOptions wants them.
  train::ChatDataOptions options(int64_t vocab_size, bool strict) const;
};

// `option`: the --tokenizer value ("" = not given); `target_dir`: the target folder whose
// tokenizer.json is the default. Throws naming the file when it cannot be read.
DataTokenizer data_tokenizer(const std::string& option, const std::string& target_dir);

// read_chat_data over `files`, errors prefixed with "--data ".
train::ChatData read_data_files(const std::vector<std::string>& files, const DataTokenizer& tok,
                                int64_t vocab_size, bool strict);

}  // namespace cg::cli
