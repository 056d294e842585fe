// Why this file exists: `chunkgrad features` and `chunkgrad train --features DIR` end to
// end: bad options are one error line and exit 1; features written from the toy target
// train a drafter that learns as the toy run's does; and a damaged or mismatched feature
// folder is refused before the run directory changes. Runs the built program
// (tests/CMakeLists.txt passes its path) at CI sizes, a second or two in all.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "train/chat_data.h"
#include "train/feature_target.h"
#include "train/offline_features.h"
#include "train_program_fixture.h"

namespace {

namespace fs = std::filesystem;

using ProgramRun = train_program_fixture::TrainRun;
using train_program_fixture::slurp;

// Every file under `dir` and its bytes (none when `dir` does not exist).
std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> files;
  if (!fs::exists(dir)) return files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[e.path().string()] = slurp(e.path().string());
  }
  return files;
}

// The toy target, trained once for the whole suite on "question N: answer 7N" lines, and
// 40 of those lines as pre-tokenized JSONL (BOS, bytes; loss mask on the answer).
class FeaturesProgram : public ::testing::Test {
 protected:
  static fs::path& root() {
    static fs::path p =
        fs::temp_directory_path() / ("chunkgrad_features_program_" + std::to_string(::getpid()));
    return p;
  }
  static std::string at(const std::string& name) { return (root() / name).string(); }
  static ProgramRun cli(const std::string& args) {
    const std::string cmd = std::string("CHUNKGRAD_NUM_THREADS=1 '") + CHUNKGRAD_CLI + "' " + args +
                            " >'" + at("out") + "' 2>'" + at("err") + "'";
    const int status = std::system(cmd.c_str());
    ProgramRun r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(at("out"));
    r.err = slurp(at("err"));
    return r;
  }
  static std::string config(const std::string& run_dir, const std::string& drafter_extra = "") {
    return R"({"run_dir": ")" + run_dir + R"(", "progress": false, "corpus": {"path": ")" +
           at("q.txt") + R"("},
      "target": {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1,
                 "head_dim": 16, "intermediate_size": 64, "seq_len": 48,
                 "optim": {"steps": 80, "batch_size": 4, "lr": 0.01}},
      "data": {"num_sequences": 12, "max_new_tokens": 24},
      "drafter": {)" +
           drafter_extra + R"("num_layers": 1, "intermediate_size": 64, "num_target_features": 1,
                  "block_size": 4, "max_anchors": 8, "checkpoint_every": 10,
                  "optim": {"steps": 80, "batch_size": 4, "lr": 0.01}},
      "eval": {"prompts": 3, "max_new_tokens": 24, "accuracy_sequences": 4, "timing_repeats": 1},
      "memory": {"enabled": false}})";
  }
  static void write(const std::string& name, const std::string& text) {
    std::ofstream(at(name)) << text;
  }
  static void SetUpTestSuite() {
    fs::remove_all(root());
    fs::create_directories(root());
    std::string text, jsonl;
    for (int i = 0; i < 200; ++i) {
      const std::string line =
          "question " + std::to_string(i) + ": answer " + std::to_string(i * 7);
      text += line + "\n";
      if (i % 5 != 0) continue;
      nlohmann::json ids = {256}, mask = {0};
      const size_t answer = line.find(": ") + 2;
      for (size_t c = 0; c < line.size(); ++c) {
        ids.push_back(static_cast<unsigned char>(line[c]));
        mask.push_back(c >= answer ? 1 : 0);
      }
      jsonl += nlohmann::json{{"input_ids", ids}, {"loss_mask", mask}}.dump() + "\n";
    }
    write("q.txt", text);
    write("q.jsonl", jsonl);
    write("toy.json", config(at("toy")));
    const ProgramRun r = cli("train --config '" + at("toy.json") + "' --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    write("toy_summary.json", r.out);
  }
  static void TearDownTestSuite() { fs::remove_all(root()); }

  static void expect_error(const ProgramRun& r, const std::string& command,
                           const std::string& what) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err.rfind("chunkgrad " + command + ": error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << what << " in: " << r.err;
  }
  // `chunkgrad features` from the toy run into `out`.
  static ProgramRun features(const std::string& out, const std::string& extra = "") {
    return cli("features --target '" + at("toy") + "' --data '" + at("q.jsonl") + "' --out '" +
               at(out) + "' --no-progress " + extra);
  }
};

