// mLSTM cell: the chunkwise forward (outputs and final state) against a float64 recurrence with
// random initial states and gate pre-activations large enough that the stabilizer matters; the
// backward against the float64 recurrence's exact backward through time and against central
// finite differences of the GPU forward; every chunk length == the step form, a state carried
// between two forwards == one forward, a reset == a fresh sequence; CUDA-graph replay == eager.
#include "models/fd_support.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/graph.hpp"
#include "models/xlstm/mlstm_cell.hpp"
#include "models/xlstm/xlstm_test_support.hpp"

namespace foxhunt::models {
namespace {

using test::xlstm::as_double;
using test::xlstm::slice_time;

// The recurrence in float64, and its exact backward through time (m a constant: h does not
// depend on it). Layouts as the cell's.
struct RefMlstm {
  std::int64_t B = 0, T = 0, H = 0, D = 0;
  std::int64_t S_h() const { return D * D + D + 1; }
  std::int64_t x_at(std::int64_t b, std::int64_t t, std::int64_t h) const { return ((b * T + t) * H + h) * D; }
  std::int64_t g_at(std::int64_t b, std::int64_t t, std::int64_t h) const { return (b * T + t) * H + h; }

  struct Tape {
    std::vector<double> h, state;   // (B, T, H, D), (B, H, S_h)
    std::vector<double> C, n, m;    // per (b, h): T + 1 states (index 0: initial)
    std::vector<double> fp, ip;     // (B, T, H)
    // (B, T, H): a bound on the condition number of h_t's denominator max(|n.q|, exp(-m)):
    // sum_i |n|_i |q_i| / max(|n.q|, exp(-m)), |n| the normalizer's recurrence over |k|. float32
    // loses about that factor times 6e-8 of h_t's relative accuracy where n.q nearly cancels.
    std::vector<double> cond;
  };
  Tape forward(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
               const std::vector<float>& ig, const std::vector<float>& fg, const std::vector<float>& state0) const {
    Tape tp;
    const std::int64_t DD = D * D;
    tp.h.assign(B * T * H * D, 0);
    tp.state.assign(B * H * S_h(), 0);
    tp.C.assign(B * H * (T + 1) * DD, 0);
    tp.n.assign(B * H * (T + 1) * D, 0);
    tp.m.assign(B * H * (T + 1), 0);
    tp.fp.assign(B * T * H, 0);
    tp.ip.assign(B * T * H, 0);
    tp.cond.assign(B * T * H, 0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t bh = b * H + h;
        std::vector<double> C(DD, 0), n(D, 0), n_abs(D, 0);
        double m = 0;
        if (!state0.empty()) {
          const float* s0 = &state0[bh * S_h()];
          for (std::int64_t i = 0; i < DD; ++i) C[i] = s0[i];
          for (std::int64_t i = 0; i < D; ++i) n[i] = s0[DD + i], n_abs[i] = std::abs(n[i]);
          m = s0[DD + D];
        }
        auto save = [&](std::int64_t t) {
          std::copy(C.begin(), C.end(), tp.C.begin() + (bh * (T + 1) + t) * DD);
          std::copy(n.begin(), n.end(), tp.n.begin() + (bh * (T + 1) + t) * D);
          tp.m[bh * (T + 1) + t] = m;
        };
        save(0);
        for (std::int64_t t = 0; t < T; ++t) {
          const std::int64_t x = x_at(b, t, h), g = g_at(b, t, h);
          const double lf = test::xlstm::log_sigmoid(fg[g]), it = ig[g];
          const double mn = std::max(lf + m, it);
          const double fp = std::exp(lf + m - mn), ip = std::exp(it - mn);
          for (std::int64_t j = 0; j < D; ++j)
            for (std::int64_t i = 0; i < D; ++i) C[j * D + i] = fp * C[j * D + i] + ip * v[x + j] * k[x + i] * scale;
          for (std::int64_t i = 0; i < D; ++i) n[i] = fp * n[i] + ip * k[x + i] * scale;
          for (std::int64_t i = 0; i < D; ++i) n_abs[i] = fp * n_abs[i] + ip * std::abs(k[x + i]) * scale;
          m = mn;
          double den = 0, den_abs = 0;
          for (std::int64_t i = 0; i < D; ++i) den += n[i] * q[x + i], den_abs += n_abs[i] * std::abs(q[x + i]);
          const double gd = std::max(std::abs(den), std::exp(-m));
          tp.cond[g] = den_abs / gd;
          for (std::int64_t j = 0; j < D; ++j) {
            double num = 0;
            for (std::int64_t i = 0; i < D; ++i) num += C[j * D + i] * q[x + i];
            tp.h[x + j] = num / gd;
          }
          tp.fp[g] = fp;
          tp.ip[g] = ip;
          save(t + 1);
        }
        double* so = &tp.state[bh * S_h()];
        std::copy(C.begin(), C.end(), so);
        std::copy(n.begin(), n.end(), so + DD);
        so[DD + D] = m;
      }
    return tp;
  }

