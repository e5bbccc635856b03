// rl/dqn/fused against float64 references and against the generic kernels they replace: the
// one-block TD kernel (targets, loss, d_q, priorities, loss / q_mean statistics, loss guard; double
// and plain DQN targets on a fixed batch), the
// gradient guard (non-finite flag, norm bit-equal to gpu::global_grad_norm, clip scale, repeated
// calls: the completion counter resets), the end of update with the target update and the
// parameter check, the fused Adam + end + target pass (bit-equal to the two launches), the begin
// with the [s; s'] stacking, and the stacking alone.
#include "models/fd_support.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu/adam.hpp"
#include "gpu/grad_norm.hpp"
#include "rl/dqn/fused.hpp"

namespace foxhunt::rl {
namespace {

class DqnFusedTest : public test::LaneTest {};

DqnState download_state(const gpu::DeviceBuffer<DqnState>& st, cudaStream_t s) { return test::download(st, s)[0]; }
void upload_state(gpu::DeviceBuffer<DqnState>& st, const DqnState& h, cudaStream_t s) {
  st.upload(std::span<const DqnState>(&h, 1), s);
}

TEST_F(DqnFusedTest, TdFusedMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  struct Case {
    std::int64_t B, D, A;
    TdLoss kind;
    bool weights;
    bool ties;  // q_select on a coarse grid: argmax ties (the lowest index wins)
  };
  // A <= 16 takes the register argmax, A > 16 the scan of global memory; 16 is the boundary.
  for (const Case c : {Case{1, 1, 1, TdLoss::huber, true, false}, Case{256, 1, 9, TdLoss::huber, true, false},
                       Case{1000, 3, 5, TdLoss::mse, false, false}, Case{4097, 1, 9, TdLoss::huber, true, false},
                       Case{300, 1, 9, TdLoss::huber, true, true}, Case{257, 2, 16, TdLoss::mse, true, true},
                       Case{33, 2, 20, TdLoss::huber, false, true}, Case{129, 1, 17, TdLoss::mse, true, false},
                       // the large learner's batch (several blocks with a workspace), uneven, branches,
                       // and more samples than the block cap (several samples per thread)
                       Case{4096, 1, 9, TdLoss::huber, true, false}, Case{4097, 3, 3, TdLoss::mse, true, false},
                       Case{4097, 3, 5, TdLoss::huber, false, true}, Case{70001, 1, 9, TdLoss::huber, true, false}})
    for (const bool with_ws : {false, true}) {  // one block / the workspace overload
      SCOPED_TRACE("B " + std::to_string(c.B) + " D " + std::to_string(c.D) + " A " + std::to_string(c.A) +
                   (c.ties ? " ties" : "") + (with_ws ? " workspace" : ""));
      const std::int64_t B = c.B, D = c.D, A = c.A, n = B * D * A;
      auto& r = rng();
      const auto q = test::random_normal(static_cast<std::size_t>(n), 0.f, 2.f, r);
      auto qs = test::random_normal(static_cast<std::size_t>(n), 0.f, 1.f, r);
      if (c.ties)
        for (auto& x : qs) x = std::round(x);  // mostly -1, 0, 1: most rows have tied maxima
      const auto qe = test::random_normal(static_cast<std::size_t>(n), 0.f, 1.f, r);
      const auto R = test::random_uniform(static_cast<std::size_t>(B), -1.f, 1.f, r);
      const auto g = test::random_uniform(static_cast<std::size_t>(B), 0.f, 0.99f, r);
      const auto w = test::random_uniform(static_cast<std::size_t>(B), 0.2f, 1.f, r);
      std::vector<std::int32_t> acts(static_cast<std::size_t>(B * D));
      for (auto& a : acts) a = static_cast<std::int32_t>(r() % static_cast<std::uint64_t>(A));
      const float delta = 1.f, eps = 1e-3f;
      // float64 reference
      std::vector<double> d_ref(static_cast<std::size_t>(n), 0), p_ref(static_cast<std::size_t>(B));
      double loss_ref = 0, q_ref = 0;
      for (std::int64_t b = 0; b < B; ++b) {
        double sum = 0;
        for (std::int64_t d = 0; d < D; ++d) {
          const std::int64_t row = (b * D + d) * A;
          std::int64_t best = 0;
          for (std::int64_t a = 1; a < A; ++a)
            if (qs[row + a] > qs[row + best]) best = a;
          sum += qe[row + best];
        }
        const double y = R[b] + static_cast<double>(g[b]) * sum / static_cast<double>(D);
        const double scale = (c.weights ? w[b] : 1.0) / static_cast<double>(B * D);
        double prio = 0;
        for (std::int64_t d = 0; d < D; ++d) {
          const std::int64_t row = (b * D + d) * A;
          const std::int32_t a = acts[b * D + d];
          const double td = q[row + a] - y, ad = std::abs(td);
          const bool huber = c.kind == TdLoss::huber;
          loss_ref += scale * (huber ? (ad < delta ? 0.5 * td * td : delta * (ad - 0.5 * delta)) : td * td);
          d_ref[row + a] = scale * (huber ? std::min<double>(std::max<double>(td, -delta), delta) : 2 * td);
          prio += ad;
          q_ref += q[row + a];
        }
        p_ref[b] = prio + eps;
      }
      q_ref /= static_cast<double>(B * D);

      auto d_q = test::upload(q, s()), d_qs = test::upload(qs, s()), d_qe = test::upload(qe, s());
      auto d_R = test::upload(R, s()), d_g = test::upload(g, s()), d_w = test::upload(w, s());
      auto d_a = test::upload(acts, s());
      gpu::DeviceBuffer<float> dq(static_cast<std::size_t>(n)), prio(static_cast<std::size_t>(B));
      test::poison(dq, s());
      test::poison(prio, s());
      gpu::DeviceBuffer<DqnState> st(1);
      upload_state(st, DqnState{}, s());
      gpu::DeviceBuffer<std::byte> ws(dqn_td_fused_workspace_bytes(B));
      FH_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), s()));
      auto run = [&](const gpu::DeviceBuffer<float>& returns) {
        if (with_ws)
          dqn_td_fused(dq.data(), prio.data(), st.data(), d_q.data(), d_qs.data(), d_qe.data(), d_a.data(),
                       returns.data(), d_g.data(), c.weights ? d_w.data() : nullptr, B, D, A, c.kind, delta, eps,
                       ws.data(), s());
        else
          dqn_td_fused(dq.data(), prio.data(), st.data(), d_q.data(), d_qs.data(), d_qe.data(), d_a.data(),
                       returns.data(), d_g.data(), c.weights ? d_w.data() : nullptr, B, D, A, c.kind, delta, eps, s());
      };
      run(d_R);
      EXPECT_LT(test::rel_error(test::download(dq, s()), d_ref), 1e-5);
      EXPECT_TRUE(test::all_close(test::download(prio, s()), p_ref, 1e-5, 1e-5));
      const DqnState h = download_state(st, s());
      EXPECT_NEAR(h.loss, loss_ref, 1e-5 * std::abs(loss_ref) + 1e-7);
      EXPECT_NEAR(h.q_mean, q_ref, 1e-5 * (std::abs(q_ref) + 1.0));
      EXPECT_EQ(h.skip, 0u);

