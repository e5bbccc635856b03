// The Mamba-2 SSD core: the chunked forward and its backward against a float64 sequential
// recurrence and its exact reverse mode (several shapes: T a multiple of the chunk and not, a chunk
// longer than T, chunk 1, one and several groups, tiles that halve the chunk run), the backward
// against central finite differences of the GPU forward, the per-step form against the chunked form
// (a reset equals a fresh sequence), a CUDA-graph replay against eager runs, reruns bitwise equal,
// and the argument checks.
#include "models/fd_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/graph.hpp"
#include "models/mamba2/ssd.hpp"

namespace foxhunt::models {
namespace {

using U8 = std::uint8_t;
using Vec = std::vector<float>;
using DVec = std::vector<double>;

std::string describe(const SsdShape& s) {
  return "B=" + std::to_string(s.batch) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.heads) +
         " P=" + std::to_string(s.head_dim) + " G=" + std::to_string(s.groups) + " N=" + std::to_string(s.state) +
         " L=" + std::to_string(s.chunk);
}

std::size_t n_x(const SsdShape& s) { return static_cast<std::size_t>(s.batch * s.T * s.heads * s.head_dim); }
std::size_t n_dt(const SsdShape& s) { return static_cast<std::size_t>(s.batch * s.T * s.heads); }
std::size_t n_bc(const SsdShape& s) { return static_cast<std::size_t>(s.batch * s.T * s.groups * s.state); }
std::size_t n_state(const SsdShape& s) { return static_cast<std::size_t>(s.batch * s.heads * s.head_dim * s.state); }

struct Inputs {
  Vec x, dt, A, Bm, Cm;
};

// x, Bm, Cm ~ U(-1, 1); dt = softplus(N(-1.5, 1)) kept in [0.01, 0.5]; A = -exp(U(-2, 1)).
Inputs random_inputs(const SsdShape& s, std::mt19937_64& rng) {
  Inputs in;
  in.x = test::random_uniform(n_x(s), -1.f, 1.f, rng);
  in.dt = test::random_normal(n_dt(s), -1.5f, 1.f, rng);
  for (float& v : in.dt) v = std::clamp(std::log1p(std::exp(v)), 0.01f, 0.5f);
  in.A = test::random_uniform(static_cast<std::size_t>(s.heads), -2.f, 1.f, rng);
  for (float& v : in.A) v = -std::exp(v);
  in.Bm = test::random_uniform(n_bc(s), -1.f, 1.f, rng);
  in.Cm = test::random_uniform(n_bc(s), -1.f, 1.f, rng);
  return in;
}

// The float64 sequential recurrence of ssd.hpp and the exact gradients of L = sum(u * y).
struct Reference {
  DVec y, final_state, dx, ddt, dA, dBm, dCm;
};

Reference reference(const SsdShape& s, const Inputs& in, const Vec& u) {
  const std::int64_t B = s.batch, T = s.T, H = s.heads, P = s.head_dim, G = s.groups, N = s.state, hpg = H / G;
  Reference r;
  r.y.assign(n_x(s), 0);
  r.final_state.assign(n_state(s), 0);
  r.dx.assign(n_x(s), 0);
  r.ddt.assign(n_dt(s), 0);
  r.dA.assign(static_cast<std::size_t>(H), 0);
  r.dBm.assign(n_bc(s), 0);
  r.dCm.assign(n_bc(s), 0);
  auto ix = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t p) {
    return ((b * T + t) * H + h) * P + p;
  };
  auto it = [&](std::int64_t b, std::int64_t t, std::int64_t h) { return (b * T + t) * H + h; };
  auto ibc = [&](std::int64_t b, std::int64_t t, std::int64_t g, std::int64_t n) {
    return ((b * T + t) * G + g) * N + n;
  };
  const std::int64_t PN = P * N;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / hpg;
      const double A = in.A[h];
      DVec states(static_cast<std::size_t>(T * PN));  // S_t after step t
      DVec S(static_cast<std::size_t>(PN), 0);
      for (std::int64_t t = 0; t < T; ++t) {
        const double dt = in.dt[it(b, t, h)], a = std::exp(dt * A);
        for (std::int64_t p = 0; p < P; ++p) {
          double y = 0;
          for (std::int64_t n = 0; n < N; ++n) {
            double& v = S[p * N + n];
            v = a * v + dt * in.x[ix(b, t, h, p)] * in.Bm[ibc(b, t, g, n)];
            y += v * in.Cm[ibc(b, t, g, n)];
          }
          r.y[ix(b, t, h, p)] = y;
        }
        std::copy(S.begin(), S.end(), states.begin() + t * PN);
      }
      std::copy(S.begin(), S.end(), r.final_state.begin() + (b * H + h) * PN);
      if (u.empty()) continue;
      DVec dS(static_cast<std::size_t>(PN), 0);
      for (std::int64_t t = T; t-- > 0;) {
        const double* St = &states[t * PN];
        const double dt = in.dt[it(b, t, h)], a = std::exp(dt * A);
        for (std::int64_t p = 0; p < P; ++p)
          for (std::int64_t n = 0; n < N; ++n) {
            const double dy = u[ix(b, t, h, p)];
            dS[p * N + n] += dy * in.Cm[ibc(b, t, g, n)];
            r.dCm[ibc(b, t, g, n)] += dy * St[p * N + n];
          }
        double ddt = 0, dA = 0;
        for (std::int64_t p = 0; p < P; ++p) {
          const double xp = in.x[ix(b, t, h, p)];
          double dxp = 0;
          for (std::int64_t n = 0; n < N; ++n) {
            const double d = dS[p * N + n], bn = in.Bm[ibc(b, t, g, n)];
            const double prev = t > 0 ? states[(t - 1) * PN + p * N + n] : 0.0;
            dxp += d * bn;
            r.dBm[ibc(b, t, g, n)] += dt * d * xp;
            ddt += d * (xp * bn + A * a * prev);
            dA += d * dt * a * prev;
          }
          r.dx[ix(b, t, h, p)] = dt * dxp;
        }
        r.ddt[it(b, t, h)] = ddt;
        r.dA[h] += dA;
        for (double& d : dS) d *= a;
      }
    }
  return r;
}