  struct Grads {
    std::vector<double> q, k, v, i, f;
  };
  Grads backward(const Tape& tp, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                 const std::vector<float>& fg, const std::vector<float>& dh) const {
    Grads gr;
    gr.q.assign(q.size(), 0);
    gr.k.assign(k.size(), 0);
    gr.v.assign(v.size(), 0);
    gr.i.assign(fg.size(), 0);
    gr.f.assign(fg.size(), 0);
    const std::int64_t DD = D * D;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t bh = b * H + h;
        std::vector<double> dC(DD, 0), dn(D, 0), dnum(D);
        for (std::int64_t t = T; t-- > 0;) {
          const std::int64_t x = x_at(b, t, h), g = g_at(b, t, h);
          const double* C = &tp.C[(bh * (T + 1) + t + 1) * DD];
          const double* Cp = &tp.C[(bh * (T + 1) + t) * DD];
          const double* n = &tp.n[(bh * (T + 1) + t + 1) * D];
          const double* np = &tp.n[(bh * (T + 1) + t) * D];
          const double m = tp.m[bh * (T + 1) + t + 1];
          const double fp = tp.fp[g], ip = tp.ip[g];
          double den = 0;
          for (std::int64_t i = 0; i < D; ++i) den += n[i] * q[x + i];
          const double gd = std::max(std::abs(den), std::exp(-m));
          double dot = 0;
          for (std::int64_t j = 0; j < D; ++j) {
            double num = 0;
            for (std::int64_t i = 0; i < D; ++i) num += C[j * D + i] * q[x + i];
            dot += dh[x + j] * num;
            dnum[j] = dh[x + j] / gd;
          }
          const double dg = -dot / (gd * gd);
          const double dden = std::abs(den) > std::exp(-m) ? (den >= 0 ? dg : -dg) : 0.0;
          for (std::int64_t j = 0; j < D; ++j)
            for (std::int64_t i = 0; i < D; ++i) dC[j * D + i] += dnum[j] * q[x + i];
          for (std::int64_t i = 0; i < D; ++i) dn[i] += dden * q[x + i];
          for (std::int64_t i = 0; i < D; ++i) {
            double acc = dden * n[i];
            for (std::int64_t j = 0; j < D; ++j) acc += C[j * D + i] * dnum[j];
            gr.q[x + i] = acc;
          }
          double dip = 0, dfp = 0;
          for (std::int64_t j = 0; j < D; ++j) {
            double acc = 0;
            for (std::int64_t i = 0; i < D; ++i) acc += dC[j * D + i] * k[x + i] * scale;
            gr.v[x + j] = ip * acc;
            dip += v[x + j] * acc;
          }
          for (std::int64_t i = 0; i < D; ++i) {
            double acc = dn[i];
            for (std::int64_t j = 0; j < D; ++j) acc += dC[j * D + i] * v[x + j];
            gr.k[x + i] = ip * acc * scale;
            dip += dn[i] * k[x + i] * scale;
          }
          for (std::int64_t e = 0; e < DD; ++e) dfp += dC[e] * Cp[e];
          for (std::int64_t i = 0; i < D; ++i) dfp += dn[i] * np[i];
          gr.i[g] = dip * ip;
          gr.f[g] = dfp * fp * (1.0 - test::xlstm::sigmoid(fg[g]));
          for (auto& e : dC) e *= fp;
          for (auto& e : dn) e *= fp;
        }
      }
    return gr;
  }
};

struct Case {
  std::int64_t B, T, H, D, L;
  bool state0;
  float i_scale, f_lo, f_hi;  // ĩ ~ U(-i_scale, i_scale), f̃ ~ U(f_lo, f_hi)
};
std::string describe(const Case& c) {
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
         " D=" + std::to_string(c.D) + " L=" + std::to_string(c.L) + " state0=" + std::to_string(c.state0) +
         " i_scale=" + std::to_string(c.i_scale) + " f=[" + std::to_string(c.f_lo) + ", " + std::to_string(c.f_hi) + "]";
}

class MlstmCellTest : public test::LaneTest {
 protected:
  // Fresh random inputs of one case (host), and their device copies.
  struct Inputs {
    std::vector<float> q, k, v, ig, fg, state0, dh;
    gpu::DeviceBuffer<float> dq, dk, dv, dig, dfg, dstate0, ddh;
  };
  Inputs make(const Case& c) {
    Inputs in;
    const auto nx = static_cast<std::size_t>(c.B * c.T * c.H * c.D), ng = static_cast<std::size_t>(c.B * c.T * c.H);
    in.q = test::random_uniform(nx, -1.f, 1.f, rng());
    in.k = test::random_uniform(nx, -1.f, 1.f, rng());
    in.v = test::random_uniform(nx, -1.f, 1.f, rng());
    in.ig = test::random_uniform(ng, -c.i_scale, c.i_scale, rng());
    in.fg = test::random_uniform(ng, c.f_lo, c.f_hi, rng());
    in.dh = test::random_uniform(nx, -1.f, 1.f, rng());
    if (c.state0) {
      const std::int64_t DD = c.D * c.D, S_h = DD + c.D + 1;
      in.state0 = test::random_uniform(static_cast<std::size_t>(c.B * c.H * S_h), -0.5f, 0.5f, rng());
      for (std::int64_t bh = 0; bh < c.B * c.H; ++bh) in.state0[bh * S_h + DD + c.D] *= 4.f;  // m0 in [-2, 2]
      in.dstate0 = test::upload(in.state0, s());
    }
    in.dq = test::upload(in.q, s());
    in.dk = test::upload(in.k, s());
    in.dv = test::upload(in.v, s());
    in.dig = test::upload(in.ig, s());
    in.dfg = test::upload(in.fg, s());
    in.ddh = test::upload(in.dh, s());
    return in;
  }
  RefMlstm ref(const Case& c) const { return RefMlstm{c.B, c.T, c.H, c.D}; }
};

// Chunkwise forward (h and the final state) against the float64 recurrence, from zero and random
// initial states, with T % L != 0, L > T, L == 1 and gates of |ĩ| up to 100 (unstabilized,
// exp(ĩ) overflows float32).
TEST_F(MlstmCellTest, ForwardMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  const std::vector<Case> cases{{1, 1, 1, 1, 1, false, 3, -3, 3},       {2, 7, 2, 4, 3, true, 3, -3, 5},
                                {2, 33, 3, 8, 16, true, 20, -10, 10},   {3, 64, 2, 16, 64, false, 100, -20, 20},
                                {2, 50, 2, 32, 20, true, 100, -30, 30}, {1, 20, 1, 5, 64, false, 8, -4, 8},
                                {2, 19, 2, 6, 1, true, 20, -10, 10}};
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    Inputs in = make(c);
    const MlstmShape shape{c.B, c.T, c.H, c.D, c.L};
    gpu::DeviceBuffer<float> h(in.q.size()), state(static_cast<std::size_t>(c.B * mlstm_state_features(c.H, c.D)));
    gpu::DeviceBuffer<std::byte> ws(mlstm_workspace_bytes(shape));
    test::poison(h, s());
    test::poison(state, s());
    mlstm_forward(h.data(), state.data(), in.dq.data(), in.dk.data(), in.dv.data(), in.dig.data(), in.dfg.data(),
                  c.state0 ? in.dstate0.data() : nullptr, shape, ws.data(), s());
    const auto tp = ref(c).forward(in.q, in.k, in.v, in.ig, in.fg, in.state0);
    // fp32 rounds the log-gate sums and the stabilizer at |value| * 6e-8: with |ĩ| up to 100 and
    // log f down to -30 per step, exp() of them carries ~1e-5 relative error. Positions whose
    // denominator is ill-conditioned (tp.cond > 1e3: n.q cancels to a thousandth of its terms)
    // keep only cond * 6e-8 of relative accuracy in any float32 evaluation; they are left out of
    // the comparison, and they must stay rare (so the check cannot pass by leaving everything out).
    // The kept positions may still lose up to 1e3 * 6e-8 = 6e-5: the small-gate cases' bound is 1e-4.
    const double tol = c.i_scale > 10 ? 5e-4 : 1e-4;
    const std::vector<float> got = test::download(h, s());
    EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); })) << "h not all finite";
    std::vector<float> got_kept;
    std::vector<double> ref_kept;
    for (std::size_t g = 0; g < tp.cond.size(); ++g) {
      if (tp.cond[g] > 1e3) continue;
      for (std::int64_t j = 0; j < c.D; ++j) {
        got_kept.push_back(got[g * c.D + j]);
        ref_kept.push_back(tp.h[g * c.D + j]);
      }
    }
    EXPECT_GE(ref_kept.size(), tp.h.size() * 9 / 10) << "ill-conditioned positions are not rare";
    EXPECT_LT(test::rel_error(got_kept, ref_kept), tol) << "h (well-conditioned positions)";
    EXPECT_LT(test::rel_error(test::download(state, s()), tp.state), tol) << "final state";
  }
}

