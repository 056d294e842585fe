// Why this file exists: issue 21's prefill throughput, measured against the only bar that
// does not depend on another framework: the GEMM-bound limit. A Qwen3.5 target at the 27B
// shape is built straight on the GPU in bf16 with random weights (no checkpoint; the
// modules' own init, drawn there) and run as `chunkgrad features` runs it (no autograd,
// the layers' outputs captured, the final norm, no lm_head), on sequences of 4096.
//
// The shape, field by field, from Qwen/Qwen3.5-27B's config.json (text_config), as the
// public copies of it read (e.g. the TevunahAi/Qwen3.5-27B model card's architecture
// table, and Qwen3_5Config(...) reproductions of the file in public code):
//   num_hidden_layers 64, layer_types linear x3 + full, repeated (full_attention_interval
//   4: 48 Gated DeltaNet + 16 full attention), hidden_size 5120, intermediate_size 17408,
//   num_attention_heads 24, num_key_value_heads 4, head_dim 256, attn_output_gate true,
//   vocab_size 248320, tie_word_embeddings false, linear_num_key_heads 16,
//   linear_num_value_heads 48, linear_key_head_dim 128, linear_value_head_dim 128,
//   linear_conv_kernel_dim 4, partial_rotary_factor 0.25 (64 of 256 dims rotate),
//   rope_theta 1e7, rms_norm_eps 1e-6. Every one is an option (the defaults are these).
//
// Note [GEMM-bound limit]: the time the model's GEMMs alone would take at chunkgrad's own
// bf16 GEMM speed on this card, measured in this run. For each distinct GEMM shape of the
// forward (M = the tokens of one forward, K x N a weight), the CUDA kernel table's gemm
// (cuBLASLt) is timed (median of --gemm-repeats, CUDA events); the limit is
// sum(count x ms) over the shapes, and the ratio quoted is limit_ms / forward_ms (1.0 =
// every non-GEMM op free). The GEMMs of one token, with their FLOPs (2 K N each):
//   full attention (16): q_proj 5120 x 12288 (query + gate per head), k_proj and v_proj
//                        5120 x 1024, o_proj 6144 x 5120
//   Gated DeltaNet (48): in_proj_qkv 5120 x 10240 (q, k: 16 x 128; v: 48 x 128),
//                        in_proj_z 5120 x 6144, in_proj_a and in_proj_b 5120 x 48,
//                        out_proj 6144 x 5120
//   MLP (64):            gate_proj, up_proj 5120 x 17408, down_proj 17408 x 5120
// about 48.7 GFLOP a token. Not counted (not GEMMs, or not in this forward): attention's
// QK^T and PV, the DeltaNet recurrence (chunked on the GPU), the conv, norms, lm_head.
//
// Output: per shape (sequence x batch), the median over --steps of tokens/s (host clock
// around a synchronised forward, the ids' upload included), the allocator's peak (weights
// included), the GEMM-bound limit and the ratio. bench/qwen3_5_prefill_torch.py is the
// transformers twin; bench/run_qwen3_5_prefill_bench.sh runs both.
//   ./build/bench/qwen3_5_prefill_bench --shapes 4096x1,4096x4 --steps 3
#include <chrono>
#include <cstdio>
#include <map>
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
#include "core/views.h"
#include "cuda/compute_stream.h"
#include "cuda/device_info.h"
#include "cuda/event_timer.h"
#include "examples/common/program.h"
#include "nn/qwen3.h"
#include "ops/kernels.h"

