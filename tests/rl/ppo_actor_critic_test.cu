// ActorCritic (rl/ppo/actor_critic.hpp): every parameter's gradient against central finite
// differences of L = sum(u * head) + sum(w * value), for separate and shared trunks, categorical
// and Gaussian heads, no trunk, and the recurrent policy (with its observation gradient); the
// orthogonal init (W W^T = gain^2 I, zero biases); a forward that skips an output leaves the other
// one as it would be.
#include "models/fd_support.hpp"

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "models/init.hpp"
#include "rl/ppo/actor_critic.hpp"

namespace foxhunt::rl::ppo {
namespace {

class PpoActorCriticTest : public test::LaneTest {};

PpoConfig small(bool shared, HeadShape head, std::vector<std::int64_t> hidden, gpu::Activation act) {
  PpoConfig c;
  c.num_envs = 4;
  c.rollout_steps = 4;
  c.minibatches = 2;
  c.hidden = std::move(hidden);
  c.shared_trunk = shared;
  c.activation = act;
  c.head = head;
  c.init_log_std = -0.3f;
  return c;
}

HeadShape categorical(int branches, int choices) {
  HeadShape h;
  h.kind = HeadShape::Kind::categorical;
  h.branches = branches;
  h.choices = choices;
  return h;
}
HeadShape gaussian(int dim) {
  HeadShape h;
  h.kind = HeadShape::Kind::gaussian;
  h.dim = dim;
  h.low = -1.f;
  h.high = 1.f;
  return h;
}

struct Net {
  Net(const PpoConfig& c, std::int64_t obs_dim, std::int64_t rows, std::uint64_t seed, cudaStream_t s)
      : net(c, obs_dim), ws_storage(net.workspace_bytes(rows)) {
    net.declare(arena);
    arena.finalize(s);
    std::mt19937_64 rng(seed);
    net.init(arena, rng, s);
    net.bind(arena);
    ws = models::Workspace{ws_storage.data(), rows, false};
  }
  ActorCritic net;
  gpu::ParameterArena arena;
  gpu::DeviceBuffer<std::byte> ws_storage;
  models::Workspace ws;
};

TEST_F(PpoActorCriticTest, GradientsMatchFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  struct Case {
    std::string what;
    PpoConfig config;
  };
  const std::vector<Case> cases{
      {"separate tanh, categorical", small(false, categorical(1, 3), {9, 7}, gpu::Activation::tanh)},
      {"shared tanh, multi-discrete", small(true, categorical(3, 4), {8, 6}, gpu::Activation::tanh)},
      {"separate relu, gaussian", small(false, gaussian(3), {10}, gpu::Activation::relu)},
      {"shared tanh, gaussian", small(true, gaussian(2), {7, 5}, gpu::Activation::tanh)},
      {"no trunk, categorical", small(false, categorical(1, 5), {}, gpu::Activation::tanh)},
  };
  const std::int64_t B = 6, C = 5;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    Net n(c.config, C, B, seed_, s());
    // Larger weights than the init's 0.01-gain policy head, so every gradient is well above the
    // finite differences' noise.
    for (const auto& e : n.arena.entries()) {
      const auto w = test::random_uniform(static_cast<std::size_t>(e.numel), -0.6f, 0.6f, rng());
      test::upload_to(n.arena.params() + e.offset, w, s());
    }
    const std::int64_t W = n.net.head_width();
    const auto obs = test::random_uniform(static_cast<std::size_t>(B * C), -1.f, 1.f, rng());
    const auto u = test::random_uniform(static_cast<std::size_t>(B * W), -1.f, 1.f, rng());
    const auto w = test::random_uniform(static_cast<std::size_t>(B), -1.f, 1.f, rng());
    auto d_obs = test::upload(obs, s()), d_u = test::upload(u, s()), d_w = test::upload(w, s());
    gpu::DeviceBuffer<float> head(static_cast<std::size_t>(B * W)), value(static_cast<std::size_t>(B));
    FH_CHECK(cudaMemsetAsync(n.arena.grads(), 0xFF, static_cast<std::size_t>(n.arena.padded_count()) * 4, s()));
    if (n.net.log_std_grad() != nullptr)  // the loss writes the log-std's gradient, not backward()
      FH_CHECK(cudaMemsetAsync(n.net.log_std_grad(), 0, c.config.head.dim * sizeof(float), s()));
    n.net.forward(head.data(), value.data(), d_obs.data(), B, n.ws, lane());
    n.net.backward(d_u.data(), d_w.data(), d_obs.data(), B, n.ws, lane());
    const auto grads = test::download(n.arena.grads(), static_cast<std::size_t>(n.arena.padded_count()), s());
    auto loss = [&] {
      n.net.forward(head.data(), value.data(), d_obs.data(), B, n.ws, lane());
      const auto h = test::download(head, s());
      const auto v = test::download(value, s());
      double L = 0;
      for (std::size_t i = 0; i < h.size(); ++i) L += static_cast<double>(u[i]) * h[i];
      for (std::size_t i = 0; i < v.size(); ++i) L += static_cast<double>(w[i]) * v[i];
      return L;
    };
    double rms = 0;
    for (const auto& e : n.arena.entries())
      for (std::int64_t i = 0; i < e.numel; ++i) rms += static_cast<double>(grads[e.offset + i]) * grads[e.offset + i];
    rms = std::sqrt(rms / static_cast<double>(n.arena.count()));
    for (const auto& e : n.arena.entries()) {
      for (std::int64_t i = 0; i < e.numel; ++i)
        ASSERT_TRUE(std::isfinite(grads[e.offset + i])) << e.name << "[" << i << "] not written";
      if (e.name == "policy.log_std") continue;  // not a function of head or value
      for (int k = 0; k < 4; ++k) {
        const auto i = static_cast<std::int64_t>(rng()() % static_cast<std::uint64_t>(e.numel));
        // A ReLU kink within the step spoils that difference; a kink within all three steps is rare.
        const double fd = test::central_difference(loss, n.arena.params() + e.offset, i, 1e-2f, s());
        if (test::fd_close(fd, grads[e.offset + i], 2e-2, 0.05 * rms)) continue;
        const double fd_fine = test::central_difference(loss, n.arena.params() + e.offset, i, 1e-3f, s());
        if (test::fd_close(fd_fine, grads[e.offset + i], 2e-2, 0.05 * rms)) continue;
        // A pre-activation within 1e-3 of a ReLU kink for some row: a step ten times finer.
        const double fd_finer = test::central_difference(loss, n.arena.params() + e.offset, i, 1e-4f, s());
        EXPECT_TRUE(test::fd_close(fd_finer, grads[e.offset + i], 2e-2, 0.05 * rms))
            << e.name << "[" << i << "] (step 1e-2: " << fd << ", 1e-3: " << fd_fine << ")";
      }
    }
  }
}

TEST_F(PpoActorCriticTest, SkippedOutputsLeaveTheOtherUnchanged) {
  SCOPED_TRACE(seed_note());
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "shared trunk" : "separate trunks");
    const std::int64_t B = 33, C = 7;
    Net n(small(shared, categorical(2, 3), {16, 16}, gpu::Activation::tanh), C, B, seed_, s());
    const std::int64_t W = n.net.head_width();
    auto d_obs = test::upload(test::random_uniform(static_cast<std::size_t>(B * C), -2.f, 2.f, rng()), s());
    gpu::DeviceBuffer<float> head(static_cast<std::size_t>(B * W)), value(static_cast<std::size_t>(B));
    gpu::DeviceBuffer<float> head_only(head.size()), value_only(value.size());
    test::poison(head_only, s());
    test::poison(value_only, s());
    n.net.forward(head.data(), value.data(), d_obs.data(), B, n.ws, lane());
    n.net.forward(head_only.data(), nullptr, d_obs.data(), B, n.ws, lane());
    n.net.forward(nullptr, value_only.data(), d_obs.data(), B, n.ws, lane());
    EXPECT_EQ(test::download(head_only, s()), test::download(head, s()));
    EXPECT_EQ(test::download(value_only, s()), test::download(value, s()));
  }
}

