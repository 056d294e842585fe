// Why this file exists: issue 21's MoE measurement: the CUDA moe_route and moe_experts
// entries (cuda/cuda_moe.cpp, cuda/moe_kernels.cu) at the Qwen3.5-35B-A3B layer shape,
// next to PyTorch (bench/moe_torch.py prints the same rows for transformers' eager loop
// over experts and torch._grouped_mm; run_moe_bench.sh runs both). The shape comes from
// the published 35B-A3B text_config: hidden_size 2048 (H), num_experts 256 (E),
// num_experts_per_tok 8 (k), moe_intermediate_size 512 (I); the shared expert is a plain
// MLP and not timed here. Random bf16 weights and router logits; T = 4096 tokens
// (prefill) and T = 1..16 (decoding).
// Rows (medians over --repeats of CUDA-event timings after a warm-up):
//   route                      moe_route on [T, E] logits (rate: logit bytes read)
//   experts automatic          what the table's entry runs (it says which GEMM path)
//   experts grouped / loop     each GEMM path forced (Note [MoE grouped GEMM])
//   stage ...                  the non-GEMM launchers alone at T = --tokens
//
// Note [The MoE FLOP count]: each (token, slot) pair multiplies its row by its expert's
// gate_up [2I, H] and down [H, I]: 2 (2 I H + H I) = 6 H I FLOPs, so a call does
// 6 T k H I (at the 35B-A3B shape 6.29 MFLOP per pair, 206 GFLOP at T = 4096). The decode rows
// also print the expert weights read (3 H I bytes x element size per distinct expert hit)
// as TB/s, the bound that matters when rows are few.
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_kernels.h"
#include "cuda/device_info.h"
#include "cuda/event_timer.h"
#include "cuda/moe_kernels.h"
#include "examples/common/program.h"

