// Why this file exists: HfTokenizer's encode and decode (Note [The encode pipeline] and
// Note [Decode] in train/hf_tokenizer.h) over the tables hf_tokenizer_load.cpp reads.
#include "train/hf_tokenizer.h"

#include <queue>

#include "core/error.h"
#include "train/hf_tokenizer_impl.h"

namespace cg::train {

namespace {

using Impl = HfTokenizer::Impl;

// Calls on_text(piece) for the text between added tokens and on_token(id, at, length) for
// each added token of kind `which` (0: raw, 1: normalized) found in `text`, in order. At each
// position the longest token starting there wins; the leftmost position first.
template <typename OnText, typename OnToken>
void split_added(const Impl& t, int which, std::string_view text, OnText on_text,
                 OnToken on_token) {
  const auto& by_byte = t.added_by_first_byte[which];
  size_t gap = 0;
  for (size_t at = 0; at < text.size();) {
    const HfAddedToken* found = nullptr;
    for (int32_t i : by_byte[static_cast<unsigned char>(text[at])]) {
      if (text.substr(at).starts_with(t.added[i].content)) {
        found = &t.added[i];
        break;  // longest first
      }
    }
    if (found == nullptr) {
      ++at;
      continue;
    }
    if (at > gap) on_text(text.substr(gap, at - gap));
    on_token(found->id, at, found->content.size());
    at = gap = at + found->content.size();
  }
  if (gap < text.size()) on_text(text.substr(gap));
}

// Note [BPE merges]: the symbols of a piece are a linked list over its bytes; a min-heap
// holds the candidate pairs by (rank, position), so the lowest rank is merged first and,
// among equal ranks, the leftmost -- the order of `tokenizers`' Word::merge_all. An entry
// whose two symbols changed since it was pushed is stale and skipped. O(n log n) in the
// piece's length, so a long run without a split (100K letters) stays fast.
// `spans`, when given, gets each token's byte range in the piece, shifted by `base`.
using Spans = std::vector<std::pair<size_t, size_t>>;
void bpe(const Impl& t, std::string_view piece, std::vector<int64_t>& ids, Spans* spans,
         size_t base) {
  const size_t n = piece.size();
  if (n == 1) {
    ids.push_back(t.byte_ids[static_cast<unsigned char>(piece[0])]);
    if (spans) spans->emplace_back(base, base + 1);
    return;
  }
  if (t.ignore_merges) {  // a piece that is a vocab token whole is that token
    std::string chars;
    for (char c : piece) chars += hf_text::byte_level_chars()[static_cast<unsigned char>(c)];
    auto it = t.token_ids.find(chars);
    if (it != t.token_ids.end()) {
      ids.push_back(it->second);
      if (spans) spans->emplace_back(base, base + n);
      return;
    }
  }
  struct Symbol {
    int32_t id, prev, next;  // id -1: merged into the symbol on its left
  };
  std::vector<Symbol> syms(n);
  for (size_t i = 0; i < n; ++i) {
    syms[i] = {t.byte_ids[static_cast<unsigned char>(piece[i])], static_cast<int32_t>(i) - 1,
               i + 1 < n ? static_cast<int32_t>(i + 1) : -1};
  }
  struct Candidate {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || syms[pos].next < 0) return;
    const int32_t left = syms[pos].id, right = syms[syms[pos].next].id;
    auto it = t.merges.find((static_cast<uint64_t>(left) << 32) | static_cast<uint64_t>(right));
    if (it != t.merges.end()) heap.push({it->second.first, pos, left, right, it->second.second});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& s = syms[c.pos];
    if (s.id != c.left || s.next < 0 || syms[s.next].id != c.right) continue;  // stale
    Symbol& right = syms[s.next];
    s.id = c.merged;
    right.id = -1;
    s.next = right.next;
    if (s.next >= 0) syms[s.next].prev = c.pos;
    consider(s.prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    ids.push_back(syms[i].id);
    if (spans)
      spans->emplace_back(base + static_cast<size_t>(i),
                          base + (syms[i].next < 0 ? n : static_cast<size_t>(syms[i].next)));
  }
}

// Note [Offsets] (hf_tokenizer.h): for each byte of nfc(raw), the range of `raw` it comes
// from. NFC never joins a run that starts at an ASCII byte with the text before it (no
// ASCII character is the second of a composition, and ASCII stops reordering), so the
// normal form is the concatenation of the runs' normal forms; an unchanged run maps byte
// for byte, a changed one to its whole range. If the concatenation ever differed from
// `normalized`, the whole of `raw` is the range of every byte.
void nfc_ranges(std::string_view raw, const std::string& normalized, size_t base,
                std::vector<size_t>& lo, std::vector<size_t>& hi) {
  lo.clear();
  hi.clear();
  std::string joined;
  for (size_t start = 0; start < raw.size();) {
    size_t end = start + 1;
    while (end < raw.size() && static_cast<unsigned char>(raw[end]) >= 0x80) ++end;
    const std::string_view run = raw.substr(start, end - start);
    const std::string form = hf_text::nfc(run);
    for (size_t i = 0; i < form.size(); ++i) {
      lo.push_back(base + (form == run ? start + i : start));
      hi.push_back(base + (form == run ? start + i + 1 : end));
    }
    joined += form;
    start = end;
  }
  if (joined != normalized) {
    lo.assign(normalized.size(), base);
    hi.assign(normalized.size(), base + raw.size());
  }
}

// Normaliser, normalized added tokens, split regexes and BPE for text between raw added
// tokens; `spans`, when given, gets each id's byte range, `base` being raw's offset.
void encode_text(const Impl& t, std::string_view raw, std::vector<int64_t>& ids, Spans* spans,
                 size_t base) {
  const std::string text = t.nfc ? hf_text::nfc(raw) : std::string(raw);
  std::vector<size_t> lo, hi;  // raw range of each byte of `text`, when it differs
  const bool mapped = spans && text != raw;
  if (mapped) nfc_ranges(raw, text, base, lo, hi);
  const size_t first = ids.size();
  std::vector<std::string_view> pieces, next;
  split_added(
      t, 1, text,
      [&](std::string_view between) {
        pieces.assign(1, between);
        for (const hf_text::SplitRegex& regex : t.splits) {
          next.clear();
          for (std::string_view p : pieces) regex.split_isolated(p, next);
          pieces.swap(next);
        }
        for (std::string_view p : pieces)
          bpe(t, p, ids, spans, static_cast<size_t>(p.data() - text.data()));
      },
      [&](int64_t id, size_t at, size_t length) {
        ids.push_back(id);
        if (spans) spans->emplace_back(at, at + length);
      });
  if (!spans) return;
  for (size_t i = first; i < ids.size(); ++i) {  // positions in `text` -> in the input
    auto& [b, e] = (*spans)[i];
    if (mapped) {
      const size_t begin = lo[b], end = hi[e - 1];
      b = begin;
      e = end;
    } else {
      b += base;
      e += base;
    }
  }
}

}  // namespace

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

std::vector<int64_t> HfTokenizer::encode(std::string_view text) const {
  hf_text::check_utf8(text, "the text to encode");
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 1);
  split_added(
      *impl_, 0, text,
      [&](std::string_view between) { encode_text(*impl_, between, ids, nullptr, 0); },
      [&](int64_t id, size_t, size_t) { ids.push_back(id); });
  return ids;
}

