// sLSTM cell: the fused forward (h and the final state) and the fused backward through time
// (d_gx, dR) against a float64 recurrence and its exact backward, with random initial states,
// reset rows and input-gate pre-activations large enough that the stabilizer matters; the backward
// against central finite differences of the GPU forward; T steps == the sequence, a state carried
// between two forwards == one forward, a reset == a fresh sequence; CUDA-graph replay == eager.
#include "models/fd_support.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/graph.hpp"
#include "models/xlstm/slstm_cell.hpp"
#include "models/xlstm/xlstm_test_support.hpp"

namespace foxhunt::models {
namespace {

using test::xlstm::as_double;
using test::xlstm::slice_time;

struct RefSlstm {
  std::int64_t B = 0, T = 0, H = 0, D = 0;
  std::vector<double> R;  // (4, H, D, D)
  std::int64_t HD() const { return H * D; }

  struct Tape {
    std::vector<double> h, state, pre, c, n, m, init;
  };
  Tape forward(const std::vector<float>& gx, const std::vector<float>& state0,
               const std::vector<std::uint8_t>& reset0) const {
    const std::int64_t HD_ = HD();
    Tape tp;
    tp.h.assign(B * T * HD_, 0);
    tp.c = tp.n = tp.m = tp.h;
    tp.pre.assign(B * T * 4 * HD_, 0);
    tp.state.assign(B * 4 * HD_, 0);
    tp.init = tp.state;
    for (std::int64_t b = 0; b < B; ++b) {
      std::vector<double> hp(HD_, 0), c(HD_, 0), n(HD_, 0), m(HD_, 0), hn(HD_);
      if (!state0.empty() && (reset0.empty() || reset0[b] == 0))
        for (std::int64_t u = 0; u < HD_; ++u) {
          hp[u] = state0[b * 4 * HD_ + u];
          c[u] = state0[b * 4 * HD_ + HD_ + u];
          n[u] = state0[b * 4 * HD_ + 2 * HD_ + u];
          m[u] = state0[b * 4 * HD_ + 3 * HD_ + u];
        }
      for (std::int64_t u = 0; u < HD_; ++u) {
        tp.init[b * 4 * HD_ + u] = hp[u];
        tp.init[b * 4 * HD_ + HD_ + u] = c[u];
        tp.init[b * 4 * HD_ + 2 * HD_ + u] = n[u];
        tp.init[b * 4 * HD_ + 3 * HD_ + u] = m[u];
      }
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t row = b * T + t;
        for (std::int64_t hh = 0; hh < H; ++hh)
          for (std::int64_t d = 0; d < D; ++d) {
            const std::int64_t u = hh * D + d;
            double pre[4];
            for (int g = 0; g < 4; ++g) {
              double acc = gx[(row * 4 + g) * HD_ + u];
              for (std::int64_t e = 0; e < D; ++e) acc += R[((g * H + hh) * D + d) * D + e] * hp[hh * D + e];
              pre[g] = acc;
              tp.pre[(row * 4 + g) * HD_ + u] = acc;
            }
            const bool fresh = n[u] == 0;
            const double lf = test::xlstm::log_sigmoid(pre[1]);
            const double mn = fresh ? pre[0] : std::max(lf + m[u], pre[0]);
            const double ip = std::exp(pre[0] - mn), fp = fresh ? 0.0 : std::exp(lf + m[u] - mn);
            c[u] = fp * c[u] + ip * std::tanh(pre[2]);
            n[u] = fp * n[u] + ip;
            m[u] = mn;
            hn[u] = test::xlstm::sigmoid(pre[3]) * c[u] / n[u];
            tp.c[row * HD_ + u] = c[u];
            tp.n[row * HD_ + u] = n[u];
            tp.m[row * HD_ + u] = m[u];
            tp.h[row * HD_ + u] = hn[u];
          }
        hp = hn;
      }
      for (std::int64_t u = 0; u < HD_; ++u) {
        tp.state[b * 4 * HD_ + u] = hp[u];
        tp.state[b * 4 * HD_ + HD_ + u] = c[u];
        tp.state[b * 4 * HD_ + 2 * HD_ + u] = n[u];
        tp.state[b * 4 * HD_ + 3 * HD_ + u] = m[u];
      }
    }
    return tp;
  }

