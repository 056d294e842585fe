// Why this file exists: chunkgrad renders conversations with its own implementation of the
// Qwen3 chat template (train/chat_template.cpp, Note [The Qwen3 template] in chat_data.h),
// never with the template the target's folder ships. A folder with another template (a
// Qwen3.5 checkpoint, a fine-tune with its own turns) would get drafter data rendered unlike
// what transformers' apply_chat_template and a serving engine give that target, silently.
// This finds the folder's template as transformers does and says whether it is one chunkgrad
// renders, so that the programs refuse (or, when asked, warn) instead (Note [Chat template
// check], docs/chat_data.md).
//
//   const ChatTemplateCheck c = check_chat_template("Qwen3-8B");
//   if (c.mismatch) ... c.problem: one sentence naming the file and what to do
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cg::train {

// The text of the folder's chat template, where transformers reads it: chat_template.jinja
// (transformers >= 4.43 saves it there), else tokenizer_config.json's "chat_template" (a
// string, or a list of {"name", "template"} of which "default" is the one used). `file` is
// "" when the folder has none. Throws naming the file when it cannot be read or parsed.
// A name transformers reads that is there but not a file (a folder, a link to nothing) is
// not "no template": `broken` then names it, and check_chat_template calls it a mismatch
// (an error for conversations only: pre-tokenized data reads no template).
struct FolderChatTemplate {
  std::string file;  // where the text was read; "" when the folder has no template
  std::string text;
  std::string broken;  // the path that is there but is not a readable file; "" when none
};
FolderChatTemplate read_folder_chat_template(const std::string& dir);

// XXH3-128 of the template with "\r\n" read as "\n" and outer whitespace dropped (how
// tokenizer_config.json and a .jinja file of one template differ).
std::string chat_template_hash(std::string_view text);

// The hashes of the templates chunkgrad renders exactly: the Qwen3 template as released
// (tests/golden/tokenizer/qwen3_chat_template.jinja; tests/chat_golden_test.cpp checks the
// rendering against transformers).
const std::vector<std::string>& known_chat_template_hashes();

struct ChatTemplateCheck {
  bool mismatch = false;  // the folder has a template and it is not a known one
  std::string problem;    // "" when it is known; else one sentence (also for no template)
};
// The check of the template beside a tokenizer (`dir`: the tokenizer.json's folder).
// `allow_flag`: the option that renders anyway, named in the sentence.
ChatTemplateCheck check_chat_template(const std::string& dir, const std::string& allow_flag);

}  // namespace cg::train
