// Xlstm (the stack of mLSTM and sLSTM blocks): the backward of every parameter tensor and of the
// input against central finite differences of the GPU forward; the per-step form (from a poisoned
// state reset at the first step) against the training form, and a reset of some rows mid-sequence
// against a fresh sequence; CUDA-graph replay of forward + backward and of a step == eager.
#include "models/fd_support.hpp"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/graph.hpp"
#include "models/xlstm/xlstm.hpp"
#include "models/xlstm/xlstm_test_support.hpp"

namespace foxhunt::models {
namespace {

using test::xlstm::as_double;
using test::xlstm::slice_time;

class XlstmTest : public test::LaneTest {
 protected:
  struct Model {
    explicit Model(XlstmSpec spec) : net(std::move(spec)) {}
    gpu::ParameterArena arena;
    Xlstm net;
  };
  std::unique_ptr<Model> make(const XlstmSpec& spec) {
    auto m = std::make_unique<Model>(spec);
    m->net.declare(m->arena);
    m->arena.finalize(s());
    m->net.init(m->arena, rng(), s());
    m->net.bind(m->arena);
    return m;
  }
  // The padded gradient array (index with an entry's offset).
  std::vector<float> grads(const Model& m) {
    return test::download(m.arena.grads(), static_cast<std::size_t>(m.arena.padded_count()), s());
  }
  // Every parameter gradient, concatenated in declaration order (no arena padding).
  std::vector<float> all_grads(const Model& m) {
    const auto g = grads(m);
    std::vector<float> v;
    for (const auto& e : m.arena.entries()) v.insert(v.end(), g.begin() + e.offset, g.begin() + e.offset + e.numel);
    return v;
  }
  void poison_grads(Model& m) {
    FH_CHECK(cudaMemsetAsync(m.arena.grads(), 0xFF, static_cast<std::size_t>(m.arena.padded_count()) * sizeof(float),
                             s()));
  }
  // Outputs of T steps (B, T, d_model), from a NaN-poisoned state that the first step resets;
  // reset_t0 (B) (may be empty) is the mask of step t0.
  std::vector<float> run_steps(Xlstm& net, const std::vector<float>& x, std::int64_t B, std::int64_t T,
                               std::int64_t t0, const std::vector<std::uint8_t>& reset_t0) {
    const std::int64_t C = net.in_features(), d = net.out_features();
    gpu::DeviceBuffer<float> state(static_cast<std::size_t>(B * net.state_features())),
        xs(static_cast<std::size_t>(B * C)), ys(static_cast<std::size_t>(B * d));
    gpu::DeviceBuffer<std::byte> ws_mem(net.step_workspace_bytes(B));
    const Workspace ws{ws_mem.data(), B, false};
    test::poison(state, s());
    std::vector<std::uint8_t> all(static_cast<std::size_t>(B), 1);
    auto d_all = test::upload(all, s());
    gpu::DeviceBuffer<std::uint8_t> d_t0;
    if (!reset_t0.empty()) d_t0 = test::upload(reset_t0, s());
    std::vector<float> out(static_cast<std::size_t>(B * T * d));
    for (std::int64_t t = 0; t < T; ++t) {
      test::upload_to(xs.data(), test::xlstm::at_time(x, B, T, C, t), s());
      test::poison(ys, s());
      const std::uint8_t* reset = t == 0 ? d_all.data() : (t == t0 && !reset_t0.empty() ? d_t0.data() : nullptr);
      net.step(ys.data(), state.data(), xs.data(), reset, B, ws, lane());
      const auto y = test::download(ys, s());
      for (std::int64_t b = 0; b < B; ++b)
        std::copy(y.begin() + b * d, y.begin() + (b + 1) * d, out.begin() + (b * T + t) * d);
    }
    return out;
  }
};

XlstmSpec small_spec(std::int64_t T) {
  XlstmSpec spec;
  spec.name = "xlstm";
  spec.in = 3;
  spec.d_model = 8;
  spec.heads = 2;
  spec.blocks = "ms";
  spec.chunk = 4;
  spec.sequence_length = T;
  return spec;
}

// Every parameter tensor (two random elements each) and the input against central differences
// of L = sum(u * out); the gradients are poisoned before the backward, which must overwrite them.
TEST_F(XlstmTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 2, T = 7;
  auto m = make(small_spec(T));
  const std::int64_t C = m->net.in_features(), d = m->net.out_features();
  const auto x = test::random_uniform(static_cast<std::size_t>(B * T * C), -1.f, 1.f, rng());
  const auto u = test::random_uniform(static_cast<std::size_t>(B * T * d), -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  gpu::DeviceBuffer<float> out(u.size()), d_in(x.size());
  const OwnedWorkspace work(m->net, B);
  auto forward = [&] { m->net.forward(out.data(), d_x.data(), B, false, work.view, lane()); };
  forward();
  poison_grads(*m);
  test::poison(d_in, s());
  m->net.backward(d_in.data(), d_u.data(), d_x.data(), B, work.view, lane(), nullptr);
  const auto g = grads(*m);
  const auto gx = test::download(d_in, s());
  auto loss = [&] { return test::weighted_sum(forward, out.data(), u, s()); };
  double rms = 0;
  for (const auto& e : m->arena.entries())
    for (std::int64_t i = 0; i < e.numel; ++i) {
      ASSERT_TRUE(std::isfinite(g[e.offset + i])) << e.name << "[" << i << "] not written";
      rms += static_cast<double>(g[e.offset + i]) * g[e.offset + i];
    }
  rms = std::sqrt(rms / static_cast<double>(m->arena.count()));
  for (const auto& e : m->arena.entries())
    for (int k = 0; k < 2; ++k) {
      const auto i = static_cast<std::int64_t>(rng()() % static_cast<std::uint64_t>(e.numel));
      const double fd = test::central_difference(loss, m->arena.params() + e.offset, i, 1e-2f, s());
      EXPECT_TRUE(test::fd_close(fd, g[e.offset + i], 3e-2, 0.05 * rms)) << e.name << "[" << i << "]";
    }
  const double floor_x = 0.05 * test::xlstm::rms(gx);
  for (int k = 0; k < 6; ++k) {
    const auto i = static_cast<std::int64_t>(rng()() % gx.size());
    const double fd = test::central_difference(loss, d_x.data(), i, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, gx[i], 3e-2, floor_x)) << "in[" << i << "]";
  }
}

// T steps equal the training form; rows reset at t0 continue as a fresh sequence over [t0, T).
TEST_F(XlstmTest, StepsEqualTrainingFormAndResetEqualsFresh) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 4, T = 11, t0 = 5;
  XlstmSpec spec = small_spec(T);
  spec.blocks = "msm";
  spec.d_model = 12;
  spec.heads = 3;
  auto m = make(spec);
  const std::int64_t C = m->net.in_features(), d = m->net.out_features();
  EXPECT_EQ(m->net.block_count(), 3u);
  EXPECT_EQ(m->net.out_features(), 12);
  // mLSTM block: conv (24 x 3) + 3 heads of (8*8 + 8 + 1); sLSTM block: conv (12 x 3) + 4 * 12.
  EXPECT_EQ(m->net.state_features(), 2 * (72 + 3 * 73) + (36 + 48));
  const auto x = test::random_uniform(static_cast<std::size_t>(B * T * C), -1.f, 1.f, rng());
  auto d_x = test::upload(x, s());
  gpu::DeviceBuffer<float> out(static_cast<std::size_t>(B * T * d));
  const OwnedWorkspace work(m->net, B);
  test::poison(out, s());
  m->net.forward(out.data(), d_x.data(), B, false, work.view, lane());
  const auto seq = test::download(out, s());

