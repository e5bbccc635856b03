// The Temporal Fusion Transformer (models/tft/tft.hpp) as a whole, and the LSTM initial-state
// gradient it needs (models/lstm.hpp's d_state0):
//   - no future leak: perturbing the inputs at step t leaves every output at steps < t bitwise
//     unchanged (and changes the output at t);
//   - the whole-model backward (every parameter tensor, the inputs) against central finite
//     differences on a tiny configuration;
//   - the step form (a shift register of the last T inputs) equals the training form's last
//     position on the same window, over a stream longer than the window and across a reset;
//   - the exported weights: selection weights sum to 1 per step, attention weights are causal;
//   - the LSTM's d_state0 against central differences (with a reset at step 0 zeroing its row).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gpu/arena.hpp"
#include "models/lstm.hpp"
#include "models/tft/tft.hpp"
#include "models/tft/tft_fd.hpp"

namespace foxhunt::models::tft {
namespace {

class TftTest : public test::LaneTest {
 protected:
  struct Model {
    explicit Model(TftSpec spec) : tft(std::move(spec)) {}
    Tft tft;
    gpu::ParameterArena arena;
  };
  std::unique_ptr<Model> make(std::int64_t C, std::int64_t hidden, std::int64_t heads, std::int64_t T) {
    TftSpec spec;
    spec.name = "tft";
    spec.in = C;
    spec.hidden = hidden;
    spec.heads = heads;
    spec.sequence_length = T;
    auto m = std::make_unique<Model>(spec);
    m->tft.declare(m->arena);
    m->arena.finalize(s());
    m->tft.init(m->arena, rng(), s());
    m->tft.bind(m->arena);
    FH_CHECK(cudaStreamSynchronize(s()));
    return m;
  }
};

TEST_F(TftTest, NoFutureLeak) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 3, T = 7, C = 2, H = 8;
  auto m = make(C, H, 2, T);
  OwnedWorkspace ws(m->tft, B);
  auto x = test::random_normal(static_cast<std::size_t>(B * T * C), 0.f, 1.f, rng());
  auto d_x = test::upload(x, s());
  gpu::DeviceBuffer<float> y(static_cast<std::size_t>(B * T * H));
  m->tft.forward(y.data(), d_x.data(), B, true, ws.view, lane());
  const auto base = test::download(y, s());
  for (std::int64_t t : {1, 3, 6}) {
    auto xp = x;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t c = 0; c < C; ++c) xp[(b * T + t) * C + c] += 0.5f;
    d_x.upload(std::span<const float>(xp), s());
    test::poison(y, s());
    m->tft.forward(y.data(), d_x.data(), B, true, ws.view, lane());
    const auto got = test::download(y, s());
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t u = 0; u < t; ++u)
        EXPECT_EQ(0, std::memcmp(&got[(b * T + u) * H], &base[(b * T + u) * H], H * sizeof(float)))
            << "perturbing step " << t << " changed the output at step " << u << " (row " << b << ")";
      double change = 0;
      for (std::int64_t k = 0; k < H; ++k) change += std::abs(got[(b * T + t) * H + k] - base[(b * T + t) * H + k]);
      EXPECT_GT(change, 1e-6) << "the output at step " << t << " ignores its own input (row " << b << ")";
    }
  }
}

