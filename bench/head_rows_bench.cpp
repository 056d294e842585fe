// Why this file exists: the lm_head loss row kernel on a GPU (the CUDA table's
// head_loss_rows, cuda/head_loss_kernels.cu) at the drafter's vocabulary: one chunk of C rows
// of V bf16 logits, cross-entropy (and forward KL against a teacher chunk) with the gradient
// written in place, timed with CUDA events (median of --repeats). It prints milliseconds and
// the bytes the kernel must move at least (read the row, write the gradient: 4 B per logit
// for CE, 6 B with a teacher) over the time, to compare with the GPU's memory bandwidth and
// with the logits GEMM of the same chunk (gemm_bench).
#include <algorithm>
#include <cstdio>
#include <vector>

#include <cuda_runtime_api.h>
#include <CLI/CLI.hpp>

#include "core/factories.h"
#include "core/views.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_check.h"
#include "cuda/device_info.h"
#include "cuda/event_timer.h"
#include "examples/common/program.h"
#include "ops/kernels.h"

int main(int argc, char** argv) {
  int64_t C = 4096, V = 248320;
  int repeats = 10;
  float softcap = 0.0f;
  CLI::App app{"CUDA head_loss_rows speed"};
  app.add_option("--C", C, "rows per chunk");
  app.add_option("--V", V, "vocabulary");
  app.add_option("--softcap", softcap, "logit softcap (0: off)");
  app.add_option("--repeats", repeats, "timed runs");
  if (const int rc = cg::program::parse_command_line(app, "head_rows_bench", argc, argv); rc >= 0)
    return rc;
  try {
    if (cg::cuda::device_count() == 0) {
      std::printf("no CUDA device: %s\n", cg::cuda::unavailable_reason().c_str());
      return 1;
    }
    const cg::Device dev = cg::cuda_device(0);
    cg::DeviceKernels& k = cg::kernels_for(dev, "head_loss_rows");
    const cudaStream_t stream = cg::cuda::compute_stream(0);
    cg::Generator gen(1);
    const cg::Tensor src =
        cg::raw::to_device(cg::rand({C, V}, {.dtype = cg::DType::bf16}, &gen, -4, 4), dev);
    const cg::Tensor teacher_src =
        cg::raw::to_device(cg::rand({C, V}, {.dtype = cg::DType::bf16}, &gen, -4, 4), dev);
    std::vector<double> ids(static_cast<size_t>(C));
    for (int64_t i = 0; i < C; ++i) ids[i] = static_cast<double>((i * 7919) % V);
    const cg::Tensor labels =
        cg::raw::to_device(cg::from_vector(ids, {C}, {.dtype = cg::DType::i64}), dev);
    cg::Tensor logits = cg::raw::empty({C, V}, cg::DType::bf16, dev);
    cg::Tensor teacher = cg::raw::empty({C, V}, cg::DType::bf16, dev);
    cg::Tensor loss = cg::raw::empty({C}, cg::DType::f32, dev);
    std::printf("head_loss_rows, %s, C = %lld, V = %lld, bf16 logits, softcap %g, median of %d\n",
                cg::cuda::device_properties(0).summary().c_str(), static_cast<long long>(C),
                static_cast<long long>(V), softcap, repeats);
    std::printf("%-28s %10s %10s\n", "loss", "ms", "GB/s");
    for (int kind = 0; kind < 3; ++kind) {
      cg::HeadRowsArgs a;
      a.logits = logits;
      a.labels = labels;
      a.want_grad = kind != 2;
      a.loss = loss;
      a.config.softcap = softcap;
      const char* name = kind == 0   ? "cross_entropy + grad"
                         : kind == 1 ? "forward_kl (a=0.3) + grad"
                                     : "cross_entropy, loss only";
      if (kind == 1) {
        a.teacher = teacher;
        a.config.kind = cg::LossKind::forward_kl;
        a.config.hard_ce_weight = 0.3f;
      }
      std::vector<double> ms;
      cg::cuda::EventTimer timer(stream);
      for (int r = 0; r <= std::max(1, repeats); ++r) {  // run 0 is the untimed warm-up
        cg::raw::copy_(logits, src);                     // the kernel overwrites its input
        if (kind == 1) cg::raw::copy_(teacher, teacher_src);
        timer.start();
        k.head_loss_rows(a);
        const double t = timer.stop_ms();
        if (r > 0) ms.push_back(t);
      }
      const double med = cg::median(ms);
      const double bytes = static_cast<double>(C) * V * (kind == 1 ? 6.0 : kind == 2 ? 2.0 : 4.0);
      std::printf("%-28s %10.3f %10.0f\n", name, med, bytes / (med * 1e-3) / 1e9);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "head_rows_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
