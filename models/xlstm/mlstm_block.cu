#include "models/xlstm/mlstm_block.hpp"

#include <random>
#include <string>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"
#include "gpu/layernorm.hpp"
#include "models/module.hpp"
#include "models/xlstm/block_ops.hpp"
#include "models/xlstm/mlstm_cell.hpp"
#include "models/xlstm/param_init.hpp"

namespace foxhunt::models {

namespace {
constexpr float kEps = 1e-5f;
constexpr auto kId = gpu::Activation::identity;
}  // namespace

// Rows N = max_batch * T. Forward activations the backward reads, then the backward's own.
struct MlstmBlock::Buffers {
  float *xn, *ln_mean, *ln_rstd, *xm, *z, *xc, *q, *k, *v, *ig, *fg, *h, *gn_mean, *gn_rstd, *hn, *hg, *out;
  std::byte* cell_ws;
  float *d_hg, *d_hn, *d_z, *d_xc, *d_h, *dq, *dk, *dv, *di, *df, *tmp_e, *d_xm, *d_xn, *tmp_c, *scratch;
  std::byte *conv_ws, *ln_ws;
};

MlstmBlock::MlstmBlock(MlstmBlockSpec spec)
    : spec_(std::move(spec)),
      E_(spec_.proj_factor * spec_.d_model),
      D_(spec_.heads >= 1 ? E_ / spec_.heads : 0),
      conv_(CausalConv1dSpec{spec_.name + ".conv", E_, spec_.conv_kernel, true}) {
  FH_EXPECT(!spec_.name.empty(), "MlstmBlock: name must not be empty");
  FH_EXPECT(spec_.d_model >= 1 && spec_.proj_factor >= 1 && spec_.heads >= 1,
            "MlstmBlock " + spec_.name + ": d_model, proj_factor and heads must be >= 1");
  FH_EXPECT(E_ % spec_.heads == 0, "MlstmBlock " + spec_.name + ": heads must divide proj_factor * d_model = " +
                                       std::to_string(E_));
}

void MlstmBlock::declare(gpu::ParameterArena& arena) const {
  const std::int64_t C = spec_.d_model, E = E_, H = spec_.heads;
  arena.declare(p("norm.weight"), gpu::Shape{C});
  arena.declare(p("norm.bias"), gpu::Shape{C});
  arena.declare(p("up_m.weight"), gpu::Shape{E, C});
  arena.declare(p("up_z.weight"), gpu::Shape{E, C});
  conv_.declare(arena);
  arena.declare(p("q.weight"), gpu::Shape{E, E});
  arena.declare(p("k.weight"), gpu::Shape{E, E});
  arena.declare(p("v.weight"), gpu::Shape{E, E});
  arena.declare(p("igate.weight"), gpu::Shape{H, E});
  arena.declare(p("igate.bias"), gpu::Shape{H});
  arena.declare(p("fgate.weight"), gpu::Shape{H, E});
  arena.declare(p("fgate.bias"), gpu::Shape{H});
  arena.declare(p("out_norm.weight"), gpu::Shape{E});
  arena.declare(p("skip"), gpu::Shape{E});
  arena.declare(p("down.weight"), gpu::Shape{C, E});
}

void MlstmBlock::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  using namespace xlstm_detail;
  const std::int64_t C = spec_.d_model, E = E_, H = spec_.heads;
  init_constant(arena, p("norm.weight"), 1.f, stream);
  init_constant(arena, p("norm.bias"), 0.f, stream);
  init_uniform(arena, p("up_m.weight"), C, rng, stream);
  init_uniform(arena, p("up_z.weight"), C, rng, stream);
  conv_.init(arena, rng, stream);
  for (const char* w : {"q.weight", "k.weight", "v.weight", "igate.weight", "fgate.weight"})
    init_uniform(arena, p(w), E, rng, stream);
  init_uniform(arena, p("igate.bias"), 100, rng, stream);  // U(±0.1)
  init_forget_bias(arena, p("fgate.bias"), H, 1, stream);
  init_constant(arena, p("out_norm.weight"), 1.f, stream);
  init_constant(arena, p("skip"), 1.f, stream);
  init_uniform(arena, p("down.weight"), E, rng, stream);
}

