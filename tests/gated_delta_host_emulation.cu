// Why this file exists: the CUDA gated delta rule's kernel bodies (cuda/gated_delta_body.cuh)
// run on the host, one thread per block and no barriers (Note [Bodies that run on the host
// too]), against a plain double-precision recurrence: the chunked algorithm's indexing
// (chunk edges, padding rows, Hv > Hk, dk and dv that do not fill a tile or a 32-column
// slice), the recurrent kernel's and causal_conv1d's, checked on any machine with nvcc,
// GPU or not (CTest: gated_delta_host_emulation). The GPU-vs-CPU test of the launched
// kernels is tests/cuda_gated_delta_test.cpp. Exit status 1 on any mismatch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/gated_delta_body.cuh"

namespace gd = cg::cuda::gated_delta;

namespace {

struct Reference {
  std::vector<double> out, state;
};

// The recurrence of ops/kernels.h's GatedDeltaArgs, token by token, in double.
Reference recurrence(const gd::Problem& p, const std::vector<float>& q, const std::vector<float>& k,
                     const std::vector<float>& v, const std::vector<float>& g,
                     const std::vector<float>& beta, const std::vector<float>& state0) {
  Reference r;
  r.out.assign(static_cast<size_t>(p.B) * p.T * p.Hv * p.dv, 0.0);
  r.state.assign(state0.begin(), state0.end());
  std::vector<double> kn(p.dk), qn(p.dk);
  for (int b = 0; b < p.B; ++b) {
    for (int h = 0; h < p.Hv; ++h) {
      const int kh = h / (p.Hv / p.Hk);
      double* S = &r.state[(static_cast<size_t>(b) * p.Hv + h) * p.dk * p.dv];
      for (int t = 0; t < p.T; ++t) {
        const size_t tok = static_cast<size_t>(b) * p.T + t;
        double sk = 0, sq = 0;
        for (int m = 0; m < p.dk; ++m) {
          kn[m] = k[(tok * p.Hk + kh) * p.dk + m];
          qn[m] = q[(tok * p.Hk + kh) * p.dk + m];
          sk += kn[m] * kn[m];
          sq += qn[m] * qn[m];
        }
        const double ik = p.l2norm ? 1 / std::sqrt(sk + 1e-6) : 1;
        const double iq = (p.l2norm ? 1 / std::sqrt(sq + 1e-6) : 1) * p.scale;
        for (int m = 0; m < p.dk; ++m) {
          kn[m] *= ik;
          qn[m] *= iq;
        }
        const double decay = std::exp(static_cast<double>(g[tok * p.Hv + h]));
        for (int i = 0; i < p.dk * p.dv; ++i) S[i] *= decay;
        for (int c = 0; c < p.dv; ++c) {
          double read = 0;
          for (int m = 0; m < p.dk; ++m) read += S[m * p.dv + c] * kn[m];
          const double delta = beta[tok * p.Hv + h] * (v[(tok * p.Hv + h) * p.dv + c] - read);
          for (int m = 0; m < p.dk; ++m) S[m * p.dv + c] += kn[m] * delta;
        }
        for (int c = 0; c < p.dv; ++c) {
          double o = 0;
          for (int m = 0; m < p.dk; ++m) o += S[m * p.dv + c] * qn[m];
          r.out[(tok * p.Hv + h) * p.dv + c] = o;
        }
      }
    }
  }
  return r;
}

// Max |got - want| over max(1, max |want|).
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0, ref = 1;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    ref = std::max(ref, std::abs(want[i]));
  }
  return worst / ref;
}

struct Shape {
  int B, T, Hk, Hv, dk, dv;
  bool l2norm;
  float g_low;
};

