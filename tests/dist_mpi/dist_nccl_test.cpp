// Why this file exists: the NCCL half of the communicator (dist/nccl_communicator.cpp) on
// the GPU, one rank per device, checked against values computed by hand, as the MPI tests
// check the host path: every collective and dtype, a collective on a side stream, host and
// device tensors on one communicator, and the watchdog turning a stuck collective into an
// error that names the timeout and the rank. Skips without NCCL in the build or without a
// GPU; the device runs it (requests/dist/run.sh: `mpirun -np 1 dist_mpi_tests`).
#include <gtest/gtest.h>

#include "dist/communicator.h"

#ifdef CHUNKGRAD_WITH_CUDA
#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/factories.h"
#include "core/stream_guard.h"
#include "core/views.h"
#include "cuda/compute_stream.h"
#include "cuda/device_info.h"
#include "error_helpers.h"

namespace cg {
namespace {

using dist::ReduceOp;

class DistNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dist::built_with_nccl())
      GTEST_SKIP() << "this build has no NCCL backend (CHUNKGRAD_NCCL=OFF)";
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    ASSERT_TRUE(dist::detect_launch().under_mpirun) << "run through mpirun";
    // One process per GPU: more ranks on this machine than GPUs (ctest's 2 ranks on a
    // one-GPU machine) cannot run NCCL; `mpirun -np 1` tests it there.
    if (cuda::device_count() < dist::detect_launch().local_size)
      GTEST_SKIP() << dist::detect_launch().local_size << " ranks on this machine but "
                   << cuda::device_count() << " CUDA device(s)";
    device = dist::device_for_local_rank("cuda", dist::detect_launch());
    comm = dist::make_communicator({.device = device, .timeout_seconds = 60});
    rank = comm->rank();
    world = comm->world_size();
  }
  Tensor on_device(const std::vector<double>& values, DType dt) {
    return from_vector(values, {static_cast<int64_t>(values.size())},
                       {.dtype = dt, .device = device});
  }
  Device device;
  std::unique_ptr<dist::Communicator> comm;
  int rank = 0, world = 1;
};

TEST_F(DistNccl, AllReduceEveryDtype) {
  EXPECT_EQ(comm->backend_name(), "mpi+nccl");
  EXPECT_EQ(comm->device(), device);
  const double ranks_sum = world * (world + 1) / 2.0;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    std::vector<double> values, expected;
    for (int i = 0; i < 1031; ++i) {
      values.push_back((rank + 1) * (i % 13 + 1));
      expected.push_back((i % 13 + 1) * ranks_sum);
    }
    Tensor t = on_device(values, dt);
    comm->all_reduce(t, ReduceOp::sum);
    EXPECT_EQ(t.to_vector(), expected) << dtype_name(dt);
  }
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor t = on_device(std::vector<double>(7, rank + 1.0), dt);
    comm->all_reduce(t, ReduceOp::average);
    EXPECT_EQ(t.to_vector(), std::vector<double>(7, (world + 1) / 2.0)) << dtype_name(dt);
  }
}

TEST_F(DistNccl, ReduceScatterAllGatherBroadcast) {
  const int64_t n = 3;
  std::vector<double> values;
  for (int64_t j = 0; j < world * n; ++j) values.push_back(100.0 * rank + j);
  Tensor input = on_device(values, DType::f32);
  Tensor output = raw::empty({n}, DType::f32, device);
  comm->reduce_scatter(input, output, ReduceOp::sum);
  std::vector<double> expected;
  for (int64_t k = 0; k < n; ++k)
    expected.push_back(100.0 * world * (world - 1) / 2 + world * (rank * n + k));
  EXPECT_EQ(output.to_vector(), expected);

  Tensor mine = on_device({10.0 * rank, 10.0 * rank + 1}, DType::bf16);
  Tensor gathered = raw::empty({world * 2}, DType::bf16, device);
  comm->all_gather(mine, gathered);
  std::vector<double> all;
  for (int q = 0; q < world; ++q) all.insert(all.end(), {10.0 * q, 10.0 * q + 1});
  EXPECT_EQ(gathered.to_vector(), all);

  const int root = world - 1;
  Tensor b = on_device(std::vector<double>(4, rank == root ? 2.5 : -1.0), DType::f16);
  comm->broadcast(b, root);
  EXPECT_EQ(b.to_vector(), std::vector<double>(4, 2.5));
  comm->barrier();
}

