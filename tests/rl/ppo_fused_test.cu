// FusedActorCritic (rl/ppo/fused_mlp.hpp): a minibatch's parameter gradients and loss statistics
// against a float64 CPU reference (the MLPs' forward and backward here, the losses of
// tests/rl/ppo_reference.hpp) on fresh random networks and rollouts, gathered through random
// indices, with partial tiles, multi-discrete and Gaussian heads (clip and tanh bounds), tanh and
// relu; acting against the GEMM path's forward and sample_actions (the same Philox draws); which
// configurations fit.
#include "models/fd_support.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "rl/ppo/actor_critic.hpp"
#include "rl/ppo/fused_mlp.hpp"
#include "rl/ppo/minibatch.hpp"
#include "tests/rl/ppo_reference.hpp"

namespace foxhunt::rl::ppo {
namespace {

class PpoFusedTest : public test::LaneTest {};

HeadShape categorical(int branches, int choices) {
  HeadShape h;
  h.branches = branches;
  h.choices = choices;
  return h;
}
HeadShape gaussian(int dim, HeadShape::Bound bound) {
  HeadShape h;
  h.kind = HeadShape::Kind::gaussian;
  h.dim = dim;
  h.bound = bound;
  return h;
}

PpoConfig config_of(HeadShape head, std::vector<std::int64_t> hidden, gpu::Activation act) {
  PpoConfig c;
  c.num_envs = 8;
  c.rollout_steps = 8;
  c.hidden = std::move(hidden);
  c.activation = act;
  c.head = head;
  c.ent_coef = 0.03f;
  c.vf_coef = 0.7f;
  c.clip = 0.2f;
  return c;
}

// A network with its arena and its fused kernels; parameters uniform in +-0.5 (larger than the
// init's 0.01-gain policy head, so every term of the loss moves the gradients).
struct Net {
  Net(const PpoConfig& c, std::int64_t obs_dim, std::mt19937_64& rng, cudaStream_t s) : net(c, obs_dim) {
    net.declare(arena);
    arena.finalize(s);
    std::mt19937_64 init_rng(7);
    net.init(arena, init_rng, s);
    net.bind(arena);
    for (const auto& e : arena.entries())
      test::upload_to(arena.params() + e.offset,
                      test::random_uniform(static_cast<std::size_t>(e.numel), -0.5f, 0.5f, rng), s);
    fused = std::make_unique<FusedActorCritic>(net, c);
  }
  ActorCritic net;
  gpu::ParameterArena arena;
  std::unique_ptr<FusedActorCritic> fused;
};

// One network in float64: layer l maps width[l] -> width[l + 1], W (out, in) row-major.
struct RefNet {
  std::vector<int> width;
  std::vector<std::vector<double>> w, b;
  bool tanh_act = true;

