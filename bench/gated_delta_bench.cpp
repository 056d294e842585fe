// Why this file exists: issue 21's "Gated DeltaNet chunked kernel alone" measurement: the
// CUDA gated_delta_rule entry (cuda/gated_delta_kernels.cu) at the Qwen3.5-27B DeltaNet
// shape, next to PyTorch (bench/gated_delta_torch.py prints the same rows with
// transformers' torch_chunk_gated_delta_rule; run_gated_delta_bench.sh runs both).
// The shape comes from the published Qwen3.5-27B config's text_config fields
// linear_num_key_heads 16 (Hk), linear_num_value_heads 48 (Hv), linear_key_head_dim 128
// (dk), linear_value_head_dim 128 (dv), linear_conv_kernel_dim 4 (K); T = 4096 tokens,
// B = 1 and 4 (--batches). bf16 q, k, v; f32 g, beta and state (as the layer feeds them).
// Rows per batch size (medians over --repeats of CUDA-event timings after a warm-up):
//   chunked     the prefill algorithm (what the entry runs for T > 16)
//   recurrent   the token-by-token kernel over the same T (what decoding runs)
//   conv1d      causal_conv1d + SiLU over the q, k, v channels (C = 2 Hk dk + Hv dv)
// and a decode table at B = 1: the recurrent kernel for T = 1 and T = 16.
//
// Note [The chunked FLOP count]: the chunk products as the kernels compute them, per (b,
// value head, chunk of C = 64; tri = C (C + 1) / 2 for the lower-triangular ones), in
// multiply-adds: q k^T and k k^T (tri dk each), the triangular solve (C^3 / 6), U = T_c v
// (tri dv), W = T_c k (tri dk), W S, q S and kd^T v_new (C dk dv each), aqk v_new (tri dv);
// FLOPs = 2 x that x chunks x B x Hv. The recurrence counts 7 dk dv FLOPs per token and
// head (decay, S^T k, the rank-1 update, S^T q). The torch script prints the same counts,
// so TFLOP/s compare like for like even where PyTorch multiplies whole [64, 64] blocks.
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_kernels.h"
#include "cuda/device_info.h"
#include "cuda/event_timer.h"
#include "cuda/gated_delta_kernels.h"
#include "examples/common/program.h"