// The recurrent policy (trunk -> LSTM -> heads) over time-major sequences with initial states and
// resets: every parameter's gradient against central finite differences.
TEST_F(PpoActorCriticTest, RecurrentGradientsMatchFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  for (const bool trunk : {true, false})
    for (const bool shared : {false, true}) {
      SCOPED_TRACE(std::string(trunk ? "trunk -> LSTM" : "LSTM on the observation") +
                   (shared ? ", shared by actor and critic" : ", actor and critic each"));
      PpoConfig c = small(shared, categorical(2, 3), trunk ? std::vector<std::int64_t>{6} : std::vector<std::int64_t>{},
                          gpu::Activation::tanh);
      c.lstm_hidden = 5;
      const std::int64_t T = 4, M = 3, C = 4, rows = T * M;
      ActorCritic net(c, C);
      gpu::ParameterArena arena;
      net.declare(arena);
      arena.finalize(s());
      std::mt19937_64 init_rng(seed_);
      net.init(arena, init_rng, s());
      net.bind(arena);
      for (const auto& e : arena.entries())
        test::upload_to(arena.params() + e.offset,
                        test::random_uniform(static_cast<std::size_t>(e.numel), -0.6f, 0.6f, rng()), s());
      gpu::DeviceBuffer<std::byte> ws_storage(net.sequence_workspace_bytes(T, M));
      const models::Workspace ws{ws_storage.data(), M, false};
      const std::int64_t W = net.head_width(), S = net.state_features();
      ASSERT_EQ(S, shared ? 10 : 20);
      const auto obs = test::random_uniform(static_cast<std::size_t>(rows * C), -1.f, 1.f, rng());
      const auto state0 = test::random_uniform(static_cast<std::size_t>(M * S), -0.8f, 0.8f, rng());
      std::vector<std::uint8_t> resets(static_cast<std::size_t>(rows), 0);
      resets[2 * M + 1] = 1;  // environment 1 starts an episode at t = 2
      const auto u = test::random_uniform(static_cast<std::size_t>(rows * W), -1.f, 1.f, rng());
      const auto w = test::random_uniform(static_cast<std::size_t>(rows), -1.f, 1.f, rng());
      auto d_obs = test::upload(obs, s()), d_s0 = test::upload(state0, s()), d_u = test::upload(u, s()),
           d_w = test::upload(w, s());
      auto d_resets = test::upload(resets, s());
      gpu::DeviceBuffer<float> head(static_cast<std::size_t>(rows * W)), value(static_cast<std::size_t>(rows));
      FH_CHECK(cudaMemsetAsync(arena.grads(), 0xFF, static_cast<std::size_t>(arena.padded_count()) * 4, s()));
      net.forward_sequence(head.data(), value.data(), d_obs.data(), d_s0.data(), d_resets.data(), T, M, ws, lane());
      net.backward_sequence(d_u.data(), d_w.data(), d_obs.data(), d_s0.data(), d_resets.data(), T, M, ws, lane());
      const auto grads = test::download(arena.grads(), static_cast<std::size_t>(arena.padded_count()), s());
      auto loss = [&] {
        net.forward_sequence(head.data(), value.data(), d_obs.data(), d_s0.data(), d_resets.data(), T, M, ws, lane());
        const auto h = test::download(head, s());
        const auto v = test::download(value, s());
        double L = 0;
        for (std::size_t i = 0; i < h.size(); ++i) L += static_cast<double>(u[i]) * h[i];
        for (std::size_t i = 0; i < v.size(); ++i) L += static_cast<double>(w[i]) * v[i];
        return L;
      };
      double rms = 0;
      for (const auto& e : arena.entries())
        for (std::int64_t i = 0; i < e.numel; ++i)
          rms += static_cast<double>(grads[e.offset + i]) * grads[e.offset + i];
      rms = std::sqrt(rms / static_cast<double>(arena.count()));
      int lstm_tensors = 0;
      for (const auto& e : arena.entries()) {
        lstm_tensors += e.name.find("lstm.") != std::string::npos ? 1 : 0;
        for (std::int64_t i = 0; i < e.numel; ++i)
          ASSERT_TRUE(std::isfinite(grads[e.offset + i])) << e.name << "[" << i << "] not written";
        for (int k = 0; k < 4; ++k) {
          const auto i = static_cast<std::int64_t>(rng()() % static_cast<std::uint64_t>(e.numel));
          const double fd = test::central_difference(loss, arena.params() + e.offset, i, 1e-2f, s());
          EXPECT_TRUE(test::fd_close(fd, grads[e.offset + i], 2e-2, 0.05 * rms)) << e.name << "[" << i << "]";
        }
      }
      EXPECT_EQ(lstm_tensors, shared ? 3 : 6);
    }
}