HfTokenizer::Encoding HfTokenizer::encode_with_offsets(std::string_view text) const {
  hf_text::check_utf8(text, "the text to encode");
  Encoding e;
  split_added(
      *impl_, 0, text,
      [&](std::string_view between) {
        encode_text(*impl_, between, e.ids, &e.offsets,
                    static_cast<size_t>(between.data() - text.data()));
      },
      [&](int64_t id, size_t at, size_t length) {
        e.ids.push_back(id);
        e.offsets.emplace_back(at, at + length);
      });
  return e;
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  std::string text;
  for (int64_t id : ids) {
    const std::string& token = id_to_token(id);
    if (skip_special && impl_->special[id]) continue;
    const std::vector<int32_t> cps = hf_text::code_points(token);
    std::string bytes;
    for (int32_t cp : cps) {
      const int b = hf_text::byte_of_code_point(cp);
      if (b < 0) break;
      bytes += static_cast<char>(b);
    }
    text += bytes.size() == cps.size() ? bytes : token;
  }
  return text;
}

std::optional<int64_t> HfTokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_ids.find(std::string(token));
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

const std::string& HfTokenizer::id_to_token(int64_t id) const {
  CG_CHECK(id >= 0 && id < vocab_size() && impl_->has_token[id], "token id ", id,
           " is not in the tokenizer's vocabulary (ids 0 .. ", vocab_size() - 1,
           id >= 0 && id < vocab_size() ? ", and no token has this one" : "", ")");
  return impl_->tokens[id];
}

bool HfTokenizer::is_special(int64_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id];
}

int64_t HfTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }

}  // namespace cg::train
