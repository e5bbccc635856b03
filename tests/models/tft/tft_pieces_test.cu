// The TFT's pieces (models/tft/): GLU, GateAddNorm, the gated residual network (with and without a
// context, with and without the skip projection, the context per group and per batch), the
// variable selection network and the interpretable multi-head attention. Each forward against its
// float64 reference (tft_reference.hpp) on fresh random inputs with NaN-poisoned outputs, each
// backward (parameters, inputs and contexts) against central finite differences of the GPU
// forward. The attention weights: causal (zero above the diagonal), rows summing to 1, equal to the
// reference's; the selection weights equal the reference's.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "models/tft/attention.hpp"
#include "models/tft/glu.hpp"
#include "models/tft/grn.hpp"
#include "models/tft/variable_selection.hpp"
#include "models/tft/tft_fd.hpp"
#include "models/tft/tft_reference.hpp"

namespace foxhunt::models::tft {
namespace {

namespace ref = test::tft_ref;

class TftPiecesTest : public test::LaneTest {
 protected:
  // Declares, finalizes, initialises and binds any piece with declare / init / bind.
  template <class Piece>
  void setup(Piece& piece, gpu::ParameterArena& arena) {
    piece.declare(arena);
    arena.finalize(s());
    piece.init(arena, rng(), s());
    piece.bind(arena);
    FH_CHECK(cudaStreamSynchronize(s()));
  }
  std::vector<float> uniform(std::int64_t n, float lo = -1.f, float hi = 1.f) {
    return test::random_uniform(static_cast<std::size_t>(n), lo, hi, rng());
  }
};

TEST_F(TftPiecesTest, GluMatchesFloat64AndFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t rows = 7, in = 5, out = 3;
  Glu glu(GluSpec{"g", in, out});
  gpu::ParameterArena arena;
  setup(glu, arena);
  OwnedWorkspace ws(glu, rows);
  const auto x = uniform(rows * in);
  auto d_x = test::upload(x, s());
  gpu::DeviceBuffer<float> y(static_cast<std::size_t>(rows * out)), dx(x.size());
  test::poison(y, s());
  glu.forward(y.data(), d_x.data(), rows, false, ws.view, lane());
  const auto want = ref::glu(arena, "g", ref::as_double(x), rows, in, out);
  EXPECT_TRUE(test::all_close(test::download(y, s()), want, 1e-5, 1e-6));

  const auto u = uniform(rows * out);
  auto d_u = test::upload(u, s());
  test::check_finite_differences(
      arena, [&] { glu.forward(y.data(), d_x.data(), rows, false, ws.view, lane()); },
      [&] { glu.backward(dx.data(), d_u.data(), d_x.data(), rows, ws.view, lane(), nullptr); }, y.data(), u,
      {{"x", d_x.data(), dx.data(), x.size()}}, rng(), s());
}

TEST_F(TftPiecesTest, GateAddNormMatchesFloat64AndFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t rows = 6, in = 4, out = 5;
  GateAddNorm gan(GluSpec{"gan", in, out});
  gpu::ParameterArena arena;
  setup(gan, arena);
  gpu::DeviceBuffer<std::byte> ws_mem(gan.workspace_bytes(rows));
  const Workspace ws{ws_mem.data(), rows, false};
  const auto x = uniform(rows * in), skip = uniform(rows * out);
  auto d_x = test::upload(x, s()), d_skip = test::upload(skip, s());
  gpu::DeviceBuffer<float> y(skip.size()), dx(x.size()), dskip(skip.size());
  test::poison(y, s());
  gan.forward(y.data(), d_x.data(), d_skip.data(), rows, ws, lane());
  const auto want = ref::gate_add_norm(arena, "gan", ref::as_double(x), ref::as_double(skip), rows, in, out);
  EXPECT_TRUE(test::all_close(test::download(y, s()), want, 1e-4, 1e-5));

  const auto u = uniform(rows * out);
  auto d_u = test::upload(u, s());
  test::poison(dskip, s());
  test::check_finite_differences(
      arena, [&] { gan.forward(y.data(), d_x.data(), d_skip.data(), rows, ws, lane()); },
      [&] { gan.backward(dx.data(), dskip.data(), d_u.data(), d_x.data(), rows, ws, lane()); }, y.data(), u,
      {{"x", d_x.data(), dx.data(), x.size()}, {"skip", d_skip.data(), dskip.data(), skip.size()}}, rng(), s());
}

struct GrnCase {
  std::int64_t rows, rep, in, hidden, out, context;
};

TEST_F(TftPiecesTest, GrnMatchesFloat64AndFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  // Context per group of 3 rows with a skip projection; no context, in == out; one context row for
  // the whole batch (the TFT's static contexts); context with in == out.
  for (const GrnCase c : {GrnCase{6, 3, 5, 6, 4, 3}, GrnCase{5, 1, 4, 5, 4, 0}, GrnCase{8, 8, 4, 3, 4, 2},
                          GrnCase{4, 2, 3, 4, 3, 5}}) {
    SCOPED_TRACE("rows=" + std::to_string(c.rows) + " rep=" + std::to_string(c.rep) + " in=" + std::to_string(c.in) +
                 " hidden=" + std::to_string(c.hidden) + " out=" + std::to_string(c.out) +
                 " context=" + std::to_string(c.context));
    Grn grn(GrnSpec{"grn", c.in, c.hidden, c.out, c.context});
    gpu::ParameterArena arena;
    setup(grn, arena);
    OwnedWorkspace ws(grn, c.rows);
    const std::int64_t groups = c.rows / c.rep;
    const auto a = uniform(c.rows * c.in);
    const auto ctx = c.context > 0 ? uniform(groups * c.context) : std::vector<float>{};
    auto d_a = test::upload(a, s());
    gpu::DeviceBuffer<float> d_ctx(ctx.size()), y(static_cast<std::size_t>(c.rows * c.out)), da(a.size()),
        dctx(ctx.size());
    if (!ctx.empty()) d_ctx.upload(std::span<const float>(ctx), s());
    test::poison(y, s());
    auto forward = [&] { grn.forward_context(y.data(), d_a.data(), d_ctx.data(), c.rows, c.rep, ws.view, lane()); };
    forward();
    const auto want =
        ref::grn(arena, "grn", ref::as_double(a), ref::as_double(ctx), c.rows, c.rep, c.in, c.hidden, c.out, c.context);
    EXPECT_TRUE(test::all_close(test::download(y, s()), want, 1e-4, 1e-5));

    const auto u = uniform(c.rows * c.out);
    auto d_u = test::upload(u, s());
    std::vector<test::FdInput> inputs{{"a", d_a.data(), da.data(), a.size()}};
    if (c.context > 0) inputs.push_back({"ctx", d_ctx.data(), dctx.data(), ctx.size()});
    test::check_finite_differences(
        arena, forward,
        [&] {
          grn.backward_context(da.data(), c.context > 0 ? dctx.data() : nullptr, d_u.data(), d_a.data(), d_ctx.data(),
                               c.rows, c.rep, ws.view, lane());
        },
        y.data(), u, inputs, rng(), s());
  }
}

TEST_F(TftPiecesTest, VariableSelectionMatchesFloat64AndFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  struct Case {
    std::int64_t rows, rep, V, hidden, context;
  };
  // Context per group of 3 rows; no context with one and with two variables; one context row for the
  // whole batch. The cases with a context have V >= 3: the weights GRN ends in a LayerNorm over its
  // V logits, which for V = 2 maps every input to (+-1) gamma + beta up to the LayerNorm's eps, so
  // d_ctx is truly ~1e-8 (float64 differences agree) and float32 finite differences only see noise.
  for (const Case c : {Case{6, 3, 3, 4, 5}, Case{5, 1, 1, 4, 0}, Case{4, 1, 2, 3, 0}, Case{4, 4, 3, 3, 3}}) {
    SCOPED_TRACE("rows=" + std::to_string(c.rows) + " rep=" + std::to_string(c.rep) + " V=" + std::to_string(c.V) +
                 " hidden=" + std::to_string(c.hidden) + " context=" + std::to_string(c.context));
    VariableSelection vsn(VariableSelectionSpec{"vsn", c.V, c.hidden, c.context});
    gpu::ParameterArena arena;
    setup(vsn, arena);
    OwnedWorkspace ws(vsn, c.rows);
    const auto x = uniform(c.rows * c.V);
    const auto ctx = c.context > 0 ? uniform(c.rows / c.rep * c.context) : std::vector<float>{};
    auto d_x = test::upload(x, s());
    gpu::DeviceBuffer<float> d_ctx(ctx.size()), y(static_cast<std::size_t>(c.rows * c.hidden)), dx(x.size()),
        dctx(ctx.size());
    if (!ctx.empty()) d_ctx.upload(std::span<const float>(ctx), s());
    test::poison(y, s());
    auto forward = [&] { vsn.forward_context(y.data(), d_x.data(), d_ctx.data(), c.rows, c.rep, ws.view, lane()); };
    forward();
    ref::Mat weights;
    const auto want = ref::variable_selection(arena, "vsn", ref::as_double(x), ref::as_double(ctx), c.rows, c.rep,
                                              c.V, c.hidden, c.context, &weights);
    EXPECT_TRUE(test::all_close(test::download(y, s()), want, 1e-4, 1e-5));
    EXPECT_TRUE(test::all_close(test::download(vsn.selection_weights(ws.view), weights.size(), s()), weights, 1e-4,
                                1e-6));

    const auto u = uniform(c.rows * c.hidden);
    auto d_u = test::upload(u, s());
    std::vector<test::FdInput> inputs{{"x", d_x.data(), dx.data(), x.size()}};
    if (c.context > 0) inputs.push_back({"ctx", d_ctx.data(), dctx.data(), ctx.size()});
    test::check_finite_differences(
        arena, forward,
        [&] {
          vsn.backward_context(dx.data(), c.context > 0 ? dctx.data() : nullptr, d_u.data(), d_x.data(), d_ctx.data(),
                               c.rows, c.rep, ws.view, lane());
        },
        y.data(), u, inputs, rng(), s());
  }
}

TEST_F(TftPiecesTest, InterpretableAttentionMatchesFloat64AndFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  struct Case {
    std::int64_t B, T, hidden, heads;
  };
  for (const Case c : {Case{2, 5, 6, 2}, Case{3, 4, 6, 3}, Case{1, 7, 4, 1}}) {
    SCOPED_TRACE("B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " hidden=" + std::to_string(c.hidden) +
                 " heads=" + std::to_string(c.heads));
    InterpretableAttention attn(AttentionSpec{"attn", c.hidden, c.heads, c.T});
    gpu::ParameterArena arena;
    setup(attn, arena);
    OwnedWorkspace ws(attn, c.B);
    const std::int64_t rows = c.B * c.T;
    const auto x = uniform(rows * c.hidden);
    auto d_x = test::upload(x, s());
    gpu::DeviceBuffer<float> y(x.size()), dx(x.size());
    test::poison(y, s());
    FH_CHECK(cudaMemsetAsync(ws.storage.data(), 0xFF, ws.storage.bytes(), s()));  // poisoned weights too
    auto forward = [&] { attn.forward(y.data(), d_x.data(), c.B, false, ws.view, lane()); };
    forward();
    ref::Mat probs;
    const auto want = ref::attention(arena, "attn", ref::as_double(x), c.B, c.T, c.hidden, c.heads, &probs);
    EXPECT_TRUE(test::all_close(test::download(y, s()), want, 1e-4, 1e-5));
    const auto p = test::download(attn.attention_weights(ws.view), probs.size(), s());
    EXPECT_TRUE(test::all_close(p, probs, 1e-5, 1e-6));
    for (std::int64_t r = 0; r < c.B * c.heads * c.T; ++r) {
      const std::int64_t i = r % c.T;
      double sum = 0;
      for (std::int64_t j = 0; j < c.T; ++j) {
        sum += p[r * c.T + j];
        if (j > i) EXPECT_EQ(p[r * c.T + j], 0.f) << "row " << r << " attends to the future " << j;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
    }

    const auto u = uniform(rows * c.hidden);
    auto d_u = test::upload(u, s());
    test::check_finite_differences(
        arena, forward, [&] { attn.backward(dx.data(), d_u.data(), d_x.data(), c.B, ws.view, lane(), nullptr); },
        y.data(), u, {{"x", d_x.data(), dx.data(), x.size()}}, rng(), s());
  }
}

}  // namespace
}  // namespace foxhunt::models::tft