  struct Grads {
    std::vector<double> gx, R;
  };
  Grads backward(const Tape& tp, const std::vector<float>& dh) const {
    const std::int64_t HD_ = HD();
    Grads gr;
    gr.gx.assign(B * T * 4 * HD_, 0);
    gr.R.assign(R.size(), 0);
    for (std::int64_t b = 0; b < B; ++b) {
      std::vector<double> dc(HD_, 0), dn(HD_, 0), dhr(HD_, 0), dpre(4 * HD_);
      for (std::int64_t t = T; t-- > 0;) {
        const std::int64_t row = b * T + t;
        for (std::int64_t u = 0; u < HD_; ++u) {
          const double* pre = &tp.pre[row * 4 * HD_];
          const double pi = pre[u], pf = pre[HD_ + u], pz = pre[2 * HD_ + u], po = pre[3 * HD_ + u];
          const double ct = tp.c[row * HD_ + u], nt = tp.n[row * HD_ + u], mt = tp.m[row * HD_ + u];
          const double cp = t > 0 ? tp.c[(row - 1) * HD_ + u] : tp.init[b * 4 * HD_ + HD_ + u];
          const double np = t > 0 ? tp.n[(row - 1) * HD_ + u] : tp.init[b * 4 * HD_ + 2 * HD_ + u];
          const double mp = t > 0 ? tp.m[(row - 1) * HD_ + u] : tp.init[b * 4 * HD_ + 3 * HD_ + u];
          const bool fresh = np == 0;
          const double lf = test::xlstm::log_sigmoid(pf);
          const double ip = std::exp(pi - mt), fp = fresh ? 0.0 : std::exp(lf + mp - mt);
          const double z = std::tanh(pz), o = test::xlstm::sigmoid(po);
          const double dhv = dh[row * HD_ + u] + dhr[u];
          dc[u] += dhv * o / nt;
          dn[u] -= dhv * o * ct / (nt * nt);
          dpre[u] = ip * (dc[u] * z + dn[u]);
          dpre[HD_ + u] = fresh ? 0.0 : fp * (dc[u] * cp + dn[u] * np) * (1 - test::xlstm::sigmoid(pf));
          dpre[2 * HD_ + u] = dc[u] * ip * (1 - z * z);
          dpre[3 * HD_ + u] = dhv * ct / nt * o * (1 - o);
          dc[u] *= fp;
          dn[u] *= fp;
        }
        for (std::int64_t i = 0; i < 4 * HD_; ++i) gr.gx[row * 4 * HD_ + i] = dpre[i];
        for (std::int64_t hh = 0; hh < H; ++hh)
          for (std::int64_t e = 0; e < D; ++e) {
            const double hprev = t > 0 ? tp.h[(row - 1) * HD_ + hh * D + e] : tp.init[b * 4 * HD_ + hh * D + e];
            double acc = 0;
            for (int g = 0; g < 4; ++g)
              for (std::int64_t d = 0; d < D; ++d) {
                const std::int64_t r = ((g * H + hh) * D + d) * D + e;
                acc += R[r] * dpre[g * HD_ + hh * D + d];
                gr.R[r] += dpre[g * HD_ + hh * D + d] * hprev;
              }
            dhr[hh * D + e] = acc;
          }
      }
    }
    return gr;
  }
};

struct Case {
  std::int64_t B, T, H, D;
  bool state0, reset0;
  float i_scale;  // ĩ part of gx ~ U(-i_scale, i_scale)
};
std::string describe(const Case& c) {
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
         " D=" + std::to_string(c.D) + " state0=" + std::to_string(c.state0) + " reset0=" + std::to_string(c.reset0) +
         " i_scale=" + std::to_string(c.i_scale);
}

class SlstmCellTest : public test::LaneTest {
 protected:
  struct Inputs {
    std::vector<float> gx, R, state0, dh;
    std::vector<std::uint8_t> reset0;
    gpu::DeviceBuffer<float> d_gx, d_R, d_state0, d_dh;
    gpu::DeviceBuffer<std::uint8_t> d_reset0;
    RefSlstm ref;
  };
  Inputs make(const Case& c) {
    Inputs in;
    const std::int64_t HD = c.H * c.D;
    in.gx.resize(static_cast<std::size_t>(c.B * c.T * 4 * HD));
    std::uniform_real_distribution<float> ui(-c.i_scale, c.i_scale), uf(-3.f, 6.f), uz(-2.f, 2.f);
    for (std::int64_t r = 0; r < c.B * c.T; ++r)
      for (std::int64_t u = 0; u < HD; ++u) {
        in.gx[(r * 4 + 0) * HD + u] = ui(rng());
        in.gx[(r * 4 + 1) * HD + u] = uf(rng());
        in.gx[(r * 4 + 2) * HD + u] = uz(rng());
        in.gx[(r * 4 + 3) * HD + u] = uz(rng());
      }
    const float bound = 1.f / std::sqrt(static_cast<float>(c.D));
    in.R = test::random_uniform(static_cast<std::size_t>(4 * c.H * c.D * c.D), -bound, bound, rng());
    in.dh = test::random_uniform(static_cast<std::size_t>(c.B * c.T * HD), -1.f, 1.f, rng());
    if (c.state0) {
      in.state0.resize(static_cast<std::size_t>(c.B * 4 * HD));
      std::uniform_real_distribution<float> uh(-1.f, 1.f), un(1.f, 3.f), um(-2.f, 2.f);
      for (std::int64_t b = 0; b < c.B; ++b)
        for (std::int64_t u = 0; u < HD; ++u) {
          in.state0[b * 4 * HD + u] = uh(rng());
          in.state0[b * 4 * HD + HD + u] = uh(rng());
          in.state0[b * 4 * HD + 2 * HD + u] = un(rng());
          in.state0[b * 4 * HD + 3 * HD + u] = um(rng());
        }
      in.d_state0 = test::upload(in.state0, s());
    }
    if (c.reset0) {
      std::bernoulli_distribution coin(0.3);
      in.reset0.resize(static_cast<std::size_t>(c.B));
      for (auto& r : in.reset0) r = coin(rng()) ? 1 : 0;
      in.reset0[0] = 1;
      in.d_reset0 = test::upload(in.reset0, s());
    }
    in.d_gx = test::upload(in.gx, s());
    in.d_R = test::upload(in.R, s());
    in.d_dh = test::upload(in.dh, s());
    in.ref = RefSlstm{c.B, c.T, c.H, c.D, as_double(in.R)};
    return in;
  }
};

// Forward and backward against float64, D from 1 to 100 (batch tiles of one to many rows, the
// last tile partly empty), random initial states with some rows reset.
TEST_F(SlstmCellTest, ForwardAndBackwardMatchFloat64) {
  SCOPED_TRACE(seed_note());
  const std::vector<Case> cases{{1, 1, 1, 1, false, false, 2},  {3, 7, 2, 4, true, true, 3},
                                {5, 20, 3, 8, true, false, 20}, {9, 33, 2, 32, false, false, 5},
                                {3, 12, 1, 64, true, true, 10}, {4, 9, 2, 100, true, false, 3},
                                {20, 6, 2, 17, true, true, 60}};
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    Inputs in = make(c);
    const SlstmShape shape{c.B, c.T, c.H, c.D};
    const std::int64_t HD = c.H * c.D;
    gpu::DeviceBuffer<float> h(in.dh.size()), st(static_cast<std::size_t>(c.B * 4 * HD)), g_gx(in.gx.size()),
        g_R(in.R.size());
    gpu::DeviceBuffer<std::byte> ws(slstm_workspace_bytes(shape));
    for (auto* b : {&h, &st, &g_gx, &g_R}) test::poison(*b, s());
    slstm_forward(h.data(), st.data(), in.d_gx.data(), in.d_R.data(), c.state0 ? in.d_state0.data() : nullptr,
                  c.reset0 ? in.d_reset0.data() : nullptr, shape, ws.data(), s());
    slstm_backward(g_gx.data(), g_R.data(), in.d_dh.data(), in.d_R.data(), shape, ws.data(), s());
    const auto tp = in.ref.forward(in.gx, in.state0, in.reset0);
    const auto gr = in.ref.backward(tp, in.dh);
    // The stabilizer m reaches |ĩ|: exp() of fp32 values that large carries |ĩ| * 6e-8 relative error.
    const double tol = c.i_scale > 10 ? 5e-5 : 2e-5;
    EXPECT_LT(test::rel_error(test::download(h, s()), tp.h), tol) << "h";
    EXPECT_LT(test::rel_error(test::download(st, s()), tp.state), tol) << "final state";
    EXPECT_LT(test::rel_error(test::download(g_gx, s()), gr.gx), 10 * tol) << "d_gx";
    EXPECT_LT(test::rel_error(test::download(g_R, s()), gr.R), 10 * tol) << "dR";
  }
}

