// Why this file exists: the folder's chat template against the one chunkgrad renders
// (chat_template_check.h).
//
// Note [Chat template check]: a conversation line is rendered by render_qwen3_chat, whatever
// the target. So before the first one is read the template of the tokenizer's folder is
// found as transformers finds it and compared, by the hash of its text, with the templates
// chunkgrad implements. Another template is an error by default: a transformers user
// expects apply_chat_template's text, and a drafter trained on other turns drafts for a
// prompt its target never sees. --allow-chat-template-mismatch renders with the Qwen3
// template anyway and says so once on stderr (a fine-tune whose template differs only in
// its tool blocks, say). A folder without any template (a bare tokenizer.json) is a
// warning: transformers could not render it at all, and the Qwen3 rendering is the
// documented behaviour. Pre-tokenized lines are never checked: nothing is rendered.
// A hash, not a parse: deciding that two Jinja templates render the same text for every
// conversation is not a check to make here. A new known template is one more hash once its
// rendering is checked against transformers (tests/golden/make_chat_golden.py).
#include "train/chat_template_check.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "train/fingerprint.h"

namespace cg::train {

namespace fs = std::filesystem;

namespace {

// Whether `path` names something (a link to nothing included) that is not a regular file.
bool there_but_not_a_file(const fs::path& path) {
  std::error_code ec;
  const fs::file_status own = fs::symlink_status(path, ec);
  if (ec || own.type() == fs::file_type::not_found) return false;
  return !fs::is_regular_file(path, ec);
}

}  // namespace

FolderChatTemplate read_folder_chat_template(const std::string& dir) {
  FolderChatTemplate t;
  const fs::path jinja = fs::path(dir) / "chat_template.jinja";
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  for (const fs::path& p : {jinja, config_path}) {
    if (!there_but_not_a_file(p)) continue;
    t.broken = p.string();
    return t;
  }
  if (fs::is_regular_file(jinja)) {
    t.file = jinja.string();
    t.text = read_text_file(t.file, "the chat template");
    return t;
  }
  if (!fs::is_regular_file(config_path)) return t;
  const std::string where = config_path.string();
  const nlohmann::json config =
      parse_untrusted_json(read_text_file(where, "the tokenizer config"), where);
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null())
    return t;
  const nlohmann::json& v = config["chat_template"];
  t.file = where;
  if (v.is_string()) {
    t.text = v.get<std::string>();
    return t;
  }
  CG_CHECK(v.is_array(), where, ": field 'chat_template' is ", describe_json(v),
           "; transformers reads a string or a list of {\"name\", \"template\"}");
  for (const nlohmann::json& named : v) {
    if (named.is_object() && named.value("name", nlohmann::json()) == "default" &&
        named.contains("template") && named["template"].is_string()) {
      t.text = named["template"].get<std::string>();
      t.file = where + " (chat_template \"default\")";
      return t;
    }
  }
  t.file = where + " (chat_template, a list without \"default\")";
  t.text = "";  // no template apply_chat_template would take by default: not a known one
  return t;
}

std::string chat_template_hash(std::string_view text) {
  std::string s;
  s.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    s += text[i];
  }
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return content_hash("");
  const size_t end = s.find_last_not_of(" \t\r\n");
  return content_hash(std::string_view(s).substr(begin, end - begin + 1));
}

const std::vector<std::string>& known_chat_template_hashes() {
  static const std::vector<std::string> known = {
      "c696e72a60815cff1f1d1b7bafe80dfc",  // Qwen3 as released (tests/golden/tokenizer)
  };
  return known;
}

ChatTemplateCheck check_chat_template(const std::string& dir, const std::string& allow_flag) {
  ChatTemplateCheck c;
  const FolderChatTemplate t = read_folder_chat_template(dir);
  if (!t.broken.empty()) {
    c.mismatch = true;
    c.problem = t.broken +
                " is not a file (a folder, or a link to nothing), so this folder's chat "
                "template cannot be read, by transformers either; fix the folder, give "
                "pre-tokenized lines (input_ids), or pass " +
                allow_flag + " to render with chunkgrad's Qwen3 template (docs/chat_data.md)";
    return c;
  }
  if (t.file.empty()) {
    c.problem = "the tokenizer's folder " + dir +
                " has no chat template (no chat_template.jinja, no chat_template in "
                "tokenizer_config.json); conversations are rendered with chunkgrad's Qwen3 chat "
                "template (docs/chat_data.md)";
    return c;
  }
  const std::string hash = chat_template_hash(t.text);
  const auto& known = known_chat_template_hashes();
  if (std::find(known.begin(), known.end(), hash) != known.end()) return c;
  c.mismatch = true;
  c.problem = "the chat template in " + t.file + " (hash " + hash +
              ") is not the Qwen3 template chunkgrad renders conversations with, so the "
              "drafter would learn from text other than what transformers' "
              "apply_chat_template gives this target; give pre-tokenized lines (input_ids) "
              "rendered with the folder's template, or pass " +
              allow_flag + " to render with chunkgrad's Qwen3 template anyway (docs/chat_data.md)";
  return c;
}

}  // namespace cg::train
