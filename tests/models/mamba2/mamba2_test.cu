// Mamba2Layer and the Mamba2 stack: the training form against a sequential float64 reference on
// fresh random inputs with NaN-poisoned outputs and gradients; the backward against central finite
// differences of that reference (tight) and of the GPU forward (loose), over every parameter
// tensor and the input; the per-step form against the training form (from a NaN-poisoned state
// reset at t = 0, after a reset of every row, and against float64 across random per-row resets);
// CUDA-graph replay against eager runs (bitwise); bf16 GEMMs within 3e-2 of fp32.
#include "models/fd_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/check.hpp"
#include "gpu/graph.hpp"
#include "models/mamba2/mamba2.hpp"
#include "models/mamba2/mamba2_layer.hpp"

namespace foxhunt::models {
namespace {

using U8 = std::uint8_t;
using Params = std::map<std::string, std::vector<double>>;
using Vec = std::vector<double>;

double silu(double v) { return v / (1.0 + std::exp(-v)); }
double softplus(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }

// The dimensions a reference layer needs, from the GPU layer.
struct LayerDims {
  std::string name;
  std::int64_t D, E, H, P, G, N, K;
  double eps;
};
LayerDims dims_of(const Mamba2Layer& l) {
  const auto& s = l.spec();
  return {s.name, s.d_model, l.d_inner(), l.heads(), s.head_dim, s.groups, s.d_state, s.conv_kernel, s.eps};
}

// One Mamba-2 mixer over in (B, T, D), step by step. resets (B * T, row b * T + t), nullable: a
// reset at (b, t) zeroes the SSM state and forgets the convolution's inputs before t.
Vec ref_layer(const Params& p, const LayerDims& d, const Vec& in, std::int64_t B, std::int64_t T,
              const std::vector<U8>& resets) {
  const std::int64_t GN = d.G * d.N, CD = d.E + 2 * GN, F = d.E + CD + d.H, D = d.D, E = d.E;
  const Vec& w_in = p.at(d.name + ".in_proj.weight");
  const Vec& cw = p.at(d.name + ".conv.weight");
  const Vec& cb = p.at(d.name + ".conv.bias");
  const Vec& dt_bias = p.at(d.name + ".dt_bias");
  const Vec& a_log = p.at(d.name + ".A_log");
  const Vec& skip = p.at(d.name + ".D");
  const Vec& nw = p.at(d.name + ".norm.weight");
  const Vec& w_out = p.at(d.name + ".out_proj.weight");
  Vec out(B * T * D, 0.0);
  Vec zx(F), xc(CD), y(E), yn(E), hist(T * CD), S(d.H * d.P * d.N);
  for (std::int64_t b = 0; b < B; ++b) {
    std::int64_t start = 0;
    std::fill(S.begin(), S.end(), 0.0);
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int64_t row = b * T + t;
      if (!resets.empty() && resets[row] != 0) {
        start = t;
        std::fill(S.begin(), S.end(), 0.0);
      }
      for (std::int64_t f = 0; f < F; ++f) {
        double acc = 0;
        for (std::int64_t k = 0; k < D; ++k) acc += w_in[f * D + k] * in[row * D + k];
        zx[f] = acc;
      }
      for (std::int64_t c = 0; c < CD; ++c) hist[t * CD + c] = zx[E + c];
      for (std::int64_t c = 0; c < CD; ++c) {
        double acc = cb[c];
        for (std::int64_t k = 0; k < d.K; ++k) {
          const std::int64_t src = t - (d.K - 1) + k;
          if (src >= start) acc += cw[c * d.K + k] * hist[src * CD + c];
        }
        xc[c] = silu(acc);
      }
      for (std::int64_t h = 0; h < d.H; ++h) {
        const std::int64_t g = h / (d.H / d.G);
        const double dt = softplus(zx[E + CD + h] + dt_bias[h]), A = -std::exp(a_log[h]), decay = std::exp(dt * A);
        for (std::int64_t q = 0; q < d.P; ++q) {
          const double xv = xc[h * d.P + q];
          double acc = 0;
          for (std::int64_t n = 0; n < d.N; ++n) {
            double& s = S[(h * d.P + q) * d.N + n];
            s = decay * s + dt * xv * xc[E + g * d.N + n];
            acc += s * xc[E + GN + g * d.N + n];
          }
          y[h * d.P + q] = acc + skip[h] * xv;
        }
      }
      double ss = 0;
      for (std::int64_t e = 0; e < E; ++e) {
        y[e] *= silu(zx[e]);
        ss += y[e] * y[e];
      }
      const double rs = 1.0 / std::sqrt(ss / E + d.eps);
      for (std::int64_t e = 0; e < E; ++e) yn[e] = y[e] * rs * nw[e];
      for (std::int64_t k = 0; k < D; ++k) {
        double acc = 0;
        for (std::int64_t e = 0; e < E; ++e) acc += w_out[k * E + e] * yn[e];
        out[row * D + k] = acc;
      }
    }
  }
  return out;
}

Vec ref_rms(const Vec& x, const Vec& w, std::int64_t rows, std::int64_t C, double eps) {
  Vec y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::int64_t c = 0; c < C; ++c) ss += x[r * C + c] * x[r * C + c];
    const double rs = 1.0 / std::sqrt(ss / C + eps);
    for (std::int64_t c = 0; c < C; ++c) y[r * C + c] = x[r * C + c] * rs * w[c];
  }
  return y;
}

