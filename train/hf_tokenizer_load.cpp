// Why this file exists: a tokenizer.json is checked field by field when it is read, so
// that a malformed or unsupported file is ONE error naming the field ("model.merges[12]:
// 'a b' merges into 'ab', which model.vocab lacks") instead of ids that differ from the
// target's training data without a word. Anything this tokenizer would not reproduce
// exactly (another model type, a normaliser other than NFC, lstrip on an added token, a
// post-processor that adds tokens, truncation or fixed padding) is refused the same way.
#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "train/hf_tokenizer_impl.h"

namespace cg::train {

namespace {

using nlohmann::json;

// Error text and typed reads that name the file and the field.
struct FieldReader {
  std::string origin;

  template <typename... Args>
  [[noreturn]] void fail(const std::string& field, const Args&... what) const {
    CG_FAIL("tokenizer.json ", origin, ": ", field, ": ", what...);
  }
  const json& get(const json& object, const std::string& key, const std::string& field) const {
    auto it = object.find(key);
    if (it == object.end()) fail(field, "missing");
    return *it;
  }
  std::string string_of(const json& v, const std::string& field) const {
    if (!v.is_string()) fail(field, "expected a string, got ", describe_json(v));
    return v.get<std::string>();
  }
  bool bool_or(const json& object, const std::string& key, bool fallback,
               const std::string& field) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (!it->is_boolean())
      fail(field + "." + key, "expected true or false, got ", describe_json(*it));
    return it->get<bool>();
  }
  int64_t id_of(const json& v, const std::string& field) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      fail(field, "expected a token id (an integer from 0 to 2^31 - 1), got ", describe_json(v));
    return v.get<int64_t>();
  }
  // The object's "type" ("NFC", "Sequence", ...).
  std::string type_of(const json& v, const std::string& field) const {
    if (!v.is_object()) fail(field, "expected an object with a \"type\", got ", describe_json(v));
    return string_of(get(v, "type", field + ".type"), field + ".type");
  }
  // Empty or null: prefixes and suffixes the byte-level BPE does not use.
  void require_empty(const json& object, const std::string& key, const std::string& field) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty()))
      return;
    fail(field + "." + key, describe_json(*it),
         " is not supported (a byte-level BPE has none): expected \"\" or null");
  }
};

void add_token(HfTokenizer::Impl& t, const std::string& token, int64_t id, const FieldReader& r,
               const std::string& field) {
  if (static_cast<int64_t>(t.tokens.size()) <= id) {
    t.tokens.resize(id + 1);
    t.has_token.resize(id + 1, false);
    t.special.resize(id + 1, false);
  }
  if (t.has_token[id] && t.tokens[id] != token)
    r.fail(field, "id ", id, " is given to both '", t.tokens[id], "' and '", token, "'");
  t.tokens[id] = token;
  t.has_token[id] = true;
  t.token_ids[token] = id;
}

