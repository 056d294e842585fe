// Why this file exists: the CUDA backend's own pieces -- error macros, device queries,
// registration, the cudaMalloc segment source and the copy routine. The first group
// runs on any CUDA build (no GPU needed: it checks that "no GPU" is handled cleanly);
// the rest GTEST_SKIP() without a GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_segment_source.h"
#include "cuda/device_info.h"

namespace cg {
namespace {

cudaError_t pretend_out_of_memory() { return cudaErrorMemoryAllocation; }
cublasStatus_t pretend_bad_value() { return CUBLAS_STATUS_INVALID_VALUE; }

bool has_gpu() { return cuda::device_count() > 0; }
#define SKIP_WITHOUT_GPU() \
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason()

// ---- no GPU needed --------------------------------------------------------------

TEST(CudaCheck, CudaErrorBecomesReadableCgError) {
  EXPECT_NO_THROW(CG_CUDA_CHECK(cudaSuccess));
  try {
    CG_CUDA_CHECK(pretend_out_of_memory());
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pretend_out_of_memory()"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorMemoryAllocation"), std::string::npos) << what;
    EXPECT_NE(what.find(cudaGetErrorString(cudaErrorMemoryAllocation)), std::string::npos) << what;
    EXPECT_NE(what.find("cuda_backend_test.cpp"), std::string::npos) << what;
  }
}

