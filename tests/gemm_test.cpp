// Why this file exists: cpu::gemm (cpu/gemm.h) is the product under matmul and the
// head loss, so it is checked here on its own against a triple loop in double: every
// dtype combination, transposed and strided views, alpha and beta, odd sizes (1x1x1,
// 37x19x53, K = 0), sizes that split between threads and convert in several tiles, the
// same bits for any thread count, and scratch that stays within gemm_scratch_bytes.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <thread>

#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/views.h"
#include "cpu/gemm.h"
#include "ops/kernel_shapes.h"
#include "ops/ops.h"
#include "ops/threads.h"

namespace cg {
namespace {

// out = alpha a b + beta out0, in double, from the tensors' values.
std::vector<double> reference(const Tensor& a, const Tensor& b, const std::vector<double>& out0,
                              double alpha, double beta) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const auto av = a.to_vector(), bv = b.to_vector();
  std::vector<double> out(M * N);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) s += av[i * K + k] * bv[k * N + j];
      out[i * N + j] = alpha * s + (beta == 0.0 ? 0.0 : beta * out0[i * N + j]);
    }
  }
  return out;
}

// Relative tolerance for a result computed in f32 (or f64) and stored in `out`'s dtype.
double tolerance(DType a, DType b, DType out, int64_t K) {
  if (a == DType::f64 && b == DType::f64 && out == DType::f64) return 1e-12;
  if (out == DType::bf16) return 1e-2;
  if (out == DType::f16) return 2e-3;
  return 1e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(K, 1))) + 1e-6;
}

// A [rows, cols] tensor of dtype dt in one of several layouts with the same values.
enum class Layout { row_major, transposed, strided, padded };
Tensor make(int64_t rows, int64_t cols, DType dt, Layout layout, uint64_t seed) {
  Generator gen(seed);
  switch (layout) {
    case Layout::row_major: return to(randn({rows, cols}, {}, &gen), dt);
    case Layout::transposed: return transpose(to(randn({cols, rows}, {}, &gen), dt), 0, 1);
    case Layout::strided:  // no unit stride at all
      return slice(to(randn({rows, 2 * cols}, {}, &gen), dt), 1, 0, 2 * cols, 2);
    case Layout::padded:  // row major with a leading dimension larger than cols
      return narrow(to(randn({rows, cols + 3}, {}, &gen), dt), 1, 1, cols);
  }
  return Tensor();
}

void check(int64_t M, int64_t K, int64_t N, DType da, DType db, DType dout, Layout la, Layout lb,
           Layout lout, double alpha, double beta) {
  const Tensor a = make(M, K, da, la, 1), b = make(K, N, db, lb, 2);
  Tensor out = make(M, N, dout, lout, 3);
  if (beta == 0.0 && M * N > 0) {  // beta 0 must not read out: poison it
    raw::fill_(out, std::numeric_limits<double>::quiet_NaN());
  }
  const auto out0 = out.to_vector();
  cpu::gemm(a, b, out, alpha, beta);
  const auto want = reference(a, b, out0, alpha, beta);
  const auto got = out.to_vector();
  double scale = 1.0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  const double tol = tolerance(da, db, dout, K) * scale;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol)
        << "element " << i << " of " << M << "x" << K << "x" << N << " " << dtype_name(da) << ","
        << dtype_name(db) << "->" << dtype_name(dout) << " layouts " << int(la) << int(lb)
        << int(lout) << " alpha " << alpha << " beta " << beta;
  }
}

const DType kDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

TEST(Gemm, EveryDtypeCombinationMatchesTripleLoop) {
  for (DType da : kDtypes)
    for (DType db : kDtypes)
      for (DType dout : kDtypes)
        check(37, 19, 53, da, db, dout, Layout::row_major, Layout::row_major, Layout::row_major,
              1.0, 0.0);
}

