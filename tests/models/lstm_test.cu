// Lstm: the time-major sequence forward and its backward through time against a float64 LSTM
// (random initial states and resets), the backward against central finite differences of the GPU
// forward, the per-step form against the sequence form (and a reset against a fresh sequence), the
// Module (B, T, C) form against the sequence form, and a CUDA-graph replay against eager runs.
#include "models/fd_support.hpp"

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/check.hpp"
#include "gpu/graph.hpp"
#include "models/lstm.hpp"

namespace foxhunt::models {
namespace {

using U8 = std::uint8_t;

// A float64 LSTM with the layer's parameters, PyTorch nn.LSTM semantics, and its exact BPTT.
struct RefLstm {
  std::int64_t in = 0, H = 0;
  std::vector<double> wih, whh, b;  // (4H, in), (4H, H), (4H)

  struct Tape {
    std::vector<double> out, gates, c, hp, cp;  // (T, B, H), (T, B, 4H), (T, B, H) x 3
    std::vector<double> state;                  // (B, 2H) after the last step
  };
  struct Grads {
    std::vector<double> wih, whh, b, x;
  };

  static double sig(double z) { return 1.0 / (1.0 + std::exp(-z)); }

  // state0 (B, 2H) and resets (T, B) may be empty (zeros, none).
  Tape forward(const std::vector<float>& x, const std::vector<float>& state0, const std::vector<U8>& resets,
               std::int64_t T, std::int64_t B) const {
    Tape tp;
    tp.out.assign(T * B * H, 0);
    tp.gates.assign(T * B * 4 * H, 0);
    tp.c = tp.hp = tp.cp = tp.out;
    std::vector<double> h(B * H, 0), c(B * H, 0), z(4 * H);
    if (!state0.empty())
      for (std::int64_t r = 0; r < B; ++r)
        for (std::int64_t j = 0; j < H; ++j) {
          h[r * H + j] = state0[r * 2 * H + j];
          c[r * H + j] = state0[r * 2 * H + H + j];
        }
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t r = 0; r < B; ++r) {
        const std::int64_t row = t * B + r;
        if (!resets.empty() && resets[row] != 0)
          for (std::int64_t j = 0; j < H; ++j) h[r * H + j] = c[r * H + j] = 0;
        for (std::int64_t j = 0; j < H; ++j) {
          tp.hp[row * H + j] = h[r * H + j];
          tp.cp[row * H + j] = c[r * H + j];
        }
        for (std::int64_t g = 0; g < 4 * H; ++g) {
          double acc = b[g];
          for (std::int64_t k = 0; k < in; ++k) acc += wih[g * in + k] * x[row * in + k];
          for (std::int64_t k = 0; k < H; ++k) acc += whh[g * H + k] * h[r * H + k];
          z[g] = acc;
        }
        for (std::int64_t j = 0; j < H; ++j) {
          const double i = sig(z[j]), f = sig(z[H + j]), gg = std::tanh(z[2 * H + j]), o = sig(z[3 * H + j]);
          const double cn = f * c[r * H + j] + i * gg;
          const double hn = o * std::tanh(cn);
          double* a = &tp.gates[row * 4 * H + j];
          a[0] = i, a[H] = f, a[2 * H] = gg, a[3 * H] = o;
          tp.c[row * H + j] = cn;
          tp.out[row * H + j] = hn;
          c[r * H + j] = cn;
          h[r * H + j] = hn;
        }
      }
    tp.state.assign(B * 2 * H, 0);
    for (std::int64_t r = 0; r < B; ++r)
      for (std::int64_t j = 0; j < H; ++j) {
        tp.state[r * 2 * H + j] = h[r * H + j];
        tp.state[r * 2 * H + H + j] = c[r * H + j];
      }
    return tp;
  }

