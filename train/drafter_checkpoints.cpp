// Why this file exists: which drafter checkpoint a run resumes from, checked before any
// stage writes (drafter_checkpoints.h).
#include "train/drafter_checkpoints.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "core/error.h"
#include "core/factories.h"
#include "core/json_input.h"
#include "nn/checkpoint.h"
#include "ops/loss_config.h"
#include "ops/shape_ops.h"
#include "train/drafter_trainer.h"
#include "train/optimizer.h"

namespace cg::train {

std::vector<std::pair<int64_t, std::string>> drafter_checkpoint_files(const std::string& run_dir) {
  const std::filesystem::path dir = std::filesystem::path(run_dir) / "drafter";
  std::vector<std::pair<int64_t, std::string>> files;
  if (!std::filesystem::is_directory(dir)) return files;
  static const std::regex name(R"(step_(\d{1,18})\.safetensors)");
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (std::regex_match(f, m, name)) files.emplace_back(std::stoll(m[1].str()), e.path().string());
  }
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  return files;
}

std::string latest_drafter_checkpoint(const std::string& run_dir) {
  const auto files = drafter_checkpoint_files(run_dir);
  return files.empty() ? std::string() : files.front().second;
}

void refuse_resume(const std::string& path, const std::string& why, const char* left) {
  CG_FAIL("resume: checkpoint '", path, "' ", why, "; ", left,
          " (delete the checkpoint, name another with --resume-from, or set \"resume\": false "
          "(--fresh) to start over)");
}

Tensor finite_checkpoint_tensor(const safetensors::Reader& reader, const std::string& name) {
  Tensor t = reader.load(name);
  nn::check_finite(t, name, reader.path_of(name));  // Note [Finite on load], nn/checkpoint.h
  return t;
}

namespace {

// The config fields a resumed run may not change: not how long, how often to save, how to
// show, whether layers are recomputed in backward and how the head loss is chunked (memory
// switches with the same gradients: out of memory -> turn one on -> resume), and not where
// the run lives (run_dir: spelled "./runs/x" or absolute, or the
// folder moved, it is the same run). With content fingerprints on both sides (`by_content`)
// the corpus and target checkpoint are compared by their bytes, not by their paths.
// The drafter fields the run warns are unused (warn_about_config, pipeline_setup.cpp) do
// not take part in the comparison: a user who dropped one, as the warning said, was refused
// the resume for it (an outside tester's finding). A field's use is decided by the same
// config it is in, so each side drops its own.
void drop_unused_fields(nlohmann::json& d) {
  if (!d.is_object()) return;
  auto at = [&](const nlohmann::json& j, const char* key) {
    return j.contains(key) ? j.at(key) : nlohmann::json();
  };
  const nlohmann::json layers = at(d, "target_layers"), types = at(d, "layer_types");
  // (the count the list implies, not erased: a list against none is then named by its
  // own field, not by this one, which sorts first)
  if (layers.is_array() && !layers.empty()) d["num_target_features"] = layers.size();
  bool slides = false;
  if (types.is_array()) {
    for (const auto& t : types) slides = slides || t == "sliding_attention";
  }
  if (!slides) d.erase("sliding_window");
  if (!d.contains("loss") || !d["loss"].is_object()) return;
  nlohmann::json& loss = d["loss"];
  const nlohmann::json kind = at(loss, "kind");
  if (kind != "mix") loss.erase("mix_ce_weight");
  try {  // (a kind this build does not know stays as it is: the comparison names it)
    LossSpec spec;
    spec.kind = kind.is_string() ? kind.get<std::string>() : std::string();
    const LossKind k = spec.loss_kind();
    if (!loss_kind_info(k).needs_teacher) loss.erase("temperature");
    // A kind's long and short names are one kind ("forward_kl" is "kl").
    if (spec.kind != "mix") loss["kind"] = loss_kind_short_name(k);
  } catch (const Error&) {}
}

nlohmann::json resumable_part(nlohmann::json j, bool by_content) {
  j.erase("run_dir");
  if (by_content) {
    if (j["corpus"].is_object()) j["corpus"].erase("path");
    if (j["target"].is_object()) j["target"].erase("checkpoint");
    if (j["features"].is_object()) j["features"].erase("dir");
  }
  drop_unused_fields(j["drafter"]);
  j["drafter"]["optim"].erase("steps");
  j["drafter"].erase("checkpoint_every");
  j["drafter"].erase("keep_checkpoints");
  j["drafter"].erase("activation_checkpointing");
  j["drafter"].erase("head_loss_path");
  j["drafter"].erase("head_loss_chunk_rows");
  j["drafter"].erase("head_loss_chunk_budget_mb");
  j.erase("progress");
  j.erase("resume");
  j.erase("threads");
  j.erase("device");  // a run may go on on another device
  j.erase("eval");
  j.erase("memory");
  // How the ranks share the work, not what is trained (Note [World-size-free checkpoints],
  // train/data_parallel.h); dist.mode stays: weak scaling trains another batch.
  if (j["dist"].is_object()) {
    j["dist"].erase("zero1");
    j["dist"].erase("bucket_mb");
    j["dist"].erase("check_every");
  }
  return j;
}

}  // namespace

