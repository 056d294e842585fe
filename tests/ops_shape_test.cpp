// Why this file exists: the joining, splitting, padding and indexing ops -- cat, stack,
// split, chunk, narrow, pad, index_select, gather, scatter_add -- against plain loops and
// through the finite-difference gradcheck (f64, non-contiguous inputs, negative dims,
// repeated indices), plus the errors users see for mismatched shapes and bad indices.
#include <gtest/gtest.h>

#include <cmath>

#include "core/factories.h"
#include "core/views.h"
#include "error_helpers.h"
#include "ops/ops.h"
#include "tests/gradcheck.h"

namespace cg {
namespace {

using testing::error_of;

using testing::make_input;
using V = std::vector<Tensor>;

// ---- cat / stack -------------------------------------------------------------------

TEST(OpsShape, CatValues) {
  Tensor a = from_vector({1, 2, 3, 4}, {2, 2}), b = from_vector({5, 6}, {2, 1});
  EXPECT_EQ(cat({a, b}, 1).to_vector(), (std::vector<double>{1, 2, 5, 3, 4, 6}));
  EXPECT_EQ(cat({a, transpose(b, 0, 1)}, -2).to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  // Integer tensors join too (no gradient involved).
  Tensor i = cat({from_ints({1, 2}, {2}), from_ints({3}, {1})});
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(i.to_vector(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(stack({a, a + 10.0}, 1).shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(stack({a, a + 10.0}, 1).to_vector(), (std::vector<double>{1, 2, 11, 12, 3, 4, 13, 14}));
  EXPECT_EQ(stack({a, a}, -1).shape(), (Shape{2, 2, 2}));
}

TEST(OpsShape, CatStackGradcheck) {
  Tensor a = make_input({2, 3}, 200), b = make_input({2, 5}, 201), c = make_input({4, 2}, 202);
  EXPECT_GRADCHECK(
      [](const V& x) {
        return cat({x[0], x[1], transpose(x[2], 0, 1)}, -1);
      },
      a, b, c);
  EXPECT_GRADCHECK([](const V& x) { return cat({x[0], x[0]}, 0); }, a);  // one input twice
  Tensor d = make_input({2, 3}, 203);
  EXPECT_GRADCHECK([](const V& x) { return stack({x[0], x[1], x[0]}, 1); }, a, d);
  EXPECT_GRADCHECK([](const V& x) { return stack({x[0], x[1]}, -1); }, a, d);
  // An input that needs no grad gets none; the others still do.
  Tensor frozen = ones({2, 3}, {.dtype = DType::f64});
  EXPECT_GRADCHECK([frozen](const V& x) { return cat({frozen, x[0]}, 0); }, a);
  Tensor out = cat({a, b}, 1);
  EXPECT_EQ(out.grad_fn()->saved_bytes(), 0u);
}

TEST(OpsShape, CatStackErrors) {
  EXPECT_ERROR_HAS(cat({ones({2, 3}), ones({3, 3})}, 1), "cat", "tensor 1", "[3, 3]", "[2, 3]",
                   "except along dim 1");
  EXPECT_ERROR_HAS(cat({ones({2, 3}), ones({2, 3, 1})}, 0), "cat", "[2, 3, 1]");
  EXPECT_ERROR_HAS(cat({ones({2}), ones({2}, {.dtype = DType::f64})}), "dtype", "f64", "f32");
  EXPECT_ERROR_HAS(cat({}, 0), "empty list");
  EXPECT_ERROR_HAS(cat({ones({2})}, 1), "cat");
  EXPECT_ERROR_HAS(stack({ones({2, 3}), ones({3, 2})}), "stack", "equal shapes");
}

// ---- split / chunk / narrow ----------------------------------------------------------

TEST(OpsShape, SplitAndChunkPieces) {
  Tensor x = reshape(arange(0.0, 14.0), {7, 2});
  auto pieces = split(x, 3);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].shape(), (Shape{1, 2}));
  EXPECT_EQ(pieces[1].to_vector(), (std::vector<double>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(pieces[0].storage().get(), x.storage().get());  // views
  auto sized = split_with_sizes(x, {2, 0, 5}, 0);
  ASSERT_EQ(sized.size(), 3u);
  EXPECT_EQ(sized[1].shape(), (Shape{0, 2}));
  EXPECT_EQ(sized[2].shape(), (Shape{5, 2}));
  // torch.chunk: ceil(7 / 4) = 2 -> 4 pieces; ceil(6 / 4) = 2 -> only 3 pieces.
  EXPECT_EQ(chunk(x, 4).size(), 4u);
  EXPECT_EQ(chunk(arange(0.0, 6.0), 4).size(), 3u);
  auto cols = chunk(x, 2, -1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[1].to_vector(), (std::vector<double>{1, 3, 5, 7, 9, 11, 13}));
}

TEST(OpsShape, SplitChunkNarrowGradcheck) {
  Tensor x = make_input({7, 3}, 210);
  // Pieces used in a new order, one used twice and one unused (its gradient is zero).
  EXPECT_GRADCHECK(
      [](const V& in) {
        auto p = split(in[0], 3, 0);
        return cat({p[2], p[0] * p[1], p[0]}, 0);
      },
      x);
  EXPECT_GRADCHECK(
      [](const V& in) {
        auto p = split_with_sizes(transpose(in[0], 0, 1), {1, 4, 2}, -1);
        return p[1] * 2.0 + cat({p[0], p[2], p[0]}, 1);
      },
      x);
  EXPECT_GRADCHECK([](const V& in) { return chunk(in[0], 2, 1)[1]; }, x);
  EXPECT_GRADCHECK([](const V& in) { return narrow(in[0], -1, 1, 2); }, x);
  EXPECT_GRADCHECK([](const V& in) { return narrow(transpose(in[0], 0, 1), 1, 2, 4); }, x);
  Tensor leaf = ones({6}).requires_grad_();
  auto p = split(leaf, 2);
  EXPECT_TRUE(p[0].grad_fn() == p[2].grad_fn());  // one node for all pieces
  EXPECT_EQ(p[0].grad_fn()->saved_bytes(), 0u);
}

TEST(OpsShape, SplitErrors) {
  EXPECT_ERROR_HAS(split_with_sizes(ones({5}), {2, 2}), "split", "sum to 4", "5");
  EXPECT_ERROR_HAS(split(ones({5}), 0), "split_size");
  EXPECT_ERROR_HAS(chunk(ones({5}), 0), "chunks");
}

// ---- pad -----------------------------------------------------------------------------

TEST(OpsShape, PadValues) {
  Tensor x = from_vector({1, 2, 3, 4}, {2, 2});
  Tensor p = pad(x, {1, 0});  // left of the last dim
  EXPECT_EQ(p.shape(), (Shape{2, 3}));
  EXPECT_EQ(p.to_vector(), (std::vector<double>{0, 1, 2, 0, 3, 4}));
  Tensor q = pad(x, {0, 1, 2, 0}, -1.0);  // right 1, top 2
  EXPECT_EQ(q.shape(), (Shape{4, 3}));
  EXPECT_EQ(q.to_vector(), (std::vector<double>{-1, -1, -1, -1, -1, -1, 1, 2, -1, 3, 4, -1}));
  EXPECT_EQ(pad(from_ints({7}, {1}), {0, 2}, 5).to_vector(), (std::vector<double>{7, 5, 5}));
}

TEST(OpsShape, PadGradcheckAndErrors) {
  Tensor x = make_input({3, 4}, 220);
  EXPECT_GRADCHECK([](const V& in) { return pad(in[0], {2, 1}); }, x);
  EXPECT_GRADCHECK([](const V& in) { return pad(transpose(in[0], 0, 1), {0, 3, 1, 2}, 1.5); }, x);
  EXPECT_GRADCHECK([](const V& in) { return pad(in[0], {}); }, x);
  EXPECT_ERROR_HAS(pad(ones({2, 2}), {1, -1}), "pad", "negative");
  EXPECT_ERROR_HAS(pad(ones({2, 2}), {1}), "pad", "even length");
  EXPECT_ERROR_HAS(pad(ones({2}), {1, 1, 1, 1}), "pad", "at most 2");
}

// ---- index_select --------------------------------------------------------------------

TEST(OpsShape, IndexSelectMatchesLoops) {
  Generator gen(230);
  Tensor x = randn({4, 5, 3}, {}, &gen);
  Tensor idx = from_ints({4, 0, 4, 2}, {4}, {.dtype = DType::i32});
  Tensor out = index_select(x, -2, idx);
  ASSERT_EQ(out.shape(), (Shape{4, 4, 3}));
  const auto xv = x.to_vector(), ov = out.to_vector();
  const int64_t picks[] = {4, 0, 4, 2};
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 3; ++k)
        EXPECT_EQ(ov[(i * 4 + j) * 3 + k], xv[(i * 5 + picks[j]) * 3 + k]);
}

TEST(OpsShape, IndexSelectGradcheck) {
  Tensor x = make_input({5, 4}, 231);
  Tensor idx = from_ints({3, 3, 0, 4, 3}, {5});  // repeats accumulate
  EXPECT_GRADCHECK([idx](const V& in) { return index_select(in[0], 0, idx); }, x);
  EXPECT_GRADCHECK([idx](const V& in) { return index_select(transpose(in[0], 0, 1), -1, idx); }, x);
  Tensor idx2 = from_ints({1, 1, 2}, {3});
  EXPECT_GRADCHECK([idx2](const V& in) { return index_select(in[0], 1, idx2); }, x);
}

// ---- gather ------------------------------------------------------------------------------

TEST(OpsShape, GatherMatchesLoops) {
  Generator gen(240);
  Tensor x = randn({3, 5, 4}, {}, &gen);
  // idx [3, 2, 4]: smaller than x in dim 1 (the gathered dim) as PyTorch allows.
  std::vector<int64_t> iv;
  for (int i = 0; i < 24; ++i) iv.push_back((i * 7 + 3) % 5);
  Tensor idx = from_ints(iv, {3, 2, 4});
  const auto xv = x.to_vector(), ov = gather(x, 1, idx).to_vector();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 4; ++k)
        EXPECT_EQ(ov[(i * 2 + j) * 4 + k], xv[(i * 5 + iv[(i * 2 + j) * 4 + k]) * 4 + k]);
  // dim 2 with an index smaller in the other dims too; labels gathered from a log-prob
  // table, as a loss does: [N, V] with idx [N, 1].
  Tensor lp = from_vector({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {2, 3}, {.dtype = DType::f64});
  EXPECT_EQ(gather(lp, -1, from_ints({2, 0}, {2, 1})).to_vector(), (std::vector<double>{0.3, 0.4}));
  // Integer sources gather too.
  EXPECT_EQ(gather(from_ints({5, 6, 7}, {3}), 0, from_ints({2, 2, 0}, {3})).to_vector(),
            (std::vector<double>{7, 7, 5}));
}

TEST(OpsShape, GatherGradcheck) {
  Tensor x = make_input({3, 4}, 241);
  Tensor idx = from_ints({0, 0, 3, 1, 1, 1, 2, 3, 0}, {3, 3});  // repeats
  EXPECT_GRADCHECK([idx](const V& in) { return gather(in[0], 1, idx); }, x);
  Tensor idx0 = from_ints({2, 0, 1, 2, 2, 2}, {2, 3});
  EXPECT_GRADCHECK([idx0](const V& in) { return gather(transpose(in[0], 0, 1), 0, idx0); }, x);
  EXPECT_GRADCHECK([idx0](const V& in) { return gather(in[0], -2, idx0); }, x);
}

// ---- scatter_add -----------------------------------------------------------------------

TEST(OpsShape, ScatterAddMatchesLoops) {
  Generator gen(250);
  Tensor x = randn({3, 5}, {.dtype = DType::f64}, &gen);
  Tensor src = randn({4, 6}, {.dtype = DType::f64}, &gen);  // larger than idx
  std::vector<int64_t> iv = {0, 4, 4, 1, 2, 2, 2, 0, 3};    // idx [3, 3], dim 1
  Tensor idx = from_ints(iv, {3, 3});
  auto expect = x.to_vector();
  const auto sv = src.to_vector();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) expect[i * 5 + iv[i * 3 + j]] += sv[i * 6 + j];
  const auto got = scatter_add(x, 1, idx, src).to_vector();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expect[i], 1e-14) << i;
  // Out of place: x is unchanged.
  EXPECT_NE(x.to_vector(), got);
  // dim 0.
  Tensor idx0 = from_ints({2, 0, 2, 2, 1, 0}, {2, 3});
  const auto got0 = scatter_add(x, 0, idx0, src).to_vector();
  auto expect0 = x.to_vector();
  const int64_t i0[] = {2, 0, 2, 2, 1, 0};
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) expect0[i0[i * 3 + j] * 5 + j] += sv[i * 6 + j];
  for (size_t i = 0; i < got0.size(); ++i) EXPECT_NEAR(got0[i], expect0[i], 1e-14) << i;
}

TEST(OpsShape, ScatterAddGradcheck) {
  Tensor x = make_input({3, 5}, 251), src = make_input({4, 6}, 252);
  Tensor idx = from_ints({0, 4, 4, 1, 2, 2, 2, 0, 3}, {3, 3});
  EXPECT_GRADCHECK([idx](const V& in) { return scatter_add(in[0], 1, idx, in[1]); }, x, src);
  Tensor xt = make_input({5, 3}, 253), s = make_input({3, 3}, 254);
  EXPECT_GRADCHECK(
      [idx](const V& in) { return scatter_add(transpose(in[0], 0, 1), -1, idx, in[1]); }, xt, s);
  Tensor idx0 = from_ints({2, 0, 2, 2, 1, 0}, {2, 3});
  EXPECT_GRADCHECK([idx0](const V& in) { return scatter_add(in[0], 0, idx0, in[1]); }, x, s);
}

TEST(OpsShape, ScatterAddHalfAccumulatesInFp32) {
  // bf16 keeps 8 significant bits, so 256 + 1 rounds back to 256: adding 256 ones one at
  // a time in bf16 would stay at 256. fp32 accumulation and one final rounding give 512.
  Tensor x = full({1}, 256.0, {.dtype = DType::bf16});
  Tensor src = ones({256}, {.dtype = DType::bf16});
  Tensor idx = zeros({256}, {.dtype = DType::i64});
  EXPECT_EQ(scatter_add(x, 0, idx, src).item(), 512.0);
}

TEST(OpsShape, ScatterAddAndGatherOnZeroDim) {
  // Note [0-d scatter_add] (ops/index_ops.cpp): the one element of a 0-d x is at index 0;
  // the op layer hands the table 1-element 1-d views, and the result stays 0-d.
  Tensor x = scalar_tensor(2.0, {.dtype = DType::f64});
  Tensor src = scalar_tensor(3.0, {.dtype = DType::f64});
  Tensor idx = from_ints({0}, {});
  Tensor y = scatter_add(x, 0, idx, src);
  EXPECT_EQ(y.dim(), 0);
  EXPECT_EQ(y.item(), 5.0);
  EXPECT_EQ(x.item(), 2.0);  // out of place
  x.requires_grad_();
  src.requires_grad_();
  EXPECT_GRADCHECK([idx](const V& in) { return scatter_add(in[0], 0, idx, in[1]); }, x, src);
  // gather's backward scatter-adds into a 0-d gradient.
  EXPECT_GRADCHECK([idx](const V& in) { return gather(in[0], 0, idx); }, x);
}

TEST(OpsShape, IndexErrors) {
  Tensor x = ones({3, 5});
  EXPECT_ERROR_HAS(gather(x, 1, from_ints({0, 7}, {1, 2})), "gather", "index 7", "dim 1", "size 5",
                   "[0, 5)");
  EXPECT_ERROR_HAS(gather(x, 1, from_ints({0, 1}, {2})), "gather", "rank");
  EXPECT_ERROR_HAS(gather(x, 1, from_ints({0, 0, 0, 0}, {4, 1})), "gather", "dim 0");
  EXPECT_ERROR_HAS(gather(x, 1, from_vector({0, 1}, {1, 2})), "gather", "f32", "i32 or i64");
  EXPECT_ERROR_HAS(index_select(x, 0, from_ints({3}, {1})), "index_select", "index 3", "size 3");
  EXPECT_ERROR_HAS(index_select(x, 0, from_ints({0, 1}, {1, 2})), "index_select", "1-D");
  EXPECT_ERROR_HAS(scatter_add(x, 1, from_ints({5}, {1, 1}), ones({1, 1})), "scatter_add",
                   "index 5");
  EXPECT_ERROR_HAS(scatter_add(x, 1, from_ints({0, 0}, {1, 2}), ones({1, 1})), "scatter_add",
                   "larger than src");
  EXPECT_ERROR_HAS(scatter_add(x, 1, from_ints({0}, {1, 1}), ones({1, 1}, {.dtype = DType::f64})),
                   "dtypes differ");
}

}  // namespace
}  // namespace cg
