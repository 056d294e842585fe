// Why this file exists: each leaf module must compute what its Hugging Face counterpart
// computes, from parameters with HF's names and shapes. Embedding, RMSNorm and the
// rotary embedding are checked against plain loops written from the formulas, with
// finite-difference gradients for what trains.
#include <gtest/gtest.h>

#include <cmath>

#include "core/factories.h"
#include "gradcheck.h"
#include "nn/layers.h"
#include "nn_test_util.h"
#include "ops/ops.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

using testing_nn::bit_equal;

TEST(NnEmbedding, RowsOfTheTableAndGradient) {
  Generator gen(3);
  nn::Embedding emb(10, 4, {.generator = &gen});
  EXPECT_EQ(emb.weight.shape(), (Shape{10, 4}));
  EXPECT_EQ(emb.named_parameters().front().first, "weight");
  Tensor ids = from_ints({7, 0, 7, 3, 9, 1}, {2, 3});
  Tensor out = emb.forward(ids);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 4}));
  const auto w = emb.weight.to_vector(), o = out.to_vector();
  const int64_t id_values[] = {7, 0, 7, 3, 9, 1};
  for (int t = 0; t < 6; ++t) {
    for (int d = 0; d < 4; ++d) EXPECT_EQ(o[t * 4 + d], w[id_values[t] * 4 + d]);
  }
  // Repeated ids accumulate their rows' gradients.
  sum(out).backward();
  const auto g = emb.weight.grad().to_vector();
  EXPECT_EQ(g[7 * 4], 2.0);
  EXPECT_EQ(g[0], 1.0);
  EXPECT_EQ(g[2 * 4], 0.0);
}

TEST(NnRMSNorm, MatchesFormulaAndGradchecks) {
  nn::RMSNorm norm(6, 1e-5, {.dtype = DType::f64});
  EXPECT_EQ(norm.weight.to_vector(), std::vector<double>(6, 1.0));
  {
    NoGradGuard no_grad;
    copy_(norm.weight, from_vector({0.5, 1, 1.5, 2, -1, 3}, {6}, {.dtype = DType::f64}));
  }
  Tensor x = randn({2, 3, 6}, {.dtype = DType::f64});
  const auto xv = x.to_vector(), yv = norm.forward(x).to_vector(), wv = norm.weight.to_vector();
  for (int r = 0; r < 6; ++r) {
    double ms = 0;
    for (int d = 0; d < 6; ++d) ms += xv[r * 6 + d] * xv[r * 6 + d] / 6.0;
    for (int d = 0; d < 6; ++d) {
      EXPECT_NEAR(yv[r * 6 + d], xv[r * 6 + d] / std::sqrt(ms + 1e-5) * wv[d], 1e-12);
    }
  }
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return norm.forward(in[0]); },
                   testing::make_input({2, 3, 6}, 5));
  TENSOR_EXPECT_ERROR(norm.forward(zeros({2, 5}, {.dtype = DType::f64})), "last dim must be 6");
}

TEST(NnRotary, RotateHalfAtArbitraryPositions) {
  const int64_t S = 3, H = 2, hd = 8;
  const double theta = 1e4;
  nn::RotaryEmbedding rope(hd, theta);
  EXPECT_EQ(rope.named_parameters().size(), 0u);  // no parameters, no state-dict entries
  const auto inv = rope.inv_freq().to_vector();
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_DOUBLE_EQ(inv[1], std::pow(theta, -2.0 / 8.0));

  Tensor x = randn({1, S, H, hd}, {.dtype = DType::f64});
  Tensor positions = from_ints({5, 0, 1234}, {S});  // DFlash: any positions
  Tensor y = rope.forward(x, positions);
  const auto xv = x.to_vector(), yv = y.to_vector();
  const int64_t pos[] = {5, 0, 1234};
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t base = (s * H + h) * hd;
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double a = static_cast<double>(pos[s]) * inv[i];
        const double x1 = xv[base + i], x2 = xv[base + i + hd / 2];
        EXPECT_NEAR(yv[base + i], x1 * std::cos(a) - x2 * std::sin(a), 1e-12);
        EXPECT_NEAR(yv[base + i + hd / 2], x2 * std::cos(a) + x1 * std::sin(a), 1e-12);
      }
    }
  }
  // Position 0 is the identity; the default positions are 0 .. S-1.
  EXPECT_TRUE(bit_equal(narrow(y, 1, 1, 1), narrow(x, 1, 1, 1)));
  EXPECT_EQ(nn::RotaryEmbedding::positions(3, 4).to_vector(), (std::vector<double>{3, 4, 5, 6}));
  TENSOR_EXPECT_ERROR(nn::RotaryEmbedding(7, theta), "head_dim must be even");
  TENSOR_EXPECT_ERROR(rope.forward(x, zeros({S})), "positions must be an i64");
}

}  // namespace
}  // namespace cg