TEST_F(FeaturesProgram, BadOptionsAreOneErrorLine) {
  const std::string data = " --data '" + at("q.jsonl") + "'";
  const std::string target = " --target '" + at("toy") + "'";
  expect_error(cli("features" + data + " --out " + at("x")), "features", "--target");
  expect_error(cli("features --target " + at("nowhere") + data + " --out " + at("x")), "features",
               "nowhere");
  // An output folder that cannot be made is refused before the target loads.
  write("a_file", "x");
  expect_error(cli("features" + target + data + " --out " + at("a_file/sub")), "features",
               "cannot create the folder");
  expect_error(cli("features" + target + data + " --out " + at("x") + " --dtype f16"), "features",
               "--dtype");
  expect_error(cli("features" + target + data + " --out " + at("x") + " --layers 1,x"), "features",
               "--layers");
  expect_error(cli("features" + target + data + " --out " + at("x") + " --layers 7"), "features",
               "layer 7 does not exist; the target has 2 decoder layers");
  expect_error(cli("features" + target + data + " --out " + at("x") + " --layers 1,1"), "features",
               "layer 1 is listed twice");
  expect_error(cli("features" + target + data + " --out " + at("x") + " --device nodevice"),
               "features", "--device");
  write("bad.jsonl",
        "{\"input_ids\": [256, 65, 66]}\n{\"input_ids\": [1, 2], \"loss_mask\": [1]}\n");
  expect_error(
      cli("features" + target + " --data " + at("bad.jsonl") + " --out " + at("x") + " --strict"),
      "features", "bad.jsonl:2: loss_mask must be an array of 2");
  write("bad2.jsonl", "{\"input_ids\": [256, 65, 9999]}\n");
  expect_error(
      cli("features" + target + " --data " + at("bad2.jsonl") + " --out " + at("x") + " --strict"),
      "features", "9999");
  EXPECT_FALSE(fs::exists(at("x") + "/index.json"));
  // Without --strict bad lines are skipped and counted (docs/chat_data.md).
  const ProgramRun skipped =
      cli("features" + target + " --data " + at("bad.jsonl") + " --out " + at("skipped"));
  EXPECT_EQ(skipped.exit_code, 0) << skipped.err;
  EXPECT_NE(skipped.out.find("features: 1 samples"), std::string::npos) << skipped.out;
  EXPECT_NE(skipped.err.find("1 sample; 1 bad line skipped (first: line 2: loss_mask must be"),
            std::string::npos)
      << skipped.err;
  expect_error(cli("features" + target + " --data " + at("bad2.jsonl") + " --out " + at("x")),
               "features", "no samples in the data");
  // A folder that holds a feature set already.
  ASSERT_EQ(features("twice").exit_code, 0);
  expect_error(features("twice"), "features", "already holds index.json");
  // A folder with other things in it (an interrupted run's shards, without index.json).
  fs::remove(at("twice") + "/index.json");
  expect_error(features("twice"), "features", "is not empty");
}

// --fresh starts over in a folder holding a feature set, finished or not: the old files go
// (no stale shard stays beside the new set) and the new set is the one a clean run writes.
// Anything else in the folder is one error line, and nothing is removed.
TEST_F(FeaturesProgram, FreshStartsOverAndTouchesNothingElse) {
  ASSERT_EQ(features("clean", "--shard-mb 1").exit_code, 0);
  ASSERT_EQ(features("again", "--shard-mb 1").exit_code, 0);
  write("again/features-00099.safetensors", "an older run's shard");
  write("again/index.json.tmp", "a torn write");
  fs::remove(at("again") + "/index.json");  // as if interrupted
  const ProgramRun r = features("again", "--shard-mb 1 --fresh");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> clean, again;
  for (const auto& [path, bytes] : files_of(at("clean")))
    clean[fs::path(path).filename().string()] = bytes;
  for (const auto& [path, bytes] : files_of(at("again")))
    again[fs::path(path).filename().string()] = bytes;
  EXPECT_EQ(again, clean);
  // Over a finished set too; a new folder is fine as well.
  ASSERT_EQ(features("again", "--fresh").exit_code, 0);
  ASSERT_EQ(features("new_with_fresh", "--fresh").exit_code, 0);
  // A file that is not a feature set's: refused before anything is removed.
  write("again/notes.txt", "mine");
  const auto before = files_of(at("again"));
  expect_error(features("again", "--fresh"), "features", "holds notes.txt, which is not");
  EXPECT_EQ(files_of(at("again")), before);
  // Without --fresh a finished set is refused, naming the flag.
  fs::remove(at("again") + "/notes.txt");
  expect_error(features("again"), "features", "--fresh to replace it");
}

