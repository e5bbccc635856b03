#include "models/mamba2/mamba2_layer.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu/activation.cuh"
#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "models/blocks/column_sum.cuh"
#include "models/blocks/rms_norm.hpp"
#include "models/mamba2/ssd.hpp"

namespace foxhunt::models {
namespace {

constexpr auto kIdentity = gpu::Activation::identity;

// dt (rows, H) = softplus(dt_raw + dt_bias), dt_raw the columns of zxbcdt (row stride ld) from
// its pointer on; A (H) = -exp(A_log).
__global__ void dt_forward_kernel(float* __restrict__ dt, float* __restrict__ a, const float* __restrict__ dt_raw,
                                  std::int64_t ld, const float* __restrict__ dt_bias, const float* __restrict__ a_log,
                                  std::int64_t rows, std::int64_t H) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < rows * H;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / H, h = i - r * H;
    dt[i] = gpu::activate<gpu::Activation::softplus>(dt_raw[r * ld + h] + dt_bias[h], 1.f);
    if (i < H) a[i] = -expf(a_log[i]);
  }
}

// y (rows, H * P) = y_ssd + D[h] x.
__global__ void skip_forward_kernel(float* __restrict__ y, const float* __restrict__ y_ssd, const float* __restrict__ x,
                                    const float* __restrict__ d, std::int64_t n, std::int64_t H, std::int64_t P) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t h = (i / P) % H;
    y[i] = fmaf(d[h], x[i], y_ssd[i]);
  }
}

// dx (rows, H * P) = dx_ssd + D[h] d_y.
__global__ void skip_backward_kernel(float* __restrict__ dx, const float* __restrict__ dx_ssd,
                                     const float* __restrict__ d_y, const float* __restrict__ d, std::int64_t n,
                                     std::int64_t H, std::int64_t P) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t h = (i / P) % H;
    dx[i] = fmaf(d[h], d_y[i], dx_ssd[i]);
  }
}

// d dt_raw (rows, H), row stride ld (into d zxbcdt) = ddt ⊙ softplus'(dt_raw + dt_bias);
// dA_log (H) = dA ⊙ A (A = -exp(A_log)).
__global__ void dt_backward_kernel(float* __restrict__ d_dt_raw, float* __restrict__ d_a_log,
                                   const float* __restrict__ ddt, const float* __restrict__ dt_raw, std::int64_t ld,
                                   const float* __restrict__ dt_bias, const float* __restrict__ da,
                                   const float* __restrict__ a, std::int64_t rows, std::int64_t H) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < rows * H;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / H, h = i - r * H;
    d_dt_raw[r * ld + h] = ddt[i] * gpu::activate_grad<gpu::Activation::softplus>(dt_raw[r * ld + h] + dt_bias[h], 1.f);
    if (i < H) d_a_log[i] = da[i] * a[i];
  }
}

// dD's summand at (row r, head h): sum_p d_y x over the head's P channels.
struct SkipGradTerm {
  const float *d_y, *x;
  std::int64_t H, P;
  __device__ float operator()(std::int64_t r, std::int64_t h) const {
    const float* dy = d_y + (r * H + h) * P;
    const float* xv = x + (r * H + h) * P;
    float acc = 0.f;
    for (std::int64_t p = 0; p < P; ++p) acc = fmaf(dy[p], xv[p], acc);
    return acc;
  }
};
// d dt_bias's summand at (r, h): d dt_raw, read back from d zxbcdt.
struct DtBiasGradTerm {
  const float* d_dt_raw;
  std::int64_t ld;
  __device__ float operator()(std::int64_t r, std::int64_t h) const { return d_dt_raw[r * ld + h]; }
};

std::vector<float> uniform(std::size_t n, float lo, float hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

}  // namespace

