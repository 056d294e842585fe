// Why this file exists: the data files' tokenizer rule, once (data_files.h).
#include "examples/chunkgrad/data_files.h"

#include <filesystem>

#include "core/error.h"
#ifdef CHUNKGRAD_WITH_TOKENIZER
#include "train/hf_tokenizer.h"
#endif

namespace cg::cli {

train::ChatDataOptions DataTokenizer::options(int64_t vocab_size, bool strict) const {
  train::ChatDataOptions o{.encode = encode, .vocab_size = vocab_size, .strict = strict};
  o.no_tokenizer_hint = hint;
  return o;
}

DataTokenizer data_tokenizer(const std::string& option, const std::string& target_dir) {
  DataTokenizer t;
  t.path = option;
  const std::string beside = (std::filesystem::path(target_dir) / "tokenizer.json").string();
  if (t.path.empty() && !target_dir.empty() && std::filesystem::exists(beside)) t.path = beside;
#ifdef CHUNKGRAD_WITH_TOKENIZER
  if (!t.path.empty()) {
    auto tok = std::make_shared<train::HfTokenizer>(train::HfTokenizer::from_file(t.path));
    t.encode = train::hf_encoder(*tok);
    t.holder = tok;
  }
  t.hint = "give --tokenizer FILE (the target " + target_dir + " has no tokenizer.json)";
#else
  t.path.clear();
  t.hint =
      "this chunkgrad was built without the tokenizer (install libpcre2-dev and libutf8proc-dev "
      "and build again), so only pre-tokenized lines (input_ids) can be read";
#endif
  return t;
}

train::ChatData read_data_files(const std::vector<std::string>& files, const DataTokenizer& tok,
                                int64_t vocab_size, bool strict) {
  try {
    return train::read_chat_data(files, tok.options(vocab_size, strict));
  } catch (const Error& e) { CG_FAIL("--data ", e.message()); }
}

}  // namespace cg::cli