// Features written from the toy target by `chunkgrad features` train a drafter that learns
// as the toy run's does (which trains on the target's own generations instead).
TEST_F(FeaturesProgram, AnOfflineRunLearnsAsTheToyRunDoes) {
  const ProgramRun f = features("qf");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_NE(f.out.find("features: 40 samples"), std::string::npos) << f.out;
  const nlohmann::json index = nlohmann::json::parse(slurp(at("qf/index.json")));
  EXPECT_EQ(index["layer_ids"], nlohmann::json({1}));  // the run's drafter layers: 2 layers, n 1
  EXPECT_EQ(index["dtype"], "bf16");
  const ProgramRun r = cli("train --config '" + at("toy.json") + "' --run-dir '" + at("off") +
                           "' --features '" + at("qf") + "' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json off = nlohmann::json::parse(r.out);
  const nlohmann::json toy = nlohmann::json::parse(slurp(at("toy_summary.json")));
  EXPECT_NE(off["evaluation_skipped"].get<std::string>().find("speculative decoding"),
            std::string::npos);
  EXPECT_TRUE(off["tau"].is_null()) << off["tau"];  // no decoding ran: null, not 0
  EXPECT_TRUE(off["speedup"].is_null()) << off["speedup"];
  EXPECT_FALSE(fs::exists(at("off/target")));  // no target trained or cached
  std::vector<double> losses;
  std::istringstream log(slurp(at("off/metrics.jsonl")));
  for (std::string line; std::getline(log, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["phase"] == "drafter") losses.push_back(j["loss"].get<double>());
  }
  ASSERT_EQ(losses.size(), 80u);
  const double first = (losses[0] + losses[1] + losses[2]) / 3;
  const double last = (losses[77] + losses[78] + losses[79]) / 3;
  EXPECT_LT(last, 0.4 * first) << "the loss did not fall: " << first << " -> " << last;
  const double off_acc = off["per_slot_accuracy"][1].get<double>();
  const double toy_acc = toy["per_slot_accuracy"][1].get<double>();
  EXPECT_GT(off_acc, 0.5);
  EXPECT_GT(off_acc, toy_acc - 0.2) << "offline " << off_acc << ", toy " << toy_acc;
}

// The offline run on the GPU (pinned read-ahead, asynchronous uploads): it learns as on
// the CPU.
TEST_F(FeaturesProgram, AnOfflineRunOnTheGpuLearnsAsOnTheCpu) {
  if (!cg::cuda_available()) GTEST_SKIP() << "no GPU";
  ASSERT_EQ(features("gpu_f").exit_code, 0);
  const ProgramRun cpu = cli("train --config '" + at("toy.json") + "' --run-dir '" + at("gpu_cpu") +
                             "' --features '" + at("gpu_f") + "' --json");
  const ProgramRun gpu = cli("train --config '" + at("toy.json") + "' --run-dir '" + at("gpu_gpu") +
                             "' --features '" + at("gpu_f") + "' --device cuda --json");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  const double a = nlohmann::json::parse(cpu.out)["per_slot_accuracy"][1].get<double>();
  const double b = nlohmann::json::parse(gpu.out)["per_slot_accuracy"][1].get<double>();
  EXPECT_NEAR(a, b, 0.05) << "cpu " << a << ", gpu " << b;
}

// A damaged or mismatched folder: one error line naming the file and the field, and the
// run directory as it was (here: an offline run's, from the test above's kind of run).
TEST_F(FeaturesProgram, AMismatchedOrDamagedFolderLeavesTheRunDirectoryUnchanged) {
  ASSERT_EQ(features("good").exit_code, 0);
  const std::string run = at("refused");
  ASSERT_EQ(cli("train --config '" + at("toy.json") + "' --run-dir '" + run + "' --features '" +
                at("good") + "'")
                .exit_code,
            0);
  const auto before = files_of(run);
  // Other layers than the config's drafter reads.
  std::string layers = config(run, R"("target_layers": [0, 1], )");
  const std::string one = R"("num_target_features": 1)";  // as many as it lists: no warning
  layers.replace(layers.find(one), one.size(), R"("num_target_features": 2)");
  write("layers.json", layers);
  expect_error(cli("train --config '" + at("layers.json") + "' --features '" + at("good") + "'"),
               "train", "index.json: field 'num_layers' disagrees with the config");
  EXPECT_EQ(files_of(run), before);
  // Features of another target (their index says so).
  fs::copy(at("good"), at("moved"), fs::copy_options::recursive);
  {
    nlohmann::json index = nlohmann::json::parse(slurp(at("moved/index.json")));
    index["target_fingerprint"] = "0123456789abcdef0123456789abcdef";
    write("moved/index.json", index.dump(2));
  }
  expect_error(cli("train --config '" + at("toy.json") + "' --run-dir '" + run + "' --features '" +
                   at("moved") + "'"),
               "train", "field 'target_fingerprint'");
  EXPECT_EQ(files_of(run), before);
  // A truncated shard.
  const std::string shard = at("good/features-00000.safetensors");
  fs::resize_file(shard, fs::file_size(shard) - 100);
  expect_error(cli("train --config '" + at("toy.json") + "' --run-dir '" + run + "' --features '" +
                   at("good") + "'"),
               "train", "features-00000.safetensors is");
  EXPECT_EQ(files_of(run), before);
  // A fresh run directory is not left behind (an outside tester found it left empty).
  expect_error(cli("train --config '" + at("toy.json") + "' --run-dir '" + at("fresh") +
                   "' --features '" + at("good") + "'"),
               "train", "truncated");
  EXPECT_FALSE(fs::exists(at("fresh")));
  // Synthetic features without the target's sizes (there is no target model to take them from).
  write("synthetic.json", R"({"features": {"source": "synthetic"}})");
  expect_error(cli("train --config '" + at("synthetic.json") + "'"), "train",
               "drafter.hidden_size, drafter.vocab_size and drafter.num_target_layers");
}

// Note [Held-out samples on resume]: an outside tester resumed an offline run with another
// eval.accuracy_sequences, which holds out another number of samples: the run trained on
// other samples from the checkpoint on, without a word. Refused now, naming both values;
// another eval field may still change.
TEST_F(FeaturesProgram, AResumeMayNotChangeWhichSamplesAreHeldOut) {
  ASSERT_EQ(features("held").exit_code, 0);
  const std::string run = at("held_run");
  const std::string train = "train --config '" + at("toy.json") + "' --run-dir '" + run +
                            "' --features '" + at("held") + "' --set drafter.optim.steps=";
  ASSERT_EQ(cli(train + "10").exit_code, 0);
  const auto before = files_of(run);
  expect_error(cli(train + "20 --set eval.accuracy_sequences=1"), "train",
               "was trained with eval.accuracy_sequences 4 and it is 1 now: with "
               "features.source offline that field also decides how many of the last samples "
               "are held out of training");
  EXPECT_EQ(files_of(run), before);
  const ProgramRun other = cli(train + "20 --set eval.timing_repeats=2 --json");
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(nlohmann::json::parse(other.out)["drafter_steps"]["resumed_at"], 10);
}

// An outside tester: a drafter.* the drafter cannot be built with on the features' target
// failed after the run directory was written: an earlier run's summary.json was gone and its
// config.json held the refused config. Refused now before anything is written.
TEST_F(FeaturesProgram, AnUnbuildableDrafterLeavesTheRunDirectoryAsItWas) {
  ASSERT_EQ(features("unbuildable").exit_code, 0);
  const std::string run = at("unbuildable_run");
  const std::string train = "train --config '" + at("toy.json") + "' --features '" +
                            at("unbuildable") + "' --set drafter.optim.steps=2 --run-dir '";
  ASSERT_EQ(cli(train + run + "'").exit_code, 0);
  const auto before = files_of(run);
  ASSERT_EQ(before.count(run + "/summary.json"), 1u);
  for (const auto& [set, what] : std::vector<std::pair<std::string, std::string>>{
           {"drafter.hidden_size=64", "drafter.hidden_size is 64 but the target's is 32"},
           {"drafter.num_target_layers=3", "drafter.num_target_layers is 3 but the target's is 2"},
           {"drafter.num_kv_heads=3", "drafter.num_heads 0 (the target's: 2) is not a multiple"},
           {"drafter.head_loss_chunk_rows=0 --set drafter.head_loss_chunk_budget_mb=0.0001",
            "drafter.head_loss_chunk_budget_mb"}}) {
    SCOPED_TRACE(set);
    expect_error(cli(train + run + "' --fresh --set " + set), "train", what);
    EXPECT_EQ(files_of(run), before);
  }
  expect_error(cli(train + at("unbuildable_new") + "' --set drafter.hidden_size=64"), "train",
               "drafter.hidden_size is 64");
  EXPECT_FALSE(fs::exists(at("unbuildable_new")));
}

// Note [Layers from the feature folder]: without drafter.target_layers in the config or a
// --set, a run from features reads the layers the folder holds (a SpecForge user's
// expectation; the public rule's one layer failed against these two). Named, they must agree.
TEST_F(FeaturesProgram, TheFoldersLayersAreTheDefault) {
  ASSERT_EQ(features("two_layers", "--layers 0,1").exit_code, 0);
  const std::string run = at("two_layers_run");
  const std::string train = "train --config '" + at("toy.json") + "' --run-dir '" + run +
                            "' --features '" + at("two_layers") + "' --set drafter.optim.steps=2";
  const ProgramRun r = cli(train);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(run + "/config.json"))["drafter"]["target_layers"],
            nlohmann::json({0, 1}));
  expect_error(cli(train + " --fresh --set drafter.target_layers=[1]"), "train",
               "index.json: field 'num_layers' disagrees with the config");
}

