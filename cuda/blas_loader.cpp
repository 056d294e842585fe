// Why this file exists: cuBLAS and cuBLASLt are opened on the CUDA backend's first GEMM,
// not linked (Note [cuBLAS on first use]). It defines, inside libchunkgrad only, the 15
// cuBLAS entry points the library calls; each opens the libraries once and forwards to the
// real function.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <unistd.h>

#include <mutex>

#include "core/error.h"

// Note [cuBLAS on first use]: libcublasLt.so.13 is 541 MB, and loading it took 0.50 s and
// 212 MB of resident memory in every process that linked it (an empty main linked against
// it alone, on the CI machine; cuDNN, NCCL and cudart took 0.01 s each), whether or not the
// process ever touched a GPU: every CPU run of `chunkgrad` and every one of the ~970 test
// processes ctest starts. So libchunkgrad does not link cuBLAS. This file defines the
// entry points the library calls, hidden (so that the real libraries, once open, never
// resolve their own calls to these), and the first
// call opens libcublasLt, then libcublas (which needs it, and finds it already open by
// its soname), from the paths CMake found (CG_CUBLASLT_LIBRARY, CG_CUBLAS_LIBRARY), or
// else both by soname (libcublasLt.so.13: what a link would have recorded, found the way
// the loader finds it), and looks the real function up. A missing library or symbol is a
// cg::Error naming it. cuDNN (and NCCL, when built) stay linked: they load in 0.01 s.

namespace {

#define CG_BLAS_STR2(x) #x
#define CG_BLAS_STR(x) CG_BLAS_STR2(x)

struct Libraries {
  void* lt = nullptr;
  void* blas = nullptr;
  const char* lt_name = nullptr;  // what was opened: a path, or a soname
  const char* blas_name = nullptr;
};

void* open_library(const char* name, const char* what) {
  void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  const char* e = h == nullptr ? dlerror() : nullptr;
  CG_CHECK(h != nullptr, "cuda: cannot open ", what, " (", e != nullptr ? e : name,
           "); reinstall the CUDA toolkit's libraries or rebuild against the ones installed");
  return h;
}

// Both from the paths CMake found when both files are there; otherwise both by the sonames
// a link would have recorded, found the way the loader finds them (the toolkit updated in
// place since the build): never one of each, which could pair two versions.
const Libraries& libraries() {
  static std::once_flag once;
  static Libraries libs;
  std::call_once(once, [] {
    const bool built =
        access(CG_CUBLASLT_LIBRARY, R_OK) == 0 && access(CG_CUBLAS_LIBRARY, R_OK) == 0;
    libs.lt_name = built ? CG_CUBLASLT_LIBRARY : "libcublasLt.so." CG_BLAS_STR(CUBLAS_VER_MAJOR);
    libs.blas_name = built ? CG_CUBLAS_LIBRARY : "libcublas.so." CG_BLAS_STR(CUBLAS_VER_MAJOR);
    libs.lt = open_library(libs.lt_name, "cuBLASLt");
    libs.blas = open_library(libs.blas_name, "cuBLAS");
  });
  return libs;
}

#undef CG_BLAS_STR
#undef CG_BLAS_STR2

template <typename F>
F real(bool lt, const char* name) {
  const Libraries& libs = libraries();
  void* p = dlsym(lt ? libs.lt : libs.blas, name);
  CG_CHECK(p != nullptr, "cuda: ", lt ? libs.lt_name : libs.blas_name, " has no symbol ", name,
           "; rebuild against the CUDA toolkit that is installed");
  return reinterpret_cast<F>(p);
}

}  // namespace

// Each entry point: its real function, looked up once, called with the same arguments;
// hidden, so that libchunkgrad does not export them and the real libraries, once open,
// never resolve their own calls to these (only the shims: a file-wide -fvisibility=hidden
// also hid the inline cg::Error's vtable and typeinfo emitted here, for the whole library).
#pragma GCC visibility push(hidden)
#define CG_CUBLAS_FORWARD(lt, name, params, args)      \
  extern "C" cublasStatus_t CUBLASWINAPI name params { \
    using Real = cublasStatus_t(CUBLASWINAPI*) params; \
    static const Real fn = real<Real>(lt, #name);      \
    return fn args;                                    \
  }

CG_CUBLAS_FORWARD(false, cublasCreate_v2, (cublasHandle_t * handle), (handle))
CG_CUBLAS_FORWARD(false, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream),
                  (handle, stream))
CG_CUBLAS_FORWARD(false, cublasSetWorkspace_v2,
                  (cublasHandle_t handle, void* workspace, size_t bytes),
                  (handle, workspace, bytes))
CG_CUBLAS_FORWARD(false, cublasGemmEx,
                  (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                   int n, int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                   const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                   cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                   cublasGemmAlgo_t algo),
                  (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
                   Ctype, ldc, computeType, algo))
CG_CUBLAS_FORWARD(false, cublasGemmGroupedBatchedEx,
                  (cublasHandle_t handle, const cublasOperation_t transa_array[],
                   const cublasOperation_t transb_array[], const int m_array[], const int n_array[],
                   const int k_array[], const void* alpha_array, const void* const Aarray[],
                   cudaDataType_t Atype, const int lda_array[], const void* const Barray[],
                   cudaDataType_t Btype, const int ldb_array[], const void* beta_array,
                   void* const Carray[], cudaDataType_t Ctype, const int ldc_array[],
                   int group_count, const int group_size[], cublasComputeType_t computeType),
                  (handle, transa_array, transb_array, m_array, n_array, k_array, alpha_array,
                   Aarray, Atype, lda_array, Barray, Btype, ldb_array, beta_array, Carray, Ctype,
                   ldc_array, group_count, group_size, computeType))

CG_CUBLAS_FORWARD(true, cublasLtCreate, (cublasLtHandle_t * handle), (handle))
CG_CUBLAS_FORWARD(true, cublasLtMatmul,
                  (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                   const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                   cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                   cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                   const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream),
                  (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                   workspace, workspace_bytes, stream))
CG_CUBLAS_FORWARD(true, cublasLtMatmulAlgoGetHeuristic,
                  (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                   cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
                   cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference,
                   int requested, cublasLtMatmulHeuristicResult_t results[], int* returned),
                  (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference, requested, results,
                   returned))
CG_CUBLAS_FORWARD(true, cublasLtMatmulDescCreate,
                  (cublasLtMatmulDesc_t * desc, cublasComputeType_t computeType,
                   cudaDataType_t scaleType),
                  (desc, computeType, scaleType))
CG_CUBLAS_FORWARD(true, cublasLtMatmulDescSetAttribute,
                  (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                   size_t bytes),
                  (desc, attr, buf, bytes))
CG_CUBLAS_FORWARD(true, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
CG_CUBLAS_FORWARD(true, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
CG_CUBLAS_FORWARD(true, cublasLtMatmulPreferenceSetAttribute,
                  (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                   const void* buf, size_t bytes),
                  (pref, attr, buf, bytes))
CG_CUBLAS_FORWARD(true, cublasLtMatrixLayoutCreate,
                  (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols,
                   int64_t ld),
                  (layout, type, rows, cols, ld))
CG_CUBLAS_FORWARD(true, cublasLtMatrixLayoutSetAttribute,
                  (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                   const void* buf, size_t bytes),
                  (layout, attr, buf, bytes))
#pragma GCC visibility pop
