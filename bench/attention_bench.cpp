// Why this file exists: the GPU attention speed of issue 11, measured in one run, next to
// PyTorch (bench/attention_torch.py prints the same rows; run_attention_bench.sh runs
// both). Three tables, bf16, head_dim 128, GQA 40/8 (--heads 32/8,40/8 gives the DFlash
// tables at each head count; 32/8 is the 27B-class drafter's):
//   causal   the target LM's attention: 4096 tokens, causal mask
//   dflash   the drafter's full layers: 1024 blocks x 24 query slots over 4096 context
//            keys (Sk = 4096 + 24576); block b's anchor is 4 * (1 + (389 b mod 1024)), so
//            the anchors are 4, 8, ..., 4096 in a fixed shuffled order (the same formula
//            as the PyTorch script); --anchors sorted puts them in ascending order, as the
//            trainer's are (which the forward's dense tiles use: Note [Dense DFlash rows])
//   sliding  the drafter's sliding layers: the same blocks and anchors under the sliding
//            rule of window --window (2048): slot k sees context keys from
//            anchor + k - (W - 1) and its block's slots up to k (ops/attention_mask.h)
// --path picks the attention path(s) (auto, cudnn, flash, rows), one table each; the
// table head says what ran (for cudnn: the cuDNN version and engines). For each: forward,
// backward (dq, dk, dv) and forward + backward, medians over --repeats
// (CUDA events on the compute stream, after a warm-up), in ms and TFLOP/s. FLOPs count
// the visible (query, key) pairs only, counted exactly for each rule (visible_pairs):
// 4 hd per pair forward, 10 hd backward (2.5x), as FlashAttention's benchmarks do. The "dq only" and "dk, dv only" rows time one of the
// two backward passes (plus delta) on flash; their TFLOP/s count 2 and 3 of the 5 backward
// GEMMs. cuDNN's backward computes all three gradients in one pass, so on cudnn those rows
// time the whole backward.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <CLI/CLI.hpp>

#include "core/factories.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_attention.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cudnn_sdpa.h"
#include "cuda/device_info.h"
#include "cuda/event_timer.h"
#include "examples/common/program.h"
#include "ops/attention_mask.h"

namespace {

struct Options {
  int64_t batch = 1, hq = 40, hkv = 8, hd = 128, tokens = 4096;
  int64_t context = 4096, blocks = 1024, block_size = 24, window = 2048;
  std::string anchors = "shuffled";
  std::string heads;  // "HQ/HKV,..." for the DFlash tables; empty: --hq/--hkv
  std::string dtype = "bf16";
  std::string which = "causal,dflash,sliding";
  std::string paths = "auto";  // comma-separated: auto, cudnn, flash, rows
  int repeats = 10;
};

// Median milliseconds of f() on the compute stream, after one warm-up run.
double time_ms(int repeats, const std::function<void()>& f) {
  return cg::cuda::median_event_ms(cg::cuda::compute_stream(0), repeats, f);
}

void row(const std::string& name, double ms, double flops) {
  std::printf("%-26s %10.3f %10.1f\n", name.c_str(), ms, flops / (ms * 1e-3) / 1e12);
}

// Times forward, backward and both for one shape and mask; pairs = visible (query, key)
// pairs per (batch, query head).
cg::cuda::AttentionPath parse_path(const std::string& p) {
  if (p == "cudnn") return cg::cuda::AttentionPath::cudnn;
  if (p == "flash") return cg::cuda::AttentionPath::flash;
  if (p == "rows") return cg::cuda::AttentionPath::rows;
  CG_CHECK(p == "auto", "--path: unknown path '", p, "' (auto, cudnn, flash, rows)");
  return cg::cuda::AttentionPath::automatic;
}

// What a path runs as: the automatic choice with its reason, or cuDNN's engines.
std::string path_note(const std::string& path, const cg::Tensor& q, const cg::Tensor& k,
                      const cg::Tensor& v, const cg::ResolvedAttentionMask& m, double scale) {
  std::string note =
      path == "auto" ? "auto -> " + cg::cuda::cuda_attention_path(q, k, m, scale) : path;
  if (path == "cudnn" || note == "auto -> cudnn") {
    cg::cuda::SdpaProblem p;
    p.dtype = q.dtype();
    p.B = q.size(0);
    p.Hq = q.size(1);
    p.Hkv = k.size(1);
    p.Sq = q.size(2);
    p.Sk = k.size(2);
    p.hd = q.size(3);
    p.causal = m.kind == cg::AttentionMask::Kind::causal;
    // The bench's operands and outputs are contiguous: the keys the real calls use.
    auto op = [](const cg::Tensor& t) {
      return cg::cuda::SdpaOperand{t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)};
    };
    p.q = op(q);
    p.k = op(k);
    p.v = op(v);
    p.o = op(q);
    p.dout = op(q);
    note += " [cuDNN " + std::to_string(cg::cuda::cudnn_runtime_version()) + "; fwd " +
            cg::cuda::cudnn_sdpa_describe(0, p, false) + "; bwd " +
            cg::cuda::cudnn_sdpa_describe(0, p, true) + "]";
  }
  return note;
}

