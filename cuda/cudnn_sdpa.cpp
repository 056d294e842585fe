// Why this file exists: the cuDNN backend-graph side of cuda/cudnn_sdpa.h -- the SDPA
// forward and backward operation graphs written node by node with backend descriptors,
// the heuristics / engine config / execution plan steps, the per-device handle (bound to
// the compute stream), the plan cache, and the variant packs at run time.
//
// Note [The SDPA graph cuDNN recognises]: cuDNN has no "attention" operation in 9.14's
// public graph that we rely on; its fused flash engines match a graph of generic nodes.
// The graphs below follow the pattern the cudnn-frontend's sdpa nodes emit (read from its
// source; this is our own code):
//   forward   S = Q @ K^T (K described as [B, Hkv, hd, Sk]); S *= scale (by value);
//             causal: row = GEN_INDEX(axis 2) [+ (Sk - Sq)], col = GEN_INDEX(axis 3),
//                     S = BINARY_SELECT(S, -inf, row >= col);
//             M = max_j S; E = exp(S - M); Z = sum_j E; Stats = M + log Z; O = (E / Z) @ V
//   backward  D = sum(dO * O) * 1 -> a f32 [B, Hq, Sq, 1] buffer (ours, in the workspace);
//             S = Q @ K^T * scale - Stats [masked as above]; P = exp(S);
//             dV = reshape(P)^T @ dO (summed over the query heads of a kv head for GQA);
//             dS = (dO @ V^T - D) * P * scale; dK = reshape(dS)^T @ Q (summed likewise);
//             dQ_acc (f32, in the workspace) = dS @ K; dQ = identity(dQ_acc)
// Virtual tensors are f32 unless said; the forward's P (the second matmul's A) and the
// backward's transposed P and dS are in the input dtype, as the engines require.
// Anything cuDNN rejects at finalize becomes a reason string (the caller falls back).
//
// Note [cuDNN state]: one handle per device, created on first use, bound to the device's
// compute stream and never destroyed (as cuda/lt_gemm.cpp's cuBLASLt handle). Plans are
// cached per (direction, device, dtype, shape, mask, strides) with every descriptor they
// were built from, never erased; unsupported keys are cached with their reason, so a
// fallback costs one map lookup after the first call. Scale is a by-value scalar given at
// run time, so it is not part of the key.
#include "cuda/cudnn_sdpa.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/views.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_check.h"
#include "cuda/cudnn_graph.h"
#include "cuda/event_timer.h"

namespace cg::cuda {

namespace {

using namespace cudnn_graph;

// Fixed unique ids of the tensors a variant pack names; virtual ones count up from 1000.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kSeqKv,
  kSeqQ,
  kDO,
  kDQ,
  kDK,
  kDV,
  kSoftmaxSum,
  kDQAccum,
  kOne,
};

// The causal rule (bottom-right: key j visible from query i iff i + Sk - Sq >= j) on
// scores s [B, Hq, Sq, Sk]: masked entries become -inf.
Desc causal_mask(GraphBuilder& g, Desc s, const Layout& l, int64_t Sq, int64_t Sk) {
  Desc row = g.virt(CUDNN_DATA_INT32, l), col = g.virt(CUDNN_DATA_INT32, l);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, row, CUDNN_DATA_FLOAT, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, col, CUDNN_DATA_FLOAT, 3);
  if (Sk != Sq) {  // row + Sk - Sq, as two by-value int32 steps (the frontend's form)
    Desc plus = g.virt(CUDNN_DATA_INT32, l), minus = g.virt(CUDNN_DATA_INT32, l);
    g.pointwise(CUDNN_POINTWISE_ADD, row, g.scalar(kSeqKv, CUDNN_DATA_INT32), nullptr, plus,
                CUDNN_DATA_INT32);
    g.pointwise(CUDNN_POINTWISE_SUB, plus, g.scalar(kSeqQ, CUDNN_DATA_INT32), nullptr, minus,
                CUDNN_DATA_INT32);
    row = minus;
  }
  Desc keep = g.virt(CUDNN_DATA_BOOLEAN, l);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN);
  Desc out = g.virt(CUDNN_DATA_FLOAT, l);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, g.scalar(kNegInf, CUDNN_DATA_FLOAT), keep, out);
  return out;
}