Vec ref_stack(const Params& p, const Mamba2& m, const Vec& in, std::int64_t B, std::int64_t T,
              const std::vector<U8>& resets) {
  const auto& s = m.spec();
  const std::int64_t rows = B * T, Dm = s.d_model;
  const Vec& w = p.at(s.name + ".input.weight");
  const Vec& bias = p.at(s.name + ".input.bias");
  Vec h(rows * Dm);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < Dm; ++j) {
      double acc = bias[j];
      for (std::int64_t k = 0; k < s.in; ++k) acc += w[j * s.in + k] * in[r * s.in + k];
      h[r * Dm + j] = acc;
    }
  for (std::int64_t l = 0; l < s.n_layers; ++l) {
    const Vec n = ref_rms(h, p.at(m.norm(l).weight_name()), rows, Dm, s.eps);
    const Vec o = ref_layer(p, dims_of(m.mixer(l)), n, B, T, resets);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] += o[i];
  }
  return ref_rms(h, p.at(m.norm_f().weight_name()), rows, Dm, s.eps);
}

using RefFn = std::function<Vec(const Params&, const Vec&)>;

// A module with its own arena; D, the norm weights and dt_bias perturbed from their init so the
// tests see each of them at work (init: ones and a narrow dt range).
template <class M>
struct Built {
  gpu::ParameterArena arena;
  std::unique_ptr<M> m;
};

class Mamba2Test : public test::LaneTest {
 protected:
  template <class M, class Spec>
  std::unique_ptr<Built<M>> build(Spec spec) {
    auto b = std::make_unique<Built<M>>();
    b->m = std::make_unique<M>(std::move(spec));
    b->m->declare(b->arena);
    b->arena.finalize(s());
    b->m->init(b->arena, rng(), s());
    b->m->bind(b->arena);
    for (const auto& e : b->arena.entries()) {
      const auto ends = [&](const std::string& suffix) {
        return e.name.size() >= suffix.size() &&
               e.name.compare(e.name.size() - suffix.size(), suffix.size(), suffix) == 0;
      };
      std::vector<float> v;
      if (ends(".D") || ends("norm.weight") || ends("norm_f.weight"))
        v = test::random_uniform(e.numel, 0.5f, 1.5f, rng());
      else if (ends(".dt_bias"))
        v = test::random_uniform(e.numel, -4.f, -1.f, rng());  // dt ~ 0.02 .. 0.3
      if (!v.empty()) test::upload_to(b->arena.params() + e.offset, v, s());
    }
    return b;
  }
  Params read_params(const gpu::ParameterArena& arena) {
    Params p;
    for (const auto& e : arena.entries()) {
      const auto v = test::download(arena.params() + e.offset, e.numel, s());
      p[e.name] = Vec(v.begin(), v.end());
    }
    return p;
  }
  std::vector<float> all_grads(const gpu::ParameterArena& arena) {
    std::vector<float> v;
    for (const auto& e : arena.entries()) {
      const auto g = test::download(arena.grads() + e.offset, e.numel, s());
      v.insert(v.end(), g.begin(), g.end());
    }
    return v;
  }
  void poison_grads(gpu::ParameterArena& arena) {
    FH_CHECK(cudaMemsetAsync(arena.grads(), 0xFF, arena.padded_count() * sizeof(float), s()));
  }