TEST(Gemm, TransposedStridedAndPaddedViews) {
  const Layout layouts[] = {Layout::row_major, Layout::transposed, Layout::strided, Layout::padded};
  for (DType dt : {DType::f32, DType::f64, DType::bf16})
    for (Layout la : layouts)
      for (Layout lb : layouts)
        for (Layout lo : layouts) check(37, 19, 53, dt, dt, dt, la, lb, lo, 1.0, 0.0);
}

TEST(Gemm, AlphaAndBeta) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (double beta : {0.0, 1.0, -0.5}) {
      check(37, 19, 53, dt, dt, dt, Layout::row_major, Layout::transposed, Layout::row_major, 0.25,
            beta);
      check(37, 19, 53, dt, dt, dt, Layout::row_major, Layout::row_major, Layout::transposed, 2.0,
            beta);
      check(37, 19, 53, DType::f32, dt, DType::f32, Layout::row_major, Layout::row_major,
            Layout::strided, -1.0, beta);
    }
  }
}

TEST(Gemm, OddAndEmptySizes) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (double beta : {0.0, 1.0, 3.0}) {
      check(1, 1, 1, dt, dt, dt, Layout::row_major, Layout::row_major, Layout::row_major, 1.0,
            beta);
      check(1, 7, 1, dt, dt, dt, Layout::transposed, Layout::row_major, Layout::row_major, 1.0,
            beta);
      check(5, 0, 3, dt, dt, dt, Layout::row_major, Layout::row_major, Layout::row_major, 1.0,
            beta);  // K = 0
      check(1, 300, 65, dt, dt, dt, Layout::row_major, Layout::transposed, Layout::row_major, 1.0,
            beta);
      check(130, 2, 1, dt, dt, dt, Layout::row_major, Layout::row_major, Layout::transposed, 1.0,
            beta);
      // One row or one column of out: the BLAS's matrix-vector product, every layout.
      check(1, 300, 65, dt, dt, dt, Layout::transposed, Layout::padded, Layout::transposed, 0.5,
            beta);
      check(130, 40, 1, dt, dt, dt, Layout::padded, Layout::transposed, Layout::padded, -2.0, beta);
      check(1, 40, 1, dt, dt, dt, Layout::transposed, Layout::padded, Layout::row_major, 1.0, beta);
    }
  }
  // Nothing to compute: no error, nothing written.
  check(0, 4, 3, DType::f32, DType::f32, DType::f32, Layout::row_major, Layout::row_major,
        Layout::row_major, 1.0, 0.0);
  check(3, 4, 0, DType::f32, DType::f32, DType::f32, Layout::row_major, Layout::row_major,
        Layout::row_major, 1.0, 0.0);
}

// Large enough to split between threads (and, for 16-bit operands, to walk several
// sub-tiles of kGemmTileRows in every dim).
TEST(Gemm, LargeProductsSplitAndTile) {
  const int before = get_num_threads();
  set_num_threads(3);
  const int64_t M = cpu::kGemmTileRows + 70, K = cpu::kGemmTileRows + 9,
                N = 2 * cpu::kGemmTileRows + 5;
  check(M, K, 200, DType::f32, DType::f32, DType::f32, Layout::row_major, Layout::transposed,
        Layout::row_major, 1.0, 0.0);
  check(M, K, N, DType::bf16, DType::bf16, DType::f32, Layout::row_major, Layout::transposed,
        Layout::row_major, 1.0, 1.0);
  check(200, K, N, DType::f32, DType::bf16, DType::bf16, Layout::transposed, Layout::row_major,
        Layout::row_major, 0.5, 0.0);
  check(N, 64, M, DType::f32, DType::f32, DType::f16, Layout::transposed, Layout::row_major,
        Layout::transposed, 1.0, -1.0);
  set_num_threads(before);
}

