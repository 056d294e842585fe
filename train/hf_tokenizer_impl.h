// Why this file exists: the parts of HfTokenizer (train/hf_tokenizer.h) that its three
// source files share and its users need not see: the loaded tables, the PCRE2 split
// regex, NFC and UTF-8 checks through utf8proc, and GPT-2's byte alphabet.
//   hf_tokenizer_load.cpp  tokenizer.json -> Impl, every field checked
//   hf_tokenizer_text.cpp  UTF-8, NFC, the regex split, the byte alphabet
//   hf_tokenizer.cpp       encode (added tokens, BPE merges) and decode
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "train/hf_tokenizer.h"

namespace cg::train {

namespace hf_text {

// Throws cg::Error when `text` is not valid UTF-8, naming `what` and the byte offset.
void check_utf8(std::string_view text, const std::string& what);
// The NFC form of valid UTF-8 text (utf8proc).
std::string nfc(std::string_view text);
// The Unicode code points of valid UTF-8 text.
std::vector<int32_t> code_points(std::string_view text);

// A compiled split pattern (PCRE2, UTF + Unicode properties, JIT when available).
class SplitRegex {
 public:
  // literal: the pattern is plain text ("String" patterns), not a regex. Throws with
  // PCRE2's message and offset naming `field` when it does not compile.
  SplitRegex(const std::string& pattern, bool literal, const std::string& field);
  SplitRegex(SplitRegex&&) noexcept;
  ~SplitRegex();
  // Appends to `out` every match and every gap between matches of `text` (valid
  // UTF-8), in order, empty pieces left out: the "Isolated" split behaviour.
  void split_isolated(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
};

// GPT-2's byte alphabet: byte b as the UTF-8 of one printable code point (bytes 33..126,
// 161..172 and 174..255 are their own code point; the others are 256, 257, ... in order).
const std::array<std::string, 256>& byte_level_chars();
// The byte a code point of that alphabet stands for, or -1.
int byte_of_code_point(int32_t cp);

// The regex the ByteLevel pre-tokenizer applies itself when its use_regex is true (GPT-2).
extern const char* const kGpt2SplitPattern;

}  // namespace hf_text

struct HfAddedToken {
  std::string content;  // as matched: NFC'd when `normalized`
  int64_t id = 0;
  bool special = false;
  bool normalized = false;  // looked for after the normaliser (else in the raw text)
};

struct HfTokenizer::Impl {
  std::unordered_map<std::string, int64_t> token_ids;  // model vocab and added tokens
  std::vector<std::string> tokens;                     // by id; "" for an id no token has
  std::vector<bool> has_token, special;                // by id
  std::array<int32_t, 256> byte_ids{};                 // id of each byte's one-char token
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  std::vector<HfAddedToken> added;  // longest first
  // Indices into `added` by the content's first byte, longest first; [0] the tokens
  // looked for in the raw text, [1] those looked for after the normaliser.
  std::array<std::array<std::vector<int32_t>, 256>, 2> added_by_first_byte;
  bool nfc = false;
  bool ignore_merges = false;               // a piece that is one vocab token whole is that token
  std::vector<hf_text::SplitRegex> splits;  // applied in order, each on the last's pieces
};

// Parses tokenizer.json text into the tables; hf_tokenizer_load.cpp.
std::unique_ptr<HfTokenizer::Impl> load_hf_tokenizer(std::string_view json_text,
                                                     const std::string& origin);

}  // namespace cg::train