  // Module forward + backward (d_out = u) with poisoned outputs; then the output against the
  // reference, and every parameter tensor's gradient (a sample of each) and the input gradient
  // against central differences of the float64 reference loss sum(u * out).
  template <class M>
  void check_against_reference(Built<M>& b, std::int64_t B, const RefFn& ref) {
    M& m = *b.m;
    const std::int64_t T = m.sequence_length(), n_in = B * T * m.in_features(), n_out = B * T * m.out_features();
    const auto x = test::random_uniform(n_in, -1.f, 1.f, rng());
    const auto u = test::random_uniform(n_out, -1.f, 1.f, rng());
    auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
    gpu::DeviceBuffer<float> d_out(n_out), d_dx(n_in);
    const OwnedWorkspace ws(m, B);
    test::poison(d_out, s());
    test::poison(d_dx, s());
    poison_grads(b.arena);
    m.forward(d_out.data(), d_x.data(), B, false, ws.view, lane());
    m.backward(d_dx.data(), d_u.data(), d_x.data(), B, ws.view, lane(), nullptr);
    const auto out = test::download(d_out, s()), dx = test::download(d_dx, s());
    Params p = read_params(b.arena);
    Vec xin(x.begin(), x.end());
    EXPECT_LT(test::rel_error(out, ref(p, xin)), 1e-4) << "forward vs float64";
    auto loss = [&] {
      const Vec o = ref(p, xin);
      double L = 0;
      for (std::size_t i = 0; i < o.size(); ++i) L += u[i] * o[i];
      return L;
    };
    auto fd = [&](double& v) {
      const double v0 = v, h = 1e-5 * std::max(1.0, std::abs(v0));
      v = v0 + h;
      const double lp = loss();
      v = v0 - h;
      const double lm = loss();
      v = v0;
      return (lp - lm) / (2 * h);
    };
    // A floor for near-zero tensors (A_log over one step): 1e-3 of the RMS of all gradients.
    const auto every = all_grads(b.arena);
    double rms_all = 0;
    for (float v : every) rms_all += static_cast<double>(v) * v;
    rms_all = std::sqrt(rms_all / static_cast<double>(every.size()));
    for (const auto& e : b.arena.entries()) {
      const auto g = test::download(b.arena.grads() + e.offset, e.numel, s());
      double rms = 0;
      for (float v : g) rms += static_cast<double>(v) * v;
      rms = std::sqrt(rms / static_cast<double>(g.size()));
      ASSERT_TRUE(std::isfinite(rms)) << e.name << ": gradient not fully written";
      // Stratified: one random element in each of n equal slices (so every column range of in_proj
      // and every channel range of the conv is seen), and the last element (in_proj's dt rows).
      const std::int64_t n = std::min<std::int64_t>(e.numel, 24);
      for (std::int64_t k = 0; k <= n; ++k) {
        const std::int64_t lo = k * e.numel / n, width = (k + 1) * e.numel / n - lo;
        const std::int64_t i = k == n ? e.numel - 1 : lo + static_cast<std::int64_t>(rng()() % width);
        EXPECT_TRUE(test::fd_close(fd(p[e.name][i]), g[i], 2e-3, std::max(0.05 * rms, 1e-3 * rms_all)))
            << e.name << "[" << i << "]";
      }
    }
    double rms_x = 0;
    for (float v : dx) rms_x += static_cast<double>(v) * v;
    rms_x = std::sqrt(rms_x / static_cast<double>(dx.size()));
    for (int k = 0; k < 8; ++k) {
      const auto i = static_cast<std::int64_t>(rng()() % dx.size());
      EXPECT_TRUE(test::fd_close(fd(xin[i]), dx[i], 2e-3, 0.05 * rms_x)) << "x[" << i << "]";
    }
  }
};