// Note [Deterministic threads]: the same bits for 1, 2, 3, 5 and 16 threads (the tiles
// come from the shapes; Note [GEMM blocking]).
TEST(Gemm, SameBitsForAnyThreadCount) {
  const int before = get_num_threads();
  const Tensor a = make(301, 277, DType::f32, Layout::row_major, 4);
  const Tensor b = make(277, 1000, DType::bf16, Layout::transposed, 5);  // split N, tiled
  const Tensor c = make(277, 500, DType::f32, Layout::row_major, 6);     // split N
  const Tensor a3 = make(700, 277, DType::f32, Layout::transposed, 7);   // split M
  const Tensor c3 = make(277, 190, DType::f32, Layout::row_major, 8);
  std::vector<std::vector<double>> results;
  for (int threads : {1, 2, 3, 5, 16}) {
    set_num_threads(threads);
    Tensor out1 = zeros({301, 1000}), out2 = zeros({301, 500}), out3 = zeros({700, 190});
    Tensor out4 = transpose(zeros({190, 700}), 0, 1);  // column-major output
    cpu::gemm(a, b, out1, 1.0, 0.0);
    cpu::gemm(a, c, out2, 1.0, 0.0);
    cpu::gemm(a3, c3, out3, 1.0, 0.0);
    cpu::gemm(a3, c3, out4, 1.0, 0.0);
    std::vector<double> v;
    for (const Tensor& o : {out1, out2, out3, out4}) {
      const auto part = o.to_vector();
      v.insert(v.end(), part.begin(), part.end());
    }
    results.push_back(v);
  }
  set_num_threads(before);
  for (size_t i = 1; i < results.size(); ++i) EXPECT_TRUE(results[0] == results[i]) << "run " << i;
}

// The scratch a conversion needs is bounded by tiles, not by the operands' sizes, and
// gemm_scratch_bytes says how much.
TEST(Gemm, ScratchStaysWithinItsBound) {
  CachingAllocator& alloc = allocator_for(kCPU);
  const Tensor a = make(700, 1100, DType::bf16, Layout::row_major, 7);
  const Tensor b = make(1100, 900, DType::bf16, Layout::transposed, 8);
  Tensor out = zeros({700, 900}, {.dtype = DType::bf16});
  const size_t bound = cpu::gemm_scratch_bytes(a, b, out);
  const size_t tile = static_cast<size_t>(cpu::kGemmTileRows * cpu::kGemmTileRows) * 4;
  EXPECT_GT(bound, 0u);
  EXPECT_LE(bound, static_cast<size_t>(get_num_threads()) * 3 * tile);
  alloc.reset_peak_stats();
  const int64_t before = alloc.stats().allocated_bytes.current;
  cpu::gemm(a, b, out, 1.0, 0.0);
  EXPECT_LE(alloc.stats().allocated_bytes.peak - before, static_cast<int64_t>(bound));
  EXPECT_GT(alloc.stats().allocated_bytes.peak - before, 0);
  // Operands read in place need none.
  const Tensor af = to(a, DType::f32), bf = to(b, DType::f32);
  Tensor of = zeros({700, 900});
  EXPECT_EQ(cpu::gemm_scratch_bytes(af, bf, of), 0u);
  EXPECT_EQ(cpu::gemm_scratch_bytes(af, transpose(contiguous(transpose(bf, 0, 1)), 0, 1), of), 0u);
}

