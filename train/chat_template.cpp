// Why this file exists: the Qwen3 chat template's rendering (Note [The Qwen3 template] in
// train/chat_data.h) and the loss mask over its tokens (Note [The loss mask]), apart from
// reading files (chat_data.cpp) so that tests can check them line by line against what
// Hugging Face's apply_chat_template renders (tests/chat_golden_test.cpp).
#include <algorithm>

#include "core/error.h"
#include "train/chat_data.h"

namespace cg::train {

namespace {

// Python's str.lstrip('\n') / rstrip('\n').
std::string_view lstrip_newlines(std::string_view s) {
  const size_t at = s.find_first_not_of('\n');
  return at == std::string_view::npos ? std::string_view() : s.substr(at);
}
std::string_view rstrip_newlines(std::string_view s) {
  const size_t at = s.find_last_not_of('\n');
  return at == std::string_view::npos ? std::string_view() : s.substr(0, at + 1);
}

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kEmptyThink = "<think>\n\n</think>\n\n";

// The template's reverse scan: the last user message that is not a tool response.
// messages.size() - 1 when there is none (then no message is after it).
size_t last_query_index(const std::vector<ChatMessage>& messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string& c = messages[i].content;
    const bool tool_response = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (messages[i].role == "user" && !tool_response) return i;
  }
  return messages.empty() ? 0 : messages.size() - 1;
}

}  // namespace

RenderedChat render_qwen3_chat(const std::vector<ChatMessage>& messages) {
  RenderedChat out;
  std::string& text = out.text;
  const size_t last_query = last_query_index(messages);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system" || m.role == "user") {  // a first system message is its own
      text += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";  // turn; later ones
      continue;                                                             // render the same
    }
    CG_CHECK(m.role == "assistant", "chat message ", i, ": role '", m.role,
             "' is not one of system, user, assistant (tool calls and tool results are not "
             "supported)");
    std::string_view content = m.content;
    std::string reasoning;
    if (m.reasoning) {
      reasoning = *m.reasoning;
    } else if (content.find(kThinkClose) != std::string_view::npos) {
      // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
      std::string_view before = rstrip_newlines(content.substr(0, content.find(kThinkClose)));
      const size_t open = before.rfind(kThinkOpen);
      if (open != std::string_view::npos) before = before.substr(open + kThinkOpen.size());
      reasoning = std::string(lstrip_newlines(before));
      // content.split('</think>')[-1].lstrip('\n')
      content = lstrip_newlines(content.substr(content.rfind(kThinkClose) + kThinkClose.size()));
    }
    text += "<|im_start|>assistant\n";
    size_t answer = text.size();
    const bool last = i + 1 == messages.size();
    if (i > last_query && (last || !reasoning.empty())) {
      // reasoning_content.strip('\n')
      const std::string_view inner = rstrip_newlines(lstrip_newlines(reasoning));
      const std::string block = "<think>\n" + std::string(inner) + "\n</think>\n\n";
      text += block;
      if (block == kEmptyThink) answer = text.size();  // the prompt's own block
      text += lstrip_newlines(content);
    } else {
      text += content;
    }
    text += "<|im_end|>";
    out.answers.emplace_back(answer, text.size());
    text += "\n";
  }
  return out;
}

DrafterSequence tokenize_chat(const RenderedChat& chat, const ChatEncoder& encode) {
  HfTokenizer::Encoding e = encode(chat.text);
  CG_CHECK(e.offsets.size() == e.ids.size(), "chat tokenizer: ", e.ids.size(), " ids but ",
           e.offsets.size(), " offsets");
  DrafterSequence s;
  s.ids = std::move(e.ids);
  s.loss_mask.assign(s.ids.size(), 0);
  // Both lists are in text order: walk them together.
  size_t a = 0;
  for (size_t t = 0; t < s.ids.size(); ++t) {
    const auto [begin, end] = e.offsets[t];
    while (a < chat.answers.size() && chat.answers[a].second <= begin) ++a;
    if (a < chat.answers.size() && chat.answers[a].first < end) s.loss_mask[t] = 1;
  }
  return s;
}

}  // namespace cg::train