void bench_shape(const Options& o, const std::string& name, int64_t Sq, int64_t Sk,
                 const cg::AttentionMask& mask, double pairs, const std::string& path_name) {
  const cg::cuda::AttentionPath path = parse_path(path_name);
  const cg::Device d = cg::cuda_device(0);
  const cg::DType dt = cg::parse_dtype(o.dtype);
  cg::Generator gen(7);
  const cg::Tensor q = cg::randn({o.batch, o.hq, Sq, o.hd}, {.dtype = dt, .device = d}, &gen);
  const cg::Tensor k = cg::randn({o.batch, o.hkv, Sk, o.hd}, {.dtype = dt, .device = d}, &gen);
  const cg::Tensor v = cg::randn({o.batch, o.hkv, Sk, o.hd}, {.dtype = dt, .device = d}, &gen);
  const cg::Tensor g = cg::randn({o.batch, o.hq, Sq, o.hd}, {.dtype = dt, .device = d}, &gen);
  const cg::ResolvedAttentionMask m =
      cg::resolve_attention_mask(mask, o.batch, o.hq, Sq, Sk, d, "attention_bench");
  const double scale = 1.0 / std::sqrt(static_cast<double>(o.hd));
  const double fwd_flops = 4.0 * o.hd * pairs * o.batch * o.hq;
  cg::cuda::CudaKernels gpu(path);  // the CUDA table with this path forced
  const cg::AttentionForward f = gpu.attention_forward(q, k, v, m, scale);

  std::printf(
      "\n%s: B=%lld Hq=%lld Hkv=%lld Sq=%lld Sk=%lld hd=%lld %s, path %s, "
      "%.1f%% of the [Sq, Sk] pairs visible%s, median of %d\n",
      name.c_str(), (long long)o.batch, (long long)o.hq, (long long)o.hkv, (long long)Sq,
      (long long)Sk, (long long)o.hd, o.dtype.c_str(),
      path_note(path_name, q, k, v, m, scale).c_str(), 100.0 * pairs / (double(Sq) * double(Sk)),
      name == "causal" ? "" : (", anchors " + o.anchors).c_str(), o.repeats);
  std::printf("%-26s %10s %10s\n", "row", "ms", "TFLOP/s");
  const double fwd = time_ms(o.repeats, [&] { gpu.attention_forward(q, k, v, m, scale); });
  row(name + " fwd", fwd, fwd_flops);
  const double bwd = time_ms(o.repeats, [&] {
    gpu.attention_backward(g, q, k, v, f.out, f.lse, m, scale, true, true, true);
  });
  row(name + " bwd", bwd, 2.5 * fwd_flops);
  const double bwd_dq = time_ms(o.repeats, [&] {
    gpu.attention_backward(g, q, k, v, f.out, f.lse, m, scale, true, false, false);
  });
  row(name + " bwd (dq only)", bwd_dq, 1.0 * fwd_flops);
  const double bwd_dkdv = time_ms(o.repeats, [&] {
    gpu.attention_backward(g, q, k, v, f.out, f.lse, m, scale, false, true, true);
  });
  row(name + " bwd (dk, dv only)", bwd_dkdv, 1.5 * fwd_flops);
  const double both = time_ms(o.repeats, [&] {
    const cg::AttentionForward r = gpu.attention_forward(q, k, v, m, scale);
    gpu.attention_backward(g, q, k, v, r.out, r.lse, m, scale, true, true, true);
  });
  row(name + " fwd+bwd", both, 3.5 * fwd_flops);
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The visible (query, key) pairs per (batch, query head) of the DFlash rule over these
// anchors: full (window 0) or sliding (window W; ops/attention_mask.h), slot by slot.
double visible_pairs(const std::vector<int64_t>& anchors, int64_t block_size, int64_t window) {
  double pairs = 0;
  for (int64_t a : anchors) {
    if (a < 0) continue;  // padded: sees nothing
    if (window == 0) {
      pairs += static_cast<double>(block_size) * static_cast<double>(a + block_size);
      continue;
    }
    for (int64_t k = 0; k < block_size; ++k) {
      const int64_t first_context = std::max<int64_t>(0, a + k - (window - 1));
      const int64_t first_slot = std::max<int64_t>(0, k - (window - 1));
      pairs += static_cast<double>(std::max<int64_t>(0, a - first_context) + (k + 1 - first_slot));
    }
  }
  return pairs;
}

// The (Hq, Hkv) pairs of --heads ("32/8,40/8"), or --hq/--hkv when it is empty.
std::vector<std::pair<int64_t, int64_t>> head_counts(const Options& o) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const std::string& h : split(o.heads)) {
    const size_t slash = h.find('/');
    CG_CHECK(slash != std::string::npos, "--heads: '", h, "' is not HQ/HKV (e.g. 32/8)");
    const int64_t hq = std::stoll(h.substr(0, slash)), hkv = std::stoll(h.substr(slash + 1));
    CG_CHECK(hq > 0 && hkv > 0 && hq % hkv == 0, "--heads: '", h,
             "' needs HQ a positive multiple of HKV");
    out.emplace_back(hq, hkv);
  }
  if (out.empty()) out.emplace_back(o.hq, o.hkv);
  return out;
}