      // A second call on the same workspace (the completion counter reset) gives the same bits.
      run(d_R);
      const DqnState h2 = download_state(st, s());
      EXPECT_EQ(h2.loss, h.loss);
      EXPECT_EQ(h2.q_mean, h.q_mean);

      // A NaN return makes the loss non-finite: the guard sets skip.
      auto R_nan = R;
      R_nan[static_cast<std::size_t>(B / 2)] = std::numeric_limits<float>::quiet_NaN();
      auto d_Rn = test::upload(R_nan, s());
      run(d_Rn);
      EXPECT_EQ(download_state(st, s()).skip, 1u);
    }
}

// The target's two forms on a fixed batch (B = 2, D = 1, A = 3), read back through the MSE gradient
// at the taken action, d_q = 2 (q - y) / B = q - y with unit weights: double DQN (q_select =
// online(s'), q_eval = target(s')) and plain DQN (both target(s')).
TEST_F(DqnFusedTest, FixedBatchDoubleVersusPlainTargets) {
  // online(s') prefers action 2 in row 0 and action 0 in row 1 (a 0/1 tie: the lowest index);
  // target(s') prefers action 1 in both rows.
  const std::vector<float> q_on{0.f, 1.f, 2.f, 5.f, 5.f, -1.f};
  const std::vector<float> q_tg{1.f, 3.f, -2.f, 0.5f, 4.f, 1.f};
  const std::vector<float> R{1.f, -0.5f}, g{0.9f, 0.f};
  const std::vector<float> q{0.25f, 7.f, 7.f, -0.75f, 7.f, 7.f};  // online(s); action 0 taken in both rows
  const std::vector<std::int32_t> acts{0, 0};
  auto d_on = test::upload(q_on, s()), d_tg = test::upload(q_tg, s()), d_R = test::upload(R, s()),
       d_g = test::upload(g, s()), d_q = test::upload(q, s());
  auto d_a = test::upload(acts, s());
  gpu::DeviceBuffer<float> dq(6);
  gpu::DeviceBuffer<DqnState> st(1);
  auto targets = [&](const gpu::DeviceBuffer<float>& q_select) {
    upload_state(st, DqnState{}, s());
    test::poison(dq, s());
    dqn_td_fused(dq.data(), nullptr, st.data(), d_q.data(), q_select.data(), d_tg.data(), d_a.data(), d_R.data(),
                 d_g.data(), nullptr, 2, 1, 3, TdLoss::mse, 1.f, 0.f, s());
    const auto d = test::download(dq, s());
    for (int k : {1, 2, 4, 5}) EXPECT_EQ(d[k], 0.f) << "d_q element " << k << " (not taken)";
    return std::vector<float>{q[0] - d[0], q[3] - d[3]};
  };
  EXPECT_TRUE(test::all_close(targets(d_on), std::vector<double>{1.0 + 0.9f * -2.0, -0.5}, 1e-6, 0));  // double
  EXPECT_TRUE(test::all_close(targets(d_tg), std::vector<double>{1.0 + 0.9f * 3.0, -0.5}, 1e-6, 0));   // plain
}