namespace {

struct Options {
  int64_t tokens = 4096, hidden = 2048, experts = 256, top_k = 8, intermediate = 512;
  std::string decode = "1,2,4,8,16";
  std::string dtype = "bf16";
  int repeats = 10;
};

double time_ms(int repeats, const std::function<void()>& f) {
  return cg::cuda::median_event_ms(cg::cuda::compute_stream(0), repeats, f);
}

void row(const std::string& name, double ms, double amount, const char* unit) {
  std::printf("%-34s %10.3f %10.2f %s\n", name.c_str(), ms, amount / (ms * 1e-3) / 1e12, unit);
}

const char* path_name(cg::cuda::MoeGemmPath p) {
  using cg::cuda::MoeGemmPath;
  return p == MoeGemmPath::grouped ? "grouped" : (p == MoeGemmPath::loop ? "loop" : "automatic");
}

struct Weights {
  cg::Tensor gate_up, down;
};

// Every experts row for T tokens; `bytes_too` adds the weight-bandwidth column.
void bench_tokens(const Options& o, const Weights& w, int64_t T, bool bytes_too) {
  const cg::DType dt = cg::parse_dtype(o.dtype);
  const cg::Device d = cg::cuda_device(0);
  cg::Generator gen(100 + static_cast<uint64_t>(T));
  const cg::Tensor x = cg::randn({T, o.hidden}, {.dtype = dt, .device = d}, &gen);
  const cg::Tensor logits = cg::randn({T, o.experts}, {.dtype = dt, .device = d}, &gen);
  cg::cuda::CudaKernels gpu;
  const cg::MoeRouting routing = gpu.moe_route(logits, o.top_k);
  std::set<double> hit;
  for (double e : routing.indices.to_vector()) hit.insert(e);
  const double flops =
      6.0 * static_cast<double>(T * o.top_k) * static_cast<double>(o.hidden * o.intermediate);
  const double bytes = 3.0 * static_cast<double>(hit.size()) *
                       static_cast<double>(o.hidden * o.intermediate) *
                       static_cast<double>(cg::element_size(dt));
  const std::string t = " T=" + std::to_string(T);
  if (!bytes_too) {
    row("route" + t, time_ms(o.repeats, [&] { gpu.moe_route(logits, o.top_k); }),
        static_cast<double>(T * o.experts * static_cast<int64_t>(cg::element_size(dt))),
        "TB/s of logits read");
  }
  using cg::cuda::MoeGemmPath;
  for (MoeGemmPath p : {MoeGemmPath::automatic, MoeGemmPath::grouped, MoeGemmPath::loop}) {
    std::string name = std::string("experts ") + path_name(p) + t;
    try {
      const double ms =
          time_ms(o.repeats, [&] { cg::cuda::run_moe_experts(x, w.gate_up, w.down, routing, p); });
      if (p == MoeGemmPath::automatic) {
        name += std::string(" (") + path_name(cg::cuda::last_moe_gemm_path()) + ")";
      }
      row(name, ms, flops, "TFLOP/s");
      if (bytes_too) {
        std::printf("%-34s %10s %10.2f TB/s of expert weights (%zu experts hit)\n", "", "",
                    bytes / (ms * 1e-3) / 1e12, hit.size());
      }
    } catch (const std::exception& e) { std::printf("%-34s failed: %s\n", name.c_str(), e.what()); }
  }
}

// The non-GEMM stages of one T = o.tokens call alone (moe_kernels.h's launchers on buffers
// sized as run_moe_experts sizes them): what the grouped GEMMs leave of the total.
void bench_stages(const Options& o, const Weights& w) {
  const cg::DType dt = cg::parse_dtype(o.dtype);
  const cg::Device d = cg::cuda_device(0);
  const int64_t T = o.tokens, H = o.hidden, I = o.intermediate, E = o.experts, k = o.top_k;
  const int64_t R = T * k;
  cg::Generator gen(100 + static_cast<uint64_t>(T));
  const cg::Tensor x = cg::randn({T, H}, {.dtype = dt, .device = d}, &gen);
  const cg::Tensor logits = cg::randn({T, E}, {.dtype = dt, .device = d}, &gen);
  cg::cuda::CudaKernels gpu;
  const cg::MoeRouting routing = gpu.moe_route(logits, k);
  const cg::cuda::MoeScratch m = cg::cuda::make_moe_scratch(x, w.gate_up, w.down, k);
  const cg::Tensor out = cg::zeros({T, H}, {.dtype = dt, .device = d});
  int32_t *rank = m.rank, *pos = m.pos, *counts = m.counts, *offsets = m.offsets;
  const cg::cuda::MoeBuffers& b = m.buffers;
  const void** p = m.ptr_array;
  const cg::Tensor &xs = m.xs, &h = m.h, &act = m.act, &ys = m.ys;
  const size_t eb = cg::element_size(dt);
  const int32_t* idx = routing.indices.data<int32_t>();
  const cudaStream_t s = cg::cuda::compute_stream(0);
  const std::string t = " T=" + std::to_string(T);
  const double moved = static_cast<double>(R * H) * static_cast<double>(eb);  // one xs / ys
  row("  stage plan (rank, offsets)" + t,
      time_ms(o.repeats,
              [&] { cg::cuda::launch_moe_plan(idx, R, E, b, rank, counts, offsets, p, s); }),
      static_cast<double>(R) * 4.0, "TB/s of indices read");
  row("  stage gather" + t,
      time_ms(o.repeats,
              [&] {
                cg::cuda::launch_moe_gather(dt, x.data_ptr(), idx, rank, offsets, pos,
                                            xs.data_ptr(), R, k, H, s);
              }),
      2.0 * moved, "TB/s");
  row("  stage swiglu" + t,
      time_ms(o.repeats,
              [&] { cg::cuda::launch_moe_swiglu(dt, h.data_ptr(), act.data_ptr(), R, I, s); }),
      3.0 * static_cast<double>(R * I) * static_cast<double>(eb), "TB/s");
  row("  stage combine" + t,
      time_ms(o.repeats,
              [&] {
                cg::cuda::launch_moe_combine(dt, dt, routing.weights.dtype(), ys.data_ptr(),
                                             routing.weights.data_ptr(), pos, out.data_ptr(), T, k,
                                             H, s);
              }),
      moved, "TB/s");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"chunkgrad mixture-of-experts kernels (routing, grouped expert GEMMs) on the GPU"};
  app.add_option("--tokens", o.tokens, "prefill tokens T")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--decode", o.decode, "comma-separated decoding token counts");
  app.add_option("--hidden", o.hidden, "hidden_size H")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--experts", o.experts, "num_experts E (at most 1536)")
      ->check(CLI::Range(1, 1536));
  app.add_option("--top-k", o.top_k, "num_experts_per_tok k")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--intermediate", o.intermediate, "moe_intermediate_size I")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--dtype", o.dtype, "bf16 | f16 | f32")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  app.add_option("--repeats", o.repeats, "timed runs per row (median)")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  if (const int rc = cg::program::parse_command_line(app, "moe_bench", argc, argv); rc >= 0)
    return rc;
  if (o.top_k > o.experts) {
    std::fprintf(stderr, "moe_bench: --top-k %lld exceeds --experts %lld\n", (long long)o.top_k,
                 (long long)o.experts);
    return 2;
  }
  std::vector<int64_t> decode;
  std::stringstream ss(o.decode);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long long t = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || t < 1) {
      std::fprintf(stderr, "moe_bench: --decode wants positive integers, got '%s'\n", item.c_str());
      return 2;
    }
    decode.push_back(t);
  }
  if (cg::cuda::device_count() == 0) {
    std::fprintf(stderr, "moe_bench: no CUDA device (%s)\n",
                 cg::cuda::unavailable_reason().c_str());
    return 1;
  }
  const cg::DType dt = cg::parse_dtype(o.dtype);
  const cg::Device d = cg::cuda_device(0);
  cg::Generator gen(7);
  Weights w;
  w.gate_up = cg::randn({o.experts, 2 * o.intermediate, o.hidden}, {.dtype = dt, .device = d}, &gen,
                        0.0, 0.02);
  w.down =
      cg::randn({o.experts, o.hidden, o.intermediate}, {.dtype = dt, .device = d}, &gen, 0.0, 0.02);
  std::printf("chunkgrad MoE on %s\n", cg::cuda::device_properties(0).summary().c_str());
  std::printf(
      "H=%lld E=%lld k=%lld I=%lld %s, median of %d; TFLOP/s = 6 T k H I / time (Note "
      "[The MoE FLOP count])\n",
      (long long)o.hidden, (long long)o.experts, (long long)o.top_k, (long long)o.intermediate,
      o.dtype.c_str(), o.repeats);
  std::printf("%-34s %10s %10s\n", "row", "ms", "rate");
  bench_tokens(o, w, o.tokens, false);
  bench_stages(o, w);
  std::printf("\ndecoding\n");
  for (int64_t T : decode) bench_tokens(o, w, T, true);
  return 0;
}