Mamba2Layer::Mamba2Layer(Mamba2LayerSpec spec)
    : spec_(std::move(spec)),
      conv_(CausalConv1dSpec{spec_.name + ".conv", spec_.expand * spec_.d_model + 2 * spec_.groups * spec_.d_state,
                             spec_.conv_kernel, true}) {
  const std::string who = "Mamba2Layer " + spec_.name + ": ";
  FH_EXPECT(!spec_.name.empty(), "Mamba2Layer: name must not be empty");
  FH_EXPECT(spec_.d_model >= 1 && spec_.expand >= 1 && spec_.d_state >= 1 && spec_.head_dim >= 1,
            who + "d_model, expand, d_state and head_dim must be >= 1");
  FH_EXPECT(d_inner() % spec_.head_dim == 0, who + "expand * d_model (" + std::to_string(d_inner()) +
                                                 ") must be a multiple of head_dim (" + std::to_string(spec_.head_dim) +
                                                 ")");
  FH_EXPECT(spec_.groups >= 1 && heads() % spec_.groups == 0,
            who + "groups must be >= 1 and divide the heads (" + std::to_string(heads()) + ")");
  FH_EXPECT(spec_.chunk >= 1 && spec_.chunk <= kSsdMaxChunk,
            who + "chunk must be in [1, " + std::to_string(kSsdMaxChunk) + "], got " + std::to_string(spec_.chunk));
  FH_EXPECT(spec_.sequence_length >= 1, who + "sequence_length must be >= 1");
  FH_EXPECT(spec_.eps > 0.f, who + "eps must be > 0");
  FH_EXPECT(spec_.dt_min > 0.f && spec_.dt_max >= spec_.dt_min, who + "need 0 < dt_min <= dt_max");
}

std::int64_t Mamba2Layer::range_begin(int r) const {
  const std::int64_t gn = spec_.groups * spec_.d_state;
  return r == 0 ? 0 : (r == 1 ? d_inner() : d_inner() + gn);
}
std::int64_t Mamba2Layer::range_width(int r) const { return r == 0 ? d_inner() : spec_.groups * spec_.d_state; }

void Mamba2Layer::declare(gpu::ParameterArena& arena) const {
  const std::int64_t E = d_inner(), H = heads();
  arena.declare(in_proj_name(), gpu::Shape{in_proj_features(), spec_.d_model});
  conv_.declare(arena);
  arena.declare(dt_bias_name(), gpu::Shape{H});
  arena.declare(a_log_name(), gpu::Shape{H});
  arena.declare(d_name(), gpu::Shape{H});
  arena.declare(norm_name(), gpu::Shape{E});
  arena.declare(out_proj_name(), gpu::Shape{spec_.d_model, E});
}

void Mamba2Layer::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  const std::int64_t E = d_inner(), H = heads(), D = spec_.d_model;
  const float b_in = 1.f / std::sqrt(static_cast<float>(D)), b_out = 1.f / std::sqrt(static_cast<float>(E));
  arena.upload_param(in_proj_name(), uniform(static_cast<std::size_t>(in_proj_features() * D), -b_in, b_in, rng),
                     stream);
  conv_.init(arena, rng, stream);
  // dt log-uniform in [dt_min, dt_max], floored; dt_bias = softplus^-1(dt) = dt + log(-expm1(-dt)).
  std::vector<float> dt_bias(static_cast<std::size_t>(H)), a_log(static_cast<std::size_t>(H));
  std::uniform_real_distribution<double> u01(0.0, 1.0), a_init(1.0, 16.0);
  const double lo = std::log(static_cast<double>(spec_.dt_min)), hi = std::log(static_cast<double>(spec_.dt_max));
  for (auto& v : dt_bias) {
    const double dt = std::max(std::exp(lo + u01(rng) * (hi - lo)), static_cast<double>(spec_.dt_init_floor));
    v = static_cast<float>(dt + std::log(-std::expm1(-dt)));
  }
  for (auto& v : a_log) v = static_cast<float>(std::log(a_init(rng)));
  arena.upload_param(dt_bias_name(), dt_bias, stream);
  arena.upload_param(a_log_name(), a_log, stream);
  arena.upload_param(d_name(), std::vector<float>(static_cast<std::size_t>(H), 1.f), stream);
  arena.upload_param(norm_name(), std::vector<float>(static_cast<std::size_t>(E), 1.f), stream);
  arena.upload_param(out_proj_name(), uniform(static_cast<std::size_t>(D * E), -b_out, b_out, rng), stream);
}

void Mamba2Layer::bind(gpu::ParameterArena& arena) {
  FH_EXPECT(arena.finalized(), "Mamba2Layer " + spec_.name + ": bind needs a finalized arena");
  auto p = [&](const std::string& n) { return arena.param(n).as<float>(); };
  auto g = [&](const std::string& n) { return arena.grad(n).as<float>(); };
  w_in_ = p(in_proj_name()), dw_in_ = g(in_proj_name());
  dt_bias_ = p(dt_bias_name()), d_dt_bias_ = g(dt_bias_name());
  a_log_ = p(a_log_name()), d_a_log_ = g(a_log_name());
  d_ = p(d_name()), d_d_ = g(d_name());
  norm_w_ = p(norm_name()), d_norm_w_ = g(norm_name());
  w_out_ = p(out_proj_name()), dw_out_ = g(out_proj_name());
  conv_.bind(arena);
  bound_ = true;
}