TEST_F(DqnFusedTest, GradGuardMatchesGlobalGradNormBitwise) {
  SCOPED_TRACE(seed_note());
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{4097}, std::int64_t{1000003}, std::int64_t{4} << 20}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto gr = test::random_normal(static_cast<std::size_t>(n), 0.f, 1.f, rng());
    auto d_g = test::upload(gr, s());
    gpu::DeviceBuffer<std::byte> ws(dqn_grad_guard_workspace_bytes(n));
    FH_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), s()));
    gpu::DeviceBuffer<std::byte> norm_ws(std::max<std::size_t>(gpu::grad_norm_workspace_bytes(n), 16));
    gpu::DeviceBuffer<float> norm(1), scale(1);
    gpu::global_grad_norm(norm.data(), d_g.data(), n, norm_ws.data(), s());
    const float max_norm = 0.5f * std::sqrt(static_cast<float>(n));  // clips: the norm is ~sqrt(n)
    gpu::clip_scale(scale.data(), norm.data(), max_norm, s());
    const float want_norm = test::download(norm, s())[0], want_scale = test::download(scale, s())[0];
    double ss = 0;
    for (float x : gr) ss += static_cast<double>(x) * x;
    EXPECT_NEAR(want_norm, std::sqrt(ss), 1e-5 * std::sqrt(ss));

    // Priorities: kept on a kept update, all skip_priority on a skipped one (loss or gradient).
    const std::int64_t B = 1500;  // more than one pass of the finishing block
    const float skip_priority = 7.f;
    const auto pr = test::random_uniform(static_cast<std::size_t>(B), 0.1f, 2.f, rng());
    auto d_pr = test::upload(pr, s());
    const std::vector<float> all_skip(static_cast<std::size_t>(B), skip_priority);
    gpu::DeviceBuffer<DqnState> st(1);
    for (int call = 0; call < 3; ++call) {  // the completion counter must reset between calls
      DqnState h0{};
      h0.clip_scale = -1.f;
      upload_state(st, h0, s());
      dqn_grad_guard(st.data(), d_pr.data(), d_g.data(), n, max_norm, B, skip_priority, ws.data(), s());
      const DqnState h = download_state(st, s());
      EXPECT_EQ(std::memcmp(&h.grad_norm, &want_norm, sizeof(float)), 0) << h.grad_norm << " vs " << want_norm;
      EXPECT_EQ(std::memcmp(&h.clip_scale, &want_scale, sizeof(float)), 0) << h.clip_scale << " vs " << want_scale;
      EXPECT_EQ(h.skip, 0u);
      EXPECT_EQ(test::download(d_pr, s()), pr);
    }
    // No clipping: clip_scale untouched.
    DqnState h0{};
    h0.clip_scale = -1.f;
    upload_state(st, h0, s());
    dqn_grad_guard(st.data(), nullptr, d_g.data(), n, 0.f, 0, skip_priority, ws.data(), s());
    EXPECT_EQ(download_state(st, s()).clip_scale, -1.f);
    // A skip the loss guard already set (finite gradients) replaces the priorities.
    DqnState loss_skip{};
    loss_skip.skip = 1;
    upload_state(st, loss_skip, s());
    dqn_grad_guard(st.data(), d_pr.data(), d_g.data(), n, max_norm, B, skip_priority, ws.data(), s());
    EXPECT_EQ(test::download(d_pr, s()), all_skip);
    // One inf gradient sets skip, and replaces the priorities.
    d_pr = test::upload(pr, s());
    test::set_elem(d_g.data(), n - 1, std::numeric_limits<float>::infinity(), s());
    upload_state(st, DqnState{}, s());
    dqn_grad_guard(st.data(), d_pr.data(), d_g.data(), n, max_norm, B, skip_priority, ws.data(), s());
    EXPECT_EQ(download_state(st, s()).skip, 1u);
    EXPECT_EQ(test::download(d_pr, s()), all_skip);
  }
}