  // Gradients of L = sum(d_out * out) after forward().
  Grads backward(const Tape& tp, const std::vector<float>& x, const std::vector<float>& d_out,
                 const std::vector<U8>& resets, std::int64_t T, std::int64_t B) const {
    Grads gr;
    gr.wih.assign(wih.size(), 0);
    gr.whh.assign(whh.size(), 0);
    gr.b.assign(b.size(), 0);
    gr.x.assign(x.size(), 0);
    std::vector<double> dh_next(B * H, 0), dc_next(B * H, 0), dz(4 * H);
    for (std::int64_t t = T; t-- > 0;)
      for (std::int64_t r = 0; r < B; ++r) {
        const std::int64_t row = t * B + r;
        std::vector<double> dcp(H);
        for (std::int64_t j = 0; j < H; ++j) {
          const double* a = &tp.gates[row * 4 * H + j];
          const double i = a[0], f = a[H], gg = a[2 * H], o = a[3 * H];
          const double tc = std::tanh(tp.c[row * H + j]);
          const double dh = d_out[row * H + j] + dh_next[r * H + j];
          const double dc = dc_next[r * H + j] + dh * o * (1 - tc * tc);
          dz[j] = dc * gg * i * (1 - i);
          dz[H + j] = dc * tp.cp[row * H + j] * f * (1 - f);
          dz[2 * H + j] = dc * i * (1 - gg * gg);
          dz[3 * H + j] = dh * tc * o * (1 - o);
          dcp[j] = dc * f;
        }
        const bool cut = !resets.empty() && resets[row] != 0;  // h_prev, c_prev were the constant zero
        for (std::int64_t k = 0; k < H; ++k) {
          double dhp = 0;
          for (std::int64_t g = 0; g < 4 * H; ++g) dhp += dz[g] * whh[g * H + k];
          dh_next[r * H + k] = cut ? 0 : dhp;
          dc_next[r * H + k] = cut ? 0 : dcp[k];
        }
        for (std::int64_t g = 0; g < 4 * H; ++g) {
          gr.b[g] += dz[g];
          for (std::int64_t k = 0; k < in; ++k) {
            gr.wih[g * in + k] += dz[g] * x[row * in + k];
            gr.x[row * in + k] += dz[g] * wih[g * in + k];
          }
          for (std::int64_t k = 0; k < H; ++k) gr.whh[g * H + k] += dz[g] * tp.hp[row * H + k];
        }
      }
    return gr;
  }
};

class LstmTest : public test::LaneTest {
 protected:
  // A layer with its own arena, initialised from the fixture's RNG, and its float64 twin.
  struct Layer {
    explicit Layer(LstmSpec spec) : lstm(std::move(spec)) {}
    gpu::ParameterArena arena;
    Lstm lstm;
    RefLstm ref;
  };
  std::unique_ptr<Layer> make(std::int64_t in, std::int64_t H, std::int64_t seq_len = 1) {
    auto l = std::make_unique<Layer>(LstmSpec{"lstm", in, H, seq_len});
    l->lstm.declare(l->arena);
    l->arena.finalize(s());
    l->lstm.init(l->arena, rng(), s());
    l->lstm.bind(l->arena);
    l->ref.in = in;
    l->ref.H = H;
    auto get = [&](const std::string& name) {
      const auto& e = l->arena.entry(name);
      const auto v = test::download(l->arena.param(name).as<float>(), static_cast<std::size_t>(e.numel), s());
      return std::vector<double>(v.begin(), v.end());
    };
    l->ref.wih = get(l->lstm.weight_ih_name());
    l->ref.whh = get(l->lstm.weight_hh_name());
    l->ref.b = get(l->lstm.bias_name());
    return l;
  }
  std::vector<U8> random_resets(std::size_t n, double p) {
    std::bernoulli_distribution d(p);
    std::vector<U8> v(n);
    for (auto& r : v) r = d(rng()) ? 1 : 0;
    return v;
  }
  std::vector<float> grad(const Layer& l, const std::string& name) {
    const auto& e = l.arena.entry(name);
    return test::download(l.arena.grad(name).as<float>(), static_cast<std::size_t>(e.numel), s());
  }
  // Every parameter gradient, concatenated in declaration order (no arena padding).
  std::vector<float> all_grads(const Layer& l) {
    std::vector<float> v;
    for (const auto& e : l.arena.entries()) {
      const auto g = grad(l, e.name);
      v.insert(v.end(), g.begin(), g.end());
    }
    return v;
  }
  void poison_grads(Layer& l) {
    FH_CHECK(
        cudaMemsetAsync(l.arena.grads(), 0xFF, static_cast<std::size_t>(l.arena.padded_count()) * sizeof(float), s()));
  }
};

struct Shape {
  std::int64_t T, B, in, H;
  bool state0, resets;
};

std::string describe(const Shape& c) {
  return "T=" + std::to_string(c.T) + " B=" + std::to_string(c.B) + " in=" + std::to_string(c.in) +
         " H=" + std::to_string(c.H) + " state0=" + std::to_string(c.state0) + " resets=" + std::to_string(c.resets);
}

// Forward (outputs and final state) and the BPTT gradients against the float64 LSTM.
TEST_F(LstmTest, SequenceForwardAndBackwardMatchFloat64) {
  SCOPED_TRACE(seed_note());
  // Small shapes run gpu/linear's own GEMM kernel; the last has T * B * 4H > 2^18 outputs and a
  // T * B > 1024 reduction, so cuBLASLt runs the input projection and the weight gradients.
  const std::vector<Shape> cases{{1, 1, 1, 1, true, true},     {1, 3, 4, 5, true, false},
                                 {6, 1, 3, 7, true, true},     {10, 8, 12, 13, true, true},
                                 {9, 6, 5, 10, false, false},  {7, 32, 20, 24, false, true},
                                 {16, 128, 24, 40, true, true}};
  for (const Shape& c : cases) {
    SCOPED_TRACE(describe(c));
    auto l = make(c.in, c.H);
    const std::int64_t T = c.T, B = c.B, H = c.H;
    const auto x = test::random_uniform(static_cast<std::size_t>(T * B * c.in), -1.f, 1.f, rng());
    const auto state0 =
        c.state0 ? test::random_uniform(static_cast<std::size_t>(B * 2 * H), -1.f, 1.f, rng()) : std::vector<float>{};
    const auto resets = c.resets ? random_resets(static_cast<std::size_t>(T * B), 0.1) : std::vector<U8>{};
    const auto u = test::random_uniform(static_cast<std::size_t>(T * B * H), -1.f, 1.f, rng());
    auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
    gpu::DeviceBuffer<float> d_state0, d_out(static_cast<std::size_t>(T * B * H)),
        d_state(static_cast<std::size_t>(B * 2 * H)), d_dx(x.size());
    gpu::DeviceBuffer<U8> d_resets;
    if (c.state0) d_state0 = test::upload(state0, s());
    if (c.resets) d_resets = test::upload(resets, s());
    gpu::DeviceBuffer<std::byte> ws_mem(l->lstm.sequence_workspace_bytes(T, B));
    const Workspace ws{ws_mem.data(), B, false};
    test::poison(d_out, s());
    test::poison(d_state, s());
    test::poison(d_dx, s());
    poison_grads(*l);
    l->lstm.forward_sequence(d_out.data(), d_state.data(), d_x.data(), c.state0 ? d_state0.data() : nullptr,
                             c.resets ? d_resets.data() : nullptr, T, B, ws, lane());
    l->lstm.backward_sequence(d_dx.data(), d_u.data(), d_x.data(), c.state0 ? d_state0.data() : nullptr,
                              c.resets ? d_resets.data() : nullptr, T, B, ws, lane());
    const auto tape = l->ref.forward(x, state0, resets, T, B);
    EXPECT_LT(test::rel_error(test::download(d_out, s()), tape.out), 1e-5) << "out";
    EXPECT_LT(test::rel_error(test::download(d_state, s()), tape.state), 1e-5) << "state_out";
    const auto gr = l->ref.backward(tape, x, u, resets, T, B);
    EXPECT_LT(test::rel_error(grad(*l, l->lstm.weight_ih_name()), gr.wih), 1e-4) << "weight_ih";
    EXPECT_LT(test::rel_error(grad(*l, l->lstm.weight_hh_name()), gr.whh), 1e-4) << "weight_hh";
    EXPECT_LT(test::rel_error(grad(*l, l->lstm.bias_name()), gr.b), 1e-4) << "bias";
    EXPECT_LT(test::rel_error(test::download(d_dx, s()), gr.x), 1e-4) << "d_x";
  }
}

// Every parameter tensor's gradient and d_x against central differences of L = sum(u * out).
TEST_F(LstmTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t T = 7, B = 4, in = 5, H = 6;
  auto l = make(in, H);
  const auto x = test::random_uniform(static_cast<std::size_t>(T * B * in), -1.f, 1.f, rng());
  const auto state0 = test::random_uniform(static_cast<std::size_t>(B * 2 * H), -1.f, 1.f, rng());
  auto resets = random_resets(static_cast<std::size_t>(T * B), 0.1);
  resets[3 * B + 1] = 1;  // at least one cut inside the sequence
  const auto u = test::random_uniform(static_cast<std::size_t>(T * B * H), -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s()), d_state0 = test::upload(state0, s());
  auto d_resets = test::upload(resets, s());
  gpu::DeviceBuffer<float> d_out(u.size()), d_dx(x.size());
  gpu::DeviceBuffer<std::byte> ws_mem(l->lstm.sequence_workspace_bytes(T, B));
  const Workspace ws{ws_mem.data(), B, false};
  auto forward = [&] {
    l->lstm.forward_sequence(d_out.data(), nullptr, d_x.data(), d_state0.data(), d_resets.data(), T, B, ws, lane());
  };
  forward();
  l->lstm.backward_sequence(d_dx.data(), d_u.data(), d_x.data(), d_state0.data(), d_resets.data(), T, B, ws, lane());
  const auto grads = test::download(l->arena.grads(), static_cast<std::size_t>(l->arena.padded_count()), s());
  const auto gx = test::download(d_dx, s());
  auto loss = [&] { return test::weighted_sum(forward, d_out.data(), u, s()); };
  double rms = 0;
  for (const auto& e : l->arena.entries())
    for (std::int64_t i = 0; i < e.numel; ++i) rms += static_cast<double>(grads[e.offset + i]) * grads[e.offset + i];
  rms = std::sqrt(rms / static_cast<double>(l->arena.count()));
  for (const auto& e : l->arena.entries())
    for (int k = 0; k < 4; ++k) {
      const auto i = static_cast<std::int64_t>(rng()() % static_cast<std::uint64_t>(e.numel));
      const double fd = test::central_difference(loss, l->arena.params() + e.offset, i, 1e-2f, s());
      EXPECT_TRUE(test::fd_close(fd, grads[e.offset + i], 2e-2, 0.05 * rms)) << e.name << "[" << i << "]";
    }
  double rms_x = 0;
  for (float g : gx) rms_x += static_cast<double>(g) * g;
  rms_x = std::sqrt(rms_x / static_cast<double>(gx.size()));
  for (int k = 0; k < 6; ++k) {
    const auto i = static_cast<std::int64_t>(rng()() % gx.size());
    const double fd = test::central_difference(loss, d_x.data(), i, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, gx[i], 2e-2, 0.05 * rms_x)) << "x[" << i << "]";
  }
}

