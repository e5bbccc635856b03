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
  FH_EXPECT(s.head_dim * s.state <= kSsdMaxStateTile,
            "ssd: shape.head_dim x shape.state (" + std::to_string(s.head_dim * s.state) + ") must be <= " +
                std::to_string(kSsdMaxStateTile));
  if (!sequence) return;
  positive(s.T, "T");
  FH_EXPECT(s.chunk >= 1 && s.chunk <= kSsdMaxChunk,
            "ssd: shape.chunk must be in [1, " + std::to_string(kSsdMaxChunk) + "], got " + std::to_string(s.chunk));
}

// The workspace's pieces (all float):
//   acum    (B, H, T)         a_t, the within-chunk inclusive cumulative sum of dt * A
//   enter   (B, H, nc, P, N)  the state entering each chunk
//   dstate  (B, H, nc, P, N)  backward: the gradient of each chunk's local state (G_{c+1})
//   da_part (B, H, nc)        backward: each chunk's share of dA
// Everything else (C B^T, its decayed and gradient forms, the per-position sums) lives in one
// block's shared memory for the life of its chunk.
struct Buffers {
  float *acum, *enter, *dstate, *da_part;
};

Buffers carve(WorkspaceCarver& c, const Dims& d) {
  const auto BH = static_cast<std::size_t>(d.B * d.H), T = static_cast<std::size_t>(d.T);
  const auto nc = static_cast<std::size_t>(d.nc), PN = static_cast<std::size_t>(d.P * d.N);
  Buffers b{};
  b.acum = c.take<float>(BH * T);
  b.enter = c.take<float>(BH * nc * PN);
  b.dstate = c.take<float>(BH * nc * PN);
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

// The chunk kernels: one block of kChunkThreads per (b, g, chunk), the group's heads in order.
// Shared-memory tiles have padded row strides (L + 1, N + 1, P + 1) so that the column walks of the
// loops below hit distinct banks.
inline constexpr int kChunkThreads = 256;

struct Tile {
  int L, N, P, LS, NS, PS;  // sizes and padded row strides
};
__host__ __device__ inline Tile make_tile(std::int64_t L, std::int64_t N, std::int64_t P) {
  const int l = static_cast<int>(L), n = static_cast<int>(N), p = static_cast<int>(P);
  return Tile{l, n, p, l + 1, n + 1, p + 1};
}
__host__ __device__ inline Tile tile_of(const Dims& d) { return make_tile(d.L, d.N, d.P); }
std::size_t forward_smem_floats(const Tile& k) {
  return static_cast<std::size_t>(2 * k.L * k.NS + 2 * k.L * k.LS + k.L * k.PS + 2 * k.L);
}
std::size_t backward_smem_floats(const Tile& k) {
  return static_cast<std::size_t>(6 * k.L * k.NS + 3 * k.L * k.LS + 3 * k.L * k.PS + 2 * k.P * k.NS + 5 * k.L);
}

// The chunk length actually run: no more than T (a short sequence is one chunk), halved until the
// backward's tiles fit gpu::kSharedBudgetBytes (the chunk length changes rounding only).
std::int64_t run_chunk(const SsdShape& s) {
  std::int64_t L = std::min(s.chunk, s.T);
  while (L > 1 && backward_smem_floats(make_tile(L, s.state, s.head_dim)) * sizeof(float) > gpu::kSharedBudgetBytes)
    L = (L + 1) / 2;
  return L;
}

Dims dims_of(const SsdShape& s) {
  const std::int64_t L = run_chunk(s);
  return Dims{s.batch, s.T, s.heads, s.head_dim, s.groups, s.state, L, (s.T + L - 1) / L, s.heads / s.groups};
}

// v[0 .. n) becomes its inclusive prefix sum of scale * v (from the end when `reverse`), computed
// by the 32 lanes of one warp over consecutive runs of ceil(n / 32) elements; n <= kSsdMaxChunk.
// Fixed order: the result depends on n alone.
__device__ void warp_chunk_scan(float* v, int n, float scale, bool reverse) {
  constexpr int kPer = static_cast<int>(kSsdMaxChunk) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp, per = (n + kWarp - 1) / kWarp;
  float run[kPer];
  float acc = 0.f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = lane * per + k;
    if (k < per && i < n) acc += scale * v[reverse ? n - 1 - i : i];
    run[k] = acc;
  }
  float incl = acc;
#pragma unroll
  for (int o = 1; o < kWarp; o <<= 1) {
    const float up = __shfl_up_sync(gpu::kFullMask, incl, o);
    if (lane >= o) incl += up;
  }
  float before = __shfl_up_sync(gpu::kFullMask, incl, 1);
  if (lane == 0) before = 0.f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = lane * per + k;
    if (k < per && i < n) v[reverse ? n - 1 - i : i] = before + run[k];
  }
}

