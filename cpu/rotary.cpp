// Why this file exists: the CPU rotary embedding (CpuKernels::rotary, cpu/cpu_kernels.h).
// Positions are arbitrary per token (DFlash block tokens sit at anchor+k), so the
// cos/sin table is built per call from the given positions -- [P, hd/2] for P position
// entries, in double, shared by every head and batch row -- and each row of x then
// rotates its pairs (i, i + hd/2). The backward is the same rotation by minus the angle.
#include <cmath>
#include <vector>

#include "core/memory_trace.h"
#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"
#include "cpu/parallel.h"
#include "cpu/row_offsets.h"

namespace cg::cpu {

Tensor CpuKernels::rotary(const Tensor& x, const Tensor& positions, double theta, bool inverse) {
  const int64_t hd = x.shape().back(), half = hd / 2;
  const Shape lead(x.shape().begin(), x.shape().end() - 1);  // [..., S, H]
  const std::vector<int64_t> x_rows = row_offsets(x);
  // Which position entry each row uses: positions [..., S] seen as [..., S, 1] and
  // broadcast over [..., S, H] (positions is contiguous, so offsets are entry indices).
  const Tensor pos_col = raw::unsqueeze(positions, positions.dim());
  const std::vector<int64_t> pos_of_row = index_offsets(lead, broadcast_strides(pos_col, lead));
  const int64_t R = static_cast<int64_t>(x_rows.size()), P = positions.numel();
  const int64_t* pp = positions.data<int64_t>();

  // Angles in double: pos * theta^(-2i/hd). The sign of sin turns forward into inverse.
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
  }
  // The tables are [P, hd/2] doubles: allocator-accounted like every other buffer.
  Tensor cos_table, sin_table;
  {
    CategoryGuard temporary(MemoryCategory::temporary);
    cos_table = raw::empty({P, half}, DType::f64, x.device());
    sin_table = raw::empty({P, half}, DType::f64, x.device());
  }
  double* cos_t = cos_table.data<double>();
  double* sin_t = sin_table.data<double>();
  const double sign = inverse ? -1.0 : 1.0;
  // A cos and a sin cost about as much as 8 elements of a plain loop.
  parallel_range(P, 8 * P * half, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pp[p]) * inv_freq[i];
        cos_t[p * half + i] = std::cos(angle);
        sin_t[p * half + i] = sign * std::sin(angle);
      }
    }
  });

  Tensor out = raw::empty(x.shape(), x.dtype(), x.device());
  dispatch_floating(x.dtype(), "apply_rotary", [&]<typename T>() {
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    const int64_t sx = x.strides().back();
    parallel_range(R, R * hd, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = px + x_rows[r];
        T* yr = po + r * hd;
        const double* cr = cos_t + pos_of_row[r] * half;
        const double* sr = sin_t + pos_of_row[r] * half;
        for (int64_t i = 0; i < half; ++i) {
          const C c = static_cast<C>(cr[i]), s = static_cast<C>(sr[i]);
          const C x1 = load(xr + i * sx), x2 = load(xr + (i + half) * sx);
          store(yr + i, x1 * c - x2 * s);
          store(yr + i + half, x2 * c + x1 * s);
        }
      }
    });
  });
  return out;
}

}  // namespace cg::cpu