bool check(const Shape& c, std::mt19937& gen) {
  gd::Problem p;
  p.B = c.B, p.T = c.T, p.Hk = c.Hk, p.Hv = c.Hv, p.dk = c.dk, p.dv = c.dv;
  p.l2norm = c.l2norm;
  p.scale = 1.f / std::sqrt(static_cast<float>(c.dk));
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  const size_t nq = static_cast<size_t>(c.B) * c.T * c.Hk * c.dk;
  const size_t nv = static_cast<size_t>(c.B) * c.T * c.Hv * c.dv;
  const size_t ng = static_cast<size_t>(c.B) * c.T * c.Hv;
  const size_t ns = static_cast<size_t>(c.B) * c.Hv * c.dk * c.dv;
  const float qk_std = c.l2norm ? 1.f : 1.f / std::sqrt(static_cast<float>(c.dk));
  std::vector<float> q(nq), k(nq), v(nv), g(ng), beta(ng), state0(ns);
  for (float& x : q) x = qk_std * normal(gen);
  for (float& x : k) x = qk_std * normal(gen);
  for (float& x : v) x = normal(gen);
  for (float& x : g) x = c.g_low * uniform(gen);
  for (float& x : beta) x = uniform(gen);
  for (float& x : state0) x = 0.3f * normal(gen);
  const Reference want = recurrence(p, q, k, v, g, beta, state0);

  const int chunks = p.chunks(), heads = c.B * c.Hv;
  const size_t rows = static_cast<size_t>(heads) * chunks * gd::kChunk;
  std::vector<float> w(rows * c.dk), qs(rows * c.dk), kd(rows * c.dk), u(rows * c.dv),
      aqk(rows * gd::kChunk), eg(static_cast<size_t>(heads) * chunks);
  const gd::ChunkScratch s{w.data(), u.data(), qs.data(), kd.data(), aqk.data(), eg.data()};
  std::vector<float> smem(
      std::max({gd::kPrepareSharedFloats, gd::kStateSharedFloats, gd::kRecurrentSharedFloats}));
  std::vector<float> chunked_state = state0, chunked_out(nv, 1e9f);
  for (int bh = 0; bh < heads; ++bh) {
    for (int n = 0; n < chunks; ++n) {
      gd::prepare_chunk<float>(p, q.data(), k.data(), v.data(), g.data(), beta.data(), s, bh, n,
                               smem.data(), 0, 1);
    }
  }
  for (int bh = 0; bh < heads; ++bh) {
    for (int sl = 0; sl < p.slices(); ++sl) {
      gd::chunked_state_pass<float>(p, s, chunked_state.data(), chunked_out.data(), bh, sl,
                                    smem.data(), 0, 1);
    }
  }
  std::vector<float> rec_state = state0, rec_out(nv, 1e9f);
  for (int bh = 0; bh < heads; ++bh) {
    for (int sl = 0; sl < p.slices(); ++sl) {
      gd::recurrent_pass<float>(p, q.data(), k.data(), v.data(), g.data(), beta.data(),
                                rec_state.data(), rec_out.data(), bh, sl, smem.data(), 0, 1);
    }
  }
  const double e[4] = {relative_error(chunked_out, want.out),
                       relative_error(chunked_state, want.state), relative_error(rec_out, want.out),
                       relative_error(rec_state, want.state)};
  const bool ok = std::all_of(e, e + 4, [](double x) { return x < 1e-4; });
  std::printf(
      "B%d T%d Hk%d Hv%d dk%d dv%d%s g>=%.2f: chunked out %.1e state %.1e, recurrent "
      "out %.1e state %.1e  %s\n",
      c.B, c.T, c.Hk, c.Hv, c.dk, c.dv, c.l2norm ? "" : " no-l2norm", c.g_low, e[0], e[1], e[2],
      e[3], ok ? "ok" : "MISMATCH");
  return ok;
}

bool check_conv(std::mt19937& gen) {
  std::normal_distribution<float> normal;
  const int B = 2, T = 5, C = 3, K = 4;
  std::vector<float> x(B * T * C), w(C * K), history(B * (K - 1) * C), out(B * T * C);
  for (float& e : x) e = normal(gen);
  for (float& e : w) e = normal(gen);
  for (float& e : history) e = normal(gen);
  double worst = 0;
  for (int with_history = 0; with_history < 2; ++with_history) {
    const float* h = with_history ? history.data() : nullptr;
    for (int64_t e = 0; e < B * T * C; ++e) {
      gd::causal_conv1d_element<float>(x.data(), w.data(), h, out.data(), T, C, K, true, e);
    }
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        for (int c = 0; c < C; ++c) {
          double acc = 0;
          for (int j = 0; j < K; ++j) {
            const int at = t + j;  // into cat(history, x)
            const double xv = at < K - 1 ? (h ? h[(b * (K - 1) + at) * C + c] : 0.0)
                                         : x[(b * T + at - (K - 1)) * C + c];
            acc += w[c * K + j] * xv;
          }
          acc = acc / (1 + std::exp(-acc));
          worst = std::max(worst, std::abs(acc - out[(b * T + t) * C + c]));
        }
      }
    }
  }
  std::printf("causal_conv1d: worst %.1e  %s\n", worst, worst < 1e-5 ? "ok" : "MISMATCH");
  return worst < 1e-5;
}

}  // namespace

int main() {
  std::mt19937 gen(1);
  bool ok = true;
  const Shape shapes[] = {
      {1, 1, 1, 2, 16, 8, true, -0.5f},     {2, 3, 2, 4, 32, 40, true, -0.5f},
      {1, 63, 1, 3, 48, 33, true, -0.5f},   {1, 64, 2, 4, 16, 16, true, -0.5f},
      {2, 65, 1, 2, 64, 64, true, -4.f},    {1, 200, 2, 4, 128, 128, true, -0.5f},
      {1, 130, 1, 1, 20, 70, false, -0.5f}, {1, 300, 1, 2, 128, 96, true, -0.02f},
  };
  for (const Shape& c : shapes) ok = check(c, gen) && ok;
  ok = check_conv(gen) && ok;
  std::printf("%s\n", ok ? "all ok" : "MISMATCHES");
  return ok ? 0 : 1;
}