// ||got - ref|| / ||ref||, with ||ref|| floored at an RMS of 1e-3: a gradient that is exactly zero
// (h = sign(q.k) v when T = D = 1 and |n.q| wins the max) comes out of float32 as rounding
// residue, whose ratio to a zero reference means nothing. Inputs and dh are O(1), so 1e-3 is zero.
double grad_error(const std::vector<float>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 1e-6 * static_cast<double>(ref.size());
  double norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(norm, den));
}

// The backward against the float64 recurrence's exact backward through time.
TEST_F(MlstmCellTest, BackwardMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  const std::vector<Case> cases{{1, 1, 1, 1, 1, false, 3, -3, 3},      {2, 9, 2, 4, 4, true, 3, -3, 5},
                                {2, 40, 2, 8, 16, true, 6, -4, 8},     {1, 64, 3, 16, 64, false, 6, -4, 8},
                                {2, 50, 1, 32, 20, true, 6, -4, 8},    {2, 23, 2, 8, 5, false, 20, -10, 10},
                                {2, 17, 2, 4, 1, true, 3, -3, 5}};
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    Inputs in = make(c);
    const MlstmShape shape{c.B, c.T, c.H, c.D, c.L};
    gpu::DeviceBuffer<float> h(in.q.size()), gq(in.q.size()), gk(in.q.size()), gv(in.q.size()), gi(in.ig.size()),
        gf(in.ig.size());
    gpu::DeviceBuffer<std::byte> ws(mlstm_workspace_bytes(shape));
    for (auto* b : {&gq, &gk, &gv, &gi, &gf}) test::poison(*b, s());
    mlstm_forward(h.data(), nullptr, in.dq.data(), in.dk.data(), in.dv.data(), in.dig.data(), in.dfg.data(),
                  c.state0 ? in.dstate0.data() : nullptr, shape, ws.data(), s());
    mlstm_backward(gq.data(), gk.data(), gv.data(), gi.data(), gf.data(), in.ddh.data(), in.dq.data(), in.dk.data(),
                   in.dv.data(), in.dig.data(), in.dfg.data(), shape, ws.data(), s());
    const RefMlstm r = ref(c);
    const auto tp = r.forward(in.q, in.k, in.v, in.ig, in.fg, in.state0);
    const auto gr = r.backward(tp, in.q, in.k, in.v, in.fg, in.dh);
    const double tol = c.i_scale > 10 ? 1e-3 : 2e-4;
    EXPECT_LT(grad_error(test::download(gq, s()), gr.q), tol) << "dq";
    EXPECT_LT(grad_error(test::download(gk, s()), gr.k), tol) << "dk";
    EXPECT_LT(grad_error(test::download(gv, s()), gr.v), tol) << "dv";
    EXPECT_LT(grad_error(test::download(gi, s()), gr.i), tol) << "d i_pre";
    EXPECT_LT(grad_error(test::download(gf, s()), gr.f), tol) << "d f_pre";
  }
}

