#include "models/mamba2/ssd.hpp"

#include <algorithm>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/reduce.cuh"
#include "models/module.hpp"

namespace foxhunt::models {
namespace {

inline constexpr int kWarp = 32;

// The sizes every kernel indexes with. L: the chunk length actually used (min(chunk, T)),
// nc: the number of chunks (the last may be short), hpg: heads per group.
struct Dims {
  std::int64_t B, T, H, P, G, N, L, nc, hpg;
};

Dims dims_of(const SsdShape& s) {
  const std::int64_t L = std::min(s.chunk, s.T);
  return Dims{s.batch, s.T, s.heads, s.head_dim, s.groups, s.state, L, (s.T + L - 1) / L, s.heads / s.groups};
}

void check_shape(const SsdShape& s, bool sequence) {
  auto positive = [](std::int64_t v, const char* name) {
    FH_EXPECT(v >= 1, std::string("ssd: shape.") + name + " must be >= 1, got " + std::to_string(v));
  };
  positive(s.batch, "batch");
  positive(s.heads, "heads");
  positive(s.head_dim, "head_dim");
  positive(s.groups, "groups");
  positive(s.state, "state");
  FH_EXPECT(s.heads % s.groups == 0, "ssd: shape.groups (" + std::to_string(s.groups) + ") must divide shape.heads (" +
                                         std::to_string(s.heads) + ")");
  if (!sequence) return;
  positive(s.T, "T");
  FH_EXPECT(s.chunk >= 1 && s.chunk <= kSsdMaxChunk,
            "ssd: shape.chunk must be in [1, " + std::to_string(kSsdMaxChunk) + "], got " + std::to_string(s.chunk));
}

// The workspace's pieces (all float):
//   acum     (B, H, T)            a_t, the within-chunk inclusive cumulative sum of dt * A
//   cb       (B, G, nc, L, L)     Cm_t . Bm_s for s <= t in the chunk (row t, column s), else 0
//   enter    (B, H, nc, P, N)     the state entering each chunk
//   dstate   (B, H, nc, P, N)     backward: the gradient of each chunk's local state (G_{c+1})
//   dcb      (B, H, nc, L, L)     backward: dL/d(Cm_t . Bm_s) of one head, s <= t, else 0
//   da_local (B, H, T)            backward: dL/da_t from everything but the chunk-end terms
//   xdx      (B, H, T)            backward: x_t . dL/d(dt_t x_t)
//   wstate   (B, H, T)            backward: dL/da_t1 contributed by position t through local_c
//   da_part  (B, H, nc)           backward: each chunk's share of dA
struct Buffers {
  float *acum, *cb, *enter, *dstate, *dcb, *da_local, *xdx, *wstate, *da_part;
};

Buffers carve(WorkspaceCarver& c, const Dims& d) {
  const auto BH = static_cast<std::size_t>(d.B * d.H), T = static_cast<std::size_t>(d.T);
  const auto nc = static_cast<std::size_t>(d.nc), LL = static_cast<std::size_t>(d.L * d.L);
  const auto PN = static_cast<std::size_t>(d.P * d.N);
  Buffers b{};
  b.acum = c.take<float>(BH * T);
  b.cb = c.take<float>(static_cast<std::size_t>(d.B * d.G) * nc * LL);
  b.enter = c.take<float>(BH * nc * PN);
  b.dstate = c.take<float>(BH * nc * PN);
  b.dcb = c.take<float>(BH * nc * LL);
  b.da_local = c.take<float>(BH * T);
  b.xdx = c.take<float>(BH * T);
  b.wstate = c.take<float>(BH * T);
  b.da_part = c.take<float>(BH * nc);
  return b;
}

// Index helpers of the layouts in ssd.hpp and of the pieces above.
__device__ __forceinline__ std::int64_t ix_x(const Dims& d, std::int64_t b, std::int64_t t, std::int64_t h,
                                             std::int64_t p) {
  return ((b * d.T + t) * d.H + h) * d.P + p;
}
__device__ __forceinline__ std::int64_t ix_dt(const Dims& d, std::int64_t b, std::int64_t t, std::int64_t h) {
  return (b * d.T + t) * d.H + h;
}
__device__ __forceinline__ std::int64_t ix_bc(const Dims& d, std::int64_t b, std::int64_t t, std::int64_t g,
                                              std::int64_t n) {
  return ((b * d.T + t) * d.G + g) * d.N + n;
}
__device__ __forceinline__ std::int64_t ix_bht(const Dims& d, std::int64_t b, std::int64_t h, std::int64_t t) {
  return (b * d.H + h) * d.T + t;
}
// (b, g, c) of cb or (b, h, c) of dcb: the first element of that chunk's (L, L) matrix.
__device__ __forceinline__ std::int64_t ix_cb(const Dims& d, std::int64_t b, std::int64_t g, std::int64_t c) {
  return ((b * d.G + g) * d.nc + c) * d.L * d.L;
}
__device__ __forceinline__ std::int64_t ix_dcb(const Dims& d, std::int64_t b, std::int64_t h, std::int64_t c) {
  return ((b * d.H + h) * d.nc + c) * d.L * d.L;
}
// (b, h, c) of enter / dstate: the first element of that chunk's (P, N) state.
__device__ __forceinline__ std::int64_t ix_state(const Dims& d, std::int64_t b, std::int64_t h, std::int64_t c) {
  return ((b * d.H + h) * d.nc + c) * d.P * d.N;
}
__device__ __forceinline__ std::int64_t chunk_end(const Dims& d, std::int64_t c) {  // last position, inclusive
  const std::int64_t next = (c + 1) * d.L;
  return (next < d.T ? next : d.T) - 1;
}

#define SSD_GRID_STRIDE(idx, n)                                                                        \
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < (n); \
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

// acum per (b, h, chunk): the running sum of dt * A from the chunk's start.
__global__ void ssd_cumsum_kernel(float* __restrict__ acum, const float* __restrict__ dt, const float* __restrict__ A,
                                  Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.H * d.nc) {
    const std::int64_t c = idx % d.nc, bh = idx / d.nc, h = bh % d.H, b = bh / d.H;
    const float a = A[h];
    float run = 0.f;
    for (std::int64_t t = c * d.L, t1 = chunk_end(d, c); t <= t1; ++t) {
      run += dt[ix_dt(d, b, t, h)] * a;
      acum[ix_bht(d, b, h, t)] = run;
    }
  }
}

// cb[b, g, c, i, j] = Cm_{t0+i} . Bm_{t0+j} for j <= i inside the sequence, else 0.
__global__ void ssd_cb_kernel(float* __restrict__ cb, const float* __restrict__ Bm, const float* __restrict__ Cm,
                              Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.G * d.nc * d.L * d.L) {
    const std::int64_t j = idx % d.L, i = (idx / d.L) % d.L, bgc = idx / (d.L * d.L);
    const std::int64_t c = bgc % d.nc, g = (bgc / d.nc) % d.G, b = bgc / (d.nc * d.G);
    const std::int64_t t = c * d.L + i, s = c * d.L + j;
    float acc = 0.f;
    if (j <= i && t < d.T) {
      const float* ct = Cm + ix_bc(d, b, t, g, 0);
      const float* bs = Bm + ix_bc(d, b, s, g, 0);
      for (std::int64_t n = 0; n < d.N; ++n) acc += ct[n] * bs[n];
    }
    cb[idx] = acc;
  }
}

