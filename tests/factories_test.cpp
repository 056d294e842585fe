// Why this file exists: factories must produce exactly the values asked for, and random
// ones must be reproducible from a seed (the same numbers on every machine and device:
// Philox4x32-10 by counter, Note [Counter-based random numbers] in core/philox.h).
#include <gtest/gtest.h>

#include <cmath>

#include "core/backend.h"
#include "core/factories.h"
#include "core/philox.h"
#include "core/views.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

using V = std::vector<double>;

TEST(Factories, Constants) {
  EXPECT_EQ(zeros({2, 2}).to_vector(), V(4, 0));
  EXPECT_EQ(ones({3}, {.dtype = DType::bf16}).to_vector(), V(3, 1));
  const Tensor f = full({2, 3}, 2.5, {.dtype = DType::f64});
  EXPECT_EQ(f.dtype(), DType::f64);
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_EQ(f.to_vector(), V(6, 2.5));
  EXPECT_EQ(full({2}, 3.9, {.dtype = DType::i32}).to_vector(), V(2, 3));  // truncates
  EXPECT_EQ(full({2}, 0.5, {.dtype = DType::boolean}).to_vector(), V(2, 1));
  EXPECT_EQ(zeros_like(f).to_vector(), V(6, 0));
  EXPECT_EQ(zeros_like(f).dtype(), DType::f64);
  EXPECT_EQ(ones_like(f).to_vector(), V(6, 1));
  const Tensor s = scalar_tensor(4.0, {.dtype = DType::i64});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item(), 4.0);
  EXPECT_EQ(empty({3, 0}).numel(), 0);
  EXPECT_EQ(empty({4}, {.dtype = DType::f16}).nbytes(), 8u);
}

TEST(Factories, Arange) {
  EXPECT_EQ(arange(5).to_vector(), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(5).dtype(), DType::i64);
  EXPECT_EQ(arange(0).numel(), 0);
  EXPECT_EQ(arange(0.0, 1.0, 0.25).to_vector(), (V{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(arange(0.0, 1.0, 0.25).dtype(), DType::f32);
  EXPECT_EQ(arange(1.0, 2.01, 0.5).to_vector(), (V{1, 1.5, 2}));  // ceil((end-start)/step)
  EXPECT_EQ(arange(5.0, 0.0, -2.0).to_vector(), (V{5, 3, 1}));
  EXPECT_EQ(arange(3.0, 3.0).numel(), 0);
  EXPECT_EQ(arange(-2.0, 2.0, 1.0, {.dtype = DType::i32}).to_vector(), (V{-2, -1, 0, 1}));
  TENSOR_EXPECT_ERROR(arange(0.0, 5.0, 0.0), "arange", "step", "0");
  TENSOR_EXPECT_ERROR(arange(0.0, 5.0, -1.0), "arange", "step -1", "away from end");
  TENSOR_EXPECT_ERROR(arange(int64_t{-3}), "arange", "negative");
}

TEST(Factories, FromHostData) {
  const Tensor t = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.data<float>()[5], 6.0f);
  const Tensor big = from_ints({(int64_t{1} << 62) + 1, -7}, {2});
  EXPECT_EQ(big.data<int64_t>()[0], (int64_t{1} << 62) + 1);  // exact, not through double
  EXPECT_EQ(from_ints({1, 2}, {2}, {.dtype = DType::f32}).to_vector(), (V{1, 2}));
  TENSOR_EXPECT_ERROR(from_vector({1, 2, 3, 4, 5}, {2, 3}), "from_vector", "5 values", "[2, 3]",
                      "6 elements");
  TENSOR_EXPECT_ERROR(from_ints({1}, {2}), "from_ints", "1 values");
}

TEST(Factories, RequiresGradOnlyForFloats) {
  EXPECT_TRUE(zeros({2}, {.requires_grad = true}).impl()->requires_grad);
  EXPECT_FALSE(zeros({2}).impl()->requires_grad);
  EXPECT_TRUE(randn({2}, {.dtype = DType::bf16, .requires_grad = true}).impl()->requires_grad);
  TENSOR_EXPECT_ERROR(zeros({2}, {.dtype = DType::i64, .requires_grad = true}), "requires_grad",
                      "floating", "i64");
  TENSOR_EXPECT_ERROR(empty({2}, {.dtype = DType::boolean, .requires_grad = true}), "requires_grad",
                      "bool");
}

TEST(Factories, RandStaysInRange) {
  Generator gen(7);
  const V u = rand({10000}, {}, &gen).to_vector();
  double lo = 1, hi = 0, sum = 0;
  for (double x : u) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
  }
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(sum / u.size(), 0.5, 0.02);
  for (double x : rand({1000}, {.dtype = DType::bf16}, &gen, -2.0, 3.0).to_vector()) {
    EXPECT_GE(x, -2.0);
    EXPECT_LT(x, 3.0);
  }
  for (double x : rand({1000}, {.dtype = DType::bf16}, &gen).to_vector()) EXPECT_LT(x, 1.0);
  TENSOR_EXPECT_ERROR(rand({2}, {.dtype = DType::i32}), "rand", "i32", "floating");
  TENSOR_EXPECT_ERROR(rand({2}, {}, &gen, 1.0, 1.0), "rand", "low");
}

TEST(Factories, RandnHasTheRightMoments) {
  Generator gen(1234);
  const V x = randn({100000}, {.dtype = DType::f64}, &gen).to_vector();
  double sum = 0, sq = 0;
  for (double v : x) sum += v;
  const double mean = sum / x.size();
  for (double v : x) sq += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(sq / x.size()), 1.0, 0.02);
  const V y = randn({100000}, {}, &gen, 3.0, 0.5).to_vector();
  double ysum = 0;
  for (double v : y) ysum += v;
  EXPECT_NEAR(ysum / y.size(), 3.0, 0.01);
  TENSOR_EXPECT_ERROR(randn({2}, {.dtype = DType::i64}), "randn", "i64");
}