// An outside tester: with --features, target.* that disagreed with the features' target
// trained anyway (on the features' target) and then exported target_layer_ids of the
// config's; a MASK id that is a byte of the data was accepted; a features --out that this
// run made was left empty when no sample was valid.
TEST_F(FeaturesProgram, TheConfigMustDescribeTheFeaturesTarget) {
  ASSERT_EQ(features("target_of").exit_code, 0);
  const std::string run = at("target_of_run");
  const std::string train = "train --config '" + at("toy.json") + "' --run-dir '" + run +
                            "' --features '" + at("target_of") + "' ";
  expect_error(cli(train + "--set target.num_layers=6"), "train",
               "target.num_layers 6 (the features' target: 2)");
  expect_error(cli(train + "--set target.num_layers=6"), "train", "--set target.num_layers=2");
  expect_error(cli(train + "--set target.hidden_size=64"), "train",
               "target.hidden_size 64 (the features' target: 32)");
  expect_error(cli(train + "--set drafter.mask_token_id=32"), "train",
               "which is drafter.mask_token_id");
  EXPECT_FALSE(fs::exists(run));
  // Masks all 0: nothing to anchor; refused at open, before the run directory is made.
  std::string unmasked;
  for (int i = 0; i < 8; ++i) {
    nlohmann::json ids = nlohmann::json::array(), mask = nlohmann::json::array();
    for (int c = 0; c < 20; ++c) {
      ids.push_back(97 + (i + c) % 26);
      mask.push_back(0);
    }
    unmasked += nlohmann::json{{"input_ids", ids}, {"loss_mask", mask}}.dump() + "\n";
  }
  write("unmasked.jsonl", unmasked);
  ASSERT_EQ(cli("features --target '" + at("toy") + "' --data '" + at("unmasked.jsonl") +
                "' --out '" + at("unmasked") + "' --no-progress")
                .exit_code,
            0);
  expect_error(cli("train --config '" + at("toy.json") + "' --run-dir '" + run + "' --features '" +
                   at("unmasked") + "'"),
               "train", "has two loss positions in a row");
  EXPECT_FALSE(fs::exists(run));
  // The byte target's MASK in pre-tokenized data: refused by features, not only by train.
  write("masked.jsonl", std::string(R"({"input_ids": [104, 105, 259, 106, 107, 108]})") + "\n");
  expect_error(cli("features --target '" + at("toy") + "' --data '" + at("masked.jsonl") +
                   "' --out '" + at("masked") + "' --no-progress"),
               "features", "sample 0 holds 259 at token 2, the byte tokenizer's MASK");
  EXPECT_FALSE(fs::exists(at("masked")));
  write("nothing.jsonl", std::string(R"({"input_ids": [1]})") + "\n");
  expect_error(cli("features --target '" + at("toy") + "' --data '" + at("nothing.jsonl") +
                   "' --out '" + at("made_empty") + "' --no-progress"),
               "features", "nothing.jsonl");
  EXPECT_FALSE(fs::exists(at("made_empty")));
}