Mamba2LayerSpec layer_spec(std::int64_t D, std::int64_t P, std::int64_t N, std::int64_t G, std::int64_t K,
                           std::int64_t chunk, std::int64_t T) {
  Mamba2LayerSpec s;
  s.name = "mixer";
  s.d_model = D, s.head_dim = P, s.d_state = N, s.groups = G, s.conv_kernel = K, s.chunk = chunk;
  s.sequence_length = T;
  return s;
}

Mamba2Spec stack_spec(std::int64_t in, std::int64_t D, std::int64_t layers, std::int64_t T, std::int64_t chunk,
                      gpu::LinearMath math = gpu::LinearMath::fp32) {
  Mamba2Spec s;
  s.name = "m2";
  s.in = in, s.d_model = D, s.n_layers = layers, s.head_dim = 8, s.d_state = 8, s.chunk = chunk;
  s.sequence_length = T;
  s.math = math;
  return s;
}

TEST_F(Mamba2Test, LayerMatchesFloat64ForwardAndGradients) {
  SCOPED_TRACE(seed_note());
  struct Case {
    std::int64_t B, T, D, P, N, G, K, chunk;
  };
  // Defaults (P = N = 16, K = 4, chunk 64) over two chunks with a short last one; groups; one step;
  // chunk lengths that do not divide T.
  for (const Case c : {Case{2, 70, 16, 16, 16, 1, 4, 64}, Case{3, 9, 8, 4, 8, 2, 3, 4}, Case{1, 1, 4, 8, 4, 1, 2, 64},
                       Case{2, 23, 12, 6, 5, 4, 4, 7}}) {
    SCOPED_TRACE("B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " D=" + std::to_string(c.D) +
                 " P=" + std::to_string(c.P) + " N=" + std::to_string(c.N) + " G=" + std::to_string(c.G) +
                 " K=" + std::to_string(c.K) + " chunk=" + std::to_string(c.chunk));
    auto b = build<Mamba2Layer>(layer_spec(c.D, c.P, c.N, c.G, c.K, c.chunk, c.T));
    const LayerDims d = dims_of(*b->m);
    const std::int64_t B = c.B, T = c.T;
    check_against_reference(*b, B, [&](const Params& p, const Vec& in) { return ref_layer(p, d, in, B, T, {}); });
  }
}

TEST_F(Mamba2Test, StackMatchesFloat64ForwardAndGradients) {
  SCOPED_TRACE(seed_note());
  auto b = build<Mamba2>(stack_spec(5, 16, 2, 37, 16));
  EXPECT_EQ(b->m->in_features(), 5);
  EXPECT_EQ(b->m->out_features(), 16);
  EXPECT_EQ(b->m->state_features(), 2 * (b->m->mixer(0).conv_dim() * 3 + 4 * 8 * 8));
  for (const char* name :
       {"m2.input.weight", "m2.input.bias", "m2.layers.0.norm.weight", "m2.layers.1.mixer.in_proj.weight",
        "m2.layers.1.mixer.conv.weight", "m2.layers.1.mixer.conv.bias", "m2.layers.0.mixer.dt_bias",
        "m2.layers.0.mixer.A_log", "m2.layers.0.mixer.D", "m2.layers.0.mixer.norm.weight",
        "m2.layers.0.mixer.out_proj.weight", "m2.norm_f.weight"})
    EXPECT_TRUE(b->arena.contains(name)) << name;
  const std::int64_t B = 3, T = 37;
  const Mamba2& m = *b->m;
  check_against_reference(*b, B, [&](const Params& p, const Vec& in) { return ref_stack(p, m, in, B, T, {}); });
}

