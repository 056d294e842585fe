// Why this file exists: the pipelined fused head loss (Note [Pipelined chunks],
// ops/fused_head_loop.cpp) and the current stream it runs on (core/stream_guard.h), in
// every CI build. The fake device (tests/fake_kernels.h) reports one side stream, so the
// pipelined loop runs on it -- the side stream's calls as late as the loop's waits allow,
// so a missing wait lets a GEMM overwrite a slot before the row pass reads it -- and must
// give the one-stream loop's numbers exactly (both are the CPU's arithmetic), with the
// waits the Note lists, in the bytes head_loss_chunk_bytes promises. On a GPU the same
// comparison runs in tests/cuda_head_loss_pipelined_test.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/stream_guard.h"
#include "core/views.h"
#include "fake_kernels.h"
#include "head_loss_loops_util.h"
#include "ops/head_loss.h"
#include "ops/ops.h"

namespace cg {
namespace {

using namespace head_loss_test;

TEST(StreamGuard, SetsTheStreamOfItsDeviceOnlyAndNests) {
  const Device a{DeviceType::fake, 0}, b{DeviceType::cuda, 0};
  EXPECT_EQ(current_stream(a), kDefaultStream);
  {
    StreamGuard one(a, 1);
    EXPECT_EQ(current_stream(a), 1u);
    EXPECT_EQ(current_stream(b), kDefaultStream);
    EXPECT_EQ(current_stream(kCPU), kDefaultStream);
    {
      StreamGuard two(a, 2);
      EXPECT_EQ(current_stream(a), 2u);
    }
    EXPECT_EQ(current_stream(a), 1u);
  }
  EXPECT_EQ(current_stream(a), kDefaultStream);
}

TEST(StreamGuard, TensorsComeFromTheCurrentStreamsPool) {
  FakeKernelDevice fake;
  const Device dev = fake.device();
  auto stream_of_block = [&](const Tensor& t) {
    for (const SegmentInfo& s : allocator_for(dev).snapshot()) {
      for (const BlockInfo& b : s.blocks) {
        if (b.allocated && b.addr == reinterpret_cast<uint64_t>(t.data_ptr())) return b.stream;
      }
    }
    return StreamId{99};
  };
  const Tensor on_compute = raw::empty({1000}, DType::f32, dev);
  Tensor on_side;
  {
    StreamGuard side(dev, 1);
    on_side = raw::empty({1000}, DType::f32, dev);
  }
  EXPECT_EQ(stream_of_block(on_compute), kDefaultStream);
  EXPECT_EQ(stream_of_block(on_side), 1u);
}

void expect_same(const LoopOutcome& a, const LoopOutcome& b, const std::string& what) {
  EXPECT_EQ(a.loss, b.loss) << what;
  EXPECT_EQ(a.per_token, b.per_token) << what;
  EXPECT_EQ(a.lse, b.lse) << what;
  EXPECT_EQ(a.argmax, b.argmax) << what;
  EXPECT_EQ(a.dh, b.dh) << what;
  EXPECT_EQ(a.dw, b.dw) << what;
}

TEST(HeadLossPipelined, EqualsTheOneStreamLoopWithTheNotesWaits) {
  FakeKernelDevice fake;
  constexpr int64_t T = 23;
  const LoopProblem frozen = make_loop_problem(fake.device(), DType::f32, T, 8, 29, false);
  const LoopProblem trainable = make_loop_problem(fake.device(), DType::f32, T, 8, 29, true);
  // 5 chunks (odd, the last of 3 rows), 6 (even, the last of 3), 3 (the last of 1 row), 1.
  for (int64_t chunk : {5, 4, 11, 23}) {
    const int64_t n = (T + chunk - 1) / chunk;
    struct Mode {
      const LoopProblem* p;
      LossKind kind;
      bool recompute;
      int64_t waits;  // Note [Pipelined chunks]: per chunk 3 with a teacher, 2 without; a join
    };
    for (const Mode& m : {Mode{&frozen, LossKind::forward_kl, false, 3 * n + 1},
                          Mode{&trainable, LossKind::cross_entropy, false, 2 * n + 1},
                          Mode{&trainable, LossKind::forward_kl, true, 2 * (3 * n + 1)}}) {
      const std::string what = "chunk " + std::to_string(chunk) + ", " + loss_kind_name(m.kind) +
                               (m.recompute ? ", recompute" : "");
      const LoopOutcome one = run_loop(*m.p, m.kind, chunk, false, m.recompute);
      fake.reset_calls();
      const LoopOutcome two = run_loop(*m.p, m.kind, chunk, true, m.recompute);
      // One chunk has nothing to overlap: the one-stream loop runs, with no wait.
      EXPECT_EQ(fake.calls("stream_wait"), n > 1 ? m.waits : 0) << what;
      expect_same(one, two, what);
    }
  }
}

TEST(HeadLossPipelined, BudgetHoldsTheSecondSlotAndThePeakStaysInIt) {
  FakeKernelDevice fake;
  constexpr int64_t T = 64, D = 16, V = 1000;
  const LoopProblem p = make_loop_problem(fake.device(), DType::f32, T, D, V, false);
  const HeadLossInputs in{p.h, p.w, p.labels, Tensor(), p.teacher, Tensor()};
  HeadLossOptions o;
  o.pipelined = true;
  o.loss.kind = LossKind::forward_kl;
  HeadLossOptions serial = o;
  serial.pipelined = false;
  // f32, dense operands: no GEMM scratch; a slot is 4 C V bytes. One stream: the student's
  // and the teacher's; pipelined: a second student slot.
  EXPECT_EQ(head_loss_chunk_bytes(in, serial, 10), size_t{2 * 4 * 10 * V});
  EXPECT_EQ(head_loss_chunk_bytes(in, o, 10), size_t{3 * 4 * 10 * V});
  EXPECT_EQ(head_loss_chunk_bytes(in, o, T), size_t{2 * 4 * T * V});  // one chunk: one stream
  o.chunk_budget_bytes = serial.chunk_budget_bytes = 3 * 4 * 10 * V;
  EXPECT_EQ(head_loss_chunk_rows(in, o), 10);
  EXPECT_EQ(head_loss_chunk_rows(in, serial), 15);
  HeadLossOptions chunked = o;  // the autograd chunks overlap nothing: one stream's sizing
  chunked.path = HeadLossPath::chunked;
  EXPECT_EQ(head_loss_chunk_rows(in, chunked), 15);
  // The peak above the inputs: the loop's bytes plus the outputs (loss, lse, entropy [T]
  // f32; argmax, teacher argmax [T] i64; dh [T, D] f32), requested bytes.
  CachingAllocator& a = allocator_for(fake.device());
  const int64_t base = a.stats().requested_bytes.current;
  a.reset_peak_stats();
  {
    HeadLossResult r = head_loss(in, o);
    EXPECT_EQ(r.chunk_rows, 10);
  }
  const int64_t outputs = 3 * 4 * T + 2 * 8 * T + 4 * T * D;
  EXPECT_LE(a.stats().requested_bytes.peak - base,
            outputs + static_cast<int64_t>(head_loss_chunk_bytes(in, o, 10)) + 4 * T);
  EXPECT_GE(a.stats().requested_bytes.peak - base, outputs + 3 * 4 * 10 * V);
}

TEST(HeadLossPipelined, TheHostIgnoresIt) {
  // The CPU has no side stream: the option changes neither the chunk nor the numbers.
  const LoopProblem p = make_loop_problem(kCPU, DType::f32, 23, 8, 29, false);
  const HeadLossInputs in{p.h, p.w, p.labels, Tensor(), p.teacher, Tensor()};
  HeadLossOptions o;
  o.pipelined = true;
  o.loss.kind = LossKind::forward_kl;
  HeadLossOptions serial = o;
  serial.pipelined = false;
  EXPECT_EQ(head_loss_chunk_bytes(in, o, 5), head_loss_chunk_bytes(in, serial, 5));
  expect_same(run_loop(p, LossKind::forward_kl, 5, true, false),
              run_loop(p, LossKind::forward_kl, 5, false, false), "cpu");
}

}  // namespace
}  // namespace cg