// max_i |got_i - ref_i| <= tol * rms(ref): errors measured against the tensor's scale; NaN fails.
::testing::AssertionResult close_to_scale(const Vec& got, const DVec& ref, double tol) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
  double ss = 0;
  for (double v : ref) ss += v * v;
  const double scale = std::max(std::sqrt(ss / static_cast<double>(std::max<std::size_t>(ref.size(), 1))), 1e-30);
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= tol * scale))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << ref[i] << " (|err| "
                                           << err << " > " << tol << " * scale " << scale << ")";
    if (err > worst) worst = err, at = i;
  }
  return ::testing::AssertionSuccess() << "max |err| " << worst << " at " << at << ", scale " << scale;
}

// The inputs and outputs of one shape on the device, with its workspace.
struct Device {
  Device(const SsdShape& shape, const Inputs& in, const Vec& u, cudaStream_t s)
      : x(test::upload(in.x, s)),
        dt(test::upload(in.dt, s)),
        A(test::upload(in.A, s)),
        Bm(test::upload(in.Bm, s)),
        Cm(test::upload(in.Cm, s)),
        dy(test::upload(u, s)),
        y(n_x(shape)),
        final_state(n_state(shape)),
        dx(n_x(shape)),
        ddt(n_dt(shape)),
        dA(static_cast<std::size_t>(shape.heads)),
        dBm(n_bc(shape)),
        dCm(n_bc(shape)),
        ws(ssd_workspace_bytes(shape)) {}
  gpu::DeviceBuffer<float> x, dt, A, Bm, Cm, dy, y, final_state, dx, ddt, dA, dBm, dCm;
  gpu::DeviceBuffer<std::byte> ws;