TEST(Gemm, ErrorsNameTheShapes) {
  Tensor a = zeros({3, 4}), b = zeros({5, 2}), out = zeros({3, 2});
  try {
    cpu::gemm(a, b, out, 1.0, 0.0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a [3, 4] @ b [5, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cpu::gemm(zeros({3}), b, out, 1.0, 0.0), Error);
  EXPECT_THROW(cpu::gemm(zeros({3, 5}, {.dtype = DType::i64}), b, out, 1.0, 0.0), Error);
}

// matmul goes through gemm: batched, broadcast, folded rows, 16-bit and transposed inputs.
TEST(Gemm, MatmulBatchedAndFoldedMatchLoops) {
  for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
    Generator gen(9);
    const Tensor a = to(randn({3, 5, 70, 33}, {}, &gen), dt);
    const Tensor w = to(randn({33, 41}, {}, &gen), dt);
    const Tensor bb = transpose(to(randn({5, 41, 33}, {}, &gen), dt), 1, 2);  // [5, 33, 41]
    const double tol = dt == DType::bf16 ? 2e-2 : dt == DType::f32 ? 1e-4 : 1e-12;
    for (const Tensor& b : {w, bb}) {
      // a2: a's values in a layout whose batch dims do not fold into rows.
      const Tensor a2 = transpose(contiguous(transpose(a, 0, 1)), 0, 1);
      const Tensor got = matmul(a, b), got_t = matmul(a2, b);
      ASSERT_EQ(got.shape(), (Shape{3, 5, 70, 41}));
      const auto gv = got.to_vector(), tv = got_t.to_vector();
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t h = 0; h < 5; ++h) {
          const Tensor bm = b.dim() == 2 ? b : reshape(narrow(b, 0, h, 1), {33, 41});
          const Tensor am = reshape(narrow(narrow(a, 0, i, 1), 1, h, 1), {70, 33});
          const auto want = reference(am, bm, {}, 1.0, 0.0);
          for (int64_t e = 0; e < 70 * 41; ++e) {
            const double w_e = want[e];
            ASSERT_NEAR(gv[((i * 5 + h) * 70) * 41 + e], w_e, tol * (1 + std::fabs(w_e)));
            ASSERT_NEAR(tv[((i * 5 + h) * 70) * 41 + e], w_e, tol * (1 + std::fabs(w_e)));
          }
        }
      }
    }
  }
}

// The operand layout rule both GEMMs read by (ops/kernel_shapes.h's gemm_layout).
TEST(Gemm, OperandLayoutRule) {
  auto expect = [](GemmLayout l, bool in_place, bool row_major, int64_t ld) {
    EXPECT_EQ(l.in_place, in_place);
    if (in_place) {
      EXPECT_EQ(l.row_major, row_major);
      EXPECT_EQ(l.ld, ld);
    }
  };
  expect(gemm_layout(4, 6, 6, 1), true, true, 6);     // contiguous
  expect(gemm_layout(4, 6, 8, 1), true, true, 8);     // padded rows
  expect(gemm_layout(4, 6, 1, 4), true, false, 4);    // transposed view
  expect(gemm_layout(4, 6, 1, 5), true, false, 5);    // transposed, padded
  expect(gemm_layout(4, 6, 2, 12), false, false, 0);  // no unit stride
  expect(gemm_layout(4, 6, 3, 1), false, false, 0);   // rows overlap
  // Size-1 dims may carry any stride.
  expect(gemm_layout(1, 6, 999, 1), true, true, 6);
  expect(gemm_layout(4, 1, 1, 0), true, true, 1);
  expect(gemm_layout(1, 1, 7, 7), true, true, 1);
  expect(gemm_layout(4, 1, 3, 5), true, true, 3);
  expect(gemm_layout(1, 6, 0, 4), true, false, 4);  // one row, columns 4 apart
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The busy-neighbour rule of ThreadPool.IdleWorkersSleep with the BLAS inside: after
// products on 4 threads nothing spins, neither the pool's workers nor OpenBLAS's own
// threads, which never get work (Note [BLAS threads] in cpu/gemm.cpp: each call runs on
// the thread that makes it). The first wait lets the threads OpenBLAS starts when it
// loads go to sleep.
TEST(Gemm, NothingSpinsAfterProducts) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int before = get_num_threads();
  set_num_threads(4);
  const Tensor a = make(384, 256, DType::f32, Layout::row_major, 21);
  const Tensor b = make(256, 384, DType::f32, Layout::transposed, 22);
  const Tensor out = zeros({384, 384});
  for (int rep = 0; rep < 20; ++rep) cpu::gemm(a, b, out, 1.0, 0.0);
  EXPECT_EQ(cpu::blas_threads(), 1) << cpu::blas_description();
  const double t0 = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double used = process_cpu_seconds() - t0;
  set_num_threads(before);
  EXPECT_LT(used, 0.02) << "idle threads used " << used << " s of CPU in 0.2 s";
}

}  // namespace
}  // namespace cg