  EXPECT_TRUE(test::all_close(run_steps(m->net, x, B, T, t0, {}), as_double(seq), 1e-4, 1e-5)) << "steps";

  // A twin over T - t0 steps on the same arena gives the fresh sequences.
  XlstmSpec tail_spec = spec;
  tail_spec.sequence_length = T - t0;
  Xlstm tail(tail_spec);
  tail.bind(m->arena);
  const auto x_tail = slice_time(x, B, T, C, t0, T);
  auto d_x_tail = test::upload(x_tail, s());
  gpu::DeviceBuffer<float> out_tail(static_cast<std::size_t>(B * (T - t0) * d));
  const OwnedWorkspace work_tail(tail, B);
  tail.forward(out_tail.data(), d_x_tail.data(), B, false, work_tail.view, lane());
  const auto fresh = test::download(out_tail, s());
  std::vector<std::uint8_t> reset(static_cast<std::size_t>(B), 0);
  reset[1] = reset[2] = 1;
  const auto stepped = run_steps(m->net, x, B, T, t0, reset);
  for (std::int64_t b = 0; b < B; ++b) {
    SCOPED_TRACE("row " + std::to_string(b));
    const std::vector<float> got(stepped.begin() + b * T * d, stepped.begin() + (b + 1) * T * d);
    std::vector<float> want(seq.begin() + b * T * d, seq.begin() + (b + 1) * T * d);
    if (reset[b])
      std::copy(fresh.begin() + b * (T - t0) * d, fresh.begin() + (b + 1) * (T - t0) * d, want.begin() + t0 * d);
    EXPECT_TRUE(test::all_close(got, as_double(want), 1e-4, 1e-5));
  }
}

// forward + backward and a step captured in CUDA graphs replay bitwise like the eager calls.
TEST_F(XlstmTest, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 3, T = 9;
  XlstmSpec spec = small_spec(T);
  spec.blocks = "mms";
  auto m = make(spec);
  const std::int64_t C = m->net.in_features(), d = m->net.out_features();
  const auto x = test::random_uniform(static_cast<std::size_t>(B * T * C), -1.f, 1.f, rng());
  const auto u = test::random_uniform(static_cast<std::size_t>(B * T * d), -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  gpu::DeviceBuffer<float> out(u.size()), d_in(x.size());
  const OwnedWorkspace work(m->net, B);
  auto body = [&](gpu::BlasLane ln) {
    m->net.forward(out.data(), d_x.data(), B, false, work.view, ln);
    m->net.backward(d_in.data(), d_u.data(), d_x.data(), B, work.view, ln, nullptr);
  };
  body(lane());
  const auto out_eager = test::download(out, s()), din_eager = test::download(d_in, s());
  const auto g_eager = all_grads(*m);
  gpu::CudaGraph graph;
  graph.capture(s(), [&](cudaStream_t cs) {
    gpu::BlasLane ln = lane();
    ln.stream = cs;
    body(ln);
  });
  ASSERT_TRUE(graph.captured());
  for (int r = 0; r < 2; ++r) {
    test::poison(out, s());
    test::poison(d_in, s());
    poison_grads(*m);
    graph.replay(s());
    EXPECT_EQ(test::download(out, s()), out_eager) << "replay " << r;
    EXPECT_EQ(test::download(d_in, s()), din_eager) << "replay " << r;
    EXPECT_EQ(all_grads(*m), g_eager) << "replay " << r;
  }
  // One step from a state restored before each run (the first T * C inputs as (B, C) rows).
  gpu::DeviceBuffer<float> state(static_cast<std::size_t>(B * m->net.state_features())),
      ys(static_cast<std::size_t>(B * d));
  gpu::DeviceBuffer<std::byte> step_mem(m->net.step_workspace_bytes(B));
  const Workspace step_ws{step_mem.data(), B, false};
  std::vector<std::uint8_t> reset(static_cast<std::size_t>(B), 0);
  reset[0] = 1;
  auto d_reset = test::upload(reset, s());
  auto step = [&](gpu::BlasLane ln) { m->net.step(ys.data(), state.data(), d_x.data(), d_reset.data(), B, step_ws, ln); };
  auto restore = [&] {
    FH_CHECK(cudaMemsetAsync(state.data(), 0, state.bytes(), s()));
    step(lane());  // a state that is not all zeros
  };
  restore();
  step(lane());
  const auto y_eager = test::download(ys, s());
  restore();
  gpu::CudaGraph step_graph;
  step_graph.capture(s(), [&](cudaStream_t cs) {
    gpu::BlasLane ln = lane();
    ln.stream = cs;
    step(ln);
  });
  test::poison(ys, s());
  step_graph.replay(s());
  EXPECT_EQ(test::download(ys, s()), y_eager) << "step";
}

}  // namespace
}  // namespace foxhunt::models