// Per (b, g, chunk c): cb = Cm_t . Bm_s (s <= t) once; per head h of the group:
//   a (acum) = the chunk's cumulative sum of dt A, X_s = dt_s x_s, M = cb ⊙ exp(a_t - a_s),
//   y_t = sum_{s <= t} M[t, s] X_s   (Y_diag; the state's part Y_off is added by ssd_state_output)
//   local[c] = sum_s exp(a_t1 - a_s) X_s Bm_s^T   (into enter; ssd_state_pass turns it into S_c)
__global__ void __launch_bounds__(kChunkThreads)
    ssd_chunk_forward_kernel(float* __restrict__ y, float* __restrict__ local, float* __restrict__ acum,
                             const float* __restrict__ x, const float* __restrict__ dt, const float* __restrict__ A,
                             const float* __restrict__ Bm, const float* __restrict__ Cm, Dims d) {
  extern __shared__ float sm[];
  const Tile k = tile_of(d);
  const std::int64_t blk = blockIdx.x, c = blk % d.nc, g = (blk / d.nc) % d.G, b = blk / (d.nc * d.G);
  const std::int64_t t0 = c * d.L;
  const int Lc = static_cast<int>(chunk_end(d, c) - t0 + 1), tid = static_cast<int>(threadIdx.x);
  constexpr int nt = kChunkThreads;
  float* sB = sm;
  float* sC = sB + k.L * k.NS;
  float* cb = sC + k.L * k.NS;
  float* M = cb + k.L * k.LS;
  float* X = M + k.L * k.LS;
  float* a = X + k.L * k.PS;
  float* wend = a + k.L;
  for (int i = tid; i < Lc * k.N; i += nt) {
    const int t = i / k.N, n = i - t * k.N;
    const std::int64_t o = ix_bc(d, b, t0 + t, g, n);
    sB[t * k.NS + n] = Bm[o];
    sC[t * k.NS + n] = Cm[o];
  }
  __syncthreads();
  for (int i = tid; i < Lc * Lc; i += nt) {
    const int t = i / Lc, s = i - t * Lc;
    float acc = 0.f;
    if (s <= t)
      for (int n = 0; n < k.N; ++n) acc += sC[t * k.NS + n] * sB[s * k.NS + n];
    cb[t * k.LS + s] = acc;
  }
  for (std::int64_t h = g * d.hpg; h < (g + 1) * d.hpg; ++h) {
    for (int t = tid; t < Lc; t += nt) a[t] = dt[ix_dt(d, b, t0 + t, h)];
    for (int i = tid; i < Lc * k.P; i += nt) {
      const int t = i / k.P, p = i - t * k.P;
      X[t * k.PS + p] = dt[ix_dt(d, b, t0 + t, h)] * x[ix_x(d, b, t0 + t, h, p)];
    }
    __syncthreads();
    if (tid < kWarp) warp_chunk_scan(a, Lc, A[h], false);
    __syncthreads();
    for (int t = tid; t < Lc; t += nt) {
      wend[t] = expf(a[Lc - 1] - a[t]);
      acum[ix_bht(d, b, h, t0 + t)] = a[t];
    }
    for (int i = tid; i < Lc * Lc; i += nt) {
      const int t = i / Lc, s = i - t * Lc;
      M[t * k.LS + s] = s <= t ? cb[t * k.LS + s] * expf(a[t] - a[s]) : 0.f;
    }
    __syncthreads();
    for (int i = tid; i < Lc * k.P; i += nt) {
      const int t = i / k.P, p = i - t * k.P;
      float acc = 0.f;
      for (int s = 0; s <= t; ++s) acc += M[t * k.LS + s] * X[s * k.PS + p];
      y[ix_x(d, b, t0 + t, h, p)] = acc;
    }
    float* loc = local + ix_state(d, b, h, c);
    for (int i = tid; i < k.P * k.N; i += nt) {
      const int p = i / k.N, n = i - p * k.N;
      float acc = 0.f;
      for (int s = 0; s < Lc; ++s) acc += wend[s] * X[s * k.PS + p] * sB[s * k.NS + n];
      loc[i] = acc;
    }
    __syncthreads();  // a, X, M are the next head's
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

// Y_off for the positions past the first chunk (S_0 = 0): y_t[p] += exp(a_t) sum_n S_c[p, n] Cm_t[n].
__global__ void ssd_state_output_kernel(float* __restrict__ y, const float* __restrict__ acum,
                                        const float* __restrict__ enter, const float* __restrict__ Cm, Dims d) {
  const std::int64_t Tr = d.T - d.L;  // positions t >= L
  SSD_GRID_STRIDE(idx, d.B * Tr * d.H * d.P) {
    const std::int64_t p = idx % d.P, h = (idx / d.P) % d.H, bt = idx / (d.P * d.H), t = d.L + bt % Tr, b = bt / Tr;
    const std::int64_t g = h / d.hpg, c = t / d.L;
    const float* S = enter + ix_state(d, b, h, c) + p * d.N;
    const float* ct = Cm + ix_bc(d, b, t, g, 0);
    float off = 0.f;
    for (std::int64_t n = 0; n < d.N; ++n) off += S[n] * ct[n];
    y[ix_x(d, b, t, h, p)] += expf(acum[ix_bht(d, b, h, t)]) * off;
  }
}

// dstate[b, h, c, p, n] = sum_{t in c} exp(a_t) dy_t[p] Cm_t[n]: the gradient of S_c through Y_off
// (chunks c >= 1; chunk 0's is not needed: S_0 is the zero start).
__global__ void ssd_dstate_local_kernel(float* __restrict__ dstate, const float* __restrict__ acum,
                                        const float* __restrict__ dy, const float* __restrict__ Cm, Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.H * d.nc * d.P * d.N) {
    const std::int64_t n = idx % d.N, p = (idx / d.N) % d.P, bhc = idx / (d.P * d.N);
    const std::int64_t c = bhc % d.nc, h = (bhc / d.nc) % d.H, b = bhc / (d.nc * d.H), g = h / d.hpg;
    float acc = 0.f;
    if (c > 0)
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

// Per (b, g, chunk c), the group's heads in order, with X = dt x, M = cb ⊙ exp(a_t - a_s) as in the
// forward, S = S_c (zero in chunk 0) and D = G_{c+1} (zero in the last chunk):
//   dcb[t, s] = exp(a_t - a_s) dt_s (dy_t . x_s)                     (s <= t)
//   dX_t = sum_{t' >= t} M[t', t] dy_t' + exp(a_t1 - a_t) D Bm_t;  dx = dt dX
//   xD_t = x_t^T D, dyS_t = dy_t^T S                                    (N each)
//   da_t = sum_{s <= t} dcb cb[t, s] - sum_{t' >= t} dcb cb[t', t] + exp(a_t) Cm_t . dyS_t - w_t,
//     w_t = exp(a_t1 - a_t) dt_t Bm_t . xD_t (moves to a_t1, with exp(a_t1) <D, S>)
//   ddt_r = x_r . dX_r + A dz_r, dz_r = sum_{t >= r} da_t; the chunk's dA share sum_r dt_r dz_r
//   dCm_t += sum_{s <= t} dcb[t, s] Bm_s + exp(a_t) dyS_t
//   dBm_t += sum_{t' >= t} dcb[t', t] Cm_t' + exp(a_t1 - a_t) dt_t xD_t
// Each output element has one owner thread and a fixed summation order: bitwise reproducible.
__global__ void __launch_bounds__(kChunkThreads)
    ssd_chunk_backward_kernel(float* __restrict__ dx, float* __restrict__ ddt, float* __restrict__ da_part,
                              float* __restrict__ dBm, float* __restrict__ dCm, const float* __restrict__ acum,
                              const float* __restrict__ enter, const float* __restrict__ dstate,
                              const float* __restrict__ dy, const float* __restrict__ x, const float* __restrict__ dt,
                              const float* __restrict__ A, const float* __restrict__ Bm, const float* __restrict__ Cm,
                              Dims d) {
  extern __shared__ float sm[];
  const Tile k = tile_of(d);
  const std::int64_t blk = blockIdx.x, c = blk % d.nc, g = (blk / d.nc) % d.G, b = blk / (d.nc * d.G);
  const std::int64_t t0 = c * d.L;
  const int Lc = static_cast<int>(chunk_end(d, c) - t0 + 1), tid = static_cast<int>(threadIdx.x);
  const bool has_s = c > 0, has_d = c + 1 < d.nc;
  constexpr int nt = kChunkThreads;
  float* sB = sm;
  float* sC = sB + k.L * k.NS;
  float* dBa = sC + k.L * k.NS;
  float* dCa = dBa + k.L * k.NS;
  float* xD = dCa + k.L * k.NS;
  float* dyS = xD + k.L * k.NS;
  float* cb = dyS + k.L * k.NS;
  float* M = cb + k.L * k.LS;
  float* dcb = M + k.L * k.LS;
  float* sx = dcb + k.L * k.LS;
  float* sdy = sx + k.L * k.PS;
  float* dX = sdy + k.L * k.PS;
  float* S = dX + k.L * k.PS;
  float* D = S + k.P * k.NS;
  float* a = D + k.P * k.NS;
  float* sdt = a + k.L;
  float* xdx = sdt + k.L;
  float* w = xdx + k.L;
  float* da = w + k.L;
  for (int i = tid; i < Lc * k.N; i += nt) {
    const int t = i / k.N, n = i - t * k.N;
    const std::int64_t o = ix_bc(d, b, t0 + t, g, n);
    sB[t * k.NS + n] = Bm[o];
    sC[t * k.NS + n] = Cm[o];
    dBa[t * k.NS + n] = 0.f;
    dCa[t * k.NS + n] = 0.f;
  }
  __syncthreads();
  for (int i = tid; i < Lc * Lc; i += nt) {
    const int t = i / Lc, s = i - t * Lc;
    float acc = 0.f;
    if (s <= t)
      for (int n = 0; n < k.N; ++n) acc += sC[t * k.NS + n] * sB[s * k.NS + n];
    cb[t * k.LS + s] = acc;
  }
  for (std::int64_t h = g * d.hpg; h < (g + 1) * d.hpg; ++h) {
    for (int t = tid; t < Lc; t += nt) {
      a[t] = acum[ix_bht(d, b, h, t0 + t)];
      sdt[t] = dt[ix_dt(d, b, t0 + t, h)];
    }
    for (int i = tid; i < Lc * k.P; i += nt) {
      const int t = i / k.P, p = i - t * k.P;
      sx[t * k.PS + p] = x[ix_x(d, b, t0 + t, h, p)];
      sdy[t * k.PS + p] = dy[ix_x(d, b, t0 + t, h, p)];
    }
    for (int i = tid; i < k.P * k.N; i += nt) {
      const int p = i / k.N, n = i - p * k.N;
      S[p * k.NS + n] = has_s ? enter[ix_state(d, b, h, c) + i] : 0.f;
      D[p * k.NS + n] = has_d ? dstate[ix_state(d, b, h, c) + i] : 0.f;
    }
    __syncthreads();
    const float aend = a[Lc - 1];
    for (int i = tid; i < Lc * Lc; i += nt) {
      const int t = i / Lc, s = i - t * Lc;
      float m = 0.f, g_cb = 0.f;
      if (s <= t) {
        const float e = expf(a[t] - a[s]);
        float dot = 0.f;
        for (int p = 0; p < k.P; ++p) dot += sdy[t * k.PS + p] * sx[s * k.PS + p];
        m = cb[t * k.LS + s] * e;
        g_cb = e * sdt[s] * dot;
      }
      M[t * k.LS + s] = m;
      dcb[t * k.LS + s] = g_cb;
    }
    for (int i = tid; i < Lc * k.N; i += nt) {
      const int t = i / k.N, n = i - t * k.N;
      float xd = 0.f, ys = 0.f;
      if (has_d)
        for (int p = 0; p < k.P; ++p) xd += sx[t * k.PS + p] * D[p * k.NS + n];
      if (has_s)
        for (int p = 0; p < k.P; ++p) ys += sdy[t * k.PS + p] * S[p * k.NS + n];
      xD[t * k.NS + n] = xd;
      dyS[t * k.NS + n] = ys;
    }
    __syncthreads();
    for (int i = tid; i < Lc * k.P; i += nt) {
      const int t = i / k.P, p = i - t * k.P;
      float acc = 0.f;
      for (int r = t; r < Lc; ++r) acc += M[r * k.LS + t] * sdy[r * k.PS + p];
      if (has_d) {
        float db = 0.f;
        for (int n = 0; n < k.N; ++n) db += D[p * k.NS + n] * sB[t * k.NS + n];
        acc += expf(aend - a[t]) * db;
      }
      dX[t * k.PS + p] = acc;
      if (dx != nullptr) dx[ix_x(d, b, t0 + t, h, p)] = sdt[t] * acc;
    }
    for (int i = tid; i < Lc * k.N; i += nt) {
      const int t = i / k.N, n = i - t * k.N;
      float dc = 0.f, db = 0.f;
      for (int s = 0; s <= t; ++s) dc += dcb[t * k.LS + s] * sB[s * k.NS + n];
      for (int r = t; r < Lc; ++r) db += dcb[r * k.LS + t] * sC[r * k.NS + n];
      dCa[t * k.NS + n] += dc + expf(a[t]) * dyS[t * k.NS + n];
      dBa[t * k.NS + n] += db + expf(aend - a[t]) * sdt[t] * xD[t * k.NS + n];
    }
    __syncthreads();
    for (int t = tid; t < Lc; t += nt) {
      float xd = 0.f, seg = 0.f, wt = 0.f, off = 0.f;
      for (int p = 0; p < k.P; ++p) xd += sx[t * k.PS + p] * dX[t * k.PS + p];
      for (int s = 0; s <= t; ++s) seg += dcb[t * k.LS + s] * cb[t * k.LS + s];
      for (int r = t; r < Lc; ++r) seg -= dcb[r * k.LS + t] * cb[r * k.LS + t];
      for (int n = 0; n < k.N; ++n) {
        wt += sB[t * k.NS + n] * xD[t * k.NS + n];
        off += sC[t * k.NS + n] * dyS[t * k.NS + n];
      }
      wt *= expf(aend - a[t]) * sdt[t];
      xdx[t] = xd;
      w[t] = wt;
      da[t] = seg + expf(a[t]) * off - wt;
    }
    __syncthreads();
    if (tid < kWarp) {
      float recur = 0.f, extra = 0.f;
      if (has_s && has_d)
        for (int i = tid; i < k.P * k.N; i += kWarp) {
          const int p = i / k.N, n = i - p * k.N;
          recur += D[p * k.NS + n] * S[p * k.NS + n];
        }
      for (int t = tid; t < Lc; t += kWarp) extra += w[t];
      extra = gpu::warp_sum(extra) + expf(aend) * gpu::warp_sum(recur);
      warp_chunk_scan(da, Lc, 1.f, true);  // da[r] = sum_{t >= r} da_t
      __syncwarp();
      const float ah = A[h];
      float part = 0.f;
      for (int r = tid; r < Lc; r += kWarp) {
        const float dz = extra + da[r];
        if (ddt != nullptr) ddt[ix_dt(d, b, t0 + r, h)] = xdx[r] + ah * dz;
        part += sdt[r] * dz;
      }
      part = gpu::warp_sum(part);
      if (tid == 0) da_part[(b * d.H + h) * d.nc + c] = part;
    }
    __syncthreads();  // the tiles are the next head's
  }
  for (int i = tid; i < Lc * k.N; i += nt) {
    const int t = i / k.N, n = i - t * k.N;
    const std::int64_t o = ix_bc(d, b, t0 + t, g, n);
    if (dBm != nullptr) dBm[o] = dBa[t * k.NS + n];
    if (dCm != nullptr) dCm[o] = dCa[t * k.NS + n];
  }
}

// dA[h] = the chunk shares of every batch row: one block per head, each thread summing a fixed
// stride of the (b, c) shares in order, then the block's fixed-order reduction.
__global__ void ssd_da_reduce_kernel(float* __restrict__ dA, const float* __restrict__ da_part, Dims d) {
  __shared__ float scratch[kWarp];
  const std::int64_t h = blockIdx.x, n = d.B * d.nc;
  float acc = 0.f;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const std::int64_t b = i / d.nc, c = i - b * d.nc;
    acc += da_part[(b * d.H + h) * d.nc + c];
  }
  acc = gpu::block_sum(acc, scratch);
  if (threadIdx.x == 0) dA[h] = acc;
}

// One step for (b, h, p): the row's state (at state + b * stride; zeroed first where reset[b] != 0)
// decays by exp(dt A), gains dt x[p] Bm, and y[p] = S[p, :] . Cm.
__global__ void ssd_step_kernel(float* __restrict__ y, float* __restrict__ state, std::int64_t stride,
                                const float* __restrict__ x, const float* __restrict__ dt, const float* __restrict__ A,
                                const float* __restrict__ Bm, const float* __restrict__ Cm,
                                const std::uint8_t* __restrict__ reset, Dims d) {
  SSD_GRID_STRIDE(idx, d.B * d.H * d.P) {
    const std::int64_t hp = idx % (d.H * d.P), h = hp / d.P, b = idx / (d.P * d.H), g = h / d.hpg;
    const bool keep = reset == nullptr || reset[b] == 0;
    const float dth = dt[b * d.H + h];
    const float decay = expf(dth * A[h]), X = dth * x[idx];
    const float* bg = Bm + (b * d.G + g) * d.N;
    const float* cg = Cm + (b * d.G + g) * d.N;
    float* S = state + b * stride + hp * d.N;
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

// Opts `kernel` in to `bytes` of dynamic shared memory after checking the device allows it.
template <class Kernel>
void allow_smem(Kernel kernel, std::size_t bytes, const char* who, const Dims& d) {
  const int limit = gpu::max_shared_bytes_per_block();
  FH_EXPECT(bytes <= static_cast<std::size_t>(limit),
            std::string(who) + ": chunk " + std::to_string(d.L) + " with state " + std::to_string(d.N) +
                " and head_dim " + std::to_string(d.P) + " needs " + std::to_string(bytes) +
                " bytes of shared memory, the device allows " + std::to_string(limit));
  FH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

unsigned chunk_blocks(const Dims& d) { return static_cast<unsigned>(d.B * d.G * d.nc); }

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
  const std::size_t smem = forward_smem_floats(tile_of(d)) * sizeof(float);
  allow_smem(ssd_chunk_forward_kernel, smem, "ssd_forward", d);
  ssd_chunk_forward_kernel<<<chunk_blocks(d), kChunkThreads, smem, stream>>>(y, w.enter, w.acum, x, dt, A, Bm, Cm, d);
  FH_CHECK_LAUNCH();
  if (d.nc == 1 && final_state == nullptr) return;  // one chunk: y is complete and S_0 = 0
  ssd_state_pass_kernel<<<blocks_for(d.B * d.H * d.P * d.N), gpu::kBlock, 0, stream>>>(w.enter, final_state, w.acum,
                                                                                        d);
  FH_CHECK_LAUNCH();
  if (d.nc == 1) return;
  ssd_state_output_kernel<<<blocks_for(d.B * (d.T - d.L) * d.H * d.P), gpu::kBlock, 0, stream>>>(y, w.acum, w.enter,
                                                                                                  Cm, d);
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
  if (d.nc > 1) {  // G_{c+1} for every chunk but the last (one chunk: D = 0 and S = 0 throughout)
    ssd_dstate_local_kernel<<<blocks_for(d.B * d.H * d.nc * d.P * d.N), gpu::kBlock, 0, stream>>>(w.dstate, w.acum, dy,
                                                                                                   Cm, d);
    FH_CHECK_LAUNCH();
    ssd_dstate_pass_kernel<<<blocks_for(d.B * d.H * d.P * d.N), gpu::kBlock, 0, stream>>>(w.dstate, w.acum, d);
    FH_CHECK_LAUNCH();
  }
  const std::size_t smem = backward_smem_floats(tile_of(d)) * sizeof(float);
  allow_smem(ssd_chunk_backward_kernel, smem, "ssd_backward", d);
  ssd_chunk_backward_kernel<<<chunk_blocks(d), kChunkThreads, smem, stream>>>(
      dx, ddt, w.da_part, dBm, dCm, w.acum, w.enter, w.dstate, dy, x, dt, A, Bm, Cm, d);
  FH_CHECK_LAUNCH();
  if (dA != nullptr) {
    ssd_da_reduce_kernel<<<static_cast<unsigned>(d.H), gpu::kBlock, 0, stream>>>(dA, w.da_part, d);
    FH_CHECK_LAUNCH();
  }
}

void ssd_step(float* y, float* state, const float* x, const float* dt, const float* A, const float* Bm, const float* Cm,
              const std::uint8_t* reset, const SsdShape& shape, std::int64_t state_stride, cudaStream_t stream) {
  check_shape(shape, false);
  FH_EXPECT(y != nullptr && state != nullptr, "ssd_step: y and state must not be null");
  FH_EXPECT(x != nullptr && dt != nullptr && A != nullptr && Bm != nullptr && Cm != nullptr,
            "ssd_step: x, dt, A, Bm and Cm must not be null");
  const std::int64_t row = shape.heads * shape.head_dim * shape.state;
  if (state_stride == 0) state_stride = row;
  FH_EXPECT(state_stride >= row, "ssd_step: state_stride must be 0 or >= heads x head_dim x state = " +
                                     std::to_string(row) + ", got " + std::to_string(state_stride));
  Dims d{shape.batch, 1, shape.heads, shape.head_dim, shape.groups, shape.state, 1, 1, shape.heads / shape.groups};
  ssd_step_kernel<<<blocks_for(d.B * d.H * d.P), gpu::kBlock, 0, stream>>>(y, state, state_stride, x, dt, A, Bm, Cm,
                                                                           reset, d);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
