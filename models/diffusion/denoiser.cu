#include "models/diffusion/denoiser.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::models {
namespace {

// Double-precision angles: t f_k reaches T radians, where f32 sin would lose digits.
__global__ void timestep_embedding_kernel(float* __restrict__ e, const std::int32_t* __restrict__ t, std::int64_t B,
                                          std::int64_t E) {
  const std::int64_t half = E / 2, n = B * E;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / E, j = i % E, k = j % half;
    const double f = exp(-log(10000.0) * static_cast<double>(k) / static_cast<double>(half));
    const double angle = static_cast<double>(t[b]) * f;
    e[i] = static_cast<float>(j < half ? sin(angle) : cos(angle));
  }
}

std::size_t n_of(std::int64_t a, std::int64_t b) { return static_cast<std::size_t>(a * b); }

// Row-block copy between (B, *) arrays of different row widths (device to device, capturable).
void copy_columns(float* dst, std::int64_t dst_width, const float* src, std::int64_t src_width, std::int64_t cols,
                  std::int64_t batch, cudaStream_t s) {
  FH_CHECK(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(dst_width) * sizeof(float), src,
                             static_cast<std::size_t>(src_width) * sizeof(float),
                             static_cast<std::size_t>(cols) * sizeof(float), static_cast<std::size_t>(batch),
                             cudaMemcpyDeviceToDevice, s));
}

}  // namespace

void timestep_embedding(float* e, const std::int32_t* t, std::int64_t batch, std::int64_t embed, cudaStream_t stream) {
  if (batch == 0) return;
  timestep_embedding_kernel<<<gpu::grid_stride_blocks(batch * embed), gpu::kBlock, 0, stream>>>(e, t, batch, embed);
  FH_CHECK_LAUNCH();
}

Denoiser::Denoiser(DenoiserSpec spec) : spec_(std::move(spec)) {
  const DenoiserSpec& s = spec_;
  FH_EXPECT(s.dim >= 1 && s.context >= 0 && s.hidden >= 1 && s.blocks >= 1 && s.expand >= 1,
            "Denoiser " + s.name + ": dim, hidden, blocks and expand must be >= 1 and context >= 0");
  FH_EXPECT(s.embed >= 2 && s.embed % 2 == 0, "Denoiser " + s.name + ": embed must be even and >= 2");
  const auto dense = [&](const std::string& n, std::int64_t in, std::int64_t out, gpu::Activation act) {
    DenseSpec d;
    d.name = s.name + "." + n;
    d.in = in;
    d.out = out;
    d.act = act;
    d.math = s.math;
    layers_.emplace_back(d);
  };
  dense("time.0", s.embed, s.hidden, gpu::Activation::gelu);
  dense("time.1", s.hidden, s.hidden, gpu::Activation::identity);
  dense("in", s.dim + s.context, s.hidden, gpu::Activation::identity);
  for (std::int64_t l = 0; l < s.blocks; ++l) {
    dense("blocks." + std::to_string(l) + ".fc1", s.hidden, s.hidden * s.expand, gpu::Activation::gelu);
    dense("blocks." + std::to_string(l) + ".fc2", s.hidden * s.expand, s.hidden, gpu::Activation::identity);
  }
  dense("out", s.hidden, s.dim, gpu::Activation::identity);
}

void Denoiser::declare(gpu::ParameterArena& arena) const {
  for (const Dense& d : layers_) d.declare(arena);
}

void Denoiser::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  for (const Dense& d : layers_) d.init(arena, rng, stream);
  const Dense& o = layers_.back();
  const std::vector<float> w(n_of(spec_.dim, spec_.hidden), 0.f), b(static_cast<std::size_t>(spec_.dim), 0.f);
  arena.upload_param(o.weight_name(), w, stream);
  arena.upload_param(o.bias_name(), b, stream);
  FH_CHECK(cudaStreamSynchronize(stream));  // set-up: the host vectors die on return
}

void Denoiser::bind(gpu::ParameterArena& arena) {
  for (Dense& d : layers_) d.bind(arena);
}

Denoiser::Buffers Denoiser::carve(WorkspaceCarver& c, std::int64_t B) const {
  const DenoiserSpec& s = spec_;
  const std::int64_t H = s.hidden, X = s.hidden * s.expand, Din = s.dim + s.context;
  Buffers b;
  b.feat = c.take<float>(n_of(B, s.embed));
  b.tpre = c.take<float>(n_of(B, H));
  b.temb = c.take<float>(n_of(B, H));
  b.xin = c.take<float>(n_of(B, Din));
  for (std::int64_t l = 0; l <= s.blocks; ++l) b.h.push_back(c.take<float>(n_of(B, H)));
  for (std::int64_t l = 0; l < s.blocks; ++l) b.u.push_back(c.take<float>(n_of(B, H)));
  for (std::int64_t l = 0; l < s.blocks; ++l) b.a.push_back(c.take<float>(n_of(B, X)));
  for (const Dense& d : layers_) b.aux.push_back(c.take<std::byte>(d.aux_bytes(B)));
  const std::int64_t widest = std::max({H, X, s.dim});
  b.dpre = c.take<float>(n_of(B, widest));
  b.dh = c.take<float>(n_of(B, H));
  b.du = c.take<float>(n_of(B, H));
  b.da = c.take<float>(n_of(B, X));
  b.dtemb = c.take<float>(n_of(B, H));
  b.dtpre = c.take<float>(n_of(B, H));
  b.dxin = c.take<float>(n_of(B, Din));
  return b;
}