// The recurrent policy's input gradient (backward_sequence's d_obs, what a fine-tuned feature
// extractor in front receives): every observation element against central finite differences,
// with and without a trunk, shared and separate networks; asking for it leaves the parameter
// gradients bitwise as they are without it.
TEST_F(PpoActorCriticTest, RecurrentObservationGradientMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  for (const bool trunk : {true, false})
    for (const bool shared : {false, true}) {
      SCOPED_TRACE(std::string(trunk ? "trunk -> LSTM" : "LSTM on the observation") +
                   (shared ? ", shared by actor and critic" : ", actor and critic each"));
      PpoConfig c = small(shared, gaussian(2), trunk ? std::vector<std::int64_t>{6} : std::vector<std::int64_t>{},
                          gpu::Activation::tanh);
      c.lstm_hidden = 5;
      const std::int64_t T = 4, M = 3, C = 4, rows = T * M;
      ActorCritic net(c, C);
      gpu::ParameterArena arena;
      net.declare(arena);
      arena.finalize(s());
      std::mt19937_64 init_rng(seed_);
      net.init(arena, init_rng, s());
      net.bind(arena);
      for (const auto& e : arena.entries())
        test::upload_to(arena.params() + e.offset,
                        test::random_uniform(static_cast<std::size_t>(e.numel), -0.6f, 0.6f, rng()), s());
      gpu::DeviceBuffer<std::byte> ws_storage(net.sequence_workspace_bytes(T, M));
      const models::Workspace ws{ws_storage.data(), M, false};
      const std::int64_t W = net.head_width(), S = net.state_features();
      const auto obs = test::random_uniform(static_cast<std::size_t>(rows * C), -1.f, 1.f, rng());
      const auto state0 = test::random_uniform(static_cast<std::size_t>(M * S), -0.8f, 0.8f, rng());
      std::vector<std::uint8_t> resets(static_cast<std::size_t>(rows), 0);
      resets[2 * M + 1] = 1;  // environment 1 starts an episode at t = 2: no gradient crosses it
      const auto u = test::random_uniform(static_cast<std::size_t>(rows * W), -1.f, 1.f, rng());
      const auto w = test::random_uniform(static_cast<std::size_t>(rows), -1.f, 1.f, rng());
      auto d_obs_in = test::upload(obs, s()), d_s0 = test::upload(state0, s()), d_u = test::upload(u, s()),
           d_w = test::upload(w, s());
      auto d_resets = test::upload(resets, s());
      gpu::DeviceBuffer<float> head(static_cast<std::size_t>(rows * W)), value(static_cast<std::size_t>(rows));
      gpu::DeviceBuffer<float> g_obs(static_cast<std::size_t>(rows * C)), scratch(static_cast<std::size_t>(rows * C));
      test::poison(g_obs, s());
      test::poison(scratch, s());
      const auto P = static_cast<std::size_t>(arena.padded_count());
      FH_CHECK(cudaMemsetAsync(arena.grads(), 0, P * sizeof(float), s()));  // the log-std's: the loss writes it
      net.forward_sequence(head.data(), value.data(), d_obs_in.data(), d_s0.data(), d_resets.data(), T, M, ws, lane());
      net.backward_sequence(d_u.data(), d_w.data(), d_obs_in.data(), d_s0.data(), d_resets.data(), T, M, ws, lane());
      const auto grads_plain = test::download(arena.grads(), P, s());
      net.backward_sequence(d_u.data(), d_w.data(), d_obs_in.data(), d_s0.data(), d_resets.data(), T, M, ws, lane(),
                            g_obs.data(), scratch.data());
      EXPECT_EQ(test::download(arena.grads(), P, s()), grads_plain) << "d_obs changed the parameter gradients";
      const auto g = test::download(g_obs, s());
      auto loss = [&] {
        net.forward_sequence(head.data(), value.data(), d_obs_in.data(), d_s0.data(), d_resets.data(), T, M, ws,
                             lane());
        const auto h = test::download(head, s());
        const auto v = test::download(value, s());
        double L = 0;
        for (std::size_t i = 0; i < h.size(); ++i) L += static_cast<double>(u[i]) * h[i];
        for (std::size_t i = 0; i < v.size(); ++i) L += static_cast<double>(w[i]) * v[i];
        return L;
      };
      double rms = 0;
      for (float v : g) {
        ASSERT_TRUE(std::isfinite(v)) << "d_obs not written everywhere";
        rms += static_cast<double>(v) * v;
      }
      rms = std::sqrt(rms / static_cast<double>(g.size()));
      ASSERT_GT(rms, 1e-3);
      for (std::int64_t i = 0; i < rows * C; ++i) {
        const double fd = test::central_difference(loss, d_obs_in.data(), i, 1e-2f, s());
        EXPECT_TRUE(test::fd_close(fd, g[static_cast<std::size_t>(i)], 2e-2, 0.05 * rms))
            << "d_obs[t " << i / (M * C) << ", env " << (i / C) % M << ", col " << i % C << "]";
      }
    }
}

