// KanWindow (the pretrain family `kan`): the training form over (B, T, C) against a float64 KAN
// layer on the zero-padded causal windows, its input gradient against the float64 backward summed
// over the windows, the per-step form against the training form (and a reset against a fresh
// sequence), and the factory's model from [model] keys.
#include "models/fd_support.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/check.hpp"
#include "models/kan/kan_reference.hpp"
#include "models/kan/kan_window.hpp"
#include "pretrain/model_factory.hpp"

namespace foxhunt::models {
namespace {

std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

class KanWindowTest : public test::LaneTest {
 protected:
  static KanWindowSpec spec_of(std::int64_t C, std::int64_t lags, std::int64_t T, std::int64_t out) {
    KanWindowSpec s;
    s.in = C;
    s.lags = lags;
    s.sequence_length = T;
    s.network.name = "model.kan";
    s.network.widths = {lags * C, out};
    s.network.layer.grid = 5;
    s.network.layer.order = 3;
    s.network.layer.grid_min = -2.f;
    s.network.layer.grid_max = 2.f;
    return s;
  }
  test::RefKan ref_of(gpu::ParameterArena& arena, KanWindow& m) {
    const KanLayer& L = m.network().layer(0);
    test::RefKan r;
    r.in = static_cast<int>(L.spec().in);
    r.out = static_cast<int>(L.spec().out);
    r.G = static_cast<int>(L.spec().grid);
    r.k = static_cast<int>(L.spec().order);
    auto dl = [&](const std::string& n) {
      const auto& e = arena.entry(L.param_name(n));
      return as_double(test::download(arena.param(e.name).as<float>(), static_cast<std::size_t>(e.numel), s()));
    };
    r.w = dl("base_weight");
    r.c = dl("spline_weight");
    const auto& ge = arena.state_entry(L.param_name("grid"));
    r.grid = as_double(test::download(arena.state(ge.name).as<float>(), static_cast<std::size_t>(ge.numel), s()));
    return r;
  }
};

// The windows of x (B, T, C) as (B T, lags C) rows, zeros before the start.
std::vector<double> windows(const std::vector<float>& x, int B, int T, int C, int lags) {
  std::vector<double> w(static_cast<std::size_t>(B) * T * lags * C, 0.0);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int l = 0; l < lags; ++l) {
        const int src = t - lags + 1 + l;
        if (src < 0) continue;
        for (int c = 0; c < C; ++c)
          w[((static_cast<std::size_t>(b) * T + t) * lags + l) * C + c] = x[(static_cast<std::size_t>(b) * T + src) * C + c];
      }
  return w;
}

TEST_F(KanWindowTest, TrainingFormMatchesFloat64OnCausalWindows) {
  SCOPED_TRACE(seed_note());
  struct Shape {
    int C, lags, T, out, B;
  };
  for (const Shape sh : {Shape{1, 8, 20, 6, 5}, Shape{3, 4, 9, 17, 3}, Shape{2, 12, 7, 5, 4}, Shape{1, 1, 5, 3, 2}}) {
    SCOPED_TRACE("C=" + std::to_string(sh.C) + " lags=" + std::to_string(sh.lags) + " T=" + std::to_string(sh.T));
    gpu::ParameterArena arena;
    KanWindow m(spec_of(sh.C, sh.lags, sh.T, sh.out));
    m.declare(arena);
    arena.finalize(s());
    m.init(arena, rng(), s());
    m.bind(arena);
    const test::RefKan r = ref_of(arena, m);
    const auto x = test::random_normal(static_cast<std::size_t>(sh.B) * sh.T * sh.C, 0.f, 1.2f, rng());
    const auto dy = test::random_normal(static_cast<std::size_t>(sh.B) * sh.T * sh.out, 0.f, 1.f, rng());
    const auto xd = test::upload(x, s());
    const auto dyd = test::upload(dy, s());
    gpu::DeviceBuffer<float> y(dy.size()), dx(x.size());
    OwnedWorkspace ws(m, sh.B + 1);
    test::poison(y, s());
    test::poison(dx, s());
    m.forward(y.data(), xd.data(), sh.B, false, ws.view, lane());
    m.backward(dx.data(), dyd.data(), xd.data(), sh.B, ws.view, lane(), nullptr);
    const int rows = sh.B * sh.T;
    const auto win = windows(x, sh.B, sh.T, sh.C, sh.lags);
    EXPECT_TRUE(test::all_close(test::download(y, s()), r.forward(win, rows), 1e-4, 1e-4));
    std::vector<double> dwin, dw, dc;
    r.backward(win, as_double(dy), rows, dwin, dw, dc);
    std::vector<double> dxr(x.size(), 0.0);
    for (int b = 0; b < sh.B; ++b)
      for (int t = 0; t < sh.T; ++t)
        for (int l = 0; l < sh.lags; ++l) {
          const int src = t - sh.lags + 1 + l;
          if (src < 0) continue;
          for (int c = 0; c < sh.C; ++c)
            dxr[(static_cast<std::size_t>(b) * sh.T + src) * sh.C + c] +=
                dwin[((static_cast<std::size_t>(b) * sh.T + t) * sh.lags + l) * sh.C + c];
        }
    EXPECT_TRUE(test::all_close(test::download(dx, s()), dxr, 1e-3, 1e-3));
    const KanLayer& L = m.network().layer(0);
    const auto& ce = arena.entry(L.param_name("spline_weight"));
    EXPECT_TRUE(test::all_close(test::download(arena.grad(ce.name).as<float>(), static_cast<std::size_t>(ce.numel), s()),
                                dc, 1e-4, 1e-4));
  }
}

TEST_F(KanWindowTest, StepsMatchTheSequenceAndResetStartsAfresh) {
  SCOPED_TRACE(seed_note());
  const int C = 2, lags = 5, T = 11, out = 4, B = 3;
  gpu::ParameterArena arena;
  KanWindow m(spec_of(C, lags, T, out));
  m.declare(arena);
  arena.finalize(s());
  m.init(arena, rng(), s());
  m.bind(arena);
  const auto x = test::random_normal(static_cast<std::size_t>(B) * T * C, 0.f, 1.f, rng());
  const auto xd = test::upload(x, s());
  gpu::DeviceBuffer<float> y(static_cast<std::size_t>(B) * T * out);
  OwnedWorkspace ws(m, B);
  m.forward(y.data(), xd.data(), B, true, ws.view, lane());
  const auto ys = test::download(y, s());

  gpu::DeviceBuffer<std::byte> step_mem(m.step_workspace_bytes(B));
  const Workspace sws{step_mem.data(), B, false};
  gpu::DeviceBuffer<float> state(static_cast<std::size_t>(B * m.state_features())), in(static_cast<std::size_t>(B * C)),
      o(static_cast<std::size_t>(B * out));
  test::poison(state, s());  // a reset at the first step must clear it
  std::vector<std::uint8_t> reset(static_cast<std::size_t>(B), 1);
  auto resetd = test::upload(reset, s());
  const auto zeros = test::upload(std::vector<std::uint8_t>(static_cast<std::size_t>(B), 0), s());
  for (int t = 0; t < T; ++t) {
    std::vector<float> xt(static_cast<std::size_t>(B * C));
    for (int b = 0; b < B; ++b)
      for (int c = 0; c < C; ++c) xt[static_cast<std::size_t>(b * C + c)] = x[(static_cast<std::size_t>(b) * T + t) * C + c];
    test::upload_to(in.data(), xt, s());
    test::poison(o, s());
    m.step(o.data(), state.data(), in.data(), t == 0 ? resetd.data() : zeros.data(), B, sws, lane());
    const auto og = test::download(o, s());
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < out; ++k)
        EXPECT_NEAR(og[static_cast<std::size_t>(b * out + k)], ys[(static_cast<std::size_t>(b) * T + t) * out + k], 1e-5)
            << "b " << b << " t " << t;
  }
  // A reset mid-stream equals the first step of a fresh sequence.
  std::vector<float> x0(static_cast<std::size_t>(B * C));
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < C; ++c) x0[static_cast<std::size_t>(b * C + c)] = x[static_cast<std::size_t>(b) * T * C + c];
  test::upload_to(in.data(), x0, s());
  m.step(o.data(), state.data(), in.data(), resetd.data(), B, sws, lane());
  const auto og = test::download(o, s());
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < out; ++k)
      EXPECT_NEAR(og[static_cast<std::size_t>(b * out + k)], ys[static_cast<std::size_t>(b) * T * out + k], 1e-5);
}

TEST_F(KanWindowTest, FactoryBuildsTheFamilyFromItsKeys) {
  pretrain::ModelSpec spec;
  spec.kind = "kan";
  spec.in = 2;
  spec.hidden = 8;
  spec.layers = 2;
  spec.sequence_length = 16;
  spec.family.integers = {{"grid", 6}, {"order", 2}, {"lags", 4}};
  spec.family.numbers = {{"grid_min", -3.0}, {"grid_max", 3.0}};
  auto model = pretrain::make_model(spec);
  EXPECT_EQ(model->in_features(), 2);
  EXPECT_EQ(model->out_features(), 8);
  EXPECT_EQ(model->state_features(), 3 * 2);
  gpu::ParameterArena arena;
  model->declare(arena);
  EXPECT_EQ(arena.entry("model.kan.layers.0.spline_weight").shape.str(), gpu::Shape({8, 8, 8}).str());
  EXPECT_EQ(arena.entry("model.kan.layers.1.base_weight").shape.str(), gpu::Shape({8, 8}).str());
  EXPECT_EQ(arena.state_entry("model.kan.layers.0.grid").numel, 8 * (6 + 2 * 2 + 1));
}

}  // namespace
}  // namespace foxhunt::models