// d_gx and dR against central differences of L = sum(u * h) from the GPU forward.
TEST_F(SlstmCellTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const Case c{3, 11, 2, 6, true, true, 3};
  Inputs in = make(c);
  const SlstmShape shape{c.B, c.T, c.H, c.D};
  gpu::DeviceBuffer<float> h(in.dh.size()), g_gx(in.gx.size()), g_R(in.R.size());
  gpu::DeviceBuffer<std::byte> ws(slstm_workspace_bytes(shape));
  auto forward = [&] {
    slstm_forward(h.data(), nullptr, in.d_gx.data(), in.d_R.data(), in.d_state0.data(), in.d_reset0.data(), shape,
                  ws.data(), s());
  };
  forward();
  slstm_backward(g_gx.data(), g_R.data(), in.d_dh.data(), in.d_R.data(), shape, ws.data(), s());
  auto loss = [&] { return test::weighted_sum(forward, h.data(), in.dh, s()); };
  const auto ggx = test::download(g_gx, s()), gR = test::download(g_R, s());
  const double floor_gx = 0.05 * test::xlstm::rms(ggx), floor_R = 0.05 * test::xlstm::rms(gR);
  for (int r = 0; r < 12; ++r) {
    const auto i = static_cast<std::int64_t>(rng()() % ggx.size());
    const double fd = test::central_difference(loss, in.d_gx.data(), i, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, ggx[i], 2e-2, floor_gx)) << "gx[" << i << "]";
  }
  for (int r = 0; r < 10; ++r) {
    const auto i = static_cast<std::int64_t>(rng()() % gR.size());
    const double fd = test::central_difference(loss, in.d_R.data(), i, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, gR[i], 2e-2, floor_R)) << "R[" << i << "]";
  }
}