// One path's table; a path that cannot run the shape prints why and the others go on.
void run_path(const std::string& path, const std::function<void()>& f) {
  try {
    f();
  } catch (const cg::Error& e) {
    std::printf("\npath %s: cannot run: %s\n", path.c_str(), e.what());
  }
}

}  // namespace

int run_bench(int argc, char** argv) {
  Options o;
  CLI::App app{"chunkgrad GPU attention benchmark: causal and DFlash block rule, fwd and bwd"};
  app.add_option("--which", o.which, "comma-separated: causal, dflash, sliding");
  app.add_option("--path", o.paths,
                 "comma-separated attention paths, each its own table: "
                 "auto, cudnn, flash, rows (a path that cannot run a shape says why)");
  app.add_option("--batch", o.batch, "batch")->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--hq", o.hq, "query heads")->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--hkv", o.hkv, "key/value heads")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--hd", o.hd, "head dim")->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--tokens", o.tokens, "causal: sequence length")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--context", o.context, "dflash: context keys")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--blocks", o.blocks, "dflash: blocks")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--block-size", o.block_size, "dflash: query slots per block")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--window", o.window, "sliding: the window W")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  app.add_option("--anchors", o.anchors, "dflash: the anchors' order, shuffled | sorted")
      ->check(CLI::IsMember({"shuffled", "sorted"}));
  app.add_option("--heads", o.heads,
                 "dflash, sliding: comma-separated HQ/HKV head counts, one table each "
                 "(e.g. 32/8,40/8; default --hq/--hkv)");
  app.add_option("--dtype", o.dtype, "bf16 | f16 | f32")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  app.add_option("--repeats", o.repeats, "timed runs per row (median)")
      ->check(cg::program::integer_in(1, int64_t{1} << 30));
  if (const int rc = cg::program::parse_command_line(app, "attention_bench", argc, argv); rc >= 0)
    return rc;
  CG_CHECK(o.hq % o.hkv == 0, "--hq must be a multiple of --hkv");
  head_counts(o);  // checks --heads before the device starts
  CG_CHECK(cg::cuda::device_count() > 0, "no CUDA device: ", cg::cuda::unavailable_reason());
  std::printf("chunkgrad GPU attention on %s\n", cg::cuda::device_properties(0).summary().c_str());

  if (o.which.find("causal") != std::string::npos) {
    const double S = static_cast<double>(o.tokens);
    for (const std::string& p : split(o.paths)) {
      run_path(p, [&] {
        bench_shape(o, "causal", o.tokens, o.tokens, cg::AttentionMask::causal(), S * (S + 1) / 2,
                    p);
      });
    }
  }
  std::vector<int64_t> anchors(o.blocks);
  for (int64_t b = 0; b < o.blocks; ++b) {
    anchors[b] = std::min(o.context, 4 * (1 + (389 * b) % 1024));
  }
  if (o.anchors == "sorted") std::sort(anchors.begin(), anchors.end());
  const cg::Tensor a = cg::from_ints(anchors, {o.blocks});
  const int64_t Sq = o.blocks * o.block_size, Sk = o.context + o.blocks * o.block_size;
  // The full rule's table, then the sliding rule's, for each head count.
  for (const auto& [hq, hkv] : head_counts(o)) {
    Options oh = o;
    oh.hq = hq;
    oh.hkv = hkv;
    for (const int64_t window : {int64_t{0}, o.window}) {
      const std::string name = window == 0 ? "dflash" : "sliding";
      if (o.which.find(name) == std::string::npos) continue;
      const cg::AttentionMask mask =
          cg::AttentionMask::dflash_blocks(o.context, o.block_size, a, cg::Tensor(), window);
      const double pairs = visible_pairs(anchors, o.block_size, window);
      for (const std::string& p : split(o.paths)) {
        run_path(p, [&] { bench_shape(oh, name, Sq, Sk, mask, pairs, p); });
      }
    }
  }
  std::printf(
      "\n(TFLOP/s: 4 hd flops per visible (query, key) pair forward, 2.5x that backward)\n");
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run_bench(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chunkgrad attention_bench: error: %s\n", e.what());
  }
  return 1;
}