  RefNet(const FusedNet& n, bool tanh, cudaStream_t s) : tanh_act(tanh) {
    width.assign(n.width, n.width + n.layers + 1);
    for (int l = 0; l < n.layers; ++l) {
      const auto wl = test::download(n.w[l], static_cast<std::size_t>(width[l] * width[l + 1]), s);
      const auto bl = test::download(n.b[l], static_cast<std::size_t>(width[l + 1]), s);
      w.emplace_back(wl.begin(), wl.end());
      b.emplace_back(bl.begin(), bl.end());
    }
  }
  int layers() const { return static_cast<int>(w.size()); }
  // acts[l]: (B, width[l]); acts[0] = x; acts.back() = the head's output.
  std::vector<std::vector<double>> forward(const std::vector<double>& x, std::int64_t B) const {
    std::vector<std::vector<double>> acts{x};
    for (int l = 0; l < layers(); ++l) {
      const int in = width[l], out = width[l + 1];
      std::vector<double> y(static_cast<std::size_t>(B * out));
      for (std::int64_t r = 0; r < B; ++r)
        for (int j = 0; j < out; ++j) {
          double z = b[l][j];
          for (int k = 0; k < in; ++k) z += w[l][j * in + k] * acts[l][r * in + k];
          if (l + 1 < layers()) z = tanh_act ? std::tanh(z) : std::max(z, 0.0);
          y[r * out + j] = z;
        }
      acts.push_back(std::move(y));
    }
    return acts;
  }
  // dW[l], db[l] from d_head (B, width.back()).
  void backward(const std::vector<std::vector<double>>& acts, std::vector<double> d, std::int64_t B,
                std::vector<std::vector<double>>* dw, std::vector<std::vector<double>>* db) const {
    dw->assign(layers(), {});
    db->assign(layers(), {});
    for (int l = layers() - 1; l >= 0; --l) {
      const int in = width[l], out = width[l + 1];
      auto& gw = (*dw)[l];
      auto& gb = (*db)[l];
      gw.assign(static_cast<std::size_t>(in * out), 0.0);
      gb.assign(static_cast<std::size_t>(out), 0.0);
      std::vector<double> d_in(static_cast<std::size_t>(B * in), 0.0);
      for (std::int64_t r = 0; r < B; ++r)
        for (int j = 0; j < out; ++j) {
          const double g = d[r * out + j];
          gb[j] += g;
          for (int k = 0; k < in; ++k) {
            gw[j * in + k] += g * acts[l][r * in + k];
            d_in[r * in + k] += g * w[l][j * in + k];
          }
        }
      if (l > 0)
        for (std::int64_t i = 0; i < B * in; ++i) {
          const double y = acts[l][i];
          d_in[i] *= tanh_act ? 1 - y * y : (y > 0 ? 1.0 : 0.0);
        }
      d = std::move(d_in);
    }
  }
};

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// |got - want| <= 2e-4 * max |want| + 1e-7 for every element, and got finite.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = 2e-4 * max_abs(want) + 1e-7;
  int bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 5; ++i)
    if (!std::isfinite(got[i]) || std::abs(got[i] - want[i]) > tol) {
      ++bad;
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i] << " (tol " << tol << ")";
    }
}

