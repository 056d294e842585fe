// Why this file exists: reading chat and pre-tokenized JSONL into samples (train/chat_data.h):
// which form a line is, what makes it bad, and the count of bad lines per file.
//
// Note [Lines]: each non-blank line is one JSON object of exactly one form, told apart by
// its key:
//   "messages":      [{"role": system|user|assistant, "content": string,
//                      optional "reasoning_content": string or null}, ...]
//   "conversations": [{"from": system|human|user|gpt|assistant, "value": string}, ...]
//   "input_ids":     [ints], optional "loss_mask": [0/1, as many] (default all 1)
// and an optional "dataset": string. A line is bad when it is not a JSON object, has none
// or more than one of the three keys, its conversation is empty, has a role outside those
// (tool, function, ...), assistant "tool_calls", a content that is not a string, or no
// assistant turn (nothing to learn), when it holds fewer than 2 tokens, or ids outside
// the vocabulary. Other keys are ignored.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "train/chat_data.h"

namespace cg::train {

namespace {

using nlohmann::json;

// The string at j[key], or a bad-line error naming `where` and the key.
std::string string_field(const json& j, const char* key, const std::string& where) {
  CG_CHECK(j.contains(key), where, " has no \"", key, "\"");
  CG_CHECK(j[key].is_string(), where, ".", key, " must be a string, not ", describe_json(j[key]));
  return j[key].get<std::string>();
}

std::vector<ChatMessage> parse_messages(const json& list, bool sharegpt) {
  const char* list_key = sharegpt ? "conversations" : "messages";
  CG_CHECK(list.is_array(), "\"", list_key, "\" must be a list of ",
           sharegpt ? "{\"from\", \"value\"}" : "{\"role\", \"content\"}", " objects, not ",
           describe_json(list));
  CG_CHECK(!list.empty(), "the conversation is empty (\"", list_key, "\": [])");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    const std::string where = std::string(list_key) + "[" + std::to_string(i) + "]";
    CG_CHECK(m.is_object(), where, " must be an object, not ", describe_json(m));
    ChatMessage msg;
    const std::string role = string_field(m, sharegpt ? "from" : "role", where);
    if (sharegpt) {
      msg.role = role == "human" || role == "user"      ? "user"
                 : role == "gpt" || role == "assistant" ? "assistant"
                 : role == "system"                     ? "system"
                                                        : "";
    } else if (role == "system" || role == "user" || role == "assistant") {
      msg.role = role;
    }
    CG_CHECK(!msg.role.empty(), where, (sharegpt ? ".from " : ".role "),
             describe_json(m.at(sharegpt ? "from" : "role")),
             role == "tool" || role == "function" || role == "observation" || role == "ipython"
                 ? ": tool calls and tool results are not supported"
                 : ": unknown role",
             "; use ",
             sharegpt ? "system, human (or user), gpt (or assistant)" : "system, user, assistant");
    CG_CHECK(!m.contains("tool_calls") || m["tool_calls"].is_null() ||
                 (m["tool_calls"].is_array() && m["tool_calls"].empty()),
             where, " has tool_calls: tool calls are not supported");
    msg.content = string_field(m, sharegpt ? "value" : "content", where);
    if (!sharegpt && m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
      msg.reasoning = string_field(m, "reasoning_content", where);
    }
    out.push_back(std::move(msg));
  }
  CG_CHECK(std::any_of(out.begin(), out.end(),
                       [](const ChatMessage& m) { return m.role == "assistant"; }),
           "no assistant turn (nothing for the drafter to learn)");
  return out;
}

DrafterSequence parse_tokens(const json& j, int64_t vocab_size) {
  const json& ids = j["input_ids"];
  CG_CHECK(ids.is_array(), "\"input_ids\" must be a list of ints, not ", describe_json(ids));
  DrafterSequence s;
  for (size_t i = 0; i < ids.size(); ++i) {
    const json& v = ids[i];
    CG_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < vocab_size,
             "input_ids[", i, "] = ", describe_json(v), " is not a token id of the vocabulary",
             vocab_size == std::numeric_limits<int64_t>::max()
                 ? std::string(" (ids are ints >= 0)")
                 : " (0 .. " + std::to_string(vocab_size - 1) + ")");
    s.ids.push_back(v.get<int64_t>());
  }
  CG_CHECK(s.ids.size() >= 2, "input_ids has ", s.ids.size(), " tokens; a sample needs at least 2");
  if (!j.contains("loss_mask")) {
    s.loss_mask.assign(s.ids.size(), 1);
    return s;
  }
  const json& m = j["loss_mask"];
  CG_CHECK(m.is_array() && m.size() == s.ids.size(), "loss_mask must be an array of ", s.ids.size(),
           " entries (one per input id), got ", describe_json(m));
  for (size_t i = 0; i < m.size(); ++i) {
    const json& v = m[i];
    CG_CHECK(v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1),
             "loss_mask[", i, "] = ", describe_json(v), " is not 0 or 1");
    s.loss_mask.push_back(static_cast<uint8_t>(v.get<int64_t>()));
  }
  return s;
}

}  // namespace