// enter[b, h, c, p, n] = local_c[p, n] = sum_s exp(a_t1 - a_s) dt_s x_s[p] Bm_s[n].
__global__ void ssd_chunk_state_kernel(float* __restrict__ local, const float* __restrict__ acum,
                                       const float* __restrict__ x, const float* __restrict__ dt,
                                       const float* __restrict__ Bm, Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.H * d.nc * d.P * d.N) {
    const std::int64_t n = idx % d.N, p = (idx / d.N) % d.P, bhc = idx / (d.P * d.N);
    const std::int64_t c = bhc % d.nc, h = (bhc / d.nc) % d.H, b = bhc / (d.nc * d.H), g = h / d.hpg;
    const std::int64_t t1 = chunk_end(d, c);
    const float aend = acum[ix_bht(d, b, h, t1)];
    float acc = 0.f;
    for (std::int64_t s = c * d.L; s <= t1; ++s)
      acc += expf(aend - acum[ix_bht(d, b, h, s)]) * dt[ix_dt(d, b, s, h)] * x[ix_x(d, b, s, h, p)] *
             Bm[ix_bc(d, b, s, g, n)];
    local[idx] = acc;
  }
}

// The recurrence over chunks, in place: enter[c] (holding local_c) becomes S_c; S_{c+1} =
// exp(a_t1) S_c + local_c; final_state (nullable) = S_nc.
__global__ void ssd_state_pass_kernel(float* __restrict__ enter, float* __restrict__ final_state,
                                      const float* __restrict__ acum, Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.H * d.P * d.N) {
    const std::int64_t pn = idx % (d.P * d.N), bh = idx / (d.P * d.N), h = bh % d.H, b = bh / d.H;
    float S = 0.f;
    for (std::int64_t c = 0; c < d.nc; ++c) {
      float* e = enter + ix_state(d, b, h, c) + pn;
      const float local = *e;
      *e = S;
      S = expf(acum[ix_bht(d, b, h, chunk_end(d, c))]) * S + local;
    }
    if (final_state != nullptr) final_state[idx] = S;
  }
}

