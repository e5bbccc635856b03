// Causal depthwise conv1d: forward and backward (dx, dweight, dbias) against float64 on fresh
// random inputs (strided rows, with and without SiLU and bias) with NaN-poisoned outputs, the
// backward against central finite differences of the GPU forward, the step form against the
// sequence form and a float64 reference across resets, and graph replay against eager (bitwise).
#include "models/fd_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/check.hpp"
#include "gpu/graph.hpp"
#include "models/blocks/causal_conv1d.hpp"

namespace foxhunt::models {
namespace {

using U8 = std::uint8_t;

double silu(double v) { return v / (1.0 + std::exp(-v)); }
double silu_grad(double v) {
  const double s = 1.0 / (1.0 + std::exp(-v));
  return s * (1.0 + v * (1.0 - s));
}

struct Dims {
  std::int64_t B, T, C, K, xs, ys;
  bool silu, bias;
};
std::string describe(const Dims& d) {
  return "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) + " C=" + std::to_string(d.C) +
         " K=" + std::to_string(d.K) + " xs=" + std::to_string(d.xs) + " ys=" + std::to_string(d.ys) +
         " silu=" + std::to_string(d.silu) + " bias=" + std::to_string(d.bias);
}

// Pre-activations (B * T, C) in float64. start (B * T) (empty: 0): the first time step a row's
// output may read (a reset at that step forgets the inputs before it).
std::vector<double> ref_pre(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias,
                            const Dims& d, const std::vector<std::int64_t>& start = {}) {
  std::vector<double> pre(d.B * d.T * d.C);
  for (std::int64_t b = 0; b < d.B; ++b)
    for (std::int64_t t = 0; t < d.T; ++t)
      for (std::int64_t c = 0; c < d.C; ++c) {
        const std::int64_t row = b * d.T + t, first = start.empty() ? 0 : start[row];
        double acc = bias.empty() ? 0.0 : bias[c];
        for (std::int64_t k = 0; k < d.K; ++k) {
          const std::int64_t src = t - (d.K - 1) + k;
          if (src >= first && src >= 0) acc += static_cast<double>(w[c * d.K + k]) * x[(b * d.T + src) * d.xs + c];
        }
        pre[row * d.C + c] = acc;
      }
  return pre;
}

class CausalConv1dTest : public test::LaneTest {};

TEST_F(CausalConv1dTest, ForwardAndBackwardMatchFloat64) {
  SCOPED_TRACE(seed_note());
  const std::vector<Dims> cases{{1, 1, 1, 2, 1, 1, false, true},     {2, 5, 3, 4, 3, 3, true, true},
                                {3, 17, 10, 8, 13, 11, true, false}, {4, 64, 40, 3, 40, 40, false, true},
                                {2, 300, 65, 4, 70, 65, true, true}, {40, 300, 8, 4, 8, 9, true, true}};
  for (const Dims& d : cases) {
    SCOPED_TRACE(describe(d));
    const std::int64_t rows = d.B * d.T;
    const auto x = test::random_uniform(rows * d.xs, -1.f, 1.f, rng());
    const auto w = test::random_uniform(d.C * d.K, -0.5f, 0.5f, rng());
    const auto bias = d.bias ? test::random_uniform(d.C, -0.5f, 0.5f, rng()) : std::vector<float>{};
    const auto dy = test::random_uniform(rows * d.ys, -1.f, 1.f, rng());
    auto d_x = test::upload(x, s()), d_w = test::upload(w, s()), d_dy = test::upload(dy, s());
    gpu::DeviceBuffer<float> d_bias, d_y(rows * d.ys), d_dx(x.size()), d_dw(w.size()), d_db(d.C);
    if (d.bias) d_bias = test::upload(bias, s());
    const CausalConv1dShape shape{d.B, d.T, d.C, d.K, d.xs, d.ys, 0};
    gpu::DeviceBuffer<std::byte> ws(causal_conv1d_backward_workspace_bytes(shape));
    for (auto* buf : {&d_y, &d_dx, &d_dw, &d_db}) test::poison(*buf, s());
    causal_conv1d_forward(d_y.data(), d_x.data(), d_w.data(), d.bias ? d_bias.data() : nullptr, shape, d.silu, s());
    causal_conv1d_backward(d_dx.data(), d_dw.data(), d.bias ? d_db.data() : nullptr, d_dy.data(), d_x.data(),
                           d_w.data(), d.bias ? d_bias.data() : nullptr, shape, d.silu, ws.data(), s());
    const auto pre = ref_pre(x, w, bias, d);
    std::vector<double> y_ref(rows * d.C), dpre(rows * d.C), dx_ref(rows * d.C, 0), dw_ref(w.size(), 0), db_ref(d.C, 0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < d.C; ++c) {
        const double p = pre[r * d.C + c];
        y_ref[r * d.C + c] = d.silu ? silu(p) : p;
        dpre[r * d.C + c] = dy[r * d.ys + c] * (d.silu ? silu_grad(p) : 1.0);
      }
    for (std::int64_t b = 0; b < d.B; ++b)
      for (std::int64_t t = 0; t < d.T; ++t)
        for (std::int64_t c = 0; c < d.C; ++c) {
          const double g = dpre[(b * d.T + t) * d.C + c];
          db_ref[c] += g;
          for (std::int64_t k = 0; k < d.K; ++k) {
            const std::int64_t src = t - (d.K - 1) + k;
            if (src < 0) continue;
            dw_ref[c * d.K + k] += g * x[(b * d.T + src) * d.xs + c];
            dx_ref[(b * d.T + src) * d.C + c] += g * w[c * d.K + k];
          }
        }
    // Strided outputs: compare the C used columns of each row; the padding stays poisoned.
    auto cols = [&](const std::vector<float>& v, std::int64_t ld) {
      std::vector<float> o(rows * d.C);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < d.C; ++c) o[r * d.C + c] = v[r * ld + c];
      return o;
    };
    const auto y = test::download(d_y, s()), dx = test::download(d_dx, s());
    EXPECT_TRUE(test::all_close(cols(y, d.ys), y_ref, 1e-5, 1e-6)) << "y";
    EXPECT_TRUE(test::all_close(cols(dx, d.xs), dx_ref, 1e-5, 1e-6)) << "dx";
    if (d.ys > d.C) EXPECT_TRUE(std::isnan(y[d.C])) << "y padding written";
    if (d.xs > d.C) EXPECT_TRUE(std::isnan(dx[d.C])) << "dx padding written";
    EXPECT_LT(test::rel_error(test::download(d_dw, s()), dw_ref), 1e-5) << "dweight";
    if (d.bias) EXPECT_LT(test::rel_error(test::download(d_db, s()), db_ref), 1e-5) << "dbias";
  }
}

// The class's parameters (names, init bounds) and its backward against central differences.
TEST_F(CausalConv1dTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 3, T = 11, C = 5, K = 4;
  gpu::ParameterArena arena;
  CausalConv1d conv(CausalConv1dSpec{"conv", C, K, true});
  conv.declare(arena);
  arena.finalize(s());
  conv.init(arena, rng(), s());
  conv.bind(arena);
  EXPECT_EQ(arena.entry("conv.weight").shape, (gpu::Shape{C, K}));
  EXPECT_EQ(arena.entry("conv.bias").shape, (gpu::Shape{C}));
  for (float v : test::download(conv.weight(), C * K, s())) EXPECT_LE(std::abs(v), 0.5f) << "U(+-1/sqrt(K))";
  const CausalConv1dShape shape{B, T, C, K};
  const auto x = test::random_uniform(B * T * C, -1.f, 1.f, rng());
  const auto u = test::random_uniform(B * T * C, -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  gpu::DeviceBuffer<float> d_y(x.size()), d_dx(x.size());
  gpu::DeviceBuffer<std::byte> ws(causal_conv1d_backward_workspace_bytes(shape));
  auto forward = [&] { conv.forward(d_y.data(), d_x.data(), shape, true, s()); };
  forward();
  conv.backward(d_dx.data(), d_u.data(), d_x.data(), shape, true, ws.data(), s());
  const auto dw = test::download(conv.weight_grad(), C * K, s()), db = test::download(conv.bias_grad(), C, s());
  const auto dx = test::download(d_dx, s());
  auto loss = [&] { return test::weighted_sum(forward, d_y.data(), u, s()); };
  float* w = arena.params() + arena.entry("conv.weight").offset;
  float* bias = arena.params() + arena.entry("conv.bias").offset;
  for (std::int64_t i : {0L, 6L, 13L, C * K - 1}) {
    const double fd = test::central_difference(loss, w, i, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, dw[i], 1e-2, 0.05)) << "weight[" << i << "]";
  }
  for (std::int64_t i : {0L, C - 1}) {
    const double fd = test::central_difference(loss, bias, i, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, db[i], 1e-2, 0.05)) << "bias[" << i << "]";
  }
  for (std::int64_t i : {0L, 17L, 54L, B * T * C - 1}) {
    const double fd = test::central_difference(loss, d_x.data(), i, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, dx[i], 1e-2, 0.05)) << "x[" << i << "]";
  }
}