  void poison_outputs(cudaStream_t s) {
    for (auto* b : {&y, &final_state, &dx, &ddt, &dA, &dBm, &dCm}) test::poison(*b, s);
  }
  void forward(const SsdShape& shape, cudaStream_t s) {
    ssd_forward(y.data(), final_state.data(), x.data(), dt.data(), A.data(), Bm.data(), Cm.data(), shape, ws.data(), s);
  }
  void backward(const SsdShape& shape, cudaStream_t s) {
    ssd_backward(dx.data(), ddt.data(), dA.data(), dBm.data(), dCm.data(), dy.data(), x.data(), dt.data(), A.data(),
                 Bm.data(), Cm.data(), shape, ws.data(), s);
  }
  // Every output, concatenated: y, final_state, dx, ddt, dA, dBm, dCm.
  Vec outputs(cudaStream_t s) {
    Vec all;
    for (auto* b : {&y, &final_state, &dx, &ddt, &dA, &dBm, &dCm}) {
      const auto v = test::download(*b, s);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }
};

using SsdTest = test::LaneTest;

// fp32 tolerances relative to each tensor's RMS: forward 1e-4; gradients 5e-4 (they sum longer
// chains: dA over every (b, t, p, n), ddt through the within-chunk reverse cumulative sum).
constexpr double kForwardTol = 1e-4, kGradTol = 5e-4;

TEST_F(SsdTest, ForwardAndBackwardMatchFloat64) {
  SCOPED_TRACE(seed_note());
  const std::vector<SsdShape> shapes{
      {2, 64, 4, 16, 1, 16, 16},   // T a multiple of L, G = 1
      {2, 50, 4, 8, 2, 8, 16},     // a short last chunk, G = 2
      {1, 256, 2, 32, 1, 32, 64},  // long chunks
      {2, 37, 6, 12, 3, 20, 8},    // odd sizes, 3 groups of 2 heads
      {1, 5, 2, 8, 2, 8, 64},      // one chunk shorter than L
      {1, 9, 1, 3, 1, 5, 1},       // chunks of one step
      {1, 100, 2, 64, 1, 64, 256},  // tiles too large for L = 256: the chunk run is halved to 32
  };
  for (const SsdShape& shape : shapes) {
    SCOPED_TRACE(describe(shape));
    const Inputs in = random_inputs(shape, rng());
    const Vec u = test::random_uniform(n_x(shape), -1.f, 1.f, rng());
    Device dev(shape, in, u, s());
    dev.poison_outputs(s());
    dev.forward(shape, s());
    dev.backward(shape, s());
    const Reference ref = reference(shape, in, u);
    EXPECT_TRUE(close_to_scale(test::download(dev.y, s()), ref.y, kForwardTol)) << "y";
    EXPECT_TRUE(close_to_scale(test::download(dev.final_state, s()), ref.final_state, kForwardTol)) << "final_state";
    EXPECT_TRUE(close_to_scale(test::download(dev.dx, s()), ref.dx, kGradTol)) << "dx";
    EXPECT_TRUE(close_to_scale(test::download(dev.ddt, s()), ref.ddt, kGradTol)) << "ddt";
    EXPECT_TRUE(close_to_scale(test::download(dev.dA, s()), ref.dA, kGradTol)) << "dA";
    EXPECT_TRUE(close_to_scale(test::download(dev.dBm, s()), ref.dBm, kGradTol)) << "dBm";
    EXPECT_TRUE(close_to_scale(test::download(dev.dCm, s()), ref.dCm, kGradTol)) << "dCm";
  }
}

// Null outputs are skipped, the others are the same as with every output requested.
TEST_F(SsdTest, NullOutputsAreSkipped) {
  SCOPED_TRACE(seed_note());
  const SsdShape shape{2, 30, 4, 8, 2, 8, 8};
  const Inputs in = random_inputs(shape, rng());
  const Vec u = test::random_uniform(n_x(shape), -1.f, 1.f, rng());
  Device dev(shape, in, u, s());
  dev.forward(shape, s());
  dev.backward(shape, s());
  const Vec y = test::download(dev.y, s()), dA = test::download(dev.dA, s()), dCm = test::download(dev.dCm, s());
  dev.poison_outputs(s());
  ssd_forward(dev.y.data(), nullptr, dev.x.data(), dev.dt.data(), dev.A.data(), dev.Bm.data(), dev.Cm.data(), shape,
              dev.ws.data(), s());
  ssd_backward(nullptr, nullptr, dev.dA.data(), nullptr, dev.dCm.data(), dev.dy.data(), dev.x.data(), dev.dt.data(),
               dev.A.data(), dev.Bm.data(), dev.Cm.data(), shape, dev.ws.data(), s());
  EXPECT_EQ(test::download(dev.y, s()), y);
  EXPECT_EQ(test::download(dev.dA, s()), dA);
  EXPECT_EQ(test::download(dev.dCm, s()), dCm);
  for (float v : test::download(dev.dx, s())) ASSERT_TRUE(std::isnan(v)) << "dx was written";
  for (float v : test::download(dev.dBm, s())) ASSERT_TRUE(std::isnan(v)) << "dBm was written";
}

// Each input's gradient at a few random elements against central differences of
// L = sum(u * y) computed in double from the GPU forward.
TEST_F(SsdTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const SsdShape shape{2, 20, 4, 4, 2, 4, 8};
  const Inputs in = random_inputs(shape, rng());
  const Vec u = test::random_uniform(n_x(shape), -1.f, 1.f, rng());
  Device dev(shape, in, u, s());
  dev.forward(shape, s());
  dev.backward(shape, s());
  auto loss = [&] { return test::weighted_sum([&] { dev.forward(shape, s()); }, dev.y.data(), u, s()); };
  struct Case {
    const char* name;
    gpu::DeviceBuffer<float>* input;
    gpu::DeviceBuffer<float>* grad;
    float step;  // y is linear in x, Bm and Cm: a large step is exact; dt and A curve
  };
  const std::vector<Case> cases{{"x", &dev.x, &dev.dx, 1e-2f},
                                {"dt", &dev.dt, &dev.ddt, 2e-3f},
                                {"A", &dev.A, &dev.dA, 2e-3f},
                                {"Bm", &dev.Bm, &dev.dBm, 1e-2f},
                                {"Cm", &dev.Cm, &dev.dCm, 1e-2f}};
  for (const Case& c : cases) {
    const Vec g = test::download(*c.grad, s());
    double rms = 0;
    for (float v : g) rms += static_cast<double>(v) * v;
    rms = std::sqrt(rms / static_cast<double>(g.size()));
    for (int k = 0; k < 4; ++k) {
      const auto i = static_cast<std::int64_t>(rng()() % g.size());
      const double fd = test::central_difference(loss, c.input->data(), i, c.step, s());
      EXPECT_TRUE(test::fd_close(fd, g[i], 5e-3, 0.1 * rms)) << c.name << "[" << i << "]";
    }
  }
}

// ssd_step T times (every row reset at step 0 on a NaN state, row 1 reset again at t0) equals
// ssd_forward's y and final_state; row 1 from t0 on equals a fresh forward of its steps t0 .. T-1.
TEST_F(SsdTest, StepsEqualSequenceAndResetEqualsFresh) {
  SCOPED_TRACE(seed_note());
  const SsdShape shape{3, 40, 4, 8, 2, 8, 16};
  const std::int64_t B = shape.batch, T = shape.T, H = shape.heads, P = shape.head_dim, G = shape.groups,
                     N = shape.state, t0 = 17, row = 1;
  const Inputs in = random_inputs(shape, rng());
  Device dev(shape, in, {}, s());
  test::poison(dev.y, s());
  test::poison(dev.final_state, s());
  dev.forward(shape, s());
  const Vec y_seq = test::download(dev.y, s()), final_seq = test::download(dev.final_state, s());

  // Row `row`'s steps t0 .. T-1 as a sequence of its own.
  SsdShape fresh = shape;
  fresh.batch = 1;
  fresh.T = T - t0;
  Inputs in_fresh;
  auto slice = [&](const Vec& v, std::int64_t width) {  // (B, T, width) -> row `row`, steps t0 ..
    return Vec(v.begin() + (row * T + t0) * width, v.begin() + (row + 1) * T * width);
  };
  in_fresh.x = slice(in.x, H * P);
  in_fresh.dt = slice(in.dt, H);
  in_fresh.A = in.A;
  in_fresh.Bm = slice(in.Bm, G * N);
  in_fresh.Cm = slice(in.Cm, G * N);
  Device dev_fresh(fresh, in_fresh, {}, s());
  dev_fresh.forward(fresh, s());
  const Vec y_fresh = test::download(dev_fresh.y, s()), final_fresh = test::download(dev_fresh.final_state, s());

  // Step-major copies of the inputs: step t reads (B, ...) at offset t * B * width.
  auto step_major = [&](const Vec& v, std::int64_t width) {
    Vec o(v.size());
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t)
        std::copy_n(v.begin() + (b * T + t) * width, width, o.begin() + (t * B + b) * width);
    return o;
  };
  auto x = test::upload(step_major(in.x, H * P), s()), dt = test::upload(step_major(in.dt, H), s());
  auto Bm = test::upload(step_major(in.Bm, G * N), s()), Cm = test::upload(step_major(in.Cm, G * N), s());
  auto A = test::upload(in.A, s());
  std::vector<U8> resets(static_cast<std::size_t>(T * B), 0);
  for (std::int64_t b = 0; b < B; ++b) resets[b] = 1;
  resets[t0 * B + row] = 1;
  auto d_resets = test::upload(resets, s());
  gpu::DeviceBuffer<float> state(n_state(shape)), y(static_cast<std::size_t>(T * B * H * P));
  test::poison(state, s());
  test::poison(y, s());
  for (std::int64_t t = 0; t < T; ++t)
    ssd_step(y.data() + t * B * H * P, state.data(), x.data() + t * B * H * P, dt.data() + t * B * H, A.data(),
             Bm.data() + t * B * G * N, Cm.data() + t * B * G * N, d_resets.data() + t * B, shape, 0, s());
  const Vec y_steps = test::download(y, s()), final_steps = test::download(state, s());
  {  // The same steps on states inside wider rows (state_stride): the same bits.
    const std::int64_t row = H * P * N, stride = row + 3;
    gpu::DeviceBuffer<float> wide(static_cast<std::size_t>(B * stride)), y_wide(y.size());
    test::poison(wide, s());
    for (std::int64_t t = 0; t < T; ++t)
      ssd_step(y_wide.data() + t * B * H * P, wide.data(), x.data() + t * B * H * P, dt.data() + t * B * H, A.data(),
               Bm.data() + t * B * G * N, Cm.data() + t * B * G * N, d_resets.data() + t * B, shape, stride, s());
    EXPECT_EQ(test::download(y_wide, s()), y_steps) << "strided state";
  }

