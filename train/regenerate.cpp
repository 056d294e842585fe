// Why this file exists: `chunkgrad regenerate`'s input, output and resume (regenerate.h)
// around the ragged-batch decoder (batched_decode.h).
#include "train/regenerate.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "train/progress.h"

namespace cg::train {

namespace {

using nlohmann::json;

std::string where(const std::string& path, int64_t line) {
  return path + " line " + std::to_string(line);
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  CG_CHECK(in.good(), "cannot read ", path);
  try {
    return json::parse(in);
  } catch (const json::exception& e) { CG_FAIL(path, " is not valid JSON: ", e.what()); }
}

}  // namespace

// Everything before the last run of loss_mask = 1; throws naming `at` when there is none
// or it starts at the first token.
static int64_t prompt_length_of(const std::vector<uint8_t>& loss_mask, const std::string& at) {
  int64_t end = static_cast<int64_t>(loss_mask.size());
  while (end > 0 && loss_mask[static_cast<size_t>(end - 1)] == 0) --end;
  CG_CHECK(end > 0, at, ": loss_mask has no 1, so there is no assistant response to regenerate");
  int64_t begin = end;
  while (begin > 0 && loss_mask[static_cast<size_t>(begin - 1)] == 1) --begin;
  CG_CHECK(begin > 0, at,
           ": the response (loss_mask = 1) starts at the first token, so there is no prompt");
  return begin;
}

std::vector<RegenerateSample> read_regenerate_inputs(const std::string& path, int64_t vocab_size) {
  std::ifstream in(path);
  CG_CHECK(in.good(), "--data ", path, ": cannot open it for reading");
  std::vector<RegenerateSample> samples;
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      CG_FAIL(where(path, line), ": not JSON (", e.what(), ")");
    }
    CG_CHECK(j.is_object() && j.contains("input_ids") && j["input_ids"].is_array(),
             where(path, line), ": expected an object with an \"input_ids\" array");
    CG_CHECK(j.contains("loss_mask") && j["loss_mask"].is_array(), where(path, line),
             ": no \"loss_mask\" array; regeneration replaces the last run of loss_mask = 1 "
             "(the last assistant response), so the mask is needed");
    RegenerateSample s;
    s.source_line = line;
    for (const json& v : j["input_ids"]) {
      CG_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < vocab_size,
               where(path, line), ": input_ids holds ", v.dump(), "; ids must be integers in [0, ",
               vocab_size, ") (the target's vocabulary)");
      s.ids.push_back(v.get<int64_t>());
    }
    for (const json& v : j["loss_mask"]) {
      CG_CHECK(v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1),
               where(path, line), ": loss_mask holds ", v.dump(), "; only 0 and 1 are allowed");
      s.loss_mask.push_back(static_cast<uint8_t>(v.get<int64_t>()));
    }
    CG_CHECK(s.loss_mask.size() == s.ids.size(), where(path, line), ": loss_mask has ",
             s.loss_mask.size(), " entries but input_ids ", s.ids.size());
    if (j.contains("dataset")) {
      CG_CHECK(j["dataset"].is_string(), where(path, line), ": \"dataset\" must be a string");
      s.dataset = j["dataset"].get<std::string>();
    }
    s.prompt_length = prompt_length_of(s.loss_mask, where(path, line));
    samples.push_back(std::move(s));
  }
  CG_CHECK(!in.bad(), "--data ", path, ": a read error");
  return samples;
}

std::vector<RegenerateSample> regenerate_inputs(const ChatData& data) {
  std::vector<RegenerateSample> samples;
  for (const DataSample& d : data.samples) {
    RegenerateSample s;
    s.ids = d.sequence.ids;
    s.loss_mask = d.sequence.loss_mask;
    s.dataset = d.dataset;
    s.source_line = d.line;
    // A mask of all 1s (a pre-tokenized line without one) makes the whole line the prompt,
    // as eval reads it (Note [Eval prompts], train/eval_inputs.h): it was refused as "the
    // response starts at the first token" of a line that named no response.
    const bool all_ones =
        std::all_of(s.loss_mask.begin(), s.loss_mask.end(), [](uint8_t m) { return m == 1; });
    if (all_ones) std::fill(s.loss_mask.begin(), s.loss_mask.end(), uint8_t{0});  // a prompt
    s.prompt_length =
        all_ones ? static_cast<int64_t>(s.ids.size()) : prompt_length_of(s.loss_mask, d.where());
    samples.push_back(std::move(s));
  }
  return samples;
}