// Separate critic input (obs_critic: separate fine-tuned extractors): the policy reads obs and the
// value obs_critic, so d_obs (the actor's extractor's gradient) against central differences over
// obs and d_obs_critic (the critic's) over obs_critic, each element, feed-forward and recurrent,
// with and without trunks; obs_critic = obs computes what the one-input call computes, bitwise.
TEST_F(PpoActorCriticTest, SeparateCriticInputGradientsMatchFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  for (const bool recurrent : {false, true})
    for (const bool trunk : {true, false}) {
      SCOPED_TRACE(std::string(recurrent ? "LSTM" : "feed-forward") + (trunk ? ", trunks" : ", no trunk"));
      PpoConfig c = small(false, categorical(1, 3), trunk ? std::vector<std::int64_t>{6} : std::vector<std::int64_t>{},
                          gpu::Activation::tanh);
      if (recurrent) c.lstm_hidden = 5;
      const std::int64_t T = recurrent ? 4 : 1, M = recurrent ? 3 : 6, C = 4, rows = T * M;
      ActorCritic net(c, C);
      gpu::ParameterArena arena;
      net.declare(arena);
      arena.finalize(s());
      std::mt19937_64 init_rng(seed_);
      net.init(arena, init_rng, s());
      net.bind(arena);
      for (const auto& e : arena.entries())
        test::upload_to(arena.params() + e.offset,
                        test::random_uniform(static_cast<std::size_t>(e.numel), -0.6f, 0.6f, rng()), s());
      gpu::DeviceBuffer<std::byte> ws_storage(recurrent ? net.sequence_workspace_bytes(T, M)
                                                        : net.workspace_bytes(rows));
      const models::Workspace ws{ws_storage.data(), recurrent ? M : rows, false};
      const std::int64_t W = net.head_width(), S = net.state_features();
      const auto n_obs = static_cast<std::size_t>(rows * C);
      auto x = test::upload(test::random_uniform(n_obs, -1.f, 1.f, rng()), s());
      auto xc = test::upload(test::random_uniform(n_obs, -1.f, 1.f, rng()), s());
      auto d_s0 = test::upload(test::random_uniform(static_cast<std::size_t>(M * std::max<std::int64_t>(S, 1)), -0.8f,
                                                    0.8f, rng()),
                               s());
      std::vector<std::uint8_t> resets(static_cast<std::size_t>(rows), 0);
      if (recurrent) resets[2 * M + 1] = 1;
      auto d_resets = test::upload(resets, s());
      const auto u = test::random_uniform(static_cast<std::size_t>(rows * W), -1.f, 1.f, rng());
      const auto w = test::random_uniform(static_cast<std::size_t>(rows), -1.f, 1.f, rng());
      auto d_u = test::upload(u, s()), d_w = test::upload(w, s());
      gpu::DeviceBuffer<float> head(static_cast<std::size_t>(rows * W)), value(static_cast<std::size_t>(rows));
      gpu::DeviceBuffer<float> g_obs(n_obs), g_critic(n_obs);
      test::poison(g_obs, s());
      test::poison(g_critic, s());
      auto forward = [&](const float* obs_critic) {
        if (recurrent)
          net.forward_sequence(head.data(), value.data(), x.data(), d_s0.data(), d_resets.data(), T, M, ws, lane(),
                               obs_critic);
        else
          net.forward(head.data(), value.data(), x.data(), rows, ws, lane(), obs_critic);
      };
      // obs_critic = obs is the one-input network.
      forward(nullptr);
      const auto head1 = test::download(head, s()), value1 = test::download(value, s());
      forward(x.data());
      EXPECT_EQ(test::download(head, s()), head1);
      EXPECT_EQ(test::download(value, s()), value1);

      forward(xc.data());
      if (recurrent)
        net.backward_sequence(d_u.data(), d_w.data(), x.data(), d_s0.data(), d_resets.data(), T, M, ws, lane(),
                              g_obs.data(), nullptr, xc.data(), g_critic.data());
      else
        net.backward(d_u.data(), d_w.data(), x.data(), rows, ws, lane(), g_obs.data(), nullptr, xc.data(),
                     g_critic.data());
      const auto ga = test::download(g_obs, s()), gc = test::download(g_critic, s());
      auto loss = [&] {
        forward(xc.data());
        const auto h = test::download(head, s());
        const auto v = test::download(value, s());
        double L = 0;
        for (std::size_t i = 0; i < h.size(); ++i) L += static_cast<double>(u[i]) * h[i];
        for (std::size_t i = 0; i < v.size(); ++i) L += static_cast<double>(w[i]) * v[i];
        return L;
      };
      for (const auto& [g, input, what] : {std::tuple{&ga, &x, "d_obs"}, std::tuple{&gc, &xc, "d_obs_critic"}}) {
        double rms = 0;
        for (float v : *g) {
          ASSERT_TRUE(std::isfinite(v)) << what << " not written everywhere";
          rms += static_cast<double>(v) * v;
        }
        rms = std::sqrt(rms / static_cast<double>(g->size()));
        ASSERT_GT(rms, 1e-3) << what;
        for (std::int64_t i = 0; i < rows * C; ++i) {
          const double fd = test::central_difference(loss, input->data(), i, 1e-2f, s());
          EXPECT_TRUE(test::fd_close(fd, (*g)[static_cast<std::size_t>(i)], 2e-2, 0.05 * rms))
              << what << "[row " << i / C << ", col " << i % C << "]";
        }
      }
    }
}

