// Why this file exists: the cuBLASLt GEMM behind the CUDA table's gemm and matmul entries
// (cuda/lt_gemm.h) against the CPU table on the same values: odd shapes, transposed and
// sliced views read in place, an operand with no unit stride (copied first), column-major
// output, bf16/f16/f32/f64 and mixed dtypes, alpha/beta, K = 0, batched and broadcast
// matmul with batch dims that merge and ones that do not. Also the multi-tensor AdamW
// (CudaKernels::adamw_step, cuda/cuda_adamw.cpp) against a host reference. Skipped without
// a GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/factories.h"
#include "core/views.h"
#include "cuda/cuda_kernels.h"
#include "cuda/device_info.h"
#include "ops/kernels.h"

namespace cg {
namespace {

class CudaGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
  DeviceKernels& gpu() { return kernels_for(cuda_device(0), "gemm"); }
  DeviceKernels& cpu() { return kernels_for(kCPU, "gemm"); }
};

double tol_of(DType d) {
  switch (d) {
    case DType::f64: return 1e-12;
    case DType::f32: return 1e-4;
    case DType::f16: return 5e-3;
    default: return 2e-2;
  }
}

// A [rows, cols] tensor on the CPU of `dtype` in one of several layouts, same values.
enum class Layout { contiguous, transposed, sliced, strided };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::transposed: return "transposed";
    case Layout::sliced: return "sliced";
    default: return "strided";
  }
}
Tensor make(int64_t rows, int64_t cols, DType dtype, Layout layout, uint64_t seed) {
  Generator gen(seed);
  switch (layout) {
    case Layout::contiguous:
      return raw::to_dtype(rand({rows, cols}, {.dtype = DType::f64}, &gen, -1, 1), dtype);
    case Layout::transposed:
      return raw::transpose(
          raw::to_dtype(rand({cols, rows}, {.dtype = DType::f64}, &gen, -1, 1), dtype), 0, 1);
    case Layout::sliced:
      return raw::narrow(
          raw::to_dtype(rand({rows, cols + 5}, {.dtype = DType::f64}, &gen, -1, 1), dtype), 1, 2,
          cols);
    default:
      return raw::slice(
          raw::to_dtype(rand({rows, 2 * cols}, {.dtype = DType::f64}, &gen, -1, 1), dtype), 1, 0,
          2 * cols, 2);
  }
}
// The same view on the device: the base moved, the view rebuilt with its strides.
Tensor on_gpu(const Tensor& t) {
  const Tensor base = raw::to_device(
      raw::make_tensor(t.storage(),
                       {static_cast<int64_t>(t.storage()->nbytes() / element_size(t.dtype()))}, {1},
                       0, t.dtype()),
      cuda_device(0));
  return raw::as_strided(base, t.shape(), t.strides(), t.offset());
}

void expect_near_all(const Tensor& ref, const Tensor& dev, DType dtype, const std::string& what) {
  ASSERT_EQ(ref.shape(), dev.shape()) << what;
  const std::vector<double> a = ref.to_vector(), b = raw::to_device(dev, kCPU).to_vector();
  const double tol = tol_of(dtype);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_LE(std::abs(a[i] - b[i]), tol * (1.0 + std::abs(a[i])))
        << what << " element " << i << ": cpu " << a[i] << ", gpu " << b[i];
  }
}

