// Why this file exists: cuda/blas_loader.cpp opens cuBLAS and cuBLASLt at the first call
// (Note [cuBLAS on first use]) from the paths CMake found, and by soname when those files
// are gone (the toolkit updated in place since the build). This program is that file built
// against paths that do not exist (tests/CMakeLists.txt), so each entry point must reach
// the real library through its soname: it calls cublasLtCreate and cublasCreate_v2 and
// exits 0 when both return a status (without a GPU, an error status is fine: the function
// was found), 1 when the loader throws. CTest: blas_loader_fallback (tests/CMakeLists.txt;
// in a folder of its own, apart from chunkgrad_tests' sources).
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdio>
#include <exception>

int main() {
  try {
    cublasLtHandle_t lt = nullptr;
    const cublasStatus_t lt_status = cublasLtCreate(&lt);
    cublasHandle_t blas = nullptr;
    const cublasStatus_t blas_status = cublasCreate_v2(&blas);
    std::printf("blas_loader_fallback: cublasLtCreate -> %d, cublasCreate_v2 -> %d\n",
                static_cast<int>(lt_status), static_cast<int>(blas_status));
    return 0;
  } catch (const std::exception& e) {
    std::printf("blas_loader_fallback: %s\n", e.what());
    return 1;
  }
}