// Acting step by step (with the same resets) equals the sequence form the update trains on
// (separate actor and critic LSTMs: both state planes carried).
TEST_F(PpoActorCriticTest, RecurrentStepsEqualTheSequence) {
  SCOPED_TRACE(seed_note());
  PpoConfig c = small(false, gaussian(2), {8}, gpu::Activation::tanh);
  c.lstm_hidden = 7;
  const std::int64_t T = 6, M = 5, C = 3, rows = T * M;
  Net n(c, C, M, seed_, s());
  gpu::DeviceBuffer<std::byte> seq_storage(n.net.sequence_workspace_bytes(T, M));
  const models::Workspace seq_ws{seq_storage.data(), M, false};
  const std::int64_t W = n.net.head_width(), S = n.net.state_features();
  const auto obs = test::random_uniform(static_cast<std::size_t>(rows * C), -1.f, 1.f, rng());
  const auto state0 = test::random_uniform(static_cast<std::size_t>(M * S), -0.5f, 0.5f, rng());
  std::vector<std::uint8_t> resets(static_cast<std::size_t>(rows), 0);
  for (auto& r : resets) r = (rng()() % 5 == 0) ? 1 : 0;
  auto d_obs = test::upload(obs, s()), d_s0 = test::upload(state0, s());
  auto d_resets = test::upload(resets, s());
  gpu::DeviceBuffer<float> head(static_cast<std::size_t>(rows * W)), value(static_cast<std::size_t>(rows));
  n.net.forward_sequence(head.data(), value.data(), d_obs.data(), d_s0.data(), d_resets.data(), T, M, seq_ws, lane());
  gpu::DeviceBuffer<float> state(static_cast<std::size_t>(M * S)), step_head(static_cast<std::size_t>(rows * W)),
      step_value(static_cast<std::size_t>(rows));
  test::poison(step_head, s());
  test::poison(step_value, s());
  FH_CHECK(cudaMemcpyAsync(state.data(), d_s0.data(), d_s0.bytes(), cudaMemcpyDeviceToDevice, s()));
  for (std::int64_t t = 0; t < T; ++t)
    n.net.step(step_head.data() + t * M * W, step_value.data() + t * M, state.data(), d_obs.data() + t * M * C,
               d_resets.data() + t * M, M, n.ws, lane());
  const auto a = test::download(head, s()), b = test::download(step_head, s());
  const auto va = test::download(value, s()), vb = test::download(step_value, s());
  std::vector<double> ad(a.begin(), a.end()), vad(va.begin(), va.end());
  EXPECT_TRUE(test::all_close(b, ad, 1e-5, 1e-6));
  EXPECT_TRUE(test::all_close(vb, vad, 1e-5, 1e-6));
}

