// Why this file exists: the MPI communicator with several ranks (run by CTest as
// `mpirun -np 2 dist_mpi_tests`, any rank count works): every collective and dtype against
// values computed by hand, bf16 and f16 reduced through fp32 (Note [16-bit floats over MPI],
// dist/mpi_communicator.cpp), uneven sizes, and argument errors that every rank raises
// together instead of hanging (Note [Agreement check]).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "dist/communicator.h"
#include "error_helpers.h"

namespace cg {
namespace {

using dist::ReduceOp;

class DistMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dist::detect_launch().under_mpirun) << "run through mpirun (ctest -R dist_mpi_np2)";
    comm = dist::make_communicator();
    rank = comm->rank();
    world = comm->world_size();
  }
  std::unique_ptr<dist::Communicator> comm;
  int rank = 0, world = 1;
};

TEST_F(DistMpi, KnowsItsRanks) {
  const dist::LaunchInfo launch = dist::detect_launch();
  EXPECT_EQ(comm->backend_name(), "mpi");
  EXPECT_EQ(rank, launch.rank);
  EXPECT_EQ(world, launch.world_size);
  EXPECT_EQ(comm->local_rank(), launch.local_rank);  // one machine: the same numbering
  EXPECT_EQ(comm->local_size(), launch.local_size);
  comm->barrier();
}

// Rank r holds (r + 1) * (i + 1) at element i; the sum over ranks is (i + 1) * W(W+1)/2.
TEST_F(DistMpi, AllReduceSumEveryDtypeAndOddSizes) {
  const double ranks_sum = world * (world + 1) / 2.0;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1031}}) {
      std::vector<double> values(static_cast<size_t>(n)), expected(values.size());
      for (int64_t i = 0; i < n; ++i) {
        const int64_t small = i % 13;  // exact in bf16 and f16 after the sum, too
        values[i] = (rank + 1) * (small + 1);
        expected[i] = (small + 1) * ranks_sum;
      }
      Tensor t = from_vector(values, {n}, {.dtype = dt});
      comm->all_reduce(t, ReduceOp::sum);
      EXPECT_EQ(t.to_vector(), expected) << dtype_name(dt) << " n=" << n;
    }
  }
  Tensor empty = raw::empty({0}, DType::f32, kCPU);
  comm->all_reduce(empty, ReduceOp::sum);
}

TEST_F(DistMpi, AllReduceAverage) {
  // Rank r holds r + 1 everywhere: the average is (W + 1) / 2.
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Tensor t = full({5}, rank + 1.0, {.dtype = dt});
    comm->all_reduce(t, ReduceOp::average);
    EXPECT_EQ(t.to_vector(), std::vector<double>(5, (world + 1) / 2.0)) << dtype_name(dt);
  }
  // f64 keeps its precision: ranks hold 1 + r * 2^-40.
  Tensor fine = full({1}, 1.0 + rank * 0x1p-40, {.dtype = DType::f64});
  comm->all_reduce(fine, ReduceOp::average);
  EXPECT_EQ(fine.item(), 1.0 + (world - 1) / 2.0 * 0x1p-40);
}

// Note [16-bit floats over MPI]: the bf16 values are summed in fp32 and rounded once.
TEST_F(DistMpi, Bf16ReducesThroughFp32) {
  if (world != 2) GTEST_SKIP() << "the hand-computed values are for 2 ranks";
  // Rank 0: 1.0 and 256; rank 1: 1.5 * 2^-8 and 1.5. Sums in fp32: 1.005859375 and 257.5.
  // bf16 has 8 significant bits: next to 1.0 its values are 2^-7 = 0.0078125 apart, so
  // 1.005859375 rounds up to 1.0078125; next to 256 they are 2 apart, so 257.5 rounds to 258.
  Tensor t = from_vector(
      rank == 0 ? std::vector<double>{1.0, 256.0} : std::vector<double>{0.005859375, 1.5}, {2},
      {.dtype = DType::bf16});
  comm->all_reduce(t, ReduceOp::sum);
  EXPECT_EQ(t.to_vector(), (std::vector<double>{1.0078125, 258.0}));
  // f16 (11 significant bits): 2048 + 1.5 = 2049.5 lies between 2048 and 2050 (2 apart)
  // and rounds to 2050; 0.1 + 0.2 in f16 is 0.0999755859375 + 0.199951171875.
  Tensor h =
      from_vector(rank == 0 ? std::vector<double>{2048.0, 0.1} : std::vector<double>{1.5, 0.2}, {2},
                  {.dtype = DType::f16});
  comm->all_reduce(h, ReduceOp::sum);
  EXPECT_EQ(h.to_vector(), (std::vector<double>{2050.0, 0.2998046875}));
}