std::vector<std::string> remove_checkpoint_temporaries(const std::string& run_dir) {
  std::vector<std::string> removed;
  const std::filesystem::path dir = std::filesystem::path(run_dir) / "drafter";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return removed;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("step_") || !name.ends_with(".safetensors.tmp")) continue;
    if (!e.is_regular_file(ec)) continue;
    std::filesystem::remove(e.path(), ec);
    CG_CHECK(!ec, "cannot remove the leftover checkpoint temporary ", e.path().string(), ": ",
             ec.message());
    removed.push_back(e.path().string());
  }
  return removed;
}

namespace {

// The first field where two JSON objects differ, as "drafter.gamma: 4 then, 2 now", so
// that the user knows which edit to undo instead of diffing config.json by hand.
std::string first_difference(const nlohmann::json& was, const nlohmann::json& now) {
  std::string field = "?", then = "-", here = "-";
  const nlohmann::json patch = nlohmann::json::diff(was, now);
  if (!patch.empty()) {
    nlohmann::json::json_pointer at(patch[0]["path"].get<std::string>());
    // A list that differs is named whole ("drafter.target_layers: [1, 2] then, [1, 2, 3]
    // now"), not by the patch's element ("target_layers.-: - then, - now", an outside
    // tester's finding).
    auto is_list = [&](const nlohmann::json::json_pointer& p) {
      return (was.contains(p) && was[p].is_array()) || (now.contains(p) && now[p].is_array());
    };
    while (!at.empty() && is_list(at.parent_pointer())) at = at.parent_pointer();
    field = at.to_string().substr(1);
    std::replace(field.begin(), field.end(), '/', '.');
    auto shown = [](const nlohmann::json& v) {  // a short list in full: "[1, 2]"
      if (!v.is_array() || v.size() > 16) return describe_json(v);
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i > 0 ? ", " : "") + v[i].dump();
      return out + "]";
    };
    if (was.contains(at)) then = shown(was[at]);
    if (now.contains(at)) here = shown(now[at]);
  }
  return field + ": " + then + " then, " + here + " now";
}

// A checkpoint's metadata: its step, its config (over the defaults: a field the
// checkpoint predates, drafter.head_loss_chunk_rows say, counts as its default) and its
// data fingerprint (null in checkpoints from before fingerprints). `damage` says why the
// values could not be read ("" when they could).
struct Header {
  int64_t step = 0;
  nlohmann::json config, data;
  std::string damage;
};

// A missing or unknown format is refused (not a chunkgrad drafter checkpoint: not damage
// to skip past); values that do not parse are damage.
Header read_header(const safetensors::Reader& reader, const std::string& path, const char* left) {
  auto fail = [&](const std::string& why) { refuse_resume(path, why, left); };
  const auto& meta = reader.metadata();
  auto get = [&](const char* key) {
    auto it = meta.find(key);
    if (it == meta.end())
      fail(std::string("has no '") + key + "' metadata (not a chunkgrad drafter checkpoint)");
    return it->second;
  };
  if (get("format") != "chunkgrad-dflash-drafter-1")
    fail("has format metadata '" + get("format") +
         "': not a chunkgrad drafter checkpoint (step_<N>.safetensors in a run's drafter/ "
         "folder)");
  Header h;
  nlohmann::json saved;
  try {
    h.step = std::stoll(get("step"));
    saved = parse_untrusted_json(get("config"), "its config");
    auto data = meta.find("data");
    if (data != meta.end() && !data->second.empty())
      h.data = parse_untrusted_json(data->second, "its data fingerprint");
  } catch (const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);  // one "(at ...)" per line
    h.damage =
        std::string("has damaged metadata: ") + (error ? error->message() : std::string(e.what()));
    return h;
  }
  h.config = saved;
  if (saved.is_object()) {
    h.config = TrainConfig().to_json();
    h.config.merge_patch(saved);
  }
  return h;
}