TEST_F(DqnFusedTest, EndAndTargetUpdate) {
  SCOPED_TRACE(seed_note());
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{4097}, std::int64_t{1000003}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::int64_t B = 300;
    const auto on = test::random_uniform(static_cast<std::size_t>(n), -1.f, 1.f, rng());
    const auto tg = test::random_uniform(static_cast<std::size_t>(n), -1.f, 1.f, rng());
    const auto pr = test::random_uniform(static_cast<std::size_t>(B), 0.1f, 2.f, rng());
    auto d_on = test::upload(on, s()), d_tg = test::upload(tg, s()), d_pr = test::upload(pr, s());
    gpu::DeviceBuffer<std::byte> ws(kDqnEndWorkspaceBytes);
    FH_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), s()));
    gpu::DeviceBuffer<DqnState> st(1);
    auto set_state = [&](std::int64_t applied, std::uint32_t skip) {
      DqnState h{};
      h.updates_applied = applied;
      h.updates_attempted = 10;
      h.skips_total = 3;
      h.skip = skip;
      upload_state(st, h, s());
    };
    auto run = [&](float tau, std::int64_t period) {
      dqn_end_and_target_update(st.data(), d_pr.data(), B, 7.f, d_tg.data(), d_on.data(), n, tau, period, ws.data(),
                                s());
    };
    set_state(5, 0);  // applied becomes 6: period 4 does not divide it, no move
    run(1.f, 4);
    DqnState h = download_state(st, s());
    EXPECT_EQ(h.updates_applied, 6);
    EXPECT_EQ(h.updates_attempted, 11);
    EXPECT_EQ(h.skips_total, 3u);
    EXPECT_EQ(test::download(d_tg, s()), tg);
    EXPECT_EQ(test::download(d_pr, s()), pr);  // not skipped: priorities untouched
    set_state(7, 1);                           // skipped: applied stays 7, no move, priorities become the skip priority
    run(1.f, 1);
    h = download_state(st, s());
    EXPECT_EQ(h.updates_applied, 7);
    EXPECT_EQ(h.updates_attempted, 11);
    EXPECT_EQ(h.skips_total, 4u);
    EXPECT_EQ(h.params_nonfinite, 0u);
    EXPECT_EQ(test::download(d_tg, s()), tg);
    for (float p : test::download(d_pr, s())) EXPECT_EQ(p, 7.f);
    set_state(7, 0);  // applied becomes 8: Polyak
    run(0.005f, 4);
    std::vector<double> want(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) want[i] = tg[i] + 0.005 * (static_cast<double>(on[i]) - tg[i]);
    EXPECT_TRUE(test::all_close(test::download(d_tg, s()), want, 1e-5, 1e-7));
    set_state(0, 0);  // hard copy: bit-exact
    run(1.f, 1);
    EXPECT_EQ(test::download(d_tg, s()), on);
    EXPECT_EQ(download_state(st, s()).updates_applied, 1);
    // A NaN parameter is reported even when the target does not move.
    test::set_elem(d_on.data(), n / 2, std::numeric_limits<float>::quiet_NaN(), s());
    set_state(7, 1);
    run(1.f, 1);
    EXPECT_EQ(download_state(st, s()).params_nonfinite, 1u);
    EXPECT_EQ(test::download(d_tg, s()), on);
  }
}

