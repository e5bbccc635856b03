#include "models/xlstm/slstm_block.hpp"

#include <random>
#include <string>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"
#include "gpu/layernorm.hpp"
#include "models/xlstm/block_ops.hpp"
#include "models/xlstm/param_init.hpp"
#include "models/xlstm/slstm_cell.hpp"

namespace foxhunt::models {

namespace {
constexpr float kEps = 1e-5f;
constexpr auto kId = gpu::Activation::identity;

std::int64_t mlp_width(std::int64_t C) { return ((4 * C + 2) / 3 + 7) / 8 * 8; }
}  // namespace

struct SlstmBlock::Buffers {
  float *xn, *ln_mean, *ln_rstd, *xc, *a, *bz, *gx, *h, *gn_mean, *gn_rstd, *hn, *y1, *y1n, *ln2_mean, *ln2_rstd, *mo;
  std::byte *cell_ws, *mlp_ws;
  float *d_y1n, *d_y1, *d_h, *d_gx, *d_a, *d_bz, *d_xc, *d_xn, *tmp_c, *scratch;
  std::byte *conv_ws, *ln_ws;
};

SlstmBlock::SlstmBlock(SlstmBlockSpec spec)
    : spec_(std::move(spec)),
      D_(spec_.heads >= 1 ? spec_.d_model / spec_.heads : 0),
      conv_(CausalConv1dSpec{spec_.name + ".conv", spec_.d_model, spec_.conv_kernel, true}),
      mlp_(GatedMlpSpec{spec_.name + ".mlp", spec_.d_model, mlp_width(spec_.d_model), spec_.math}) {
  FH_EXPECT(!spec_.name.empty(), "SlstmBlock: name must not be empty");
  FH_EXPECT(spec_.d_model >= 1 && spec_.heads >= 1, "SlstmBlock " + spec_.name + ": d_model and heads must be >= 1");
  FH_EXPECT(spec_.d_model % spec_.heads == 0, "SlstmBlock " + spec_.name + ": heads must divide d_model");
}

void SlstmBlock::declare(gpu::ParameterArena& arena) const {
  const std::int64_t C = spec_.d_model, H = spec_.heads;
  arena.declare(p("norm.weight"), gpu::Shape{C});
  arena.declare(p("norm.bias"), gpu::Shape{C});
  if (spec_.conv) conv_.declare(arena);
  arena.declare(p("w_if.weight"), gpu::Shape{2 * C, C});
  arena.declare(p("w_if.bias"), gpu::Shape{2 * C});
  arena.declare(p("w_zo.weight"), gpu::Shape{2 * C, C});
  arena.declare(p("w_zo.bias"), gpu::Shape{2 * C});
  arena.declare(p("R"), gpu::Shape{4, H, D_, D_});
  arena.declare(p("out_norm.weight"), gpu::Shape{C});
  arena.declare(p("norm2.weight"), gpu::Shape{C});
  arena.declare(p("norm2.bias"), gpu::Shape{C});
  mlp_.declare(arena);
}

void SlstmBlock::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  using namespace xlstm_detail;
  const std::int64_t C = spec_.d_model, H = spec_.heads;
  init_constant(arena, p("norm.weight"), 1.f, stream);
  init_constant(arena, p("norm.bias"), 0.f, stream);
  if (spec_.conv) conv_.init(arena, rng, stream);
  init_uniform(arena, p("w_if.weight"), C, rng, stream);
  init_uniform(arena, p("w_zo.weight"), C, rng, stream);
  std::vector<float> b_if(static_cast<std::size_t>(2 * C), 0.f);  // [i | f]: the forget half as init_forget_bias
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t d = 0; d < D_; ++d)
      b_if[C + h * D_ + d] = H > 1 ? 3.f + 3.f * static_cast<float>(h) / static_cast<float>(H - 1) : 3.f;
  arena.upload_param(p("w_if.bias"), b_if, stream);
  init_constant(arena, p("w_zo.bias"), 0.f, stream);
  init_uniform(arena, p("R"), D_, rng, stream);
  init_constant(arena, p("out_norm.weight"), 1.f, stream);
  init_constant(arena, p("norm2.weight"), 1.f, stream);
  init_constant(arena, p("norm2.bias"), 0.f, stream);
  mlp_.init(arena, rng, stream);
}

