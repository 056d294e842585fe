// Why this file exists: host memory as a DeviceBackend -- byte copies are a memcpy,
// segments come from the host segment source, and the data primitives of Note [Device
// primitives] (core/backend.h) are the optimised host loops every CPU tensor is
// filled, copied, converted and accumulated with.
//
// Note [Host copy]: a loop nest is simplified first (Note [Loop nest], core/loop_nest.h),
// so a contiguous copy (or a copy of a broadcast row) becomes one flat loop. Contiguous
// same-dtype copies are a memcpy; contiguous conversions (e.g. f32 <-> bf16) are one
// tight loop the compiler can vectorise; a copy whose source runs along the
// second-to-last dim and destination along the last (contiguous() of a transpose) walks
// square tiles.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/backend.h"
#include "core/dtype_dispatch.h"
#include "core/loop_nest.h"
#include "core/philox.h"

namespace cg {

int uniform_bits(DType dtype) {
  switch (dtype) {
    case DType::f64: return 53;
    case DType::f32: return 24;
    case DType::f16: return 11;
    case DType::bf16: return 8;
    default: CG_FAIL("uniform_bits: dtype ", dtype_name(dtype), " is not floating");
  }
}

namespace {

using Dims = DeviceBackend::Dims;

// Calls row(at, n, step, first) for every innermost row of the nest: `at` holds each
// operand's element offset of the row's first element, `step` each operand's stride
// along the row, `first` the row-major number of that element.
template <size_t N, typename Row>
void for_each_row(const LoopNest<N>& nest, Row&& row) {
  const size_t inner = nest.dims() - 1;
  const int64_t n = nest.sizes[inner];
  int64_t rows = 1;
  for (size_t k = 0; k < inner; ++k) rows *= nest.sizes[k];
  std::array<int64_t, N> at{}, step{};
  for (size_t j = 0; j < N; ++j) step[j] = nest.strides[j][inner];
  std::vector<int64_t> index(inner, 0);
  for (int64_t r = 0; r < rows; ++r) {
    row(at, n, step, r * n);
    for (size_t k = inner; k-- > 0;) {  // advance the odometer
      for (size_t j = 0; j < N; ++j) at[j] += nest.strides[j][k];
      if (++index[k] < nest.sizes[k]) break;
      for (size_t j = 0; j < N; ++j) at[j] -= nest.strides[j][k] * nest.sizes[k];
      index[k] = 0;
    }
  }
}

// Calls f(TypeTag<T>{}) for a floating dtype; a clear error for any other.
template <typename F>
void visit_floating(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::f64: return f(TypeTag<double>{});
    case DType::f16: return f(TypeTag<f16>{});
    case DType::bf16: return f(TypeTag<bf16>{});
    default: CG_FAIL(what, ": dtype ", dtype_name(dtype), " is not floating (f32, f64, f16, bf16)");
  }
}

// ---- copy ----------------------------------------------------------------------------

// dst[i] = cast(src[i]) over n contiguous elements.
template <typename D, typename S>
void convert_contiguous(D* dst, const S* src, int64_t n) {
  if constexpr (std::is_same_v<D, S>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(D));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = cast_element<D>(src[i]);
  }
}

// One row: n elements, dst stride ds, src stride ss.
template <typename D, typename S>
void copy_row(D* d, const S* s, int64_t n, int64_t ds, int64_t ss) {
  if (ds == 1 && ss == 1) {
    convert_contiguous(d, s, n);
  } else if (ss == 0) {
    const D v = cast_element<D>(s[0]);
    for (int64_t i = 0; i < n; ++i) d[i * ds] = v;
  } else {
    for (int64_t i = 0; i < n; ++i) d[i * ds] = cast_element<D>(s[i * ss]);
  }
}

// A transposed 2-D block: d[r * d_row + c] = s[r + c * s_col]. Walking it in square tiles
// keeps both sides' cache lines in use (a plain row loop reads one element per line).
template <typename D, typename S>
void copy_transposed(D* d, const S* s, int64_t rows, int64_t cols, int64_t d_row, int64_t s_col) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) d[r * d_row + c] = cast_element<D>(s[r + c * s_col]);
      }
    }
  }
}