// Gradients of L = sum(u * h) against central differences of the GPU forward, every input kind.
TEST_F(MlstmCellTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const Case c{2, 21, 2, 8, 8, true, 3, -2, 4};
  Inputs in = make(c);
  const MlstmShape shape{c.B, c.T, c.H, c.D, c.L};
  gpu::DeviceBuffer<float> h(in.q.size()), gq(in.q.size()), gk(in.q.size()), gv(in.q.size()), gi(in.ig.size()),
      gf(in.ig.size());
  gpu::DeviceBuffer<std::byte> ws(mlstm_workspace_bytes(shape));
  auto forward = [&] {
    mlstm_forward(h.data(), nullptr, in.dq.data(), in.dk.data(), in.dv.data(), in.dig.data(), in.dfg.data(),
                  in.dstate0.data(), shape, ws.data(), s());
  };
  forward();
  mlstm_backward(gq.data(), gk.data(), gv.data(), gi.data(), gf.data(), in.ddh.data(), in.dq.data(), in.dk.data(),
                 in.dv.data(), in.dig.data(), in.dfg.data(), shape, ws.data(), s());
  auto loss = [&] { return test::weighted_sum(forward, h.data(), in.dh, s()); };
  struct Kind {
    const char* name;
    gpu::DeviceBuffer<float>* x;
    gpu::DeviceBuffer<float>* grad;
  };
  for (const Kind& kind : {Kind{"q", &in.dq, &gq}, Kind{"k", &in.dk, &gk}, Kind{"v", &in.dv, &gv},
                           Kind{"i_pre", &in.dig, &gi}, Kind{"f_pre", &in.dfg, &gf}}) {
    const auto g = test::download(*kind.grad, s());
    const double floor = 0.05 * test::xlstm::rms(g);
    for (int r = 0; r < 6; ++r) {
      const auto i = static_cast<std::int64_t>(rng()() % g.size());
      // |n.q| and max(|n.q|, exp(-m)) have kinks; one within the step spoils that difference, one
      // within both steps is rare.
      const double fd = test::central_difference(loss, kind.x->data(), i, 1e-2f, s());
      if (test::fd_close(fd, g[i], 2e-2, floor)) continue;
      const double fd_fine = test::central_difference(loss, kind.x->data(), i, 1e-3f, s());
      EXPECT_TRUE(test::fd_close(fd_fine, g[i], 2e-2, floor)) << kind.name << "[" << i << "] (step 1e-2: " << fd << ")";
    }
  }
}

