// Why this file exists: the Module base is what optimisers, checkpoints and traces rely
// on, so its contract is checked here on small hand-built trees: registration order and
// dotted names, shared parameters listed once, freezing and counts, the checked
// state-dict load (each error names the key and what differs), in-place dtype casts,
// parameters allocated as MemoryCategory::parameter, forward scopes in the trace, and
// Linear (values, PyTorch init bounds, gradients) and checkpoint files.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/factories.h"
#include "core/memory_trace.h"
#include "gradcheck.h"
#include "nn/checkpoint.h"
#include "nn/linear.h"
#include "nn_test_util.h"
#include "ops/ops.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

using nn::Linear;
using nn::LinearOptions;
using testing_nn::bit_equal;
using testing_nn::TempDir;

// Block(d): proj (Linear d->d, bias) and scale [d]; forward = proj(x) * scale.
class Block : public nn::Module {
 public:
  Block(int64_t d, Generator* gen) : Module("Block") {
    proj = register_module(
        "proj",
        std::make_unique<Linear>(d, d, LinearOptions{.bias = true, .init = {.generator = gen}}));
    CategoryGuard category(MemoryCategory::parameter);
    scale = full({d}, 0.5);
    register_parameter("scale", &scale);
  }
  Tensor forward(const Tensor& x) const {
    auto scope = enter_scope();
    return proj->forward(x) * scale;
  }
  Linear* proj;
  Tensor scale;
};

// Toy: Linear "inp" (3 -> d), a list "layers" of n Blocks, Linear "head" (d -> 2, bias).
class Toy : public nn::Module {
 public:
  explicit Toy(uint64_t seed, int64_t d = 4, int n = 2) : Module("Toy"), gen(seed) {
    inp = register_module(
        "inp", std::make_unique<Linear>(3, d, LinearOptions{.init = {.generator = &gen}}));
    layers = register_module("layers", std::make_unique<nn::ModuleList>());
    for (int i = 0; i < n; ++i) layers->push_back(std::make_unique<Block>(d, &gen));
    head = register_module(
        "head",
        std::make_unique<Linear>(d, 2, LinearOptions{.bias = true, .init = {.generator = &gen}}));
  }
  Tensor forward(const Tensor& x) const {
    auto scope = enter_scope();
    Tensor h = inp->forward(x);
    for (size_t i = 0; i < layers->size(); ++i) h = layers->at<Block>(i).forward(h);
    return head->forward(h);
  }
  Generator gen;
  Linear* inp;
  nn::ModuleList* layers;
  Linear* head;
};

std::vector<std::string> names_of(const nn::NamedParameters& params) {
  std::vector<std::string> out;
  for (const auto& [n, t] : params) out.push_back(n);
  return out;
}

TEST(NnModule, RegistrationOrderAndDottedNames) {
  Toy toy(1);
  // PyTorch's order: a module's own parameters, then its children's, each in
  // registration order (Block registers proj before scale, yet scale comes first).
  EXPECT_EQ(
      names_of(toy.named_parameters()),
      (std::vector<std::string>{"inp.weight", "layers.0.scale", "layers.0.proj.weight",
                                "layers.0.proj.bias", "layers.1.scale", "layers.1.proj.weight",
                                "layers.1.proj.bias", "head.weight", "head.bias"}));
  std::vector<std::string> modules;
  for (const auto& [n, m] : toy.named_modules()) modules.push_back(n + ":" + m->type_name());
  EXPECT_EQ(modules,
            (std::vector<std::string>{":Toy", "inp:Linear", "layers:ModuleList", "layers.0:Block",
                                      "layers.0.proj:Linear", "layers.1:Block",
                                      "layers.1.proj:Linear", "head:Linear"}));
  // Trace scope names: registration names; list items carry the list's name.
  EXPECT_EQ(toy.name(), "Toy");
  EXPECT_EQ(toy.layers->at<Block>(1).name(), "layers.1");
  EXPECT_EQ(toy.layers->at<Block>(1).proj->name(), "proj");
  EXPECT_EQ(&toy.submodule("layers.1.proj"), toy.layers->at<Block>(1).proj);
  EXPECT_TRUE(toy.parameter("layers.0.scale").is_same(toy.layers->at<Block>(0).scale));
  TENSOR_EXPECT_ERROR(toy.submodule("layers.7"), "no submodule at 'layers.7'");
  TENSOR_EXPECT_ERROR(toy.parameter("head.nope"), "no parameter named 'head.nope'");
  for (const Tensor& p : toy.parameters()) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
}

