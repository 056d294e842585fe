// Why this file exists: the text the toy target learns, and its byte-level token ids.
// The default corpus is generated here from a seed (no downloads): lines of a few
// templated kinds -- counting, letter ranges, sums, copies, short templated sentences --
// each "<prompt>: <response>\n". Why these: a small target (a few layers, minutes on two
// CPU cores) learns them well, and its greedy continuations are then mostly determined by
// the prompt, which is what a drafter can learn to predict many tokens ahead; the word
// lists, numbers and templates give real variety, so the target has to read its prompt.
// Any UTF-8 file can replace it (TrainConfig corpus.path).
//
// Tokens: train/tokenizer.h's ByteTokenizer (Note [Why byte-level] there); the
// large-vocabulary story is told separately by the memory report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cg::train {

// One generated line, split where the prompt ends (after ": ").
struct CorpusLine {
  std::string prompt, response;  // the line is prompt + response + "\n"
};

// `count` lines from `seed` (the same lines for the same seed).
std::vector<CorpusLine> generate_corpus_lines(uint64_t seed, int64_t count);
// The lines joined as one text.
std::string corpus_text(const std::vector<CorpusLine>& lines);
// Reads a UTF-8 text file; throws naming the path when it is missing, a directory, empty or
// not UTF-8 (naming the first bad byte).
std::string read_corpus_file(const std::string& path);
// The longest prompt taken from a user text, in bytes: a line whose first ": " comes later
// is cut to the kMaxPromptBytes bytes before it (the end, which the answer follows).
// Without a cap a 200 KB question made the target generate from 200 K positions, and the
// drafter-data stage seemed to hang.
constexpr int64_t kMaxPromptBytes = 1024;

// Prompts for the drafter data or for evaluation from a user text: each is a line up to
// its first ": " (at most kMaxPromptBytes, see above) or its first `prompt_bytes` bytes,
// lines drawn at random from the split's lines (Note [Held-out lines] in corpus.cpp:
// evaluation lines never prompt drafter data). Throws when no line has 2 bytes or more.
// `cut`, when given, counts the prompts that were cut to kMaxPromptBytes.
enum class PromptSplit { training, evaluation };
std::vector<std::string> prompts_from_text(const std::string& text, int64_t count,
                                           int64_t prompt_bytes, uint64_t seed, PromptSplit split,
                                           int64_t* cut = nullptr);

}  // namespace cg::train