TEST_F(TftTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 2, T = 4, C = 3, H = 4;
  auto m = make(C, H, 2, T);
  OwnedWorkspace ws(m->tft, B);
  const auto x = test::random_normal(static_cast<std::size_t>(B * T * C), 0.f, 1.f, rng());
  const auto u = test::random_uniform(static_cast<std::size_t>(B * T * H), -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  gpu::DeviceBuffer<float> y(u.size()), dx(x.size());
  test::poison(dx, s());
  // Poisoned parameter gradients: the backward must overwrite every one.
  FH_CHECK(cudaMemsetAsync(m->arena.grads(), 0xFF, static_cast<std::size_t>(m->arena.padded_count()) * sizeof(float),
                           s()));
  test::check_finite_differences(
      m->arena, [&] { m->tft.forward(y.data(), d_x.data(), B, false, ws.view, lane()); },
      [&] { m->tft.backward(dx.data(), d_u.data(), d_x.data(), B, ws.view, lane(), nullptr); }, y.data(), u,
      {{"x", d_x.data(), dx.data(), x.size()}}, rng(), s(), 3, 5e-3f);
  // Every gradient finite (the poison overwritten), padding aside.
  const auto g = test::download(m->arena.grads(), static_cast<std::size_t>(m->arena.padded_count()), s());
  for (const auto& e : m->arena.entries())
    for (std::int64_t i = 0; i < e.numel; ++i) ASSERT_TRUE(std::isfinite(g[e.offset + i])) << e.name << "[" << i << "]";
}

TEST_F(TftTest, StepFormEqualsTrainingFormOnEachWindow) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 3, T = 5, C = 2, H = 8, steps = T + 4, reset_at = T + 1;
  auto m = make(C, H, 4, T);
  OwnedWorkspace ws(m->tft, B);
  gpu::DeviceBuffer<std::byte> step_mem(m->tft.step_workspace_bytes(B));
  const Workspace step_ws{step_mem.data(), B, false};
  const auto inputs = test::random_normal(static_cast<std::size_t>(steps * B * C), 0.f, 1.f, rng());  // (steps, B, C)
  gpu::DeviceBuffer<float> state(static_cast<std::size_t>(B * m->tft.state_features()));
  gpu::DeviceBuffer<float> in(static_cast<std::size_t>(B * C)), out(static_cast<std::size_t>(B * H));
  gpu::DeviceBuffer<float> window(static_cast<std::size_t>(B * T * C)), y(static_cast<std::size_t>(B * T * H));
  gpu::DeviceBuffer<std::uint8_t> reset(static_cast<std::size_t>(B));
  test::poison(state, s());  // the first step's reset clears it
  std::vector<std::int64_t> since(B, 0);  // steps since each row's reset, including this one
  for (std::int64_t k = 0; k < steps; ++k) {
    std::vector<std::uint8_t> r(B, 0);
    if (k == 0) r.assign(B, 1);
    if (k == reset_at) r[0] = 1;
    for (std::int64_t b = 0; b < B; ++b) since[b] = r[b] ? 1 : since[b] + 1;
    reset.upload(std::span<const std::uint8_t>(r), s());
    in.upload(std::span<const float>(inputs.data() + k * B * C, static_cast<std::size_t>(B * C)), s());
    test::poison(out, s());
    m->tft.step(out.data(), state.data(), in.data(), reset.data(), B, step_ws, lane());
    const auto got = test::download(out, s());
    // The window each row holds: its last min(since, T) inputs, zeros before.
    std::vector<float> w(static_cast<std::size_t>(B * T * C), 0.f);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t src = k - (T - 1 - t);
        if (T - 1 - t >= since[b]) continue;
        for (std::int64_t c = 0; c < C; ++c) w[(b * T + t) * C + c] = inputs[(src * B + b) * C + c];
      }
    window.upload(std::span<const float>(w), s());
    m->tft.forward(y.data(), window.data(), B, true, ws.view, lane());
    const auto full = test::download(y, s());
    std::vector<double> want(static_cast<std::size_t>(B * H));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t j = 0; j < H; ++j) want[b * H + j] = full[(b * T + T - 1) * H + j];
    EXPECT_TRUE(test::all_close(got, want, 1e-6, 1e-7)) << "step " << k;
    // The state is the window itself.
    EXPECT_TRUE(test::all_close(test::download(state, s()), std::vector<double>(w.begin(), w.end()), 0, 0))
        << "step " << k;
  }
  // The window's weights after the last step: selection weights sum to 1, attention causal.
  const auto sel = test::download(m->tft.step_selection_weights(step_ws), static_cast<std::size_t>(B * T * C), s());
  for (std::int64_t r = 0; r < B * T; ++r) {
    double sum = 0;
    for (std::int64_t c = 0; c < C; ++c) sum += sel[r * C + c];
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  const auto att = test::download(m->tft.step_attention_weights(step_ws), static_cast<std::size_t>(B * 4 * T * T), s());
  for (std::int64_t r = 0; r < B * 4 * T; ++r)
    for (std::int64_t j = r % T + 1; j < T; ++j) EXPECT_EQ(att[r * T + j], 0.f);
}

// The LSTM's initial-state gradient (what the TFT's static contexts h0 / c0 train through).
TEST_F(TftTest, LstmInitialStateGradientMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t T = 4, B = 3, in = 3, H = 5;
  LstmSpec spec;
  spec.name = "lstm";
  spec.in = in;
  spec.hidden = H;
  Lstm lstm(spec);
  gpu::ParameterArena arena;
  lstm.declare(arena);
  arena.finalize(s());
  lstm.init(arena, rng(), s());
  lstm.bind(arena);
  const auto x = test::random_uniform(static_cast<std::size_t>(T * B * in), -1.f, 1.f, rng());
  const auto state0 = test::random_uniform(static_cast<std::size_t>(B * 2 * H), -1.f, 1.f, rng());
  std::vector<std::uint8_t> resets(static_cast<std::size_t>(T * B), 0);
  resets[1] = 1;  // row 1 starts from zeros: its d_state0 is 0
  const auto u = test::random_uniform(static_cast<std::size_t>(T * B * H), -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_s0 = test::upload(state0, s()), d_u = test::upload(u, s());
  auto d_resets = test::upload(resets, s());
  gpu::DeviceBuffer<float> out(u.size()), ds0(state0.size()), dx(x.size());
  gpu::DeviceBuffer<std::byte> ws_mem(lstm.sequence_workspace_bytes(T, B));
  const Workspace ws{ws_mem.data(), B, false};
  auto forward = [&] {
    lstm.forward_sequence(out.data(), nullptr, d_x.data(), d_s0.data(), d_resets.data(), T, B, ws, lane());
  };
  forward();
  test::poison(ds0, s());
  lstm.backward_sequence(dx.data(), d_u.data(), d_x.data(), d_s0.data(), d_resets.data(), T, B, ws, lane(), ds0.data());
  const auto g = test::download(ds0, s());
  auto loss = [&] { return test::weighted_sum(forward, out.data(), u, s()); };
  double rms = 0;
  for (float v : g) rms += static_cast<double>(v) * v;
  rms = std::sqrt(rms / static_cast<double>(g.size()));
  for (std::int64_t i = 0; i < B * 2 * H; ++i) {
    const double fd = test::central_difference(loss, d_s0.data(), i, 1e-2f, s());
    if (i / (2 * H) == 1) {
      EXPECT_EQ(g[i], 0.f) << "a reset row's initial state has no gradient";
    } else {
      EXPECT_TRUE(test::fd_close(fd, g[i], 2e-2, 0.05 * rms)) << "d_state0[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace foxhunt::models::tft
