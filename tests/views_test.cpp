// Why this file exists: views must share storage and get strides right; copies must get
// every stride pattern, dtype pair and overlap right. These tests pin both down.
#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/factories.h"
#include "core/views.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

using V = std::vector<double>;

Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  return raw::reshape(arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, {.dtype = dtype}),
                      shape);
}

// The element at `index` of t, read through t's own strides.
double at(const Tensor& t, const Shape& index) {
  int64_t offset = t.offset();
  for (size_t i = 0; i < index.size(); ++i) offset += index[i] * t.strides()[i];
  return raw::load_element(
      static_cast<char*>(t.storage()->data()) + offset * element_size(t.dtype()), t.dtype());
}

void set(const Tensor& t, const Shape& index, double value) {
  int64_t offset = t.offset();
  for (size_t i = 0; i < index.size(); ++i) offset += index[i] * t.strides()[i];
  raw::store_element(static_cast<char*>(t.storage()->data()) + offset * element_size(t.dtype()),
                     t.dtype(), value);
}

TEST(Views, TransposeSharesStorageAndSwapsStrides) {
  const Tensor base = iota({2, 3});
  const Tensor t = raw::transpose(base, 0, 1);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.storage(), base.storage());
  EXPECT_EQ(t.to_vector(), (V{0, 3, 1, 4, 2, 5}));
  set(t, {2, 1}, 42);               // write through the view...
  EXPECT_EQ(at(base, {1, 2}), 42);  // ...read from the base
  EXPECT_EQ(raw::transpose(base, -1, -2).strides(), (Shape{1, 3}));
  TENSOR_EXPECT_ERROR(raw::transpose(base, 0, 2), "transpose", "dim 2", "2-d", "-2..1");
}