// y_t[p] = sum_{t0 <= s <= t} cb[t, s] exp(a_t - a_s) dt_s x_s[p] + exp(a_t) sum_n S_c[p, n] Cm_t[n].
__global__ void ssd_output_kernel(float* __restrict__ y, const float* __restrict__ acum, const float* __restrict__ cb,
                                  const float* __restrict__ enter, const float* __restrict__ x,
                                  const float* __restrict__ dt, const float* __restrict__ Cm, Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.T * d.H * d.P) {
    const std::int64_t p = idx % d.P, h = (idx / d.P) % d.H, bt = idx / (d.P * d.H), t = bt % d.T, b = bt / d.T;
    const std::int64_t g = h / d.hpg, c = t / d.L, t0 = c * d.L, i = t - t0;
    const float at = acum[ix_bht(d, b, h, t)];
    const float* cbrow = cb + ix_cb(d, b, g, c) + i * d.L;
    float diag = 0.f;
    for (std::int64_t s = t0; s <= t; ++s)
      diag += cbrow[s - t0] * expf(at - acum[ix_bht(d, b, h, s)]) * dt[ix_dt(d, b, s, h)] * x[ix_x(d, b, s, h, p)];
    const float* S = enter + ix_state(d, b, h, c) + p * d.N;
    const float* ct = Cm + ix_bc(d, b, t, g, 0);
    float off = 0.f;
    for (std::int64_t n = 0; n < d.N; ++n) off += S[n] * ct[n];
    y[idx] = diag + expf(at) * off;
  }
}

// dstate[b, h, c, p, n] = sum_{t in c} exp(a_t) dy_t[p] Cm_t[n]: the gradient of S_c through Y_off.
__global__ void ssd_dstate_local_kernel(float* __restrict__ dstate, const float* __restrict__ acum,
                                        const float* __restrict__ dy, const float* __restrict__ Cm, Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.H * d.nc * d.P * d.N) {
    const std::int64_t n = idx % d.N, p = (idx / d.N) % d.P, bhc = idx / (d.P * d.N);
    const std::int64_t c = bhc % d.nc, h = (bhc / d.nc) % d.H, b = bhc / (d.nc * d.H), g = h / d.hpg;
    float acc = 0.f;
    for (std::int64_t t = c * d.L, t1 = chunk_end(d, c); t <= t1; ++t)
      acc += expf(acum[ix_bht(d, b, h, t)]) * dy[ix_x(d, b, t, h, p)] * Cm[ix_bc(d, b, t, g, n)];
    dstate[idx] = acc;
  }
}

// The reverse recurrence over chunks, in place: G_c = (dstate[c] as written above) + exp(a_t1) G_{c+1}
// from G_nc = 0, and dstate[c] becomes G_{c+1}, the gradient of local_c.
__global__ void ssd_dstate_pass_kernel(float* __restrict__ dstate, const float* __restrict__ acum, Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.H * d.P * d.N) {
    const std::int64_t pn = idx % (d.P * d.N), bh = idx / (d.P * d.N), h = bh % d.H, b = bh / d.H;
    float G = 0.f;
    for (std::int64_t c = d.nc; c-- > 0;) {
      float* e = dstate + ix_state(d, b, h, c) + pn;
      const float from_y = *e;
      *e = G;
      G = from_y + expf(acum[ix_bht(d, b, h, chunk_end(d, c))]) * G;
    }
  }
}