TEST(NnModule, RegistrationErrors) {
  struct Bad : nn::Module {
    Bad() : Module("Bad") {}
    void add(const std::string& name) {
      t = zeros({1});
      register_parameter(name, &t);
    }
    Tensor t;
  };
  Bad bad;
  bad.add("w");
  TENSOR_EXPECT_ERROR(bad.add("w"), "'w' is registered twice");
  TENSOR_EXPECT_ERROR(bad.add("a.b"), "contain no '.'");
}

TEST(NnModule, CountsFreezingAndZeroGrad) {
  Toy toy(2);
  // inp 3*4, each block 4*4+4+4, head 4*2+2.
  const int64_t total = 12 + 2 * 24 + 10;
  EXPECT_EQ(toy.num_parameters(), total);
  EXPECT_EQ(toy.num_trainable_parameters(), total);
  toy.layers->at<Block>(0).freeze();
  EXPECT_EQ(toy.num_parameters(), total);
  EXPECT_EQ(toy.num_trainable_parameters(), total - 24);

  Tensor loss = sum(toy.forward(ones({5, 3})));
  loss.backward();
  EXPECT_FALSE(toy.layers->at<Block>(0).proj->weight.grad().defined());  // frozen: no grad
  EXPECT_TRUE(toy.layers->at<Block>(1).proj->weight.grad().defined());
  EXPECT_TRUE(toy.inp->weight.grad().defined());  // gradient flows through frozen layers
  toy.zero_grad();
  for (const Tensor& p : toy.parameters()) EXPECT_FALSE(p.grad().defined());
  toy.unfreeze();
  EXPECT_EQ(toy.num_trainable_parameters(), total);
}

TEST(NnModule, TrainEvalReachesEveryModule) {
  Toy toy(3);
  EXPECT_TRUE(toy.is_training());
  toy.eval();
  for (const auto& [n, m] : toy.named_modules()) EXPECT_FALSE(m->is_training()) << n;
  toy.layers->train();
  EXPECT_FALSE(toy.is_training());
  EXPECT_TRUE(toy.layers->at<Block>(1).proj->is_training());
}

TEST(NnModule, StateDictRoundTripAndLoadErrors) {
  Toy a(10), b(11);
  ASSERT_FALSE(bit_equal(a.inp->weight, b.inp->weight));
  nn::StateDict sd = a.state_dict();
  EXPECT_EQ(sd.size(), 9u);
  EXPECT_FALSE(sd.at("head.bias").requires_grad());  // detached views
  EXPECT_EQ(sd.at("head.bias").data_ptr(), a.head->bias.data_ptr());
  const Tensor b_weight = b.inp->weight;
  b.load_state_dict(sd);
  for (const auto& [name, p] : b.named_parameters()) EXPECT_TRUE(bit_equal(p, sd.at(name))) << name;
  EXPECT_TRUE(b.inp->weight.is_same(b_weight));  // loaded in place
  EXPECT_TRUE(b.inp->weight.requires_grad());

  Toy c(12);
  const Tensor before = raw::clone(c.head->weight);
  nn::StateDict missing = sd;
  missing.erase("layers.1.scale");
  TENSOR_EXPECT_ERROR(c.load_state_dict(missing), "missing 1 key(s): layers.1.scale");
  nn::StateDict extra = sd;
  extra["layers.2.scale"] = zeros({4});
  TENSOR_EXPECT_ERROR(c.load_state_dict(extra), "unexpected 1 key(s): layers.2.scale");
  nn::StateDict wrong_shape = sd;
  wrong_shape["head.weight"] = zeros({3, 4});
  TENSOR_EXPECT_ERROR(c.load_state_dict(wrong_shape), "'head.weight' is [3, 4]",
                      "parameter is [2, 4]");
  nn::StateDict wrong_dtype = sd;
  wrong_dtype["head.bias"] = zeros({2}, {.dtype = DType::bf16});
  TENSOR_EXPECT_ERROR(c.load_state_dict(wrong_dtype), "'head.bias' is bf16", "parameter is f32",
                      "convert_dtype");
  // Failed loads wrote nothing (head.weight comes before head.bias in the tree).
  EXPECT_TRUE(bit_equal(c.head->weight, before));

  // Non-strict: the lists come back, the rest loads.
  nn::LoadResult r = c.load_state_dict(missing, /*strict=*/false);
  EXPECT_EQ(r.missing, std::vector<std::string>{"layers.1.scale"});
  EXPECT_TRUE(r.unexpected.empty());
  EXPECT_TRUE(bit_equal(c.head->weight, sd.at("head.weight")));
  // convert_dtype: a bf16 value fills an f32 parameter.
  c.load_state_dict(wrong_dtype, true, /*convert_dtype=*/true);
  EXPECT_EQ(c.head->bias.dtype(), DType::f32);
  EXPECT_EQ(c.head->bias.to_vector(), (std::vector<double>{0, 0}));
}