void MlstmBlock::bind(gpu::ParameterArena& arena) {
  FH_EXPECT(arena.finalized(), "MlstmBlock " + spec_.name + ": bind needs a finalized arena");
  auto P = [&](const char* w) { return arena.param(p(w)).as<float>(); };
  auto G = [&](const char* w) { return arena.grad(p(w)).as<float>(); };
  ln_w_ = P("norm.weight"), ln_b_ = P("norm.bias"), w_m_ = P("up_m.weight"), w_z_ = P("up_z.weight");
  w_q_ = P("q.weight"), w_k_ = P("k.weight"), w_v_ = P("v.weight");
  w_i_ = P("igate.weight"), b_i_ = P("igate.bias"), w_f_ = P("fgate.weight"), b_f_ = P("fgate.bias");
  on_w_ = P("out_norm.weight"), skip_ = P("skip"), w_down_ = P("down.weight");
  d_ln_w_ = G("norm.weight"), d_ln_b_ = G("norm.bias"), d_w_m_ = G("up_m.weight"), d_w_z_ = G("up_z.weight");
  d_w_q_ = G("q.weight"), d_w_k_ = G("k.weight"), d_w_v_ = G("v.weight");
  d_w_i_ = G("igate.weight"), d_b_i_ = G("igate.bias"), d_w_f_ = G("fgate.weight"), d_b_f_ = G("fgate.bias");
  d_on_w_ = G("out_norm.weight"), d_skip_ = G("skip"), d_w_down_ = G("down.weight");
  conv_.bind(arena);
  bound_ = true;
}

std::int64_t MlstmBlock::state_features() const {
  return conv_.state_features() + mlstm_state_features(spec_.heads, D_);
}

MlstmBlock::Buffers MlstmBlock::carve(WorkspaceCarver& c, std::int64_t max_batch, std::int64_t T) const {
  FH_EXPECT(max_batch >= 1 && T >= 1, "MlstmBlock " + spec_.name + ": workspace needs max_batch, T >= 1");
  const auto N = static_cast<std::size_t>(max_batch * T), C = static_cast<std::size_t>(spec_.d_model),
             E = static_cast<std::size_t>(E_), H = static_cast<std::size_t>(spec_.heads);
  Buffers b{};
  b.xn = c.take<float>(N * C);
  b.ln_mean = c.take<float>(N);
  b.ln_rstd = c.take<float>(N);
  for (float** f : {&b.xm, &b.z, &b.xc, &b.q, &b.k, &b.v}) *f = c.take<float>(N * E);
  b.ig = c.take<float>(N * H);
  b.fg = c.take<float>(N * H);
  b.h = c.take<float>(N * E);
  b.gn_mean = c.take<float>(N * H);
  b.gn_rstd = c.take<float>(N * H);
  b.hn = c.take<float>(N * E);
  b.hg = c.take<float>(N * E);
  b.out = c.take<float>(N * C);
  b.cell_ws = c.take<std::byte>(mlstm_workspace_bytes(MlstmShape{max_batch, T, spec_.heads, D_, spec_.chunk}));
  for (float** f : {&b.d_hg, &b.d_hn, &b.d_z, &b.d_xc, &b.d_h, &b.dq, &b.dk, &b.dv, &b.tmp_e, &b.d_xm})
    *f = c.take<float>(N * E);
  b.di = c.take<float>(N * H);
  b.df = c.take<float>(N * H);
  b.d_xn = c.take<float>(N * C);
  b.tmp_c = c.take<float>(N * C);
  b.scratch = c.take<float>(block_ops_scratch_floats(static_cast<std::int64_t>(N), E_));
  b.conv_ws = c.take<std::byte>(
      causal_conv1d_backward_workspace_bytes(CausalConv1dShape{max_batch, T, E_, spec_.conv_kernel}));
  b.ln_ws = c.take<std::byte>(gpu::layernorm_backward_workspace_bytes(static_cast<std::int64_t>(N), spec_.d_model));
  return b;
}

std::size_t MlstmBlock::workspace_bytes(std::int64_t max_batch, std::int64_t T) const {
  WorkspaceCarver c;
  carve(c, max_batch, T);
  return c.bytes();
}