// One finalized execution plan.
struct Candidate {
  Desc plan = nullptr;
  int64_t workspace = 0;  // cuDNN's own, bytes
  int64_t engine = -1;    // CUDNN_ATTR_ENGINE_GLOBAL_INDEX
  float ms = -1;          // when timed (Note [SDPA autotune])
};

// A problem's plan(s) and what they were built from.
struct Plan {
  std::string why_not;  // "" when usable
  std::unique_ptr<GraphBuilder> graph;
  std::vector<Candidate> candidates;  // [0] runs; more only until tuned
  int64_t offered = 0;                // engine configs the heuristics offered
  std::string tuning;                 // "engine a 1.2 ms, engine b 0.9 ms" once timed
  int64_t max_workspace() const {
    int64_t m = 0;
    for (const Candidate& c : candidates) m = std::max(m, c.workspace);
    return m;
  }
};

// Note [SDPA autotune]: CHUNKGRAD_CUDNN_AUTOTUNE=1 keeps up to kMaxCandidates finalized
// plans of the heuristics' list and, at the first run of the problem, times each (a
// warm-up, then the median of 3, on the real operands: the outputs are rewritten by the
// run that follows) and keeps the fastest. Off by default: heuristics' first choice, no
// host wait.
constexpr int kMaxCandidates = 6;
bool autotune_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("CHUNKGRAD_CUDNN_AUTOTUNE");
    return e != nullptr && e[0] == '1';
  }();
  return on;
}

Layout io_layout(const SdpaOperand& o, int64_t B, int64_t H, int64_t S, int64_t hd) {
  return Layout{{B, H, S, hd}, {o.sb, o.sh, o.ss, 1}};
}
// K or V described transposed, [B, H, hd, S] (what the matmuls take).
Layout transposed_layout(const SdpaOperand& o, int64_t B, int64_t H, int64_t S, int64_t hd) {
  return Layout{{B, H, hd, S}, {o.sb, o.sh, 1, o.ss}};
}
Layout row_stats_layout(int64_t B, int64_t H, int64_t S) {
  return Layout{{B, H, S, 1}, {H * S, S, 1, 1}};
}

void build_forward(GraphBuilder& g, const SdpaProblem& p) {
  const cudnnDataType_t io = cudnn_dtype(p.dtype);
  Desc q = g.tensor(kQ, io, io_layout(p.q, p.B, p.Hq, p.Sq, p.hd), false);
  Desc kt = g.tensor(kK, io, transposed_layout(p.k, p.B, p.Hkv, p.Sk, p.hd), false);
  Desc v = g.tensor(kV, io, io_layout(p.v, p.B, p.Hkv, p.Sk, p.hd), false);
  Desc o = g.tensor(kO, io, contiguous(p.B, p.Hq, p.Sq, p.hd), false);
  Desc stats = g.tensor(kStats, CUDNN_DATA_FLOAT, row_stats_layout(p.B, p.Hq, p.Sq), false);
  const Layout sl = contiguous(p.B, p.Hq, p.Sq, p.Sk), rl = row_stats_layout(p.B, p.Hq, p.Sq);

  Desc s = g.virt(CUDNN_DATA_FLOAT, sl);
  g.matmul(q, kt, s);
  s = g.pw(CUDNN_POINTWISE_MUL, s, g.scalar(kScale, CUDNN_DATA_FLOAT), sl);
  if (p.causal) s = causal_mask(g, s, sl, p.Sq, p.Sk);
  Desc mx = g.virt(CUDNN_DATA_FLOAT, rl);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, mx);
  Desc e = g.pw(CUDNN_POINTWISE_EXP, g.pw(CUDNN_POINTWISE_SUB, s, mx, sl), nullptr, sl);
  Desc z = g.virt(CUDNN_DATA_FLOAT, rl);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, g.pw(CUDNN_POINTWISE_LOG, z, nullptr, rl), nullptr, stats);
  // P in the io dtype: cuDNN's fused engines take the second matmul's A operand in the
  // input type (an f32 P matches no engine: heuristics offer none).
  Desc prob = g.virt(io, sl);
  g.pointwise(CUDNN_POINTWISE_DIV, e, z, nullptr, prob);
  g.matmul(prob, v, o);
}