void read_normalizer(HfTokenizer::Impl& t, const json& n, const FieldReader& r,
                     const std::string& field) {
  if (n.is_null()) return;
  const std::string type = r.type_of(n, field);
  if (type == "NFC") {
    t.nfc = true;
  } else if (type == "Sequence") {
    const json& list = r.get(n, "normalizers", field + ".normalizers");
    if (!list.is_array()) r.fail(field + ".normalizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      read_normalizer(t, list[i], r, field + ".normalizers[" + std::to_string(i) + "]");
  } else {
    r.fail(field + ".type", "'", type, "' is not supported (NFC, a Sequence of NFC, or null)");
  }
}

// Returns whether a ByteLevel step was seen (it must be the last).
bool read_pre_tokenizer(HfTokenizer::Impl& t, const json& p, const FieldReader& r,
                        const std::string& field, bool byte_level_seen) {
  const std::string type = r.type_of(p, field);
  if (byte_level_seen) r.fail(field, "a step after ByteLevel is not supported");
  if (type == "Sequence") {
    const json& list = r.get(p, "pretokenizers", field + ".pretokenizers");
    if (!list.is_array()) r.fail(field + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      byte_level_seen = read_pre_tokenizer(
          t, list[i], r, field + ".pretokenizers[" + std::to_string(i) + "]", byte_level_seen);
    return byte_level_seen;
  }
  if (type == "Split") {
    const json& pattern = r.get(p, "pattern", field + ".pattern");
    const bool is_regex = pattern.is_object() && pattern.contains("Regex");
    if (!is_regex && !(pattern.is_object() && pattern.contains("String")))
      r.fail(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}, got ",
             describe_json(pattern));
    const std::string key = is_regex ? "Regex" : "String";
    const std::string text = r.string_of(pattern[key], field + ".pattern." + key);
    const std::string behavior =
        r.string_of(r.get(p, "behavior", field + ".behavior"), field + ".behavior");
    if (behavior != "Isolated")
      r.fail(field + ".behavior", "'", behavior, "' is not supported (only Isolated)");
    if (r.bool_or(p, "invert", false, field)) r.fail(field + ".invert", "true is not supported");
    t.splits.emplace_back(text, !is_regex,
                          "tokenizer.json " + r.origin + ": " + field + ".pattern." + key);
    return false;
  }
  if (type == "ByteLevel") {
    if (r.bool_or(p, "add_prefix_space", false, field))
      r.fail(field + ".add_prefix_space",
             "true is not supported (Qwen and GPT-4 style files have false)");
    if (r.bool_or(p, "use_regex", true, field))
      t.splits.emplace_back(hf_text::kGpt2SplitPattern, false, "GPT-2's regex");
    return true;
  }
  r.fail(field + ".type", "'", type, "' is not supported (Sequence, Split, ByteLevel)");
}

void read_model(HfTokenizer::Impl& t, const json& m, const FieldReader& r) {
  if (!m.is_object()) r.fail("model", "expected an object");
  if (m.contains("type")) {
    const std::string type = r.string_of(m["type"], "model.type");
    if (type != "BPE") r.fail("model.type", "'", type, "' is not supported (only BPE)");
  }
  if (m.contains("dropout") && !m["dropout"].is_null() &&
      !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0))
    r.fail("model.dropout", describe_json(m["dropout"]),
           " is not supported (BPE dropout is random): expected null");
  r.require_empty(m, "continuing_subword_prefix", "model");
  r.require_empty(m, "end_of_word_suffix", "model");
  t.ignore_merges = r.bool_or(m, "ignore_merges", false, "model");

  const json& vocab = r.get(m, "vocab", "model.vocab");
  if (!vocab.is_object()) r.fail("model.vocab", "expected an object {token: id}");
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    add_token(t, it.key(), r.id_of(it.value(), "model.vocab['" + it.key() + "']"), r,
              "model.vocab");
  const auto& chars = hf_text::byte_level_chars();
  for (int b = 0; b < 256; ++b) {
    auto it = t.token_ids.find(chars[b]);
    if (it == t.token_ids.end())
      r.fail("model.vocab", "no token for byte ", b, " ('", chars[b],
             "'): a byte-level BPE vocabulary holds all 256 byte symbols");
    t.byte_ids[b] = static_cast<int32_t>(it->second);
  }

  const json& merges = r.get(m, "merges", "model.merges");
  if (!merges.is_array()) r.fail("model.merges", "expected an array");
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    const json& e = merges[i];
    std::string left, right;
    if (e.is_string()) {  // "a b" (files written before tokenizers 0.20)
      const std::string s = e.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        r.fail(field, "expected \"left right\" (one space), got ", describe_json(e));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (e.is_array() && e.size() == 2) {  // ["a", "b"]
      left = r.string_of(e[0], field + "[0]");
      right = r.string_of(e[1], field + "[1]");
    } else {
      r.fail(field, "expected \"left right\" or [\"left\", \"right\"], got ", describe_json(e));
    }
    auto find = [&](const std::string& token) {
      auto it = t.token_ids.find(token);
      if (it == t.token_ids.end() || it->second >= static_cast<int64_t>(t.tokens.size()))
        r.fail(field, "'", token, "' is not in model.vocab");
      return it->second;
    };
    const int64_t a = find(left), b = find(right);
    auto merged = t.token_ids.find(left + right);
    if (merged == t.token_ids.end())
      r.fail(field, "'", left, " ", right, "' merges into '", left + right,
             "', which model.vocab lacks");
    // A pair listed twice keeps its last rank, as in `tokenizers` (a map built in order).
    t.merges.insert_or_assign(
        (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b),
        std::pair<int32_t, int32_t>(static_cast<int32_t>(i), static_cast<int32_t>(merged->second)));
  }
}