std::string regenerated_line(const RegenerateSample& sample, const std::vector<int64_t>& response) {
  json j;
  std::vector<int64_t> ids = sample.prompt();
  ids.insert(ids.end(), response.begin(), response.end());
  std::vector<int> mask(sample.loss_mask.begin(), sample.loss_mask.begin() + sample.prompt_length);
  mask.insert(mask.end(), response.size(), 1);
  j["input_ids"] = ids;
  j["loss_mask"] = mask;
  j["dataset"] = sample.dataset;
  j["source_line"] = sample.source_line;
  return j.dump();
}

std::vector<int64_t> eos_ids_of_folder(const std::string& dir) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::filesystem::path file = std::filesystem::path(dir) / name;
    if (!std::filesystem::exists(file)) continue;
    const json j = read_json_file(file.string());
    if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) continue;
    const json& e = j["eos_token_id"];
    std::vector<int64_t> ids;
    for (const json& v : e.is_array() ? e : json::array({e})) {
      CG_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, file.string(),
               ": eos_token_id holds ", v.dump(), "; expected token ids >= 0");
      ids.push_back(v.get<int64_t>());
    }
    if (!ids.empty()) return ids;
  }
  return {};
}

uint64_t sample_seed(uint64_t seed, int64_t source_line) {
  // splitmix64 of the pair: nearby lines get unrelated streams.
  uint64_t z = seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(source_line + 1));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Note [Regenerate resume]: the output is appended a line at a time (in input order,
// flushed after each), and out.options.json records what decides the lines' contents:
// the target's fingerprint, the dtype and the decoding options (--max-new-tokens, EOS
// ids, --temperature, --top-k, --top-p, --seed). --batch-size, --device and --limit are not
// in it: they change which samples run when, not what a sample's line holds (up to the
// near-ties of Note [Ragged batch]), so a rerun may change them, e.g. raise --limit to
// continue further. A rerun checks each line already there against the input sample at
// its place (source_line and prompt), so an output written from other data or in another
// order is refused rather than extended.
int64_t resume_output(const std::string& out_path, const std::vector<RegenerateSample>& samples,
                      const json& options_record) {
  namespace fs = std::filesystem;
  const std::string record_path = out_path + ".options.json";
  CG_CHECK(!fs::exists(out_path) || fs::is_regular_file(out_path), "--out ", out_path,
           " exists and is not a file");
  std::string text;
  if (fs::exists(out_path)) {
    std::ifstream in(out_path, std::ios::binary);
    std::ostringstream all;
    all << in.rdbuf();
    text = all.str();
  }
  // A torn last line: cut it off (it is regenerated).
  const size_t complete = text.empty() ? 0 : text.rfind('\n') + 1;  // npos + 1 == 0
  if (complete < text.size()) {
    std::fprintf(stderr, "regenerate: %s ends in a torn line (%zu bytes, no newline); redoing it\n",
                 out_path.c_str(), text.size() - complete);
    fs::resize_file(out_path, complete);
    text.resize(complete);
  }
  int64_t done = 0;
  if (!text.empty()) {
    CG_CHECK(fs::exists(record_path), "--out ", out_path, " already holds lines but ", record_path,
             " (the options they were written with) is missing; give a new --out or delete it");
    const json before = read_json_file(record_path);
    for (const auto& [key, value] : options_record.items()) {
      CG_CHECK(before.contains(key) && before[key] == value, "--out ", out_path,
               " was written with ", key, " = ",
               before.contains(key) ? before[key].dump() : std::string("(none)"), " (", record_path,
               "), this run has ", value.dump(),
               "; rerun with the same options to continue, or give a new --out");
    }
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      const int64_t n = done + 1;
      if (done == static_cast<int64_t>(samples.size())) {  // --limit below an earlier run's
        std::fprintf(stderr,
                     "regenerate: %s already holds more lines than the %zu samples asked for\n",
                     out_path.c_str(), samples.size());
        break;
      }
      json j;
      try {
        j = json::parse(line);
      } catch (const json::exception&) {
        CG_FAIL("--out ", out_path, " line ", n, " is not JSON; it is not this command's output");
      }
      const RegenerateSample& s = samples[static_cast<size_t>(done)];
      CG_CHECK(
          j.is_object() && j.contains("source_line") && j["source_line"] == json(s.source_line),
          "--out ", out_path, " line ", n, " is the regeneration of input line ",
          j.is_object() && j.contains("source_line") ? j["source_line"].dump() : "(none)",
          " but the input's sample ", n, " is line ", s.source_line,
          " of --data; the output was written from other data or in another order");
      const std::vector<int64_t> prompt = s.prompt();
      const json& ids = j["input_ids"];
      bool same = ids.is_array() && ids.size() > prompt.size();
      for (size_t i = 0; same && i < prompt.size(); ++i) same = ids[i] == json(prompt[i]);
      CG_CHECK(same, "--out ", out_path, " line ", n,
               " does not start with the prompt of --data line ", s.source_line,
               "; the output was written from other data");
      ++done;
    }
  } else {
    std::ofstream record(record_path);
    const int open_errno = errno;
    CG_CHECK(record.is_open(), "--out ", out_path, ": cannot write ", record_path, " (",
             std::strerror(open_errno), "); give a writable place");
    record << options_record.dump(2) << "\n";
    CG_CHECK(record.good(), "--out ", out_path, ": a write to ", record_path,
             " failed (disk full?)");
  }
  return done;
}

