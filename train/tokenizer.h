// Why this file exists: the toy pipeline (corpus -> target -> drafter -> speculative
// decoding) needs token ids for text, and the drafter needs one reserved id, MASK, that
// no text ever produces. This is a byte-level tokenizer: id b < 256 is the byte b, and four
// special ids follow.
//
// Note [Why byte-level]: (1) there is nothing to train -- a BPE vocabulary would be one
// more pipeline stage, one more artefact to cache and version, and one more source of
// train/eval mismatch; (2) it is lossless for any input: every byte string, valid UTF-8
// or not, encodes and decodes back to itself, so a generated sequence can always be
// printed and compared byte for byte; (3) the vocabulary is tiny (260 ids), so the
// toy target's embedding and lm_head stay small and the 2-core CPU run spends its time in
// the transformer, not in a [hidden, 150K] head. The price is longer sequences (one token
// per byte; a CJK character is three), which the toy corpus can afford. A model whose
// vocabulary differs (a real Qwen3 checkpoint) brings its own ids; nothing else in the
// pipeline assumes bytes.
//
//   cg::train::ByteTokenizer tok;
//   std::vector<int64_t> ids = tok.encode("héllo", {.bos = true});  // [256, 104, 195, 169, ...]
//   std::string text = tok.decode(ids);                              // "héllo" (BOS skipped)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cg::train {

struct EncodeOptions {
  bool bos = false;  // prepend ByteTokenizer::kBos
  bool eos = false;  // append ByteTokenizer::kEos
};

class ByteTokenizer {
 public:
  static constexpr int64_t kNumBytes = 256;  // ids 0 .. 255 are the bytes themselves
  static constexpr int64_t kBos = 256;       // beginning of a sequence
  static constexpr int64_t kEos = 257;       // end of a sequence (generation stops here)
  static constexpr int64_t kPad = 258;       // filler in padded batches; never a label
  static constexpr int64_t kMask = 259;      // DFlash's MASK: block slots 1 .. B-1
  static constexpr int64_t kVocabSize = 260;

  int64_t vocab_size() const { return kVocabSize; }
  int64_t bos_id() const { return kBos; }
  int64_t eos_id() const { return kEos; }
  int64_t pad_id() const { return kPad; }
  int64_t mask_id() const { return kMask; }
  static bool is_special(int64_t id) { return id >= kNumBytes && id < kVocabSize; }

  // One id per byte of `text` (any bytes; UTF-8 is not required), plus BOS/EOS if asked.
  std::vector<int64_t> encode(std::string_view text, EncodeOptions options = {}) const;

  // The bytes of the byte ids, in order; special ids are skipped unless
  // keep_special, which writes them as "<|bos|>", "<|eos|>", "<|pad|>", "<|mask|>" (for
  // display: those spellings encode back to bytes, not to the special ids). Throws on an
  // id outside [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids, bool keep_special = false) const;

  // For display of a target's output, whose vocabulary may be larger than the bytes' (a
  // loaded checkpoint trained with another tokenizer): the bytes of the byte ids, special
  // ids skipped, any other id as "<id N>". Never throws.
  std::string decode_for_display(const std::vector<int64_t>& ids) const;

  // A readable form of one id for logs: printable ASCII as itself, other bytes as
  // "<0x0A>", specials as above.
  std::string token_str(int64_t id) const;

  // The display spelling of a special id ("<|mask|>"); throws for a byte id.
  static std::string special_name(int64_t id);
};

}  // namespace cg::train
