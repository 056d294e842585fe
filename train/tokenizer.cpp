// Why this file exists: the byte-level tokenizer of tokenizer.h (Note [Why byte-level]).
#include "train/tokenizer.h"

#include <cstdio>

#include "core/error.h"

namespace cg::train {

namespace {
void check_id(int64_t id, size_t index) {
  CG_CHECK(id >= 0 && id < ByteTokenizer::kVocabSize, "ByteTokenizer: id ", id, " at index ", index,
           " is not a token id; ids are 0..255 (bytes) and 256..259 (BOS, EOS, PAD, MASK)");
}
}  // namespace

std::vector<int64_t> ByteTokenizer::encode(std::string_view text, EncodeOptions options) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() + 2);
  if (options.bos) ids.push_back(kBos);
  for (char c : text) ids.push_back(static_cast<int64_t>(static_cast<unsigned char>(c)));
  if (options.eos) ids.push_back(kEos);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids, bool keep_special) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    check_id(ids[i], i);
    if (ids[i] < kNumBytes) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(ids[i])));
    } else if (keep_special) {
      text += special_name(ids[i]);
    }
  }
  return text;
}

std::string ByteTokenizer::decode_for_display(const std::vector<int64_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int64_t id : ids) {
    if (id >= 0 && id < kNumBytes) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    } else if (id < 0 || id >= kVocabSize) {
      text += "<id " + std::to_string(id) + ">";
    }
  }
  return text;
}

std::string ByteTokenizer::special_name(int64_t id) {
  switch (id) {
    case kBos: return "<|bos|>";
    case kEos: return "<|eos|>";
    case kPad: return "<|pad|>";
    case kMask: return "<|mask|>";
    default: break;
  }
  CG_FAIL("ByteTokenizer::special_name: id ", id,
          " is not a special id (special ids are 256..259)");
}

std::string ByteTokenizer::token_str(int64_t id) const {
  check_id(id, 0);
  if (is_special(id)) return special_name(id);
  if (id >= 0x20 && id < 0x7f) return std::string(1, static_cast<char>(id));
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", static_cast<unsigned>(id));
  return buf;
}

}  // namespace cg::train