TEST_F(PpoFusedTest, MinibatchGradientsMatchTheFloat64Reference) {
  SCOPED_TRACE(seed_note());
  struct Case {
    std::string what;
    PpoConfig config;
    std::int64_t obs_dim, rows;
  };
  const std::vector<Case> cases{
      {"64-64 tanh, categorical 2, 4 tiles", config_of(categorical(1, 2), {64, 64}, gpu::Activation::tanh), 4, 128},
      {"48-17 relu, multi-discrete 3x4, partial tile", config_of(categorical(3, 4), {48, 17}, gpu::Activation::relu), 7,
       77},
      {"64 tanh, gaussian clip 4", config_of(gaussian(4, HeadShape::Bound::clip), {64}, gpu::Activation::tanh), 33, 100},
      {"no trunk, gaussian tanh 3", config_of(gaussian(3, HeadShape::Bound::tanh), {}, gpu::Activation::relu), 5, 40},
      {"4 layers relu, categorical 64", config_of(categorical(1, 64), {64, 64, 40, 64}, gpu::Activation::relu), 64, 65},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    for (bool clip_value : {true, false}) {
      PpoConfig cfg = c.config;
      cfg.clip_value = clip_value;
      Net n(cfg, c.obs_dim, rng(), s());
      const HeadShape& h = cfg.head;
      const std::int64_t B = c.rows, total = 2 * B + 3, C = c.obs_dim, AW = h.action_width();
      // The rollout: rows_total rows; the minibatch: B distinct random rows of it.
      const auto obs = test::random_uniform(static_cast<std::size_t>(total * C), -1.5f, 1.5f, rng());
      std::vector<std::int32_t> discrete(static_cast<std::size_t>(total * AW));
      std::vector<float> raw;
      if (h.gaussian()) {
        raw = test::random_uniform(static_cast<std::size_t>(total * AW), -1.2f, 1.2f, rng());
      } else {
        std::uniform_int_distribution<std::int32_t> a(0, h.choices - 1);
        for (auto& x : discrete) x = a(rng());
      }
      const auto adv = test::random_uniform(static_cast<std::size_t>(total), -2.f, 3.f, rng());
      const auto ret = test::random_uniform(static_cast<std::size_t>(total), -1.f, 1.f, rng());
      const auto val = test::random_uniform(static_cast<std::size_t>(total), -1.f, 1.f, rng());
      std::vector<std::int32_t> idx(static_cast<std::size_t>(total));
      std::iota(idx.begin(), idx.end(), 0);
      std::shuffle(idx.begin(), idx.end(), rng());
      idx.resize(static_cast<std::size_t>(B));

      // Reference forward of the minibatch's rows.
      const bool tanh = cfg.activation == gpu::Activation::tanh;
      RefNet actor(n.fused->actor(), tanh, s()), critic(n.fused->critic(), tanh, s());
      std::vector<double> x(static_cast<std::size_t>(B * C));
      std::vector<std::int32_t> mb_discrete(static_cast<std::size_t>(B * AW));
      std::vector<float> mb_raw(h.gaussian() ? static_cast<std::size_t>(B * AW) : 0), mb_adv(B), mb_ret(B), mb_val(B);
      for (std::int64_t r = 0; r < B; ++r) {
        const std::int64_t i = idx[r];
        for (std::int64_t k = 0; k < C; ++k) x[r * C + k] = obs[i * C + k];
        for (std::int64_t k = 0; k < AW; ++k) {
          if (h.gaussian())
            mb_raw[r * AW + k] = raw[i * AW + k];
          else
            mb_discrete[r * AW + k] = discrete[i * AW + k];
        }
        mb_adv[r] = adv[i];
        mb_ret[r] = ret[i];
        mb_val[r] = val[i];
      }
      const auto a_acts = actor.forward(x, B), c_acts = critic.forward(x, B);
      std::vector<double> log_std;
      if (h.gaussian()) {
        const auto ls = test::download(n.net.log_std(), static_cast<std::size_t>(h.dim), s());
        log_std.assign(ls.begin(), ls.end());
      }
      // Behaviour log-probs near the current ones, so some ratios clip and most do not.
      std::vector<float> mb_old(B);
      for (std::int64_t r = 0; r < B; ++r) {
        double lp, ent;
        ref::row_logp_entropy(a_acts.back().data() + r * h.width(), h.gaussian() ? log_std.data() : nullptr,
                              h.gaussian() ? nullptr : mb_discrete.data() + r * AW,
                              h.gaussian() ? mb_raw.data() + r * AW : nullptr, h, &lp, &ent);
        mb_old[r] = static_cast<float>(lp + std::uniform_real_distribution<double>(-0.4, 0.4)(rng()));
      }
      std::vector<float> old(static_cast<std::size_t>(total), 0.f);
      for (std::int64_t r = 0; r < B; ++r) old[idx[r]] = mb_old[r];

      std::vector<double> d_head, d_log_std, d_value;
      const ref::PolicyRef pol = ref::policy_loss(a_acts.back(), log_std, mb_discrete, mb_raw, mb_old, mb_adv, B, h,
                                                  cfg.clip, cfg.ent_coef, true, &d_head, &d_log_std);
      const double vloss = ref::value_loss(c_acts.back(), mb_val, mb_ret, cfg.clip, clip_value, cfg.vf_coef, &d_value);
      std::vector<std::vector<double>> a_dw, a_db, c_dw, c_db;
      actor.backward(a_acts, d_head, B, &a_dw, &a_db);
      critic.backward(c_acts, d_value, B, &c_dw, &c_db);

      // The device side.
      auto d_obs = test::upload(obs, s()), d_adv = test::upload(adv, s()), d_ret = test::upload(ret, s());
      auto d_val = test::upload(val, s()), d_old = test::upload(old, s());
      auto d_idx = test::upload(idx, s());
      auto d_discrete = test::upload(discrete, s());
      gpu::DeviceBuffer<float> d_raw = h.gaussian() ? test::upload(raw, s()) : gpu::DeviceBuffer<float>(1);
      gpu::DeviceBuffer<float> norm(2);
      gpu::DeviceBuffer<LossStats> stats(1);
      gpu::DeviceBuffer<std::byte> ws(n.fused->minibatch_workspace_bytes(B));
      FH_CHECK(cudaMemsetAsync(n.arena.grads(), 0xFF, static_cast<std::size_t>(n.arena.padded_count()) * 4, s()));
      test::poison(ws, s());
      zero_loss_stats(stats.data(), s());
      n.fused->advantage_norms(norm.data(), d_adv.data(), d_idx.data(), B, 1, s());
      FusedMinibatchInputs in{d_obs.data(), h.gaussian() ? nullptr : d_discrete.data(),
                              h.gaussian() ? d_raw.data() : nullptr, d_old.data(), d_adv.data(), d_ret.data(),
                              d_val.data()};
      n.fused->minibatch(stats.data(), in, d_idx.data(), B, norm.data(), ws.data(), s());

      for (int k = 0; k < 2; ++k) {
        const FusedNet& f = k == 0 ? n.fused->actor() : n.fused->critic();
        const auto& dw = k == 0 ? a_dw : c_dw;
        const auto& db = k == 0 ? a_db : c_db;
        for (int l = 0; l < f.layers; ++l) {
          const std::string name = std::string(k == 0 ? "actor" : "critic") + " layer " + std::to_string(l);
          expect_close(test::download(f.dw[l], dw[l].size(), s()), dw[l], name + " weight grad");
          expect_close(test::download(f.db[l], db[l].size(), s()), db[l], name + " bias grad");
        }
      }
      if (h.gaussian())
        expect_close(test::download(n.net.log_std_grad(), static_cast<std::size_t>(h.dim), s()), d_log_std,
                     "log_std grad");
      const LossStats st = test::download(stats.data(), 1, s())[0];
      EXPECT_NEAR(st.policy_loss, pol.pg, 1e-4 * (1 + std::abs(pol.pg)));
      EXPECT_NEAR(st.entropy, pol.entropy, 1e-4 * (1 + std::abs(pol.entropy)));
      EXPECT_NEAR(st.approx_kl, pol.approx_kl, 1e-5 + 1e-4 * pol.approx_kl);
      EXPECT_NEAR(st.last_approx_kl, pol.approx_kl, 1e-5 + 1e-4 * pol.approx_kl);
      EXPECT_NEAR(st.clip_fraction, pol.clip_fraction, 1.5 / static_cast<double>(B));  // a row at the edge may flip
      EXPECT_NEAR(st.value_loss, vloss, 1e-4 * (1 + vloss));
      EXPECT_EQ(st.minibatches, 1u);
      EXPECT_GT(pol.clip_fraction, 0.0) << "no ratio was clipped: the case does not test the clip";
    }
  }
}

