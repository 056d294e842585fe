// Why this file exists: the final stage of a drafter or LM -- lm_head + loss -- behind one
// call, with three implementations chosen by one option. With a large vocabulary the
// logits [T, V] dominate memory; the three paths give the same numbers and very
// different peaks (docs/fused_loss.md; examples/memory_lesson.cpp shows them side by side):
//
//   naive    logits = h W^T materialised [T, V]; the ordinary loss op on top. The graph
//            keeps the logits (and the teacher's) until backward.
//   chunked  the same ops per chunk of rows, autograd as usual. What the graph keeps does
//            NOT drop: every chunk's logits are saved until backward, so the peak cannot
//            fall below the full logits (backward's per-chunk gradients can lower the step
//            peak a little; each chunk's narrow of h can also raise it, Note [The lesson's
//            text] in examples/memory_lesson.cpp).
//   fused    per chunk: logits, loss, d loss/d logits, then dh_chunk = dlogits W (and
//            dW += dlogits^T h_chunk in fp32 when W trains); the chunk's logits are
//            overwritten by the next chunk. The graph keeps only dh [T, D] (and dW).
//
// Fused modes (chosen from the head and the options):
//   frozen head (W does not require grad; DFlash shares the target's frozen lm_head):
//     returns per-token losses [T] whose backward scales the stored rows of dh by the
//     incoming per-token gradients g_i -- so any weighting built on the per-token losses
//     (gamma decay, acceptance-aware weights, reduction none) composes at [T] scale.
//   trainable head, grads in forward (default when W requires grad):
//     PRECONDITION: the loss is reduced here (sum or mean; never none) and the result is
//     used once, as a scalar: the per-row gradients are scaled by w_i / N in the forward
//     pass and backward only multiplies dh and dW by the incoming scalar. Running the
//     forward twice (activation checkpointing) would compute everything twice.
//   recompute in backward (recompute_in_backward = true; any head):
//     keeps only the inputs -- nothing of size V, not even the per-row logsumexp, which
//     backward's row pass recomputes next to the GEMM that dominates -- and reruns the
//     chunk loop with the incoming per-token gradients. Works for any upstream gradient,
//     reduction none and checkpointing, at the price of the logits GEMMs twice (8TDV
//     FLOPs instead of 6TDV).
//
// Everything the student gets a gradient for is h (and W when it trains); the teacher's
// hidden states and head are constants.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "ops/loss_config.h"

namespace cg {

enum class HeadLossPath : int8_t { naive, chunked, fused };
const char* head_loss_path_name(HeadLossPath path);
HeadLossPath parse_head_loss_path(const std::string& name);  // "naive" | "chunked" | "fused"

struct HeadLossInputs {
  Tensor hidden;          // h [T, D], the student's final hidden states
  Tensor head;            // W [V, D]; trains when it requires grad
  Tensor labels;          // [T] i64 (hard CE and mixes); ignore_index skips a row
  Tensor weights;         // [T] per-token weights (constants), optional
  Tensor teacher_hidden;  // [T, D] (teacher losses)
  Tensor teacher_head;    // [V, D] (teacher losses); undefined = `head` (shared frozen head)
};

struct HeadLossOptions {
  HeadLossPath path = HeadLossPath::fused;
  LossConfig loss;
  Reduction reduction = Reduction::mean;
  // Rows per chunk (chunked and fused). 0: as many as chunk_budget_bytes allows for the
  // chunk's temporaries (logits, teacher logits, fp32 copies of 16-bit hidden rows).
  // The default budget keeps the fused path's peak (the budget, the per-row outputs and
  // backward's blocks of rows) under 2 GiB above its inputs and gradients, while chunks at
  // V = 248320 in bf16 stay GEMM-sized: 1536 rows with a teacher, 3072 without.
  int64_t chunk_rows = 0;
  size_t chunk_budget_bytes = size_t{3} << 29;  // 1.5 GiB
  bool recompute_in_backward = false;           // fused only
  // Fused only, on a device with side streams (a GPU): chunk i's row pass and gradient
  // GEMMs run on a side stream beside chunk i + 1's logits GEMMs, with a second slot of
  // the student's logits in the budget (so about 2/3 of the rows per chunk with a teacher,
  // 1/2 without; Note [Pipelined chunks], ops/fused_head_loop.cpp). false: one stream, as
  // on the CPU (which ignores it). The chunked path sizes its chunks as one stream does.
  // Off by default: on the H200 at the DFlash shape it was slower (KL + 0.1 CE, frozen
  // head: 317.2 ms pipelined vs 307.1 one stream, 1.177x vs 1.139x the GEMM floor) -- the
  // smaller chunks cost the GEMMs more than the overlap hides (Note [Pipelined chunks]).
  bool pipelined = false;
  bool with_metrics = true;
};

struct HeadLossResult {
  Tensor loss;             // scalar; [T] for Reduction::none
  Tensor per_token;        // [T] unweighted per-row losses (0 on ignored rows)
  Tensor argmax;           // [T] i64, student argmax          (with_metrics)
  Tensor lse;              // [T] student logsumexp            (with_metrics)
  Tensor entropy;          // [T] student entropy, nats        (with_metrics)
  Tensor teacher_argmax;   // [T] i64, teacher losses only     (with_metrics)
  int64_t chunk_rows = 0;  // rows per chunk used (T for naive)
};

HeadLossResult head_loss(const HeadLossInputs& inputs, const HeadLossOptions& options = {});

// The fused chunk loop's temporaries for chunks of `rows` rows on the inputs' device: the
// chunk's logits (and the teacher's) in the device's working dtype, plus the largest
// scratch one of its GEMMs takes (e.g. fp32 tiles of 16-bit operands on the CPU).
size_t head_loss_chunk_bytes(const HeadLossInputs& inputs, const HeadLossOptions& options,
                             int64_t rows);
// Rows per chunk: chunk_rows when set, else the most rows whose head_loss_chunk_bytes fit
// chunk_budget_bytes (a multiple of 128 from 1024 rows on, for the GEMMs' tiles); throws
// when not even one row fits (naming the bytes one row needs).
int64_t head_loss_chunk_rows(const HeadLossInputs& inputs, const HeadLossOptions& options);

// The teacher's head: inputs.teacher_head, or the student's head when it is not given.
inline const Tensor& teacher_head_of(const HeadLossInputs& inputs) {
  return inputs.teacher_head.defined() ? inputs.teacher_head : inputs.head;
}

// Metrics from a result, over rows whose label is not ignore_index (pass the
// ignore_index the loss ran with). Argmaxes and labels are compared as integers.
double token_accuracy(const HeadLossResult& result, const Tensor& labels,
                      int64_t ignore_index = -100);
double teacher_agreement(const HeadLossResult& result, const Tensor& labels = Tensor(),
                         int64_t ignore_index = -100);

}  // namespace cg
