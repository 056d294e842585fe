// Why this file exists: the Tensor handle's metadata, value readers and printing, the
// shape helpers, the storage and backend registry -- everything in core/ below views.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/views.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

TEST(TensorMeta, SizesStridesAndNegativeDims) {
  const Tensor t = zeros({2, 3, 4});
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.stride(-3), 12);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.offset(), 0);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.data_ptr(), t.storage()->data());
  TENSOR_EXPECT_ERROR(t.size(3), "size", "dim 3", "3-d", "-3..2");
  TENSOR_EXPECT_ERROR(t.stride(-4), "dim -4", "-3..2");
}

TEST(TensorMeta, ContiguityIgnoresSize1Dims) {
  const Storage storage = make_storage(6 * sizeof(float), kCPU);
  EXPECT_TRUE(raw::make_tensor(storage, {2, 1, 3}, {3, 99, 1}, 0, DType::f32).is_contiguous());
  EXPECT_FALSE(raw::make_tensor(storage, {3, 2}, {1, 3}, 0, DType::f32).is_contiguous());
  EXPECT_TRUE(raw::make_tensor(storage, {0, 5}, {7, 7}, 0, DType::f32).is_contiguous());
  EXPECT_TRUE(raw::make_tensor(storage, {}, {}, 5, DType::f32).is_contiguous());
  // An offset does not break contiguity, and data_ptr() honours it.
  const Tensor tail = raw::make_tensor(storage, {2}, {1}, 4, DType::f32);
  EXPECT_TRUE(tail.is_contiguous());
  EXPECT_EQ(tail.data_ptr(), static_cast<char*>(storage->data()) + 16);
}

TEST(TensorMeta, TypedDataChecksTheDtype) {
  const Tensor t = zeros({2}, {.dtype = DType::bf16});
  EXPECT_NE(t.data<bf16>(), nullptr);
  TENSOR_EXPECT_ERROR(t.data<float>(), "bf16", "f32");
}

TEST(TensorMeta, UndefinedTensorSaysSo) {
  const Tensor t;
  EXPECT_FALSE(t.defined());
  TENSOR_EXPECT_ERROR(t.numel(), "undefined");
  EXPECT_EQ(t.str(), "tensor(undefined)");
}

TEST(TensorMeta, ShapeHelpers) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({2, 0, 3}), 0);
  EXPECT_EQ(shape_str({2, 3}), "[2, 3]");
  EXPECT_EQ(shape_str({}), "[]");
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Shape{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({}), (Shape{}));
  EXPECT_EQ(normalize_dim(-1, 3), 2);
  EXPECT_EQ(normalize_dim(1, 3), 1);
  TENSOR_EXPECT_ERROR(normalize_dim(5, 3, "transpose"),
                      "transpose: dim 5 out of range for a 3-d tensor (expected -3..2)");
  TENSOR_EXPECT_ERROR(normalize_dim(0, 0, "squeeze"), "squeeze", "0-d");
}

TEST(TensorValues, ItemNeedsExactlyOneElement) {
  EXPECT_DOUBLE_EQ(scalar_tensor(2.5).item(), 2.5);
  EXPECT_DOUBLE_EQ(full({1, 1}, -3.0, {.dtype = DType::i32}).item(), -3.0);
  EXPECT_DOUBLE_EQ(from_vector({7}, {1}, {.dtype = DType::bf16}).item(), 7.0);
  TENSOR_EXPECT_ERROR(zeros({2, 3}).item(), "item()", "6 elements", "[2, 3]", "exactly one");
  TENSOR_EXPECT_ERROR(zeros({0}).item(), "0 elements");
}

