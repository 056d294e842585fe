// Why this file exists: a real target (a Hugging Face Qwen3 checkpoint) comes with its own
// vocabulary, and chat data, regeneration and features need the ids that target was
// trained on. This reads the checkpoint's `tokenizer.json` (the byte-level BPE of the
// Qwen family) and encodes and decodes exactly as Hugging Face `tokenizers` does. The toy
// pipeline keeps its ByteTokenizer (train/tokenizer.h).
//
//   auto tok = cg::train::HfTokenizer::from_file("Qwen3-8B/tokenizer.json");
//   std::vector<int64_t> ids = tok.encode("<|im_start|>user\nhi<|im_end|>");
//   std::string text = tok.decode(ids);               // the same text back
//   int64_t end = tok.token_to_id("<|im_end|>").value();
//
// Note [The encode pipeline] (what `tokenizers` does, in its order):
//   1. added tokens (special or not, e.g. <|im_start|>, <think>) are found in the raw text
//      first, leftmost and then longest match, and become their ids whole; only the text
//      between them goes on (tokens marked "normalized" are looked for after step 2);
//   2. the normaliser: NFC (utf8proc) or none;
//   3. the pre-tokenizer: the split regex (PCRE2, Unicode properties), every match and
//      every gap a piece of its own ("Isolated"), then ByteLevel: each byte of a piece
//      becomes one printable character of GPT-2's byte alphabet (0x20 -> 'Ġ');
//   4. BPE inside each piece: the adjacent pair with the lowest merge rank is merged,
//      leftmost first among equal ranks, until no pair has a rank; each symbol's id.
// There is no post-processor step: byte-level BPE files carry none that adds tokens
// (a TemplateProcessing one is refused at load), and nothing is truncated or padded.
//
// Note [Decode]: each token's text goes through the ByteLevel decoder: a token whose
// characters are all in the byte alphabet becomes those bytes, any other (an added token
// such as "<|im_end|>", whose ASCII maps to itself anyway) its own UTF-8. Unlike
// `tokenizers`, which replaces invalid UTF-8 by U+FFFD, the bytes are returned as they
// are: ids cut mid-character decode to the partial bytes, and concatenating the decodes
// of consecutive pieces gives the decode of the whole.
//
// Note [Offsets]: encode_with_offsets gives each token the byte range [begin, end) of the
// input text it came from (chat data derives its loss mask from them, train/chat_data.h).
// They are exact and in order wherever NFC leaves the text as it is. Where NFC changed it,
// a token's range is that of the run of input whose normal form holds the token's bytes
// (a run: an ASCII byte and the non-ASCII bytes after it), so tokens of one such run share
// its range.
//
// Built only when libpcre2-dev and libutf8proc-dev are present (CHUNKGRAD_TOKENIZER in
// CMakeLists.txt); a build without them leaves train/hf_tokenizer*.cpp out.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cg::train {

class HfTokenizer {
 public:
  // Reads and checks a tokenizer.json. A file that is not a byte-level BPE tokenizer
  // this class reproduces exactly, or is malformed, throws cg::Error naming the file and
  // the field ("model.merges[12]: ...").
  static HfTokenizer from_file(const std::string& path);
  // The same from the JSON text; `origin` names it in errors.
  static HfTokenizer from_json(std::string_view json_text, const std::string& origin);

  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer();

  // The ids of `text` (Note [The encode pipeline]). Throws when text is not valid UTF-8,
  // naming the byte offset.
  std::vector<int64_t> encode(std::string_view text) const;
  // The same ids and, for each, its byte range in `text` (Note [Offsets]).
  struct Encoding {
    std::vector<int64_t> ids;
    std::vector<std::pair<size_t, size_t>> offsets;  // [begin, end) per id
  };
  Encoding encode_with_offsets(std::string_view text) const;
  // The text of `ids` (Note [Decode]); skip_special leaves special added tokens out.
  // Throws for an id no token has.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = false) const;

  // The id of a token spelled as in tokenizer.json ("<|im_end|>", "Ġthe"), if any.
  std::optional<int64_t> token_to_id(std::string_view token) const;
  // The spelling of an id; throws for an id no token has.
  const std::string& id_to_token(int64_t id) const;
  bool is_special(int64_t id) const;
  // The highest id + 1: the least embedding size that covers every token (Qwen3's
  // tokenizer has 151669 ids; its checkpoints pad the embedding to 151936).
  int64_t vocab_size() const;

  struct Impl;  // train/hf_tokenizer_impl.h

 private:
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cg::train
