// Why this file exists: the generated default corpus and byte tokens (corpus.h).
#include "train/corpus.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/factories.h"

namespace cg::train {

namespace {

const std::vector<std::string> kNouns = {"cat",    "dog",    "bird",   "fish",   "horse",   "mouse",
                                         "tiger",  "rabbit", "farmer", "doctor", "teacher", "baker",
                                         "sailor", "child",  "king",   "robot"};
const std::vector<std::string> kAdjectives = {"small", "big",   "happy", "quiet",  "old",
                                              "young", "brave", "tired", "clever", "lazy"};
const std::vector<std::string> kVerbs = {"walks", "runs", "sleeps", "sings", "reads",
                                         "waits", "eats", "works",  "plays", "swims"};
const std::vector<std::string> kPlaces = {"the park",   "the river",  "the market", "the house",
                                          "the garden", "the school", "the forest", "the city"};
const std::vector<std::string> kTimes = {"every morning", "at night",    "in the evening",
                                         "on sunday",     "after lunch", "before dinner"};

struct Pick {
  Generator& gen;
  int64_t below(int64_t n) {
    return static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(n));
  }
  const std::string& of(const std::vector<std::string>& v) {
    return v[static_cast<size_t>(below(static_cast<int64_t>(v.size())))];
  }
};

CorpusLine make_line(Pick& pick) {
  CorpusLine line;
  std::ostringstream p, r;
  switch (pick.below(5)) {
    case 0: {  // counting
      const int64_t a = pick.below(80), n = 4 + pick.below(8);
      p << "count from " << a << " to " << a + n << ": ";
      for (int64_t i = a; i <= a + n; ++i) r << i << (i == a + n ? "." : " ");
      break;
    }
    case 1: {  // letter ranges
      const int64_t a = pick.below(16), n = 4 + pick.below(8);
      p << "letters from " << static_cast<char>('a' + a) << " to " << static_cast<char>('a' + a + n)
        << ": ";
      for (int64_t i = a; i <= a + n; ++i)
        r << static_cast<char>('a' + i) << (i == a + n ? "." : " ");
      break;
    }
    case 2: {  // sums
      const int64_t a = pick.below(50), b = pick.below(50);
      p << "add " << a << " and " << b << ": ";
      r << a << " plus " << b << " is " << a + b << ".";
      break;
    }
    case 3: {  // copies
      const std::string adj = pick.of(kAdjectives), noun = pick.of(kNouns), verb = pick.of(kVerbs);
      p << "say twice: the " << adj << " " << noun << " " << verb << ": ";
      r << "the " << adj << " " << noun << " " << verb << ", the " << adj << " " << noun << " "
        << verb << ".";
      break;
    }
    default: {  // templated sentences
      const std::string noun = pick.of(kNouns), place = pick.of(kPlaces);
      p << "the " << pick.of(kAdjectives) << " " << noun << ": ";
      r << "the " << noun << " " << pick.of(kVerbs) << " to " << place << " " << pick.of(kTimes)
        << " and then the " << noun << " goes back to " << place << ".";
      break;
    }
  }
  line.prompt = p.str();
  line.response = r.str();
  return line;
}

}  // namespace

std::vector<CorpusLine> generate_corpus_lines(uint64_t seed, int64_t count) {
  CG_CHECK(count >= 0, "corpus: line count must be >= 0, got ", count);
  Generator gen(seed);
  Pick pick{gen};
  std::vector<CorpusLine> lines;
  lines.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) lines.push_back(make_line(pick));
  return lines;
}

std::string corpus_text(const std::vector<CorpusLine>& lines) {
  std::string text;
  for (const auto& l : lines) text += l.prompt + l.response + "\n";
  return text;
}

namespace {

// The offset of the first byte that does not belong to well-formed UTF-8 (overlong forms,
// surrogates and code points above U+10FFFF included), or -1 when the text is UTF-8.
int64_t first_invalid_utf8(const std::string& text) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = b[i];
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c < 0x80)
      len = 1;
    else if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
      len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
      len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
      return static_cast<int64_t>(i);
    if (i + len > n) return static_cast<int64_t>(i);
    for (size_t k = 1; k < len; ++k) {
      const unsigned x = b[i + k];
      if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return static_cast<int64_t>(i);
    }
    i += len;
  }
  return -1;
}

}  // namespace

std::string read_corpus_file(const std::string& path) {
  std::error_code ec;
  CG_CHECK(!std::filesystem::is_directory(path, ec), "corpus file '", path,
           "' is a directory; "
           "give a UTF-8 text file, or leave corpus.path empty for the generated corpus");
  std::ifstream in(path, std::ios::binary);
  CG_CHECK(in.good(), "corpus file '", path,
           "' cannot be opened (missing or unreadable); "
           "give an existing UTF-8 text file, or leave corpus.path empty for the generated corpus");
  std::ostringstream s;
  s << in.rdbuf();
  CG_CHECK(!s.str().empty(), "corpus file '", path, "' is empty");
  // Note [Corpus encoding]: the byte tokenizer would take any bytes, but a file that is not
  // UTF-8 is nearly always the wrong file (a checkpoint, an archive) or another encoding, and
  // training on it would end in a tau of 1 and no error. The docs promise UTF-8 text.
  const int64_t bad = first_invalid_utf8(s.str());
  CG_CHECK(bad < 0, "corpus file '", path, "' is not UTF-8 text (byte ", bad,
           " is not valid UTF-8); give a "
           "UTF-8 text file (convert another encoding first, e.g. iconv -f latin1 -t utf-8)");
  return s.str();
}

std::vector<std::string> prompts_from_text(const std::string& text, int64_t count,
                                           int64_t prompt_bytes, uint64_t seed, PromptSplit split,
                                           int64_t* cut_count) {
  std::vector<std::string> all, lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (static_cast<int64_t>(l.size()) >= 2) all.push_back(l);
  }
  CG_CHECK(!all.empty(),
           "corpus: no line of at least 2 bytes to take prompts from; give a text with lines "
           "\"prompt: answer\" (or any lines of 2 bytes or more)");
  // Note [Held-out lines]: every 10th line (the last line when there are fewer than 10) is
  // kept for evaluation and never prompts the drafter's data, so evaluation prompts are
  // held out from the drafter as with the generated corpus. A one-line file shares it.
  const size_t n = all.size();
  auto held_out = [n](size_t i) { return n >= 10 ? i % 10 == 9 : i == n - 1; };
  for (size_t i = 0; i < n; ++i) {
    if (n == 1 || held_out(i) == (split == PromptSplit::evaluation)) lines.push_back(all[i]);
  }
  Generator gen(seed);
  std::vector<std::string> prompts;
  for (int64_t i = 0; i < count; ++i) {
    const std::string& l = lines[gen.next_u64() % lines.size()];
    const size_t colon = l.find(": ");
    const size_t cut = colon != std::string::npos
                           ? colon + 2
                           : std::min(l.size() - 1, static_cast<size_t>(prompt_bytes));
    const size_t from =
        cut > static_cast<size_t>(kMaxPromptBytes) ? cut - static_cast<size_t>(kMaxPromptBytes) : 0;
    if (from > 0 && cut_count != nullptr) ++*cut_count;
    prompts.push_back(l.substr(from, cut - from));
  }
  return prompts;
}

}  // namespace cg::train