// T steps from a NaN-poisoned state with every row reset at t = 0 equal the sequence form; with
// resets of some rows at later steps they equal float64 with the inputs before a reset forgotten.
TEST_F(CausalConv1dTest, StepsEqualSequenceAndResetForgets) {
  SCOPED_TRACE(seed_note());
  const Dims d{4, 12, 7, 4, 9, 7, true, true};
  const std::int64_t S = d.C * (d.K - 1) + 2;  // state rows with 2 padding floats
  const auto x = test::random_uniform(d.B * d.T * d.xs, -1.f, 1.f, rng());
  const auto w = test::random_uniform(d.C * d.K, -0.5f, 0.5f, rng());
  const auto bias = test::random_uniform(d.C, -0.5f, 0.5f, rng());
  auto d_x = test::upload(x, s()), d_w = test::upload(w, s()), d_bias = test::upload(bias, s());
  gpu::DeviceBuffer<float> d_y(d.B * d.T * d.C), d_state(d.B * S), d_ys(d.B * d.C);
  const CausalConv1dShape seq{d.B, d.T, d.C, d.K, d.xs, 0, 0};
  causal_conv1d_forward(d_y.data(), d_x.data(), d_w.data(), d_bias.data(), seq, true, s());
  const auto y_seq = test::download(d_y, s());

  for (const bool later_resets : {false, true}) {
    SCOPED_TRACE("later_resets=" + std::to_string(later_resets));
    std::vector<U8> resets(d.B * d.T, 0);
    for (std::int64_t b = 0; b < d.B; ++b) resets[b * d.T + 0] = 1;
    if (later_resets) resets[0 * d.T + 5] = resets[2 * d.T + 1] = resets[3 * d.T + 2] = resets[3 * d.T + 3] = 1;
    test::poison(d_state, s());
    // The step reads x row (b, t): rows of the (B, T, ...) layout are T * xs apart across b.
    const CausalConv1dShape step{d.B, 1, d.C, d.K, d.T * d.xs, 0, S};
    std::vector<float> got(d.B * d.T * d.C);
    for (std::int64_t t = 0; t < d.T; ++t) {
      std::vector<U8> mask(d.B);
      for (std::int64_t b = 0; b < d.B; ++b) mask[b] = resets[b * d.T + t];
      auto d_mask = test::upload(mask, s());
      test::poison(d_ys, s());
      causal_conv1d_step(d_ys.data(), d_state.data(), d_x.data() + t * d.xs, d_w.data(), d_bias.data(), d_mask.data(),
                         step, true, s());
      const auto ys = test::download(d_ys, s());
      for (std::int64_t b = 0; b < d.B; ++b)
        for (std::int64_t c = 0; c < d.C; ++c) got[(b * d.T + t) * d.C + c] = ys[b * d.C + c];
    }
    std::vector<std::int64_t> start(d.B * d.T, 0);
    for (std::int64_t b = 0; b < d.B; ++b) {
      std::int64_t first = 0;
      for (std::int64_t t = 0; t < d.T; ++t) {
        if (resets[b * d.T + t]) first = t;
        start[b * d.T + t] = first;
      }
    }
    const auto pre = ref_pre(x, w, bias, d, start);
    std::vector<double> want(pre.size());
    for (std::size_t i = 0; i < pre.size(); ++i) want[i] = silu(pre[i]);
    EXPECT_TRUE(test::all_close(got, want, 1e-5, 1e-6)) << "steps vs float64";
    if (!later_resets)
      EXPECT_TRUE(test::all_close(got, std::vector<double>(y_seq.begin(), y_seq.end()), 1e-6, 1e-7))
          << "steps vs sequence";
  }
}