// The loose check the project asks of every backward: central differences of the GPU forward.
TEST_F(Mamba2Test, StackBackwardMatchesGpuFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 2, T = 20;
  auto b = build<Mamba2>(stack_spec(4, 8, 2, T, 8));
  Mamba2& m = *b->m;
  const auto x = test::random_uniform(B * T * 4, -1.f, 1.f, rng());
  const auto u = test::random_uniform(B * T * 8, -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  gpu::DeviceBuffer<float> d_out(u.size()), d_dx(x.size());
  const OwnedWorkspace ws(m, B);
  auto forward = [&] { m.forward(d_out.data(), d_x.data(), B, false, ws.view, lane()); };
  forward();
  m.backward(d_dx.data(), d_u.data(), d_x.data(), B, ws.view, lane(), nullptr);
  const auto grads = test::download(b->arena.grads(), b->arena.padded_count(), s());
  const auto dx = test::download(d_dx, s());
  auto loss = [&] { return test::weighted_sum(forward, d_out.data(), u, s()); };
  for (const auto& e : b->arena.entries()) {
    double rms = 0;
    for (std::int64_t i = 0; i < e.numel; ++i) rms += static_cast<double>(grads[e.offset + i]) * grads[e.offset + i];
    rms = std::sqrt(rms / static_cast<double>(e.numel));
    for (int k = 0; k < 2; ++k) {
      const auto i = static_cast<std::int64_t>(rng()() % static_cast<std::uint64_t>(e.numel));
      const double fd = test::central_difference(loss, b->arena.params() + e.offset, i, 1e-2f, s());
      EXPECT_TRUE(test::fd_close(fd, grads[e.offset + i], 3e-2, std::max(0.1 * rms, 0.05)))
          << e.name << "[" << i << "]";
    }
  }
  double rms_x = 0;
  for (float g : dx) rms_x += static_cast<double>(g) * g;
  rms_x = std::sqrt(rms_x / static_cast<double>(dx.size()));
  for (int k = 0; k < 4; ++k) {
    const auto i = static_cast<std::int64_t>(rng()() % dx.size());
    const double fd = test::central_difference(loss, d_x.data(), i, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, dx[i], 3e-2, std::max(0.1 * rms_x, 0.05))) << "x[" << i << "]";
  }
}

// Runs `steps` step() calls over x (B, T, C) with per-(b, t) resets; returns (B, T, out).
template <class M>
std::vector<float> run_steps(M& m, const std::vector<float>& x, const std::vector<U8>& resets, std::int64_t B,
                             std::int64_t T, float* state, gpu::BlasLane lane) {
  const std::int64_t C = m.in_features(), O = m.out_features();
  gpu::DeviceBuffer<std::byte> ws_mem(m.step_workspace_bytes(B));
  const Workspace ws{ws_mem.data(), B, false};
  gpu::DeviceBuffer<float> d_in(B * C), d_y(B * O);
  gpu::DeviceBuffer<U8> d_reset(B);
  std::vector<float> out(B * T * O);
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<float> xt(B * C);
    std::vector<U8> rt(B);
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t c = 0; c < C; ++c) xt[b * C + c] = x[(b * T + t) * C + c];
      rt[b] = resets[b * T + t];
    }
    d_in.upload(std::span<const float>(xt), lane.stream);
    d_reset.upload(std::span<const U8>(rt), lane.stream);
    test::poison(d_y, lane.stream);
    m.step(d_y.data(), state, d_in.data(), d_reset.data(), B, ws, lane);
    const auto y = test::download(d_y, lane.stream);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t o = 0; o < O; ++o) out[(b * T + t) * O + o] = y[b * O + o];
  }
  return out;
}

