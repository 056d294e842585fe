// Why this file exists: the memory lesson, pinned down by the caching allocator. Under
// autograd, chunking the loss keeps every chunk's logits in the graph, so its forward
// peak is the naive one; the fused path's peak is one chunk's temporaries plus dh, by a
// formula asserted here to the byte (requested) and with the allocator's rounding
// (allocated). The graph bytes each path retains after forward are asserted too.
#include <gtest/gtest.h>

#include "core/caching_allocator.h"
#include "core/factories.h"
#include "ops/head_loss.h"
#include "ops/ops.h"

namespace cg {
namespace {

constexpr int64_t kT = 512, kD = 64, kV = 4096, kChunk = 64;

struct Measured {
  int64_t forward_requested = 0;  // peak requested bytes above the inputs, during forward
  int64_t forward_allocated = 0;  // the same in allocator blocks
  size_t retained = 0;            // graph_retained_bytes after forward
  std::map<std::string, size_t> retained_by_node;
};

struct Inputs {
  Tensor h, w, labels;
};

Inputs make_inputs(bool trainable_head) {
  Generator gen(3);
  Inputs in;
  in.h = randn({kT, kD}, {}, &gen).requires_grad_();
  in.w = randn({kV, kD}, {}, &gen, 0.0, 0.1);
  if (trainable_head) in.w.requires_grad_();
  std::vector<int64_t> y(kT);
  for (int64_t i = 0; i < kT; ++i) y[i] = static_cast<int64_t>(gen.next_u64() % kV);
  in.labels = from_ints(y, {kT});
  return in;
}

Measured measure(const Inputs& in, HeadLossPath path, bool recompute = false) {
  CachingAllocator& a = allocator_for(kCPU);
  const AllocatorStats before = a.stats();
  a.reset_peak_stats();
  HeadLossOptions o;
  o.path = path;
  o.chunk_rows = kChunk;
  o.recompute_in_backward = recompute;
  HeadLossResult r = head_loss({in.h, in.w, in.labels, Tensor(), Tensor(), Tensor()}, o);
  const AllocatorStats after = a.stats();
  Measured m;
  m.forward_requested = after.requested_bytes.peak - before.requested_bytes.current;
  m.forward_allocated = after.allocated_bytes.peak - before.allocated_bytes.current;
  const GraphMemory g = graph_retained_bytes(r.loss, {in.w, in.labels});
  m.retained = g.total_bytes;
  m.retained_by_node = g.bytes_by_node;
  r.loss.backward();  // and everything is released again
  return m;
}

size_t rounded(size_t bytes) { return CachingAllocator::round_size(bytes); }

TEST(HeadLossMemory, ChunkingUnderAutogradKeepsTheNaivePeak) {
  const Inputs in = make_inputs(false);
  const Measured naive = measure(in, HeadLossPath::naive);
  const Measured chunked = measure(in, HeadLossPath::chunked);
  const int64_t logits = 4 * kT * kV;
  EXPECT_GE(naive.forward_requested, logits);
  EXPECT_GE(chunked.forward_requested, logits);  // every chunk's logits at once
  EXPECT_NEAR(static_cast<double>(chunked.forward_requested),
              static_cast<double>(naive.forward_requested), 0.03 * naive.forward_requested);
  // Both graphs hold all the logits (plus the reduction's [T] scale); W and the labels
  // are the caller's.
  EXPECT_EQ(naive.retained, static_cast<size_t>(logits + 4 * kT));
  EXPECT_EQ(chunked.retained, static_cast<size_t>(logits + 4 * kT));
  EXPECT_EQ(naive.retained_by_node.at("RowLossBackward"), static_cast<size_t>(logits));
}

TEST(HeadLossMemory, FusedPeakIsOneChunkPlusDh) {
  const Inputs in = make_inputs(false);
  const Measured fused = measure(in, HeadLossPath::fused);
  // Alive together inside the chunk loop (f32, CE, metrics on):
  //   per-token loss, lse, entropy [T] f32; argmax [T] i64;
  //   dh [T, D] f32 (what the graph keeps); one chunk's logits [C, V] f32.
  const std::vector<size_t> live = {4 * kT, 4 * kT, 4 * kT, 8 * kT, 4 * kT * kD, 4 * kChunk * kV};
  size_t requested = 0, allocated = 0;
  for (size_t b : live) {
    requested += b;
    allocated += rounded(b);
  }
  EXPECT_EQ(fused.forward_requested, static_cast<int64_t>(requested));
  EXPECT_EQ(fused.forward_allocated, static_cast<int64_t>(allocated));
  // The graph keeps dh and the reduction's [T] scale, nothing of size V.
  EXPECT_EQ(fused.retained, static_cast<size_t>(4 * kT * kD + 4 * kT));
  EXPECT_EQ(fused.retained_by_node.at("FusedHeadRowsBackward"), static_cast<size_t>(4 * kT * kD));
  const Measured naive = measure(in, HeadLossPath::naive);
  EXPECT_LT(fused.forward_requested * 4, naive.forward_requested);
}

TEST(HeadLossMemory, FusedPeakScalesWithTheChunk) {
  // Doubling the chunk adds exactly one more chunk of logits (4 C V bytes) to the peak.
  const Inputs in = make_inputs(false);
  auto peak = [&](int64_t chunk) {
    CachingAllocator& a = allocator_for(kCPU);
    const int64_t base = a.stats().requested_bytes.current;
    a.reset_peak_stats();
    HeadLossOptions o;
    o.chunk_rows = chunk;
    HeadLossResult r = head_loss({in.h, in.w, in.labels, Tensor(), Tensor(), Tensor()}, o);
    return a.stats().requested_bytes.peak - base;
  };
  EXPECT_EQ(peak(2 * kChunk) - peak(kChunk), 4 * kChunk * kV);
}

TEST(HeadLossMemory, TrainableAndRecomputeRetainWhatTheAnalysisSays) {
  const Inputs in = make_inputs(true);
  // Grads in forward: dh [T, D] and dW [V, D] fp32, already scaled; the loss is a scalar.
  const Measured forward_grads = measure(in, HeadLossPath::fused);
  EXPECT_EQ(forward_grads.retained, static_cast<size_t>(4 * kT * kD + 4 * kV * kD));
  // Recompute: only the inputs (the caller's) and the reduction's [T] scale.
  const Measured recompute = measure(in, HeadLossPath::fused, true);
  EXPECT_EQ(recompute.retained, static_cast<size_t>(4 * kT));
}

TEST(HeadLossMemory, Bf16HeadIsConvertedOneTileAtATime) {
  // A 16-bit head is never copied to fp32 whole: the CPU gemm converts a tile at a time,
  // and the loop's bytes are what head_loss_chunk_bytes promises.
  constexpr int64_t V = 10000, C = 32;
  Generator gen(5);
  const Tensor h = randn({kT, kD}, {.dtype = DType::bf16}, &gen).requires_grad_();
  const Tensor w = randn({V, kD}, {.dtype = DType::bf16}, &gen, 0.0, 0.1);
  std::vector<int64_t> y(kT);
  for (int64_t i = 0; i < kT; ++i) y[i] = static_cast<int64_t>(gen.next_u64() % V);
  const Tensor labels = from_ints(y, {kT});
  CachingAllocator& a = allocator_for(kCPU);
  const int64_t base = a.stats().requested_bytes.current;
  a.reset_peak_stats();
  HeadLossOptions o;
  o.chunk_rows = C;
  HeadLossInputs hi{h, w, labels, Tensor(), Tensor(), Tensor()};
  const size_t loop = head_loss_chunk_bytes(hi, o, C);
  HeadLossResult r = head_loss(hi, o);
  // outputs 20 T; dh [T, D] bf16; the loop's logits [C, V] f32 and GEMM scratch.
  const int64_t outputs = 20 * kT + 2 * kT * kD;
  EXPECT_LE(a.stats().requested_bytes.peak - base, outputs + static_cast<int64_t>(loop));
  EXPECT_GE(a.stats().requested_bytes.peak - base, outputs + 4 * C * V);
  // The GEMMs' scratch (fp32 tiles, per thread) does not grow with the vocabulary: a head
  // four times larger adds only its logits.
  const Tensor w4 = randn({4 * V, kD}, {.dtype = DType::bf16}, &gen, 0.0, 0.1);
  const size_t loop4 = head_loss_chunk_bytes({h, w4, labels, Tensor(), Tensor(), Tensor()}, o, C);
  EXPECT_EQ(loop4 - static_cast<size_t>(4 * C * 4 * V), loop - static_cast<size_t>(4 * C * V));
}

TEST(HeadLossMemory, BudgetPicksTheChunk) {
  const Inputs in = make_inputs(false);
  HeadLossOptions o;
  HeadLossInputs hi{in.h, in.w, in.labels, Tensor(), Tensor(), Tensor()};
  // fp32, dense, frozen head: a chunk is its logits; the GEMMs need no scratch.
  EXPECT_EQ(head_loss_chunk_bytes(hi, o, 100), static_cast<size_t>(4 * kV * 100));
  o.chunk_budget_bytes = head_loss_chunk_bytes(hi, o, 100) + 7;
  EXPECT_EQ(head_loss_chunk_rows(hi, o), 100);
  o.chunk_budget_bytes = size_t{1} << 40;
  EXPECT_EQ(head_loss_chunk_rows(hi, o), kT);
  o.chunk_rows = 33;
  EXPECT_EQ(head_loss_chunk_rows(hi, o), 33);
}

}  // namespace
}  // namespace cg