// Note [Held-out samples on resume]: a run from feature files (features.source offline or
// target) holds the last min(eval.accuracy_sequences, a quarter) samples out of training
// (offline_run.h), so that one eval field also decides what the drafter trains on. A resume
// with another value would go on training on another set from the checkpoint on, without a
// word (an outside tester's resume at 1 instead of 4 trained on 23 samples, not 20). Every
// other eval field only changes the evaluation and may change; this one may not, as the data
// may not. (A fixed split, independent of the config, would have kept it free, but it would
// change what every existing offline run trains on.)
template <typename Fail>
void check_held_out(const nlohmann::json& was, const TrainConfig& config, Fail fail) {
  const std::string& source = config.features.source;
  if (source != "offline" && source != "target") return;
  const nlohmann::json::json_pointer at("/eval/accuracy_sequences");
  const nlohmann::json then = was.is_object() && was.contains(at) ? was[at] : nlohmann::json();
  const int64_t now = config.eval.accuracy_sequences;
  if (!then.is_number_integer() || then.get<int64_t>() == now) return;
  const std::string old = std::to_string(then.get<int64_t>());
  fail("was trained with eval.accuracy_sequences " + old + " and it is " + std::to_string(now) +
       " now: with features.source " + source +
       " that field also decides how many of the last samples are held out of training (the "
       "last min(eval.accuracy_sequences, a quarter of the set)), so the resumed run would "
       "train on other samples; set it back (--set eval.accuracy_sequences=" +
       old + ")");
}

// The header against this run: the same resumable config and the same data, or the refusal.
void check_header(const Header& h, const std::string& path, const TrainConfig& config,
                  const std::string& data_fingerprint, const char* left) {
  auto fail = [&](const std::string& why) { refuse_resume(path, why, left); };
  const bool by_content = !data_fingerprint.empty() && !h.data.is_null();
  const nlohmann::json was = resumable_part(h.config, by_content),
                       now = resumable_part(config.to_json(), by_content);
  if (was != now) {
    fail("was trained with another config (" + first_difference(was, now) +
         "; only drafter.optim.steps, drafter.checkpoint_every, drafter.keep_checkpoints, "
         "drafter.activation_checkpointing, drafter.head_loss_path, "
         "drafter.head_loss_chunk_rows, drafter.head_loss_chunk_budget_mb, eval, memory, "
         "threads, progress and run_dir may change on resume)");
  }
  check_held_out(h.config, config, fail);
  // Checkpoints from before fingerprints have none: accepted, as they were.
  if (by_content) {
    const nlohmann::json here = nlohmann::json::parse(data_fingerprint);
    if (h.data != here) {
      // What this run's fingerprint covers (pipeline_setup.cpp), by the names it was given.
      const std::string& source = config.features.source;
      const std::string what =
          source == "target"
              ? "of features.data, of the target features.target (its config.json and weights) "
                "or of its tokenizer"
          : source == "offline" ? "of the feature folder features.dir (its index.json) or of the "
                                  "target it names"
                                : "of the corpus or of target.checkpoint";
      fail("was trained on other data: the content " + what + " changed since (" +
           first_difference(h.data, here) + ")");
    }
  }
}

// The checkpoint's tensors against the drafter this config makes (names and shapes, from
// the header): a mismatched checkpoint is refused before the target and the drafter data
// are made, not after. The drafter is made for its shapes only: its frozen tables are
// stride-0 views of one zero, which cost no memory.
void check_shapes(const safetensors::Reader& reader, const std::string& path,
                  const TrainConfig& config) {
  auto fail = [&](const std::string& why) { refuse_resume(path, why, kRunDirUnchanged); };
  std::unique_ptr<nn::DFlashDrafter> shapes;
  try {
    const nn::DFlashDrafterConfig dc = run_drafter_config(config);
    const Tensor table = expand(zeros({1, 1}), {dc.layers.vocab_size, dc.layers.hidden_size});
    Generator gen(0);
    shapes =
        std::make_unique<nn::DFlashDrafter>(dc, table, table, nn::InitOptions{.generator = &gen});
  } catch (const Error& e) {
    fail(std::string("cannot be checked: this config's drafter cannot be made: ") + e.message());
  }
  for (const auto& [n, p] : shapes->named_parameters()) {
    const std::string name = "drafter." + n;
    if (!reader.contains(name)) fail("does not fit this drafter: it has no tensor '" + name + "'");
    const Shape& saved = reader.info(name).shape;
    if (saved != p.shape()) {
      fail("does not fit this drafter: '" + name + "' is " + shape_str(saved) + " there and " +
           shape_str(p.shape()) +
           " here (target.hf_config or the target's checkpoint changed since?)");
    }
  }
}

// Every tensor read and checked to be finite; "" or what is damaged.
std::string tensor_damage(const safetensors::Reader& reader) {
  try {
    for (const std::string& name : reader.names()) finite_checkpoint_tensor(reader, name);
  } catch (const Error& e) { return std::string("is damaged: ") + e.message(); }
  return "";
}