std::size_t Denoiser::workspace_bytes(std::int64_t max_batch) const {
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

const float* Denoiser::last_hidden(const Workspace& ws) const {
  WorkspaceCarver c(ws.data);
  return carve(c, ws.max_batch).h.back();
}

void Denoiser::forward(float* eps, const float* x_t, const float* ctx, const std::int32_t* t, std::int64_t batch,
                       const Workspace& ws, gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Denoiser " + spec_.name + ": batch outside [1, max_batch]");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const cudaStream_t s = lane.stream;
  const std::int64_t D = spec_.dim, Dc = spec_.context, Din = D + Dc, H = spec_.hidden;
  timestep_embedding(b.feat, t, batch, spec_.embed, s);
  time0().forward_aux(b.tpre, b.aux[0], b.feat, batch, true, lane);
  time1().forward_aux(b.temb, b.aux[1], b.tpre, batch, true, lane);
  // [x_t | ctx] in the workspace: the input layer's backward reads its input there.
  copy_columns(b.xin, Din, x_t, D, D, batch, s);
  if (Dc > 0) copy_columns(b.xin + D, Din, ctx, Dc, Dc, batch, s);
  in().forward_aux(b.h[0], b.aux[2], b.xin, batch, true, lane);
  for (std::int64_t l = 0; l < spec_.blocks; ++l) {
    const auto k = static_cast<std::size_t>(l);
    gpu::add(b.u[k], b.h[k], b.temb, batch * H, s);
    fc1(l).forward_aux(b.a[k], b.aux[3 + 2 * k], b.u[k], batch, true, lane);
    fc2(l).forward_aux(b.h[k + 1], b.aux[4 + 2 * k], b.a[k], batch, true, lane);
    gpu::add(b.h[k + 1], b.h[k + 1], b.h[k], batch * H, s);
  }
  out().forward_aux(eps, b.aux.back(), b.h.back(), batch, true, lane);
}

void Denoiser::backward(float* d_x, float* d_ctx, const float* d_eps, std::int64_t batch, const Workspace& ws,
                        gpu::BlasLane lane) {
  backward(d_x, d_ctx, d_eps, nullptr, batch, ws, lane);
}

void Denoiser::backward(float* d_x, float* d_ctx, const float* d_eps, const float* d_hidden, std::int64_t batch,
                        const Workspace& ws, gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Denoiser " + spec_.name + ": batch outside [1, max_batch]");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const cudaStream_t s = lane.stream;
  const std::int64_t D = spec_.dim, Dc = spec_.context, Din = D + Dc, H = spec_.hidden;
  out().backward_aux(b.dh, b.dpre, d_eps, b.aux.back(), b.h.back(), batch, lane);
  if (d_hidden != nullptr) gpu::add(b.dh, b.dh, d_hidden, batch * H, s);
  gpu::fill(b.dtemb, 0.f, batch * H, s);
  for (std::int64_t l = spec_.blocks - 1; l >= 0; --l) {
    const auto k = static_cast<std::size_t>(l);
    // h_l+1 = h_l + fc2(fc1(u_l)), u_l = h_l + temb: d h_l = d h_l+1 + d u_l, d temb += d u_l.
    fc2(l).backward_aux(b.da, b.dpre, b.dh, b.aux[4 + 2 * k], b.a[k], batch, lane);
    fc1(l).backward_aux(b.du, b.dpre, b.da, b.aux[3 + 2 * k], b.u[k], batch, lane);
    gpu::add(b.dh, b.dh, b.du, batch * H, s);
    gpu::add(b.dtemb, b.dtemb, b.du, batch * H, s);
  }
  const bool want_in = d_x != nullptr || (d_ctx != nullptr && Dc > 0);
  in().backward_aux(want_in ? b.dxin : nullptr, b.dpre, b.dh, b.aux[2], b.xin, batch, lane);
  if (d_x != nullptr) copy_columns(d_x, D, b.dxin, Din, D, batch, s);
  if (d_ctx != nullptr && Dc > 0) copy_columns(d_ctx, Dc, b.dxin + D, Din, Dc, batch, s);
  time1().backward_aux(b.dtpre, b.dpre, b.dtemb, b.aux[1], b.tpre, batch, lane);
  time0().backward_aux(nullptr, b.dpre, b.dtpre, b.aux[0], b.feat, batch, lane);
}

}  // namespace foxhunt::models