// step() T times (the sequence's resets as per-step masks) and two chunks with the state carried
// in place equal one forward_sequence; a reset of every row at t0 equals a fresh sequence over
// steps t0 .. T-1.
TEST_F(LstmTest, StepsAndChunksEqualSequenceAndResetEqualsFresh) {
  SCOPED_TRACE(seed_note());
  const std::int64_t T = 9, B = 5, in = 4, H = 6, t0 = 4;
  auto l = make(in, H);
  const auto x = test::random_uniform(static_cast<std::size_t>(T * B * in), -1.f, 1.f, rng());
  const auto state0 = test::random_uniform(static_cast<std::size_t>(B * 2 * H), -1.f, 1.f, rng());
  const auto resets = random_resets(static_cast<std::size_t>(T * B), 0.15);
  auto d_x = test::upload(x, s()), d_state0 = test::upload(state0, s());
  auto d_resets = test::upload(resets, s());
  gpu::DeviceBuffer<float> d_out(static_cast<std::size_t>(T * B * H)), d_state_out(state0.size());
  gpu::DeviceBuffer<std::byte> seq_mem(l->lstm.sequence_workspace_bytes(T, B));
  const Workspace seq_ws{seq_mem.data(), B, false};
  test::poison(d_out, s());
  test::poison(d_state_out, s());
  l->lstm.forward_sequence(d_out.data(), d_state_out.data(), d_x.data(), d_state0.data(), d_resets.data(), T, B, seq_ws,
                           lane());
  const auto seq_out = test::download(d_out, s());
  const auto seq_state = test::download(d_state_out, s());

  gpu::DeviceBuffer<std::byte> step_mem(l->lstm.step_workspace_bytes(B));
  const Workspace step_ws{step_mem.data(), B, false};
  auto d_state = test::upload(state0, s());
  gpu::DeviceBuffer<float> d_step_out(d_out.size());
  test::poison(d_step_out, s());
  for (std::int64_t t = 0; t < T; ++t)
    l->lstm.step(d_step_out.data() + t * B * H, d_state.data(), d_x.data() + t * B * in, d_resets.data() + t * B, B,
                 step_ws, lane());
  const std::vector<double> want_out(seq_out.begin(), seq_out.end()), want_state(seq_state.begin(), seq_state.end());
  EXPECT_TRUE(test::all_close(test::download(d_step_out, s()), want_out, 1e-6, 1e-6)) << "step outputs";
  EXPECT_TRUE(test::all_close(test::download(d_state, s()), want_state, 1e-6, 1e-6)) << "step state";

  // Chunked: steps 0 .. t0-1, then t0 .. T-1 from the state carried in place, equal one sequence.
  auto d_carry = test::upload(state0, s());
  gpu::DeviceBuffer<float> d_chunk_out(d_out.size());
  test::poison(d_chunk_out, s());
  l->lstm.forward_sequence(d_chunk_out.data(), d_carry.data(), d_x.data(), d_carry.data(), d_resets.data(), t0, B,
                           seq_ws, lane());
  l->lstm.forward_sequence(d_chunk_out.data() + t0 * B * H, d_carry.data(), d_x.data() + t0 * B * in, d_carry.data(),
                           d_resets.data() + t0 * B, T - t0, B, seq_ws, lane());
  EXPECT_TRUE(test::all_close(test::download(d_chunk_out, s()), want_out, 1e-6, 1e-6)) << "chunked outputs";
  EXPECT_TRUE(test::all_close(test::download(d_carry, s()), want_state, 1e-6, 1e-6)) << "chunked state";

  // Every row reset at t0: from there the random initial state and the earlier steps are forgotten.
  std::vector<U8> cut(static_cast<std::size_t>(T * B), 0);
  for (std::int64_t b = 0; b < B; ++b) cut[t0 * B + b] = 1;
  auto d_cut = test::upload(cut, s());
  test::poison(d_out, s());
  l->lstm.forward_sequence(d_out.data(), d_state_out.data(), d_x.data(), d_state0.data(), d_cut.data(), T, B, seq_ws,
                           lane());
  const auto cut_out = test::download(d_out, s());
  const auto cut_state = test::download(d_state_out, s());
  gpu::DeviceBuffer<float> d_fresh_out(static_cast<std::size_t>((T - t0) * B * H)), d_fresh_state(state0.size());
  test::poison(d_fresh_out, s());
  l->lstm.forward_sequence(d_fresh_out.data(), d_fresh_state.data(), d_x.data() + t0 * B * in, nullptr, nullptr, T - t0,
                           B, seq_ws, lane());
  const auto fresh = test::download(d_fresh_out, s());
  const auto fresh_state = test::download(d_fresh_state, s());
  const std::vector<float> tail(cut_out.begin() + t0 * B * H, cut_out.end());
  EXPECT_TRUE(test::all_close(tail, std::vector<double>(fresh.begin(), fresh.end()), 1e-6, 1e-6)) << "after reset";
  EXPECT_TRUE(test::all_close(cut_state, std::vector<double>(fresh_state.begin(), fresh_state.end()), 1e-6, 1e-6))
      << "final state after reset";
}

