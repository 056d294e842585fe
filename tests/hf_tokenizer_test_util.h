// Why this file exists: the tokenizer tests (hf_tokenizer_test.cpp, tokenize_program_test.cpp)
// need a tokenizer.json whose ids can be worked out by hand. This builds one: the Qwen
// split regex and NFC, ids 0..255 for the bytes (id b = byte b), nine merges, and four
// added tokens. The byte alphabet is spelled here independently of train/, so that a
// mistake there shows up as a wrong id instead of cancelling out.
//
//   id   token     merge rank        id   added token       special
//   256  Ġt        0  (Ġ t)          300  <|im_start|>      yes
//   257  he        1  (h e)          301  <|im_end|>        yes
//   258  Ġthe      2  (Ġt he)        302  <|endoftext|>     yes
//   259  ll        3  (l l)          303  <think>           no
//   260  llo       4  (ll o)
//   261  aa        5  (a a)
//   262  aaa       6  (aa a)
//   263  ĠĠ        7  (Ġ Ġ)
//   264  oĠ        8  (o Ġ)     never applies: the regex keeps "o" and " x" apart
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace hf_tokenizer_test {

// Qwen2 / Qwen2.5 / Qwen3's pre-tokenizer pattern, as their tokenizer.json spells it.
inline const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode: byte b as one character (UTF-8), as the Python original builds it.
inline std::string byte_char(int b) {
  const bool own = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  int cp = b;
  if (!own) {
    cp = 256;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++cp;
    }
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // every code point here is below 0x800: two bytes
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

inline nlohmann::json tiny_tokenizer_json() {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::string G = byte_char(' ');  // "Ġ"
  const std::vector<std::pair<std::string, std::string>> merges = {
      {G, "t"},   {"h", "e"},  {G + "t", "he"}, {"l", "l"}, {"ll", "o"},
      {"a", "a"}, {"aa", "a"}, {G, G},          {"o", G}};
  json merge_list = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merge_list.push_back(json::array({a, b}));
  }
  json added = json::array();
  int added_id = 300;
  for (const char* name : {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>"}) {
    const bool special = std::string(name) != "<think>";
    added.push_back({{"id", added_id++},
                     {"content", name},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special}});
  }
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}};
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Split"},
                                        {"pattern", {{"Regex", kQwenPattern}}},
                                        {"behavior", "Isolated"},
                                        {"invert", false}},
                                       byte_level})}}},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}},
  };
}

}  // namespace hf_tokenizer_test
