// Why this file exists: the Unicode work of HfTokenizer, handed to the libraries that do
// it right: utf8proc for UTF-8 checks and NFC, PCRE2 for the split regex (\p{L}, \p{N},
// case-insensitive groups and a lookahead, which std::regex and RE2 lack). No Unicode
// table or regex engine is written here.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "train/hf_tokenizer_impl.h"

namespace cg::train::hf_text {

namespace {

const uint8_t* bytes_of(std::string_view text) {
  return reinterpret_cast<const uint8_t*>(text.data());
}

bool is_ascii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

void check_utf8(std::string_view text, const std::string& what) {
  if (is_ascii(text)) return;
  size_t at = 0;
  while (at < text.size()) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n =
        utf8proc_iterate(bytes_of(text) + at, static_cast<utf8proc_ssize_t>(text.size() - at), &cp);
    CG_CHECK(n > 0, what, " is not valid UTF-8 (at byte ", at,
             "); the tokenizer reads Unicode text: convert it to UTF-8 first");
    at += static_cast<size_t>(n);
  }
}

std::string nfc(std::string_view text) {
  if (is_ascii(text)) return std::string(text);  // ASCII is its own NFC
  utf8proc_uint8_t* out = nullptr;
  // A length instead of UTF8PROC_NULLTERM: a NUL inside the text is a character too.
  const utf8proc_ssize_t n =
      utf8proc_map(bytes_of(text), static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  CG_CHECK(n >= 0, "NFC normalisation failed: ", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

std::vector<int32_t> code_points(std::string_view text) {
  std::vector<int32_t> cps;
  size_t at = 0;
  while (at < text.size()) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n =
        utf8proc_iterate(bytes_of(text) + at, static_cast<utf8proc_ssize_t>(text.size() - at), &cp);
    CG_CHECK(n > 0, "invalid UTF-8 at byte ", at);
    cps.push_back(cp);
    at += static_cast<size_t>(n);
  }
  return cps;
}

// ---- the split regex ----

SplitRegex::SplitRegex(const std::string& pattern, bool literal, const std::string& field) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0u);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    CG_FAIL(field, ": the pattern does not compile (PCRE2: ", reinterpret_cast<char*>(message),
            ", at offset ", offset, ")");
  }
  // JIT makes the split several times faster; without it (a PCRE2 built without JIT, or
  // a platform it does not support) the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

SplitRegex::SplitRegex(SplitRegex&& other) noexcept : code_(other.code_) { other.code_ = nullptr; }

SplitRegex::~SplitRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

// Note [U+180E]: `tokenizers` runs its regexes with Oniguruma, whose \s is Unicode's
// White_Space property. PCRE2's \s (with UCP) is that set plus U+180E MONGOLIAN VOWEL
// SEPARATOR, which it keeps from its old horizontal-space list although Unicode 6.3 made
// it a format character (Cf). So that splits agree, the regex runs on a copy of the text in
// which each U+180E is U+200B ZERO WIDTH SPACE -- also Cf, not \s, not \p{L} or \p{N} in
// both engines, and three bytes long too -- and the pieces are cut from the original text
// at the same offsets. (Found by comparing 400 random strings with `tokenizers` 0.23; no
// other character differed.)
void SplitRegex::split_isolated(std::string_view original,
                                std::vector<std::string_view>& out) const {
  constexpr std::string_view kMongolianVowelSeparator = "\xE1\xA0\x8E",
                             kZeroWidthSpace = "\xE2\x80\x8B";
  std::string shadow;
  std::string_view text = original;
  if (original.find(kMongolianVowelSeparator) != std::string_view::npos) {
    shadow = original;
    for (size_t at = shadow.find(kMongolianVowelSeparator); at != std::string::npos;
         at = shadow.find(kMongolianVowelSeparator, at + 3))
      shadow.replace(at, 3, kZeroWidthSpace);
    text = shadow;
  }
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0, gap = 0;  // where the search resumes; where the unmatched text begins
  while (start <= text.size()) {
    const int rc =
        pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      CG_FAIL("the tokenizer's split regex failed on a text of ", text.size(),
              " bytes (PCRE2: ", reinterpret_cast<char*>(message), ")");
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (begin > gap) out.push_back(original.substr(gap, begin - gap));
    if (end > begin) {
      out.push_back(original.substr(begin, end - begin));
      start = gap = end;
    } else {
      // An empty match: no piece; resume one character later.
      gap = begin;
      start = begin + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
        ++start;
    }
  }
  if (gap < text.size()) out.push_back(original.substr(gap));
}

// ---- GPT-2's byte alphabet ----

namespace {

bool is_own_code_point(int b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
}

std::string utf8_of(int32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
  return std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> c;
    int32_t next = 256;
    for (int b = 0; b < 256; ++b) c[b] = utf8_of(is_own_code_point(b) ? b : next++);
    return c;
  }();
  return chars;
}

int byte_of_code_point(int32_t cp) {
  static const std::vector<int> bytes = [] {
    std::vector<int> v(256 + 68, -1);  // 68 bytes are not their own code point
    int32_t next = 256;
    for (int b = 0; b < 256; ++b) v[is_own_code_point(b) ? b : next++] = b;
    return v;
  }();
  return cp >= 0 && cp < static_cast<int32_t>(bytes.size()) ? bytes[cp] : -1;
}

const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace cg::train::hf_text