void SlstmBlock::bind(gpu::ParameterArena& arena) {
  FH_EXPECT(arena.finalized(), "SlstmBlock " + spec_.name + ": bind needs a finalized arena");
  auto P = [&](const char* w) { return arena.param(p(w)).as<float>(); };
  auto G = [&](const char* w) { return arena.grad(p(w)).as<float>(); };
  ln_w_ = P("norm.weight"), ln_b_ = P("norm.bias"), w_if_ = P("w_if.weight"), b_if_ = P("w_if.bias");
  w_zo_ = P("w_zo.weight"), b_zo_ = P("w_zo.bias"), R_ = P("R"), on_w_ = P("out_norm.weight");
  ln2_w_ = P("norm2.weight"), ln2_b_ = P("norm2.bias");
  d_ln_w_ = G("norm.weight"), d_ln_b_ = G("norm.bias"), d_w_if_ = G("w_if.weight"), d_b_if_ = G("w_if.bias");
  d_w_zo_ = G("w_zo.weight"), d_b_zo_ = G("w_zo.bias"), d_R_ = G("R"), d_on_w_ = G("out_norm.weight");
  d_ln2_w_ = G("norm2.weight"), d_ln2_b_ = G("norm2.bias");
  if (spec_.conv) conv_.bind(arena);
  mlp_.bind(arena);
  bound_ = true;
}

std::int64_t SlstmBlock::state_features() const { return conv_state() + slstm_state_features(spec_.heads, D_); }

SlstmBlock::Buffers SlstmBlock::carve(WorkspaceCarver& c, std::int64_t max_batch, std::int64_t T) const {
  FH_EXPECT(max_batch >= 1 && T >= 1, "SlstmBlock " + spec_.name + ": workspace needs max_batch, T >= 1");
  const std::int64_t Ni = max_batch * T;
  const auto N = static_cast<std::size_t>(Ni), C = static_cast<std::size_t>(spec_.d_model),
             H = static_cast<std::size_t>(spec_.heads);
  Buffers b{};
  b.xn = c.take<float>(N * C);
  b.ln_mean = c.take<float>(N);
  b.ln_rstd = c.take<float>(N);
  b.xc = spec_.conv ? c.take<float>(N * C) : nullptr;
  b.a = c.take<float>(N * 2 * C);
  b.bz = c.take<float>(N * 2 * C);
  b.gx = c.take<float>(N * 4 * C);
  b.h = c.take<float>(N * C);
  b.gn_mean = c.take<float>(N * H);
  b.gn_rstd = c.take<float>(N * H);
  b.hn = c.take<float>(N * C);
  b.y1 = c.take<float>(N * C);
  b.y1n = c.take<float>(N * C);
  b.ln2_mean = c.take<float>(N);
  b.ln2_rstd = c.take<float>(N);
  b.mo = c.take<float>(N * C);
  b.cell_ws = c.take<std::byte>(slstm_workspace_bytes(SlstmShape{max_batch, T, spec_.heads, D_}));
  b.mlp_ws = c.take<std::byte>(mlp_.workspace_bytes(Ni, false));
  b.d_y1n = c.take<float>(N * C);
  b.d_y1 = c.take<float>(N * C);
  b.d_h = c.take<float>(N * C);
  b.d_gx = c.take<float>(N * 4 * C);
  b.d_a = c.take<float>(N * 2 * C);
  b.d_bz = c.take<float>(N * 2 * C);
  b.d_xc = c.take<float>(N * C);
  b.d_xn = c.take<float>(N * C);
  b.tmp_c = c.take<float>(N * C);
  b.scratch = c.take<float>(block_ops_scratch_floats(Ni, spec_.d_model));
  b.conv_ws = spec_.conv ? c.take<std::byte>(causal_conv1d_backward_workspace_bytes(
                               CausalConv1dShape{max_batch, T, spec_.d_model, spec_.conv_kernel}))
                         : nullptr;
  b.ln_ws = c.take<std::byte>(gpu::layernorm_backward_workspace_bytes(Ni, spec_.d_model));
  return b;
}

std::size_t SlstmBlock::workspace_bytes(std::int64_t max_batch, std::int64_t T) const {
  WorkspaceCarver c;
  carve(c, max_batch, T);
  return c.bytes();
}