// Note [Resuming features]: a `chunkgrad features` run stopped part-way (made here with the
// library call the command makes, stopped from its progress callback after some shards) is
// resumed by the same command, and its features equal an uninterrupted run's bit for bit;
// the command with other --layers is one error line that leaves the folder as it was.
TEST_F(FeaturesProgram, TheSameCommandResumesAnInterruptedRun) {
  ASSERT_EQ(features("uninterrupted").exit_code, 0);
  const cg::train::FeatureTarget target = cg::train::load_feature_target(at("toy"), cg::kCPU);
  const cg::train::ChatData data =
      cg::train::read_chat_data({at("q.jsonl")}, {.vocab_size = target.lm->config().vocab_size});
  std::vector<std::string> datasets;
  for (const auto& sample : data.samples) datasets.push_back(sample.dataset);
  struct Stop {};
  const auto stop_part_way = [&](const std::string& out) {
    try {
      cg::train::write_feature_files(
          target, data.sequences(), target.default_layers, cg::DType::bf16, at(out), 4096,
          [](int64_t i) {
            if (i == 25) throw Stop{};
          },
          datasets);
      ADD_FAILURE() << "not stopped";
    } catch (const Stop&) {}
    ASSERT_TRUE(fs::exists(at(out + "/index.partial.json")));
    ASSERT_FALSE(fs::exists(at(out + "/index.json")));
  };
  stop_part_way("stopped");
  const ProgramRun r = features("stopped");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("features: 40 samples"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("written by the interrupted run)"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(at("stopped/index.partial.json")));
  cg::train::OfflineFeatureSource resumed(at("stopped")), whole(at("uninterrupted"));
  ASSERT_EQ(resumed.sequences().size(), 40u);
  std::vector<int64_t> all;
  for (int64_t i = 0; i < 40; ++i) {
    all.push_back(i);
    EXPECT_EQ(resumed.sequences()[static_cast<size_t>(i)].ids,
              whole.sequences()[static_cast<size_t>(i)].ids);
  }
  const cg::train::FeatureBatch a = resumed.fetch(all, cg::kCPU), b = whole.fetch(all, cg::kCPU);
  EXPECT_EQ(a.hidden_states.to_vector(), b.hidden_states.to_vector());
  EXPECT_EQ(a.last_hidden.to_vector(), b.last_hidden.to_vector());
  // Another run's options on the interrupted folder: one line, and nothing changes.
  stop_part_way("mismatched");
  const auto before = files_of(at("mismatched"));
  const int64_t other = target.default_layers.at(0) == 0 ? 1 : 0;
  expect_error(features("mismatched", "--layers " + std::to_string(other)), "features",
               "field 'layer_ids'");
  EXPECT_EQ(files_of(at("mismatched")), before);
}

}  // namespace