TEST(TensorValues, ToVectorIsRowMajorForAnyStrides) {
  const Tensor t = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(raw::transpose(t, 0, 1).to_vector(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(from_ints({-5, 9}, {2}).to_vector(), (std::vector<double>{-5, 9}));
  EXPECT_TRUE(zeros({0, 3}).to_vector().empty());
}

TEST(TensorStorage, SharedByViewsAndFreedWithTheLast) {
  const Tensor base = zeros({4});
  std::weak_ptr<StorageImpl> watch = base.storage();
  {
    const Tensor v = raw::narrow(base, 0, 1, 2);
    EXPECT_EQ(v.storage(), base.storage());
  }
  EXPECT_EQ(make_storage(0, kCPU)->data(), nullptr);
  Tensor holder = raw::slice(base, 0, 2, 4);
  EXPECT_FALSE(watch.expired());
  holder = Tensor();
  EXPECT_FALSE(watch.expired());  // `base` still holds it
}

TEST(TensorStorage, ComesFromTheCachingAllocator) {
  CachingAllocator& allocator = allocator_for(kCPU);
  const int64_t before = allocator.stats().allocated_bytes.current;
  const int64_t blocks = allocator.stats().allocation.current;
  {
    const Tensor t = zeros({1000}, {.dtype = DType::f64});
    EXPECT_EQ(allocator.stats().allocated_bytes.current,
              before + static_cast<int64_t>(CachingAllocator::round_size(8000)));
    const Tensor none = zeros({0, 4});  // no bytes, no block
    EXPECT_EQ(none.data_ptr(), nullptr);
    EXPECT_EQ(allocator.stats().allocation.current, blocks + 1);
  }
  EXPECT_EQ(allocator.stats().allocated_bytes.current, before);
}

TEST(TensorBackend, CpuIsAlwaysThereAndMissingCudaIsExplained) {
  EXPECT_NE(find_backend(DeviceType::cpu), nullptr);
  EXPECT_EQ(backend_for(kCPU).type(), DeviceType::cpu);
  if (find_backend(DeviceType::cuda) == nullptr) {
    EXPECT_FALSE(cuda_available());
    TENSOR_EXPECT_ERROR(backend_for(cuda_device(0)), "no cuda backend", "-DCHUNKGRAD_CUDA=ON");
    TENSOR_EXPECT_ERROR(zeros({2}, {.device = cuda_device(0)}), "no cuda backend");
  } else {
    TENSOR_EXPECT_ERROR(backend_for(cuda_device(999)), "cuda:999 requested but only");
  }
}

// ---- printing ------------------------------------------------------------------------

TEST(TensorPrint, SmallMatrix) {
  const Tensor t = from_vector({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(t.str(), "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]])");
  std::ostringstream out;
  out << t;
  EXPECT_EQ(out.str(), t.str());
}

TEST(TensorPrint, Bf16VectorNamesItsDtypeAndAlignsSigns) {
  const Tensor t = from_vector({1.5, -2, 0.1}, {3}, {.dtype = DType::bf16});
  EXPECT_EQ(t.str(), "tensor([ 1.5000, -2.0000,  0.1001], dtype=bf16)");
}

TEST(TensorPrint, IntsAndBools) {
  EXPECT_EQ(from_ints({1, -20, 300}, {3}).str(), "tensor([  1, -20, 300], dtype=i64)");
  EXPECT_EQ(from_vector({1, 0}, {2}, {.dtype = DType::boolean}).str(),
            "tensor([ true, false], dtype=bool)");
}

TEST(TensorPrint, ScalarsEmptiesAndFlags) {
  EXPECT_EQ(scalar_tensor(3.5).str(), "tensor(3.5000)");
  EXPECT_EQ(zeros({0}).str(), "tensor([])");
  EXPECT_EQ(zeros({0, 3}, {.dtype = DType::f64}).str(), "tensor([], size=[0, 3], dtype=f64)");
  EXPECT_EQ(ones({2}, {.requires_grad = true}).str(),
            "tensor([1.0000, 1.0000], requires_grad=true)");
}

TEST(TensorPrint, SpecialValuesAndScientificNotation) {
  EXPECT_EQ(from_vector({1e-5, 1}, {2}).str(), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(from_vector({0.5, -INFINITY, NAN}, {3}).str(), "tensor([0.5000,   -inf,    nan])");
  // Integer-valued data stays fixed-point even across a wide range (as PyTorch).
  EXPECT_EQ(from_vector({1, 5000}, {2}).str(), "tensor([   1.0000, 5000.0000])");
}

TEST(TensorPrint, ThreeDimsSeparateBlocksWithABlankLine) {
  const Tensor t = arange(0.0, 8.0, 1.0, {.dtype = DType::i32});
  EXPECT_EQ(raw::view(t, {2, 2, 2}).str(),
            "tensor([[[0, 1],\n"
            "         [2, 3]],\n"
            "\n"
            "        [[4, 5],\n"
            "         [6, 7]]], dtype=i32)");
}

TEST(TensorPrint, LargeTensorsAreSummarised) {
  EXPECT_EQ(arange(0.0, 2000.0).str(),
            "tensor([   0.0000,    1.0000,    2.0000,  ..., 1997.0000, 1998.0000,\n"
            "        1999.0000])");
  const Tensor m = raw::view(arange(10000), {100, 100});
  EXPECT_EQ(m.str(),
            "tensor([[   0,    1,    2,  ...,   97,   98,   99],\n"
            "        [ 100,  101,  102,  ...,  197,  198,  199],\n"
            "        [ 200,  201,  202,  ...,  297,  298,  299],\n"
            "        ...,\n"
            "        [9700, 9701, 9702,  ..., 9797, 9798, 9799],\n"
            "        [9800, 9801, 9802,  ..., 9897, 9898, 9899],\n"
            "        [9900, 9901, 9902,  ..., 9997, 9998, 9999]], dtype=i64)");
  // At the threshold (1000 elements) everything is still printed.
  EXPECT_EQ(arange(1000).str().find("..."), std::string::npos);
}

}  // namespace
}  // namespace cg