void build_backward(GraphBuilder& g, const SdpaProblem& p) {
  const cudnnDataType_t io = cudnn_dtype(p.dtype);
  const bool gqa = p.Hq != p.Hkv;
  Desc q = g.tensor(kQ, io, io_layout(p.q, p.B, p.Hq, p.Sq, p.hd), false);
  Desc kt = g.tensor(kK, io, transposed_layout(p.k, p.B, p.Hkv, p.Sk, p.hd), false);
  Desc vt = g.tensor(kV, io, transposed_layout(p.v, p.B, p.Hkv, p.Sk, p.hd), false);
  Desc o = g.tensor(kO, io, io_layout(p.o, p.B, p.Hq, p.Sq, p.hd), false);
  Desc dout = g.tensor(kDO, io, io_layout(p.dout, p.B, p.Hq, p.Sq, p.hd), false);
  Desc stats = g.tensor(kStats, CUDNN_DATA_FLOAT, row_stats_layout(p.B, p.Hq, p.Sq), false);
  Desc dq = g.tensor(kDQ, io, contiguous(p.B, p.Hq, p.Sq, p.hd), false);
  Desc dk = g.tensor(kDK, io, contiguous(p.B, p.Hkv, p.Sk, p.hd), false);
  Desc dv = g.tensor(kDV, io, contiguous(p.B, p.Hkv, p.Sk, p.hd), false);
  Desc dsum = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, row_stats_layout(p.B, p.Hq, p.Sq), false);
  Desc dq_acc = g.tensor(kDQAccum, CUDNN_DATA_FLOAT, contiguous(p.B, p.Hq, p.Sq, p.hd), false);
  Desc scale = g.scalar(kScale, CUDNN_DATA_FLOAT);
  const Layout sl = contiguous(p.B, p.Hq, p.Sq, p.Sk), rl = row_stats_layout(p.B, p.Hq, p.Sq);
  const Layout ql = contiguous(p.B, p.Hq, p.Sq, p.hd);
  // [B, Hq, Sk, Sq] views of the score-shaped tensors (reshape = transpose of the last two).
  const Layout tl{{p.B, p.Hq, p.Sk, p.Sq}, {p.Hq * p.Sq * p.Sk, p.Sq * p.Sk, 1, p.Sk}};
  const Layout full_head = contiguous(p.B, p.Hq, p.Sk, p.hd);

  // D = rowsum(dO * O), into our f32 buffer.
  Desc r = g.virt(CUDNN_DATA_FLOAT, rl);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, g.pw(CUDNN_POINTWISE_MUL, dout, o, ql), r);
  g.pointwise(CUDNN_POINTWISE_MUL, r, g.scalar(kOne, CUDNN_DATA_FLOAT), nullptr, dsum);

  // P = exp(Q K^T scale - Stats), masked.
  Desc s = g.virt(CUDNN_DATA_FLOAT, sl);
  g.matmul(q, kt, s);
  s = g.pw(CUDNN_POINTWISE_MUL, s, scale, sl);
  s = g.pw(CUDNN_POINTWISE_SUB, s, stats, sl);
  if (p.causal) s = causal_mask(g, s, sl, p.Sq, p.Sk);
  Desc prob = g.pw(CUDNN_POINTWISE_EXP, s, nullptr, sl);

  // out [B, Hkv, Sk, hd] = reshape(scores)^T @ rhs: per query head, then (GQA) summed over
  // the query heads of each kv head. dV = P^T dO.
  auto transposed_product = [&](Desc scores, Desc rhs, Desc out) {
    Desc t = g.virt(io, tl);
    g.reshape(scores, t);
    if (!gqa) {
      g.matmul(t, rhs, out);
      return;
    }
    Desc full = g.virt(io, full_head);
    g.matmul(t, rhs, full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
  };
  transposed_product(prob, dout, dv);

  // dS = (dO V^T - D) * P * scale.
  Desc dp = g.virt(CUDNN_DATA_FLOAT, sl);
  g.matmul(dout, vt, dp);
  Desc ds = g.pw(CUDNN_POINTWISE_SUB, dp, dsum, sl);
  ds = g.pw(CUDNN_POINTWISE_MUL, ds, prob, sl);
  ds = g.pw(CUDNN_POINTWISE_MUL, ds, scale, sl);

  // dK = dS^T Q.
  transposed_product(ds, q, dk);

  // dQ = dS K, accumulated in f32, then cast.
  Desc k_rows = g.virt(io, io_layout(p.k, p.B, p.Hkv, p.Sk, p.hd));
  g.reshape(kt, k_rows);
  g.matmul(ds, k_rows, dq_acc);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_acc, nullptr, nullptr, dq);
}