std::optional<DataSample> parse_chat_line(const std::string& line, const std::string& file,
                                          int64_t line_number, const ChatDataOptions& options) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return std::nullopt;
  const json j = parse_untrusted_json(line, "the line");
  CG_CHECK(j.is_object(), "expected a JSON object, got ", describe_json(j));
  const int forms = static_cast<int>(j.contains("messages")) +
                    static_cast<int>(j.contains("conversations")) +
                    static_cast<int>(j.contains("input_ids"));
  CG_CHECK(forms == 1, forms == 0 ? "unknown form: " : "ambiguous form: ",
           "a line holds exactly one of \"messages\" (role/content), \"conversations\" "
           "(ShareGPT from/value) or \"input_ids\" (pre-tokenized)");
  DataSample s;
  s.file = file;
  s.line = line_number;
  if (j.contains("dataset")) {
    CG_CHECK(j["dataset"].is_string(), "\"dataset\" must be a string, not ",
             describe_json(j["dataset"]));
    s.dataset = j["dataset"].get<std::string>();
  } else {
    s.dataset = std::filesystem::path(file).stem().string();
  }
  CG_CHECK(!s.dataset.empty(), "\"dataset\" is empty; name the dataset or leave the key out");
  if (j.contains("input_ids")) {
    s.sequence = parse_tokens(j, options.vocab_size);
    return s;
  }
  const bool sharegpt = j.contains("conversations");
  const std::vector<ChatMessage> messages =
      parse_messages(j[sharegpt ? "conversations" : "messages"], sharegpt);
  CG_CHECK(static_cast<bool>(options.encode), "a conversation needs a tokenizer to become ids; ",
           options.no_tokenizer_hint);
  s.sequence = tokenize_chat(render_qwen3_chat(messages), options.encode);
  s.rendered = true;
  for (size_t i = 0; i < s.sequence.ids.size(); ++i) {
    CG_CHECK(s.sequence.ids[i] < options.vocab_size, "token ", i, " of the rendered text is id ",
             s.sequence.ids[i], ", outside the vocabulary (0 .. ", options.vocab_size - 1,
             "): the tokenizer does not belong to the target");
  }
  return s;
}

std::string DataFileReport::describe() const {
  std::string s = file + ": " + std::to_string(samples) + (samples == 1 ? " sample" : " samples");
  if (bad_lines == 0) return s;
  return s + "; " + std::to_string(bad_lines) + " bad line" + (bad_lines == 1 ? "" : "s") +
         " skipped (first: line " + std::to_string(first_bad_line) + ": " + first_bad_reason + ")";
}

std::vector<DrafterSequence> ChatData::sequences() const {
  std::vector<DrafterSequence> out;
  out.reserve(samples.size());
  for (const DataSample& s : samples) out.push_back(s.sequence);
  return out;
}

ChatData read_chat_data(const std::vector<std::string>& paths, const ChatDataOptions& options) {
  CG_CHECK(!paths.empty(), "no data files given");
  ChatData data;
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    CG_CHECK(in.is_open(), path, ": cannot be read");
    DataFileReport report;
    report.file = path;
    std::string line;
    for (int64_t number = 1; std::getline(in, line); ++number) {
      std::optional<DataSample> sample;
      try {
        sample = parse_chat_line(line, path, number, options);
      } catch (const Error& e) {
        CG_CHECK(!options.strict, path, ":", number, ": ", e.message(),
                 "; fix or remove this line (without strict checking bad lines are skipped)");
        if (report.bad_lines++ == 0) {
          report.first_bad_line = number;
          report.first_bad_reason = e.message();
        }
        continue;
      }
      if (!sample) continue;
      if (sample->rendered && !options.template_problem.empty()) {  // Note [Chat template check]
        CG_CHECK(!options.template_problem_is_error, path, ":", number, " is a conversation, but ",
                 options.template_problem);
        data.template_warning = options.template_problem;
      }
      ++report.samples;
      data.samples.push_back(std::move(*sample));
    }
    data.files.push_back(std::move(report));
  }
  if (data.samples.empty()) {
    std::string why;
    for (const DataFileReport& f : data.files) why += (why.empty() ? "" : "; ") + f.describe();
    CG_FAIL("no samples in the data (", why, ")");
  }
  return data;
}

void warn_past_context(int64_t max_position_embeddings, int64_t positions,
                       const std::string& what) {
  if (max_position_embeddings <= 0 || positions <= max_position_embeddings) return;
  std::fprintf(stderr,
               "warning: %s reaches %lld positions, past the target's max_position_embeddings "
               "(%lld, config.json): the model was not trained that far\n",
               what.c_str(), static_cast<long long>(positions),
               static_cast<long long>(max_position_embeddings));
}

}  // namespace cg::train