// T steps (a reset of some rows at t0) equal the sequence (and a fresh sequence from t0 for the
// reset rows); two forwards with the state carried equal one.
TEST_F(SlstmCellTest, StepsEqualSequenceAndResetEqualsFresh) {
  SCOPED_TRACE(seed_note());
  const Case c{5, 16, 2, 8, true, false, 20};
  const std::int64_t B = c.B, T = c.T, H = c.H, D = c.D, HD = H * D, S = slstm_state_features(H, D), t0 = 7;
  Inputs in = make(c);
  auto run = [&](const std::vector<float>& gx, const std::vector<float>& state0, std::int64_t Tn,
                 std::vector<float>* state_out) {
    const SlstmShape shape{B, Tn, H, D};
    auto dgx = test::upload(gx, s());
    gpu::DeviceBuffer<float> ds0, h(static_cast<std::size_t>(B * Tn * HD)), st(static_cast<std::size_t>(B * S));
    if (!state0.empty()) ds0 = test::upload(state0, s());
    gpu::DeviceBuffer<std::byte> ws(slstm_workspace_bytes(shape));
    test::poison(h, s());
    slstm_forward(h.data(), st.data(), dgx.data(), in.d_R.data(), state0.empty() ? nullptr : ds0.data(), nullptr,
                  shape, ws.data(), s());
    *state_out = test::download(st, s());
    return test::download(h, s());
  };
  std::vector<float> full_state, mid, end, fresh_state;
  const auto full = run(in.gx, in.state0, T, &full_state);
  const auto h0 = run(slice_time(in.gx, B, T, 4 * HD, 0, t0), in.state0, t0, &mid);
  const auto h1 = run(slice_time(in.gx, B, T, 4 * HD, t0, T), mid, T - t0, &end);
  EXPECT_TRUE(test::all_close(h0, as_double(slice_time(full, B, T, HD, 0, t0)), 1e-5, 1e-6)) << "first part";
  EXPECT_TRUE(test::all_close(h1, as_double(slice_time(full, B, T, HD, t0, T)), 1e-5, 1e-6)) << "carried part";
  EXPECT_TRUE(test::all_close(end, as_double(full_state), 1e-5, 1e-6)) << "carried state";
  const auto fresh = run(slice_time(in.gx, B, T, 4 * HD, t0, T), {}, T - t0, &fresh_state);

  std::vector<std::uint8_t> reset(static_cast<std::size_t>(B), 0);
  reset[0] = reset[3] = 1;
  auto d_reset = test::upload(reset, s());
  auto d_state = test::upload(in.state0, s());
  gpu::DeviceBuffer<float> hs(static_cast<std::size_t>(B * HD)), gxs(static_cast<std::size_t>(B * 4 * HD));
  std::vector<float> stepped(full.size());
  for (std::int64_t t = 0; t < T; ++t) {
    test::upload_to(gxs.data(), test::xlstm::at_time(in.gx, B, T, 4 * HD, t), s());
    test::poison(hs, s());
    slstm_step(hs.data(), d_state.data(), gxs.data(), in.d_R.data(), t == t0 ? d_reset.data() : nullptr, B, H, D, 0, s());
    const auto ht = test::download(hs, s());
    for (std::int64_t b = 0; b < B; ++b)
      std::copy(ht.begin() + b * HD, ht.begin() + (b + 1) * HD, stepped.begin() + (b * T + t) * HD);
  }
  const auto step_state = test::download(d_state, s());
  for (std::int64_t b = 0; b < B; ++b) {
    SCOPED_TRACE("row " + std::to_string(b));
    const std::vector<float> got(stepped.begin() + b * T * HD, stepped.begin() + (b + 1) * T * HD);
    std::vector<float> want(full.begin() + b * T * HD, full.begin() + (b + 1) * T * HD);
    const std::vector<float>* want_state = &full_state;
    if (reset[b]) {
      std::copy(fresh.begin() + b * (T - t0) * HD, fresh.begin() + (b + 1) * (T - t0) * HD, want.begin() + t0 * HD);
      want_state = &fresh_state;
    }
    EXPECT_TRUE(test::all_close(got, as_double(want), 1e-5, 1e-6)) << "steps";
    const std::vector<float> st(step_state.begin() + b * S, step_state.begin() + (b + 1) * S);
    const std::vector<float> wst(want_state->begin() + b * S, want_state->begin() + (b + 1) * S);
    EXPECT_TRUE(test::all_close(st, as_double(wst), 1e-5, 1e-6)) << "step state";
  }
}