// The engine configs the heuristics in `mode` offer for the graph (maybe none).
std::vector<Desc> engine_configs(GraphBuilder& g, Desc graph, cudnnBackendHeurMode_t mode) {
  Desc heur = g.create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  CG_CUDNN_CHECK(cudnnBackendFinalize(heur));
  int64_t count = 0;
  CG_CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<Desc> configs(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (Desc& c : configs) c = g.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t got = 0;
  if (count > 0) {
    CG_CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                            configs.data()));
  }
  configs.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  return configs;
}

// Heuristics (mode A; the fallback list when A offers nothing that finalizes), then the
// first engine config(s) whose plan finalizes (Note [SDPA autotune] for more than one).
void make_plan(Plan& plan, Desc graph, cudnnHandle_t handle) {
  GraphBuilder& g = *plan.graph;
  const size_t keep = autotune_enabled() ? kMaxCandidates : 1;
  std::string failures;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "A" : "fallback";
    const std::vector<Desc> configs = engine_configs(g, graph, mode);
    plan.offered += static_cast<int64_t>(configs.size());
    failures += detail::concat("; heuristics mode ", mode_name, " offer ", configs.size(),
                               " engine config(s)");
    if (configs.empty()) failures += detail::concat(" (cuDNN: ", last_cudnn_error(), ")");
    for (size_t i = 0; i < configs.size() && plan.candidates.size() < keep; ++i) {
      Desc ep = g.create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      set(ep, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      set_desc(ep, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]);
      const cudnnStatus_t st = cudnnBackendFinalize(ep);
      if (st != CUDNN_STATUS_SUCCESS) {
        failures += detail::concat("; config ", i, " does not finalize: ", cudnnGetErrorString(st),
                                   ": ", last_cudnn_error());
        continue;
      }
      Candidate c;
      c.plan = ep;
      int64_t n = 0;
      CG_CUDNN_CHECK(cudnnBackendGetAttribute(ep, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                              CUDNN_TYPE_INT64, 1, &n, &c.workspace));
      Desc engine = g.create(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      if (cudnnBackendGetAttribute(configs[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                   &engine) == CUDNN_STATUS_SUCCESS) {
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                 &c.engine);
      }
      plan.candidates.push_back(c);
    }
    if (!plan.candidates.empty()) return;
  }
  CG_FAIL("cuDNN has no engine for this attention graph", failures);
}

// ---- per-device state --------------------------------------------------------------------

struct DeviceState {
  cudnnHandle_t handle = nullptr;
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans;  // never erased
};

std::mutex g_mutex;
std::map<int, DeviceState>& states() {
  static auto* s = new std::map<int, DeviceState>();  // never destroyed (Note [cuDNN state])
  return *s;
}

std::vector<int64_t> key_of(int device, const SdpaProblem& p, bool backward) {
  std::vector<int64_t> k = {
      backward, device,  static_cast<int64_t>(p.dtype), p.B, p.Hq, p.Hkv, p.Sq, p.Sk,
      p.hd,     p.causal};
  for (const SdpaOperand* o : {&p.q, &p.k, &p.v}) k.insert(k.end(), {o->sb, o->sh, o->ss});
  if (backward) {
    for (const SdpaOperand* o : {&p.o, &p.dout}) k.insert(k.end(), {o->sb, o->sh, o->ss});
  }
  return k;
}