TEST_F(CausalConv1dTest, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 5, T = 40, C = 24, K = 4, S = C * (K - 1);
  const CausalConv1dShape shape{B, T, C, K};
  const auto x = test::random_uniform(B * T * C, -1.f, 1.f, rng());
  const auto w = test::random_uniform(C * K, -0.5f, 0.5f, rng());
  const auto bias = test::random_uniform(C, -0.5f, 0.5f, rng());
  const auto dy = test::random_uniform(B * T * C, -1.f, 1.f, rng());
  const auto state0 = test::random_uniform(B * S, -1.f, 1.f, rng());
  const std::vector<U8> reset{1, 0, 0, 1, 0};
  auto d_x = test::upload(x, s()), d_w = test::upload(w, s()), d_bias = test::upload(bias, s());
  auto d_dy = test::upload(dy, s());
  auto d_reset = test::upload(reset, s());
  gpu::DeviceBuffer<float> d_y(x.size()), d_dx(x.size()), d_dw(w.size()), d_db(C), d_state(B * S), d_ys(B * C);
  gpu::DeviceBuffer<std::byte> ws(causal_conv1d_backward_workspace_bytes(shape));
  const CausalConv1dShape step{B, 1, C, K, T * C, 0, 0};
  auto body = [&](cudaStream_t cs) {
    causal_conv1d_forward(d_y.data(), d_x.data(), d_w.data(), d_bias.data(), shape, true, cs);
    causal_conv1d_backward(d_dx.data(), d_dw.data(), d_db.data(), d_dy.data(), d_x.data(), d_w.data(), d_bias.data(),
                           shape, true, ws.data(), cs);
    causal_conv1d_step(d_ys.data(), d_state.data(), d_x.data(), d_w.data(), d_bias.data(), d_reset.data(), step, true,
                       cs);
  };
  std::vector<gpu::DeviceBuffer<float>*> outs{&d_y, &d_dx, &d_dw, &d_db, &d_state, &d_ys};
  test::upload_to(d_state.data(), state0, s());
  body(s());
  std::vector<std::vector<float>> eager;
  for (auto* o : outs) eager.push_back(test::download(*o, s()));
  gpu::CudaGraph graph;
  graph.capture(s(), body);
  ASSERT_TRUE(graph.captured());
  for (int r = 0; r < 2; ++r) {
    for (auto* o : outs) test::poison(*o, s());
    test::upload_to(d_state.data(), state0, s());
    graph.replay(s());
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const auto got = test::download(*outs[i], s());
      EXPECT_EQ(std::memcmp(got.data(), eager[i].data(), got.size() * sizeof(float)), 0)
          << "output " << i << " (y, dx, dw, db, state, step y), replay " << r;
    }
  }
}

}  // namespace
}  // namespace foxhunt::models
