// Why this file exists: the GEMM speed target of issue 11, measured in one run on a GPU:
// the CUDA kernel table's gemm (cuBLASLt, cuda/lt_gemm.h) at the drafter's shapes, M rows
// of hidden states times a weight, out [M, N] = x [M, K] @ W^T (W [N, K] as nn.Linear
// stores it, read transposed in place; --layout nn reads a [K, N] weight instead). It
// prints the median TFLOP/s over --repeats (CUDA events on the compute stream, after one
// untimed warm-up that also picks and caches the algorithm); bench/gemm_torch.py prints
// PyTorch's torch.matmul on the same shapes, bench/run_gpu_bench.sh runs both.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <CLI/CLI.hpp>

#include "core/backend.h"
#include "core/factories.h"
#include "core/views.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_check.h"
#include "cuda/device_info.h"
#include "cuda/event_timer.h"
#include "examples/common/program.h"
#include "ops/kernels.h"

namespace {

struct Options {
  int64_t M = 24576;
  std::string kn = "5120x5120,5120x17408,5120x248320";
  std::string dtype = "bf16";
  std::string layout = "nt";
  int repeats = 10;
};

cg::DType dtype_of(const std::string& s) {
  if (s == "bf16") return cg::DType::bf16;
  if (s == "f16") return cg::DType::f16;
  if (s == "f32") return cg::DType::f32;
  CG_FAIL("--dtype must be bf16, f16 or f32, got ", s);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"cuBLASLt GEMM TFLOP/s at the drafter's shapes (chunkgrad's CUDA kernel table)"};
  app.add_option("--M", o.M, "rows of x");
  app.add_option("--shapes", o.kn, "comma-separated KxN list");
  app.add_option("--dtype", o.dtype, "bf16, f16 or f32");
  app.add_option("--layout", o.layout, "nt: W [N, K] read transposed; nn: W [K, N]");
  app.add_option("--repeats", o.repeats, "timed runs per shape");
  if (const int rc = cg::program::parse_command_line(app, "gemm_bench", argc, argv); rc >= 0)
    return rc;
  try {
    if (cg::cuda::device_count() == 0) {
      std::printf("no CUDA device: %s\n", cg::cuda::unavailable_reason().c_str());
      return 1;
    }
    const cg::Device dev = cg::cuda_device(0);
    const cg::DType dt = dtype_of(o.dtype);
    std::printf("chunkgrad gemm (cuBLASLt), %s, %s, M = %lld, layout %s, median of %d\n",
                cg::cuda::device_properties(0).summary().c_str(), o.dtype.c_str(),
                static_cast<long long>(o.M), o.layout.c_str(), o.repeats);
    std::printf("%8s %8s %8s %10s %10s\n", "M", "K", "N", "ms", "TFLOP/s");
    cg::DeviceKernels& k = cg::kernels_for(dev, "gemm");
    const cudaStream_t stream = cg::cuda::compute_stream(0);
    std::stringstream list(o.kn);
    std::string item;
    while (std::getline(list, item, ',')) {
      const size_t x = item.find('x');
      CG_CHECK(x != std::string::npos, "--shapes: expected KxN, got ", item);
      const int64_t K = std::stoll(item.substr(0, x)), N = std::stoll(item.substr(x + 1));
      cg::Tensor a = cg::raw::empty({o.M, K}, dt, dev);
      cg::Tensor w = cg::raw::empty(o.layout == "nn" ? cg::Shape{K, N} : cg::Shape{N, K}, dt, dev);
      cg::raw::fill_(a, 0.01);
      cg::raw::fill_(w, 0.02);
      const cg::Tensor b = o.layout == "nn" ? w : cg::raw::transpose(w, 0, 1);
      cg::Tensor out = cg::raw::empty({o.M, N}, dt, dev);
      // The warm-up run picks and caches the algorithm and the workspace.
      const double med =
          cg::cuda::median_event_ms(stream, o.repeats, [&] { k.gemm(a, b, out, 1.0, 0.0); });
      const double tflops = 2.0 * static_cast<double>(o.M) * K * N / (med * 1e-3) / 1e12;
      std::printf("%8lld %8lld %8lld %10.3f %10.1f\n", static_cast<long long>(o.M),
                  static_cast<long long>(K), static_cast<long long>(N), med, tflops);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
