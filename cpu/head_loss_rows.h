// Why this file exists: the CPU implementation of the per-row half of every lm_head loss
// in chunkgrad. Given one chunk of logits [C, V] (and optionally the teacher's [C, V] and
// labels [C]) it computes, row by row and without any [C, V] temporary, the loss, the
// metrics (argmax, logsumexp, entropy, teacher argmax) and -- when asked -- the gradient
// d loss / d logits, written in place over the logits. The naive, chunked and fused paths
// all call it, which is why they agree to rounding. What it computes for each loss kind
// (loss, gradient, temperature, softcap, hard-CE mix, smoothing, z-loss, ignored rows) is
// the device-neutral spec in ops/loss_row_math.h, which the CUDA kernel implements too.
#pragma once

#include <cstdint>

#include "ops/kernels.h"
#include "ops/loss_row_math.h"

namespace cg::cpu {

// Per-row outputs, each [C] and each optional (nullptr = not wanted).
template <typename T>
struct HeadRowOutputs {
  T* loss = nullptr;
  T* lse = nullptr;           // logsumexp of the (softcapped) student logits, tau = 1
  int64_t* argmax = nullptr;  // student argmax
  T* entropy = nullptr;       // entropy of softmax(z), nats
  int64_t* teacher_argmax = nullptr;
};

// T is float (every real run) or double (gradient checks).
// logits  [C, V] row-major, student raw logits. With want_grad, each row i is overwritten
//         with grad_scale[i] * d loss_i / d logits_raw_i (grad_scale nullptr: scale 1).
// teacher [C, V] raw teacher logits, or nullptr (required by the teacher losses);
//         softcapped in place when softcap is on.
// labels  [C] int64, or nullptr (required by CE and by a mix).
// Rows run in parallel (cpu/parallel.h); sums accumulate in float lanes added into
// double per block of 256 (Note [Row sums] in cpu/row_math.h).
template <typename T>
void head_loss_rows(T* logits, T* teacher, const int64_t* labels, int64_t C, int64_t V,
                    const LossConfig& config, bool want_grad, const T* grad_scale,
                    const HeadRowOutputs<T>& out);

// Throws a clear error naming the row when a label is neither ignore_index nor in [0, V).
void check_head_labels(const int64_t* labels, int64_t C, int64_t V, int64_t ignore_index);

// The CPU table's head_loss_rows, check_labels and row_weights entries (CpuKernels,
// cpu/cpu_kernels.h) are the tensor-level forms of the above, in head_loss_rows.cpp.

}  // namespace cg::cpu