void MlstmBlock::forward(float* y, const float* x, std::int64_t B, std::int64_t T, std::byte* ws,
                         gpu::BlasLane lane) {
  FH_EXPECT(bound_, "MlstmBlock " + spec_.name + ": forward before bind");
  FH_EXPECT(y && x && ws && y != x, "MlstmBlock " + spec_.name + ": forward: null or aliased y, x or workspace");
  WorkspaceCarver carver(ws);
  const Buffers b = carve(carver, B, T);
  const std::int64_t N = B * T, C = spec_.d_model, E = E_, H = spec_.heads;
  const auto m = spec_.math;
  cudaStream_t s = lane.stream;
  gpu::layernorm_forward(b.xn, b.ln_mean, b.ln_rstd, x, ln_w_, ln_b_, N, C, kEps, s);
  gpu::linear_forward(b.xm, nullptr, b.xn, w_m_, nullptr, N, C, E, kId, m, lane);
  gpu::linear_forward(b.z, nullptr, b.xn, w_z_, nullptr, N, C, E, kId, m, lane);
  conv_.forward(b.xc, b.xm, CausalConv1dShape{B, T, E, spec_.conv_kernel}, true, s);
  gpu::linear_forward(b.q, nullptr, b.xc, w_q_, nullptr, N, E, E, kId, m, lane);
  gpu::linear_forward(b.k, nullptr, b.xc, w_k_, nullptr, N, E, E, kId, m, lane);
  gpu::linear_forward(b.v, nullptr, b.xm, w_v_, nullptr, N, E, E, kId, m, lane);
  gpu::linear_forward(b.ig, nullptr, b.xc, w_i_, b_i_, N, E, H, kId, m, lane);
  gpu::linear_forward(b.fg, nullptr, b.xc, w_f_, b_f_, N, E, H, kId, m, lane);
  mlstm_forward(b.h, nullptr, b.q, b.k, b.v, b.ig, b.fg, nullptr, MlstmShape{B, T, H, D_, spec_.chunk}, b.cell_ws, s);
  head_norm_forward(b.hn, b.gn_mean, b.gn_rstd, b.h, on_w_, N, H, D_, kEps, s);
  skip_gate_forward(b.hg, b.hn, b.xc, skip_, b.z, N, E, s);
  gpu::linear_forward(b.out, nullptr, b.hg, w_down_, nullptr, N, E, C, kId, m, lane);
  gpu::add(y, x, b.out, N * C, s);
}

void MlstmBlock::backward(float* dx, const float* dy, const float* x, std::int64_t B, std::int64_t T, std::byte* ws,
                          gpu::BlasLane lane) {
  FH_EXPECT(bound_, "MlstmBlock " + spec_.name + ": backward before bind");
  FH_EXPECT(dx && dy && x && ws && dx != dy && dx != x,
            "MlstmBlock " + spec_.name + ": backward: null or aliased dx, dy, x or workspace");
  WorkspaceCarver carver(ws);
  const Buffers b = carve(carver, B, T);
  const std::int64_t N = B * T, C = spec_.d_model, E = E_, H = spec_.heads;
  const auto m = spec_.math;
  cudaStream_t s = lane.stream;
  gpu::linear_backward(b.d_hg, d_w_down_, nullptr, nullptr, dy, nullptr, b.hg, w_down_, N, E, C, kId, false, m, lane);
  skip_gate_backward(b.d_hn, b.d_z, b.d_xc, d_skip_, b.d_hg, b.hn, b.xc, skip_, b.z, N, E, b.scratch, s);
  head_norm_backward(b.d_h, d_on_w_, b.d_hn, b.h, b.gn_mean, b.gn_rstd, on_w_, N, H, D_, b.scratch, s);
  mlstm_backward(b.dq, b.dk, b.dv, b.di, b.df, b.d_h, b.q, b.k, b.v, b.ig, b.fg, MlstmShape{B, T, H, D_, spec_.chunk},
                 b.cell_ws, s);
  // d_xc gathers the skip, both gates, q and k.
  gpu::linear_backward(b.tmp_e, d_w_i_, d_b_i_, nullptr, b.di, nullptr, b.xc, w_i_, N, E, H, kId, false, m, lane);
  gpu::add(b.d_xc, b.d_xc, b.tmp_e, N * E, s);
  gpu::linear_backward(b.tmp_e, d_w_f_, d_b_f_, nullptr, b.df, nullptr, b.xc, w_f_, N, E, H, kId, false, m, lane);
  gpu::add(b.d_xc, b.d_xc, b.tmp_e, N * E, s);
  gpu::linear_backward(b.tmp_e, d_w_q_, nullptr, nullptr, b.dq, nullptr, b.xc, w_q_, N, E, E, kId, false, m, lane);
  gpu::add(b.d_xc, b.d_xc, b.tmp_e, N * E, s);
  gpu::linear_backward(b.tmp_e, d_w_k_, nullptr, nullptr, b.dk, nullptr, b.xc, w_k_, N, E, E, kId, false, m, lane);
  gpu::add(b.d_xc, b.d_xc, b.tmp_e, N * E, s);
  // d_xm: v and the convolution.
  gpu::linear_backward(b.d_xm, d_w_v_, nullptr, nullptr, b.dv, nullptr, b.xm, w_v_, N, E, E, kId, false, m, lane);
  conv_.backward(b.tmp_e, b.d_xc, b.xm, CausalConv1dShape{B, T, E, spec_.conv_kernel}, true, b.conv_ws, s);
  gpu::add(b.d_xm, b.d_xm, b.tmp_e, N * E, s);
  // d_xn: both up-projections.
  gpu::linear_backward(b.d_xn, d_w_m_, nullptr, nullptr, b.d_xm, nullptr, b.xn, w_m_, N, C, E, kId, false, m, lane);
  gpu::linear_backward(b.tmp_c, d_w_z_, nullptr, nullptr, b.d_z, nullptr, b.xn, w_z_, N, C, E, kId, false, m, lane);
  gpu::add(b.d_xn, b.d_xn, b.tmp_c, N * C, s);
  gpu::layernorm_backward(dx, d_ln_w_, d_ln_b_, b.d_xn, x, b.ln_mean, b.ln_rstd, ln_w_, N, C, b.ln_ws, s);
  gpu::add(dx, dx, dy, N * C, s);  // the residual
}