// dcb[b, h, c, i, j] = dL/d(cb[i, j]) for head h = exp(a_t - a_s) dt_s (dy_t . x_s), t = t0+i, s = t0+j,
// j <= i inside the sequence, else 0.
__global__ void ssd_dcb_kernel(float* __restrict__ dcb, const float* __restrict__ acum, const float* __restrict__ dy,
                               const float* __restrict__ x, const float* __restrict__ dt, Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.H * d.nc * d.L * d.L) {
    const std::int64_t j = idx % d.L, i = (idx / d.L) % d.L, bhc = idx / (d.L * d.L);
    const std::int64_t c = bhc % d.nc, h = (bhc / d.nc) % d.H, b = bhc / (d.nc * d.H);
    const std::int64_t t = c * d.L + i, s = c * d.L + j;
    float acc = 0.f;
    if (j <= i && t < d.T) {
      const float* dyt = dy + ix_x(d, b, t, h, 0);
      const float* xs = x + ix_x(d, b, s, h, 0);
      float dot = 0.f;
      for (std::int64_t p = 0; p < d.P; ++p) dot += dyt[p] * xs[p];
      acc = expf(acum[ix_bht(d, b, h, t)] - acum[ix_bht(d, b, h, s)]) * dt[ix_dt(d, b, s, h)] * dot;
    }
    dcb[idx] = acc;
  }
}

// Per position (b, h, t) of chunk c (t0 .. t1), with X_t = dt_t x_t and D = dstate[c] (= G_{c+1}):
//   dX_t[p] = sum_{t' >= t} cb[t', t] exp(a_t' - a_t) dy_t'[p] + exp(a_t1 - a_t) (D Bm_t)[p];
//   dx = dt_t dX_t; xdx = x_t . dX_t; wstate = exp(a_t1 - a_t) X_t^T D Bm_t (moves to a_t1);
//   da_local = sum_{s <= t} dcb cb[t, s] - sum_{t' >= t} dcb cb[t', t] + exp(a_t) dy_t . (S_c Cm_t) - wstate.
// One warp per position: the lanes split p and the chunk's rows and columns, then warp sums (a fixed
// butterfly, so the result does not depend on timing).
__global__ void ssd_position_backward_kernel(float* __restrict__ dx, float* __restrict__ da_local,
                                             float* __restrict__ xdx, float* __restrict__ wstate,
                                             const float* __restrict__ acum, const float* __restrict__ cb,
                                             const float* __restrict__ dcb, const float* __restrict__ enter,
                                             const float* __restrict__ dstate, const float* __restrict__ dy,
                                             const float* __restrict__ x, const float* __restrict__ dt,
                                             const float* __restrict__ Bm, const float* __restrict__ Cm, Dims d) {
  const std::int64_t lane = threadIdx.x % kWarp;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (std::int64_t idx = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / kWarp;
       idx < d.B * d.H * d.T; idx += warps) {
    const std::int64_t t = idx % d.T, h = (idx / d.T) % d.H, b = idx / (d.T * d.H), g = h / d.hpg;
    const std::int64_t c = t / d.L, t0 = c * d.L, t1 = chunk_end(d, c), i = t - t0;
    const float* acum_bh = acum + ix_bht(d, b, h, 0);
    const float at = acum_bh[t], aend = acum_bh[t1], dtt = dt[ix_dt(d, b, t, h)];
    const float* cbm = cb + ix_cb(d, b, g, c);
    const float* dcbm = dcb + ix_dcb(d, b, h, c);
    float seg = 0.f;
    for (std::int64_t j = lane; j <= i; j += kWarp) seg += dcbm[i * d.L + j] * cbm[i * d.L + j];
    for (std::int64_t k = i + lane; k <= t1 - t0; k += kWarp) seg -= dcbm[k * d.L + i] * cbm[k * d.L + i];
    const float* D = dstate + ix_state(d, b, h, c);
    const float* S = enter + ix_state(d, b, h, c);
    const float* bt = Bm + ix_bc(d, b, t, g, 0);
    const float* ct = Cm + ix_bc(d, b, t, g, 0);
    const float to_end = expf(aend - at);
    float xdx_acc = 0.f, w = 0.f, dy_off = 0.f;
    for (std::int64_t p = lane; p < d.P; p += kWarp) {
      float diag = 0.f;
      for (std::int64_t k = t; k <= t1; ++k)
        diag += cbm[(k - t0) * d.L + i] * expf(acum_bh[k] - at) * dy[ix_x(d, b, k, h, p)];
      float db = 0.f, sc = 0.f;
      for (std::int64_t n = 0; n < d.N; ++n) {
        db += D[p * d.N + n] * bt[n];
        sc += S[p * d.N + n] * ct[n];
      }
      const float from_state = to_end * db;
      const float dX = diag + from_state;
      const float xp = x[ix_x(d, b, t, h, p)];
      if (dx != nullptr) dx[ix_x(d, b, t, h, p)] = dtt * dX;
      xdx_acc += xp * dX;
      w += xp * from_state;
      dy_off += dy[ix_x(d, b, t, h, p)] * sc;
    }
    seg = gpu::warp_sum(seg);
    xdx_acc = gpu::warp_sum(xdx_acc);
    w = gpu::warp_sum(w) * dtt;
    dy_off = gpu::warp_sum(dy_off);
    if (lane == 0) {
      const std::int64_t o = ix_bht(d, b, h, t);
      da_local[o] = seg + expf(at) * dy_off - w;
      xdx[o] = xdx_acc;
      wstate[o] = w;
    }
  }
}