// Every chunk length gives the same h; T steps of mlstm_step (with resets) equal the chunkwise
// forward of each row's segment; two forwards with the state carried equal one. Elementwise, so
// with moderate gates: large ones make h ill-conditioned (see ForwardMatchesFloat64), and two
// summation orders then differ by more than rounding of the result.
TEST_F(MlstmCellTest, ChunkwiseEqualsStepsAndResets) {
  SCOPED_TRACE(seed_note());
  const Case c{4, 30, 2, 8, 8, true, 3, -3, 5};
  const std::int64_t B = c.B, T = c.T, H = c.H, D = c.D, t0 = 13, HD = H * D;
  Inputs in = make(c);
  const std::int64_t S = mlstm_state_features(H, D);
  auto run = [&](std::int64_t L, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                 const std::vector<float>& ig, const std::vector<float>& fg, const std::vector<float>& state0,
                 std::int64_t Tn, std::vector<float>* state_out) {
    const MlstmShape shape{B, Tn, H, D, L};
    auto dq = test::upload(q, s()), dk = test::upload(k, s()), dv = test::upload(v, s()), di = test::upload(ig, s()),
         df = test::upload(fg, s());
    gpu::DeviceBuffer<float> ds0, h(q.size()), st(static_cast<std::size_t>(B * S));
    if (!state0.empty()) ds0 = test::upload(state0, s());
    gpu::DeviceBuffer<std::byte> ws(mlstm_workspace_bytes(shape));
    test::poison(h, s());
    mlstm_forward(h.data(), st.data(), dq.data(), dk.data(), dv.data(), di.data(), df.data(),
                  state0.empty() ? nullptr : ds0.data(), shape, ws.data(), s());
    if (state_out != nullptr) *state_out = test::download(st, s());
    return test::download(h, s());
  };
  std::vector<float> full_state;
  const auto full = run(8, in.q, in.k, in.v, in.ig, in.fg, in.state0, T, &full_state);
  for (std::int64_t L : {1, 3, 16, 30, 64}) {
    SCOPED_TRACE("chunk " + std::to_string(L));
    std::vector<float> st;
    EXPECT_TRUE(test::all_close(run(L, in.q, in.k, in.v, in.ig, in.fg, in.state0, T, &st), as_double(full), 2e-4, 2e-5))
        << "h";
    EXPECT_TRUE(test::all_close(st, as_double(full_state), 2e-4, 2e-5)) << "state";
  }
  // Carried: [0, t0) then [t0, T) from the state after t0.
  {
    std::vector<float> mid, end;
    auto part = [&](const std::vector<float>& x, std::int64_t X, std::int64_t a, std::int64_t b) {
      return slice_time(x, B, T, X, a, b);
    };
    const auto h0 = run(5, part(in.q, HD, 0, t0), part(in.k, HD, 0, t0), part(in.v, HD, 0, t0), part(in.ig, H, 0, t0),
                        part(in.fg, H, 0, t0), in.state0, t0, &mid);
    const auto h1 = run(5, part(in.q, HD, t0, T), part(in.k, HD, t0, T), part(in.v, HD, t0, T), part(in.ig, H, t0, T),
                        part(in.fg, H, t0, T), mid, T - t0, &end);
    EXPECT_TRUE(test::all_close(h0, as_double(slice_time(full, B, T, HD, 0, t0)), 2e-4, 2e-5)) << "first part";
    EXPECT_TRUE(test::all_close(h1, as_double(slice_time(full, B, T, HD, t0, T)), 2e-4, 2e-5)) << "carried part";
    EXPECT_TRUE(test::all_close(end, as_double(full_state), 2e-4, 2e-5)) << "carried state";
  }
  // Steps from state0; rows 1 and 3 reset at t0: from there they equal a fresh forward over [t0, T).
  std::vector<std::uint8_t> reset(static_cast<std::size_t>(B), 0), none(static_cast<std::size_t>(B), 0);
  reset[1] = reset[3] = 1;
  auto d_reset = test::upload(reset, s()), d_none = test::upload(none, s());
  auto d_state = test::upload(in.state0, s());
  gpu::DeviceBuffer<float> hq(static_cast<std::size_t>(B * HD)), sq(static_cast<std::size_t>(B * HD)),
      sk(static_cast<std::size_t>(B * HD)), sv(static_cast<std::size_t>(B * HD)), si(static_cast<std::size_t>(B * H)),
      sf(static_cast<std::size_t>(B * H));
  std::vector<float> stepped(full.size());
  for (std::int64_t t = 0; t < T; ++t) {
    test::upload_to(sq.data(), test::xlstm::at_time(in.q, B, T, HD, t), s());
    test::upload_to(sk.data(), test::xlstm::at_time(in.k, B, T, HD, t), s());
    test::upload_to(sv.data(), test::xlstm::at_time(in.v, B, T, HD, t), s());
    test::upload_to(si.data(), test::xlstm::at_time(in.ig, B, T, H, t), s());
    test::upload_to(sf.data(), test::xlstm::at_time(in.fg, B, T, H, t), s());
    test::poison(hq, s());
    mlstm_step(hq.data(), d_state.data(), sq.data(), sk.data(), sv.data(), si.data(), sf.data(),
               t == t0 ? d_reset.data() : (t % 2 ? d_none.data() : nullptr), B, H, D, 0, s());
    const auto ht = test::download(hq, s());
    for (std::int64_t b = 0; b < B; ++b)
      std::copy(ht.begin() + b * HD, ht.begin() + (b + 1) * HD, stepped.begin() + (b * T + t) * HD);
  }
  std::vector<float> fresh_state;
  auto tail = [&](const std::vector<float>& x, std::int64_t X) { return slice_time(x, B, T, X, t0, T); };
  const auto fresh = run(8, tail(in.q, HD), tail(in.k, HD), tail(in.v, HD), tail(in.ig, H), tail(in.fg, H), {}, T - t0,
                         &fresh_state);
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
    EXPECT_TRUE(test::all_close(got, as_double(want), 2e-4, 2e-5)) << "steps";
    const std::vector<float> st(step_state.begin() + b * S, step_state.begin() + (b + 1) * S);
    const std::vector<float> wst(want_state->begin() + b * S, want_state->begin() + (b + 1) * S);
    EXPECT_TRUE(test::all_close(st, as_double(wst), 2e-4, 2e-5)) << "step state";
  }
}

