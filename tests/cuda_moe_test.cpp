// Why this file exists: the CUDA moe_route and moe_experts entries (cuda/cuda_moe.cpp,
// kernels in cuda/moe_kernels.cu) against the CPU table's (Note [MoE rounding] in
// ops/kernels.h): routing on the same logits (indices exactly, weights at 1e-6 in f32,
// ties to the lower index, k = 1, E = 256 / k = 8, E = 512), and the experts on the same
// routing through each GEMM path (cuBLAS's grouped GEMM where it accepts the dtype, the
// per-expert loop, the automatic choice), with experts that get no token, one token
// (decoding), E = 256 / k = 8 at small widths. Tolerances are relative to the largest
// reference value (at least 1): f32 and f64 1e-5 (sums in another order), f16 1e-2,
// bf16 3e-2 (the CPU rounds each token's k contributions as it adds them, the GPU sums
// them in fp32 and rounds once). Also: one host wait per experts call, and two calls give
// the same bits. Compiled only in CUDA builds; skipped without a GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/factories.h"
#include "core/views.h"
#include "cuda/cuda_check.h"
#include "cuda/device_info.h"
#include "cuda/moe_kernels.h"
#include "ops/kernels.h"
#include "tests/cuda_attention_test_util.h"

namespace cg {
namespace {

class CudaMoe : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) {
      GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    }
  }
};

using testing::expect_close;  // max |gpu - cpu| <= tol * max(1, max |cpu|), no NaN

DeviceKernels& cpu_table() { return *find_kernels(DeviceType::cpu); }
DeviceKernels& gpu_table() { return *find_kernels(DeviceType::cuda); }

MoeRouting to_gpu(const MoeRouting& r) {
  return {raw::to_device(r.weights, cuda_device(0)), raw::to_device(r.indices, cuda_device(0))};
}

// Routes logits on both tables: indices equal, weights within tol.
void check_route(const Tensor& logits, int64_t k, double tol, const std::string& name) {
  SCOPED_TRACE(name);
  const MoeRouting ref = cpu_table().moe_route(logits, k);
  const MoeRouting got = gpu_table().moe_route(raw::to_device(logits, cuda_device(0)), k);
  ASSERT_EQ(got.indices.dtype(), DType::i32);
  ASSERT_EQ(got.weights.dtype(), ref.weights.dtype());
  EXPECT_EQ(got.indices.to_vector(), ref.indices.to_vector()) << "indices";
  expect_close(got.weights, ref.weights, tol, "weights");
}

TEST_F(CudaMoe, RouteRandomLogits) {
  struct Shape3 {
    int64_t N, E, k;
  };
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    for (const Shape3 s : {Shape3{37, 64, 4}, Shape3{1, 256, 8}, Shape3{300, 256, 8},
                           Shape3{9, 512, 8}, Shape3{20, 8, 1}, Shape3{5, 3, 3}}) {
      Generator gen(11 + static_cast<uint64_t>(s.E));
      const Tensor logits = randn({s.N, s.E}, {.dtype = dt}, &gen, 0.0, 2.0);
      check_route(logits, s.k, 1e-6,
                  std::string(dtype_name(dt)) + " N" + std::to_string(s.N) + " E" +
                      std::to_string(s.E) + " k" + std::to_string(s.k));
    }
  }
}

TEST_F(CudaMoe, RouteTiesGoToTheLowerIndex) {
  // Row 0: all equal (experts 0..3 win). Row 1: two pairs of equal maxima. Row 2: the best
  // value at index 7 and 2 (2 first), then 5 and 1 (1 first).
  const std::vector<double> v = {0, 0, 0, 0, 0, 0, 0, 0,  //
                                 1, 3, 0, 3, 2, 2, 0, 0,  //
                                 0, 1, 4, 0, 0, 1, 0, 4};
  const Tensor logits = from_vector(v, {3, 8});
  check_route(logits, 4, 1e-6, "ties");
  const MoeRouting got = gpu_table().moe_route(raw::to_device(logits, cuda_device(0)), 4);
  EXPECT_EQ(got.indices.to_vector(), (std::vector<double>{0, 1, 2, 3, 1, 3, 4, 5, 2, 7, 1, 5}));
}

// Random experts whose routing skips `empty` experts (their logits far below the rest).
struct ExpertsCase {
  int64_t N = 23, H = 64, I = 32, E = 8, k = 2;
  std::vector<int64_t> empty = {3, 5};
};

struct ExpertsInputs {
  Tensor x, gate_up, down;
  MoeRouting routing;
};