RegenerateStats regenerate(const nn::Qwen3ForCausalLM& lm,
                           const std::vector<RegenerateSample>& samples,
                           const RegenerateOptions& options, const std::string& out_path,
                           const json& options_record) {
  RegenerateStats stats;
  stats.skipped = resume_output(out_path, samples, options_record);
  const int64_t total = static_cast<int64_t>(samples.size());
  std::FILE* out = std::fopen(out_path.c_str(), "ab");
  CG_CHECK(out != nullptr, "--out ", out_path, ": cannot open it for appending");
  std::vector<DecodePrompt> prompts;
  for (int64_t i = stats.skipped; i < total; ++i) {
    const RegenerateSample& s = samples[static_cast<size_t>(i)];
    prompts.push_back({.ids = s.prompt(), .seed = sample_seed(options.seed, s.source_line)});
  }
  ProgressBar bar("regenerate", total, options.progress, stats.skipped);
  std::map<int64_t, std::vector<int64_t>> finished;  // by prompt index, until their turn
  int64_t next = 0;                                  // the next prompt index to write
  const auto start = std::chrono::steady_clock::now();
  const BatchedDecodeOptions decode{
      .max_new_tokens = options.max_new_tokens,
      .eos_ids = options.eos_ids,
      .batch_size = options.batch_size,
      .sampling = {.temperature = options.temperature, .top_k = options.top_k},
      .top_p = options.top_p};
  try {
    stats.decode = decode_batched(lm, prompts, decode, [&](DecodedSample&& d) {
      stats.new_tokens += static_cast<int64_t>(d.new_tokens.size());
      stats.eos_stops += d.stopped_at_eos ? 1 : 0;
      finished[d.index] = std::move(d.new_tokens);
      for (auto it = finished.find(next); it != finished.end(); it = finished.find(next)) {
        const RegenerateSample& s = samples[static_cast<size_t>(stats.skipped + next)];
        const std::string line = regenerated_line(s, it->second) + "\n";
        CG_CHECK(
            std::fwrite(line.data(), 1, line.size(), out) == line.size() && std::fflush(out) == 0,
            "--out ", out_path, ": a write failed (disk full?)");
        bar.update(stats.skipped + next + 1, static_cast<int64_t>(it->second.size()));
        finished.erase(it);
        ++next;
        ++stats.written;
      }
    });
  } catch (...) {
    std::fclose(out);
    throw;
  }
  bar.finish();
  std::fclose(out);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace cg::train
