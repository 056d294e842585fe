// Why this file exists: the golden tests (tests/golden/) compare chunkgrad's numbers with a
// reference's at a tolerance relative to the reference's scale; one definition of that
// measure for all of them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/ops.h"

namespace cg::testing_golden {

// max |got - want| / max(1, max |want|); NaN counts as the worst; sizes must match.
inline double rel_diff(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  if (got.size() != want.size()) return INFINITY;
  double worst = 0.0, scale = 1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - want[i]);
    if (!(d <= worst)) worst = d;
    scale = std::max(scale, std::abs(want[i]));
  }
  return worst / scale;
}

// The same for tensors (got on any device), with a shape check.
inline double rel_diff(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return INFINITY;
  return rel_diff(to_device(got, kCPU).to_vector(), want.to_vector());
}

}  // namespace cg::testing_golden