Mamba2Layer::Buffers Mamba2Layer::carve(WorkspaceCarver& c, std::int64_t max_batch) const {
  const std::int64_t T = spec_.sequence_length, rows = T * max_batch, E = d_inner(), H = heads(),
                     GN = spec_.groups * spec_.d_state, F = in_proj_features();
  auto n = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  Buffers b;
  b.zxbcdt = c.take<float>(n(rows * F));
  b.x = c.take<float>(n(rows * E));
  b.bm = c.take<float>(n(rows * GN));
  b.cm = c.take<float>(n(rows * GN));
  b.dt = c.take<float>(n(rows * H));
  b.a = c.take<float>(n(H));
  b.y_ssd = c.take<float>(n(rows * E));
  b.y = c.take<float>(n(rows * E));
  b.rstd = c.take<float>(n(rows));
  b.y_norm = c.take<float>(n(rows * E));
  b.ssd = c.take<std::byte>(
      ssd_workspace_bytes(SsdShape{max_batch, T, H, spec_.head_dim, spec_.groups, spec_.d_state, spec_.chunk}));
  b.d_y_norm = c.take<float>(n(rows * E));
  b.d_y = c.take<float>(n(rows * E));
  b.dx_ssd = c.take<float>(n(rows * E));
  b.dx = c.take<float>(n(rows * E));
  b.ddt = c.take<float>(n(rows * H));
  b.da = c.take<float>(n(H));
  b.dbm = c.take<float>(n(rows * GN));
  b.dcm = c.take<float>(n(rows * GN));
  b.d_zxbcdt = c.take<float>(n(rows * F));
  b.conv_ws = c.take<std::byte>(
      causal_conv1d_backward_workspace_bytes(CausalConv1dShape{max_batch, T, std::max(E, GN), spec_.conv_kernel}));
  b.norm_ws = c.take<std::byte>(rms_norm_backward_workspace_bytes(rows, E));
  b.sums = c.take<float>(blocks_detail::column_sum_floats(rows, H));
  return b;
}