// Per (b, h, chunk): da_t1 gains sum_s wstate_s + exp(a_t1) <D, S_c> (the chunk recurrence); then
// dz_r = sum_{t >= r} da_t (a_t = sum_{r <= t} dt_r A) gives ddt_r = xdx_r + A dz_r and the chunk's
// dA share sum_r dt_r dz_r.
__global__ void ssd_chunk_da_kernel(float* __restrict__ ddt, float* __restrict__ da_part,
                                    const float* __restrict__ da_local, const float* __restrict__ xdx,
                                    const float* __restrict__ wstate, const float* __restrict__ acum,
                                    const float* __restrict__ enter, const float* __restrict__ dstate,
                                    const float* __restrict__ dt, const float* __restrict__ A, Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.H * d.nc) {
    const std::int64_t c = idx % d.nc, bh = idx / d.nc, h = bh % d.H, b = bh / d.H;
    const std::int64_t t0 = c * d.L, t1 = chunk_end(d, c);
    const float* D = dstate + ix_state(d, b, h, c);
    const float* S = enter + ix_state(d, b, h, c);
    float recur = 0.f;
    for (std::int64_t k = 0; k < d.P * d.N; ++k) recur += D[k] * S[k];
    float extra = expf(acum[ix_bht(d, b, h, t1)]) * recur;
    for (std::int64_t s = t0; s <= t1; ++s) extra += wstate[ix_bht(d, b, h, s)];
    const float a = A[h];
    float run = extra, part = 0.f;
    for (std::int64_t r = t1; r >= t0; --r) {
      const std::int64_t o = ix_bht(d, b, h, r);
      run += da_local[o];
      const float dtr = dt[ix_dt(d, b, r, h)];
      if (ddt != nullptr) ddt[ix_dt(d, b, r, h)] = xdx[o] + a * run;
      part += dtr * run;
    }
    da_part[idx] = part;
  }
}

// dA[h] = the chunk shares of every batch row, summed in a fixed order.
__global__ void ssd_da_reduce_kernel(float* __restrict__ dA, const float* __restrict__ da_part, Dims d) {
  SSD_GRID_STRIDE(h, d.H) {
    float acc = 0.f;
    for (std::int64_t b = 0; b < d.B; ++b)
      for (std::int64_t c = 0; c < d.nc; ++c) acc += da_part[(b * d.H + h) * d.nc + c];
    dA[h] = acc;
  }
}