  // What the steps should give, (T, B, H, P) and (B, H, P, N), from the two forwards.
  DVec want_y(y_steps.size()), want_final(final_steps.size());
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t k = 0; k < H * P; ++k) {
        const bool from_fresh = b == row && t >= t0;
        want_y[(t * B + b) * H * P + k] = from_fresh ? y_fresh[(t - t0) * H * P + k] : y_seq[(b * T + t) * H * P + k];
      }
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t k = 0; k < H * P * N; ++k)
      want_final[b * H * P * N + k] = b == row ? final_fresh[k] : final_seq[b * H * P * N + k];
  EXPECT_TRUE(close_to_scale(y_steps, want_y, kForwardTol)) << "y";
  EXPECT_TRUE(close_to_scale(final_steps, want_final, kForwardTol)) << "final state";
}

// forward + backward captured in a CUDA graph (and a step in another) replay bitwise like eager runs.
TEST_F(SsdTest, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const SsdShape shape{2, 50, 4, 8, 2, 8, 16};
  const Inputs in = random_inputs(shape, rng());
  const Vec u = test::random_uniform(n_x(shape), -1.f, 1.f, rng());
  Device dev(shape, in, u, s());
  dev.forward(shape, s());
  dev.backward(shape, s());
  const Vec eager = dev.outputs(s());
  for (float v : eager) ASSERT_TRUE(std::isfinite(v));
  gpu::CudaGraph graph;
  graph.capture(s(), [&](cudaStream_t cs) {
    dev.forward(shape, cs);
    dev.backward(shape, cs);
  });
  ASSERT_TRUE(graph.captured());
  for (int r = 0; r < 2; ++r) {
    dev.poison_outputs(s());
    FH_CHECK(cudaMemsetAsync(dev.ws.data(), 0xFF, dev.ws.bytes(), s()));
    graph.replay(s());
    EXPECT_EQ(dev.outputs(s()), eager) << "replay " << r;
  }

  // One step (rows 0 and 2 of 3 reset) on a state restored before each run.
  const SsdShape step_shape{3, 1, 4, 8, 2, 8, 1};
  const auto n_s = n_state(step_shape);
  const Vec state0 = test::random_uniform(n_s, -1.f, 1.f, rng());
  const std::vector<U8> reset{1, 0, 1};
  auto d_reset = test::upload(reset, s());
  auto d_state = test::upload(state0, s());
  gpu::DeviceBuffer<float> d_y(static_cast<std::size_t>(3 * 4 * 8));
  // The leading elements of the sequence's inputs serve as the step's inputs (they are large enough).
  auto step = [&](cudaStream_t cs) {
    ssd_step(d_y.data(), d_state.data(), dev.x.data(), dev.dt.data(), dev.A.data(), dev.Bm.data(), dev.Cm.data(),
             d_reset.data(), step_shape, 0, cs);
  };
  step(s());
  const Vec y_eager = test::download(d_y, s()), state_eager = test::download(d_state, s());
  gpu::CudaGraph step_graph;
  step_graph.capture(s(), step);
  test::upload_to(d_state.data(), state0, s());
  test::poison(d_y, s());
  step_graph.replay(s());
  EXPECT_EQ(test::download(d_y, s()), y_eager) << "step y";
  EXPECT_EQ(test::download(d_state, s()), state_eager) << "step state";
}