void SlstmBlock::forward(float* y, const float* x, std::int64_t B, std::int64_t T, std::byte* ws,
                         gpu::BlasLane lane) {
  FH_EXPECT(bound_, "SlstmBlock " + spec_.name + ": forward before bind");
  FH_EXPECT(y && x && ws && y != x, "SlstmBlock " + spec_.name + ": forward: null or aliased y, x or workspace");
  WorkspaceCarver carver(ws);
  const Buffers b = carve(carver, B, T);
  const std::int64_t N = B * T, C = spec_.d_model, H = spec_.heads;
  const auto m = spec_.math;
  cudaStream_t s = lane.stream;
  gpu::layernorm_forward(b.xn, b.ln_mean, b.ln_rstd, x, ln_w_, ln_b_, N, C, kEps, s);
  const float* xc = b.xn;
  if (spec_.conv) {
    conv_.forward(b.xc, b.xn, CausalConv1dShape{B, T, C, spec_.conv_kernel}, true, s);
    xc = b.xc;
  }
  gpu::linear_forward(b.a, nullptr, xc, w_if_, b_if_, N, C, 2 * C, kId, m, lane);
  gpu::linear_forward(b.bz, nullptr, b.xn, w_zo_, b_zo_, N, C, 2 * C, kId, m, lane);
  pack_halves(b.gx, b.a, b.bz, N, 2 * C, s);
  slstm_forward(b.h, nullptr, b.gx, R_, nullptr, nullptr, SlstmShape{B, T, H, D_}, b.cell_ws, s);
  head_norm_forward(b.hn, b.gn_mean, b.gn_rstd, b.h, on_w_, N, H, D_, kEps, s);
  gpu::add(b.y1, x, b.hn, N * C, s);
  gpu::layernorm_forward(b.y1n, b.ln2_mean, b.ln2_rstd, b.y1, ln2_w_, ln2_b_, N, C, kEps, s);
  mlp_.forward(b.mo, b.y1n, N, false, Workspace{b.mlp_ws, N, false}, lane);
  gpu::add(y, b.y1, b.mo, N * C, s);
}

void SlstmBlock::backward(float* dx, const float* dy, const float* x, std::int64_t B, std::int64_t T, std::byte* ws,
                          gpu::BlasLane lane) {
  FH_EXPECT(bound_, "SlstmBlock " + spec_.name + ": backward before bind");
  FH_EXPECT(dx && dy && x && ws && dx != dy && dx != x,
            "SlstmBlock " + spec_.name + ": backward: null or aliased dx, dy, x or workspace");
  WorkspaceCarver carver(ws);
  const Buffers b = carve(carver, B, T);
  const std::int64_t N = B * T, C = spec_.d_model, H = spec_.heads;
  const auto m = spec_.math;
  cudaStream_t s = lane.stream;
  mlp_.backward(b.d_y1n, dy, b.y1n, N, Workspace{b.mlp_ws, N, false}, lane, nullptr);
  gpu::layernorm_backward(b.d_y1, d_ln2_w_, d_ln2_b_, b.d_y1n, b.y1, b.ln2_mean, b.ln2_rstd, ln2_w_, N, C, b.ln_ws, s);
  gpu::add(b.d_y1, b.d_y1, dy, N * C, s);
  head_norm_backward(b.d_h, d_on_w_, b.d_y1, b.h, b.gn_mean, b.gn_rstd, on_w_, N, H, D_, b.scratch, s);
  slstm_backward(b.d_gx, d_R_, b.d_h, R_, SlstmShape{B, T, H, D_}, b.cell_ws, s);
  unpack_halves(b.d_a, b.d_bz, b.d_gx, N, 2 * C, s);
  const float* xc = spec_.conv ? b.xc : b.xn;
  gpu::linear_backward(b.d_xc, d_w_if_, d_b_if_, nullptr, b.d_a, nullptr, xc, w_if_, N, C, 2 * C, kId, false, m, lane);
  gpu::linear_backward(b.d_xn, d_w_zo_, d_b_zo_, nullptr, b.d_bz, nullptr, b.xn, w_zo_, N, C, 2 * C, kId, false, m,
                       lane);
  if (spec_.conv)
    conv_.backward(b.tmp_c, b.d_xc, b.xn, CausalConv1dShape{B, T, C, spec_.conv_kernel}, true, b.conv_ws, s);
  gpu::add(b.d_xn, b.d_xn, spec_.conv ? b.tmp_c : b.d_xc, N * C, s);
  gpu::layernorm_backward(dx, d_ln_w_, d_ln_b_, b.d_xn, x, b.ln_mean, b.ln_rstd, ln_w_, N, C, b.ln_ws, s);
  gpu::add(dx, dx, b.d_y1, N * C, s);  // the first residual
}