TEST(NnModule, SharedParameterListedOnceAndLoadsByAlias) {
  struct Tied : nn::Module {
    Tied() : Module("Tied") {
      a = register_module("a", std::make_unique<Linear>(3, 2, LinearOptions{}));
      b = register_module(
          "b", std::make_unique<Linear>(3, 2, LinearOptions{.shared_weight = a->weight}));
    }
    Linear *a, *b;
  };
  Tied t;
  EXPECT_TRUE(t.a->weight.is_same(t.b->weight));
  EXPECT_EQ(names_of(t.named_parameters()), std::vector<std::string>{"a.weight"});
  EXPECT_EQ(names_of(t.named_parameters_with_aliases()),
            (std::vector<std::string>{"a.weight", "b.weight"}));
  EXPECT_EQ(t.num_parameters(), 6);
  EXPECT_EQ(t.state_dict().size(), 1u);
  // Either name satisfies the shared parameter; both are known keys.
  Tensor v = full({2, 3}, 2.0);
  t.load_state_dict({{"b.weight", v}});
  EXPECT_EQ(t.a->weight.to_vector(), v.to_vector());
  t.load_state_dict({{"a.weight", v * 3.0}, {"b.weight", v * 3.0}});
  EXPECT_EQ(t.b->weight.to_vector()[0], 6.0);
  TENSOR_EXPECT_ERROR(Linear(3, 2, LinearOptions{.shared_weight = zeros({3, 2})}),
                      "shared weight is [3, 2]", "needs [2, 3]");
}

TEST(NnModule, ToDtypeCastsInPlaceAndKeepsSharing) {
  Toy toy(4);
  const Tensor w = toy.inp->weight;
  const std::vector<double> values = w.to_vector();
  sum(toy.forward(ones({2, 3}))).backward();
  toy.to(DType::bf16);
  EXPECT_TRUE(toy.inp->weight.is_same(w));  // the same tensor object ...
  EXPECT_EQ(w.dtype(), DType::bf16);        // ... now bf16
  EXPECT_EQ(w.grad().dtype(), DType::bf16);
  const std::vector<double> cast = w.to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(cast[i], static_cast<double>(to_float(float_to_bf16(static_cast<float>(values[i])))));
  }
  for (const Tensor& p : toy.parameters()) EXPECT_EQ(p.dtype(), DType::bf16);
  EXPECT_NO_THROW(toy.forward(ones({2, 3}, {.dtype = DType::bf16})));
  toy.to(DType::f32);
  EXPECT_EQ(w.dtype(), DType::f32);
  TENSOR_EXPECT_ERROR(toy.to(DType::i64), "floating dtype");
}

// The trace is process-wide: leave it off and empty.
class NnTrace : public ::testing::Test {
 protected:
  void SetUp() override { MemoryTrace::enable(1 << 14); }
  void TearDown() override {
    MemoryTrace::disable();
    MemoryTrace::clear();
  }
};

TEST_F(NnTrace, ParametersAllocateAsParameterAndForwardPushesScopes) {
  auto toy = std::make_unique<Toy>(5);
  auto events = MemoryTrace::events();
  size_t param_allocs = 0;
  for (const TraceEvent& e : events) {
    if (e.action != TraceAction::alloc) continue;
    EXPECT_EQ(e.category, MemoryCategory::parameter);
    ++param_allocs;
  }
  EXPECT_EQ(param_allocs, toy->named_parameters().size());

  MemoryTrace::clear();
  toy->set_name("toy");
  Tensor y = toy->forward(ones({2, 3}));
  std::set<std::string> scopes;
  for (const TraceEvent& e : MemoryTrace::events()) {
    if (e.action == TraceAction::alloc) scopes.insert(MemoryTrace::scope_name(e.scope_id));
  }
  EXPECT_TRUE(scopes.count("toy/inp")) << ::testing::PrintToString(scopes);
  EXPECT_TRUE(scopes.count("toy/layers.1/proj")) << ::testing::PrintToString(scopes);
  EXPECT_TRUE(scopes.count("toy/layers.1")) << ::testing::PrintToString(scopes);  // * scale
  EXPECT_TRUE(scopes.count("toy/head")) << ::testing::PrintToString(scopes);
}