// Forward + backward and a step captured in CUDA graphs replay bitwise like the eager calls.
TEST_F(MlstmCellTest, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const Case c{3, 37, 2, 16, 16, true, 20, -6, 10};
  Inputs in = make(c);
  const MlstmShape shape{c.B, c.T, c.H, c.D, c.L};
  gpu::DeviceBuffer<float> h(in.q.size()), st(static_cast<std::size_t>(c.B * mlstm_state_features(c.H, c.D))),
      gq(in.q.size()), gk(in.q.size()), gv(in.q.size()), gi(in.ig.size()), gf(in.ig.size());
  gpu::DeviceBuffer<std::byte> ws(mlstm_workspace_bytes(shape));
  auto body = [&](cudaStream_t cs) {
    mlstm_forward(h.data(), st.data(), in.dq.data(), in.dk.data(), in.dv.data(), in.dig.data(), in.dfg.data(),
                  in.dstate0.data(), shape, ws.data(), cs);
    mlstm_backward(gq.data(), gk.data(), gv.data(), gi.data(), gf.data(), in.ddh.data(), in.dq.data(), in.dk.data(),
                   in.dv.data(), in.dig.data(), in.dfg.data(), shape, ws.data(), cs);
  };
  body(s());
  std::vector<gpu::DeviceBuffer<float>*> outs{&h, &st, &gq, &gk, &gv, &gi, &gf};
  std::vector<std::vector<float>> eager;
  for (auto* o : outs) eager.push_back(test::download(*o, s()));
  gpu::CudaGraph graph;
  graph.capture(s(), body);
  ASSERT_TRUE(graph.captured());
  for (int r = 0; r < 2; ++r) {
    for (auto* o : outs) test::poison(*o, s());
    graph.replay(s());
    for (std::size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(test::download(*outs[i], s()), eager[i]) << "replay " << r << " output " << i;
  }
  // A step from a state restored before each run.
  const std::int64_t HD = c.H * c.D;
  gpu::DeviceBuffer<float> hs(static_cast<std::size_t>(c.B * HD));
  auto step = [&](cudaStream_t cs) {
    mlstm_step(hs.data(), st.data(), in.dq.data(), in.dk.data(), in.dv.data(), in.dig.data(), in.dfg.data(), nullptr,
               c.B, c.H, c.D, 0, cs);
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