// CleanRL's layer_init: orthogonal weights with gain sqrt(2) in the trunks, 0.01 on the policy
// head, 1 on the value head, zero biases; the Gaussian log-std at init_log_std.
TEST_F(PpoActorCriticTest, OrthogonalInitWithCleanRlGains) {
  SCOPED_TRACE(seed_note());
  const std::int64_t C = 6;
  Net n(small(false, gaussian(3), {64, 32}, gpu::Activation::tanh), C, 4, seed_, s());
  for (const auto& e : n.arena.entries()) {
    SCOPED_TRACE(e.name);
    const auto p = test::download(n.arena.params() + e.offset, static_cast<std::size_t>(e.numel), s());
    if (e.name == "policy.log_std") {
      for (float x : p) EXPECT_FLOAT_EQ(x, -0.3f);
      continue;
    }
    if (e.shape.rank == 1) {  // a bias
      for (float x : p) EXPECT_EQ(x, 0.f);
      continue;
    }
    ASSERT_EQ(e.shape.rank, 2);
    const std::int64_t rows = e.shape[0], cols = e.shape[1];
    const double gain = e.name.rfind("policy.head", 0) == 0  ? 0.01
                        : e.name.rfind("value.head", 0) == 0 ? 1.0
                                                             : std::sqrt(2.0);
    // Orthonormal rows (rows <= cols) or columns, times gain: the Gram matrix of the shorter side.
    const bool by_rows = rows <= cols;
    const std::int64_t k = by_rows ? rows : cols, len = by_rows ? cols : rows;
    double worst = 0;
    for (std::int64_t a = 0; a < k; ++a)
      for (std::int64_t b = 0; b < k; ++b) {
        double dot = 0;
        for (std::int64_t j = 0; j < len; ++j) {
          const double x = by_rows ? p[a * cols + j] : p[j * cols + a];
          const double y = by_rows ? p[b * cols + j] : p[j * cols + b];
          dot += x * y;
        }
        worst = std::max(worst, std::abs(dot / (gain * gain) - (a == b ? 1.0 : 0.0)));
      }
    EXPECT_LT(worst, 1e-5);
  }
}

}  // namespace
}  // namespace foxhunt::rl::ppo