std::size_t MlstmBlock::step_workspace_bytes(std::int64_t max_batch) const {
  FH_EXPECT(max_batch >= 1, "MlstmBlock " + spec_.name + ": step workspace max_batch must be >= 1");
  const auto Bn = static_cast<std::size_t>(max_batch), C = static_cast<std::size_t>(spec_.d_model),
             E = static_cast<std::size_t>(E_), H = static_cast<std::size_t>(spec_.heads);
  WorkspaceCarver c;
  c.take<float>(Bn * C);                                // xn
  for (int i = 0; i < 9; ++i) c.take<float>(Bn * E);    // xm z xc q k v h hn hg
  c.take<float>(Bn * H);                                // ig
  c.take<float>(Bn * H);                                // fg
  c.take<float>(Bn * C);                                // out
  return c.bytes();
}

void MlstmBlock::step(float* y, float* state, std::int64_t state_stride, const float* x, const std::uint8_t* reset,
                      std::int64_t B, std::byte* ws, gpu::BlasLane lane) {
  FH_EXPECT(bound_, "MlstmBlock " + spec_.name + ": step before bind");
  FH_EXPECT(y && state && x && ws && y != x, "MlstmBlock " + spec_.name + ": step: null or aliased pointer");
  const auto Bn = static_cast<std::size_t>(B), Cs = static_cast<std::size_t>(spec_.d_model),
             Es = static_cast<std::size_t>(E_), Hs = static_cast<std::size_t>(spec_.heads);
  WorkspaceCarver c(ws);
  float* xn = c.take<float>(Bn * Cs);
  float *xm = c.take<float>(Bn * Es), *z = c.take<float>(Bn * Es), *xc = c.take<float>(Bn * Es);
  float *q = c.take<float>(Bn * Es), *k = c.take<float>(Bn * Es), *v = c.take<float>(Bn * Es);
  float *h = c.take<float>(Bn * Es), *hn = c.take<float>(Bn * Es), *hg = c.take<float>(Bn * Es);
  float *ig = c.take<float>(Bn * Hs), *fg = c.take<float>(Bn * Hs);
  float* out = c.take<float>(Bn * Cs);
  const std::int64_t C = spec_.d_model, E = E_, H = spec_.heads;
  const auto m = spec_.math;
  cudaStream_t s = lane.stream;
  gpu::layernorm_forward(xn, nullptr, nullptr, x, ln_w_, ln_b_, B, C, kEps, s);
  gpu::linear_forward(xm, nullptr, xn, w_m_, nullptr, B, C, E, kId, m, lane);
  gpu::linear_forward(z, nullptr, xn, w_z_, nullptr, B, C, E, kId, m, lane);
  CausalConv1dShape cs{B, 1, E, spec_.conv_kernel};
  cs.state_stride = state_stride;
  conv_.step(xc, state, xm, reset, cs, true, s);
  gpu::linear_forward(q, nullptr, xc, w_q_, nullptr, B, E, E, kId, m, lane);
  gpu::linear_forward(k, nullptr, xc, w_k_, nullptr, B, E, E, kId, m, lane);
  gpu::linear_forward(v, nullptr, xm, w_v_, nullptr, B, E, E, kId, m, lane);
  gpu::linear_forward(ig, nullptr, xc, w_i_, b_i_, B, E, H, kId, m, lane);
  gpu::linear_forward(fg, nullptr, xc, w_f_, b_f_, B, E, H, kId, m, lane);
  mlstm_step(h, state + conv_.state_features(), q, k, v, ig, fg, reset, B, H, D_, state_stride, s);
  head_norm_forward(hn, nullptr, nullptr, h, on_w_, B, H, D_, kEps, s);
  skip_gate_forward(hg, hn, xc, skip_, z, B, E, s);
  gpu::linear_forward(out, nullptr, hg, w_down_, nullptr, B, E, C, kId, m, lane);
  gpu::add(y, x, out, B * C, s);
}

}  // namespace foxhunt::models