// Two backwards after one forward, and a second forward + backward, are bitwise equal.
TEST_F(SsdTest, RerunsAreBitwiseEqual) {
  SCOPED_TRACE(seed_note());
  const SsdShape shape{3, 70, 6, 16, 2, 16, 32};
  const Inputs in = random_inputs(shape, rng());
  const Vec u = test::random_uniform(n_x(shape), -1.f, 1.f, rng());
  Device dev(shape, in, u, s());
  dev.forward(shape, s());
  dev.backward(shape, s());
  const Vec first = dev.outputs(s());
  dev.poison_outputs(s());
  dev.forward(shape, s());
  dev.backward(shape, s());
  dev.backward(shape, s());
  EXPECT_EQ(dev.outputs(s()), first);
}

// Bad shapes throw std::invalid_argument naming the field (host-only: no device needed).
TEST(SsdArguments, BadShapesThrowNamingTheField) {
  auto expect_throw = [](SsdShape shape, const std::string& field) {
    SCOPED_TRACE(field);
    try {
      (void)ssd_workspace_bytes(shape);
      ADD_FAILURE() << "no exception for a bad " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("shape." + field), std::string::npos) << e.what();
    }
    EXPECT_THROW(ssd_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, shape, nullptr, nullptr),
                 std::invalid_argument);
    EXPECT_THROW(ssd_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                              nullptr, shape, nullptr, nullptr),
                 std::invalid_argument);
  };
  const SsdShape good{2, 10, 4, 8, 2, 8, 4};
  EXPECT_GT(ssd_workspace_bytes(good), 0u);
  SsdShape s = good;
  s.groups = 3;
  expect_throw(s, "groups");
  s = good;
  s.batch = 0;
  expect_throw(s, "batch");
  s = good;
  s.T = -1;
  expect_throw(s, "T");
  s = good;
  s.heads = 0;
  expect_throw(s, "heads");
  s = good;
  s.head_dim = 0;
  expect_throw(s, "head_dim");
  s = good;
  s.state = 0;
  expect_throw(s, "state");
  s = good;
  s.chunk = 0;
  expect_throw(s, "chunk");
  s = good;
  s.chunk = kSsdMaxChunk + 1;
  expect_throw(s, "chunk");
  s = good;
  s.groups = 0;
  expect_throw(s, "groups");
  s = good;
  s.head_dim = 256;
  s.state = 128;
  expect_throw(s, "head_dim");
  s = good;
  s.heads = 0;
  EXPECT_THROW(ssd_step(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, s, 0, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::models