void read_added_tokens(HfTokenizer::Impl& t, const json& list, const FieldReader& r) {
  if (list.is_null()) return;
  if (!list.is_array()) r.fail("added_tokens", "expected an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    const json& e = list[i];
    if (!e.is_object()) r.fail(field, "expected an object");
    HfAddedToken token;
    token.id = r.id_of(r.get(e, "id", field + ".id"), field + ".id");
    token.content = r.string_of(r.get(e, "content", field + ".content"), field + ".content");
    if (token.content.empty()) r.fail(field + ".content", "empty");
    hf_text::check_utf8(token.content, "tokenizer.json " + r.origin + ": " + field + ".content");
    token.special = r.bool_or(e, "special", false, field);
    token.normalized = r.bool_or(e, "normalized", !token.special, field);
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      if (r.bool_or(e, flag, false, field))
        r.fail(field + "." + flag, "true is not supported (Qwen's added tokens have false)");
    }
    add_token(t, token.content, token.id, r, field);
    t.special[token.id] = token.special;
    if (token.normalized && t.nfc) token.content = hf_text::nfc(token.content);
    t.added.push_back(std::move(token));
  }
  // Longest first: at one position the longest token wins (leftmost-longest matching).
  std::stable_sort(t.added.begin(), t.added.end(),
                   [](const HfAddedToken& a, const HfAddedToken& b) {
                     return a.content.size() > b.content.size();
                   });
  for (size_t i = 0; i < t.added.size(); ++i) {
    const HfAddedToken& a = t.added[i];
    t.added_by_first_byte[a.normalized ? 1 : 0][static_cast<unsigned char>(a.content[0])].push_back(
        static_cast<int32_t>(i));
  }
}

// `tokenizers` applies a file's truncation and padding to every encode: a file saved with
// truncation on cuts long texts, and fixed-length padding appends pad ids. Encoding here
// does neither, so such a file is refused rather than giving other ids without a word.
// Padding to the batch's longest sequence leaves one text as it is, and is accepted.
void read_truncation_and_padding(const json& root, const FieldReader& r) {
  const json truncation = root.value("truncation", json());
  if (!truncation.is_null())
    r.fail("truncation", describe_json(truncation),
           " is not supported (tokenizers would cut every long text): set it to null");
  const json padding = root.value("padding", json());
  if (padding.is_null()) return;
  if (!padding.is_object())
    r.fail("padding", "expected an object or null, got ", describe_json(padding));
  const json strategy = padding.value("strategy", json());
  const json multiple = padding.value("pad_to_multiple_of", json());
  if (strategy != "BatchLongest")
    r.fail("padding.strategy", describe_json(strategy),
           " is not supported (tokenizers would pad every text to a fixed length): set "
           "padding to null");
  if (!multiple.is_null())
    r.fail("padding.pad_to_multiple_of", describe_json(multiple),
           " is not supported (tokenizers would pad every text): set it to null");
}

}  // namespace

std::unique_ptr<HfTokenizer::Impl> load_hf_tokenizer(std::string_view json_text,
                                                     const std::string& origin) {
  const FieldReader r{origin};
  // A hostile file nested 100,000 deep would overflow the stack when a message shows a
  // value (core/json_input.h): refused before parsing; messages use describe_json.
  check_json_depth(json_text, "tokenizer.json " + origin);
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    CG_FAIL("tokenizer.json ", origin, ": not valid JSON (", e.what(), ")");
  }
  if (!root.is_object()) r.fail("(top level)", "expected an object");
  auto t = std::make_unique<HfTokenizer::Impl>();
  read_normalizer(*t, root.value("normalizer", json()), r, "normalizer");
  if (!read_pre_tokenizer(*t, r.get(root, "pre_tokenizer", "pre_tokenizer"), r, "pre_tokenizer",
                          false))
    r.fail("pre_tokenizer", "no ByteLevel step: only byte-level BPE tokenizers are supported");
  read_model(*t, r.get(root, "model", "model"), r);
  // Added tokens after the model: their ids may extend or repeat the model's.
  read_added_tokens(*t, root.value("added_tokens", json::array()), r);

  read_truncation_and_padding(root, r);

  const json& decoder = r.get(root, "decoder", "decoder");
  if (r.type_of(decoder, "decoder") != "ByteLevel")
    r.fail("decoder.type", "'", decoder["type"].get<std::string>(),
           "' is not supported (only ByteLevel)");
  const json post = root.value("post_processor", json());
  if (!post.is_null() && r.type_of(post, "post_processor") != "ByteLevel")
    r.fail("post_processor.type", "'", post["type"].get<std::string>(),
           "' is not supported (ByteLevel or null: chunkgrad adds no tokens after encoding; the "
           "chat template writes them)");
  return t;
}

HfTokenizer HfTokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CG_CHECK(in, "cannot open the tokenizer file '", path, "'");
  std::stringstream text;
  text << in.rdbuf();
  return HfTokenizer(load_hf_tokenizer(text.str(), path));
}

HfTokenizer HfTokenizer::from_json(std::string_view json_text, const std::string& origin) {
  return HfTokenizer(load_hf_tokenizer(json_text, origin));
}

}  // namespace cg::train
