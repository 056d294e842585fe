// Why this file exists: see gemm.h (and its Note [GEMM blocking]). Shapes per tile of
// the output, rows [m0, m1) x columns [n0, n1), walked in sub-tiles when something converts:
//   A sub-tile [mt, kt] of a     (its own memory, or converted into a_buf)
//   B sub-tile [kt, nt] of b     (its own memory, or converted into b_buf)
//   C sub-tile [mt, nt] of out   (its own memory, or an accumulator o_buf stored at the end)
// Each product is one single-threaded OpenBLAS call (cblas_sgemm / cblas_dgemm). The tiles
// and sub-tiles depend on the shapes only, never on the thread count, so every BLAS call
// is the same whichever thread makes it, and so are the bits it writes.
#include "cpu/gemm.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <string>

#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"
#include "cpu/thread_pool.h"
#include "ops/kernel_shapes.h"

namespace cg::cpu {

namespace {

// A matrix as the BLAS reads it: element (i, j) at p[i * ld + j] (row major) or p[i + j * ld].
template <typename C>
struct View {
  C* p;
  int64_t ld;
  bool row_major;
};

// How x is read in place, if it can be: a unit stride in one dim and a leading dimension
// that does not overlap rows (or columns). Size-1 dims may carry any stride.
// The rule is ops/kernel_shapes.h's gemm_layout, shared with the CUDA GEMM.
bool in_place_view(const GemmMatrix& x, int64_t& ld, bool& row_major) {
  const GemmLayout l = gemm_layout(x.rows, x.cols, x.row_stride, x.col_stride);
  ld = l.ld;
  row_major = l.row_major;
  return l.in_place;
}

// The BLAS takes int leading dimensions: a wider one is converted like any other layout.
bool readable_in_place(const GemmMatrix& x, DType compute) {
  int64_t ld;
  bool row_major;
  return x.dtype == compute && in_place_view(x, ld, row_major) &&
         ld <= std::numeric_limits<int>::max();
}

DType compute_dtype(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out) {
  const bool f64 = a.dtype == DType::f64 && b.dtype == DType::f64 && out.dtype == DType::f64;
  return f64 ? DType::f64 : DType::f32;
}

struct Plan {
  DType compute;
  bool a_conv, b_conv, o_conv;  // walked in converted sub-tiles
  // Tiles form a grid_m x grid_n grid over out, from the shapes alone; its cuts fall on
  // multiples of kGemmCut (Note [GEMM blocking]); the last row and column take the rest.
  int64_t units_m, units_n;  // whole kGemmCut units along M and N (>= 1)
  int64_t grid_m, grid_n;
  int64_t tiles;
  int64_t workers;                    // min(tiles, threads): scratch slots
  int64_t a_elems, b_elems, o_elems;  // scratch elements per worker
};

// The grid with the smallest largest tile (in kGemmCut x kGemmCut units) using at most
// `max_tiles` tiles, none thinner than kGemmMinTileUnits units where the dim allows;
// among equals, the one whose tiles are least thin (Note [GEMM blocking]).
void choose_grid(Plan& p, int64_t max_tiles) {
  p.grid_m = p.grid_n = 1;
  int64_t best_area = p.units_m * p.units_n, best_side = std::min(p.units_m, p.units_n);
  // At most one tile per kGemmMinTileUnits units of a dim (a dim shorter than that is one).
  const int64_t most_m = std::max<int64_t>(p.units_m / kGemmMinTileUnits, 1),
                most_n = std::max<int64_t>(p.units_n / kGemmMinTileUnits, 1);
  for (int64_t gm = 1; gm <= std::min(max_tiles, most_m); ++gm) {
    const int64_t gn = std::min(max_tiles / gm, most_n);
    const int64_t um = (p.units_m + gm - 1) / gm, un = (p.units_n + gn - 1) / gn;
    const int64_t area = um * un, side = std::min(um, un);
    if (area < best_area || (area == best_area && side > best_side)) {
      best_area = area;
      best_side = side;
      p.grid_m = gm;
      p.grid_n = gn;
    }
  }
}

Plan plan_of(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out) {
  const int64_t M = out.rows, N = out.cols, K = a.cols;
  Plan p;
  p.compute = compute_dtype(a, b, out);
  p.a_conv = !readable_in_place(a, p.compute);
  p.b_conv = !readable_in_place(b, p.compute);
  p.o_conv = !readable_in_place(out, p.compute);
  p.units_m = std::max<int64_t>(M / kGemmCut, 1);
  p.units_n = std::max<int64_t>(N / kGemmCut, 1);
  // Shapes only: as many tiles as the work pays for, at most kGemmMaxTiles.
  const double work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const double tiles = std::clamp(work / static_cast<double>(kGemmTileWork), 1.0,
                                  static_cast<double>(kGemmMaxTiles));
  choose_grid(p, static_cast<int64_t>(tiles));
  p.tiles = p.grid_m * p.grid_n;
  p.workers = std::min<int64_t>(p.tiles, num_threads());
  const int64_t tm = std::min(kGemmTileRows, M), tn = std::min(kGemmTileRows, N),
                tk = std::min(kGemmTileRows, K);
  p.a_elems = p.a_conv ? tm * tk : 0;
  p.b_elems = p.b_conv ? tk * tn : 0;
  p.o_elems = p.o_conv ? tm * tn : 0;
  return p;
}

int64_t scratch_elements(const Plan& p, const GemmMatrix& a) {
  if (a.cols == 0) return 0;  // K = 0: out is only scaled
  return p.workers * (p.a_elems + p.b_elems + p.o_elems);
}

// ---- converting tiles -------------------------------------------------------------------

template <typename C, typename S>
void convert_line(const S* src, int64_t stride, int64_t count, C* dst) {
  if (stride == 1) {
    for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<C>(load(src + i));
  } else {
    for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<C>(load(src + i * stride));
  }
}

// Rows [r0, r0 + nr) x columns [c0, c0 + nc) of x as a dense compute-type tile in dst,
// laid out in x's own order (so the copy reads x's memory in order), or row major when
// force_row_major.
template <typename C>
View<C> convert_tile(const GemmMatrix& x, int64_t r0, int64_t nr, int64_t c0, int64_t nc, C* dst,
                     bool force_row_major = false) {
  const bool row_major = force_row_major || !(x.row_stride == 1 && x.col_stride != 1);
  dispatch_floating(x.dtype, "gemm", [&]<typename S>() {
    const S* base = static_cast<const S*>(x.data) + r0 * x.row_stride + c0 * x.col_stride;
    if (row_major) {
      for (int64_t i = 0; i < nr; ++i)
        convert_line(base + i * x.row_stride, x.col_stride, nc, dst + i * nc);
    } else {
      for (int64_t j = 0; j < nc; ++j)
        convert_line(base + j * x.col_stride, x.row_stride, nr, dst + j * nr);
    }
  });
  return {dst, row_major ? nc : nr, row_major};
}

// out tile = acc (row-major [nr, nc]), rounded to out's dtype.
template <typename C>
void store_tile(const GemmMatrix& out, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                const C* acc) {
  dispatch_floating(out.dtype, "gemm", [&]<typename S>() {
    S* base = static_cast<S*>(out.data) + r0 * out.row_stride + c0 * out.col_stride;
    for (int64_t i = 0; i < nr; ++i) {
      S* row = base + i * out.row_stride;
      const C* a = acc + i * nc;
      for (int64_t j = 0; j < nc; ++j)
        store(row + j * out.col_stride, static_cast<compute_t<S>>(a[j]));
    }
  });
}

// ---- the BLAS ---------------------------------------------------------------------------

// Note [BLAS threads]: OpenBLAS runs on the calling thread only (the pool splits the work).
// Its pthread build starts (cores - 1) workers when the library loads, and each spins for
// a while before it sleeps: on the 16-core host that was 1.9 s of CPU in the first 0.2 s of
// every process, a busy neighbour to whatever shares the machine. openblas_set_num_threads(1)
// comes too late for that (the workers already exist). So the library is not linked: it is
// opened here, at the first product, with OPENBLAS_NUM_THREADS=1 in the environment for the
// duration of dlopen (its constructor reads it and starts no worker), and the caller's value
// put back afterwards. Its OpenMP build would reset the count from omp_get_max_threads() on
// every call from a pool thread and spin between calls: refused. The path is the library
// CMake found (CG_OPENBLAS_LIBRARY), so the system's libopenblas alternative does not matter.
struct Blas {
  decltype(&cblas_sgemm) sgemm;
  decltype(&cblas_dgemm) dgemm;
  decltype(&cblas_sgemv) sgemv;
  decltype(&cblas_dgemv) dgemv;
  int (*get_num_threads)();
  int (*get_parallel)();
  char* (*get_config)();
  char* (*get_corename)();
};

template <typename F>
F blas_symbol(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  CG_CHECK(p != nullptr, "cpu::gemm: ", CG_OPENBLAS_LIBRARY, " has no symbol ", name,
           "; reinstall libopenblas0-pthread");
  return reinterpret_cast<F>(p);
}

// Sets `name` to `value` until it goes out of scope, then puts the old value (or its
// absence) back. `only_if_unset`: a value the user gave is kept.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value, bool only_if_unset = false) : name_(name) {
    const char* before = std::getenv(name);
    if (before) saved_ = before;
    if (value != nullptr && !(only_if_unset && before)) {
      setenv(name, value, 1);
      changed_ = true;
    }
  }
  ~ScopedEnv() {
    if (!changed_) return;
    if (saved_) {
      setenv(name_, saved_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> saved_;
  bool changed_ = false;
};

// Note [BLAS core type]: OpenBLAS picks its kernels from the CPU's model number, which
// virtual machines often hide: the H200 host's 16 cores report "Intel(R) Xeon(R) Processor"
// and got the SSE3 "Prescott" kernels, 4.7x slower than PyTorch's GEMM on the same cores.
// Unless the user set OPENBLAS_CORETYPE, the core is named from the instruction sets the
// CPU reports: AVX-512 (F, BW, VL, DQ) -> SkylakeX, AVX2 + FMA -> Haswell, else OpenBLAS's
// own choice.
const char* blas_core_from_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

const Blas& blas() {
  static std::once_flag once;
  static Blas b{};
  std::call_once(once, [] {
    void* lib = nullptr;
    {
      ScopedEnv threads("OPENBLAS_NUM_THREADS", "1");
      ScopedEnv core("OPENBLAS_CORETYPE", blas_core_from_isa(), /*only_if_unset=*/true);
      lib = dlopen(CG_OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    }
    CG_CHECK(lib != nullptr, "cpu::gemm: cannot open OpenBLAS (", dlerror(),
             "); install libopenblas0-pthread (tools/deps.sh does) or rebuild against the "
             "OpenBLAS that is installed");
    b.sgemm = blas_symbol<decltype(b.sgemm)>(lib, "cblas_sgemm");
    b.dgemm = blas_symbol<decltype(b.dgemm)>(lib, "cblas_dgemm");
    b.sgemv = blas_symbol<decltype(b.sgemv)>(lib, "cblas_sgemv");
    b.dgemv = blas_symbol<decltype(b.dgemv)>(lib, "cblas_dgemv");
    b.get_num_threads = blas_symbol<decltype(b.get_num_threads)>(lib, "openblas_get_num_threads");
    b.get_parallel = blas_symbol<decltype(b.get_parallel)>(lib, "openblas_get_parallel");
    b.get_config = blas_symbol<decltype(b.get_config)>(lib, "openblas_get_config");
    b.get_corename = blas_symbol<decltype(b.get_corename)>(lib, "openblas_get_corename");
    CG_CHECK(b.get_parallel() != 2, "cpu::gemm: the loaded OpenBLAS is its OpenMP build (",
             b.get_config(),
             "); chunkgrad needs the pthread one: apt-get install libopenblas0-pthread and "
             "rebuild (CMake finds its openblas-pthread directory)");
    auto set_threads = blas_symbol<void (*)(int)>(lib, "openblas_set_num_threads");
    set_threads(1);  // already 1 from the environment; also when the library was loaded before
  });
  return b;
}

void use_blas_on_the_calling_thread() { (void)blas(); }

int blas_int(int64_t v) { return static_cast<int>(std::max<int64_t>(v, 1)); }

void blas_gemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k,
               float alpha, const float* a, int lda, const float* b, int ldb, float beta, float* c,
               int ldc) {
  blas().sgemm(o, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k,
               double alpha, const double* a, int lda, const double* b, int ldb, double beta,
               double* c, int ldc) {
  blas().dgemm(o, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void blas_gemv(CBLAS_ORDER o, CBLAS_TRANSPOSE t, int m, int n, float alpha, const float* a, int lda,
               const float* x, int incx, float beta, float* y, int incy) {
  blas().sgemv(o, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
void blas_gemv(CBLAS_ORDER o, CBLAS_TRANSPOSE t, int m, int n, double alpha, const double* a,
               int lda, const double* x, int incx, double beta, double* y, int incy) {
  blas().dgemv(o, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

// c = alpha * a b + beta * c; a [m, k], b [k, n], c [m, n]. In c's order, an operand
// stored the other way round is the transpose of what it stores (no copy). One row (or
// one column) of out is a matrix-vector product: OpenBLAS's GEMM would pack all of the
// matrix for it, its GEMV streams it once (a decoding step's one token).
template <typename C>
void product(View<C> a, View<C> b, View<C> c, int64_t m, int64_t n, int64_t k, C alpha, C beta) {
  // The stride between consecutive elements of a row (along_rows) or a column of x.
  auto step = [](View<C> x, bool along_row) {
    return blas_int(x.row_major == along_row ? 1 : x.ld);
  };
  if (m == 1) {  // out row = a row @ b: b^T x, b in its own order
    blas_gemv(b.row_major ? CblasRowMajor : CblasColMajor, CblasTrans, blas_int(k), blas_int(n),
              alpha, b.p, blas_int(b.ld), a.p, step(a, true), beta, c.p, step(c, true));
    return;
  }
  if (n == 1) {  // out column = a @ b column
    blas_gemv(a.row_major ? CblasRowMajor : CblasColMajor, CblasNoTrans, blas_int(m), blas_int(k),
              alpha, a.p, blas_int(a.ld), b.p, step(b, false), beta, c.p, step(c, false));
    return;
  }
  const CBLAS_ORDER order = c.row_major ? CblasRowMajor : CblasColMajor;
  const CBLAS_TRANSPOSE ta = a.row_major == c.row_major ? CblasNoTrans : CblasTrans;
  const CBLAS_TRANSPOSE tb = b.row_major == c.row_major ? CblasNoTrans : CblasTrans;
  blas_gemm(order, ta, tb, blas_int(m), blas_int(n), blas_int(k), alpha, a.p, blas_int(a.ld), b.p,
            blas_int(b.ld), beta, c.p, blas_int(c.ld));
}

// Element (r, c) of an in-place matrix.
template <typename C>
View<C> in_place_at(const GemmMatrix& x, int64_t r, int64_t c) {
  int64_t ld = 0;
  bool row_major = true;
  in_place_view(x, ld, row_major);
  C* p = static_cast<C*>(x.data) + r * x.row_stride + c * x.col_stride;
  return {p, ld, row_major};
}

// One tile: out[m0:m1, n0:n1] = alpha a[m0:m1, :] b[:, n0:n1] + beta out[m0:m1, n0:n1].
template <typename C>
void run_tile(const Plan& p, const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out,
              C alpha, C beta, int64_t m0, int64_t m1, int64_t n0, int64_t n1, C* scratch) {
  const int64_t K = a.cols, pm = m1 - m0, pn = n1 - n0;
  const int64_t mt = p.a_conv || p.o_conv ? std::min(kGemmTileRows, pm) : pm;
  const int64_t nt = p.b_conv || p.o_conv ? std::min(kGemmTileRows, pn) : pn;
  const int64_t kt = p.a_conv || p.b_conv ? std::min(kGemmTileRows, K) : K;
  C* a_buf = scratch;
  C* b_buf = a_buf + p.a_elems;
  C* o_buf = b_buf + p.b_elems;
  for (int64_t i0 = m0; i0 < m1; i0 += mt) {
    const int64_t m = std::min(mt, m1 - i0);
    for (int64_t j0 = n0; j0 < n1; j0 += nt) {
      const int64_t n = std::min(nt, n1 - j0);
      View<C> c;
      C first_beta = beta;  // the first k sub-tile scales out; the rest accumulate
      if (p.o_conv) {
        c = {o_buf, n, true};
        if (beta != C(0)) {  // acc = beta * out
          convert_tile<C>(out, i0, m, j0, n, o_buf, /*row_major=*/true);
          for (int64_t e = 0; e < m * n; ++e) o_buf[e] *= beta;
          first_beta = C(1);
        }
      } else {
        c = in_place_at<C>(out, i0, j0);
      }
      for (int64_t k0 = 0; k0 < K; k0 += kt) {
        const int64_t k = std::min(kt, K - k0);
        const View<C> at =
            p.a_conv ? convert_tile<C>(a, i0, m, k0, k, a_buf) : in_place_at<C>(a, i0, k0);
        const View<C> bt =
            p.b_conv ? convert_tile<C>(b, k0, k, j0, n, b_buf) : in_place_at<C>(b, k0, j0);
        product<C>(at, bt, c, m, n, k, alpha, k0 == 0 ? first_beta : C(1));
      }
      if (p.o_conv) store_tile<C>(out, i0, m, j0, n, o_buf);
    }
  }
}

// K = 0: out = beta * out (0 when beta is 0, whatever out held).
void scale_output(const GemmMatrix& out, double beta) {
  dispatch_floating(out.dtype, "gemm", [&]<typename S>() {
    using C = compute_t<S>;
    S* base = static_cast<S*>(out.data);
    for (int64_t i = 0; i < out.rows; ++i) {
      for (int64_t j = 0; j < out.cols; ++j) {
        S* e = base + i * out.row_stride + j * out.col_stride;
        store(e, beta == 0.0 ? C(0) : static_cast<C>(beta * static_cast<double>(load(e))));
      }
    }
  });
}

template <typename C>
void run(const Plan& p, const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out,
         double alpha, double beta, C* scratch) {
  use_blas_on_the_calling_thread();
  const int64_t M = out.rows, N = out.cols;
  const int64_t per_worker = p.a_elems + p.b_elems + p.o_elems;
  // Cut i of `grid` tiles over `units` units of a dim of `size` elements.
  auto cut = [](int64_t i, int64_t grid, int64_t units, int64_t size) {
    return i == grid ? size : units * i / grid * kGemmCut;
  };
  // Contiguous runs of tiles per thread, row after row of the grid: a thread's tiles
  // mostly share their rows of a.
  parallel_for(p.tiles, [&](int64_t begin, int64_t end, int worker) {
    for (int64_t tile = begin; tile < end; ++tile) {
      const int64_t ti = tile / p.grid_n, tj = tile % p.grid_n;
      const int64_t m0 = cut(ti, p.grid_m, p.units_m, M), m1 = cut(ti + 1, p.grid_m, p.units_m, M);
      const int64_t n0 = cut(tj, p.grid_n, p.units_n, N), n1 = cut(tj + 1, p.grid_n, p.units_n, N);
      run_tile<C>(p, a, b, out, static_cast<C>(alpha), static_cast<C>(beta), m0, m1, n0, n1,
                  scratch + worker * per_worker);
    }
  });
}

}  // namespace

std::string blas_description() {
  return std::string(blas().get_config()) + ", kernels " + blas().get_corename();
}

int blas_threads() { return blas().get_num_threads(); }

GemmMatrix gemm_matrix(const Tensor& t) {
  return {t.data_ptr(), t.dtype(), t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

bool gemm_in_place(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out) {
  const DType cd = compute_dtype(a, b, out);
  return readable_in_place(a, cd) && readable_in_place(b, cd) && readable_in_place(out, cd);
}

size_t gemm_scratch_bytes(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out) {
  if (out.rows == 0 || out.cols == 0) return 0;
  const Plan p = plan_of(a, b, out);
  const size_t bytes = static_cast<size_t>(scratch_elements(p, a)) * element_size(p.compute);
  // The caching allocator's block sizes (Note [Sizes], core/caching_allocator.h): 512 B
  // multiples, and 2 MiB multiples from 10 MiB on (such a request is a segment of its own).
  if (bytes >= (size_t{10} << 20))
    return (bytes + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
  return (bytes + 511) / 512 * 512;
}

void gemm(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out, double alpha,
          double beta) {
  if (out.rows == 0 || out.cols == 0) return;
  if (a.cols == 0) {
    scale_output(out, beta);
    return;
  }
  constexpr int64_t kBlasMax = std::numeric_limits<int>::max();
  CG_CHECK(out.rows <= kBlasMax && out.cols <= kBlasMax && a.cols <= kBlasMax, "cpu::gemm: [",
           out.rows, ", ", a.cols, "] @ [", a.cols, ", ", out.cols,
           "] has a dim above 2^31 - 1, the most the BLAS takes; split the product");
  const Plan p = plan_of(a, b, out);
  const int64_t elements = scratch_elements(p, a);
  const Tensor scratch = elements > 0 ? raw::empty({elements}, p.compute, kCPU) : Tensor();
  if (p.compute == DType::f64) {
    run<double>(p, a, b, out, alpha, beta, elements > 0 ? scratch.data<double>() : nullptr);
  } else {
    run<float>(p, a, b, out, alpha, beta, elements > 0 ? scratch.data<float>() : nullptr);
  }
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  CG_CHECK(a.defined() && b.defined() && out.defined(),
           "gemm: a, b and out must be defined tensors");
  CG_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2, "gemm: a, b and out must be 2-D, got ",
           a.dim(), "-d, ", b.dim(), "-d and ", out.dim(), "-d");
  CG_CHECK(a.size(1) == b.size(0) && out.size(0) == a.size(0) && out.size(1) == b.size(1),
           "gemm: shapes do not chain: a [", a.size(0), ", ", a.size(1), "] @ b [", b.size(0), ", ",
           b.size(1), "] into out [", out.size(0), ", ", out.size(1), "]");
  CG_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()) && is_floating(out.dtype()),
           "gemm: a, b and out must be floating tensors, got ", dtype_name(a.dtype()), ", ",
           dtype_name(b.dtype()), " and ", dtype_name(out.dtype()));
  CG_CHECK(a.device() == b.device() && a.device() == out.device(),
           "gemm: a, b and out must be on one device (host-addressable memory)");
  gemm(gemm_matrix(a), gemm_matrix(b), gemm_matrix(out), alpha, beta);
}

size_t gemm_scratch_bytes(const Tensor& a, const Tensor& b, const Tensor& out) {
  return gemm_scratch_bytes(gemm_matrix(a), gemm_matrix(b), gemm_matrix(out));
}

// The CPU table's entries: cpu::gemm itself, and its scratch bound by shape only.
void CpuKernels::gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
                      double beta) {
  cpu::gemm(a, b, out, alpha, beta);
}

size_t CpuKernels::gemm_scratch_bytes(const GemmDesc& d) const {
  // Shapes only: a dense operand as row major, any other with no unit stride at all.
  auto matrix = [](DType dtype, int64_t rows, int64_t cols, bool dense) {
    return dense ? GemmMatrix{nullptr, dtype, rows, cols, std::max<int64_t>(cols, 1), 1}
                 : GemmMatrix{nullptr, dtype, rows, cols, 2 * std::max<int64_t>(cols, 1), 2};
  };
  return cpu::gemm_scratch_bytes(matrix(d.a, d.m, d.k, d.a_dense), matrix(d.b, d.k, d.n, d.b_dense),
                                 matrix(d.out, d.m, d.n, d.out_dense));
}

}  // namespace cg::cpu
