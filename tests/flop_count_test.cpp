// Why this file exists: MFU is only as right as its FLOP count. The count is checked
// against a hand count at a shape small enough to add up on paper, and at the seed's
// full shape against the "about 440 TFLOP".
#include <gtest/gtest.h>

#include <cstdio>

#include "train/flop_count.h"

namespace cg {
namespace {

using train::DrafterStepShape;

TEST(FlopCount, VisibleKeysByHand) {
  // S 4, block 2. Full rule: a + 2 keys for anchor a, mean over a = 0..3: 3.5.
  EXPECT_DOUBLE_EQ(train::mean_visible_keys(4, 2, 0), 3.5);
  // Window 2: slot 0 sees context a - 1 (when a > 0) and itself; slot 1 sees no context
  // (a + 1 - 1 = a) and slots 0, 1. Context 0+1+1+1, block 4 x (1 + 2): 15 / 8.
  EXPECT_DOUBLE_EQ(train::mean_visible_keys(4, 2, 2), 15.0 / 8.0);
  // A window past the context and the block: the causal block, the whole context.
  EXPECT_DOUBLE_EQ(train::mean_visible_keys(4, 2, 100), 1.5 + 1.5);
}

TEST(FlopCount, SmallShapeByHand) {
  DrafterStepShape s;
  s.sequences = 1;
  s.context_len = 4;
  s.anchors = 2;
  s.block_size = 2;  // P = 4 positions, C = 4 context tokens
  s.hidden = 4;
  s.target_features = 2;
  s.num_heads = 2;
  s.num_kv_heads = 1;
  s.head_dim = 2;  // query width 4, KV width 2
  s.intermediate = 6;
  s.vocab = 10;
  s.sliding = {false};
  s.teacher = true;
  const train::DrafterStepFlops f = train::drafter_step_flops(s);
  EXPECT_DOUBLE_EQ(f.fc, 2 * (2.0 * 4 * 8 * 4));                 // forward + dW
  EXPECT_DOUBLE_EQ(f.context_kv, 3 * (2.0 * 4 * 4 * 4));         // k and v: 2 x 2 wide
  EXPECT_DOUBLE_EQ(f.block_gemms, 3 * 4 * (64.0 + 32 + 144));    // qkv, o, MLP per position
  EXPECT_DOUBLE_EQ(f.attention, 3.5 * (4.0 * 2 * 2) * 4 * 3.5);  // 3.5 keys per query
  EXPECT_DOUBLE_EQ(f.student_head, 2 * (2.0 * 4 * 4 * 10));
  EXPECT_DOUBLE_EQ(f.teacher_head, 2.0 * 4 * 4 * 10);
  EXPECT_DOUBLE_EQ(f.total(), 512 + 384 + 2880 + 784 + 640 + 320);
}

TEST(FlopCount, SeedsFullShapeIsAbout440Tflop) {
  DrafterStepShape s;
  s.sequences = 1;
  s.context_len = 4096;
  s.anchors = 1024;
  s.block_size = 24;
  s.hidden = 5120;
  s.target_features = 5;
  s.num_heads = 32;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.intermediate = 17408;
  s.vocab = 248320;
  s.sliding = {true, true, true, true, false};
  s.sliding_window = 2048;
  s.teacher = true;
  const train::DrafterStepFlops f = train::drafter_step_flops(s);
  std::printf(
      "full-shape step: %.1f TFLOP (head %.1f, drafter GEMMs %.1f, attention %.1f, fc + "
      "context K/V %.1f)\n",
      f.total() / 1e12, (f.student_head + f.teacher_head) / 1e12, f.block_gemms / 1e12,
      f.attention / 1e12, (f.fc + f.context_kv) / 1e12);
  EXPECT_GT(f.total(), 430e12);
  EXPECT_LT(f.total(), 450e12);
  // The head alone: three [24576 x 5120] x [5120 x 248320] GEMMs.
  EXPECT_NEAR((f.student_head + f.teacher_head) / 1e12, 187.5, 0.1);
  // At 800 ms a step is about 55% MFU.
  EXPECT_NEAR(train::model_flops_utilization(f.total(), 0.8), f.total() / 0.8 / 989.4e12, 1e-12);
}

}  // namespace
}  // namespace cg
