// Why this file exists: the edges where the three head-loss paths used to disagree
// (issue: robustness items 5-7): option validation that only naive applied, an empty
// batch, and the forward-only case under NoGradGuard with reduction none. Every path must
// validate the same, compute the same, and refuse the same.
#include <gtest/gtest.h>

#include "core/factories.h"
#include "core/views.h"
#include "error_helpers.h"
#include "ops/head_loss.h"
#include "ops/loss.h"
#include "ops/ops.h"

namespace cg {
namespace {

constexpr HeadLossPath kPaths[] = {HeadLossPath::naive, HeadLossPath::chunked, HeadLossPath::fused};

struct Batch {
  Tensor h, w, th, labels;
};

Batch batch(int64_t t, bool trainable_head) {
  Generator gen(11);
  Batch b;
  b.h = randn({t, 6}, {}, &gen).requires_grad_();
  b.w = randn({9, 6}, {}, &gen, 0.0, 0.5);
  if (trainable_head) b.w.requires_grad_();
  b.th = randn({t, 6}, {}, &gen);
  std::vector<int64_t> y(static_cast<size_t>(t));
  for (auto& v : y) v = static_cast<int64_t>(gen.next_u64() % 9);
  b.labels = from_ints(y, {t});
  return b;
}

TEST(HeadLossEdges, EveryPathValidatesTheOptions) {
  const Batch b = batch(5, false);
  for (HeadLossPath path : kPaths) {
    SCOPED_TRACE(head_loss_path_name(path));
    HeadLossOptions o;
    o.path = path;
    o.loss.label_smoothing = 1.5f;
    EXPECT_ERROR_HAS(head_loss({b.h, b.w, b.labels, Tensor(), Tensor(), Tensor()}, o),
                     "label_smoothing must be in [0, 1]", "1.5");
    o.loss.label_smoothing = 0.0f;
    o.loss.softcap = -1.0f;
    EXPECT_ERROR_HAS(head_loss({b.h, b.w, b.labels, Tensor(), Tensor(), Tensor()}, o),
                     "softcap must be >= 0");
    o.loss.softcap = 0.0f;
    o.loss.kind = LossKind::forward_kl;
    o.loss.temperature = 0.0f;
    EXPECT_ERROR_HAS(head_loss({b.h, b.w, b.labels, Tensor(), b.th, Tensor()}, o),
                     "temperature must be > 0");
    o.loss.temperature = 1.0f;
    o.loss.hard_ce_weight = 2.0f;
    EXPECT_ERROR_HAS(head_loss({b.h, b.w, b.labels, Tensor(), b.th, Tensor()}, o),
                     "hard_ce_weight must be in [0, 1]");
  }
}

TEST(HeadLossEdges, AnEmptyBatchGivesZeroOnEveryPath) {
  for (bool trainable : {false, true}) {
    for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
      for (HeadLossPath path : kPaths) {
        SCOPED_TRACE(std::string(head_loss_path_name(path)) +
                     (trainable ? " trainable" : " frozen"));
        const Batch b = batch(0, trainable);
        HeadLossOptions o;
        o.path = path;
        o.reduction = red;
        o.recompute_in_backward = trainable && red == Reduction::none;
        HeadLossResult r = head_loss({b.h, b.w, b.labels, Tensor(), Tensor(), Tensor()}, o);
        EXPECT_EQ(r.per_token.shape(), Shape({0}));
        if (red == Reduction::none) {
          EXPECT_EQ(r.loss.shape(), Shape({0}));
          sum(r.loss).backward();
        } else {
          EXPECT_EQ(r.loss.item(), 0.0);
          r.loss.backward();
        }
        EXPECT_EQ(b.h.grad().shape(), Shape({0, 6}));
        if (trainable) EXPECT_EQ(b.w.grad().to_vector(), std::vector<double>(54, 0.0));
      }
    }
  }
  // The logits-level losses agree: an empty batch is a loss of 0, not an error.
  const Tensor logits = zeros({0, 7});
  EXPECT_EQ(cross_entropy(logits, from_ints({}, {0})).item(), 0.0);
  EXPECT_EQ(kl_div(logits, logits).item(), 0.0);
}

TEST(HeadLossEdges, NoGradWithReductionNoneRunsOnEveryPath) {
  const Batch b = batch(7, true);
  std::vector<std::vector<double>> losses;
  for (HeadLossPath path : kPaths) {
    SCOPED_TRACE(head_loss_path_name(path));
    NoGradGuard no_grad;
    HeadLossOptions o;
    o.path = path;
    o.reduction = Reduction::none;
    HeadLossResult r = head_loss({b.h, b.w, b.labels, Tensor(), Tensor(), Tensor()}, o);
    EXPECT_FALSE(r.loss.requires_grad());
    losses.push_back(r.loss.to_vector());
  }
  for (size_t p = 1; p < losses.size(); ++p) {
    ASSERT_EQ(losses[p].size(), losses[0].size());
    for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[p][i], losses[0][i], 1e-5);
  }
  // With grad mode on, the trainable fused head still explains why it cannot.
  HeadLossOptions o;
  o.reduction = Reduction::none;
  EXPECT_ERROR_HAS(head_loss({b.h, b.w, b.labels, Tensor(), Tensor(), Tensor()}, o),
                   "recompute_in_backward");
}

}  // namespace
}  // namespace cg
