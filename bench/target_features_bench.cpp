// Why this file exists: issue 20's online-features throughput, measured: the target at the
// Qwen3-8B shape (36 layers, hidden 4096, 32/8 heads x 128, MLP 12288, vocabulary 151936:
// the embedding only, no lm_head) with random bf16 weights made on the GPU, run as
// `chunkgrad features` runs it (no autograd, cuDNN causal attention, layers released as
// the forward goes), capturing 5 layers (1, 9, 17, 25, 33) and the final norm. One table:
// per shape (sequence length x batch), the median over --steps of tokens per second
// (host clock around a synchronised forward, ids upload included) and the allocator's
// peak (weights included). bench/target_features_torch.py prints the same table for
// transformers' Qwen3Model (sdpa, output_hidden_states); run_target_features_bench.sh
// runs both and prints the ratio.
//   ./build/bench/target_features_bench --shapes 2048x4,4096x2 --steps 5
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "autograd/grad_mode.h"
#include "bench/prefill_bench_options.h"
#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/factories.h"
#include "core/timing.h"
#include "cuda/cuda_attention.h"
#include "examples/common/program.h"
#include "nn/qwen3.h"
#include "ops/attention_mask.h"

namespace {

struct Options {
  int64_t layers = 36, hidden = 4096, heads = 32, kv_heads = 8, head_dim = 128, mlp = 12288;
  int64_t vocab = 151936;
  std::string shapes = "2048x1,2048x4,2048x8,4096x1,4096x2,4096x4,4096x8";
  std::string capture = "1,9,17,25,33";
  int steps = 5, warmup = 2;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"the target's feature forward at the Qwen3-8B shape (random bf16 weights)"};
  app.add_option("--layers", o.layers);
  app.add_option("--hidden", o.hidden);
  app.add_option("--heads", o.heads);
  app.add_option("--kv-heads", o.kv_heads);
  app.add_option("--head-dim", o.head_dim);
  app.add_option("--mlp", o.mlp);
  app.add_option("--vocab", o.vocab);
  app.add_option("--shapes", o.shapes, "SEQxBATCH,... (default " + o.shapes + ")");
  app.add_option("--capture", o.capture, "layer ids captured besides the final norm");
  app.add_option("--steps", o.steps, "timed forwards per shape (median)");
  app.add_option("--warmup", o.warmup, "untimed forwards per shape first");
  if (const int rc = cg::program::parse_command_line(app, "target_features_bench", argc, argv);
      rc >= 0)
    return rc;
  try {
    const cg::Device device = cg::Device::parse("cuda");
    cg::nn::Qwen3Config c;
    c.num_layers = o.layers;
    c.hidden_size = o.hidden;
    c.num_heads = o.heads;
    c.num_kv_heads = o.kv_heads;
    c.head_dim = o.head_dim;
    c.intermediate_size = o.mlp;
    c.vocab_size = o.vocab;
    c.rope_theta = 1e6;
    c.rms_eps = 1e-6;
    const std::vector<int64_t> capture = bench::parse_ids(o.capture);
    cg::Generator gen(1);
    // Random weights drawn on the GPU in bf16 (Linear's and Embedding's own init).
    cg::nn::Qwen3Model model(c, {.dtype = cg::DType::bf16, .device = device, .generator = &gen});
    model.eval();
    model.freeze();
    cg::NoGradGuard no_grad;
    cg::CachingAllocator& alloc = cg::allocator_for(device);
    cg::backend_for(device).synchronize(device.index);
    std::printf(
        "chunkgrad target features: %lld layers, hidden %lld, %lld/%lld heads x %lld, MLP %lld, "
        "V %lld (embedding only), bf16, capture %s + final norm; weights %.2f GiB\n",
        (long long)c.num_layers, (long long)c.hidden_size, (long long)c.num_heads,
        (long long)c.num_kv_heads, (long long)c.head_dim, (long long)c.intermediate_size,
        (long long)c.vocab_size, o.capture.c_str(),
        double(alloc.stats().allocated_bytes.current) / kGiB);
    std::printf("%-10s %6s %6s %8s %10s %12s %9s\n", "side", "seq", "batch", "tokens", "ms",
                "tokens/s", "peak GiB");
    cg::Generator ids_gen(2);
    std::string paths;
    for (const auto& [seq, batch] : bench::parse_shapes(o.shapes)) {
      std::vector<int64_t> ids(static_cast<size_t>(seq * batch));
      for (auto& v : ids) v = static_cast<int64_t>(ids_gen.next_u64() % uint64_t(c.vocab_size));
      {  // which attention kernel the layers' causal prefill takes at this shape
        const cg::Tensor q = cg::empty({batch, c.num_heads, seq, c.head_dim},
                                       {.dtype = cg::DType::bf16, .device = device});
        const cg::Tensor k = cg::empty({batch, c.num_kv_heads, seq, c.head_dim},
                                       {.dtype = cg::DType::bf16, .device = device});
        const cg::ResolvedAttentionMask m =
            cg::resolve_attention_mask(cg::AttentionMask::causal(), batch, c.num_heads, seq, seq,
                                       device, "target_features_bench");
        paths += (paths.empty() ? "" : ", ") + std::to_string(seq) + "x" + std::to_string(batch) +
                 ": " + cg::cuda::cuda_attention_path(q, k, m, 1.0 / std::sqrt(double(c.head_dim)));
      }
      alloc.reset_peak_stats();
      std::vector<double> ms;
      for (int step = 0; step < o.warmup + o.steps; ++step) {
        const auto t0 = std::chrono::steady_clock::now();
        {
          const cg::Tensor t =
              cg::from_ints(ids, {batch, seq}, {.dtype = cg::DType::i64, .device = device});
          cg::nn::DecoderOutput out = model.forward(t, {.capture_layers = capture});
          cg::backend_for(device).synchronize(device.index);
        }
        const double elapsed =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        if (step >= o.warmup) ms.push_back(elapsed);
      }
      const double median = cg::median(ms);
      const double tokens = double(seq * batch);
      std::printf("%-10s %6lld %6lld %8lld %10.1f %12.0f %9.2f\n", "chunkgrad", (long long)seq,
                  (long long)batch, (long long)(seq * batch), median, tokens / (median / 1e3),
                  double(alloc.stats().allocated_bytes.peak) / kGiB);
      std::fflush(stdout);
    }
    std::printf("attention path (auto): %s\n", paths.c_str());
  } catch (const cg::Error& e) {
    std::fprintf(stderr, "target_features_bench: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