// Steps from a NaN-poisoned state reset at t = 0 equal the training form (layer and stack); after
// every row is reset at t0 they equal a fresh training-form sequence over x[:, t0:]; with random
// per-row resets they equal the float64 stack that forgets at each reset.
TEST_F(Mamba2Test, StepsEqualTrainingFormAcrossResets) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 3, T = 29, t0 = 11, C = 5;
  auto as_double = [](const std::vector<float>& v) { return Vec(v.begin(), v.end()); };
  {
    auto layer = build<Mamba2Layer>(layer_spec(8, 4, 6, 2, 3, 8, T));
    Mamba2Layer& l = *layer->m;
    const auto x = test::random_uniform(B * T * 8, -1.f, 1.f, rng());
    auto d_x = test::upload(x, s());
    gpu::DeviceBuffer<float> d_out(B * T * 8), d_state(B * l.state_features());
    const OwnedWorkspace ws(l, B);
    l.forward(d_out.data(), d_x.data(), B, false, ws.view, lane());
    std::vector<U8> first(B * T, 0);
    for (std::int64_t b = 0; b < B; ++b) first[b * T] = 1;
    test::poison(d_state, s());
    const auto steps = run_steps(l, x, first, B, T, d_state.data(), lane());
    EXPECT_TRUE(test::all_close(steps, as_double(test::download(d_out, s())), 2e-4, 5e-5)) << "layer steps";
  }
  auto full = build<Mamba2>(stack_spec(C, 16, 2, T, 8));
  Mamba2& m = *full->m;
  const auto x = test::random_uniform(B * T * C, -1.f, 1.f, rng());
  auto d_x = test::upload(x, s());
  gpu::DeviceBuffer<float> d_out(B * T * 16), d_state(B * m.state_features());
  const OwnedWorkspace ws(m, B);
  m.forward(d_out.data(), d_x.data(), B, false, ws.view, lane());
  const auto seq = test::download(d_out, s());

  std::vector<U8> resets(B * T, 0);
  for (std::int64_t b = 0; b < B; ++b) resets[b * T] = 1;
  test::poison(d_state, s());
  const auto steps = run_steps(m, x, resets, B, T, d_state.data(), lane());
  EXPECT_TRUE(test::all_close(steps, as_double(seq), 2e-4, 5e-5)) << "stack steps vs training form";

  // Every row reset at t0 (state carried from the steps above): a fresh sequence over x[:, t0:].
  for (std::int64_t b = 0; b < B; ++b) resets[b * T] = 0, resets[b * T + t0] = 1;
  const auto cut = run_steps(m, x, resets, B, T, d_state.data(), lane());
  Mamba2Spec tail_spec = m.spec();
  tail_spec.sequence_length = T - t0;
  auto tail = std::make_unique<Built<Mamba2>>();
  tail->m = std::make_unique<Mamba2>(tail_spec);
  tail->m->declare(tail->arena);
  tail->arena.finalize(s());
  tail->m->bind(tail->arena);
  FH_CHECK(cudaMemcpyAsync(tail->arena.params(), full->arena.params(), full->arena.padded_count() * sizeof(float),
                           cudaMemcpyDeviceToDevice, s()));
  std::vector<float> x_tail(B * (T - t0) * C);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = t0; t < T; ++t)
      for (std::int64_t c = 0; c < C; ++c) x_tail[(b * (T - t0) + t - t0) * C + c] = x[(b * T + t) * C + c];
  auto d_xt = test::upload(x_tail, s());
  gpu::DeviceBuffer<float> d_tail(B * (T - t0) * 16);
  const OwnedWorkspace tws(*tail->m, B);
  tail->m->forward(d_tail.data(), d_xt.data(), B, false, tws.view, lane());
  const auto fresh = test::download(d_tail, s());
  std::vector<float> cut_tail(fresh.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = t0; t < T; ++t)
      for (std::int64_t o = 0; o < 16; ++o) cut_tail[(b * (T - t0) + t - t0) * 16 + o] = cut[(b * T + t) * 16 + o];
  EXPECT_TRUE(test::all_close(cut_tail, as_double(fresh), 2e-4, 5e-5)) << "after a reset vs a fresh sequence";

  // Random per-row resets against the float64 stack.
  std::bernoulli_distribution coin(0.1);
  for (auto& r : resets) r = coin(rng()) ? 1 : 0;
  for (std::int64_t b = 0; b < B; ++b) resets[b * T] = 1;
  resets[1 * T + 5] = 1;
  test::poison(d_state, s());
  const auto random = run_steps(m, x, resets, B, T, d_state.data(), lane());
  const Vec want = ref_stack(read_params(full->arena), m, as_double(x), B, T, resets);
  EXPECT_TRUE(test::all_close(random, want, 2e-4, 5e-5)) << "steps with random resets vs float64";
}