// Rank r's input element j is 100 r + j (j < W n); rank r receives chunk r of the sum:
// element k is sum over q of (100 q + r n + k) = 100 W(W-1)/2 + W (r n + k).
TEST_F(DistMpi, ReduceScatterGivesEachRankItsChunk) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64}) {
    for (int64_t n : {int64_t{1}, int64_t{3}}) {
      std::vector<double> values(static_cast<size_t>(world * n));
      for (size_t j = 0; j < values.size(); ++j) values[j] = 100.0 * rank + static_cast<double>(j);
      Tensor input = from_vector(values, {world * n}, {.dtype = dt});
      Tensor output = raw::empty({n}, dt, kCPU);
      comm->reduce_scatter(input, output, ReduceOp::sum);
      std::vector<double> expected(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k)
        expected[k] = 100.0 * world * (world - 1) / 2 + world * (rank * n + k);
      // The exact sum, rounded once to the dtype (bf16 has 8 significant bits: from 3 ranks
      // on, the sums pass 256 and round to even numbers).
      const std::vector<double> rounded = from_vector(expected, {n}, {.dtype = dt}).to_vector();
      EXPECT_EQ(output.to_vector(), rounded) << dtype_name(dt) << " n=" << n;
    }
  }
  // Average: rank r's input is r + 1 everywhere; every chunk averages to (W + 1) / 2.
  Tensor input = full({world * 2}, rank + 1.0, {.dtype = DType::f16});
  Tensor output = raw::empty({2}, DType::f16, kCPU);
  comm->reduce_scatter(input, output, ReduceOp::average);
  EXPECT_EQ(output.to_vector(), std::vector<double>(2, (world + 1) / 2.0));
}

// Rank r's input element k is 10 r + k; the output holds every rank's input in rank order.
TEST_F(DistMpi, AllGatherEveryDtype) {
  for (DType dt :
       {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::boolean}) {
    const int64_t n = 5;
    std::vector<double> values(n), expected;
    for (int64_t k = 0; k < n; ++k)
      values[k] = dt == DType::boolean ? (rank + k) % 2 : 10.0 * rank + k;
    for (int q = 0; q < world; ++q) {
      for (int64_t k = 0; k < n; ++k)
        expected.push_back(dt == DType::boolean ? (q + k) % 2 : 10.0 * q + k);
    }
    Tensor input = from_vector(values, {n}, {.dtype = dt});
    Tensor output = raw::empty({world, n}, dt, kCPU);
    comm->all_gather(input, output);
    EXPECT_EQ(output.to_vector(), expected) << dtype_name(dt);
  }
}

TEST_F(DistMpi, BroadcastFromEveryRoot) {
  for (int root = 0; root < world; ++root) {
    // i64 beyond 2^53: exact, no trip through a double.
    const int64_t big = (int64_t{1} << 60) + 12345 + root;
    Tensor ints = from_ints({rank == root ? big : 0, rank == root ? -7 : 0}, {2});
    comm->broadcast(ints, root);
    EXPECT_EQ(ints.data<int64_t>()[0], big);
    EXPECT_EQ(ints.data<int64_t>()[1], -7);
    Tensor halves = full({3}, rank == root ? 0.5 + root : -1.0, {.dtype = DType::bf16});
    comm->broadcast(halves, root);
    EXPECT_EQ(halves.to_vector(), std::vector<double>(3, 0.5 + root));
  }
}

// An argument error on one rank only: that rank throws its own error, the others throw
// naming it, and nobody waits (the test would time out).
TEST_F(DistMpi, OneRanksBadArgumentStopsEveryRank) {
  Tensor matrix = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor passed = rank == world - 1 ? raw::transpose(matrix, 0, 1) : matrix;
  if (rank == world - 1) {
    EXPECT_ERROR_HAS(comm->all_reduce(passed, ReduceOp::sum), "not contiguous");
  } else {
    EXPECT_ERROR_HAS(comm->all_reduce(passed, ReduceOp::sum), "rank", "refused its arguments",
                     "stops too");
  }
  // The communicator still works afterwards.
  Tensor one = full({1}, 1.0);
  comm->all_reduce(one, ReduceOp::sum);
  EXPECT_EQ(one.item(), world);
}

TEST_F(DistMpi, RanksThatDisagreeAllThrowTheSameError) {
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  Tensor t = raw::empty({rank == 0 ? 4 : 5}, DType::f32, kCPU);
  raw::fill_(t, 1.0);
  EXPECT_ERROR_HAS(comm->all_reduce(t, ReduceOp::sum), "the ranks disagree",
                   "rank 0 calls all_reduce of 4 f32", "rank 1 calls all_reduce of 5 f32",
                   "same dtype");
  Tensor typed = raw::empty({4}, rank == 0 ? DType::f32 : DType::f64, kCPU);
  raw::fill_(typed, 1.0);
  EXPECT_ERROR_HAS(comm->broadcast(typed, 0), "the ranks disagree",
                   "broadcast of 4 f32 from root 0", "broadcast of 4 f64");
  // Reduce-scatter: the input must be world_size times the output on every rank.
  Tensor input = raw::empty({world * 3}, DType::f32, kCPU);
  Tensor bad_output = raw::empty({4}, DType::f32, kCPU);
  EXPECT_ERROR_HAS(comm->reduce_scatter(input, bad_output, ReduceOp::sum), "input has",
                   "padded_numel");
}

}  // namespace
}  // namespace cg