namespace {

struct Options {
  int64_t layers = 64, interval = 4, hidden = 5120, heads = 24, kv_heads = 4, head_dim = 256;
  int64_t mlp = 17408, vocab = 248320;
  int64_t lin_k_heads = 16, lin_v_heads = 48, lin_k_dim = 128, lin_v_dim = 128, conv = 4;
  double partial_rotary = 0.25, theta = 1e7;
  std::string shapes = "4096x1,4096x2,4096x4";
  std::string capture = "1,16,31,46,61";
  int steps = 3, warmup = 1, gemm_repeats = 10;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

cg::nn::Qwen3Config config_of(const Options& o) {
  cg::nn::Qwen3Config c;
  c.num_layers = o.layers;
  c.hidden_size = o.hidden;
  c.num_heads = o.heads;
  c.num_kv_heads = o.kv_heads;
  c.head_dim = o.head_dim;
  c.intermediate_size = o.mlp;
  c.vocab_size = o.vocab;
  c.rope_theta = o.theta;
  c.rms_eps = 1e-6;
  c.tie_embeddings = false;
  c.family = "qwen3_5";
  c.attn_output_gate = true;
  c.zero_centred_norm = true;
  c.partial_rotary_factor = o.partial_rotary;
  c.linear_num_key_heads = o.lin_k_heads;
  c.linear_num_value_heads = o.lin_v_heads;
  c.linear_key_head_dim = o.lin_k_dim;
  c.linear_value_head_dim = o.lin_v_dim;
  c.linear_conv_kernel_dim = o.conv;
  for (int64_t i = 0; i < o.layers; ++i)
    c.layer_types.push_back((i + 1) % o.interval == 0 ? "full_attention" : "linear_attention");
  c.validate();
  return c;
}

// The forward's GEMMs of one token (Note [GEMM-bound limit]): (K, N) -> how many.
std::map<std::pair<int64_t, int64_t>, int64_t> gemm_shapes(const cg::nn::Qwen3Config& c) {
  std::map<std::pair<int64_t, int64_t>, int64_t> n;
  const int64_t H = c.hidden_size;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.is_linear_layer(i)) {
      const int64_t key_dim = c.linear_num_key_heads * c.linear_key_head_dim;
      const int64_t value_dim = c.linear_num_value_heads * c.linear_value_head_dim;
      n[{H, 2 * key_dim + value_dim}] += 1;   // in_proj_qkv
      n[{H, value_dim}] += 1;                 // in_proj_z
      n[{H, c.linear_num_value_heads}] += 2;  // in_proj_a, in_proj_b
      n[{value_dim, H}] += 1;                 // out_proj
    } else {
      const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
      n[{H, c.attn_output_gate ? 2 * q : q}] += 1;  // q_proj (query + gate per head)
      n[{H, kv}] += 2;                              // k_proj, v_proj
      n[{q, H}] += 1;                               // o_proj
    }
    n[{H, c.intermediate_size}] += 2;  // gate_proj, up_proj
    n[{c.intermediate_size, H}] += 1;  // down_proj
  }
  return n;
}

double flops_per_token(const std::map<std::pair<int64_t, int64_t>, int64_t>& shapes) {
  double f = 0;
  for (const auto& [kn, count] : shapes) f += 2.0 * double(kn.first) * double(kn.second) * count;
  return f;
}