// The fused Adam + end + target pass against adam_step_device followed by
// dqn_end_and_target_update on copies of the same buffers: every output bit-identical (params,
// moments, target, priorities, state), for Polyak and hard updates, with and without clipping,
// AdamW and coupled Adam, a skipped update, the aligned (float4) and an offset (scalar) layout.
TEST_F(DqnFusedTest, AdamEndTargetEqualsAdamThenEnd) {
  SCOPED_TRACE(seed_note());
  struct Case {
    std::int64_t n, offset;  // offset: floats into each buffer (1: misaligned, scalar path)
    float tau;
    std::int64_t period, applied;
    bool clip, decoupled;
    std::uint32_t skip;
  };
  const std::vector<Case> cases{{1, 0, 0.005f, 1, 0, true, true, 0},       {4097, 0, 0.005f, 1, 3, true, true, 0},
                                {4097, 1, 1.f, 2, 5, false, false, 0},     {1000003, 0, 0.01f, 4, 7, true, false, 0},
                                {1000003, 1, 0.005f, 1, 9, true, true, 0}, {4097, 0, 1.f, 1, 2, true, true, 1},
                                {85003, 0, 1.f, 3, 2, false, true, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " offset " + std::to_string(c.offset) + " tau " + std::to_string(c.tau) +
                 " skip " + std::to_string(c.skip));
    const std::int64_t B = 300, len = c.n + c.offset;
    const auto p0 = test::random_uniform(static_cast<std::size_t>(len), -1.f, 1.f, rng());
    const auto m0 = test::random_uniform(static_cast<std::size_t>(len), -0.1f, 0.1f, rng());
    const auto v0 = test::random_uniform(static_cast<std::size_t>(len), 0.001f, 0.1f, rng());
    const auto g0 = test::random_normal(static_cast<std::size_t>(len), 0.f, 1.f, rng());
    const auto t0 = test::random_uniform(static_cast<std::size_t>(len), -1.f, 1.f, rng());
    const auto pr0 = test::random_uniform(static_cast<std::size_t>(B), 0.1f, 2.f, rng());
    gpu::AdamConfig cfg;
    cfg.beta1 = 0.9f;
    cfg.beta2 = 0.999f;
    cfg.eps = 1e-8f;
    cfg.weight_decay = 0.01f;
    cfg.decoupled = c.decoupled;
    DqnState h0{};
    h0.updates_applied = c.applied;
    h0.updates_attempted = c.applied + 2;
    h0.skips_total = 2;
    h0.skip = c.skip;
    h0.lr = 3e-4f;
    h0.clip_scale = 0.37f;

    struct Bufs {
      gpu::DeviceBuffer<float> p, m, v, g, t, pr;
      gpu::DeviceBuffer<DqnState> st;
      gpu::DeviceBuffer<std::byte> ws;
    };
    auto make = [&]() {
      Bufs b{test::upload(p0, s()),          test::upload(m0, s()),
             test::upload(v0, s()),          test::upload(g0, s()),
             test::upload(t0, s()),          test::upload(pr0, s()),
             gpu::DeviceBuffer<DqnState>(1), gpu::DeviceBuffer<std::byte>(kDqnEndWorkspaceBytes)};
      upload_state(b.st, h0, s());
      FH_CHECK(cudaMemsetAsync(b.ws.data(), 0, b.ws.bytes(), s()));
      return b;
    };
    Bufs want = make(), got = make();
    const std::int64_t o = c.offset;
    for (int call = 0; call < 2; ++call) {  // the second call checks the completion counter reset
      DqnState* ws = want.st.data();
      gpu::adam_step_device(want.p.data() + o, want.m.data() + o, want.v.data() + o, want.g.data() + o, c.n, cfg,
                            &ws->lr, &ws->updates_applied, c.clip ? &ws->clip_scale : nullptr, &ws->skip, s());
      dqn_end_and_target_update(ws, want.pr.data(), B, 7.f, want.t.data() + o, want.p.data() + o, c.n, c.tau, c.period,
                                want.ws.data(), s());
      dqn_adam_end_and_target_update(got.st.data(), got.p.data() + o, got.m.data() + o, got.v.data() + o,
                                     got.t.data() + o, got.pr.data(), got.g.data() + o, c.n, B, cfg, c.clip, 7.f, c.tau,
                                     c.period, got.ws.data(), s());
    }
    EXPECT_EQ(test::download(got.p, s()), test::download(want.p, s()));
    EXPECT_EQ(test::download(got.m, s()), test::download(want.m, s()));
    EXPECT_EQ(test::download(got.v, s()), test::download(want.v, s()));
    EXPECT_EQ(test::download(got.t, s()), test::download(want.t, s()));
    EXPECT_EQ(test::download(got.pr, s()), test::download(want.pr, s()));
    const DqnState hw = download_state(want.st, s()), hg = download_state(got.st, s());
    EXPECT_EQ(hg.updates_applied, hw.updates_applied);
    EXPECT_EQ(hg.updates_attempted, hw.updates_attempted);
    EXPECT_EQ(hg.skips_total, hw.skips_total);
    EXPECT_EQ(hg.params_nonfinite, hw.params_nonfinite);
    EXPECT_EQ(hg.updates_attempted, c.applied + 4);
    if (!c.skip) {
      // The step moved the parameters (not checked for one element: its Adam step can cancel its
      // weight decay to within rounding, for some draws)
      if (c.n > 1) EXPECT_NE(test::download(got.p, s()), p0);
    } else {
      EXPECT_EQ(test::download(got.p, s()), p0);
    }
  }
  // A NaN gradient (not guarded here) makes a NaN parameter: params_nonfinite is set.
  const std::int64_t n = 4097;
  const auto nz = static_cast<std::size_t>(n);
  auto p = test::upload(test::random_uniform(nz, -1.f, 1.f, rng()), s());
  auto m = test::upload(std::vector<float>(nz, 0.f), s()), v = test::upload(std::vector<float>(nz, 0.f), s());
  auto g = test::upload(test::random_uniform(nz, -1.f, 1.f, rng()), s());
  auto t = test::upload(test::random_uniform(nz, -1.f, 1.f, rng()), s());
  test::set_elem(g.data(), 17, std::numeric_limits<float>::quiet_NaN(), s());
  gpu::DeviceBuffer<DqnState> st(1);
  DqnState h{};
  h.lr = 1e-3f;
  upload_state(st, h, s());
  gpu::DeviceBuffer<std::byte> ws(kDqnEndWorkspaceBytes);
  FH_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), s()));
  dqn_adam_end_and_target_update(st.data(), p.data(), m.data(), v.data(), t.data(), nullptr, g.data(), n, 0,
                                 gpu::AdamConfig{}, false, 7.f, 0.005f, 1, ws.data(), s());
  EXPECT_EQ(download_state(st, s()).params_nonfinite, 1u);
}

TEST_F(DqnFusedTest, StackRows) {
  SCOPED_TRACE(seed_note());
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{6}, std::int64_t{4097}, std::int64_t{1} << 20}) {
    const auto a = test::random_uniform(static_cast<std::size_t>(n), -1.f, 1.f, rng());
    const auto b = test::random_uniform(static_cast<std::size_t>(n), -1.f, 1.f, rng());
    auto d_a = test::upload(a, s()), d_b = test::upload(b, s());
    gpu::DeviceBuffer<float> out(static_cast<std::size_t>(2 * n));
    test::poison(out, s());
    dqn_stack_rows(out.data(), d_a.data(), d_b.data(), n, s());
    auto want = a;
    want.insert(want.end(), b.begin(), b.end());
    EXPECT_EQ(test::download(out, s()), want);
  }
}

}  // namespace
}  // namespace foxhunt::rl