// The Module form (B, T, C) equals the sequence form on the transposed input, forward and backward.
TEST_F(LstmTest, ModuleFormEqualsSequenceForm) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 4, T = 5, C = 3, H = 6;
  auto l = make(C, H, T);
  EXPECT_EQ(l->lstm.in_features(), C);
  EXPECT_EQ(l->lstm.out_features(), H);
  EXPECT_EQ(l->lstm.state_features(), 2 * H);
  EXPECT_EQ(l->lstm.sequence_length(), T);
  const auto x = test::random_uniform(static_cast<std::size_t>(B * T * C), -1.f, 1.f, rng());
  const auto u = test::random_uniform(static_cast<std::size_t>(B * T * H), -1.f, 1.f, rng());
  auto swap = [](const std::vector<float>& v, std::int64_t D0, std::int64_t D1, std::int64_t K) {
    std::vector<float> o(v.size());  // (D0, D1, K) -> (D1, D0, K)
    for (std::int64_t i = 0; i < D0; ++i)
      for (std::int64_t j = 0; j < D1; ++j)
        for (std::int64_t k = 0; k < K; ++k) o[(j * D0 + i) * K + k] = v[(i * D1 + j) * K + k];
    return o;
  };
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  gpu::DeviceBuffer<float> d_out(u.size()), d_din(x.size());
  const OwnedWorkspace work(l->lstm, B);
  test::poison(d_out, s());
  test::poison(d_din, s());
  poison_grads(*l);
  l->lstm.forward(d_out.data(), d_x.data(), B, false, work.view, lane());
  l->lstm.backward(d_din.data(), d_u.data(), d_x.data(), B, work.view, lane(), nullptr);
  const auto out = test::download(d_out, s()), din = test::download(d_din, s());
  const auto g_ih = grad(*l, l->lstm.weight_ih_name()), g_hh = grad(*l, l->lstm.weight_hh_name()),
             g_b = grad(*l, l->lstm.bias_name());

  auto d_xt = test::upload(swap(x, B, T, C), s()), d_ut = test::upload(swap(u, B, T, H), s());
  gpu::DeviceBuffer<float> d_yt(u.size()), d_dxt(x.size());
  gpu::DeviceBuffer<std::byte> seq_mem(l->lstm.sequence_workspace_bytes(T, B));
  const Workspace seq_ws{seq_mem.data(), B, false};
  poison_grads(*l);
  l->lstm.forward_sequence(d_yt.data(), nullptr, d_xt.data(), nullptr, nullptr, T, B, seq_ws, lane());
  l->lstm.backward_sequence(d_dxt.data(), d_ut.data(), d_xt.data(), nullptr, nullptr, T, B, seq_ws, lane());
  auto as_double = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  EXPECT_TRUE(test::all_close(out, as_double(swap(test::download(d_yt, s()), T, B, H)), 1e-6, 1e-7)) << "out";
  EXPECT_TRUE(test::all_close(din, as_double(swap(test::download(d_dxt, s()), T, B, C)), 1e-6, 1e-7)) << "d_in";
  EXPECT_TRUE(test::all_close(g_ih, as_double(grad(*l, l->lstm.weight_ih_name())), 1e-6, 1e-7)) << "weight_ih";
  EXPECT_TRUE(test::all_close(g_hh, as_double(grad(*l, l->lstm.weight_hh_name())), 1e-6, 1e-7)) << "weight_hh";
  EXPECT_TRUE(test::all_close(g_b, as_double(grad(*l, l->lstm.bias_name())), 1e-6, 1e-7)) << "bias";
}