// dCm_t[n] and dBm_t[n] for (b, t, g, n), over the group's heads in order:
//   dCm_t += sum_{s <= t} dcb[t, s] Bm_s[n] + exp(a_t) sum_p S_c[p, n] dy_t[p]
//   dBm_t += sum_{t' >= t} dcb[t', t] Cm_t'[n] + exp(a_t1 - a_t) dt_t sum_p D[p, n] x_t[p]
__global__ void ssd_dbc_kernel(float* __restrict__ dBm, float* __restrict__ dCm, const float* __restrict__ acum,
                               const float* __restrict__ dcb, const float* __restrict__ enter,
                               const float* __restrict__ dstate, const float* __restrict__ dy,
                               const float* __restrict__ x, const float* __restrict__ dt, const float* __restrict__ Bm,
                               const float* __restrict__ Cm, Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.T * d.G * d.N) {
    const std::int64_t n = idx % d.N, g = (idx / d.N) % d.G, bt = idx / (d.N * d.G), t = bt % d.T, b = bt / d.T;
    const std::int64_t c = t / d.L, t0 = c * d.L, t1 = chunk_end(d, c), i = t - t0;
    float dc = 0.f, db = 0.f;
    for (std::int64_t h = g * d.hpg; h < (g + 1) * d.hpg; ++h) {
      const float* dcbm = dcb + ix_dcb(d, b, h, c);
      const float at = acum[ix_bht(d, b, h, t)], aend = acum[ix_bht(d, b, h, t1)];
      float dc_diag = 0.f, db_diag = 0.f;
      for (std::int64_t j = 0; j <= i; ++j) dc_diag += dcbm[i * d.L + j] * Bm[ix_bc(d, b, t0 + j, g, n)];
      for (std::int64_t k = i; k <= t1 - t0; ++k) db_diag += dcbm[k * d.L + i] * Cm[ix_bc(d, b, t0 + k, g, n)];
      const float* S = enter + ix_state(d, b, h, c) + n;
      const float* D = dstate + ix_state(d, b, h, c) + n;
      float dc_off = 0.f, db_state = 0.f;
      for (std::int64_t p = 0; p < d.P; ++p) {
        dc_off += S[p * d.N] * dy[ix_x(d, b, t, h, p)];
        db_state += D[p * d.N] * x[ix_x(d, b, t, h, p)];
      }
      dc += dc_diag + expf(at) * dc_off;
      db += db_diag + expf(aend - at) * dt[ix_dt(d, b, t, h)] * db_state;
    }
    if (dCm != nullptr) dCm[idx] = dc;
    if (dBm != nullptr) dBm[idx] = db;
  }
}

// One step for (b, h, p): the row's state (zeroed first where reset[b] != 0) decays by
// exp(dt A), gains dt x[p] Bm, and y[p] = S[p, :] . Cm.
__global__ void ssd_step_kernel(float* __restrict__ y, float* __restrict__ state, const float* __restrict__ x,
                                const float* __restrict__ dt, const float* __restrict__ A, const float* __restrict__ Bm,
                                const float* __restrict__ Cm, const std::uint8_t* __restrict__ reset, Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.H * d.P) {
    const std::int64_t h = (idx / d.P) % d.H, b = idx / (d.P * d.H), g = h / d.hpg;
    const bool keep = reset == nullptr || reset[b] == 0;
    const float dth = dt[b * d.H + h];
    const float decay = expf(dth * A[h]), X = dth * x[idx];
    const float* bg = Bm + (b * d.G + g) * d.N;
    const float* cg = Cm + (b * d.G + g) * d.N;
    float* S = state + idx * d.N;
    float acc = 0.f;
    for (std::int64_t n = 0; n < d.N; ++n) {
      const float s = (keep ? S[n] * decay : 0.f) + X * bg[n];
      S[n] = s;
      acc += s * cg[n];
    }
    y[idx] = acc;
  }
}

#undef SSD_GRID_STRIDE

int blocks_for(std::int64_t n) { return gpu::grid_stride_blocks(n); }

}  // namespace

std::size_t ssd_workspace_bytes(const SsdShape& shape) {
  check_shape(shape, true);
  WorkspaceCarver c;
  carve(c, dims_of(shape));
  return c.bytes();
}

void ssd_forward(float* y, float* final_state, const float* x, const float* dt, const float* A, const float* Bm,
                 const float* Cm, const SsdShape& shape, std::byte* workspace, cudaStream_t stream) {
  check_shape(shape, true);
  FH_EXPECT(y != nullptr, "ssd_forward: y must not be null");
  FH_EXPECT(x != nullptr && dt != nullptr && A != nullptr && Bm != nullptr && Cm != nullptr,
            "ssd_forward: x, dt, A, Bm and Cm must not be null");
  FH_EXPECT(workspace != nullptr, "ssd_forward: workspace must not be null");
  const Dims d = dims_of(shape);
  WorkspaceCarver carver(workspace);
  const Buffers w = carve(carver, d);
  constexpr int k = gpu::kBlock;
  ssd_cumsum_kernel<<<blocks_for(d.B * d.H * d.nc), k, 0, stream>>>(w.acum, dt, A, d);
  FH_CHECK_LAUNCH();
  ssd_cb_kernel<<<blocks_for(d.B * d.G * d.nc * d.L * d.L), k, 0, stream>>>(w.cb, Bm, Cm, d);
  FH_CHECK_LAUNCH();
  ssd_chunk_state_kernel<<<blocks_for(d.B * d.H * d.nc * d.P * d.N), k, 0, stream>>>(w.enter, w.acum, x, dt, Bm, d);
  FH_CHECK_LAUNCH();
  ssd_state_pass_kernel<<<blocks_for(d.B * d.H * d.P * d.N), k, 0, stream>>>(w.enter, final_state, w.acum, d);
  FH_CHECK_LAUNCH();
  ssd_output_kernel<<<blocks_for(d.B * d.T * d.H * d.P), k, 0, stream>>>(y, w.acum, w.cb, w.enter, x, dt, Cm, d);
  FH_CHECK_LAUNCH();
}