// Every check of `path` for a resume of `config`: throws the refusal for a checkpoint of
// another config, other data or another drafter; returns its damage ("" for none: then
// `choice` holds its step and saved steps).
std::string checked_for_resume(const std::string& path, const TrainConfig& config,
                               const std::string& data_fingerprint, ResumeChoice& choice) {
  std::unique_ptr<safetensors::Reader> reader;
  try {
    reader = safetensors::open(path);
  } catch (const Error& e) { return std::string("is unreadable: ") + e.message(); }
  const Header h = read_header(*reader, path, kRunDirUnchanged);
  if (!h.damage.empty()) return h.damage;
  check_header(h, path, config, data_fingerprint, kRunDirUnchanged);
  check_shapes(*reader, path, config);
  const std::string damage = tensor_damage(*reader);
  if (!damage.empty()) return damage;
  choice.path = path;
  choice.step = h.step;
  const nlohmann::json& steps = h.config["drafter"]["optim"]["steps"];
  choice.saved_steps = steps.is_number_integer() ? steps.get<int64_t>() : 0;
  return "";
}

}  // namespace

int64_t checked_checkpoint_metadata(const safetensors::Reader& reader, const std::string& path,
                                    const TrainConfig& config, const std::string& data_fingerprint,
                                    const char* left) {
  const Header h = read_header(reader, path, left);
  if (!h.damage.empty()) refuse_resume(path, h.damage, left);
  check_header(h, path, config, data_fingerprint, left);
  return h.step;
}

ResumeChoice choose_resume_checkpoint(const TrainConfig& config,
                                      const std::string& data_fingerprint,
                                      const std::string& named) {
  ResumeChoice choice;
  if (!named.empty()) {  // the user's choice: checked, never replaced by another
    const std::string damage = checked_for_resume(named, config, data_fingerprint, choice);
    if (!damage.empty())
      refuse_resume(named, damage + " (given by --resume-from)", kRunDirUnchanged);
    return choice;
  }
  if (!config.resume) return choice;
  const auto files = drafter_checkpoint_files(config.run_dir);
  for (const auto& [step, path] : files) {  // newest first
    const std::string damage = checked_for_resume(path, config, data_fingerprint, choice);
    if (damage.empty()) return choice;
    choice.skipped.push_back(path + " " + damage);
  }
  if (files.empty()) return choice;
  // Every one damaged: the newest one's damage is the refusal.
  const std::string newest = choice.skipped.front().substr(files.front().second.size() + 1);
  refuse_resume(
      files.front().second,
      newest + (files.size() == 1 ? std::string("; there is no earlier checkpoint to fall back to")
                : files.size() == 2 ? std::string("; the earlier checkpoint is damaged too")
                                    : "; the " + std::to_string(files.size() - 1) +
                                          " earlier checkpoints are damaged too"),
      kRunDirUnchanged);
}

std::string checked_resume_checkpoint(const TrainConfig& config,
                                      const std::string& data_fingerprint) {
  if (!config.resume) return "";
  const std::string path = latest_drafter_checkpoint(config.run_dir);
  if (path.empty()) return "";
  std::unique_ptr<safetensors::Reader> reader;
  try {
    reader = safetensors::open(path);
  } catch (const Error& e) {
    refuse_resume(path, std::string("is unreadable: ") + e.message(), kRunDirUnchanged);
  }
  checked_checkpoint_metadata(*reader, path, config, data_fingerprint, kRunDirUnchanged);
  return path;
}

std::string schedule_change_line(const OptimConfig& now, int64_t saved_steps, int64_t step) {
  if (saved_steps <= 0 || saved_steps == now.steps) return "";
  if (step >= now.steps) {  // (an outside tester's resume at 12 of 4 said nothing at all)
    return "drafter.optim.steps is " + std::to_string(now.steps) + " now and was " +
           std::to_string(saved_steps) + " when step " + std::to_string(step) +
           " was saved: the run is already at or past its last step, so it trains nothing; "
           "raise drafter.optim.steps to train on, or --fresh to start over";
  }
  auto lr = [&](int64_t at, int64_t total) {
    const int64_t warmup = static_cast<int64_t>(now.warmup_ratio * static_cast<double>(total));
    return warmup_cosine_lr(at, total, warmup, now.lr, now.min_lr_ratio);
  };
  char line[320];
  std::snprintf(line, sizeof line,
                "drafter.optim.steps is %lld now and was %lld when step %lld was saved: the "
                "learning-rate schedule (warmup and cosine) is recomputed for %lld steps, so step "
                "%lld runs at lr %.3g (the old schedule's next lr: %.3g)",
                static_cast<long long>(now.steps), static_cast<long long>(saved_steps),
                static_cast<long long>(step), static_cast<long long>(now.steps),
                static_cast<long long>(step + 1), lr(step + 1, now.steps),
                lr(std::min(step + 1, saved_steps), saved_steps));
  return line;
}

}  // namespace cg::train