// The general loop: per step of the outer dims, either one strided row or (when the
// source runs along the second-to-last dim and dst along the last) a tiled 2-D block.
template <typename D, typename S>
void strided_copy(D* dst, const S* src, const LoopNest<2>& nest) {
  const size_t nd = nest.dims();
  const Dims& ds = nest.strides[0];
  const Dims& ss = nest.strides[1];
  const bool transposed = nd >= 2 && ds[nd - 1] == 1 && ss[nd - 2] == 1 && ss[nd - 1] > 1;
  if (!transposed) {
    for_each_row(nest, [&](const auto& at, int64_t n, const auto& step, int64_t) {
      copy_row(dst + at[0], src + at[1], n, step[0], step[1]);
    });
    return;
  }
  // Walk the dims outside the 2-D block with a nest that has the block as its last dim.
  LoopNest<2> outer;
  outer.sizes.assign(nest.sizes.begin(), nest.sizes.end() - 2);
  outer.sizes.push_back(1);
  for (size_t j = 0; j < 2; ++j) {
    outer.strides[j].assign(nest.strides[j].begin(), nest.strides[j].end() - 2);
    outer.strides[j].push_back(0);
  }
  for_each_row(outer, [&](const auto& at, int64_t, const auto&, int64_t) {
    copy_transposed(dst + at[0], src + at[1], nest.sizes[nd - 2], nest.sizes[nd - 1], ds[nd - 2],
                    ss[nd - 1]);
  });
}

// ---- the backend ---------------------------------------------------------------------

class HostBackend final : public DeviceBackend {
 public:
  DeviceType type() const override { return DeviceType::cpu; }
  // Note [The host's GEMM rows]: 512 rows is the smallest chunk whose GEMMs ran within
  // ~10% of the best on the CPU (bench/head_loss_cpu_bench); smaller chunks ran several
  // times slower (33 rows: 7x slower than 1024). With OpenBLAS under cpu::gemm (issue 24)
  // the curve on the 2-core machine is flat from 256 rows on (memory_lesson --scale 8's
  // shape, CE, frozen head, process CPU seconds per step: 256 rows 1.83, 512 1.81, 1024
  // 1.86; the README's table), so the knee is at or below 256 there; 512 stays, one step
  // past it, for the 16-core host, where a chunk's dh GEMM ([rows, D] output, K = V) is
  // cut into tiles at least 256 wide (Note [GEMM blocking], cpu/gemm.h) and so wants more
  // rows to keep 16 threads busy.
  DeviceCapabilities capabilities() const override { return {.efficient_gemm_rows = 512}; }
  int device_count() const override { return 1; }
  std::string unavailable_reason() const override { return ""; }
  std::unique_ptr<SegmentSource> make_segment_source(int index) override {
    CG_CHECK(index == 0, "the cpu device has only index 0, not ", index);
    return make_host_segment_source();
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t nbytes) override {
    CG_CHECK(dst_device.is_cpu() && src_device.is_cpu(), "the cpu backend cannot copy ",
             src_device.str(), " -> ", dst_device.str(),
             ": that is the other device's backend's job (a dispatch bug: use backend_for)");
    if (nbytes > 0) std::memcpy(dst, src, nbytes);
  }
  void synchronize(int) override {}

