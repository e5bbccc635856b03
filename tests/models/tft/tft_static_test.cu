// The TFT's static and known inputs (models/tft/static_encoders.hpp, models/tft/tft.hpp's input
// layout [past C | known K | static S] per step, statics read from step 0):
//   - the static covariate encoders against their float64 reference (the four contexts and the
//     static selection weights) and central finite differences (parameters and statics);
//   - the whole Tft against its float64 reference, with and without statics and known inputs (the
//     defaults included), outputs and selection weights, with NaN-poisoned outputs;
//   - the whole Tft's backward with statics and known inputs against central finite differences
//     (every parameter tensor, the past and known inputs, the statics); the ignored static columns
//     of steps >= 1 get an exactly zero gradient;
//   - causality: perturbing the past and known inputs of step t leaves every output before t
//     bitwise unchanged; the static columns of steps >= 1 change nothing; step 0's statics reach
//     every step;
//   - the step form with statics: the window's step 0 carries the latest input's statics, and each
//     step equals the training form's last position on that window;
//   - the parameter layout: statics replace the learned contexts, the defaults declare them.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gpu/arena.hpp"
#include "models/tft/static_encoders.hpp"
#include "models/tft/tft.hpp"
#include "models/tft/tft_fd.hpp"
#include "models/tft/tft_reference.hpp"

