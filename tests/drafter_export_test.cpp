// Why this file exists: the public DFlash drafter layout (train/drafter_export.h,
// docs/export.md) is what serving engines load, so it is pinned here: config.json field by
// field against a published config (tests/golden/README.md says where it comes from), the
// exact tensor names (no embedding, no lm_head), an export/import round trip equal bit for
// bit in bf16, the RoPE trap (the drafter's theta exported, never the target's RoPE
// options), sliding_window iff a layer slides, and one clear error per bad folder.
#include <cstring>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "core/views.h"
#include "nn/safetensors.h"
#include "tests/checkpoint_test_util.h"
#include "tests/error_helpers.h"
#include "tests/nn_test_util.h"
#include "train/drafter_export.h"
#include "train/drafter_model.h"

namespace cg {
namespace {

using nlohmann::json;
using testing_checkpoint::small_drafter;
using testing_nn::TempDir;

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// The published Qwen3-8B drafter (docs/dflash_training.md): 5 layers over a Qwen3-8B target.
nn::DFlashDrafterConfig qwen3_8b_drafter() {
  nn::DFlashDrafterConfig dc;
  dc.layers = nn::Qwen3Config{};  // Qwen3-8B's sizes: hidden 4096, 32/8 x 128, V 151936
  dc.layers.num_layers = 5;
  dc.target_layers = nn::dflash_target_layers(36, 5);
  dc.mask_token_id = 151669;
  return dc;
}

TEST(DrafterExport, ConfigMatchesPublishedFieldByField) {
  const json golden =
      read_json(std::string(CHUNKGRAD_TEST_DATA_DIR) + "/../golden/qwen3_8b_dflash_config.json");
  const json ours = train::public_drafter_config(qwen3_8b_drafter(), {16, 36, 40960});
  // Published fields chunkgrad does not write: auto_map names Python code the folder does
  // not ship; bos/eos are the tokenizer's; initializer_range is training init only;
  // max_window_layers is superseded by layer_types.
  const std::set<std::string> left_out{"auto_map", "bos_token_id", "eos_token_id",
                                       "initializer_range", "max_window_layers"};
  for (const auto& [key, value] : golden.items()) {
    if (left_out.count(key)) {
      EXPECT_FALSE(ours.contains(key)) << key;
      continue;
    }
    ASSERT_TRUE(ours.contains(key)) << "config.json lacks the published field " << key;
    if (key == "dflash_config") {  // chunkgrad adds block_size inside it too
      json inner = ours[key];
      EXPECT_EQ(inner["block_size"], 16);
      inner.erase("block_size");
      EXPECT_EQ(inner, value);
      continue;
    }
    if (value.is_number()) {
      EXPECT_DOUBLE_EQ(ours[key].get<double>(), value.get<double>()) << key;
    } else {
      EXPECT_EQ(ours[key], value) << key;
    }
  }
  for (const auto& [key, value] : ours.items())
    EXPECT_TRUE(golden.contains(key)) << "config.json has a field the published one lacks: " << key;
  // And the import side accepts the published config for the same drafter.
  EXPECT_TRUE(train::public_config_mismatches(golden, qwen3_8b_drafter(), {16, 36, 40960}).empty());
}

// The serving trap: a target's RoPE options (rope_scaling, partial_rotary_factor, M-RoPE)
// or theta leaking into the drafter config. The drafter's theta is its own field.
TEST(DrafterExport, RopeFieldsDoNotLeakFromTheTarget) {
  nn::Qwen3Config target{.vocab_size = 260,
                         .hidden_size = 64,
                         .num_layers = 8,
                         .num_heads = 2,
                         .num_kv_heads = 1,
                         .head_dim = 32,
                         .intermediate_size = 96};
  target.rope_theta = 1e7;
  train::DrafterConfig d;
  d.rope_theta = 5e5;
  json c = train::public_drafter_config(train::drafter_model_config(target, d, 259), {8, 8, 4096});
  EXPECT_EQ(c["rope_theta"].get<double>(), 5e5);
  EXPECT_TRUE(c["rope_scaling"].is_null());
  for (const char* leak : {"rope_parameters", "partial_rotary_factor", "mrope_section",
                           "mrope_interleaved", "rope_type", "text_config"})
    EXPECT_FALSE(c.contains(leak)) << leak;
  d.rope_theta = 0;  // unset: the target's theta is the drafter's default
  c = train::public_drafter_config(train::drafter_model_config(target, d, 259), {8, 8, 4096});
  EXPECT_EQ(c["rope_theta"].get<double>(), 1e7);
  // Importing a config whose RoPE options leaked in is refused, naming each field.
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  c["partial_rotary_factor"] = 0.25;
  const auto bad =
      train::public_config_mismatches(c, train::drafter_model_config(target, d, 259), {8, 8, 4096});
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_NE(bad[0].find("rope_scaling"), std::string::npos) << bad[0];
  EXPECT_NE(bad[1].find("partial_rotary_factor"), std::string::npos) << bad[1];
  // transformers 5 writes the same settings inside rope_parameters: refused there too.
  c.erase("rope_scaling");
  c.erase("partial_rotary_factor");
  const auto nested_mismatches = [&](const json& rope) {
    json n = c;
    n["rope_parameters"] = rope;
    return train::public_config_mismatches(n, train::drafter_model_config(target, d, 259),
                                           {8, 8, 4096});
  };
  EXPECT_TRUE(nested_mismatches({{"rope_type", "default"}, {"rope_theta", 1e7}}).empty());
  const auto yarn = nested_mismatches({{"rope_type", "yarn"}, {"factor", 4.0}});
  ASSERT_EQ(yarn.size(), 1u);
  EXPECT_NE(yarn[0].find("rope_parameters.rope_type"), std::string::npos) << yarn[0];
  const auto qwen35 = nested_mismatches(
      {{"rope_type", "default"}, {"partial_rotary_factor", 0.25}, {"mrope_section", {2, 1, 1}}});
  ASSERT_EQ(qwen35.size(), 2u);
  EXPECT_NE(qwen35[0].find("rope_parameters.partial_rotary_factor: 0.25"), std::string::npos);
  EXPECT_NE(qwen35[1].find("rope_parameters.mrope_section"), std::string::npos) << qwen35[1];
  const auto two_bases = nested_mismatches({{"rope_type", "default"}, {"rope_theta", 1e6}});
  ASSERT_EQ(two_bases.size(), 1u);
  EXPECT_NE(two_bases[0].find("give one base"), std::string::npos) << two_bases[0];
}

TEST(DrafterExport, SlidingWindowOnlyWhenALayerSlides) {
  auto d = small_drafter(16, 24, 5);  // sliding / full / sliding, window 5
  json c = train::public_drafter_config(d->config(), {8, 6, 4096});
  EXPECT_EQ(c["use_sliding_window"], true);
  EXPECT_EQ(c["sliding_window"], 5);
  EXPECT_EQ(c["layer_types"], json({"sliding_attention", "full_attention", "sliding_attention"}));
  nn::DFlashDrafterConfig full = d->config();
  full.layer_types.clear();
  full.sliding_window = 0;
  c = train::public_drafter_config(full, {8, 6, 4096});
  EXPECT_EQ(c["use_sliding_window"], false);
  EXPECT_TRUE(c["sliding_window"].is_null());
  EXPECT_EQ(c["layer_types"], json({"full_attention", "full_attention", "full_attention"}));
}

TEST(DrafterExport, TensorNamesExactlyThePublicOnes) {
  TempDir dir;
  auto d = small_drafter(16, 24, 5);
  train::write_public_drafter(*d, {8, 6, 4096}, dir.file("out"));
  const auto file = safetensors::open(dir.file("out/model.safetensors"));
  const std::vector<std::string> want = train::public_drafter_names(3);
  EXPECT_EQ(std::set<std::string>(file->names().begin(), file->names().end()),
            std::set<std::string>(want.begin(), want.end()));
  EXPECT_EQ(file->names().size(), want.size());
  for (const std::string& n : file->names()) {
    EXPECT_EQ(file->info(n).dtype, DType::bf16) << n;
    EXPECT_EQ(n.find("embed"), std::string::npos) << n;
    EXPECT_EQ(n.find("lm_head"), std::string::npos) << n;
  }
  // [out, in] as torch's Linear: fc maps 2 features x 16 to 16; q_proj 16 -> 4 heads x 8.
  EXPECT_EQ(file->info("fc.weight").shape, (Shape{16, 32}));
  EXPECT_EQ(file->info("layers.0.self_attn.q_proj.weight").shape, (Shape{32, 16}));
  EXPECT_EQ(file->info("layers.0.self_attn.k_proj.weight").shape, (Shape{16, 16}));
  EXPECT_EQ(file->info("layers.0.self_attn.k_norm.weight").shape, (Shape{8}));
  EXPECT_EQ(file->info("layers.2.mlp.down_proj.weight").shape, (Shape{16, 24}));
  EXPECT_EQ(read_json(dir.file("out/config.json"))["dflash_config"]["target_layer_ids"],
            json({0, 1}));
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = raw::contiguous(a), y = raw::contiguous(b);
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

TEST(DrafterExport, RoundTripIsBitExactInBf16) {
  TempDir dir;
  auto a = small_drafter(16, 24, 5);
  train::write_public_drafter(*a, {8, 6, 4096}, dir.file("a"));
  // Another drafter of the same shape (other weights), in bf16, loads it.
  auto b = small_drafter(16, 24, 5);
  for (auto& [n, p] : b->named_parameters()) raw::fill_(p, 0.25);
  b->to(DType::bf16);
  train::load_public_drafter(*b, {8, 6, 4096}, dir.file("a"));
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(same_bytes(raw::to_dtype(pa[i].second, DType::bf16), pb[i].second)) << pa[i].first;
  // Exported again, the file's tensors are the same bytes.
  train::write_public_drafter(*b, {8, 6, 4096}, dir.file("b"));
  const auto fa = safetensors::open(dir.file("a/model.safetensors"));
  const auto fb = safetensors::open(dir.file("b/model.safetensors"));
  for (const std::string& n : fa->names()) EXPECT_TRUE(same_bytes(fa->load(n), fb->load(n))) << n;
  EXPECT_EQ(read_json(dir.file("a/config.json")), read_json(dir.file("b/config.json")));
}

TEST(DrafterExport, BadFolderIsOneClearError) {
  TempDir dir;
  auto d = small_drafter(16, 24, 5);
  const train::PublicDrafterInfo info{8, 6, 4096};
  EXPECT_ERROR_HAS(train::load_public_drafter(*d, info, dir.file("none")), "not a folder");
  std::filesystem::create_directories(dir.file("empty"));
  EXPECT_ERROR_HAS(train::load_public_drafter(*d, info, dir.file("empty")), "no config.json");
  train::write_public_drafter(*d, info, dir.file("ok"));
  // Export never overwrites.
  EXPECT_ERROR_HAS(train::write_public_drafter(*d, info, dir.file("ok")), "already holds");
  // Two fields off: one error naming both, and what to change.
  EXPECT_ERROR_HAS(train::load_public_drafter(*d, {16, 7, 4096}, dir.file("ok")), "2 field(s)",
                   "block_size: 8 in config.json, 16 here", "num_target_layers: 6",
                   "drafter.block_size");
  // Read for `chunkgrad eval --drafter` (no train config): the option is named as such.
  EXPECT_ERROR_HAS(train::load_public_drafter(*d, {16, 7, 4096}, dir.file("ok"), "--drafter"),
                   "--drafter '", "fix config.json, or choose another folder");
  // The right config but a tensor of another shape.
  auto wide = small_drafter(16, 32, 5);
  train::write_public_drafter(*wide, info, dir.file("wide"));
  std::filesystem::copy_file(dir.file("ok/config.json"), dir.file("wide/config.json"),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_ERROR_HAS(train::load_public_drafter(*d, info, dir.file("wide")),
                   "layers.0.mlp.gate_proj.weight", "[32, 16]", "[24, 16]");
  // An outside tester: eval's message spoke of "this run's drafter" (eval has no run), and a
  // wrong fc shape did not say what fc must be.
  safetensors::NamedTensors three_layers_fc;
  for (const auto& [n, p] : d->named_parameters())
    three_layers_fc.emplace_back(n, n == "fc.weight" ? zeros({16, 48}) : p.detach());
  safetensors::save_file(three_layers_fc, dir.file("ok/model.safetensors"));
  const std::string fc = ::cg::testing::error_of(
      [&] { train::load_public_drafter(*d, info, dir.file("ok"), "--drafter"); });
  EXPECT_NE(fc.find("'fc.weight' is [16, 48] in model.safetensors and [16, 32] in the drafter "
                    "config.json describes (n target_layer_ids need fc [H, n*H]; 2 ids and "
                    "H = 16 give [16, 32])"),
            std::string::npos)
      << fc;
  EXPECT_EQ(fc.find("this run"), std::string::npos) << fc;
  // An lm_head in the file is not a drafter's.
  safetensors::NamedTensors extra;
  for (const auto& [n, p] : d->named_parameters()) extra.emplace_back(n, p.detach());
  extra.emplace_back("lm_head.weight", d->head_weight());
  safetensors::save_file(extra, dir.file("ok/model.safetensors"));
  EXPECT_ERROR_HAS(train::load_public_drafter(*d, info, dir.file("ok")), "lm_head.weight",
                   "no embedding, no lm_head");
  std::filesystem::remove(dir.file("ok/model.safetensors"));
  EXPECT_ERROR_HAS(train::load_public_drafter(*d, info, dir.file("ok")), "no model.safetensors");
}

// A run's drafter as its chunkgrad checkpoints hold it ("drafter." + name, the step and
// the train config in the metadata).
struct SavedDrafter {
  nn::DFlashDrafterConfig dc;
  Tensor table;
  std::unique_ptr<nn::DFlashDrafter> drafter;
  safetensors::NamedTensors tensors;
  explicit SavedDrafter(const train::TrainConfig& config)
      : dc(train::run_drafter_config(config)),
        table(randn({dc.layers.vocab_size, dc.layers.hidden_size})) {
    Generator gen(3);
    drafter =
        std::make_unique<nn::DFlashDrafter>(dc, table, table, nn::InitOptions{.generator = &gen});
    for (const auto& [n, p] : drafter->named_parameters())
      tensors.emplace_back("drafter." + n, p.detach());
  }
  std::string save(const std::string& path, const std::string& step,
                   const std::string& config_text) const {
    safetensors::save_file(
        tensors, path,
        {{"format", "chunkgrad-dflash-drafter-1"}, {"step", step}, {"config", config_text}});
    return path;
  }
};

// `chunkgrad export`'s work from a chunkgrad checkpoint: the drafter is rebuilt from the
// config saved in the file, so the toy target's theta (10000) stays out of config.json.
TEST(DrafterExport, FromACheckpointFile) {
  TempDir dir;
  train::TrainConfig config;
  config.drafter.rope_theta = 5e5;
  const SavedDrafter saved(config);
  const nn::DFlashDrafterConfig& dc = saved.dc;
  const nn::DFlashDrafter& d = *saved.drafter;
  const std::string ckpt =
      saved.save(dir.file("step_00000007.safetensors"), "7", config.to_json().dump());
  const train::ExportResult r = train::export_drafter_checkpoint("", ckpt, dir.file("out"));
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.parameters, dc.parameter_count());
  const json c = read_json(dir.file("out/config.json"));
  EXPECT_EQ(c["rope_theta"].get<double>(), 5e5);
  EXPECT_EQ(c["block_size"], config.drafter.block_size);
  EXPECT_EQ(c["num_target_layers"], config.target.num_layers);
  EXPECT_EQ(c["dflash_config"]["mask_token_id"], dc.mask_token_id);
  // And back: the exported folder loads into the same run's drafter.
  Generator gen(4);
  nn::DFlashDrafter back(dc, saved.table, saved.table, nn::InitOptions{.generator = &gen});
  train::load_public_drafter(back, train::public_drafter_info(config), dir.file("out"));
  EXPECT_TRUE(same_bytes(raw::to_dtype(d.fc->weight, DType::bf16),
                         raw::to_dtype(back.fc->weight, DType::bf16)));
  EXPECT_ERROR_HAS(train::export_drafter_checkpoint(dir.str(), "", dir.file("out2")),
                   "no drafter checkpoint", "--checkpoint");
}

// What a user sees when a checkpoint is damaged or --out cannot be a folder: one line that
// names the file and what to do, never a bare "stoll" or a raw filesystem exception.
TEST(DrafterExport, DamagedCheckpointOrBadOutIsOneClearError) {
  TempDir dir;
  train::TrainConfig config;
  const SavedDrafter saved(config);
  auto save = [&](const std::string& name, const std::string& step, const std::string& cfg) {
    return saved.save(dir.file(name), step, cfg);
  };
  const std::string good = config.to_json().dump();
  EXPECT_ERROR_HAS(
      train::export_drafter_checkpoint("", save("a.safetensors", "abc", good), dir.file("out_a")),
      "a.safetensors has step metadata \"abc\", not a step number");
  EXPECT_ERROR_HAS(
      train::export_drafter_checkpoint("", save("b.safetensors", "7x", good), dir.file("out_b")),
      "step metadata \"7x\"");
  const std::string damaged_config =
      "export: " + dir.file("c.safetensors") + ": train config: drafter.num_layers";
  EXPECT_ERROR_HAS(
      train::export_drafter_checkpoint(
          "", save("c.safetensors", "7", R"({"drafter": {"num_layers": "x"}})"), dir.file("out_c")),
      damaged_config.c_str());
  const std::string ok = save("d.safetensors", "7", good);
  std::ofstream(dir.file("a_file")) << "x";
  EXPECT_ERROR_HAS(train::export_drafter_checkpoint("", ok, dir.file("a_file")),
                   "a_file is a file, not a folder", "--out");
  EXPECT_ERROR_HAS(train::export_drafter_checkpoint("", ok, dir.file("a_file/sub")),
                   "cannot make the folder", "a_file/sub", "--out");
  // A run on a Hugging Face target whose folder is gone (or was given relative to another
  // directory): the error says so and what to do.
  json moved = config.to_json();
  moved["target"]["checkpoint"] = "no_such_target";
  moved["target"]["hf_config"] = "no_such_target/config.json";
  EXPECT_ERROR_HAS(train::export_drafter_checkpoint("", save("e.safetensors", "7", moved.dump()),
                                                    dir.file("out_e")),
                   "the drafter cannot be rebuilt from the run's saved config",
                   "no_such_target/config.json", "run export from the folder the run started in");
}

// A run from offline features takes its target's shapes from the feature folder; exported
// after that folder is gone, the error says so (Note [Export needs the run's target]; it
// used to be the shapes' mismatch, or none where the toy's shapes happened to fit).
TEST(DrafterExport, ARunFromAFeatureFolderThatIsGoneSaysSo) {
  TempDir dir;
  const SavedDrafter saved(train::TrainConfig{});  // the toy target's shapes (hidden 64)
  json config = train::TrainConfig{}.to_json();
  config["features"]["source"] = "offline";
  config["features"]["dir"] = dir.file("gone_features");
  config["target"]["hidden_size"] = 32;  // what the run falls back to without the folder
  config["target"]["head_dim"] = 16;
  const std::string ckpt = saved.save(dir.file("step_00000005.safetensors"), "5", config.dump());
  const std::string gone = "offline features in " + dir.file("gone_features");
  EXPECT_ERROR_HAS(train::export_drafter_checkpoint("", ckpt, dir.file("out")), gone.c_str(),
                   "index.json cannot be read", "put the features back");
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
}

// A mismatch in a list field shows the list config.json holds, so the user knows what to set.
TEST(DrafterExport, MismatchedListsAreShown) {
  TempDir dir;
  auto d = small_drafter(16, 24, 5);
  const train::PublicDrafterInfo info{8, 6, 4096};
  train::write_public_drafter(*d, info, dir.file("ok"));
  json c = read_json(dir.file("ok/config.json"));
  c["dflash_config"]["target_layer_ids"] = {2, 4};
  std::ofstream(dir.file("ok/config.json")) << c.dump();
  EXPECT_ERROR_HAS(train::load_public_drafter(*d, info, dir.file("ok")),
                   "dflash_config.target_layer_ids: [2, 4] in config.json");
}

TEST(DrafterExport, InitFromIsAConfigField) {
  train::TrainConfig c;
  EXPECT_EQ(c.drafter.init_from, "");
  json j = c.to_json();
  j["drafter"]["init_from"] = "/models/Qwen3-8B-DFlash-b16";
  EXPECT_EQ(train::TrainConfig::from_json(j).drafter.init_from, "/models/Qwen3-8B-DFlash-b16");
}

}  // namespace
}  // namespace cg
