// Why this file exists: the communicator (dist/communicator.h) in a plain run -- world size
// 1, the path every run without mpirun takes -- and the checks every backend shares: launch
// detection, the device a rank takes, and the argument errors with what to change. The
// multi-rank behaviour is tested under mpirun by tests/dist_mpi/ (ctest dist_mpi_np2).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "dist/communicator.h"
#include "error_helpers.h"
#include "fake_device.h"

namespace cg {
namespace {

using dist::ReduceOp;

// Sets the Open MPI launch variables for one test and removes them afterwards.
class LaunchEnv {
 public:
  LaunchEnv(const char* size, const char* rank, const char* local_rank, const char* local_size) {
    setenv("OMPI_COMM_WORLD_SIZE", size, 1);
    setenv("OMPI_COMM_WORLD_RANK", rank, 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", local_rank, 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", local_size, 1);
  }
  ~LaunchEnv() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
      unsetenv(name);
    }
  }
};

TEST(DistLaunch, PlainRunIsOneProcess) {
  ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_SIZE"), nullptr) << "run this test without mpirun";
  const dist::LaunchInfo info = dist::detect_launch();
  EXPECT_FALSE(info.under_mpirun);
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.local_rank, 0);
}

TEST(DistLaunch, ReadsOpenMpiEnvironment) {
  LaunchEnv env("8", "5", "1", "4");
  const dist::LaunchInfo info = dist::detect_launch();
  EXPECT_TRUE(info.under_mpirun);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 4);
}

TEST(DistLaunch, RefusesMalformedEnvironment) {
  {
    LaunchEnv env("two", "0", "0", "1");
    EXPECT_ERROR_HAS(dist::detect_launch(), "OMPI_COMM_WORLD_SIZE", "two", "mpirun");
  }
  LaunchEnv env("2", "3", "0", "1");  // rank outside the world
  EXPECT_ERROR_HAS(dist::detect_launch(), "inconsistent", "RANK 3 of SIZE 2");
}

TEST(DistLaunch, DeviceComesFromTheLocalRank) {
  fake::FakeDeviceScope fake_scope;
  dist::LaunchInfo two_ranks{
      .under_mpirun = true, .rank = 1, .world_size = 2, .local_rank = 0, .local_size = 1};
  // The host has no numbered devices: every rank uses it.
  EXPECT_EQ(dist::device_for_local_rank("cpu", two_ranks), kCPU);
  // The type comes from the text, the index from the local rank.
  EXPECT_EQ(dist::device_for_local_rank("fake", two_ranks), fake::fake_device());
  EXPECT_EQ(dist::device_for_local_rank("fake:0", two_ranks), fake::fake_device());
  // An explicit index that disagrees with the local rank is refused, saying what to write.
  EXPECT_ERROR_HAS(dist::device_for_local_rank("fake:1", two_ranks, "--device"), "--device fake:1",
                   "local rank 0", "fake:0", "write the device type alone (\"fake\")");
  // A plain run keeps the text's meaning (and resolve_device's checks).
  EXPECT_EQ(dist::device_for_local_rank("fake:0", dist::LaunchInfo{}), fake::fake_device());
  EXPECT_ERROR_HAS(dist::device_for_local_rank("tpu", dist::LaunchInfo{}), "tpu");
}

TEST(DistSingle, IsRankZeroOfOne) {
  auto comm = dist::make_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_EQ(comm->local_rank(), 0);
  EXPECT_EQ(comm->local_size(), 1);
  EXPECT_EQ(comm->backend_name(), "single");
  EXPECT_EQ(comm->device(), kCPU);
  comm->barrier();
}

TEST(DistSingle, ReductionsOfOneRankKeepTheValues) {
  auto comm = dist::make_communicator();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
      if (op == ReduceOp::average && !is_floating(dt)) continue;
      Tensor t = from_vector({1.5, -2.0, 3.0}, {3}, {.dtype = dt});
      const std::vector<double> before = t.to_vector();
      const uint64_t version = t.version();
      comm->all_reduce(t, op);
      EXPECT_EQ(t.to_vector(), before) << dtype_name(dt) << " " << dist::reduce_op_name(op);
      EXPECT_GT(t.version(), version) << "an all_reduce is an in-place write";
    }
  }
}