TEST_F(PpoFusedTest, ActingMatchesTheGemmForwardAndSampleActions) {
  SCOPED_TRACE(seed_note());
  for (const HeadShape& h : {categorical(3, 5), gaussian(4, HeadShape::Bound::tanh)}) {
    PpoConfig cfg = config_of(h, {64, 64}, gpu::Activation::tanh);
    const std::int64_t C = 9, N = 200;
    Net n(cfg, C, rng(), s());
    models::OwnedWorkspace ws;
    ws.storage = gpu::DeviceBuffer<std::byte>(n.net.workspace_bytes(N));
    ws.view = models::Workspace{ws.storage.data(), N, false};
    auto obs = test::upload(test::random_uniform(static_cast<std::size_t>(N * C), -1.f, 1.f, rng()), s());
    gpu::DeviceBuffer<std::uint64_t> step(1);
    step.upload(std::vector<std::uint64_t>{5}, s());
    const std::size_t aw = static_cast<std::size_t>(N * h.action_width());
    gpu::DeviceBuffer<std::int32_t> disc_f(aw), disc_g(aw);
    gpu::DeviceBuffer<float> raw_f(aw), raw_g(aw), env_f(aw), env_g(aw), lp_f(N), lp_g(N), v_f(N), v_g(N), v_only(N);
    gpu::DeviceBuffer<float> head(static_cast<std::size_t>(N * h.width()));
    for (auto* b : {&raw_f, &env_f, &lp_f, &v_f, &v_only}) test::poison(*b, s());
    test::poison(disc_f, s());
    // Offset 2 from *step = 5: the GEMM path's draw at counter 7.
    n.fused->act(FusedActOutputs{disc_f.data(), raw_f.data(), env_f.data(), lp_f.data(), v_f.data()}, obs.data(), N,
                 11, 0x1234u, step.data(), 2, s());
    n.fused->values(v_only.data(), obs.data(), N, s());
    step.upload(std::vector<std::uint64_t>{7}, s());
    n.net.forward(head.data(), v_g.data(), obs.data(), N, ws.view, lane());
    sample_actions(disc_g.data(), raw_g.data(), env_g.data(), lp_g.data(), head.data(), n.net.log_std(), N, h, 11,
                   0x1234u, step.data(), s());
    const auto vf = test::download(v_f, s()), vg = test::download(v_g, s()), vo = test::download(v_only, s());
    for (std::int64_t i = 0; i < N; ++i) {
      ASSERT_NEAR(vf[i], vg[i], 1e-5f * (1 + std::abs(vg[i]))) << "value " << i;
      ASSERT_EQ(vf[i], vo[i]) << "values() differs from act()'s value, row " << i;
    }
    const auto lf = test::download(lp_f, s()), lg = test::download(lp_g, s());
    if (h.gaussian()) {
      const auto rf = test::download(raw_f, s()), rg = test::download(raw_g, s());
      const auto ef = test::download(env_f, s()), eg = test::download(env_g, s());
      for (std::size_t i = 0; i < aw; ++i) {
        ASSERT_NEAR(rf[i], rg[i], 1e-5f * (1 + std::abs(rg[i]))) << "raw " << i;
        ASSERT_NEAR(ef[i], eg[i], 1e-5f) << "env action " << i;
      }
      for (std::int64_t i = 0; i < N; ++i) ASSERT_NEAR(lf[i], lg[i], 1e-4f * (1 + std::abs(lg[i]))) << "logp " << i;
    } else {
      // The same uniforms against logits equal up to rounding: a draw at a CDF edge may differ.
      const auto df = test::download(disc_f, s()), dg = test::download(disc_g, s());
      std::int64_t same_rows = 0;
      for (std::int64_t i = 0; i < N; ++i) {
        bool same = true;
        for (int b = 0; b < h.branches; ++b) same &= df[i * h.branches + b] == dg[i * h.branches + b];
        if (!same) continue;
        ++same_rows;
        ASSERT_NEAR(lf[i], lg[i], 1e-5f * (1 + std::abs(lg[i]))) << "logp " << i;
      }
      EXPECT_GE(same_rows, N - 2);
    }
  }
}