// Forward + backward and a step captured in CUDA graphs replay bitwise like the eager calls.
TEST_F(SlstmCellTest, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const Case c{6, 13, 2, 16, true, true, 10};
  Inputs in = make(c);
  const SlstmShape shape{c.B, c.T, c.H, c.D};
  const std::int64_t HD = c.H * c.D;
  gpu::DeviceBuffer<float> h(in.dh.size()), st(static_cast<std::size_t>(c.B * 4 * HD)), g_gx(in.gx.size()),
      g_R(in.R.size());
  gpu::DeviceBuffer<std::byte> ws(slstm_workspace_bytes(shape));
  auto body = [&](cudaStream_t cs) {
    slstm_forward(h.data(), st.data(), in.d_gx.data(), in.d_R.data(), in.d_state0.data(), in.d_reset0.data(), shape,
                  ws.data(), cs);
    slstm_backward(g_gx.data(), g_R.data(), in.d_dh.data(), in.d_R.data(), shape, ws.data(), cs);
  };
  body(s());
  std::vector<gpu::DeviceBuffer<float>*> outs{&h, &st, &g_gx, &g_R};
  std::vector<std::vector<float>> eager;
  for (auto* o : outs) eager.push_back(test::download(*o, s()));
  gpu::CudaGraph graph;
  graph.capture(s(), body);
  ASSERT_TRUE(graph.captured());
  for (int r = 0; r < 2; ++r) {
    for (auto* o : outs) test::poison(*o, s());
    graph.replay(s());
    for (std::size_t i = 0; i < outs.size(); ++i)
      EXPECT_EQ(test::download(*outs[i], s()), eager[i]) << "replay " << r << " output " << i;
  }
  gpu::DeviceBuffer<float> hs(static_cast<std::size_t>(c.B * HD));
  auto step = [&](cudaStream_t cs) {
    slstm_step(hs.data(), st.data(), in.d_gx.data(), in.d_R.data(), in.d_reset0.data(), c.B, c.H, c.D, 0, cs);
  };
  test::upload_to(st.data(), in.state0, s());
  step(s());
  const auto h_eager = test::download(hs, s()), st_eager = test::download(st, s());
  gpu::CudaGraph step_graph;
  step_graph.capture(s(), step);
  test::upload_to(st.data(), in.state0, s());
  test::poison(hs, s());
  step_graph.replay(s());
  EXPECT_EQ(test::download(hs, s()), h_eager) << "step";
  EXPECT_EQ(test::download(st, s()), st_eager) << "step state";
}

}  // namespace
}  // namespace foxhunt::models
