// TftInterpretation (pretrain/tft_interpretation.hpp): the means it publishes equal a float64 CPU
// average of the weights the forwards left in the workspace (read back here, test-only), over two
// batches of different sizes on fresh random inputs; each head's attention of the last step and
// each step's selection weights sum to 1; reset starts a new average.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/arena.hpp"
#include "models/fd_support.hpp"
#include "models/tft/tft.hpp"
#include "pretrain/tft_interpretation.hpp"

namespace foxhunt::pretrain {
namespace {

class TftInterpretationTest : public test::LaneTest {};

TEST_F(TftInterpretationTest, MeansEqualTheCpuAverageOfTheWorkspaceWeights) {
  SCOPED_TRACE(seed_note());
  const std::int64_t C = 3, hidden = 8, heads = 2, T = 5, B = 7;
  models::tft::TftSpec spec;
  spec.name = "tft";
  spec.in = C;
  spec.hidden = hidden;
  spec.heads = heads;
  spec.sequence_length = T;
  models::tft::Tft tft(spec);
  gpu::ParameterArena arena;
  tft.declare(arena);
  arena.finalize(s());
  tft.init(arena, rng(), s());
  tft.bind(arena);
  models::OwnedWorkspace ws(tft, B);
  gpu::DeviceBuffer<float> y(static_cast<std::size_t>(B * T * hidden));

  TftInterpretation interp(tft);
  std::vector<double> attention(static_cast<std::size_t>(heads * T), 0.0),
      selection(static_cast<std::size_t>(T * C), 0.0);
  std::int64_t windows = 0;
  interp.reset(s());
  for (const std::int64_t n : {B, std::int64_t{4}}) {
    const auto x = test::upload(test::random_normal(static_cast<std::size_t>(n * T * C), 0.f, 1.f, rng()), s());
    tft.forward(y.data(), x.data(), n, true, ws.view, lane());
    interp.accumulate(ws.view, n, s());
    const auto a = test::download(tft.attention_weights(ws.view), static_cast<std::size_t>(n * heads * T * T), s());
    const auto v = test::download(tft.selection_weights(ws.view), static_cast<std::size_t>(n * T * C), s());
    for (std::int64_t b = 0; b < n; ++b) {
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t k = 0; k < T; ++k) attention[h * T + k] += a[((b * heads + h) * T + T - 1) * T + k];
      for (std::int64_t i = 0; i < T * C; ++i) selection[i] += v[b * T * C + i];
    }
    windows += n;
  }
  interp.publish(s());
  const TftWeights w = interp.wait();
  ASSERT_EQ(w.heads, heads);
  ASSERT_EQ(w.steps, T);
  ASSERT_EQ(w.variables, C);
  ASSERT_EQ(w.windows, windows);
  ASSERT_EQ(w.attention.size(), attention.size());
  ASSERT_EQ(w.selection.size(), selection.size());
  for (std::size_t i = 0; i < attention.size(); ++i)
    EXPECT_NEAR(w.attention[i], attention[i] / static_cast<double>(windows), 1e-12) << "attention " << i;
  for (std::size_t i = 0; i < selection.size(); ++i)
    EXPECT_NEAR(w.selection[i], selection[i] / static_cast<double>(windows), 1e-12) << "selection " << i;
  for (std::int64_t h = 0; h < heads; ++h) {
    double sum = 0;
    for (std::int64_t k = 0; k < T; ++k) sum += w.attention[h * T + k];
    EXPECT_NEAR(sum, 1.0, 1e-5) << "head " << h;
  }
  for (std::int64_t t = 0; t < T; ++t) {
    double sum = 0;
    for (std::int64_t c = 0; c < C; ++c) sum += w.selection[t * C + c];
    EXPECT_NEAR(sum, 1.0, 1e-5) << "step " << t;
  }

  // A new average after reset: one batch, its own mean.
  interp.reset(s());
  const auto x = test::upload(test::random_normal(static_cast<std::size_t>(2 * T * C), 0.f, 1.f, rng()), s());
  tft.forward(y.data(), x.data(), 2, true, ws.view, lane());
  interp.accumulate(ws.view, 2, s());
  const auto v = test::download(tft.selection_weights(ws.view), static_cast<std::size_t>(2 * T * C), s());
  interp.publish(s());
  const TftWeights again = interp.wait();
  EXPECT_EQ(again.windows, 2);
  for (std::int64_t i = 0; i < T * C; ++i)
    EXPECT_NEAR(again.selection[i], (static_cast<double>(v[i]) + v[T * C + i]) / 2.0, 1e-12) << "selection " << i;
}

}  // namespace
}  // namespace foxhunt::pretrain