TEST(PpoFusedFit, SmallFeedForwardNetworksFitAndOthersSayWhy) {
  PpoConfig c = config_of(categorical(1, 2), {64, 64}, gpu::Activation::tanh);
  EXPECT_EQ(fused_unsupported_reason(c, 4), "");
  EXPECT_NE(fused_unsupported_reason(c, 65).find("observation width 65"), std::string::npos);
  PpoConfig wide = c;
  wide.hidden = {64, 128};
  EXPECT_NE(fused_unsupported_reason(wide, 4).find("hidden width 128"), std::string::npos);
  PpoConfig deep = c;
  deep.hidden = {8, 8, 8, 8, 8};
  EXPECT_NE(fused_unsupported_reason(deep, 4).find("hidden layers"), std::string::npos);
  PpoConfig lstm = c;
  lstm.lstm_hidden = 16;
  EXPECT_NE(fused_unsupported_reason(lstm, 4).find("recurrent"), std::string::npos);
  PpoConfig shared = c;
  shared.shared_trunk = true;
  EXPECT_NE(fused_unsupported_reason(shared, 4).find("shared"), std::string::npos);
  PpoConfig bf16 = c;
  bf16.math = gpu::LinearMath::bf16;
  EXPECT_NE(fused_unsupported_reason(bf16, 4).find("bf16"), std::string::npos);
  PpoConfig head = c;
  head.head = categorical(5, 13);
  EXPECT_NE(fused_unsupported_reason(head, 4).find("head width 65"), std::string::npos);
}

}  // namespace
}  // namespace foxhunt::rl::ppo