void ssd_backward(float* dx, float* ddt, float* dA, float* dBm, float* dCm, const float* dy, const float* x,
                  const float* dt, const float* A, const float* Bm, const float* Cm, const SsdShape& shape,
                  std::byte* workspace, cudaStream_t stream) {
  check_shape(shape, true);
  FH_EXPECT(dy != nullptr, "ssd_backward: dy must not be null");
  FH_EXPECT(x != nullptr && dt != nullptr && A != nullptr && Bm != nullptr && Cm != nullptr,
            "ssd_backward: x, dt, A, Bm and Cm must not be null");
  FH_EXPECT(workspace != nullptr, "ssd_backward: workspace must not be null");
  const Dims d = dims_of(shape);
  WorkspaceCarver carver(workspace);
  const Buffers w = carve(carver, d);
  constexpr int k = gpu::kBlock;
  ssd_dstate_local_kernel<<<blocks_for(d.B * d.H * d.nc * d.P * d.N), k, 0, stream>>>(w.dstate, w.acum, dy, Cm, d);
  FH_CHECK_LAUNCH();
  ssd_dstate_pass_kernel<<<blocks_for(d.B * d.H * d.P * d.N), k, 0, stream>>>(w.dstate, w.acum, d);
  FH_CHECK_LAUNCH();
  ssd_dcb_kernel<<<blocks_for(d.B * d.H * d.nc * d.L * d.L), k, 0, stream>>>(w.dcb, w.acum, dy, x, dt, d);
  FH_CHECK_LAUNCH();
  ssd_position_backward_kernel<<<blocks_for(d.B * d.H * d.T * kWarp), k, 0, stream>>>(
      dx, w.da_local, w.xdx, w.wstate, w.acum, w.cb, w.dcb, w.enter, w.dstate, dy, x, dt, Bm, Cm, d);
  FH_CHECK_LAUNCH();
  if (ddt != nullptr || dA != nullptr) {
    ssd_chunk_da_kernel<<<blocks_for(d.B * d.H * d.nc), k, 0, stream>>>(ddt, w.da_part, w.da_local, w.xdx, w.wstate,
                                                                        w.acum, w.enter, w.dstate, dt, A, d);
    FH_CHECK_LAUNCH();
  }
  if (dA != nullptr) {
    ssd_da_reduce_kernel<<<blocks_for(d.H), k, 0, stream>>>(dA, w.da_part, d);
    FH_CHECK_LAUNCH();
  }
  if (dBm != nullptr || dCm != nullptr) {
    ssd_dbc_kernel<<<blocks_for(d.B * d.T * d.G * d.N), k, 0, stream>>>(dBm, dCm, w.acum, w.dcb, w.enter, w.dstate, dy,
                                                                        x, dt, Bm, Cm, d);
    FH_CHECK_LAUNCH();
  }
}

void ssd_step(float* y, float* state, const float* x, const float* dt, const float* A, const float* Bm, const float* Cm,
              const std::uint8_t* reset, const SsdShape& shape, cudaStream_t stream) {
  check_shape(shape, false);
  FH_EXPECT(y != nullptr && state != nullptr, "ssd_step: y and state must not be null");
  FH_EXPECT(x != nullptr && dt != nullptr && A != nullptr && Bm != nullptr && Cm != nullptr,
            "ssd_step: x, dt, A, Bm and Cm must not be null");
  Dims d{shape.batch, 1, shape.heads, shape.head_dim, shape.groups, shape.state, 1, 1, shape.heads / shape.groups};
  ssd_step_kernel<<<blocks_for(d.B * d.H * d.P), gpu::kBlock, 0, stream>>>(y, state, x, dt, A, Bm, Cm, reset, d);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
