// Why this file exists: the table, the JSON and the lesson's text of memory_lesson (see
// examples/memory_lesson/lesson_report.h).
#include "examples/memory_lesson/lesson_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/allocator_stats.h"
#include "core/caching_allocator.h"
#include "core/error.h"

namespace memory_lesson {

namespace {

std::string mib(int64_t bytes) { return cg::format_bytes(bytes); }

// What the step starts with: the peaks are above these bytes (hidden, head, labels, teacher).
int64_t input_bytes(const cg::HeadLossInputs& in) {
  int64_t n = 0;
  for (const cg::Tensor* t : {&in.hidden, &in.head, &in.labels, &in.teacher_hidden})
    if (t->defined()) n += static_cast<int64_t>(t->nbytes());
  return n;
}

// Note [The lesson's text]: the closing explanation is derived from the measured numbers,
// so that it cannot contradict the table (tests/lessons_program_test.cpp checks each case):
// - with 16-bit logits naive makes fp32 working copies of all of [T, V] (two with a
//   teacher: the student's and the teacher's) and chunked only of one chunk, so chunked's
//   forward peak drops while what its graph keeps does not;
// - in backward chunked makes one chunk's logits gradient at a time, which lowers the step
//   peak, but each chunk's narrow of h passes back a gradient of all of h, [T, D] (zeros
//   outside the chunk), and the engine sums them: when D is near V those [T, D] blocks
//   lift chunked's step peak above naive's (--V 2000 --D 2048);
// - when one chunk holds all T rows, fused makes the whole [T, V] too;
// - --recompute keeps no dh: only the mean's [T] scale, and backward reruns the logits;
// - for f32 CE with a frozen head the fused forward peak is predicted by the byte formula
//   of docs/fused_loss.md and printed beside the measured one.
std::vector<std::string> explain(const std::vector<PathReport>& reports, const Options& o,
                                 int64_t T, int64_t D, int64_t V, cg::DType dtype,
                                 int64_t input_bytes, bool on_cpu) {
  auto find = [&](const std::string& name) -> const PathReport* {
    for (const PathReport& r : reports) {
      if (r.path == name && r.ok()) return &r;
    }
    return nullptr;
  };
  const PathReport *naive = find("naive"), *chunked = find("chunked"), *fused = find("fused");
  const int64_t fp32_logits = 4 * T * V;
  const bool half = cg::element_size(dtype) == 2;
  const bool teacher = cg::loss_kind_info(cg::parse_loss_kind(o.loss, "--loss")).needs_teacher;
  auto near = [&](int64_t bytes, int64_t target) {
    return bytes >= target && bytes < target + target / 20 + 4096;
  };
  // One decimal, or two where one would round a ratio that is not 1 to "1x" (fused's
  // 8.13 MiB against naive's 8.01 MiB read "1x").
  auto ratio = [](int64_t a, int64_t b) {
    const double r = double(a) / double(std::max<int64_t>(1, b));
    const double one_decimal = std::round(10.0 * r) / 10;
    if (one_decimal != 1.0 || a == b) return cg::detail::concat(one_decimal);
    char two_decimals[32];
    std::snprintf(two_decimals, sizeof two_decimals, "%.2f", r);
    return std::string(two_decimals);
  };

  // "all 512 rows", but "the one row" (not "all 1 rows").
  const std::string all_rows = T == 1 ? "the one row" : cg::detail::concat("all ", T, " rows");
  std::vector<std::string> lines;
  std::ostringstream line;
  auto flush = [&] {
    lines.push_back(line.str());
    line.str("");
  };

  if (naive) {
    line << "naive keeps "
         << (teacher ? "two [T, V] logits tensors, the student's and the teacher's,"
                     : "the logits [T, V]")
         << " until backward (its graph retains " << mib(naive->graph.total_bytes)
         << "); its forward peak " << mib(naive->forward_peak) << " adds "
         << mib(naive->forward_temporaries()) << " of temporaries";
    if (half && near(naive->largest_block, fp32_logits)) {
      line << ": its largest block, " << mib(naive->largest_block)
           << ", is an fp32 copy of all of [T, V]";
      const int64_t temps = naive->forward_temporaries();
      if (teacher && temps > 2 * fp32_logits * 95 / 100 && temps < 2 * fp32_logits * 105 / 100)
        line << ", and there are two of them, the student's and the teacher's";
      line << ": the loss works on " << o.dtype << " logits in fp32, and naive converts "
           << all_rows << " at once.";
    } else {
      line << " (its largest block: " << mib(naive->largest_block) << ").";
    }
    flush();
  }
  if (naive && chunked) {
    const double r = double(chunked->forward_peak) / double(naive->forward_peak);
    line << "chunked's forward peak " << mib(chunked->forward_peak);
    if (r < 0.9) {
      line << " is lower than naive's " << mib(naive->forward_peak)
           << ", but only by temporaries: chunked makes "
           << (half ? "its fp32 working copies" : "its working rows") << " one chunk ("
           << chunked->chunk_rows << " rows) at a time, naive for " << all_rows
           << ". What its graph keeps until backward -- every chunk's logits, "
           << mib(chunked->graph.total_bytes) << " -- is what naive's keeps ("
           << mib(naive->graph.total_bytes)
           << "): chunking under autograd does not lower that, so no peak falls below it.";
    } else if (r <= 1.1) {
      line << " is about naive's " << mib(naive->forward_peak)
           << ": its graph keeps every chunk's logits (" << mib(chunked->graph.total_bytes)
           << ", naive's graph " << mib(naive->graph.total_bytes)
           << ") until backward, so chunking under autograd does not lower the forward peak.";
    } else {
      line << " is above naive's " << mib(naive->forward_peak) << ": it keeps the same logits ("
           << mib(chunked->graph.total_bytes) << ") and adds per-chunk temporaries.";
    }
    flush();
    if (chunked->step_peak < naive->step_peak * 0.9) {
      line << "In backward chunked makes one chunk's gradient at a time, so its step peak "
           << mib(chunked->step_peak) << " is below naive's " << mib(naive->step_peak) << ".";
      flush();
    } else if (chunked->step_peak > naive->step_peak * 1.1) {
      line << "chunked's step peak " << mib(chunked->step_peak) << " is above naive's "
           << mib(naive->step_peak) << ": in backward each chunk's narrow of h passes back a "
           << "gradient of all of h, [T, D] = " << mib(4 * T * D)
           << " (zeros outside the chunk), and the engine sums them into one; "
              "at this shape (D = "
           << D << " next to V = " << V << ") a few [T, D] blocks outweigh the [T, V] gradient "
           << "naive makes once. `chunkgrad trace` files them as made in backward by "
              "NarrowBackward.";
      flush();
    }
  }
  if (fused) {
    const PathReport* ref = naive ? naive : chunked;
    if (o.recompute) {
      line << "fused with --recompute keeps no dh: its graph retains "
           << mib(fused->graph.total_bytes)
           << " (the mean's [T] scale; the inputs are the caller's), and backward reruns the "
              "chunk loop, logits GEMMs included: 8TDV FLOPs instead of 6TDV, so expect it "
              "slower than fused without --recompute (run both and compare the median ms).";
      flush();
    }
    // (the frozen head's graph also keeps the mean's [T] scale: 2 KiB beside a 128 KiB dh
    // read as if dh were 130 KiB)
    const std::string keeps = o.recompute             ? "the mean's [T] scale"
                              : o.head == "trainable" ? "dh [T, D] and dW [V, D]"
                                                      : "dh [T, D] and the mean's [T] scale";
    if (ref && fused->graph.total_bytes >= ref->graph.total_bytes) {
      // "only" would be wrong: with D near V, dh [T, D] is as large as the logits [T, V].
      line << "fused's graph keeps " << keeps << " (" << mib(fused->graph.total_bytes)
           << ") and no logits -- not less than " << ref->path << "'s graph ("
           << mib(ref->graph.total_bytes) << ") at this shape";
    } else {
      line << "fused's graph keeps only " << keeps << " (" << mib(fused->graph.total_bytes) << ")";
    }
    if (ref && fused->forward_peak < ref->forward_peak * 0.9) {
      line << ", and the logits exist one chunk (" << fused->chunk_rows << " of " << T
           << " rows) at a time, so its forward peak " << mib(fused->forward_peak) << " is "
           << ratio(ref->forward_peak, fused->forward_peak) << "x lower than " << ref->path << "'s "
           << mib(ref->forward_peak) << ".";
    } else if (ref && fused->chunk_rows >= T) {
      line << ", but its forward peak " << mib(fused->forward_peak) << " is not below " << ref->path
           << "'s " << mib(ref->forward_peak) << ": at this size one chunk holds " << all_rows
           << ", so fused makes the whole [T, V] logits at once too. It lowers the peak when "
              "T spans "
              "several chunks: lower --chunk-budget-mb or --chunk-rows, or raise T.";
    } else if (ref) {
      line << ", but its forward peak " << mib(fused->forward_peak) << " is not below " << ref->path
           << "'s " << mib(ref->forward_peak) << ": one chunk's temporaries (" << fused->chunk_rows
           << " rows) and " << keeps
           << " are as large as the [T, V] logits at this shape (D = " << D << " next to V = " << V
           << ").";
    } else {
      line << "; its forward peak is " << mib(fused->forward_peak) << ".";
    }
    flush();
    // The byte formula (docs/fused_loss.md; tests/head_loss_memory_test.cpp) covers f32 CE
    // with a frozen head, metrics on, on the host allocator. Note [Fused's two peaks]: the
    // [T] and [T, D] blocks live through forward; on top of them either the chunk loop's
    // logits [C, V] or, after the loop, the mean's [T] scale, its [T] product and the
    // scalar loss. The second is the peak only at tiny shapes (T = D = V = 1 measured
    // 4.00 KiB against the loop's 3.00 KiB), but the formula is exact at every shape.
    if (on_cpu && !teacher && o.loss == "ce" && o.dtype == "f32" && o.head == "frozen" &&
        !o.recompute) {
      const int64_t C = std::min(fused->chunk_rows, T);
      auto rounded = [](int64_t b) {
        return static_cast<int64_t>(cg::CachingAllocator::round_size(static_cast<size_t>(b)));
      };
      int64_t predicted = 0;
      for (int64_t b : {4 * T, 4 * T, 4 * T, 8 * T, 4 * T * D}) predicted += rounded(b);
      const int64_t loop = rounded(4 * C * V), mean = 2 * rounded(4 * T) + rounded(4);
      predicted += std::max(loop, mean);
      line << "byte formula for fused's forward peak: 20 T + 4 T D + max(4 C V, 8 T + 4) (C = " << C
           << "; the chunk's logits, or after the loop the mean's scale, product and loss), each "
              "block rounded to 512 B = "
           << mib(predicted) << " (" << predicted << " B); measured " << mib(fused->forward_peak)
           << " (" << fused->forward_peak << " B)"
           << (predicted == fused->forward_peak ? ": equal." : ": they differ.");
      flush();
    }
  }
  if (naive && fused && !o.recompute) {
    line << "naive's peak / fused's, three ways from one run: forward peaks above the inputs "
         << ratio(naive->forward_peak, fused->forward_peak) << "x, step peaks above the inputs "
         << ratio(naive->step_peak, fused->step_peak) << "x, step peaks counting the inputs ("
         << mib(input_bytes) << ") "
         << ratio(naive->step_peak + input_bytes, fused->step_peak + input_bytes)
         << "x. The inputs add the same bytes to both sides, which pulls the ratio toward 1";
    // (only where naive's step is the higher one: at one chunk of all rows fused is not)
    if (naive->step_peak > fused->step_peak)
      line << "; naive's backward adds a [T, V] gradient that fused never makes";
    line << ".";
    flush();
  }
  return lines;
}

}  // namespace

void print_table(const std::vector<PathReport>& reports, const Options& o,
                 const cg::HeadLossInputs& in) {
  const int64_t T = in.hidden.size(0), D = in.hidden.size(1), V = in.head.size(0);
  const size_t el = cg::element_size(in.hidden.dtype());
  // (the loss works on 16-bit logits in fp32, on f64 ones in f64)
  const int64_t logit_bytes = el == 8 ? 8 : 4;
  std::printf(
      "lm_head + %s loss%s, T=%lld D=%lld V=%lld (%s, head %s, on %s); logits [T, V] = %s in "
      "%s\n",
      o.loss.c_str(), o.ce_weight > 0 ? cg::detail::concat(" + ", o.ce_weight, " CE").c_str() : "",
      (long long)T, (long long)D, (long long)V, o.dtype.c_str(), o.head.c_str(),
      in.hidden.device().str().c_str(), mib(logit_bytes * T * V).c_str(), el == 8 ? "f64" : "fp32");
  std::printf("inputs: hidden %s, head %s, labels %s", mib(T * D * el).c_str(),
              mib(V * D * el).c_str(), mib(in.labels.nbytes()).c_str());
  if (in.teacher_hidden.defined())
    std::printf(", teacher hidden %s", mib(in.teacher_hidden.nbytes()).c_str());
  std::printf(" (not counted below: peaks are above the inputs)\n\n");
  std::printf("%-8s %7s %14s %14s %14s %14s %14s %11s %9s\n", "path", "chunk", "forward peak",
              "= fwd keeps", "+ temporaries", "largest block", "step peak", "loss", "median ms");
  for (const PathReport& r : reports) {
    if (!r.ok()) {
      std::printf("%-8s %s\n", r.path.c_str(), r.error.c_str());
      if (!r.trace_until_error.empty())
        std::printf(
            "%-8s (its trace %s ends at this error: the step up to it, the oom event "
            "included)\n",
            "", r.trace_until_error.c_str());
      continue;
    }
    std::printf("%-8s %7lld %14s %14s %14s %14s %14s %11.6f %9.1f\n", r.path.c_str(),
                (long long)r.chunk_rows, mib(r.forward_peak).c_str(), mib(r.forward_kept).c_str(),
                mib(r.forward_temporaries()).c_str(), mib(r.largest_block).c_str(),
                mib(r.step_peak).c_str(), r.loss, r.median_ms);
  }
  std::printf("\nwhat each graph retains at the end of forward, by node:\n");
  for (const PathReport& r : reports) {
    if (!r.ok()) continue;
    std::printf("  %-8s %s:", r.path.c_str(),
                mib(static_cast<int64_t>(r.graph.total_bytes)).c_str());
    for (const auto& [node, bytes] : r.graph.bytes_by_node) {
      std::printf("  %s %s", node.c_str(), mib(static_cast<int64_t>(bytes)).c_str());
    }
    std::printf("\n");
  }
  std::printf("\n");
  for (const std::string& line : explain(reports, o, T, D, V, in.hidden.dtype(), input_bytes(in),
                                         in.hidden.device() == cg::kCPU))
    std::printf("%s\n", line.c_str());
}

void print_json(const std::vector<PathReport>& reports, const Options& o,
                const cg::HeadLossInputs& in) {
  const int64_t T = in.hidden.size(0), D = in.hidden.size(1), V = in.head.size(0);
  nlohmann::json paths = nlohmann::json::object();
  for (const PathReport& r : reports) {
    if (!r.ok()) {
      paths[r.path] = {{"error", r.error}};
      if (!r.trace_until_error.empty()) paths[r.path]["trace_until_error"] = r.trace_until_error;
      continue;
    }
    paths[r.path] = {{"peak_bytes", r.step_peak},
                     {"forward_peak_bytes", r.forward_peak},
                     {"forward_kept_bytes", r.forward_kept},
                     {"forward_temporary_bytes", r.forward_temporaries()},
                     {"largest_forward_block_bytes", r.largest_block},
                     {"retained_bytes", r.graph.total_bytes},
                     {"retained_by_node", r.graph.bytes_by_node},
                     {"loss", r.loss},
                     {"median_ms", r.median_ms},
                     {"chunk_rows", r.chunk_rows}};
  }
  nlohmann::json out;
  out["shape"] = {{"T", T},
                  {"D", D},
                  {"V", V},
                  {"dtype", o.dtype},
                  {"loss", o.loss},
                  {"head", o.head},
                  {"ce_weight", o.ce_weight},
                  {"device", in.hidden.device().str()}};
  out["paths"] = paths;
  out["lesson"] = explain(reports, o, T, D, V, in.hidden.dtype(), input_bytes(in),
                          in.hidden.device() == cg::kCPU);
  std::cout << out.dump(2) << "\n";
}

}  // namespace memory_lesson