TEST(Factories, SameSeedSameNumbers) {
  Generator a(42), b(42), c(43);
  const V xa = randn({64}, {}, &a).to_vector();
  const V xb = randn({64}, {}, &b).to_vector();
  const V xc = randn({64}, {}, &c).to_vector();
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
  manual_seed(99);
  const V d1 = rand({16}).to_vector();
  manual_seed(99);
  const V d2 = rand({16}).to_vector();
  EXPECT_EQ(d1, d2);
  EXPECT_NE(d1, rand({16}).to_vector());
  // Reseeding restarts the counter.
  Generator g(5);
  const double first = g.normal();
  g.normal();
  EXPECT_EQ(g.offset(), 2u);
  g.seed(5);
  EXPECT_EQ(g.offset(), 0u);
  EXPECT_EQ(g.normal(), first);
  EXPECT_EQ(g.initial_seed(), 5u);
}

TEST(Factories, PhiloxMatchesRandom123KnownAnswers) {
  // Random123's kat_vectors, the three philox4x32 10 lines: counter, key, result.
  struct Case {
    philox::Block counter;
    uint32_t key0, key1;
    philox::Block want;
  };
  const Case cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Case& c : cases) {
    const philox::Block got = philox::philox4x32_10(c.counter, c.key0, c.key1);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(got.w[k], c.want.w[k]) << k;
  }
}

TEST(Factories, GeneratorStreamIsFixed) {
  // The stream for a seed is part of the contract (checkpoints and tests rely on it):
  // draw k of a generator is the Philox block of counter k under the seed.
  Generator g(0x0123456789abcdefull);
  for (uint64_t k = 0; k < 100; ++k) {
    const philox::Block b =
        philox::philox4x32_10({{static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32), 0, 0}},
                              0x89abcdefu, 0x01234567u);
    ASSERT_EQ(g.next_u64(), uint64_t{b.w[0]} | (uint64_t{b.w[1]} << 32)) << k;
  }
  EXPECT_EQ(g.offset(), 100u);
  EXPECT_EQ(Generator(0).uniform(), static_cast<double>(Generator(0).next_u64() >> 11) * 0x1.0p-53);
  // rand's element i is counter offset + i: the same as the scalar draws.
  Generator a(3), b(3);
  const V u = rand({4}, {.dtype = DType::f64}, &a).to_vector();
  for (double x : u) EXPECT_EQ(x, b.uniform());
}

TEST(Factories, RandomValuesDoNotDependOnHowTheDrawIsSplit) {
  Generator one(8), two(8);
  V whole = randn({50}, {.dtype = DType::f64}, &one).to_vector();
  V parts = randn({20}, {.dtype = DType::f64}, &two).to_vector();
  const V rest = randn({5, 6}, {.dtype = DType::f64}, &two).to_vector();
  parts.insert(parts.end(), rest.begin(), rest.end());
  EXPECT_EQ(whole, parts);
  EXPECT_EQ(one.offset(), 50u);
  EXPECT_EQ(two.offset(), 50u);
  // Empty draws take no counters.
  rand({0, 3}, {}, &one);
  EXPECT_EQ(one.offset(), 50u);
}