// The cached plan for the problem (built now when missing); never throws for a problem
// cuDNN rejects -- the Plan then carries why. Holds g_mutex while building.
Plan& plan_for(int device, const SdpaProblem& p, bool backward) {
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceState& st = states()[device];
  const std::vector<int64_t> key = key_of(device, p, backward);
  auto it = st.plans.find(key);
  if (it != st.plans.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  try {
    CG_CHECK(p.dtype == DType::bf16 || p.dtype == DType::f16, "cuDNN SDPA takes bf16 or f16, got ",
             dtype_name(p.dtype));
    CG_CHECK(!p.causal || p.Sq <= p.Sk,
             "cuDNN SDPA here takes causal only with Sq <= Sk (rows "
             "that see no key need the flash path); got Sq ",
             p.Sq, ", Sk ", p.Sk);
    CG_CHECK(p.Hkv > 0 && p.Hq % p.Hkv == 0, "query heads ", p.Hq, " not a multiple of kv heads ",
             p.Hkv);
    if (st.handle == nullptr) {
      CG_CUDA_CHECK(cudaSetDevice(device));
      CG_CUDNN_CHECK(cudnnCreate(&st.handle));
      CG_CUDNN_CHECK(cudnnSetStream(st.handle, compute_stream(device)));
    }
    plan->graph = std::make_unique<GraphBuilder>(st.handle);
    if (backward) {
      build_backward(*plan->graph, p);
    } else {
      build_forward(*plan->graph, p);
    }
    make_plan(*plan, plan->graph->finalize_graph(), st.handle);
  } catch (const Error& e) {
    plan->why_not = e.what();
    if (plan->why_not.empty()) plan->why_not = "cuDNN rejected the graph";
    plan->candidates.clear();
    plan->graph.reset();
  }
  return *st.plans.emplace(key, std::move(plan)).first->second;
}

Plan& usable_plan(int device, const SdpaProblem& p, bool backward) {
  Plan& plan = plan_for(device, p, backward);
  CG_CHECK(plan.why_not.empty(), "scaled_dot_product_attention: the cudnn path cannot run this ",
           backward ? "backward" : "forward", " (", dtype_name(p.dtype), ", B ", p.B, ", Hq ", p.Hq,
           ", Hkv ", p.Hkv, ", Sq ", p.Sq, ", Sk ", p.Sk, ", hd ", p.hd,
           p.causal ? ", causal" : ", no mask", "): ", plan.why_not,
           "; use the flash path (AttentionPath::flash or automatic)");
  return plan;
}

constexpr int64_t align_up(int64_t n) { return (n + 255) / 256 * 256; }

// Scratch of `bytes` from the caching allocator (freed when the tensor goes; the next
// user is ordered after this call on the stream, as cuda/lt_gemm.cpp's workspace).
Tensor scratch(int device, int64_t bytes) {
  return raw::empty({std::max<int64_t>(1, (bytes + 7) / 8)}, DType::i64,
                    Device{DeviceType::cuda, device});
}

void execute_plan(cudnnHandle_t handle, Desc plan, std::vector<int64_t>& uids,
                  std::vector<void*>& ptrs, void* workspace) {
  Desc pack = nullptr;
  CG_CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
  struct Guard {
    Desc d;
    ~Guard() { cudnnBackendDestroyDescriptor(d); }
  } guard{pack};
  set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
      uids.data());
  set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
      static_cast<int64_t>(ptrs.size()), ptrs.data());
  set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  CG_CUDNN_CHECK(cudnnBackendFinalize(pack));
  CG_CUDNN_CHECK(cudnnBackendExecute(handle, plan, pack));
}

// Median ms of 3 runs of `plan` after a warm-up (Note [SDPA autotune]); host waits.
float time_plan(cudnnHandle_t handle, Desc plan, std::vector<int64_t>& uids,
                std::vector<void*>& ptrs, void* workspace, cudaStream_t stream) {
  return static_cast<float>(
      median_event_ms(stream, 3, [&] { execute_plan(handle, plan, uids, ptrs, workspace); }));
}

// Runs the plan with the given (uid, pointer) pairs; `workspace` holds at least
// plan.max_workspace() bytes. Tunes first when asked (Note [SDPA autotune]).
void run_plan(int device, Plan& plan, std::vector<int64_t> uids, std::vector<void*> ptrs,
              void* workspace, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_mutex);
  cudnnHandle_t handle = states()[device].handle;
  CG_CUDNN_CHECK(cudnnSetStream(handle, stream));
  if (plan.candidates.size() > 1) {
    size_t best = 0;
    for (size_t i = 0; i < plan.candidates.size(); ++i) {
      plan.candidates[i].ms =
          time_plan(handle, plan.candidates[i].plan, uids, ptrs, workspace, stream);
      if (plan.candidates[i].ms < plan.candidates[best].ms) best = i;
      plan.tuning += detail::concat(i ? ", " : "", "engine ", plan.candidates[i].engine, " ",
                                    plan.candidates[i].ms, " ms");
    }
    std::swap(plan.candidates[0], plan.candidates[best]);
    plan.candidates.resize(1);
  }
  execute_plan(handle, plan.candidates[0].plan, uids, ptrs, workspace);
}