std::size_t SlstmBlock::step_workspace_bytes(std::int64_t max_batch) const {
  FH_EXPECT(max_batch >= 1, "SlstmBlock " + spec_.name + ": step workspace max_batch must be >= 1");
  const auto Bn = static_cast<std::size_t>(max_batch), C = static_cast<std::size_t>(spec_.d_model);
  WorkspaceCarver c;
  c.take<float>(Bn * C);      // xn
  c.take<float>(Bn * C);      // xc
  c.take<float>(Bn * 2 * C);  // a
  c.take<float>(Bn * 2 * C);  // bz
  c.take<float>(Bn * 4 * C);  // gx
  c.take<float>(Bn * C);      // h
  c.take<float>(Bn * C);      // hn
  c.take<float>(Bn * C);      // y1
  c.take<float>(Bn * C);      // y1n
  c.take<float>(Bn * C);      // mo
  c.take<std::byte>(mlp_.workspace_bytes(max_batch, false));
  return c.bytes();
}

void SlstmBlock::step(float* y, float* state, std::int64_t state_stride, const float* x, const std::uint8_t* reset,
                      std::int64_t B, std::byte* ws, gpu::BlasLane lane) {
  FH_EXPECT(bound_, "SlstmBlock " + spec_.name + ": step before bind");
  FH_EXPECT(y && state && x && ws && y != x, "SlstmBlock " + spec_.name + ": step: null or aliased pointer");
  const auto Bn = static_cast<std::size_t>(B), Cs = static_cast<std::size_t>(spec_.d_model);
  WorkspaceCarver c(ws);
  float *xn = c.take<float>(Bn * Cs), *xc = c.take<float>(Bn * Cs);
  float *a = c.take<float>(Bn * 2 * Cs), *bz = c.take<float>(Bn * 2 * Cs), *gx = c.take<float>(Bn * 4 * Cs);
  float *h = c.take<float>(Bn * Cs), *hn = c.take<float>(Bn * Cs), *y1 = c.take<float>(Bn * Cs);
  float *y1n = c.take<float>(Bn * Cs), *mo = c.take<float>(Bn * Cs);
  std::byte* mlp_ws = c.take<std::byte>(mlp_.workspace_bytes(B, false));
  const std::int64_t C = spec_.d_model, H = spec_.heads;
  const auto m = spec_.math;
  cudaStream_t s = lane.stream;
  gpu::layernorm_forward(xn, nullptr, nullptr, x, ln_w_, ln_b_, B, C, kEps, s);
  const float* xin = xn;
  if (spec_.conv) {
    CausalConv1dShape cs{B, 1, C, spec_.conv_kernel};
    cs.state_stride = state_stride;
    conv_.step(xc, state, xn, reset, cs, true, s);
    xin = xc;
  }
  gpu::linear_forward(a, nullptr, xin, w_if_, b_if_, B, C, 2 * C, kId, m, lane);
  gpu::linear_forward(bz, nullptr, xn, w_zo_, b_zo_, B, C, 2 * C, kId, m, lane);
  pack_halves(gx, a, bz, B, 2 * C, s);
  slstm_step(h, state + conv_state(), gx, R_, reset, B, H, D_, state_stride, s);
  head_norm_forward(hn, nullptr, nullptr, h, on_w_, B, H, D_, kEps, s);
  gpu::add(y1, x, hn, B * C, s);
  gpu::layernorm_forward(y1n, nullptr, nullptr, y1, ln2_w_, ln2_b_, B, C, kEps, s);
  mlp_.forward(mo, y1n, B, false, Workspace{mlp_ws, B, false}, lane);
  gpu::add(y, y1, mo, B * C, s);
}

}  // namespace foxhunt::models