TEST_F(DistNccl, HostAndDeviceTensorsOnOneCommunicator) {
  Tensor host = full({3}, rank + 1.0);
  comm->all_reduce(host, ReduceOp::sum);  // through MPI
  EXPECT_EQ(host.to_vector(), std::vector<double>(3, world * (world + 1) / 2.0));
  Device other = Device::parse("cuda:" + std::to_string(device.index + 1));
  Tensor elsewhere;
  if (cuda::device_count() > device.index + 1) {
    elsewhere = raw::empty({2}, DType::f32, other);
    const std::string where = "is on " + other.str(), mine = device.str();
    EXPECT_ERROR_HAS(comm->all_reduce(elsewhere, ReduceOp::sum), where.c_str(), mine.c_str());
  }
}

// Note [Collective streams]: under a StreamGuard the collective runs on the side stream;
// the compute stream waits for it before reading the result.
TEST_F(DistNccl, RunsOnTheCurrentSideStream) {
  Tensor t = on_device(std::vector<double>(1 << 16, rank + 1.0), DType::f32);
  {
    StreamGuard side(device, 1);
    cuda::stream_wait(device.index, 1, kDefaultStream);  // t is written on the compute stream
    comm->all_reduce(t, ReduceOp::sum);
  }
  cuda::stream_wait(device.index, kDefaultStream, 1);
  const std::vector<double> got = t.to_vector();
  EXPECT_EQ(got.front(), world * (world + 1) / 2.0);
  EXPECT_EQ(got.back(), world * (world + 1) / 2.0);
}

// Note [NCCL watchdog]: the stream is held by a host function for 3 s, so the collective
// queued behind it cannot finish within the 1 s timeout: the watchdog aborts the NCCL
// communicator and the next call throws, naming the collective, the rank and the timeout.
// Runs last (the aborted communicator is not used again); run it on its own.
TEST(DistNcclWatchdog, StuckCollectiveTimesOut) {
  if (!dist::built_with_nccl()) GTEST_SKIP() << "this build has no NCCL backend";
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  if (cuda::device_count() < dist::detect_launch().local_size)
    GTEST_SKIP() << "more ranks on this machine than CUDA devices";
  const Device device = dist::device_for_local_rank("cuda", dist::detect_launch());
  auto comm = dist::make_communicator(
      {.device = device, .timeout_seconds = 1, .abort_job_on_failure = false});
  Tensor t = from_vector({1, 2, 3}, {3}, {.device = device});
  const cudaStream_t stream = cuda::current_stream(device.index);
  ASSERT_EQ(
      cudaLaunchHostFunc(
          stream, [](void*) { std::this_thread::sleep_for(std::chrono::seconds(3)); }, nullptr),
      cudaSuccess);
  comm->all_reduce(t, ReduceOp::sum);  // queued behind the sleeping host function
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const std::string rank_words = "rank " + std::to_string(comm->rank());
  EXPECT_ERROR_HAS(comm->barrier(), "NCCL all_reduce", rank_words.c_str(),
                   "did not finish within 1 s", "timeout_seconds", "aborted");
  EXPECT_ERROR_HAS(comm->all_reduce(t, ReduceOp::sum), "did not finish within 1 s");
  cudaStreamSynchronize(stream);
}

}  // namespace
}  // namespace cg

#else

TEST(DistNccl, NeedsCuda) {
  GTEST_SKIP() << "a build without CUDA (CHUNKGRAD_CUDA=OFF) has no NCCL backend";
}

#endif