std::size_t Mamba2Layer::workspace_bytes(std::int64_t max_batch, bool) const {
  FH_EXPECT(max_batch >= 1, "Mamba2Layer " + spec_.name + ": workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

void Mamba2Layer::check_batch(std::int64_t batch, const Workspace& ws, const char* what) const {
  FH_EXPECT(bound_, "Mamba2Layer " + spec_.name + ": " + what + " before bind");
  FH_EXPECT(ws.data != nullptr, "Mamba2Layer " + spec_.name + ": " + what + ": the workspace has no memory");
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Mamba2Layer " + spec_.name + ": " + what + ": batch must be in [1, " +
                                                     std::to_string(ws.max_batch) + "], got " + std::to_string(batch));
}

void Mamba2Layer::forward(float* out, const float* in, std::int64_t batch, bool, const Workspace& ws,
                          gpu::BlasLane lane) {
  check_batch(batch, ws, "forward");
  FH_EXPECT(out != nullptr && in != nullptr, "Mamba2Layer " + spec_.name + ": forward: null out or in");
  WorkspaceCarver carver(ws.data);
  const Buffers b = carve(carver, ws.max_batch);
  const std::int64_t T = spec_.sequence_length, rows = batch * T, E = d_inner(), H = heads(), P = spec_.head_dim,
                     F = in_proj_features(), K = spec_.conv_kernel, D = spec_.d_model;
  const cudaStream_t s = lane.stream;
  gpu::linear_forward(b.zxbcdt, nullptr, in, w_in_, nullptr, rows, D, F, kIdentity, spec_.math, lane);
  float* conv_out[3] = {b.x, b.bm, b.cm};
  for (int r = 0; r < 3; ++r) {
    const std::int64_t c0 = range_begin(r);
    const CausalConv1dShape shape{batch, T, range_width(r), K, F, 0, 0};
    causal_conv1d_forward(conv_out[r], b.zxbcdt + E + c0, conv_.weight() + c0 * K, conv_.bias() + c0, shape, true, s);
  }
  dt_forward_kernel<<<gpu::grid_stride_blocks(rows * H), gpu::kBlock, 0, s>>>(b.dt, b.a, b.zxbcdt + E + conv_dim(), F,
                                                                              dt_bias_, a_log_, rows, H);
  FH_CHECK_LAUNCH();
  const SsdShape ssd{batch, T, H, P, spec_.groups, spec_.d_state, spec_.chunk};
  ssd_forward(b.y_ssd, nullptr, b.x, b.dt, b.a, b.bm, b.cm, ssd, b.ssd, s);
  skip_forward_kernel<<<gpu::grid_stride_blocks(rows * E), gpu::kBlock, 0, s>>>(b.y, b.y_ssd, b.x, d_, rows * E, H, P);
  FH_CHECK_LAUNCH();
  rms_norm_gated_forward(b.y_norm, b.rstd, b.y, b.zxbcdt, F, norm_w_, rows, E, spec_.eps, s);
  gpu::linear_forward(out, nullptr, b.y_norm, w_out_, nullptr, rows, E, D, kIdentity, spec_.math, lane);
}

void Mamba2Layer::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                           gpu::BlasLane lane, const SideLane* side) {
  check_batch(batch, ws, "backward");
  FH_EXPECT(d_out != nullptr && in != nullptr, "Mamba2Layer " + spec_.name + ": backward: null d_out or in");
  WorkspaceCarver carver(ws.data);
  const Buffers b = carve(carver, ws.max_batch);
  const std::int64_t T = spec_.sequence_length, rows = batch * T, E = d_inner(), H = heads(), P = spec_.head_dim,
                     F = in_proj_features(), K = spec_.conv_kernel, D = spec_.d_model;
  const cudaStream_t s = lane.stream;
  gpu::linear_backward(b.d_y_norm, dw_out_, nullptr, nullptr, d_out, nullptr, b.y_norm, w_out_, rows, E, D, kIdentity,
                       false, spec_.math, lane);
  // d y and d z (into d zxbcdt's z columns) through the gated norm.
  rms_norm_gated_backward(b.d_y, b.d_zxbcdt, F, d_norm_w_, b.d_y_norm, b.y, b.zxbcdt, F, norm_w_, b.rstd, rows, E,
                          b.norm_ws, s);
  const SsdShape ssd{batch, T, H, P, spec_.groups, spec_.d_state, spec_.chunk};
  ssd_backward(b.dx_ssd, b.ddt, b.da, b.dbm, b.dcm, b.d_y, b.x, b.dt, b.a, b.bm, b.cm, ssd, b.ssd, s);
  skip_backward_kernel<<<gpu::grid_stride_blocks(rows * E), gpu::kBlock, 0, s>>>(b.dx, b.dx_ssd, b.d_y, d_, rows * E, H,
                                                                                 P);
  FH_CHECK_LAUNCH();
  blocks_detail::column_sum(d_d_, rows, H, SkipGradTerm{b.d_y, b.x, H, P}, b.sums, s);
  float* d_dt_raw = b.d_zxbcdt + E + conv_dim();
  dt_backward_kernel<<<gpu::grid_stride_blocks(rows * H), gpu::kBlock, 0, s>>>(
      d_dt_raw, d_a_log_, b.ddt, b.zxbcdt + E + conv_dim(), F, dt_bias_, b.da, b.a, rows, H);
  FH_CHECK_LAUNCH();
  blocks_detail::column_sum(d_dt_bias_, rows, H, DtBiasGradTerm{d_dt_raw, F}, b.sums, s);
  const float* conv_dy[3] = {b.dx, b.dbm, b.dcm};
  for (int r = 0; r < 3; ++r) {
    const std::int64_t c0 = range_begin(r);
    const CausalConv1dShape shape{batch, T, range_width(r), K, F, 0, 0};
    causal_conv1d_backward(b.d_zxbcdt + E + c0, conv_.weight_grad() + c0 * K, conv_.bias_grad() + c0, conv_dy[r],
                           b.zxbcdt + E + c0, conv_.weight() + c0 * K, conv_.bias() + c0, shape, true, b.conv_ws, s);
  }
  gpu::linear_backward(d_in, dw_in_, nullptr, nullptr, b.d_zxbcdt, nullptr, in, w_in_, rows, D, F, kIdentity, false,
                       spec_.math, lane);
  if (side != nullptr) {  // Module::backward's contract: the caller's side work is joined too
    FH_CHECK(cudaEventRecord(side->join, side->lane.stream));
    FH_CHECK(cudaStreamWaitEvent(lane.stream, side->join, 0));
  }
}

Mamba2Layer::StepBuffers Mamba2Layer::carve_step(WorkspaceCarver& c, std::int64_t max_batch) const {
  const std::int64_t E = d_inner(), H = heads(), GN = spec_.groups * spec_.d_state;
  auto n = [&](std::int64_t v) { return static_cast<std::size_t>(v * max_batch); };
  StepBuffers b;
  b.zxbcdt = c.take<float>(n(in_proj_features()));
  b.x = c.take<float>(n(E));
  b.bm = c.take<float>(n(GN));
  b.cm = c.take<float>(n(GN));
  b.dt = c.take<float>(n(H));
  b.a = c.take<float>(static_cast<std::size_t>(H));
  b.y_ssd = c.take<float>(n(E));
  b.y = c.take<float>(n(E));
  b.y_norm = c.take<float>(n(E));
  return b;
}

std::size_t Mamba2Layer::step_workspace_bytes(std::int64_t max_batch) const {
  FH_EXPECT(max_batch >= 1, "Mamba2Layer " + spec_.name + ": step workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve_step(c, max_batch);
  return c.bytes();
}

void Mamba2Layer::step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
                       const Workspace& ws, gpu::BlasLane lane) {
  step_strided(out, state, state_features(), in, reset, batch, ws, lane);
}

void Mamba2Layer::step_strided(float* out, float* state, std::int64_t state_stride, const float* in,
                               const std::uint8_t* reset, std::int64_t batch, const Workspace& ws, gpu::BlasLane lane) {
  check_batch(batch, ws, "step");
  FH_EXPECT(out != nullptr && state != nullptr && in != nullptr, "Mamba2Layer " + spec_.name + ": step: null pointer");
  FH_EXPECT(state_stride >= state_features(),
            "Mamba2Layer " + spec_.name + ": step: state_stride must be >= " + std::to_string(state_features()));
  WorkspaceCarver carver(ws.data);
  const StepBuffers b = carve_step(carver, ws.max_batch);
  const std::int64_t E = d_inner(), H = heads(), P = spec_.head_dim, F = in_proj_features(), K = spec_.conv_kernel,
                     D = spec_.d_model;
  const cudaStream_t s = lane.stream;
  gpu::linear_forward(b.zxbcdt, nullptr, in, w_in_, nullptr, batch, D, F, kIdentity, spec_.math, lane);
  float* conv_out[3] = {b.x, b.bm, b.cm};
  for (int r = 0; r < 3; ++r) {
    const std::int64_t c0 = range_begin(r);
    const CausalConv1dShape shape{batch, 1, range_width(r), K, F, 0, state_stride};
    causal_conv1d_step(conv_out[r], state + c0 * (K - 1), b.zxbcdt + E + c0, conv_.weight() + c0 * K, conv_.bias() + c0,
                       reset, shape, true, s);
  }
  dt_forward_kernel<<<gpu::grid_stride_blocks(batch * H), gpu::kBlock, 0, s>>>(b.dt, b.a, b.zxbcdt + E + conv_dim(), F,
                                                                               dt_bias_, a_log_, batch, H);
  FH_CHECK_LAUNCH();
  // The SSD state of each row, in place inside the row's state.
  const SsdShape ssd{batch, 1, H, P, spec_.groups, spec_.d_state, spec_.chunk};
  ssd_step(b.y_ssd, state + conv_state_features(), b.x, b.dt, b.a, b.bm, b.cm, reset, ssd, state_stride, s);
  skip_forward_kernel<<<gpu::grid_stride_blocks(batch * E), gpu::kBlock, 0, s>>>(b.y, b.y_ssd, b.x, d_, batch * E, H,
                                                                                 P);
  FH_CHECK_LAUNCH();
  rms_norm_gated_forward(b.y_norm, nullptr, b.y, b.zxbcdt, F, norm_w_, batch, E, spec_.eps, s);
  gpu::linear_forward(out, nullptr, b.y_norm, w_out_, nullptr, batch, E, D, kIdentity, spec_.math, lane);
}

}  // namespace foxhunt::models
