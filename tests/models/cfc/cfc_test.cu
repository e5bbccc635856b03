// Cfc: the time-major sequence forward and its backward through time against a float64 CfC cell
// (all three modes, every backbone activation, 1-3 backbone layers, with and without the output
// projection, irregular ts, random initial states and resets), the backward against central
// finite differences of the GPU forward, the per-step form against the sequence form (and a reset
// against a fresh sequence), the Module (B, T, C) form against the sequence form, a CUDA-graph
// replay against eager runs, and bf16 GEMMs against the float64 reference.
#include "models/fd_support.hpp"

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/check.hpp"
#include "gpu/graph.hpp"
#include "models/cfc/cfc.hpp"
#include "models/cfc/cfc_reference.hpp"

namespace foxhunt::models {
namespace {

using U8 = std::uint8_t;

std::string mode_name(CfcMode m) {
  return m == CfcMode::pure ? "pure" : (m == CfcMode::no_gate ? "no_gate" : "default");
}

std::string describe(const CfcSpec& s) {
  return "in=" + std::to_string(s.in) + " H=" + std::to_string(s.hidden) + " U=" + std::to_string(s.backbone_units) +
         " L=" + std::to_string(s.backbone_layers) + " proj=" + std::to_string(s.proj) + " mode=" + mode_name(s.mode) +
         " act=" + std::to_string(static_cast<int>(s.activation)) + " time_input=" + std::to_string(s.time_input) +
         " math=" + std::to_string(static_cast<int>(s.math));
}

CfcSpec make_spec(std::int64_t in, std::int64_t H, std::int64_t U, std::int64_t L, std::int64_t P, CfcMode mode,
                  CfcActivation act = CfcActivation::lecun_tanh) {
  CfcSpec s;
  s.name = "cfc";
  s.in = in;
  s.hidden = H;
  s.backbone_units = U;
  s.backbone_layers = L;
  s.proj = P;
  s.mode = mode;
  s.activation = act;
  return s;
}

std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

class CfcTest : public test::LaneTest {
 protected:
  // A layer with its own arena, initialised from the fixture's RNG, and its float64 twin.
  struct Layer {
    explicit Layer(CfcSpec spec) : cfc(std::move(spec)) {}
    gpu::ParameterArena arena;
    Cfc cfc;
    test::RefCfc ref;
  };
  std::unique_ptr<Layer> make(const CfcSpec& spec) {
    auto l = std::make_unique<Layer>(spec);
    l->cfc.declare(l->arena);
    l->arena.finalize(s());
    l->cfc.init(l->arena, rng(), s());
    l->cfc.bind(l->arena);
    test::RefCfc& r = l->ref;
    r.in = spec.in;
    r.H = spec.hidden;
    r.U = spec.backbone_units;
    r.L = spec.backbone_layers;
    r.P = spec.proj;
    r.mode = spec.mode;
    r.act = spec.activation;
    r.wx = param(*l, l->cfc.backbone_name(0, "weight_x"));
    r.wh = param(*l, l->cfc.backbone_name(0, "weight_h"));
    r.b0 = param(*l, l->cfc.backbone_name(0, "bias"));
    r.w.assign(static_cast<std::size_t>(r.L), {});
    r.b.assign(static_cast<std::size_t>(r.L), {});
    for (std::int64_t i = 1; i < r.L; ++i) {
      r.w[i] = param(*l, l->cfc.backbone_name(i, "weight"));
      r.b[i] = param(*l, l->cfc.backbone_name(i, "bias"));
    }
    r.wg = param(*l, l->cfc.param_name("heads.weight"));
    r.bg = param(*l, l->cfc.param_name("heads.bias"));
    if (spec.mode == CfcMode::pure) {
      r.A = param(*l, l->cfc.param_name("A"));
      r.wtau = param(*l, l->cfc.param_name("w_tau"));
    }
    if (spec.proj > 0) {
      r.wp = param(*l, l->cfc.param_name("proj.weight"));
      r.bp = param(*l, l->cfc.param_name("proj.bias"));
    }
    return l;
  }
  std::vector<double> param(const Layer& l, const std::string& name) {
    const auto& e = l.arena.entry(name);
    return as_double(test::download(l.arena.param(name).as<float>(), static_cast<std::size_t>(e.numel), s()));
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
  // Every parameter gradient of the layer against the reference's, relative L2 error < tol each.
  void expect_grads(const Layer& l, const test::RefCfc::Grads& gr, double tol) {
    const Cfc& c = l.cfc;
    auto check = [&](const std::string& name, const std::vector<double>& want) {
      EXPECT_LT(test::rel_error(grad(l, name), want), tol) << name;
    };
    check(c.backbone_name(0, "weight_x"), gr.wx);
    check(c.backbone_name(0, "weight_h"), gr.wh);
    check(c.backbone_name(0, "bias"), gr.b0);
    for (std::int64_t i = 1; i < c.spec().backbone_layers; ++i) {
      check(c.backbone_name(i, "weight"), gr.w[i]);
      check(c.backbone_name(i, "bias"), gr.b[i]);
    }
    check(c.param_name("heads.weight"), gr.wg);
    check(c.param_name("heads.bias"), gr.bg);
    if (c.spec().mode == CfcMode::pure) {
      check(c.param_name("A"), gr.A);
      check(c.param_name("w_tau"), gr.wtau);
    }
    if (c.spec().proj > 0) {
      check(c.param_name("proj.weight"), gr.wp);
      check(c.param_name("proj.bias"), gr.bp);
    }
  }
  std::vector<U8> random_resets(std::size_t n, double p) {
    std::bernoulli_distribution d(p);
    std::vector<U8> v(n);
    for (auto& r : v) r = d(rng()) ? 1 : 0;
    return v;
  }
  // Irregular bar spacing.
  std::vector<float> random_ts(std::size_t n) { return test::random_uniform(n, 0.1f, 3.f, rng()); }

  // forward_sequence + backward_sequence on poisoned outputs and gradients against the float64
  // reference: outputs and final state to out_tol, every gradient and d_x to grad_tol (relative L2).
  void check_against_reference(Layer& l, std::int64_t T, std::int64_t B, bool with_state0, bool with_resets,
                               bool with_ts, double out_tol, double grad_tol) {
    const CfcSpec& sp = l.cfc.spec();
    const std::int64_t H = sp.hidden, O = l.cfc.out_features();
    const auto x = test::random_uniform(static_cast<std::size_t>(T * B * sp.in), -1.f, 1.f, rng());
    const auto ts = with_ts ? random_ts(static_cast<std::size_t>(T * B)) : std::vector<float>{};
    const auto state0 =
        with_state0 ? test::random_uniform(static_cast<std::size_t>(B * H), -1.f, 1.f, rng()) : std::vector<float>{};
    const auto resets = with_resets ? random_resets(static_cast<std::size_t>(T * B), 0.1) : std::vector<U8>{};
    const auto u = test::random_uniform(static_cast<std::size_t>(T * B * O), -1.f, 1.f, rng());
    auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
    gpu::DeviceBuffer<float> d_ts, d_state0, d_out(u.size()), d_state(static_cast<std::size_t>(B * H)), d_dx(x.size());
    gpu::DeviceBuffer<U8> d_resets;
    if (with_ts) d_ts = test::upload(ts, s());
    if (with_state0) d_state0 = test::upload(state0, s());
    if (with_resets) d_resets = test::upload(resets, s());
    const float* pts = with_ts ? d_ts.data() : nullptr;
    const float* ps0 = with_state0 ? d_state0.data() : nullptr;
    const U8* pr = with_resets ? d_resets.data() : nullptr;
    gpu::DeviceBuffer<std::byte> ws_mem(l.cfc.sequence_workspace_bytes(T, B));
    const Workspace ws{ws_mem.data(), B, false};
    test::poison(d_out, s());
    test::poison(d_state, s());
    test::poison(d_dx, s());
    poison_grads(l);
    l.cfc.forward_sequence(d_out.data(), d_state.data(), d_x.data(), pts, ps0, pr, T, B, ws, lane());
    l.cfc.backward_sequence(d_dx.data(), d_u.data(), d_x.data(), pts, ps0, pr, T, B, ws, lane());
    const auto tape = l.ref.forward(x, ts, state0, resets, T, B);
    EXPECT_LT(test::rel_error(test::download(d_out, s()), tape.out), out_tol) << "out";
    EXPECT_LT(test::rel_error(test::download(d_state, s()), tape.state), out_tol) << "state_out";
    const auto gr = l.ref.backward(tape, x, ts, u, resets, T, B);
    expect_grads(l, gr, grad_tol);
    EXPECT_LT(test::rel_error(test::download(d_dx, s()), gr.x), grad_tol) << "d_x";
  }
};

struct Case {
  std::int64_t T, B, in, H, U, L, P;
  CfcMode mode;
  CfcActivation act;
  bool state0, resets, ts;
};

// Forward (outputs and final state) and the BPTT gradients against the float64 cell, fp32 GEMMs:
// outputs within 1e-5, gradients within 1e-4 (relative L2).
TEST_F(CfcTest, SequenceForwardAndBackwardMatchFloat64) {
  SCOPED_TRACE(seed_note());
  using M = CfcMode;
  using A = CfcActivation;
  // Small shapes run gpu/linear's own GEMM kernel; the last two have T * B > 1024 rows, so
  // cuBLASLt runs the weight gradients over all rows.
  const std::vector<Case> cases{
      {1, 1, 1, 1, 1, 1, 0, M::standard, A::lecun_tanh, true, true, true},
      {6, 3, 4, 5, 8, 1, 0, M::standard, A::lecun_tanh, true, true, true},
      {5, 4, 3, 6, 7, 2, 0, M::no_gate, A::tanh, false, true, true},
      {7, 5, 4, 6, 9, 1, 0, M::pure, A::lecun_tanh, true, true, true},
      {4, 3, 5, 4, 6, 2, 3, M::pure, A::silu, true, false, false},
      {6, 4, 3, 5, 8, 1, 4, M::standard, A::relu, true, true, false},
      {5, 2, 3, 4, 6, 3, 2, M::no_gate, A::silu, true, true, true},
      {16, 128, 12, 40, 128, 1, 0, M::standard, A::lecun_tanh, true, true, true},
      {12, 96, 8, 24, 48, 2, 6, M::pure, A::tanh, false, true, true},
  };
  for (const Case& c : cases) {
    const CfcSpec spec = make_spec(c.in, c.H, c.U, c.L, c.P, c.mode, c.act);
    SCOPED_TRACE(describe(spec) + " T=" + std::to_string(c.T) + " B=" + std::to_string(c.B) + " state0=" +
                 std::to_string(c.state0) + " resets=" + std::to_string(c.resets) + " ts=" + std::to_string(c.ts));
    auto l = make(spec);
    check_against_reference(*l, c.T, c.B, c.state0, c.resets, c.ts, 1e-5, 1e-4);
  }
}

// Every parameter tensor's gradient and d_x against central differences of L = sum(u * out), in
// each mode, with irregular ts, an initial state and a reset inside the sequence.
TEST_F(CfcTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t T = 5, B = 3, in = 4, H = 5, U = 6;
  const std::vector<CfcSpec> specs{make_spec(in, H, U, 1, 0, CfcMode::standard, CfcActivation::lecun_tanh),
                                   make_spec(in, H, U, 2, 3, CfcMode::no_gate, CfcActivation::tanh),
                                   make_spec(in, H, U, 2, 0, CfcMode::pure, CfcActivation::silu)};
  for (const CfcSpec& spec : specs) {
    SCOPED_TRACE(describe(spec));
    auto l = make(spec);
    const std::int64_t O = l->cfc.out_features();
    const auto x = test::random_uniform(static_cast<std::size_t>(T * B * in), -1.f, 1.f, rng());
    const auto ts = random_ts(static_cast<std::size_t>(T * B));
    const auto state0 = test::random_uniform(static_cast<std::size_t>(B * H), -1.f, 1.f, rng());
    auto resets = random_resets(static_cast<std::size_t>(T * B), 0.1);
    resets[2 * B + 1] = 1;  // at least one cut inside the sequence
    const auto u = test::random_uniform(static_cast<std::size_t>(T * B * O), -1.f, 1.f, rng());
    auto d_x = test::upload(x, s()), d_ts = test::upload(ts, s()), d_u = test::upload(u, s());
    auto d_state0 = test::upload(state0, s());
    auto d_resets = test::upload(resets, s());
    gpu::DeviceBuffer<float> d_out(u.size()), d_dx(x.size());
    gpu::DeviceBuffer<std::byte> ws_mem(l->cfc.sequence_workspace_bytes(T, B));
    const Workspace ws{ws_mem.data(), B, false};
    auto forward = [&] {
      l->cfc.forward_sequence(d_out.data(), nullptr, d_x.data(), d_ts.data(), d_state0.data(), d_resets.data(), T, B,
                              ws, lane());
    };
    forward();
    l->cfc.backward_sequence(d_dx.data(), d_u.data(), d_x.data(), d_ts.data(), d_state0.data(), d_resets.data(), T, B,
                             ws, lane());
    const auto grads = test::download(l->arena.grads(), static_cast<std::size_t>(l->arena.padded_count()), s());
    const auto gx = test::download(d_dx, s());
    auto loss = [&] { return test::weighted_sum(forward, d_out.data(), u, s()); };
    double rms = 0;
    for (const auto& e : l->arena.entries())
      for (std::int64_t i = 0; i < e.numel; ++i) rms += static_cast<double>(grads[e.offset + i]) * grads[e.offset + i];
    rms = std::sqrt(rms / static_cast<double>(l->arena.count()));
    for (const auto& e : l->arena.entries())
      for (int k = 0; k < 3; ++k) {
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
}

// step() T times (the sequence's resets as per-step masks, ts as the last input feature) and two
// chunks with the state carried in place equal one forward_sequence; a reset of every row at t0
// equals a fresh sequence over steps t0 .. T-1.
TEST_F(CfcTest, StepsAndChunksEqualSequenceAndResetEqualsFresh) {
  SCOPED_TRACE(seed_note());
  const std::int64_t T = 9, B = 5, in = 4, H = 6, U = 10, t0 = 4;
  for (CfcSpec spec : {make_spec(in, H, U, 2, 0, CfcMode::standard), make_spec(in, H, U, 1, 3, CfcMode::pure),
                       make_spec(in, H, U, 1, 0, CfcMode::no_gate, CfcActivation::relu)}) {
    spec.time_input = true;
    SCOPED_TRACE(describe(spec));
    auto l = make(spec);
    const std::int64_t O = l->cfc.out_features(), C = l->cfc.in_features();
    ASSERT_EQ(C, in + 1);
    const auto x = test::random_uniform(static_cast<std::size_t>(T * B * in), -1.f, 1.f, rng());
    const auto ts = random_ts(static_cast<std::size_t>(T * B));
    const auto state0 = test::random_uniform(static_cast<std::size_t>(B * H), -1.f, 1.f, rng());
    const auto resets = random_resets(static_cast<std::size_t>(T * B), 0.15);
    std::vector<float> step_in(static_cast<std::size_t>(T * B * C));  // (T, B, in + 1): x then ts
    for (std::int64_t r = 0; r < T * B; ++r) {
      for (std::int64_t k = 0; k < in; ++k) step_in[r * C + k] = x[r * in + k];
      step_in[r * C + in] = ts[r];
    }
    auto d_x = test::upload(x, s()), d_ts = test::upload(ts, s()), d_state0 = test::upload(state0, s());
    auto d_step_in = test::upload(step_in, s());
    auto d_resets = test::upload(resets, s());
    gpu::DeviceBuffer<float> d_out(static_cast<std::size_t>(T * B * O)), d_state_out(state0.size());
    gpu::DeviceBuffer<std::byte> seq_mem(l->cfc.sequence_workspace_bytes(T, B));
    const Workspace seq_ws{seq_mem.data(), B, false};
    test::poison(d_out, s());
    test::poison(d_state_out, s());
    l->cfc.forward_sequence(d_out.data(), d_state_out.data(), d_x.data(), d_ts.data(), d_state0.data(), d_resets.data(),
                            T, B, seq_ws, lane());
    const auto want_out = as_double(test::download(d_out, s()));
    const auto want_state = as_double(test::download(d_state_out, s()));

    gpu::DeviceBuffer<std::byte> step_mem(l->cfc.step_workspace_bytes(B));
    const Workspace step_ws{step_mem.data(), B, false};
    auto d_state = test::upload(state0, s());
    gpu::DeviceBuffer<float> d_step_out(d_out.size());
    test::poison(d_step_out, s());
    for (std::int64_t t = 0; t < T; ++t)
      l->cfc.step(d_step_out.data() + t * B * O, d_state.data(), d_step_in.data() + t * B * C, d_resets.data() + t * B,
                  B, step_ws, lane());
    EXPECT_TRUE(test::all_close(test::download(d_step_out, s()), want_out, 1e-6, 1e-6)) << "step outputs";
    EXPECT_TRUE(test::all_close(test::download(d_state, s()), want_state, 1e-6, 1e-6)) << "step state";

    // Chunked: steps 0 .. t0-1, then t0 .. T-1 from the state carried in place, equal one sequence.
    auto d_carry = test::upload(state0, s());
    gpu::DeviceBuffer<float> d_chunk_out(d_out.size());
    test::poison(d_chunk_out, s());
    l->cfc.forward_sequence(d_chunk_out.data(), d_carry.data(), d_x.data(), d_ts.data(), d_carry.data(),
                            d_resets.data(), t0, B, seq_ws, lane());
    l->cfc.forward_sequence(d_chunk_out.data() + t0 * B * O, d_carry.data(), d_x.data() + t0 * B * in,
                            d_ts.data() + t0 * B, d_carry.data(), d_resets.data() + t0 * B, T - t0, B, seq_ws, lane());
    EXPECT_TRUE(test::all_close(test::download(d_chunk_out, s()), want_out, 1e-6, 1e-6)) << "chunked outputs";
    EXPECT_TRUE(test::all_close(test::download(d_carry, s()), want_state, 1e-6, 1e-6)) << "chunked state";

    // Every row reset at t0: from there the random initial state and the earlier steps are forgotten.
    std::vector<U8> cut(static_cast<std::size_t>(T * B), 0);
    for (std::int64_t b = 0; b < B; ++b) cut[t0 * B + b] = 1;
    auto d_cut = test::upload(cut, s());
    test::poison(d_out, s());
    l->cfc.forward_sequence(d_out.data(), d_state_out.data(), d_x.data(), d_ts.data(), d_state0.data(), d_cut.data(), T,
                            B, seq_ws, lane());
    const auto cut_out = test::download(d_out, s());
    const auto cut_state = test::download(d_state_out, s());
    gpu::DeviceBuffer<float> d_fresh_out(static_cast<std::size_t>((T - t0) * B * O)), d_fresh_state(state0.size());
    test::poison(d_fresh_out, s());
    l->cfc.forward_sequence(d_fresh_out.data(), d_fresh_state.data(), d_x.data() + t0 * B * in, d_ts.data() + t0 * B,
                            nullptr, nullptr, T - t0, B, seq_ws, lane());
    const std::vector<float> tail(cut_out.begin() + t0 * B * O, cut_out.end());
    EXPECT_TRUE(test::all_close(tail, as_double(test::download(d_fresh_out, s())), 1e-6, 1e-6)) << "after reset";
    EXPECT_TRUE(test::all_close(cut_state, as_double(test::download(d_fresh_state, s())), 1e-6, 1e-6))
        << "final state after reset";
  }
}

// The Module form (B, T, C) equals the sequence form on the transposed input, forward and backward,
// with ts as the last input feature (its input gradient exactly 0) and without (ts = 1).
TEST_F(CfcTest, ModuleFormEqualsSequenceForm) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 4, T = 5, in = 3, H = 6, U = 8;
  for (const bool time_input : {true, false}) {
    CfcSpec spec = make_spec(in, H, U, 2, time_input ? 0 : 4, time_input ? CfcMode::standard : CfcMode::pure);
    spec.time_input = time_input;
    spec.sequence_length = T;
    SCOPED_TRACE(describe(spec));
    auto l = make(spec);
    const std::int64_t C = l->cfc.in_features(), O = l->cfc.out_features();
    EXPECT_EQ(C, in + (time_input ? 1 : 0));
    EXPECT_EQ(O, time_input ? H : 4);
    EXPECT_EQ(l->cfc.state_features(), H);
    EXPECT_EQ(l->cfc.sequence_length(), T);
    auto module_in = test::random_uniform(static_cast<std::size_t>(B * T * C), -1.f, 1.f, rng());
    if (time_input)
      for (std::int64_t r = 0; r < B * T; ++r)
        module_in[r * C + in] = std::uniform_real_distribution<float>(0.1f, 3.f)(rng());
    const auto u = test::random_uniform(static_cast<std::size_t>(B * T * O), -1.f, 1.f, rng());
    // Time-major x (T, B, in), ts (T, B) and d_out (T, B, O) for the sequence form.
    std::vector<float> xt(static_cast<std::size_t>(T * B * in)), tst(static_cast<std::size_t>(T * B)), ut(u.size());
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t bm = b * T + t, tm = t * B + b;
        for (std::int64_t k = 0; k < in; ++k) xt[tm * in + k] = module_in[bm * C + k];
        if (time_input) tst[tm] = module_in[bm * C + in];
        for (std::int64_t o = 0; o < O; ++o) ut[tm * O + o] = u[bm * O + o];
      }
    auto d_in = test::upload(module_in, s()), d_u = test::upload(u, s());
    gpu::DeviceBuffer<float> d_out(u.size()), d_din(module_in.size());
    const OwnedWorkspace work(l->cfc, B);
    test::poison(d_out, s());
    test::poison(d_din, s());
    poison_grads(*l);
    l->cfc.forward(d_out.data(), d_in.data(), B, false, work.view, lane());
    l->cfc.backward(d_din.data(), d_u.data(), d_in.data(), B, work.view, lane(), nullptr);
    const auto out = test::download(d_out, s()), din = test::download(d_din, s());
    const auto grads = all_grads(*l);

    auto d_xt = test::upload(xt, s()), d_tst = test::upload(tst, s()), d_ut = test::upload(ut, s());
    gpu::DeviceBuffer<float> d_yt(u.size()), d_dxt(xt.size());
    gpu::DeviceBuffer<std::byte> seq_mem(l->cfc.sequence_workspace_bytes(T, B));
    const Workspace seq_ws{seq_mem.data(), B, false};
    poison_grads(*l);
    const float* pts = time_input ? d_tst.data() : nullptr;
    l->cfc.forward_sequence(d_yt.data(), nullptr, d_xt.data(), pts, nullptr, nullptr, T, B, seq_ws, lane());
    l->cfc.backward_sequence(d_dxt.data(), d_ut.data(), d_xt.data(), pts, nullptr, nullptr, T, B, seq_ws, lane());
    const auto yt = test::download(d_yt, s()), dxt = test::download(d_dxt, s());
    std::vector<double> want_out(out.size()), want_din(din.size(), 0.0);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t bm = b * T + t, tm = t * B + b;
        for (std::int64_t o = 0; o < O; ++o) want_out[bm * O + o] = yt[tm * O + o];
        for (std::int64_t k = 0; k < in; ++k) want_din[bm * C + k] = dxt[tm * in + k];
      }
    EXPECT_TRUE(test::all_close(out, want_out, 1e-6, 1e-7)) << "out";
    EXPECT_TRUE(test::all_close(din, want_din, 1e-6, 0.0)) << "d_in (the ts column exactly 0)";
    EXPECT_TRUE(test::all_close(grads, as_double(all_grads(*l)), 1e-6, 1e-7)) << "parameter gradients";
  }
}

// forward_sequence + backward_sequence (and a step) captured in CUDA graphs replay bitwise like
// the eager calls: no host synchronization, allocation or readback inside.
TEST_F(CfcTest, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const std::int64_t T = 6, B = 7, in = 9, H = 11, U = 13;
  for (CfcSpec spec : {make_spec(in, H, U, 2, 3, CfcMode::standard), make_spec(in, H, U, 1, 0, CfcMode::pure)}) {
    spec.time_input = true;
    SCOPED_TRACE(describe(spec));
    auto l = make(spec);
    const std::int64_t O = l->cfc.out_features(), C = l->cfc.in_features();
    const auto x = test::random_uniform(static_cast<std::size_t>(T * B * in), -1.f, 1.f, rng());
    const auto ts = random_ts(static_cast<std::size_t>(T * B));
    const auto state0 = test::random_uniform(static_cast<std::size_t>(B * H), -1.f, 1.f, rng());
    const auto resets = random_resets(static_cast<std::size_t>(T * B), 0.1);
    const auto u = test::random_uniform(static_cast<std::size_t>(T * B * O), -1.f, 1.f, rng());
    const auto step_in = test::random_uniform(static_cast<std::size_t>(B * C), 0.1f, 2.f, rng());
    auto d_x = test::upload(x, s()), d_ts = test::upload(ts, s()), d_u = test::upload(u, s());
    auto d_state0 = test::upload(state0, s()), d_step_in = test::upload(step_in, s());
    auto d_resets = test::upload(resets, s());
    gpu::DeviceBuffer<float> d_out(u.size()), d_state(state0.size()), d_dx(x.size());
    gpu::DeviceBuffer<std::byte> ws_mem(l->cfc.sequence_workspace_bytes(T, B));
    const Workspace ws{ws_mem.data(), B, false};
    auto body = [&](gpu::BlasLane ln) {
      l->cfc.forward_sequence(d_out.data(), d_state.data(), d_x.data(), d_ts.data(), d_state0.data(), d_resets.data(),
                              T, B, ws, ln);
      l->cfc.backward_sequence(d_dx.data(), d_u.data(), d_x.data(), d_ts.data(), d_state0.data(), d_resets.data(), T, B,
                               ws, ln);
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
    gpu::DeviceBuffer<std::byte> step_mem(l->cfc.step_workspace_bytes(B));
    const Workspace step_ws{step_mem.data(), B, false};
    gpu::DeviceBuffer<float> d_h(static_cast<std::size_t>(B * O)), d_st(state0.size());
    d_st.upload(std::span<const float>(state0), s());
    l->cfc.step(d_h.data(), d_st.data(), d_step_in.data(), d_resets.data(), B, step_ws, lane());
    const auto h_eager = test::download(d_h, s()), st_eager = test::download(d_st, s());
    gpu::CudaGraph step_graph;
    step_graph.capture(s(), [&](cudaStream_t cs) {
      gpu::BlasLane ln = lane();
      ln.stream = cs;
      l->cfc.step(d_h.data(), d_st.data(), d_step_in.data(), d_resets.data(), B, step_ws, ln);
    });
    d_st.upload(std::span<const float>(state0), s());
    test::poison(d_h, s());
    step_graph.replay(s());
    EXPECT_EQ(test::download(d_h, s()), h_eager) << "step";
    EXPECT_EQ(test::download(d_st, s()), st_eager) << "step state";
  }
}

// bf16 tensor-core GEMMs (fp32 master weights and accumulation) against the float64 cell: outputs
// within 3e-2 relative (the public reference kernels' bf16 tolerance), gradients within 5e-2.
TEST_F(CfcTest, Bf16MatchesFloat64) {
  SCOPED_TRACE(seed_note());
  const std::int64_t T = 8, B = 16, in = 8, H = 16, U = 32;
  for (CfcSpec spec : {make_spec(in, H, U, 1, 0, CfcMode::standard), make_spec(in, H, U, 2, 4, CfcMode::no_gate),
                       make_spec(in, H, U, 1, 0, CfcMode::pure)}) {
    spec.math = gpu::LinearMath::bf16;
    SCOPED_TRACE(describe(spec));
    auto l = make(spec);
    check_against_reference(*l, T, B, true, true, true, 3e-2, 5e-2);
  }
}

// Bad specs are rejected naming the problem; the config spellings parse.
TEST(CfcSpecTest, RejectsBadSpecsAndParsesNames) {
  EXPECT_THROW(Cfc(make_spec(0, 4, 8, 1, 0, CfcMode::standard)), std::invalid_argument);
  EXPECT_THROW(Cfc(make_spec(3, 0, 8, 1, 0, CfcMode::standard)), std::invalid_argument);
  EXPECT_THROW(Cfc(make_spec(3, 4, 0, 1, 0, CfcMode::standard)), std::invalid_argument);
  EXPECT_THROW(Cfc(make_spec(3, 4, 8, 0, 0, CfcMode::standard)), std::invalid_argument);
  EXPECT_THROW(Cfc(make_spec(3, 4, 8, 1, -1, CfcMode::standard)), std::invalid_argument);
  CfcSpec unnamed = make_spec(3, 4, 8, 1, 0, CfcMode::standard);
  unnamed.name.clear();
  EXPECT_THROW(Cfc{unnamed}, std::invalid_argument);
  EXPECT_EQ(parse_cfc_mode("default"), CfcMode::standard);
  EXPECT_EQ(parse_cfc_mode("no_gate"), CfcMode::no_gate);
  EXPECT_EQ(parse_cfc_mode("pure"), CfcMode::pure);
  EXPECT_FALSE(parse_cfc_mode("standard").has_value());
  EXPECT_EQ(parse_cfc_activation("lecun_tanh"), CfcActivation::lecun_tanh);
  EXPECT_EQ(parse_cfc_activation("silu"), CfcActivation::silu);
  EXPECT_FALSE(parse_cfc_activation("gelu").has_value());
  // The Module form's width follows time_input and proj.
  CfcSpec timed = make_spec(3, 4, 8, 1, 5, CfcMode::pure);
  timed.time_input = true;
  const Cfc c(timed);
  EXPECT_EQ(c.in_features(), 4);
  EXPECT_EQ(c.out_features(), 5);
  EXPECT_EQ(c.head_width(), 4);
  EXPECT_EQ(Cfc(make_spec(3, 4, 8, 1, 0, CfcMode::standard)).head_width(), 16);
}

}  // namespace
}  // namespace foxhunt::models