// Milliseconds the forward's GEMMs take at M rows (Note [GEMM-bound limit]); prints each shape.
double gemm_bound_ms(const std::map<std::pair<int64_t, int64_t>, int64_t>& shapes, int64_t M,
                     cg::Device dev, int repeats) {
  cg::DeviceKernels& k = cg::kernels_for(dev, "gemm");
  const cudaStream_t stream = cg::cuda::compute_stream(dev.index);
  double total = 0;
  for (const auto& [kn, count] : shapes) {
    const auto [K, N] = kn;
    cg::Tensor a = cg::raw::empty({M, K}, cg::DType::bf16, dev);
    cg::Tensor w = cg::raw::empty({N, K}, cg::DType::bf16, dev);  // nn.Linear's layout
    cg::raw::fill_(a, 0.01);
    cg::raw::fill_(w, 0.02);
    cg::Tensor out = cg::raw::empty({M, N}, cg::DType::bf16, dev);
    const cg::Tensor b = cg::raw::transpose(w, 0, 1);
    const double ms =
        cg::cuda::median_event_ms(stream, repeats, [&] { k.gemm(a, b, out, 1.0, 0.0); });
    std::printf("  gemm M %lld K %6lld N %6lld x %3lld: %8.3f ms each, %6.1f TFLOP/s\n",
                (long long)M, (long long)K, (long long)N, (long long)count, ms,
                2.0 * double(M) * K * N / (ms * 1e-3) / 1e12);
    total += ms * double(count);
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Qwen3.5 prefill at the 27B shape (random bf16 weights) vs its GEMM-bound limit"};
  app.add_option("--layers", o.layers);
  app.add_option("--full-attention-interval", o.interval);
  app.add_option("--hidden", o.hidden);
  app.add_option("--heads", o.heads);
  app.add_option("--kv-heads", o.kv_heads);
  app.add_option("--head-dim", o.head_dim);
  app.add_option("--mlp", o.mlp);
  app.add_option("--vocab", o.vocab);
  app.add_option("--linear-key-heads", o.lin_k_heads);
  app.add_option("--linear-value-heads", o.lin_v_heads);
  app.add_option("--linear-key-dim", o.lin_k_dim);
  app.add_option("--linear-value-dim", o.lin_v_dim);
  app.add_option("--conv", o.conv);
  app.add_option("--partial-rotary", o.partial_rotary);
  app.add_option("--theta", o.theta);
  app.add_option("--shapes", o.shapes, "SEQxBATCH,... (default " + o.shapes + ")");
  app.add_option("--capture", o.capture, "layer ids captured besides the final norm");
  app.add_option("--steps", o.steps, "timed forwards per shape (median)");
  app.add_option("--warmup", o.warmup, "untimed forwards per shape first");
  app.add_option("--gemm-repeats", o.gemm_repeats, "timed runs per GEMM shape (median)");
  if (const int rc = cg::program::parse_command_line(app, "qwen3_5_prefill_bench", argc, argv);
      rc >= 0)
    return rc;
  try {
    CG_CHECK(o.steps >= 1 && o.warmup >= 0 && o.gemm_repeats >= 1,
             "--steps and --gemm-repeats must be >= 1 and --warmup >= 0");
    CG_CHECK(cg::cuda_available(), "qwen3_5_prefill_bench needs a CUDA GPU");
    const cg::Device device = cg::cuda_device(0);
    const cg::nn::Qwen3Config c = config_of(o);
    const std::vector<int64_t> capture = bench::parse_ids(o.capture);
    const auto shapes_kn = gemm_shapes(c);
    const double flops = flops_per_token(shapes_kn);
    cg::Generator gen(1);
    // Random weights drawn on the GPU in bf16 (the modules' own init), no checkpoint.
    cg::nn::Qwen3ForCausalLM lm(c, {.dtype = cg::DType::bf16, .device = device, .generator = &gen});
    lm.eval();
    lm.freeze();
    cg::NoGradGuard no_grad;
    cg::CachingAllocator& alloc = cg::allocator_for(device);
    cg::backend_for(device).synchronize(device.index);
    std::printf(
        "chunkgrad Qwen3.5 prefill on %s\n%s\nbf16, capture %s + final norm, no lm_head; "
        "weights %.2f GiB; GEMM FLOPs per token %.2f G\n",
        cg::cuda::device_properties(0).summary().c_str(), c.str().c_str(), o.capture.c_str(),
        double(alloc.stats().allocated_bytes.current) / kGiB, flops / 1e9);
    struct Row {
      int64_t seq, batch;
      double ms, peak_gib;
    };
    std::vector<Row> rows;
    cg::Generator ids_gen(2);
    for (const auto& [seq, batch] : bench::parse_shapes(o.shapes)) {
      std::vector<int64_t> ids(static_cast<size_t>(seq * batch));
      for (auto& v : ids) v = static_cast<int64_t>(ids_gen.next_u64() % uint64_t(c.vocab_size));
      alloc.reset_peak_stats();
      std::vector<double> ms;
      for (int step = 0; step < o.warmup + o.steps; ++step) {
        const auto t0 = std::chrono::steady_clock::now();
        {
          const cg::Tensor t =
              cg::from_ints(ids, {batch, seq}, {.dtype = cg::DType::i64, .device = device});
          cg::nn::DecoderOutput out = lm.forward(t, {.capture_layers = capture, .logits = false});
          cg::backend_for(device).synchronize(device.index);
        }
        const double elapsed =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        if (step >= o.warmup) ms.push_back(elapsed);
      }
      rows.push_back(
          {seq, batch, cg::median(ms), double(alloc.stats().allocated_bytes.peak) / kGiB});
      std::fflush(stdout);
    }
    std::printf("GEMM-bound limit (chunkgrad's bf16 gemm at the model's shapes):\n");
    std::vector<double> limits;
    for (const Row& r : rows)
      limits.push_back(gemm_bound_ms(shapes_kn, r.seq * r.batch, device, o.gemm_repeats));
    std::printf("%-10s %6s %6s %8s %10s %12s %9s %10s %12s %7s %9s\n", "side", "seq", "batch",
                "tokens", "ms", "tokens/s", "peak GiB", "gemm ms", "limit tok/s", "ratio",
                "TFLOP/s");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const double tokens = double(r.seq * r.batch);
      std::printf("%-10s %6lld %6lld %8lld %10.1f %12.0f %9.2f %10.1f %12.0f %7.3f %9.1f\n",
                  "chunkgrad", (long long)r.seq, (long long)r.batch, (long long)(r.seq * r.batch),
                  r.ms, tokens / (r.ms / 1e3), r.peak_gib, limits[i], tokens / (limits[i] / 1e3),
                  limits[i] / r.ms, flops * tokens / (r.ms * 1e-3) / 1e12);
    }
  } catch (const cg::Error& e) {
    std::fprintf(stderr, "qwen3_5_prefill_bench: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