  void fill(Device device, void* dst, DType dtype, const Dims& sizes, const Dims& strides,
            double value, double step) override {
    check_host(device, "fill");
    const LoopNest<1> nest = simplify_loops<1>(sizes, {&strides});
    if (nest.numel() == 0) return;
    visit_dtype(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto* p = static_cast<T*>(dst);
      const T constant = cast_element<T>(value);
      for_each_row(nest, [&](const auto& at, int64_t n, const auto& stride, int64_t first) {
        T* row = p + at[0];
        if (step != 0.0) {
          for (int64_t i = 0; i < n; ++i) {
            row[i * stride[0]] =
                cast_element<T>(std::fma(static_cast<double>(first + i), step, value));
          }
        } else if (stride[0] == 1) {
          std::fill_n(row, n, constant);
        } else {
          for (int64_t i = 0; i < n; ++i) row[i * stride[0]] = constant;
        }
      });
    });
  }

  void copy_strided(Device device, void* dst, DType dst_dtype, const Dims& sizes,
                    const Dims& dst_strides, const void* src, DType src_dtype,
                    const Dims& src_strides) override {
    check_host(device, "copy_strided");
    const LoopNest<2> nest = simplify_loops<2>(sizes, {&dst_strides, &src_strides});
    if (nest.numel() == 0) return;
    const bool flat = nest.dims() == 1 && nest.strides[0][0] == 1 && nest.strides[1][0] == 1;
    if (flat && dst_dtype == src_dtype) {
      std::memcpy(dst, src, static_cast<size_t>(nest.numel()) * element_size(dst_dtype));
      return;
    }
    visit_dtype(dst_dtype, [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      visit_dtype(src_dtype, [&](auto src_tag) {
        using S = typename decltype(src_tag)::type;
        auto* d = static_cast<D*>(dst);
        const auto* s = static_cast<const S*>(src);
        if (flat) {
          convert_contiguous(d, s, nest.numel());
        } else {
          strided_copy(d, s, nest);
        }
      });
    });
  }

  void accumulate(Device device, void* dst, DType dst_dtype, const Dims& sizes,
                  const Dims& dst_strides, const void* src, DType src_dtype,
                  const Dims& src_strides) override {
    check_host(device, "accumulate");
    const LoopNest<2> nest = simplify_loops<2>(sizes, {&dst_strides, &src_strides});
    if (nest.numel() == 0) return;
    visit_floating(dst_dtype, "accumulate (destination)", [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      visit_floating(src_dtype, "accumulate (source)", [&](auto src_tag) {
        using S = typename decltype(src_tag)::type;
        using Acc = std::conditional_t<std::is_same_v<D, double> || std::is_same_v<S, double>,
                                       double, float>;
        auto* d = static_cast<D*>(dst);
        const auto* s = static_cast<const S*>(src);
        for_each_row(nest, [&](const auto& at, int64_t n, const auto& step, int64_t) {
          D* dr = d + at[0];
          const S* sr = s + at[1];
          for (int64_t i = 0; i < n; ++i) {
            D& x = dr[i * step[0]];
            x = cast_element<D>(cast_element<Acc>(x) + cast_element<Acc>(sr[i * step[1]]));
          }
        });
      });
    });
  }

  void random_uniform(Device device, void* dst, DType dtype, const Dims& sizes, const Dims& strides,
                      uint64_t seed, uint64_t offset, double low, double high) override {
    check_host(device, "random_uniform");
    const int bits = uniform_bits(dtype);
    random_fill(dst, dtype, sizes, strides, seed, offset, [&](const philox::Block& b) {
      return philox::uniform_value(philox::low_u64(b), bits, low, high);
    });
  }

  void random_normal(Device device, void* dst, DType dtype, const Dims& sizes, const Dims& strides,
                     uint64_t seed, uint64_t offset, double mean, double std) override {
    check_host(device, "random_normal");
    random_fill(dst, dtype, sizes, strides, seed, offset,
                [&](const philox::Block& b) { return philox::normal_value(b, mean, std); });
  }

 private:
  static void check_host(Device device, const char* what) {
    CG_CHECK(device.is_cpu(), "the cpu backend's ", what, " was asked to run on ", device.str(),
             " (a dispatch bug: use that device's backend)");
  }

  // Element i (row-major) = value(block of counter offset + i).
  template <typename Value>
  static void random_fill(void* dst, DType dtype, const Dims& sizes, const Dims& strides,
                          uint64_t seed, uint64_t offset, Value&& value) {
    const LoopNest<1> nest = simplify_loops<1>(sizes, {&strides});
    if (nest.numel() == 0) return;
    visit_floating(dtype, "random fill", [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto* p = static_cast<T*>(dst);
      if (nest.dims() == 1) {
        // One run (every factory's case): elements are independent (Note [Counter-based
        // random numbers]), so a split between threads would not change a value.
        const int64_t n = nest.sizes[0];
        const int64_t stride = nest.strides[0][0];
        for (int64_t i = 0; i < n; ++i) {
          p[i * stride] =
              cast_element<T>(value(philox::random_block(seed, offset + static_cast<uint64_t>(i))));
        }
        return;
      }
      for_each_row(nest, [&](const auto& at, int64_t n, const auto& step, int64_t first) {
        T* row = p + at[0];
        const uint64_t counter = offset + static_cast<uint64_t>(first);
        for (int64_t i = 0; i < n; ++i) {
          const uint64_t c = counter + static_cast<uint64_t>(i);
          row[i * step[0]] = cast_element<T>(value(philox::random_block(seed, c)));
        }
      });
    });
  }
};

}  // namespace

DeviceBackend& host_backend() {
  static HostBackend host;
  return host;
}

}  // namespace cg