TEST_F(NnTrace, ReadStateDictAllocatesParameters) {
  TempDir dir;
  Toy toy(6);
  nn::save_checkpoint(toy, dir.file("toy.safetensors"));
  MemoryTrace::clear();
  const nn::StateDict sd = nn::read_state_dict(dir.file("toy.safetensors"));
  size_t allocs = 0;
  for (const TraceEvent& e : MemoryTrace::events()) {
    if (e.action != TraceAction::alloc) continue;
    EXPECT_EQ(e.category, MemoryCategory::parameter);
    ++allocs;
  }
  EXPECT_EQ(allocs, sd.size());
}

TEST(NnLinear, ValuesInitBoundsAndGradients) {
  Generator g1(7), g2(7);
  Linear a(16, 8, {.bias = true, .init = {.generator = &g1}});
  Linear b(16, 8, {.bias = true, .init = {.generator = &g2}});
  EXPECT_TRUE(bit_equal(a.weight, b.weight));  // a seed reproduces the init
  EXPECT_EQ(a.weight.shape(), (Shape{8, 16}));
  const double bound = 1.0 / std::sqrt(16.0);
  double max_abs = 0;
  for (double v : a.weight.to_vector()) max_abs = std::max(max_abs, std::abs(v));
  for (double v : a.bias.to_vector()) max_abs = std::max(max_abs, std::abs(v));
  EXPECT_LT(max_abs, bound);
  EXPECT_GT(max_abs, 0.8 * bound);  // uniform over the whole range

  // [2, 3, 16] -> [2, 3, 8] equals x W^T + b.
  Tensor x = randn({2, 3, 16});
  Tensor y = a.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 8}));
  const auto xv = x.to_vector(), wv = a.weight.to_vector(), bv = a.bias.to_vector(),
             yv = y.to_vector();
  for (int r = 0; r < 6; ++r) {
    for (int o = 0; o < 8; ++o) {
      double acc = bv[o];
      for (int i = 0; i < 16; ++i) acc += xv[r * 16 + i] * wv[o * 16 + i];
      EXPECT_NEAR(yv[r * 8 + o], acc, 1e-5);
    }
  }
  TENSOR_EXPECT_ERROR(a.forward(zeros({2, 15})), "last dim must be 16", "[2, 15]");

  Linear c(5, 3, {.bias = true, .init = {.dtype = DType::f64}});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return c.forward(in[0]); },
                   testing::make_input({2, 4, 5}, 1));
  // Parameter gradients against finite differences: treat W and b as the inputs.
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        Tensor xx = from_vector(std::vector<double>(10, 0.5), {2, 5}, {.dtype = DType::f64});
        return add(matmul(xx, transpose(in[0], 0, 1)), in[1]);
      },
      testing::make_input({3, 5}, 2), testing::make_input({3}, 3));
}

TEST(NnCheckpoint, ModuleRoundTripsThroughSafetensors) {
  TempDir dir;
  Toy a(20), b(21);
  nn::save_checkpoint(a, dir.file("toy.safetensors"), {{"step", "3"}});
  auto reader = safetensors::open(dir.file("toy.safetensors"));
  EXPECT_EQ(reader->metadata().at("format"), "pt");
  EXPECT_EQ(reader->names().front(), "inp.weight");  // registration order
  nn::load_checkpoint(b, dir.file("toy.safetensors"));
  for (const auto& [name, p] : a.named_parameters()) {
    EXPECT_TRUE(bit_equal(b.parameter(name), p)) << name;
  }
  // Sharded, then into a bf16 model with conversion.
  nn::save_checkpoint_sharded(a, dir.str(), 128);
  Toy c(22);
  c.to(DType::bf16);
  TENSOR_EXPECT_ERROR(nn::load_checkpoint(c, dir.str()), "is f32 in checkpoint", "bf16");
  nn::load_checkpoint(c, dir.str(), {.convert_dtype = true});
  EXPECT_EQ(c.head->bias.dtype(), DType::bf16);
  EXPECT_TRUE(bit_equal(c.head->bias, raw::to_dtype(a.head->bias, DType::bf16)));
  // A prefix: load one block from the whole-model file.
  Block block(4, nullptr);
  nn::load_checkpoint(block, dir.file("toy.safetensors"), {.prefix = "layers.1."});
  EXPECT_TRUE(bit_equal(block.scale, a.layers->at<Block>(1).scale));
  // read_state_dict: every tensor, as parameters.
  nn::StateDict sd = nn::read_state_dict(dir.file("toy.safetensors"));
  EXPECT_EQ(sd.size(), 9u);
  EXPECT_TRUE(bit_equal(sd.at("head.weight"), a.head->weight));
}

}  // namespace
}  // namespace cg