TEST_F(Mamba2Test, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 3, T = 40, C = 6;
  auto b = build<Mamba2>(stack_spec(C, 16, 2, T, 16));
  Mamba2& m = *b->m;
  const auto x = test::random_uniform(B * T * C, -1.f, 1.f, rng());
  const auto u = test::random_uniform(B * T * 16, -1.f, 1.f, rng());
  const auto state0 = test::random_uniform(B * m.state_features(), -1.f, 1.f, rng());
  const std::vector<U8> reset{0, 1, 0};
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  auto d_reset = test::upload(reset, s());
  gpu::DeviceBuffer<float> d_out(u.size()), d_dx(x.size()), d_state(state0.size()), d_y(B * 16);
  const OwnedWorkspace ws(m, B);
  gpu::DeviceBuffer<std::byte> step_mem(m.step_workspace_bytes(B));
  const Workspace step_ws{step_mem.data(), B, false};
  auto body = [&](gpu::BlasLane ln) {
    m.forward(d_out.data(), d_x.data(), B, false, ws.view, ln);
    m.backward(d_dx.data(), d_u.data(), d_x.data(), B, ws.view, ln, nullptr);
    m.step(d_y.data(), d_state.data(), d_x.data(), d_reset.data(), B, step_ws, ln);
  };
  test::upload_to(d_state.data(), state0, s());
  body(lane());
  const auto out = test::download(d_out, s()), dx = test::download(d_dx, s()), st = test::download(d_state, s()),
             y = test::download(d_y, s());
  const auto grads = all_grads(b->arena);
  gpu::CudaGraph graph;
  graph.capture(s(), [&](cudaStream_t cs) {
    gpu::BlasLane ln = lane();
    ln.stream = cs;
    body(ln);
  });
  ASSERT_TRUE(graph.captured());
  auto same = [](const std::vector<float>& a, const std::vector<float>& c) {
    return a.size() == c.size() && std::memcmp(a.data(), c.data(), a.size() * sizeof(float)) == 0;
  };
  for (int r = 0; r < 2; ++r) {
    test::poison(d_out, s());
    test::poison(d_dx, s());
    test::poison(d_y, s());
    poison_grads(b->arena);
    test::upload_to(d_state.data(), state0, s());
    graph.replay(s());
    EXPECT_TRUE(same(test::download(d_out, s()), out)) << "out, replay " << r;
    EXPECT_TRUE(same(test::download(d_dx, s()), dx)) << "d_in, replay " << r;
    EXPECT_TRUE(same(all_grads(b->arena), grads)) << "gradients, replay " << r;
    EXPECT_TRUE(same(test::download(d_state, s()), st)) << "step state, replay " << r;
    EXPECT_TRUE(same(test::download(d_y, s()), y)) << "step out, replay " << r;
  }
}

// bf16 GEMMs (fp32 master weights, fp32 SSD core) with the fp32 model's weights: the output, the
// input gradient and the parameter gradients (as one vector) within 3e-2 relative L2 of fp32.
TEST_F(Mamba2Test, Bf16StaysCloseToFp32) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 4, T = 64, C = 8;
  auto a = build<Mamba2>(stack_spec(C, 32, 2, T, 32));
  auto b = build<Mamba2>(stack_spec(C, 32, 2, T, 32, gpu::LinearMath::bf16));
  FH_CHECK(cudaMemcpyAsync(b->arena.params(), a->arena.params(), a->arena.padded_count() * sizeof(float),
                           cudaMemcpyDeviceToDevice, s()));
  const auto x = test::random_uniform(B * T * C, -1.f, 1.f, rng());
  const auto u = test::random_uniform(B * T * 32, -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  auto run = [&](Built<Mamba2>& n, std::vector<float>& out, std::vector<float>& dx) {
    gpu::DeviceBuffer<float> d_out(u.size()), d_dx(x.size());
    const OwnedWorkspace ws(*n.m, B);
    n.m->forward(d_out.data(), d_x.data(), B, false, ws.view, lane());
    n.m->backward(d_dx.data(), d_u.data(), d_x.data(), B, ws.view, lane(), nullptr);
    out = test::download(d_out, s());
    dx = test::download(d_dx, s());
  };
  std::vector<float> oa, dxa, ob, dxb;
  run(*a, oa, dxa);
  run(*b, ob, dxb);
  auto as_double = [](const std::vector<float>& v) { return Vec(v.begin(), v.end()); };
  EXPECT_LT(test::rel_error(ob, as_double(oa)), 3e-2) << "out";
  EXPECT_LT(test::rel_error(dxb, as_double(dxa)), 3e-2) << "d_in";
  EXPECT_LT(test::rel_error(all_grads(b->arena), as_double(all_grads(a->arena))), 3e-2) << "gradients";
  EXPECT_GT(test::rel_error(ob, as_double(oa)), 0.0) << "bf16 GEMMs ran (results differ from fp32)";
}

}  // namespace
}  // namespace foxhunt::models