ExpertsInputs make_experts(const ExpertsCase& c, DType dt, uint64_t seed) {
  Generator gen(seed);
  ExpertsInputs in;
  in.x = randn({c.N, c.H}, {.dtype = dt}, &gen);
  in.gate_up = randn({c.E, 2 * c.I, c.H}, {.dtype = dt}, &gen, 0.0,
                     1.0 / std::sqrt(static_cast<double>(c.H)));
  in.down =
      randn({c.E, c.H, c.I}, {.dtype = dt}, &gen, 0.0, 1.0 / std::sqrt(static_cast<double>(c.I)));
  std::vector<double> logits = randn({c.N, c.E}, {.dtype = DType::f32}, &gen).to_vector();
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t e : c.empty) logits[static_cast<size_t>(n * c.E + e)] = -30.0;
  }
  in.routing = cpu_table().moe_route(from_vector(logits, {c.N, c.E}), c.k);
  return in;
}

double experts_tol(DType dt) { return dt == DType::bf16 ? 3e-2 : (dt == DType::f16 ? 1e-2 : 1e-5); }

const char* path_name(cuda::MoeGemmPath p) {
  return p == cuda::MoeGemmPath::grouped ? "grouped"
                                         : (p == cuda::MoeGemmPath::loop ? "loop" : "automatic");
}

void check_experts(const ExpertsCase& c, DType dt, const std::string& name) {
  SCOPED_TRACE(name + " " + dtype_name(dt));
  const ExpertsInputs in = make_experts(c, dt, 5 + static_cast<uint64_t>(c.N * c.E));
  const Tensor ref = cpu_table().moe_experts(in.x, in.gate_up, in.down, in.routing);
  const Device d = cuda_device(0);
  const Tensor x = raw::to_device(in.x, d), gu = raw::to_device(in.gate_up, d),
               dn = raw::to_device(in.down, d);
  const MoeRouting r = to_gpu(in.routing);
  for (auto path :
       {cuda::MoeGemmPath::automatic, cuda::MoeGemmPath::loop, cuda::MoeGemmPath::grouped}) {
    SCOPED_TRACE(path_name(path));
    Tensor out;
    try {
      out = cuda::run_moe_experts(x, gu, dn, r, path);
    } catch (const Error& e) {
      // cuBLAS may refuse the grouped GEMM for a dtype; the automatic path then loops.
      ASSERT_EQ(path, cuda::MoeGemmPath::grouped) << e.what();
      std::cout << "[ moe ] " << name << " " << dtype_name(dt) << ": " << e.what() << "\n";
      continue;
    }
    if (path == cuda::MoeGemmPath::automatic) {
      std::cout << "[ moe ] " << name << " " << dtype_name(dt) << ": automatic ran "
                << path_name(cuda::last_moe_gemm_path()) << "\n";
    }
    EXPECT_EQ(out.dtype(), dt);
    expect_close(out, ref, experts_tol(dt), "out");
  }
}

TEST_F(CudaMoe, ExpertsSmallWithEmptyExperts) {
  for (DType dt : {DType::f32, DType::bf16}) check_experts(ExpertsCase{}, dt, "small");
}

TEST_F(CudaMoe, ExpertsF16AndF64) {
  for (DType dt : {DType::f16, DType::f64}) check_experts(ExpertsCase{}, dt, "small");
}

TEST_F(CudaMoe, ExpertsTopOne) {
  ExpertsCase c;
  c.k = 1;
  c.N = 40;
  for (DType dt : {DType::f32, DType::bf16}) check_experts(c, dt, "k1");
}

TEST_F(CudaMoe, ExpertsOneTokenDecoding) {  // N = 1: k groups of one row, E - k empty
  ExpertsCase c;
  c.N = 1;
  c.E = 256;
  c.k = 8;
  c.H = 256;
  c.I = 64;
  c.empty = {};
  for (DType dt : {DType::f32, DType::bf16}) check_experts(c, dt, "decode");
}

TEST_F(CudaMoe, ExpertsManyExpertsRealisticRouting) {  // E 256, k 8: about 6 rows per expert
  ExpertsCase c;
  c.N = 200;
  c.E = 256;
  c.k = 8;
  c.H = 256;
  c.I = 128;
  c.empty = {0, 17, 255};
  for (DType dt : {DType::f32, DType::bf16}) check_experts(c, dt, "E256");
}

TEST_F(CudaMoe, ExpertsOneHostWaitAndSameBits) {
  ExpertsCase c;
  c.N = 64;
  const ExpertsInputs in = make_experts(c, DType::bf16, 3);
  const Device d = cuda_device(0);
  const Tensor x = raw::to_device(in.x, d), gu = raw::to_device(in.gate_up, d),
               dn = raw::to_device(in.down, d);
  const MoeRouting r = to_gpu(in.routing);
  const Tensor first = gpu_table().moe_experts(x, gu, dn, r);
  const uint64_t before = host_sync_count();
  const Tensor second = gpu_table().moe_experts(x, gu, dn, r);
  EXPECT_EQ(host_sync_count(), before + 1) << "moe_experts waits once (the row counts)";
  EXPECT_EQ(first.to_vector(), second.to_vector());
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