// The causal mask's by-value scalars, when the graph has them.
struct MaskScalars {
  float neg_inf = -INFINITY;
  int32_t seq_kv = 0, seq_q = 0;
};
void add_mask_scalars(const SdpaProblem& p, MaskScalars* m, std::vector<int64_t>& uids,
                      std::vector<void*>& ptrs) {
  if (!p.causal) return;
  m->seq_kv = static_cast<int32_t>(p.Sk);
  m->seq_q = static_cast<int32_t>(p.Sq);
  uids.push_back(kNegInf);
  ptrs.push_back(&m->neg_inf);
  if (p.Sk != p.Sq) {
    uids.insert(uids.end(), {kSeqKv, kSeqQ});
    ptrs.insert(ptrs.end(), {&m->seq_kv, &m->seq_q});
  }
}

}  // namespace

std::string cudnn_sdpa_forward_support(int device, const SdpaProblem& p) {
  return plan_for(device, p, false).why_not;
}

std::string cudnn_sdpa_backward_support(int device, const SdpaProblem& p) {
  return plan_for(device, p, true).why_not;
}

void cudnn_sdpa_mark_unsupported(int device, const SdpaProblem& p, bool backward,
                                 const std::string& why) {
  Plan& plan = plan_for(device, p, backward);
  std::lock_guard<std::mutex> lock(g_mutex);
  plan.why_not = "cuDNN failed to run it: " + why;
}

void cudnn_sdpa_forward(int device, const SdpaProblem& p, float scale, void* out, float* stats,
                        cudaStream_t stream) {
  Plan& plan = usable_plan(device, p, false);
  MaskScalars mask;
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> ptrs = {const_cast<void*>(p.q.data),
                             const_cast<void*>(p.k.data),
                             const_cast<void*>(p.v.data),
                             out,
                             stats,
                             &scale};
  add_mask_scalars(p, &mask, uids, ptrs);
  const Tensor ws = scratch(device, plan.max_workspace());
  run_plan(device, plan, std::move(uids), std::move(ptrs), ws.data_ptr(), stream);
}

void cudnn_sdpa_backward(int device, const SdpaProblem& p, float scale, const float* stats,
                         void* dq, void* dk, void* dv, cudaStream_t stream) {
  Plan& plan = usable_plan(device, p, true);
  // Our scratch, then cuDNN's workspace: dQ accumulator (f32 [B, Hq, Sq, hd]), then D.
  const int64_t acc_bytes = align_up(p.B * p.Hq * p.Sq * p.hd * 4);
  const int64_t sum_bytes = align_up(p.B * p.Hq * p.Sq * 4);
  const Tensor ws = scratch(device, acc_bytes + sum_bytes + plan.max_workspace());
  char* acc = static_cast<char*>(ws.data_ptr());
  char* dsum = acc + acc_bytes;
  MaskScalars mask;
  float one = 1.0f;
  std::vector<int64_t> uids = {kQ,   kK,  kV,  kO,  kDO,         kStats,  kScale,
                               kOne, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum};
  std::vector<void*> ptrs = {const_cast<void*>(p.q.data),
                             const_cast<void*>(p.k.data),
                             const_cast<void*>(p.v.data),
                             const_cast<void*>(p.o.data),
                             const_cast<void*>(p.dout.data),
                             const_cast<float*>(stats),
                             &scale,
                             &one,
                             dq,
                             dk,
                             dv,
                             dsum,
                             acc};
  add_mask_scalars(p, &mask, uids, ptrs);
  run_plan(device, plan, std::move(uids), std::move(ptrs), dsum + sum_bytes, stream);
}

std::string cudnn_sdpa_describe(int device, const SdpaProblem& p, bool backward) {
  const Plan& plan = plan_for(device, p, backward);
  if (!plan.why_not.empty()) return "unsupported: " + plan.why_not;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string out = detail::concat(plan.offered, " engine configs offered; ");
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const Candidate& c = plan.candidates[i];
    out += detail::concat(i ? ", " : "", "engine ", c.engine, " (workspace ", c.workspace, " B",
                          c.ms >= 0 ? detail::concat(", ", c.ms, " ms") : std::string(), ")");
  }
  if (!plan.tuning.empty()) out += "; timed: " + plan.tuning;
  return out;
}

int64_t cudnn_runtime_version() { return static_cast<int64_t>(cudnnGetVersion()); }

}  // namespace cg::cuda