TEST_F(CudaGemm, ShapesLayoutsDtypesAlphaBeta) {
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {128, 64, 96}, {257, 129, 63}};
  const DType dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};
  const Layout layouts[] = {Layout::contiguous, Layout::transposed, Layout::sliced,
                            Layout::strided};
  uint64_t seed = 1;
  for (const auto& s : shapes) {
    const int64_t M = s[0], K = s[1], N = s[2];
    for (DType dt : dtypes) {
      for (Layout la : layouts) {
        for (Layout lb : layouts) {
          for (Layout lo : {Layout::contiguous, Layout::transposed}) {
            for (double beta : {0.0, 0.5}) {
              const std::string what = std::to_string(M) + "x" + std::to_string(K) + "x" +
                                       std::to_string(N) + " " + dtype_name(dt) + " a " +
                                       layout_name(la) + " b " + layout_name(lb) + " out " +
                                       layout_name(lo) + " beta " + std::to_string(beta);
              SCOPED_TRACE(what);
              const Tensor a = make(M, K, dt, la, seed++), b = make(K, N, dt, lb, seed++);
              const Tensor out_cpu = make(M, N, dt, lo, seed);
              const Tensor out_gpu = on_gpu(out_cpu);
              const Tensor ref_view =
                  raw::clone(out_cpu);  // the CPU result does not depend on layout
              cpu().gemm(a, b, ref_view, 1.5, beta);
              gpu().gemm(on_gpu(a), on_gpu(b), out_gpu, 1.5, beta);
              expect_near_all(ref_view, out_gpu, dt, what);
              if (HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST_F(CudaGemm, MixedDtypesAndEmptyK) {
  // a f32 @ b bf16 -> out bf16; a bf16 @ b bf16 -> out f32; f32 @ f32 -> f16; f64 @ f64 -> f32.
  struct Mix {
    DType a, b, out;
  } mixes[] = {{DType::f32, DType::bf16, DType::bf16},
               {DType::bf16, DType::bf16, DType::f32},
               {DType::f32, DType::f32, DType::f16},
               {DType::f64, DType::f64, DType::f32},
               {DType::f16, DType::f16, DType::f16}};
  for (const Mix& m : mixes) {
    const std::string what =
        std::string(dtype_name(m.a)) + "@" + dtype_name(m.b) + "->" + dtype_name(m.out);
    SCOPED_TRACE(what);
    const Tensor a = make(19, 23, m.a, Layout::transposed, 7),
                 b = make(23, 11, m.b, Layout::contiguous, 8);
    Tensor ref = make(19, 11, m.out, Layout::contiguous, 9);
    const Tensor out = on_gpu(ref);
    cpu().gemm(a, b, ref, 0.75, 0.25);
    gpu().gemm(on_gpu(a), on_gpu(b), out, 0.75, 0.25);
    expect_near_all(ref, out, m.out, what);
  }
  // K = 0: out = beta out (0 when beta is 0, even over NaN).
  const Tensor a = on_gpu(make(4, 0, DType::f32, Layout::contiguous, 1));
  const Tensor b = on_gpu(make(0, 3, DType::f32, Layout::contiguous, 2));
  Tensor out = raw::to_device(from_vector(std::vector<double>(12, NAN), {4, 3}), cuda_device(0));
  gpu().gemm(a, b, out, 1.0, 0.0);
  for (double v : out.to_vector()) EXPECT_EQ(v, 0.0);
}

TEST_F(CudaGemm, BatchedMatmul) {
  struct Batched {
    Shape a, b;
    bool transpose_a, transpose_b;
  } cases[] = {
      {{2, 3, 5, 7}, {3, 7, 4}, true, false},  // broadcast b over the first batch dim
      {{4, 1, 6, 8}, {3, 8, 5}, false, true},  // broadcast a over the second
      {{6, 9, 10}, {10, 12}, false, false},    // folds into one GEMM of 54 rows
      {{6, 9, 10}, {10, 12}, true, false},     // a transposed: batched with b stride 0
      {{5, 1, 3}, {5, 3, 1}, false, false},    // vectors
      {{3, 70, 33}, {3, 33, 65}, false, false},
  };
  for (const auto& c : cases) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      const std::string what = shape_str(c.a) + " @ " + shape_str(c.b) + " " + dtype_name(dt);
      SCOPED_TRACE(what);
      Generator gen(3);
      auto input = [&](Shape s, bool t) {
        if (t) std::swap(s[s.size() - 1], s[s.size() - 2]);
        Tensor x = raw::to_dtype(rand(s, {.dtype = DType::f64}, &gen, -1, 1), dt);
        return t ? raw::transpose(x, -1, -2) : x;
      };
      const Tensor a = input(c.a, c.transpose_a), b = input(c.b, c.transpose_b);
      const Tensor ref = cpu().matmul(a, b);
      const Tensor out = gpu().matmul(on_gpu(a), on_gpu(b));
      expect_near_all(ref, out, dt, what);
    }
  }
  // Batch dims that do not merge: a permuted [3, 4, 5, 6] (batch strides out of order).
  Generator gen(5);
  const Tensor base = rand({4, 3, 5, 6}, {.dtype = DType::f32}, &gen, -1, 1);
  const Tensor a = raw::permute(base, {1, 0, 2, 3});
  const Tensor b = rand({6, 2}, {.dtype = DType::f32}, &gen, -1, 1);
  expect_near_all(cpu().matmul(a, b), gpu().matmul(on_gpu(a), on_gpu(b)), DType::f32,
                  "permuted batch");
}

TEST_F(CudaGemm, AdamWMatchesAHostReference) {
  const AdamWArgs args{1e-2, 0.9, 0.99, 1e-8, 0.1, 3};
  const int64_t sizes[] = {1, 17, 40000, 5};  // a chunk boundary inside the third
  std::vector<Tensor> params, masters, grads, m, v;
  std::vector<std::vector<double>> w0, g0, m0, v0;
  Generator gen(11);
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const int64_t n = sizes[i];
    const bool with_master = i % 2 == 0;
    const Tensor w = rand({n}, {.dtype = DType::f32}, &gen, -1, 1);
    const Tensor g = rand({n}, {.dtype = DType::f32}, &gen, -1, 1);
    const Tensor mm = rand({n}, {.dtype = DType::f32}, &gen, -0.1, 0.1);
    const Tensor vv = rand({n}, {.dtype = DType::f32}, &gen, 0, 0.1);
    w0.push_back(w.to_vector());
    g0.push_back(raw::to_dtype(raw::to_dtype(g, DType::bf16), DType::f64).to_vector());
    m0.push_back(mm.to_vector());
    v0.push_back(vv.to_vector());
    params.push_back(
        raw::to_device(raw::to_dtype(w, with_master ? DType::bf16 : DType::f32), cuda_device(0)));
    masters.push_back(with_master ? raw::to_device(w, cuda_device(0)) : Tensor());
    grads.push_back(raw::to_device(raw::to_dtype(g, DType::bf16), cuda_device(0)));
    m.push_back(raw::to_device(mm, cuda_device(0)));
    v.push_back(raw::to_device(vv, cuda_device(0)));
  }
  const Tensor scale = raw::to_device(from_vector({0.5}, {1}), cuda_device(0));
  cuda::CudaKernels().adamw_step(params, masters, grads, m, v, scale, args);
  const double bc1 = 1 - std::pow(args.beta1, 3.0), bc2 = 1 - std::pow(args.beta2, 3.0);
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const std::vector<double> w = (masters[i].defined() ? masters[i] : params[i]).to_vector();
    const std::vector<double> mv = m[i].to_vector(), vv = v[i].to_vector();
    for (size_t j = 0; j < w.size(); ++j) {
      const double g = g0[i][j] * 0.5;
      const double me = args.beta1 * m0[i][j] + (1 - args.beta1) * g;
      const double ve = args.beta2 * v0[i][j] + (1 - args.beta2) * g * g;
      const double we = w0[i][j] - args.lr * (me / bc1 / (std::sqrt(ve / bc2) + args.eps) +
                                              args.weight_decay * w0[i][j]);
      ASSERT_NEAR(mv[j], me, 1e-6) << i << " " << j;
      ASSERT_NEAR(vv[j], ve, 1e-6) << i << " " << j;
      ASSERT_NEAR(w[j], we, 1e-5) << i << " " << j;
    }
    if (masters[i].defined()) {  // the bf16 param is the master rounded
      const std::vector<double> p = params[i].to_vector();
      const std::vector<double> r =
          raw::to_dtype(raw::to_dtype(raw::to_device(masters[i], kCPU), DType::bf16), DType::f64)
              .to_vector();
      EXPECT_EQ(p, r);
    }
  }
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