namespace {

struct Options {
  std::string batches = "1,4";
  int64_t tokens = 4096, hk = 16, hv = 48, dk = 128, dv = 128, kernel = 4;
  std::string dtype = "bf16";
  int repeats = 10;
};

double chunked_flops(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
  const double C = 64, tri = C * (C + 1) / 2;
  const double chunks = std::ceil(static_cast<double>(T) / C);
  const double macs = 2 * tri * dk + C * C * C / 6 + tri * dv + tri * dk +
                      3 * C * static_cast<double>(dk) * dv + tri * dv;
  return 2 * macs * chunks * static_cast<double>(B * Hv);
}
double recurrent_flops(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
  return 7.0 * static_cast<double>(B * T * Hv) * static_cast<double>(dk * dv);
}

void row(const std::string& name, double ms, double flops, const char* unit = "TFLOP/s") {
  std::printf("%-34s %10.3f %10.2f %s\n", name.c_str(), ms, flops / (ms * 1e-3) / 1e12, unit);
}

double time_ms(int repeats, const std::function<void()>& f) {
  return cg::cuda::median_event_ms(cg::cuda::compute_stream(0), repeats, f);
}

cg::GatedDeltaArgs make_args(const Options& o, int64_t B, int64_t T, cg::DType dt) {
  const cg::Device d = cg::cuda_device(0);
  cg::Generator gen(7);
  cg::GatedDeltaArgs a;
  a.q = cg::randn({B, T, o.hk, o.dk}, {.dtype = dt, .device = d}, &gen);
  a.k = cg::randn({B, T, o.hk, o.dk}, {.dtype = dt, .device = d}, &gen);
  a.v = cg::randn({B, T, o.hv, o.dv}, {.dtype = dt, .device = d}, &gen);
  a.g = cg::rand({B, T, o.hv}, {.dtype = cg::DType::f32, .device = d}, &gen, -1.0, 0.0);
  a.beta = cg::rand({B, T, o.hv}, {.dtype = cg::DType::f32, .device = d}, &gen, 0.0, 1.0);
  a.state = cg::zeros({B, o.hv, o.dk, o.dv}, {.dtype = cg::DType::f32, .device = d});
  a.scale = 1.0 / std::sqrt(static_cast<double>(o.dk));
  return a;
}

void bench_batch(const Options& o, int64_t B) {
  const cg::DType dt = cg::parse_dtype(o.dtype);
  const int64_t T = o.tokens;
  const cg::GatedDeltaArgs a = make_args(o, B, T, dt);
  std::printf("\nB=%lld T=%lld Hk=%lld Hv=%lld dk=%lld dv=%lld %s, median of %d\n", (long long)B,
              (long long)T, (long long)o.hk, (long long)o.hv, (long long)o.dk, (long long)o.dv,
              o.dtype.c_str(), o.repeats);
  std::printf("%-34s %10s %10s\n", "row", "ms", "rate");
  using cg::cuda::GatedDeltaAlgorithm;
  const double fc = chunked_flops(B, T, o.hv, o.dk, o.dv);
  row("gated_delta chunked",
      time_ms(o.repeats, [&] { cg::cuda::run_gated_delta_rule(a, GatedDeltaAlgorithm::chunked); }),
      fc);
  row("gated_delta recurrent",
      time_ms(o.repeats,
              [&] { cg::cuda::run_gated_delta_rule(a, GatedDeltaAlgorithm::recurrent); }),
      recurrent_flops(B, T, o.hv, o.dk, o.dv));
  // The conv over the q, k, v projections' channels; rate in TB/s of x read + out written.
  const int64_t C = 2 * o.hk * o.dk + o.hv * o.dv;
  cg::Generator gen(8);
  const cg::Device d = cg::cuda_device(0);
  const cg::Tensor x = cg::randn({B, T, C}, {.dtype = dt, .device = d}, &gen);
  const cg::Tensor w = cg::randn({C, o.kernel}, {.dtype = dt, .device = d}, &gen, 0.0, 0.5);
  cg::cuda::CudaKernels gpu;
  const double bytes = 2.0 * static_cast<double>(x.numel() * cg::element_size(dt));
  row("causal_conv1d C=" + std::to_string(C) + " K=" + std::to_string(o.kernel),
      time_ms(o.repeats, [&] { gpu.causal_conv1d(x, w, cg::Tensor(), true); }), bytes, "TB/s");
}

void bench_decode(const Options& o) {
  const cg::DType dt = cg::parse_dtype(o.dtype);
  std::printf("\ndecode: B=1 Hk=%lld Hv=%lld dk=%lld dv=%lld %s, median of %d\n", (long long)o.hk,
              (long long)o.hv, (long long)o.dk, (long long)o.dv, o.dtype.c_str(), o.repeats);
  std::printf("%-34s %10s %10s\n", "row", "ms", "rate");
  for (int64_t T : {1, 16}) {
    const cg::GatedDeltaArgs a = make_args(o, 1, T, dt);
    row("gated_delta recurrent T=" + std::to_string(T),
        time_ms(
            o.repeats,
            [&] { cg::cuda::run_gated_delta_rule(a, cg::cuda::GatedDeltaAlgorithm::recurrent); }),
        recurrent_flops(1, T, o.hv, o.dk, o.dv));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"chunkgrad Gated DeltaNet kernels (gated delta rule, causal conv1d) on the GPU"};
  app.add_option("--batches", o.batches, "comma-separated batch sizes");
  app.add_option("--tokens", o.tokens, "sequence length T")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--hk", o.hk, "key heads (linear_num_key_heads)")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--hv", o.hv, "value heads (linear_num_value_heads)")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--dk", o.dk, "key head dim (linear_key_head_dim), at most 128")
      ->check(CLI::Range(1, 128));
  app.add_option("--dv", o.dv, "value head dim (linear_value_head_dim), at most 128")
      ->check(CLI::Range(1, 128));
  app.add_option("--kernel", o.kernel, "conv kernel (linear_conv_kernel_dim)")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--dtype", o.dtype, "bf16 | f16 | f32")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  app.add_option("--repeats", o.repeats, "timed runs per row (median)")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  if (const int rc = cg::program::parse_command_line(app, "gated_delta_bench", argc, argv); rc >= 0)
    return rc;
  if (o.hv % o.hk != 0) {
    std::fprintf(stderr, "gated_delta_bench: --hv %lld must be a multiple of --hk %lld\n",
                 (long long)o.hv, (long long)o.hk);
    return 2;
  }
  std::vector<int64_t> batches;
  std::stringstream ss(o.batches);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long long b = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || b < 1) {
      std::fprintf(stderr, "gated_delta_bench: --batches wants positive integers, got '%s'\n",
                   item.c_str());
      return 2;
    }
    batches.push_back(b);
  }
  if (cg::cuda::device_count() == 0) {
    std::fprintf(stderr, "gated_delta_bench: no CUDA device (%s)\n",
                 cg::cuda::unavailable_reason().c_str());
    return 1;
  }
  std::printf("chunkgrad gated delta rule on %s\n",
              cg::cuda::device_properties(0).summary().c_str());
  std::printf(
      "TFLOP/s: chunked = 2 x (2 tri dk + C^3/6 + tri dv + tri dk + 3 C dk dv + tri dv) x chunks x "
      "B "
      "x Hv multiply-adds, C = 64, tri = C(C+1)/2 (Note [The chunked FLOP count]); recurrent = 7 "
      "dk dv per token and value head\n");
  for (int64_t B : batches) bench_batch(o, B);
  bench_decode(o);
  return 0;
}