TEST(DistSingle, GatherScatterAndBroadcastCopy) {
  auto comm = dist::make_communicator();
  Tensor input = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::bf16});
  Tensor output = raw::empty({6}, DType::bf16, kCPU);
  comm->all_gather(input, output);
  EXPECT_EQ(output.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor scattered = raw::empty({3, 2}, DType::bf16, kCPU);
  comm->reduce_scatter(input, scattered, ReduceOp::average);
  EXPECT_EQ(scattered.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor flags = from_ints({1, 0, 1}, {3}, {.dtype = DType::boolean});
  Tensor gathered_flags = raw::empty({3}, DType::boolean, kCPU);
  comm->all_gather(flags, gathered_flags);
  EXPECT_EQ(gathered_flags.to_vector(), (std::vector<double>{1, 0, 1}));
  comm->broadcast(flags, 0);
  EXPECT_EQ(flags.to_vector(), (std::vector<double>{1, 0, 1}));
}

TEST(DistSingle, RefusesBadArgumentsSayingWhatToChange) {
  auto comm = dist::make_communicator();
  Tensor matrix = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor column = raw::transpose(matrix, 0, 1);
  EXPECT_ERROR_HAS(comm->all_reduce(column, ReduceOp::sum), "all_reduce", "not contiguous",
                   "contiguous(x)");
  Tensor undefined;
  EXPECT_ERROR_HAS(comm->all_reduce(undefined, ReduceOp::sum), "undefined");
  Tensor flags = from_ints({1, 0}, {2}, {.dtype = DType::boolean});
  EXPECT_ERROR_HAS(comm->all_reduce(flags, ReduceOp::sum), "cannot reduce a bool", "i32");
  Tensor counts = from_ints({1, 2}, {2});
  EXPECT_ERROR_HAS(comm->all_reduce(counts, ReduceOp::average), "average", "i64", "truncate",
                   "ReduceOp::sum");
  Tensor f64_out = raw::empty({6}, DType::f64, kCPU);
  EXPECT_ERROR_HAS(comm->all_gather(matrix, f64_out), "all_gather",
                   "input is f32 but output is f64", "same dtype");
  Tensor short_out = raw::empty({5}, DType::f32, kCPU);
  EXPECT_ERROR_HAS(comm->all_gather(matrix, short_out), "output has 5 elements",
                   "world_size (1) x input's 6", "padded_numel");
  EXPECT_ERROR_HAS(comm->broadcast(matrix, 1), "root 1 is not a rank", "0 .. 0");
  // A device the communicator was not made for.
  fake::FakeDeviceScope fake_scope;
  Tensor on_fake = raw::empty({4}, DType::f32, fake::fake_device());
  EXPECT_ERROR_HAS(comm->all_reduce(on_fake, ReduceOp::sum), "is on fake:0", "takes host tensors",
                   "CommOptions::device = fake:0");
  auto fake_comm = dist::make_communicator({.device = fake::fake_device()});
  fake_comm->all_reduce(on_fake, ReduceOp::sum);  // accepted there
  EXPECT_ERROR_HAS(dist::make_communicator({.timeout_seconds = 0}), "timeout_seconds is 0",
                   "positive");
}

TEST(DistSingle, PaddedNumel) {
  EXPECT_EQ(dist::padded_numel(0, 4), 0);
  EXPECT_EQ(dist::padded_numel(7, 1), 7);
  EXPECT_EQ(dist::padded_numel(7, 2), 8);
  EXPECT_EQ(dist::padded_numel(8, 4), 8);
  EXPECT_EQ(dist::padded_numel(9, 4), 12);
  EXPECT_ERROR_HAS(dist::padded_numel(3, 0), "world_size >= 1");
}

}  // namespace
}  // namespace cg