// forward_sequence + backward_sequence (and a step) captured in CUDA graphs replay bitwise like
// the eager calls: no host synchronization, allocation or readback inside.
TEST_F(LstmTest, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const std::int64_t T = 6, B = 7, in = 9, H = 11;
  auto l = make(in, H);
  const auto x = test::random_uniform(static_cast<std::size_t>(T * B * in), -1.f, 1.f, rng());
  const auto state0 = test::random_uniform(static_cast<std::size_t>(B * 2 * H), -1.f, 1.f, rng());
  const auto resets = random_resets(static_cast<std::size_t>(T * B), 0.1);
  const auto u = test::random_uniform(static_cast<std::size_t>(T * B * H), -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s()), d_state0 = test::upload(state0, s());
  auto d_resets = test::upload(resets, s());
  gpu::DeviceBuffer<float> d_out(u.size()), d_state(state0.size()), d_dx(x.size());
  gpu::DeviceBuffer<std::byte> ws_mem(l->lstm.sequence_workspace_bytes(T, B));
  const Workspace ws{ws_mem.data(), B, false};
  auto body = [&](gpu::BlasLane ln) {
    l->lstm.forward_sequence(d_out.data(), d_state.data(), d_x.data(), d_state0.data(), d_resets.data(), T, B, ws, ln);
    l->lstm.backward_sequence(d_dx.data(), d_u.data(), d_x.data(), d_state0.data(), d_resets.data(), T, B, ws, ln);
  };
  body(lane());
  const auto out = test::download(d_out, s()), state = test::download(d_state, s()), dx = test::download(d_dx, s());
  const auto grads = all_grads(*l);

  gpu::CudaGraph graph;
  graph.capture(s(), [&](cudaStream_t cs) {
    gpu::BlasLane ln = lane();
    ln.stream = cs;
    body(ln);
  });
  ASSERT_TRUE(graph.captured());
  for (int r = 0; r < 2; ++r) {
    test::poison(d_out, s());
    test::poison(d_state, s());
    test::poison(d_dx, s());
    poison_grads(*l);
    graph.replay(s());
    EXPECT_EQ(test::download(d_out, s()), out) << "replay " << r;
    EXPECT_EQ(test::download(d_state, s()), state) << "replay " << r;
    EXPECT_EQ(test::download(d_dx, s()), dx) << "replay " << r;
    EXPECT_EQ(all_grads(*l), grads) << "replay " << r;
  }

  // One step on a state buffer restored before each run.
  gpu::DeviceBuffer<std::byte> step_mem(l->lstm.step_workspace_bytes(B));
  const Workspace step_ws{step_mem.data(), B, false};
  gpu::DeviceBuffer<float> d_h(static_cast<std::size_t>(B * H)), d_st(state0.size());
  d_st.upload(std::span<const float>(state0), s());
  l->lstm.step(d_h.data(), d_st.data(), d_x.data(), d_resets.data(), B, step_ws, lane());
  const auto h_eager = test::download(d_h, s()), st_eager = test::download(d_st, s());
  gpu::CudaGraph step_graph;
  step_graph.capture(s(), [&](cudaStream_t cs) {
    gpu::BlasLane ln = lane();
    ln.stream = cs;
    l->lstm.step(d_h.data(), d_st.data(), d_x.data(), d_resets.data(), B, step_ws, ln);
  });
  d_st.upload(std::span<const float>(state0), s());
  test::poison(d_h, s());
  step_graph.replay(s());
  EXPECT_EQ(test::download(d_h, s()), h_eager) << "step";
  EXPECT_EQ(test::download(d_st, s()), st_eager) << "step state";
}

}  // namespace
}  // namespace foxhunt::models
