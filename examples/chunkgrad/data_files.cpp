// Why this file exists: the data files' tokenizer rule, once (data_files.h), and what a target
// or tokenizer option stands for as inputs that outputs must not overwrite.
#include "examples/chunkgrad/data_files.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "train/chat_template_check.h"
#ifdef CHUNKGRAD_WITH_TOKENIZER
#include "train/hf_tokenizer.h"
#endif

namespace cg::cli {

train::ChatDataOptions DataTokenizer::options(int64_t vocab_size, bool strict) const {
  train::ChatDataOptions o{.encode = encode, .vocab_size = vocab_size, .strict = strict};
  o.no_tokenizer_hint = hint;
  o.template_problem = template_problem;
  o.template_problem_is_error = template_is_error;
  return o;
}

DataTokenizer data_tokenizer(const std::string& option, const std::string& target_dir,
                             bool allow_template_mismatch) {
  DataTokenizer t;
  t.path = option;
  const std::string beside = (std::filesystem::path(target_dir) / "tokenizer.json").string();
  if (t.path.empty() && !target_dir.empty() && std::filesystem::exists(beside)) t.path = beside;
#ifdef CHUNKGRAD_WITH_TOKENIZER
  if (!t.path.empty()) {
    auto tok = std::make_shared<train::HfTokenizer>(train::HfTokenizer::from_file(t.path));
    t.encode = train::hf_encoder(*tok);
    t.holder = tok;
    // The template beside the tokenizer is the one transformers would render with.
    const std::string dir = std::filesystem::path(t.path).parent_path().string();
    const train::ChatTemplateCheck check =
        train::check_chat_template(dir.empty() ? "." : dir, kAllowChatTemplateFlag);
    t.template_problem = check.problem;
    t.template_is_error = check.mismatch && !allow_template_mismatch;
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
  train::ChatData data;
  try {
    data = train::read_chat_data(files, tok.options(vocab_size, strict));
  } catch (const Error& e) { CG_FAIL("--data ", e.message()); }
  if (!data.template_warning.empty())
    std::fprintf(stderr, "warning: %s\n", data.template_warning.c_str());
  return data;
}

NamedPaths target_inputs(const std::string& dir, const std::string& option) {
  namespace fs = std::filesystem;
  if (dir.empty()) return {};
  const fs::path config = fs::path(dir) / "config.json";
  std::error_code ec;
  if (fs::is_regular_file(config, ec)) {
    try {  // (a damaged file is the loader's to report; here it only widens the check)
      const nlohmann::json j =
          parse_untrusted_json(read_text_file(config.string(), "config.json"), config.string());
      if (j.is_object() && j.contains("target") && j.contains("drafter")) {
        NamedPaths run = {{(fs::path(dir) / "target").string(), option + "'s cached target"},
                          {config.string(), option + "'s config.json"}};
        const nlohmann::json& t = j["target"];
        if (t.is_object() && t.contains("checkpoint") && t["checkpoint"].is_string())
          run.emplace_back(t["checkpoint"].get<std::string>(), option + "'s target.checkpoint");
        return run;
      }
    } catch (const Error&) {}
  }
  return {{dir, option}};
}

NamedPaths tokenizer_inputs(const std::string& file, const std::string& option) {
  namespace fs = std::filesystem;
  if (file.empty()) return {};
  const fs::path folder = fs::path(file).parent_path();
  return {{file, option},
          {(folder / "chat_template.jinja").string(), option + "'s chat_template.jinja"},
          {(folder / "tokenizer_config.json").string(), option + "'s tokenizer_config.json"}};
}

}  // namespace cg::cli