TEST(Factories, RandomFillOfAStridedViewNumbersElementsInTheViewsOrder) {
  // The backend primitive on a transposed destination: element (i, j) of the view gets
  // counter offset + i * cols + j, wherever it sits in memory.
  const Tensor t = zeros({3, 4});
  const Tensor view = raw::transpose(t, 0, 1);  // [4, 3], strides [1, 4]
  host_backend().random_uniform(kCPU, view.data_ptr(), DType::f32, view.shape(), view.strides(), 11,
                                100, 0.0, 1.0);
  Generator g(11);
  g.advance(100);
  EXPECT_EQ(view.to_vector(), rand({4, 3}, {}, &g).to_vector());
}

// Note [Host-known values]: from_ints records its values' bounds, which answer a label or
// index check without reading the data; any write voids the record.
TEST(Factories, FromIntsRecordsBoundsThatAWriteVoids) {
  const Tensor labels = from_ints({3, -100, 0, 7, -100}, {5});
  EXPECT_TRUE(labels.storage()->known_values_within(0, 8, -100));
  EXPECT_FALSE(labels.storage()->known_values_within(0, 7, -100)) << "7 is out of [0, 7)";
  EXPECT_FALSE(labels.storage()->known_values_within(0, 8)) << "-100 needs to be allowed";
  EXPECT_FALSE(labels.storage()->known_values_within(0, 8, -1));
  const Tensor one = from_ints({-100, -100}, {2});
  EXPECT_TRUE(one.storage()->known_values_within(0, 5, -100));
  const Tensor idx = from_ints({0, 2, 1}, {3});
  EXPECT_TRUE(idx.storage()->known_values_within(0, 3));
  EXPECT_FALSE(idx.storage()->known_values_within(0, 2));
  EXPECT_FALSE(from_ints({0}, {1}).storage()->known_values_within(0, 0))
      << "an empty range holds nothing";
  raw::fill_(idx, 5.0);
  EXPECT_FALSE(idx.storage()->known_values_within(0, 3)) << "written since: the record is void";
  EXPECT_FALSE(zeros({2}, {.dtype = DType::i64}).storage()->known_values_within(0, 3))
      << "not from the host";
}

// The record is the storage's, so a write through any view of it (a narrow, a reshape)
// voids it for every view (a label tensor
// bumped out of range in place must be checked again, not passed on stale bounds; on a
// GPU a stale pass would let a kernel read logits or rows out of bounds). Copies made
// from a recorded tensor carry no record: their check reads the data.
TEST(Factories, AWriteThroughAnyViewVoidsTheKnownBounds) {
  const auto known = [](const Tensor& t) { return t.storage()->known_values_within(0, 10, -100); };
  const Tensor labels = from_ints({1, 2, 3, 4, 5, 6}, {6});
  const Tensor rows = raw::reshape(labels, {2, 3});
  ASSERT_TRUE(known(labels));
  ASSERT_TRUE(known(raw::narrow(labels, 0, 1, 2))) << "a view sees a subset: the bounds hold";

  raw::copy_(raw::narrow(labels, 0, 4, 1), from_ints({99}, {1}));
  EXPECT_FALSE(known(labels)) << "99 is now in the data";
  EXPECT_FALSE(known(rows)) << "another view of the same bytes";

  // (The public in-place ops, ops/inplace.h, refuse integer tensors; raw::copy_ and
  // raw::fill_ -- above and in FromIntsRecordsBoundsThatAWriteVoids -- and a checkpoint
  // load are the writes an i64 tensor can take, and each bumps the version.)
  const Tensor again = from_ints({1, 2, 3}, {3});
  raw::fill_(raw::narrow(raw::reshape(again, {3, 1}), 0, 2, 1), 0.0);  // 0 is within the bounds
  EXPECT_FALSE(known(again))
      << "any write voids the record, even one that keeps the values in range";

  const Tensor source = from_ints({1, 2}, {2});
  EXPECT_FALSE(known(raw::clone(source))) << "a copy is not recorded";
  EXPECT_FALSE(known(raw::to_dtype(raw::to_dtype(source, DType::f32), DType::i64)));
  EXPECT_TRUE(known(source)) << "reading a tensor does not void its record";
}

}  // namespace
}  // namespace cg