TEST(Views, Permute) {
  const Tensor base = iota({2, 3, 4});
  const Tensor p = raw::permute(base, {2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_EQ(at(p, {3, 1, 2}), at(base, {1, 2, 3}));
  EXPECT_EQ(raw::permute(base, {-1, 0, 1}).strides(), (Shape{1, 12, 4}));
  TENSOR_EXPECT_ERROR(raw::permute(base, {0, 1}), "permute", "3-d");
  TENSOR_EXPECT_ERROR(raw::permute(base, {0, 1, 1}), "permute", "twice");
}

TEST(Views, NarrowAndItsBounds) {
  const Tensor base = iota({3, 4});
  const Tensor n = raw::narrow(base, 1, 1, 2);
  EXPECT_EQ(n.shape(), (Shape{3, 2}));
  EXPECT_EQ(n.strides(), (Shape{4, 1}));
  EXPECT_EQ(n.offset(), 1);
  EXPECT_EQ(n.to_vector(), (V{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(raw::narrow(base, 0, -1, 1).to_vector(), (V{8, 9, 10, 11}));
  EXPECT_EQ(raw::narrow(base, 1, 4, 0).numel(), 0);
  TENSOR_EXPECT_ERROR(raw::narrow(base, 1, 3, 2), "narrow", "start 3", "length 2", "size 4");
  TENSOR_EXPECT_ERROR(raw::narrow(base, 0, 5, 1), "narrow", "start 5");
  TENSOR_EXPECT_ERROR(raw::narrow(base, 2, 0, 1), "narrow", "dim 2");
}

TEST(Views, SliceClampsLikePython) {
  const Tensor base = iota({10});
  EXPECT_EQ(raw::slice(base, 0, 2, 5).to_vector(), (V{2, 3, 4}));
  EXPECT_EQ(raw::slice(base, 0, -3, 100, 2).to_vector(), (V{7, 9}));
  EXPECT_EQ(raw::slice(base, 0, 0, 10, 3).to_vector(), (V{0, 3, 6, 9}));
  EXPECT_EQ(raw::slice(base, 0, -100, 2).to_vector(), (V{0, 1}));
  EXPECT_EQ(raw::slice(base, 0, 6, 3).numel(), 0);
  EXPECT_EQ(raw::slice(base, 0, 1, -1, 4).strides(), (Shape{4}));
  const Tensor m = raw::slice(iota({4, 6}), 1, 1, 6, 2);
  EXPECT_EQ(m.shape(), (Shape{4, 3}));
  EXPECT_EQ(m.strides(), (Shape{6, 2}));
  EXPECT_EQ(at(m, {2, 2}), 17);
  TENSOR_EXPECT_ERROR(raw::slice(base, 0, 0, 5, 0), "slice", "step", "positive");
  TENSOR_EXPECT_ERROR(raw::slice(base, 0, 5, 0, -1), "step", "-1");
}

TEST(Views, ExpandUsesStrideZero) {
  const Tensor col = iota({3, 1});
  const Tensor e = raw::expand(col, {2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(e.storage(), col.storage());
  EXPECT_EQ(at(e, {1, 2, 3}), 2);
  EXPECT_EQ(raw::expand(col, {-1, 5}).shape(), (Shape{3, 5}));
  TENSOR_EXPECT_ERROR(raw::expand(iota({3, 2}), {3, 4}), "expand", "[3, 2]", "[3, 4]",
                      "neither 1 nor 4");
  TENSOR_EXPECT_ERROR(raw::expand(col, {3}), "fewer dims");
  TENSOR_EXPECT_ERROR(raw::expand(col, {-1, 3, 1}), "leading");
}

TEST(Views, UnsqueezeAndSqueeze) {
  const Tensor t = iota({2, 3});
  EXPECT_EQ(raw::unsqueeze(t, 0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(raw::unsqueeze(t, -1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(raw::unsqueeze(t, 1).strides(), (Shape{3, 3, 1}));
  EXPECT_EQ(raw::squeeze(raw::unsqueeze(t, 1), 1).shape(), (Shape{2, 3}));
  EXPECT_EQ(raw::squeeze(t, 0).shape(), (Shape{2, 3}));  // size 2: unchanged, as PyTorch
  EXPECT_EQ(raw::unsqueeze(scalar_tensor(1), 0).shape(), (Shape{1}));
  TENSOR_EXPECT_ERROR(raw::unsqueeze(t, 3), "unsqueeze", "dim 3");
}

TEST(Views, ViewOnNonContiguousWhenStridesAllow) {
  // Narrowing columns leaves rows strided; splitting the row dim is still a view.
  const Tensor base = iota({4, 6});
  const Tensor n = raw::narrow(base, 1, 0, 3);
  const Tensor v = raw::view(n, {2, 2, 3});
  EXPECT_EQ(v.strides(), (Shape{12, 6, 1}));
  EXPECT_EQ(v.storage(), base.storage());
  EXPECT_EQ(v.to_vector(), n.to_vector());
  // A transposed tensor can still split its dims.
  const Tensor t = raw::transpose(iota({2, 3, 4}), 0, 1);  // [3, 2, 4], strides [4, 12, 1]
  const Tensor split = raw::view(t, {3, 2, 2, 2});
  EXPECT_EQ(split.strides(), (Shape{4, 12, 2, 1}));
  EXPECT_EQ(split.to_vector(), t.to_vector());
  // Size-1 dims never block a view.
  EXPECT_EQ(raw::view(raw::unsqueeze(n, 1), {4, 3}).strides(), (Shape{6, 1}));
}

TEST(Views, ViewThatWouldMergeGappedDimsExplainsItself) {
  const Tensor n = raw::narrow(iota({4, 6}), 1, 0, 3);
  TENSOR_EXPECT_ERROR(raw::view(n, {12}), "view", "[4, 3]", "[6, 1]", "[12]", "reshape",
                      "contiguous");
  const Tensor t = raw::transpose(iota({2, 3, 4}), 0, 1);
  TENSOR_EXPECT_ERROR(raw::view(t, {3, 8}), "view", "[3, 8]");
  TENSOR_EXPECT_ERROR(raw::view(iota({2, 3}), {4, 2}), "[4, 2]", "6 elements");
}

TEST(Views, InferShape) {
  EXPECT_EQ(raw::infer_shape({-1, 4}, 12), (Shape{3, 4}));
  TENSOR_EXPECT_ERROR(raw::infer_shape({2, -1, 0}, 0), "cannot be inferred");
  EXPECT_EQ(raw::view(iota({2, 3}), {-1}).shape(), (Shape{6}));
  TENSOR_EXPECT_ERROR(raw::infer_shape({-1, -1}, 4), "more than one -1");
  TENSOR_EXPECT_ERROR(raw::infer_shape({-1, 5}, 12), "[-1, 5]", "12 elements");
  TENSOR_EXPECT_ERROR(raw::infer_shape({-2, 6}, 12), "negative");
}

TEST(Views, ReshapeViewsWhenItCanAndCopiesWhenItMust) {
  const Tensor base = iota({2, 3});
  const Tensor same = raw::reshape(base, {3, 2});
  EXPECT_EQ(same.storage(), base.storage());
  const Tensor t = raw::transpose(base, 0, 1);
  const Tensor flat = raw::reshape(t, {6});
  EXPECT_NE(flat.storage(), base.storage());
  EXPECT_TRUE(flat.is_contiguous());
  EXPECT_EQ(flat.to_vector(), (V{0, 3, 1, 4, 2, 5}));
}

TEST(Views, ContiguousCopiesOnlyWhenNeeded) {
  const Tensor base = iota({2, 3});
  EXPECT_TRUE(raw::contiguous(base).is_same(base));
  const Tensor t = raw::transpose(base, 0, 1);
  const Tensor c = raw::contiguous(t);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), base.storage());
  EXPECT_EQ(c.strides(), (Shape{2, 1}));
  EXPECT_EQ(c.to_vector(), (V{0, 3, 1, 4, 2, 5}));
  const Tensor cl = raw::clone(base);
  EXPECT_NE(cl.storage(), base.storage());
  EXPECT_EQ(cl.to_vector(), base.to_vector());
}

TEST(Views, ToDtypeBothWays) {
  const V values{0.1, -1.7, 2.9, 1.0 + 1.0 / 256, 1.0 + 3.0 / 256, 65519, 1e-8};
  const Tensor f = from_vector(values, {7});
  const Tensor h = raw::to_dtype(f, DType::bf16);
  EXPECT_EQ(h.dtype(), DType::bf16);
  const Tensor back = raw::to_dtype(h, DType::f32);
  for (size_t i = 0; i < values.size(); ++i) {
    const float expected = bf16_to_float(float_to_bf16(static_cast<float>(values[i])));
    EXPECT_EQ(back.data<float>()[i], expected) << values[i];
  }
  const Tensor half = raw::to_dtype(f, DType::f16);
  EXPECT_EQ(half.data<f16>()[5].bits, 0x7BFF);  // 65519 -> 65504
  EXPECT_EQ(raw::to_dtype(f, DType::i32).to_vector(), (V{0, -1, 2, 1, 1, 65519, 0}));
  EXPECT_EQ(raw::to_dtype(f, DType::boolean).to_vector(), (V{1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(raw::to_dtype(from_ints({3, 0, -2}, {3}), DType::f64).to_vector(), (V{3, 0, -2}));
  EXPECT_TRUE(raw::to_dtype(f, DType::f32).is_same(f));
  // Conversion of a strided (transposed) source.
  const Tensor t = raw::transpose(iota({2, 3}), 0, 1);
  EXPECT_EQ(raw::to_dtype(t, DType::bf16).to_vector(), (V{0, 3, 1, 4, 2, 5}));
}

TEST(Views, CopyFromABroadcastSource) {
  const Tensor dst = zeros({3, 4});
  const Tensor row = from_vector({1, 2, 3, 4}, {1, 4});
  raw::copy_(dst, raw::expand(row, {3, 4}));
  EXPECT_EQ(dst.to_vector(), (V{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
  const Tensor col = from_vector({7, 8, 9}, {3, 1}, {.dtype = DType::bf16});
  raw::copy_(dst, col);  // broadcast implicitly, with a conversion
  EXPECT_EQ(dst.to_vector(), (V{7, 7, 7, 7, 8, 8, 8, 8, 9, 9, 9, 9}));
  raw::copy_(dst, scalar_tensor(5, {.dtype = DType::i64}));
  EXPECT_EQ(dst.to_vector(), V(12, 5));
  TENSOR_EXPECT_ERROR(raw::copy_(dst, zeros({2, 4})), "copy_", "[2, 4]", "[3, 4]");
}

TEST(Views, CopyIntoStridedDestinations) {
  const Tensor base = zeros({3, 4}, {.dtype = DType::f64});
  raw::copy_(raw::transpose(base, 0, 1), iota({4, 3}, DType::i32));
  EXPECT_EQ(base.to_vector(), (V{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}));
  const Tensor inner = raw::slice(raw::narrow(base, 1, 1, 2), 0, 0, 3, 2);  // rows 0, 2
  raw::copy_(inner, from_vector({-1, -2, -3, -4}, {2, 2}, {.dtype = DType::bf16}));
  EXPECT_EQ(base.to_vector(), (V{0, -1, -2, 9, 1, 4, 7, 10, 2, -3, -4, 11}));
  TENSOR_EXPECT_ERROR(raw::copy_(raw::expand(zeros({1, 4}), {3, 4}), base), "copy_", "clone");
}

TEST(Views, CopyBetweenOverlappingViewsReadsFirst) {
  const Tensor t = iota({3, 3});
  raw::copy_(t, raw::transpose(t, 0, 1));
  EXPECT_EQ(t.to_vector(), (V{0, 3, 6, 1, 4, 7, 2, 5, 8}));
  const Tensor v = iota({6});
  raw::copy_(raw::slice(v, 0, 1, 6), raw::slice(v, 0, 0, 5));  // shift right by one
  EXPECT_EQ(v.to_vector(), (V{0, 0, 1, 2, 3, 4}));
  raw::copy_(v, v);
  EXPECT_EQ(v.to_vector(), (V{0, 0, 1, 2, 3, 4}));
}

TEST(Views, CopyEveryDtypePair) {
  const DType all[] = {DType::f32, DType::f64, DType::f16,    DType::bf16,
                       DType::i32, DType::i64, DType::boolean};
  for (DType from : all) {
    for (DType to : all) {
      const V values =
          from == DType::boolean || to == DType::boolean ? V{0, 1, 1, 0} : V{0, 3, -2, 100};
      const Tensor src = raw::transpose(from_vector(values, {2, 2}, {.dtype = from}), 0, 1);
      const Tensor dst = zeros({2, 2}, {.dtype = to});
      raw::copy_(dst, src);
      EXPECT_EQ(dst.to_vector(), (V{values[0], values[2], values[1], values[3]}))
          << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

TEST(Views, CopyLargeStridedMatchesElementwise) {
  // Exercises the odometer across several dims (the fast paths cannot take this).
  const Tensor src = raw::permute(iota({3, 4, 5, 6}), {2, 0, 3, 1});  // [5, 3, 6, 4]
  const Tensor dst = raw::contiguous(src);
  const V got = dst.to_vector();
  size_t k = 0;
  for (int64_t a = 0; a < 5; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 6; ++c)
        for (int64_t d = 0; d < 4; ++d) EXPECT_EQ(got[k++], ((b * 4 + d) * 5 + a) * 6 + c);
}

TEST(Views, CopyOfBatchedTransposesIsTiledCorrectly) {
  // Sizes that are not multiples of the tile, a batch dim, and a conversion.
  const Tensor src = raw::transpose(iota({3, 37, 45}), 1, 2);  // [3, 45, 37]
  const Tensor dst = raw::empty({3, 45, 37}, DType::f64, kCPU);
  raw::copy_(dst, src);
  const V got = dst.to_vector();
  size_t k = 0;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 45; ++i)
      for (int64_t j = 0; j < 37; ++j) ASSERT_EQ(got[k++], (b * 37 + j) * 45 + i);
}

TEST(Views, FillAnyLayout) {
  const Tensor t = zeros({3, 4}, {.dtype = DType::bf16});
  raw::fill_(raw::narrow(t, 1, 1, 2), 1.5);
  EXPECT_EQ(t.to_vector(), (V{0, 1.5, 1.5, 0, 0, 1.5, 1.5, 0, 0, 1.5, 1.5, 0}));
  raw::fill_(t, -2);
  EXPECT_EQ(t.to_vector(), V(12, -2));
}

TEST(Views, FillAndArangeThroughTheHostBackend) {
  // fill's step makes arange: value + i * step in the destination's row-major order.
  const Tensor t = zeros({3, 4}, {.dtype = DType::i64});
  host_backend().fill(kCPU, raw::transpose(t, 0, 1).data_ptr(), DType::i64, {4, 3}, {1, 4}, 10.0,
                      2.0);
  EXPECT_EQ(t.to_vector(), (V{10, 16, 22, 28, 12, 18, 24, 30, 14, 20, 26, 32}));
  TENSOR_EXPECT_ERROR(
      host_backend().fill(cuda_device(0), t.data_ptr(), DType::i64, {12}, {1}, 0.0, 0.0),
      "cpu backend", "cuda:0");
}

TEST(Views, AddAccumulatesAcrossDtypesLayoutsAndBroadcasts) {
  const Tensor acc = zeros({2, 3});
  raw::add_(acc, iota({2, 3}, DType::bf16));  // f32 += bf16
  raw::add_(raw::transpose(acc, 0, 1), from_vector({0.5, -0.5}, {2}, {.dtype = DType::f64}));
  EXPECT_EQ(acc.to_vector(), (V{0.5, 1.5, 2.5, 2.5, 3.5, 4.5}));
  raw::add_(acc, acc);  // x += x
  EXPECT_EQ(acc.to_vector(), (V{1, 3, 5, 5, 7, 9}));
  // Overlapping views: the source is read before anything is written.
  const Tensor row = from_vector({1, 2, 3, 4}, {4});
  raw::add_(raw::narrow(row, 0, 1, 3), raw::narrow(row, 0, 0, 3));
  EXPECT_EQ(row.to_vector(), (V{1, 3, 5, 7}));
  // bf16 += bf16 sums in f32 and rounds once: 256 + 1 is not a bf16 (ties to even).
  const Tensor h = full({1}, 256.0, {.dtype = DType::bf16});
  raw::add_(h, full({1}, 1.0, {.dtype = DType::bf16}));
  EXPECT_EQ(h.item(), 256.0);
  raw::add_(h, full({1}, 1.5, {.dtype = DType::f32}));
  EXPECT_EQ(h.item(), 258.0);

  TENSOR_EXPECT_ERROR(raw::add_(zeros({2}, {.dtype = DType::i32}), zeros({2})), "add_", "floating",
                      "i32");
  TENSOR_EXPECT_ERROR(raw::add_(zeros({2, 3}), zeros({3, 2})), "add_", "[3, 2]",
                      "cannot be broadcast", "[2, 3]");
  TENSOR_EXPECT_ERROR(raw::add_(raw::expand(zeros({1}), {3}), zeros({3})), "add_", "expanded",
                      "clone");
  TENSOR_EXPECT_ERROR(raw::add_(Tensor(), zeros({3})), "add_", "undefined");
}

TEST(Views, BroadcastShapes) {
  EXPECT_EQ(raw::broadcast_shapes({2, 1, 3}, {4, 1}), (Shape{2, 4, 3}));
  EXPECT_EQ(raw::broadcast_shapes({}, {5}), (Shape{5}));
  EXPECT_EQ(raw::broadcast_shapes({0, 1}, {1, 7}), (Shape{0, 7}));
  TENSOR_EXPECT_ERROR(raw::broadcast_shapes({2, 3}, {4, 3}, "add"),
                      "add: shapes [2, 3] and [4, 3] cannot be broadcast (dim 0: 2 vs 4)");
}

TEST(Views, MakeTensorChecksTheStorageBounds) {
  const Storage s = make_storage(6 * sizeof(float), kCPU);
  EXPECT_NO_THROW(raw::make_tensor(s, {2, 3}, {3, 1}, 0, DType::f32));
  TENSOR_EXPECT_ERROR(raw::make_tensor(s, {2, 3}, {3, 1}, 1, DType::f32), "element 6",
                      "holds only 6");
  TENSOR_EXPECT_ERROR(raw::make_tensor(s, {2}, {1, 1}, 0, DType::f32), "strides");
  TENSOR_EXPECT_ERROR(raw::as_strided(zeros({4}), {2}, {-1}, 1), "negative stride");
  TENSOR_EXPECT_ERROR(raw::empty({2, -1}, DType::f32, kCPU), "negative size");
}

TEST(Views, ToDeviceOnTheSameDeviceIsTheSameTensor) {
  const Tensor t = iota({2});
  EXPECT_TRUE(raw::to_device(t, kCPU).is_same(t));
}

}  // namespace
}  // namespace cg