TEST(CudaCheck, CublasStatusBecomesReadableCgError) {
  EXPECT_NO_THROW(CG_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
  try {
    CG_CUBLAS_CHECK(pretend_bad_value());
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pretend_bad_value()"), std::string::npos) << what;
    EXPECT_NE(what.find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda_backend_test.cpp"), std::string::npos) << what;
  }
  const cublasStatus_t all[] = {CUBLAS_STATUS_SUCCESS,          CUBLAS_STATUS_NOT_INITIALIZED,
                                CUBLAS_STATUS_ALLOC_FAILED,     CUBLAS_STATUS_INVALID_VALUE,
                                CUBLAS_STATUS_ARCH_MISMATCH,    CUBLAS_STATUS_MAPPING_ERROR,
                                CUBLAS_STATUS_EXECUTION_FAILED, CUBLAS_STATUS_INTERNAL_ERROR,
                                CUBLAS_STATUS_NOT_SUPPORTED,    CUBLAS_STATUS_LICENSE_ERROR};
  for (cublasStatus_t s : all) {
    EXPECT_EQ(std::string(cuda::cublas_status_name(s)).rfind("CUBLAS_STATUS_", 0), 0u);
    EXPECT_GT(std::strlen(cuda::cublas_status_string(s)), 0u);
  }
}

TEST(CudaDevice, CountNeverThrowsAndExplainsZero) {
  int n = -1;
  EXPECT_NO_THROW(n = cuda::device_count());
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(cuda::unavailable_reason().empty());
    EXPECT_THROW(cuda::device_properties(0), Error);
  } else {
    EXPECT_EQ(cuda::unavailable_reason(), "");
  }
  EXPECT_THROW(cuda::device_properties(n), Error);
  EXPECT_THROW(cuda::device_properties(-1), Error);
}

TEST(CudaBackend, RegisteredAtLoad) {
  DeviceBackend* b = find_backend(DeviceType::cuda);
  ASSERT_NE(b, nullptr) << "the CUDA backend did not register itself";
  EXPECT_EQ(b->type(), DeviceType::cuda);
  EXPECT_EQ(b->device_count(), cuda::device_count());
  EXPECT_EQ(cuda_available(), cuda::device_count() > 0);
  if (b->device_count() == 0) EXPECT_FALSE(b->unavailable_reason().empty());
  // It names itself and says what it has (Note [Device capabilities], core/backend.h).
  EXPECT_STREQ(b->name(), "cuda");
  EXPECT_TRUE(b->capabilities().own_memory);
  EXPECT_TRUE(b->capabilities().queued_work);
  EXPECT_EQ(b->capabilities().efficient_gemm_rows, 0);
}

TEST(CudaBackend, NoGpuGivesClearErrors) {
  if (has_gpu()) GTEST_SKIP() << "a GPU is present";
  EXPECT_THROW(backend_for(cuda_device(0)), Error);
  try {
    cuda::CudaSegmentSource source(0);
    FAIL() << "CudaSegmentSource(0) without a GPU did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(allocator_for(cuda_device(0)), Error);
}

// ---- with a GPU ---------------------------------------------------------------

TEST(CudaDevice, PropertiesAndSummary) {
  SKIP_WITHOUT_GPU();
  const cuda::DeviceProperties p = cuda::device_properties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GE(p.cc_major, 5);
  EXPECT_GT(p.total_memory, size_t{1} << 30);
  EXPECT_GT(p.multiprocessors, 0);
  EXPECT_GT(p.l2_cache_bytes, 0u);
  const std::string s = p.summary();
  EXPECT_NE(s.find(p.name), std::string::npos) << s;
  EXPECT_NE(s.find("sm_"), std::string::npos) << s;
  EXPECT_NE(s.find("cuda:0"), std::string::npos) << s;
}

TEST(CudaSegmentSource, AllocateFreeAndOutOfMemoryIsNull) {
  SKIP_WITHOUT_GPU();
  cuda::CudaSegmentSource src(0);
  EXPECT_EQ(src.device(), cuda_device(0));
  EXPECT_EQ(src.name(), "cuda:0");
  const int64_t free_before = src.free_bytes();
  EXPECT_GT(free_before, 0);
  void* p = src.allocate_segment(size_t{2} << 20);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(cudaMemset(p, 0x5a, size_t{2} << 20), cudaSuccess);
  src.free_segment(p, size_t{2} << 20);
  // Far more than any card has: nullptr, and the error must not linger.
  EXPECT_EQ(src.allocate_segment(size_t{1} << 50), nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void* q = src.allocate_segment(4096);
  ASSERT_NE(q, nullptr);
  src.free_segment(q, 4096);
  EXPECT_THROW(cuda::CudaSegmentSource(cuda::device_count()), Error);
}

TEST(CudaSegmentSource, AllocatorForCudaUsesIt) {
  SKIP_WITHOUT_GPU();
  CachingAllocator& a = allocator_for(cuda_device(0));
  EXPECT_EQ(a.device(), cuda_device(0));
  EXPECT_EQ(&a, &allocator_for(cuda_device(0)));
  const AllocatorStats before = a.stats();
  void* p = a.allocate(3000);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.stats().requested_bytes.current, before.requested_bytes.current + 3000);
  a.free(p);
  EXPECT_EQ(a.stats().requested_bytes.current, before.requested_bytes.current);
}

TEST(CudaBackend, CopyRoundTripAndChecks) {
  SKIP_WITHOUT_GPU();
  DeviceBackend& b = backend_for(cuda_device(0));
  const size_t n = 1 << 20;
  std::vector<uint8_t> host(n), back(n, 0);
  std::iota(host.begin(), host.end(), uint8_t{7});
  void *d1 = nullptr, *d2 = nullptr;
  ASSERT_EQ(cudaMalloc(&d1, n), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d2, n), cudaSuccess);
  b.copy(d1, cuda_device(0), host.data(), kCPU, n);   // H2D
  b.copy(d2, cuda_device(0), d1, cuda_device(0), n);  // D2D
  b.copy(back.data(), kCPU, d2, cuda_device(0), n);   // D2H
  EXPECT_EQ(back, host);
  std::vector<uint8_t> host2(n, 0);
  b.copy(host2.data(), kCPU, host.data(), kCPU, n);  // H2H
  EXPECT_EQ(host2, host);
  EXPECT_NO_THROW(b.copy(nullptr, kCPU, nullptr, cuda_device(0), 0));  // nothing to do
  EXPECT_THROW(b.copy(nullptr, kCPU, d1, cuda_device(0), n), Error);
  EXPECT_THROW(b.copy(host.data(), cuda_device(0), d1, cuda_device(0), n),
               Error);                                          // host as device
  EXPECT_THROW(b.copy(d1, kCPU, host.data(), kCPU, n), Error);  // device as host
  EXPECT_THROW(b.copy(d1, cuda_device(cuda::device_count()), host.data(), kCPU, n), Error);
  EXPECT_NO_THROW(b.synchronize(0));
  EXPECT_THROW(b.synchronize(cuda::device_count()), Error);
  cudaFree(d1);
  cudaFree(d2);
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