namespace foxhunt::models::tft {
namespace {

namespace ref = test::tft_ref;

class TftStaticTest : public test::LaneTest {
 protected:
  struct Model {
    explicit Model(TftSpec spec) : tft(std::move(spec)) {}
    Tft tft;
    gpu::ParameterArena arena;
  };
  std::unique_ptr<Model> make(const ref::TftDims& d) {
    TftSpec spec;
    spec.name = "tft";
    spec.in = d.C;
    spec.known = d.K;
    spec.statics = d.S;
    spec.hidden = d.H;
    spec.heads = d.heads;
    spec.sequence_length = d.T;
    auto m = std::make_unique<Model>(spec);
    m->tft.declare(m->arena);
    m->arena.finalize(s());
    m->tft.init(m->arena, rng(), s());
    m->tft.bind(m->arena);
    FH_CHECK(cudaStreamSynchronize(s()));
    return m;
  }
  static std::string describe(const ref::TftDims& d) {
    return "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) + " C=" + std::to_string(d.C) +
           " K=" + std::to_string(d.K) + " S=" + std::to_string(d.S) + " H=" + std::to_string(d.H) +
           " heads=" + std::to_string(d.heads);
  }
};

TEST_F(TftStaticTest, StaticEncodersMatchFloat64AndFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t rows = 5, S = 3, H = 4;
  StaticEncoders enc(StaticEncodersSpec{"enc", S, H});
  gpu::ParameterArena arena;
  enc.declare(arena);
  arena.finalize(s());
  enc.init(arena, rng(), s());
  enc.bind(arena);
  gpu::DeviceBuffer<std::byte> ws_mem(enc.workspace_bytes(rows));
  const Workspace ws{ws_mem.data(), rows, false};
  const auto x = test::random_uniform(static_cast<std::size_t>(rows * S), -1.f, 1.f, rng());
  auto d_x = test::upload(x, s());
  gpu::DeviceBuffer<float> y(static_cast<std::size_t>(4 * rows * H)), dx(x.size());
  test::poison(y, s());
  FH_CHECK(cudaMemsetAsync(ws_mem.data(), 0xFF, ws_mem.bytes(), s()));  // poisoned weights too
  auto forward = [&] { enc.forward(y.data(), d_x.data(), rows, ws, lane()); };
  forward();
  ref::Mat weights;
  const auto want = ref::static_encoders(arena, "enc", ref::as_double(x), rows, S, H, &weights);
  EXPECT_TRUE(test::all_close(test::download(y, s()), want, 1e-4, 1e-5));
  EXPECT_TRUE(test::all_close(test::download(enc.selection_weights(ws), weights.size(), s()), weights, 1e-4, 1e-6));

  const auto u = test::random_uniform(y.size(), -1.f, 1.f, rng());
  auto d_u = test::upload(u, s());
  test::poison(dx, s());
  FH_CHECK(cudaMemsetAsync(arena.grads(), 0xFF, static_cast<std::size_t>(arena.padded_count()) * sizeof(float), s()));
  test::check_finite_differences(
      arena, forward, [&] { enc.backward(dx.data(), d_u.data(), d_x.data(), rows, ws, lane()); }, y.data(), u,
      {{"statics", d_x.data(), dx.data(), x.size()}}, rng(), s());
}

TEST_F(TftStaticTest, MatchesFloat64) {
  SCOPED_TRACE(seed_note());
  // The defaults (past inputs only); statics and known inputs; known only; statics only.
  for (const ref::TftDims d : {ref::TftDims{2, 5, 3, 0, 0, 8, 2}, ref::TftDims{3, 4, 2, 2, 3, 8, 4},
                               ref::TftDims{2, 3, 2, 1, 0, 6, 3}, ref::TftDims{2, 4, 3, 0, 4, 4, 1}}) {
    SCOPED_TRACE(describe(d));
    auto m = make(d);
    const std::int64_t W = d.C + d.K + d.S, rows = d.B * d.T;
    ASSERT_EQ(m->tft.in_features(), W);
    OwnedWorkspace ws(m->tft, d.B);
    const auto x = test::random_normal(static_cast<std::size_t>(rows * W), 0.f, 1.f, rng());
    auto d_x = test::upload(x, s());
    gpu::DeviceBuffer<float> y(static_cast<std::size_t>(rows * d.H));
    test::poison(y, s());
    m->tft.forward(y.data(), d_x.data(), d.B, true, ws.view, lane());
    ref::Mat selection, static_selection;
    const auto want = ref::tft(m->arena, "tft", ref::as_double(x), d, &selection, &static_selection);
    // float32 through ~10 layers, five LayerNorms among them: 1e-3 relative, 1e-4 absolute is some
    // 100 x the rounding a layer shows in the pieces' tests.
    EXPECT_TRUE(test::all_close(test::download(y, s()), want, 1e-3, 1e-4));
    EXPECT_TRUE(test::all_close(test::download(m->tft.selection_weights(ws.view), selection.size(), s()), selection,
                                1e-3, 1e-5));
    if (d.S > 0)
      EXPECT_TRUE(
          test::all_close(test::download(m->tft.static_selection_weights(ws.view), static_selection.size(), s()),
                          static_selection, 1e-3, 1e-5));
  }
}

TEST_F(TftStaticTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const ref::TftDims d{2, 3, 2, 2, 3, 4, 2};
  auto m = make(d);
  const std::int64_t V = d.C + d.K, W = V + d.S, rows = d.B * d.T;
  OwnedWorkspace ws(m->tft, d.B);
  const auto x = test::random_normal(static_cast<std::size_t>(rows * W), 0.f, 1.f, rng());
  const auto u = test::random_uniform(static_cast<std::size_t>(rows * d.H), -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  gpu::DeviceBuffer<float> y(u.size()), dx(x.size());
  test::poison(dx, s());
  FH_CHECK(
      cudaMemsetAsync(m->arena.grads(), 0xFF, static_cast<std::size_t>(m->arena.padded_count()) * sizeof(float), s()));
  // The whole input, and the pieces each kind of input owns: each row's statics (step 0), the known
  // inputs of row 0's middle step, the past inputs of row 1's last step.
  std::vector<test::FdInput> inputs{{"x", d_x.data(), dx.data(), x.size()}};
  for (std::int64_t b = 0; b < d.B; ++b) {
    const std::int64_t at = b * d.T * W + V;
    inputs.push_back(
        {"statics of row " + std::to_string(b), d_x.data() + at, dx.data() + at, static_cast<std::size_t>(d.S)});
  }
  const std::int64_t known_at = 1 * W + d.C, past_at = (1 * d.T + d.T - 1) * W;
  inputs.push_back(
      {"known (row 0, step 1)", d_x.data() + known_at, dx.data() + known_at, static_cast<std::size_t>(d.K)});
  inputs.push_back(
      {"past (row 1, step T-1)", d_x.data() + past_at, dx.data() + past_at, static_cast<std::size_t>(d.C)});
  test::check_finite_differences(
      m->arena, [&] { m->tft.forward(y.data(), d_x.data(), d.B, false, ws.view, lane()); },
      [&] { m->tft.backward(dx.data(), d_u.data(), d_x.data(), d.B, ws.view, lane(), nullptr); }, y.data(), u, inputs,
      rng(), s(), 3, 5e-3f);
  // Every parameter gradient finite (the poison overwritten); the static columns of steps >= 1 are
  // not read, so their gradient is exactly 0, and step 0's is not.
  const auto g = test::download(m->arena.grads(), static_cast<std::size_t>(m->arena.padded_count()), s());
  for (const auto& e : m->arena.entries())
    for (std::int64_t i = 0; i < e.numel; ++i) ASSERT_TRUE(std::isfinite(g[e.offset + i])) << e.name << "[" << i << "]";
  const auto gx = test::download(dx, s());
  for (std::int64_t b = 0; b < d.B; ++b) {
    double step0 = 0;
    for (std::int64_t j = 0; j < d.S; ++j) step0 += std::abs(gx[b * d.T * W + V + j]);
    EXPECT_GT(step0, 0.0) << "row " << b << "'s statics get no gradient";
    for (std::int64_t t = 1; t < d.T; ++t)
      for (std::int64_t j = 0; j < d.S; ++j)
        EXPECT_EQ(gx[(b * d.T + t) * W + V + j], 0.f) << "row " << b << " step " << t << " static column " << j;
  }
}

TEST_F(TftStaticTest, NoFutureLeakWithStaticsAndKnownInputs) {
  SCOPED_TRACE(seed_note());
  const ref::TftDims d{3, 6, 2, 2, 3, 8, 2};
  auto m = make(d);
  const std::int64_t V = d.C + d.K, W = V + d.S, H = d.H, B = d.B, T = d.T;
  OwnedWorkspace ws(m->tft, B);
  auto x = test::random_normal(static_cast<std::size_t>(B * T * W), 0.f, 1.f, rng());
  auto d_x = test::upload(x, s());
  gpu::DeviceBuffer<float> y(static_cast<std::size_t>(B * T * H));
  m->tft.forward(y.data(), d_x.data(), B, true, ws.view, lane());
  const auto base = test::download(y, s());
  auto run = [&](const std::vector<float>& xp) {
    d_x.upload(std::span<const float>(xp), s());
    test::poison(y, s());
    m->tft.forward(y.data(), d_x.data(), B, true, ws.view, lane());
    return test::download(y, s());
  };
  auto changed = [&](const std::vector<float>& got, std::int64_t b, std::int64_t t) {
    double change = 0;
    for (std::int64_t k = 0; k < H; ++k) change += std::abs(got[(b * T + t) * H + k] - base[(b * T + t) * H + k]);
    return change > 1e-6;
  };
  // The past inputs alone, then the known inputs alone, of step t.
  using Columns = std::pair<std::int64_t, std::int64_t>;
  for (const auto& [lo, hi] : {Columns{0, d.C}, Columns{d.C, V}})
    for (std::int64_t t : {1, 3, 5}) {
      auto xp = x;
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t c = lo; c < hi; ++c) xp[(b * T + t) * W + c] += 0.5f;
      const auto got = run(xp);
      for (std::int64_t b = 0; b < B; ++b) {
        for (std::int64_t v = 0; v < t; ++v)
          EXPECT_EQ(0, std::memcmp(&got[(b * T + v) * H], &base[(b * T + v) * H], H * sizeof(float)))
              << "columns [" << lo << ", " << hi << ") of step " << t << " changed the output at step " << v << " (row "
              << b << ")";
        EXPECT_TRUE(changed(got, b, t)) << "the output at step " << t << " ignores columns [" << lo << ", " << hi
                                        << ") of its step (row " << b << ")";
      }
    }
  {  // The static columns of steps >= 1 are not read.
    auto xp = x;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 1; t < T; ++t)
        for (std::int64_t j = 0; j < d.S; ++j) xp[(b * T + t) * W + V + j] += 0.5f;
    const auto got = run(xp);
    EXPECT_EQ(0, std::memcmp(got.data(), base.data(), got.size() * sizeof(float)));
  }
  {  // Step 0's statics reach every step, and only their own row.
    auto xp = x;
    for (std::int64_t j = 0; j < d.S; ++j) xp[V + j] += 0.5f;  // row 0
    const auto got = run(xp);
    for (std::int64_t t = 0; t < T; ++t) EXPECT_TRUE(changed(got, 0, t)) << "row 0's statics miss step " << t;
    EXPECT_EQ(0, std::memcmp(&got[T * H], &base[T * H], (B - 1) * T * H * sizeof(float)))
        << "row 0's statics changed another row";
  }
}

TEST_F(TftStaticTest, StepFormCarriesTheLatestStatics) {
  SCOPED_TRACE(seed_note());
  const ref::TftDims d{3, 4, 2, 1, 2, 8, 2};
  const std::int64_t B = d.B, T = d.T, V = d.C + d.K, W = V + d.S, H = d.H, steps = T + 3, reset_at = T;
  auto m = make(d);
  ASSERT_EQ(m->tft.state_features(), T * W);
  OwnedWorkspace ws(m->tft, B);
  gpu::DeviceBuffer<std::byte> step_mem(m->tft.step_workspace_bytes(B));
  const Workspace step_ws{step_mem.data(), B, false};
  // (steps, B, W): every step's input carries statics (random here, so the test sees which are used).
  const auto inputs = test::random_normal(static_cast<std::size_t>(steps * B * W), 0.f, 1.f, rng());
  gpu::DeviceBuffer<float> state(static_cast<std::size_t>(B * m->tft.state_features()));
  gpu::DeviceBuffer<float> in(static_cast<std::size_t>(B * W)), out(static_cast<std::size_t>(B * H));
  gpu::DeviceBuffer<float> window(static_cast<std::size_t>(B * T * W)), y(static_cast<std::size_t>(B * T * H));
  gpu::DeviceBuffer<std::uint8_t> reset(static_cast<std::size_t>(B));
  test::poison(state, s());
  std::vector<std::int64_t> since(B, 0);
  for (std::int64_t k = 0; k < steps; ++k) {
    std::vector<std::uint8_t> r(B, 0);
    if (k == 0) r.assign(B, 1);
    if (k == reset_at) r[1] = 1;
    for (std::int64_t b = 0; b < B; ++b) since[b] = r[b] ? 1 : since[b] + 1;
    reset.upload(std::span<const std::uint8_t>(r), s());
    in.upload(std::span<const float>(inputs.data() + k * B * W, static_cast<std::size_t>(B * W)), s());
    test::poison(out, s());
    m->tft.step(out.data(), state.data(), in.data(), reset.data(), B, step_ws, lane());
    const auto got = test::download(out, s());
    // Each row's window: its last min(since, T) inputs, zeros before; step 0's static columns hold
    // this step's statics.
    std::vector<float> w(static_cast<std::size_t>(B * T * W), 0.f);
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t t = 0; t < T; ++t) {
        if (T - 1 - t >= since[b]) continue;
        const std::int64_t src = k - (T - 1 - t);
        for (std::int64_t c = 0; c < W; ++c) w[(b * T + t) * W + c] = inputs[(src * B + b) * W + c];
      }
      for (std::int64_t j = 0; j < d.S; ++j) w[b * T * W + V + j] = inputs[(k * B + b) * W + V + j];
    }
    EXPECT_TRUE(test::all_close(test::download(state, s()), std::vector<double>(w.begin(), w.end()), 0, 0))
        << "step " << k;
    window.upload(std::span<const float>(w), s());
    m->tft.forward(y.data(), window.data(), B, true, ws.view, lane());
    const auto full = test::download(y, s());
    std::vector<double> want(static_cast<std::size_t>(B * H));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t j = 0; j < H; ++j) want[b * H + j] = full[(b * T + T - 1) * H + j];
    EXPECT_TRUE(test::all_close(got, want, 1e-6, 1e-7)) << "step " << k;
  }
}

TEST_F(TftStaticTest, StaticsReplaceTheLearnedContexts) {
  SCOPED_TRACE(seed_note());
  auto has = [](const gpu::ParameterArena& a, const std::string& prefix) {
    for (const auto& e : a.entries())
      if (e.name.rfind(prefix, 0) == 0) return true;
    return false;
  };
  const auto plain = make(ref::TftDims{1, 2, 2, 0, 0, 4, 1});
  EXPECT_TRUE(has(plain->arena, "tft.static_contexts"));
  EXPECT_FALSE(has(plain->arena, "tft.static."));
  EXPECT_EQ(plain->arena.entries().front().name, "tft.static_contexts");
  const auto with = make(ref::TftDims{1, 2, 2, 1, 2, 4, 1});
  EXPECT_FALSE(has(with->arena, "tft.static_contexts"));
  for (const char* k : {"selection", "context_selection", "context_h", "context_c", "context_enrichment"})
    EXPECT_TRUE(has(with->arena, std::string("tft.static.") + k + ".")) << k;
  EXPECT_EQ(with->arena.entry("tft.selection.embed.weight").numel, 3 * 4);  // C + K variables
}

}  // namespace
}  // namespace foxhunt::models::tft
