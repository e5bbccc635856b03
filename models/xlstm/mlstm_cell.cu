#include "models/xlstm/mlstm_cell.hpp"

#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "models/xlstm/gates.cuh"

namespace foxhunt::models {
namespace {

constexpr int kChunkThreads = 256;  // a power of two: the block reduction halves it
constexpr int kStepThreads = 128;   // 4 warps, one row of C per warp at a time

std::size_t forward_smem_floats(std::int64_t L, std::int64_t D) {
  return static_cast<std::size_t>(D * D + D + 3 * L * D + L * L + 5 * L);
}
std::size_t backward_smem_floats(std::int64_t L, std::int64_t D) {
  return static_cast<std::size_t>(2 * D * D + 2 * D + 6 * L * D + 2 * L * L + 13 * L + kChunkThreads);
}

// The chunk's gate sums, serial over its Lc <= L steps (one thread): b_t (the running sum of
// log f from the chunk start), the raw ĩ_t and the stabilizer m_t of the recurrence from m_p.
__device__ void chunk_gates(float* bcs, float* igs, float* ms, float* fgs, const float* i_pre, const float* f_pre,
                            std::int64_t row0, std::int64_t H, int Lc, float m_p) {
  float cum = 0.f, mp = m_p;
  for (int t = 0; t < Lc; ++t) {
    const std::int64_t g = row0 + static_cast<std::int64_t>(t) * H;
    const float fr = f_pre[g];
    const float lf = xlstm_detail::log_sigmoid(fr);
    cum += lf;
    bcs[t] = cum;
    const float it = i_pre[g];
    igs[t] = it;
    const float mt = fmaxf(lf + mp, it);
    ms[t] = mt;
    mp = mt;
    if (fgs != nullptr) fgs[t] = fr;
  }
}

// One block per (b, h): the chunks in order, carrying (C, n, m) in shared memory. Writes h, the
// start state of every chunk (chunk_states (B, H, NC, S_h)) and the final state (nullable).
__global__ void __launch_bounds__(kChunkThreads)
    mlstm_chunk_forward_kernel(float* __restrict__ h, float* state_out, float* __restrict__ chunk_states,
                               const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                               const float* __restrict__ i_pre, const float* __restrict__ f_pre, const float* state0,
                               int T, int H, int D, int L) {
  extern __shared__ float sm[];
  __shared__ float m_state;
  const int bh = blockIdx.x, b = bh / H, hh = bh % H, tid = threadIdx.x, nt = blockDim.x;
  const int DD = D * D, S_h = DD + D + 1, NC = (T + L - 1) / L;
  float* C = sm;
  float* n = C + DD;
  float* qs = n + D;
  float* ks = qs + L * D;
  float* vs = ks + L * D;
  float* P = vs + L * D;
  float* bcs = P + L * L;
  float* igs = bcs + L;
  float* ms = igs + L;
  float* gs = ms + L;
  float* us = gs + L;
  const float scale = rsqrtf(static_cast<float>(D));
  const std::int64_t srow = static_cast<std::int64_t>(b) * H * S_h + static_cast<std::int64_t>(hh) * S_h;
  const float* st0 = state0 != nullptr ? state0 + srow : nullptr;
  for (int idx = tid; idx < DD; idx += nt) C[idx] = st0 != nullptr ? st0[idx] : 0.f;
  for (int idx = tid; idx < D; idx += nt) n[idx] = st0 != nullptr ? st0[DD + idx] : 0.f;
  if (tid == 0) m_state = st0 != nullptr ? st0[DD + D] : 0.f;
  __syncthreads();
  for (int c = 0; c < NC; ++c) {
    const int t0 = c * L, Lc = min(L, T - t0);
    const float m_p = m_state;
    float* cs = chunk_states + (static_cast<std::int64_t>(bh) * NC + c) * S_h;
    for (int idx = tid; idx < DD; idx += nt) cs[idx] = C[idx];
    for (int idx = tid; idx < D; idx += nt) cs[DD + idx] = n[idx];
    if (tid == 0) cs[DD + D] = m_p;
    // (B, T, H, D) offset of (b, t0, hh, 0); rows of one head are H * D apart.
    const std::int64_t base = ((static_cast<std::int64_t>(b) * T + t0) * H + hh) * D;
    const std::int64_t gate0 = (static_cast<std::int64_t>(b) * T + t0) * H + hh;
    for (int idx = tid; idx < Lc * D; idx += nt) {
      const int t = idx / D, d = idx - t * D;
      const std::int64_t g = base + static_cast<std::int64_t>(t) * H * D + d;
      qs[idx] = q[g];
      ks[idx] = k[g] * scale;
      vs[idx] = v[g];
    }
    if (tid == 0) chunk_gates(bcs, igs, ms, nullptr, i_pre, f_pre, gate0, H, Lc, m_p);
    __syncthreads();
    const float mL = ms[Lc - 1], bL = bcs[Lc - 1];
    for (int t = tid; t < Lc; t += nt) us[t] = expf(bL - bcs[t] + igs[t] - mL);
    // P_ts = (q_t . k_s) w_ts on and below the diagonal.
    for (int idx = tid; idx < Lc * Lc; idx += nt) {
      const int t = idx / Lc, s = idx - t * Lc;
      float val = 0.f;
      if (s <= t) {
        float dot = 0.f;
        for (int i = 0; i < D; ++i) dot += qs[t * D + i] * ks[s * D + i];
        val = dot * expf(bcs[t] - bcs[s] + igs[s] - ms[t]);
      }
      P[t * L + s] = val;
    }
    __syncthreads();
    for (int t = tid; t < Lc; t += nt) {
      float dot = 0.f;
      for (int i = 0; i < D; ++i) dot += n[i] * qs[t * D + i];
      float den = expf(bcs[t] + m_p - ms[t]) * dot;
      for (int s = 0; s <= t; ++s) den += P[t * L + s];
      gs[t] = fmaxf(fabsf(den), expf(-ms[t]));
    }
    __syncthreads();
    for (int idx = tid; idx < Lc * D; idx += nt) {
      const int t = idx / D, j = idx - t * D;
      float acc = 0.f;
      for (int i = 0; i < D; ++i) acc += C[j * D + i] * qs[t * D + i];
      acc *= expf(bcs[t] + m_p - ms[t]);
      for (int s = 0; s <= t; ++s) acc += P[t * L + s] * vs[s * D + j];
      h[base + static_cast<std::int64_t>(t) * H * D + j] = acc / gs[t];
    }
    __syncthreads();  // every output has read C and n
    // The state at the chunk's end: C = A C_p + sum_s u_s v_s k_s^T, n = A n_p + sum_s u_s k_s.
    const float A = expf(bL + m_p - mL);
    for (int idx = tid; idx < DD; idx += nt) {
      const int j = idx / D, i = idx - j * D;
      float acc = A * C[idx];
      for (int s = 0; s < Lc; ++s) acc += us[s] * vs[s * D + j] * ks[s * D + i];
      C[idx] = acc;
    }
    for (int i = tid; i < D; i += nt) {
      float acc = A * n[i];
      for (int s = 0; s < Lc; ++s) acc += us[s] * ks[s * D + i];
      n[i] = acc;
    }
    __syncthreads();
    if (tid == 0) m_state = mL;
    __syncthreads();
  }
  if (state_out != nullptr) {
    float* so = state_out + srow;
    for (int idx = tid; idx < DD; idx += nt) so[idx] = C[idx];
    for (int idx = tid; idx < D; idx += nt) so[DD + idx] = n[idx];
    if (tid == 0) so[DD + D] = m_state;
  }
}

// One block per (b, h): the chunks in reverse, carrying dC, dn (the gradient of the chunk's end
// state) in shared memory; every gradient element is written by one thread.
__global__ void __launch_bounds__(kChunkThreads)
    mlstm_chunk_backward_kernel(float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv,
                                float* __restrict__ di, float* __restrict__ df, const float* __restrict__ dh,
                                const float* __restrict__ chunk_states, const float* __restrict__ q,
                                const float* __restrict__ k, const float* __restrict__ v,
                                const float* __restrict__ i_pre, const float* __restrict__ f_pre, int T, int H, int D,
                                int L) {
  extern __shared__ float sm[];
  const int bh = blockIdx.x, b = bh / H, hh = bh % H, tid = threadIdx.x, nt = blockDim.x;
  const int DD = D * D, S_h = DD + D + 1, NC = (T + L - 1) / L;
  float* Cp = sm;
  float* dC = Cp + DD;
  float* np = dC + DD;
  float* dn = np + D;
  float* qs = dn + D;
  float* ks = qs + L * D;
  float* vs = ks + L * D;
  float* dnum = vs + L * D;  // dh, then dh / g
  float* cq = dnum + L * D;  // a_t C_p q_t
  float* num = cq + L * D;   // the numerator; later k_s (dC^T v_s + dn) for the dk / dĩ terms
  float* P = num + L * D;    // P_ts, later dlw_ts = dP_ts P_ts
  float* dS = P + L * L;     // dP_ts w_ts: the gradient of q_t . k_s
  float* bcs = dS + L * L;
  float* igs = bcs + L;
  float* ms = igs + L;
  float* fgs = ms + L;
  float* gs = fgs + L;
  float* den = gs + L;
  float* dden = den + L;
  float* cqn = dden + L;  // a_t n_p . q_t
  float* av = cqn + L;    // a_t
  float* us = av + L;     // u_s
  float* dbv = us + L;
  float* dluv = dbv + L;
  float* digv = dluv + L;
  float* red = digv + L;  // kChunkThreads
  const float scale = rsqrtf(static_cast<float>(D));
  for (int idx = tid; idx < DD; idx += nt) dC[idx] = 0.f;
  for (int idx = tid; idx < D; idx += nt) dn[idx] = 0.f;
  for (int c = NC - 1; c >= 0; --c) {
    const int t0 = c * L, Lc = min(L, T - t0);
    const float* cs = chunk_states + (static_cast<std::int64_t>(bh) * NC + c) * S_h;
    for (int idx = tid; idx < DD; idx += nt) Cp[idx] = cs[idx];
    for (int idx = tid; idx < D; idx += nt) np[idx] = cs[DD + idx];
    const float m_p = cs[DD + D];
    const std::int64_t base = ((static_cast<std::int64_t>(b) * T + t0) * H + hh) * D;
    const std::int64_t gate0 = (static_cast<std::int64_t>(b) * T + t0) * H + hh;
    for (int idx = tid; idx < Lc * D; idx += nt) {
      const int t = idx / D, d = idx - t * D;
      const std::int64_t g = base + static_cast<std::int64_t>(t) * H * D + d;
      qs[idx] = q[g];
      ks[idx] = k[g] * scale;
      vs[idx] = v[g];
      dnum[idx] = dh[g];
    }
    if (tid == 0) chunk_gates(bcs, igs, ms, fgs, i_pre, f_pre, gate0, H, Lc, m_p);
    __syncthreads();
    const float mL = ms[Lc - 1], bL = bcs[Lc - 1];
    const float A = expf(bL + m_p - mL);
    for (int t = tid; t < Lc; t += nt) {
      av[t] = expf(bcs[t] + m_p - ms[t]);
      us[t] = expf(bL - bcs[t] + igs[t] - mL);
    }
    for (int idx = tid; idx < Lc * Lc; idx += nt) {
      const int t = idx / Lc, s = idx - t * Lc;
      float val = 0.f;
      if (s <= t) {
        float dot = 0.f;
        for (int i = 0; i < D; ++i) dot += qs[t * D + i] * ks[s * D + i];
        val = dot * expf(bcs[t] - bcs[s] + igs[s] - ms[t]);
      }
      P[t * L + s] = val;
    }
    __syncthreads();
    for (int idx = tid; idx < Lc * D; idx += nt) {
      const int t = idx / D, j = idx - t * D;
      float acc = 0.f;
      for (int i = 0; i < D; ++i) acc += Cp[j * D + i] * qs[t * D + i];
      cq[idx] = av[t] * acc;
    }
    for (int t = tid; t < Lc; t += nt) {
      float dot = 0.f;
      for (int i = 0; i < D; ++i) dot += np[i] * qs[t * D + i];
      cqn[t] = av[t] * dot;
    }
    __syncthreads();
    for (int t = tid; t < Lc; t += nt) {
      float d = cqn[t];
      for (int s = 0; s <= t; ++s) d += P[t * L + s];
      den[t] = d;
      gs[t] = fmaxf(fabsf(d), expf(-ms[t]));
    }
    for (int idx = tid; idx < Lc * D; idx += nt) {
      const int t = idx / D, j = idx - t * D;
      float acc = cq[idx];
      for (int s = 0; s <= t; ++s) acc += P[t * L + s] * vs[s * D + j];
      num[idx] = acc;
    }
    __syncthreads();
    // h = num / g: dg = -(dh . num) / g^2, through |den| only where it is not clamped.
    for (int t = tid; t < Lc; t += nt) {
      float dot = 0.f;
      for (int j = 0; j < D; ++j) dot += dnum[t * D + j] * num[t * D + j];
      const float dg = -dot / (gs[t] * gs[t]);
      dden[t] = fabsf(den[t]) > expf(-ms[t]) ? (den[t] >= 0.f ? dg : -dg) : 0.f;
    }
    __syncthreads();
    for (int idx = tid; idx < Lc * D; idx += nt) dnum[idx] /= gs[idx / D];
    __syncthreads();
    // dv_s = sum_{t>=s} P_ts dnum_t + u_s dC k_s.
    for (int idx = tid; idx < Lc * D; idx += nt) {
      const int s = idx / D, j = idx - s * D;
      float acc = 0.f;
      for (int t = s; t < Lc; ++t) acc += P[t * L + s] * dnum[t * D + j];
      float acc2 = 0.f;
      for (int i = 0; i < D; ++i) acc2 += dC[j * D + i] * ks[s * D + i];
      dv[base + static_cast<std::int64_t>(s) * H * D + j] = acc + us[s] * acc2;
    }
    __syncthreads();
    for (int idx = tid; idx < Lc * Lc; idx += nt) {
      const int t = idx / Lc, s = idx - t * Lc;
      if (s <= t) {
        float dP = dden[t];
        for (int j = 0; j < D; ++j) dP += dnum[t * D + j] * vs[s * D + j];
        dS[t * L + s] = dP * expf(bcs[t] - bcs[s] + igs[s] - ms[t]);
        P[t * L + s] *= dP;
      } else {
        dS[t * L + s] = 0.f;
      }
    }
    __syncthreads();
    // dq_t = a_t (C_p^T dnum_t + dden_t n_p) + sum_s dS_ts k_s.
    for (int idx = tid; idx < Lc * D; idx += nt) {
      const int t = idx / D, i = idx - t * D;
      float acc = dden[t] * np[i];
      for (int j = 0; j < D; ++j) acc += Cp[j * D + i] * dnum[t * D + j];
      acc *= av[t];
      for (int s = 0; s <= t; ++s) acc += dS[t * L + s] * ks[s * D + i];
      dq[base + static_cast<std::int64_t>(t) * H * D + i] = acc;
    }
    // dk_s = (sum_{t>=s} dS_ts q_t + u_s (dC^T v_s + dn)) / sqrt(D).
    for (int idx = tid; idx < Lc * D; idx += nt) {
      const int s = idx / D, i = idx - s * D;
      float acc = 0.f;
      for (int t = s; t < Lc; ++t) acc += dS[t * L + s] * qs[t * D + i];
      float e = dn[i];
      for (int j = 0; j < D; ++j) e += dC[j * D + i] * vs[s * D + j];
      dk[base + static_cast<std::int64_t>(s) * H * D + i] = (acc + us[s] * e) * scale;
      num[idx] = ks[idx] * e;
    }
    // <dC, C_p> + dn . n_p, for the end-state decay A (fixed-order block reduction).
    float part = 0.f;
    for (int idx = tid; idx < DD; idx += nt) part += dC[idx] * Cp[idx];
    for (int idx = tid; idx < D; idx += nt) part += dn[idx] * np[idx];
    red[tid] = part;
    __syncthreads();
    for (int w = nt / 2; w > 0; w >>= 1) {
      if (tid < w) red[tid] += red[tid + w];
      __syncthreads();
    }
    for (int t = tid; t < Lc; t += nt) {
      float row = 0.f, col = 0.f, dlu = 0.f, dla = dden[t] * cqn[t];
      for (int s = 0; s <= t; ++s) row += P[t * L + s];
      for (int r = t; r < Lc; ++r) col += P[r * L + t];
      for (int i = 0; i < D; ++i) dlu += num[t * D + i];
      for (int j = 0; j < D; ++j) dla += dnum[t * D + j] * cq[t * D + j];
      dlu *= us[t];
      digv[t] = col + dlu;
      dbv[t] = row - col + dla - dlu;
      dluv[t] = dlu;
    }
    __syncthreads();
    if (tid == 0) {
      float sum_dlu = 0.f;
      for (int t = 0; t < Lc; ++t) sum_dlu += dluv[t];
      dbv[Lc - 1] += sum_dlu + A * red[0];
      float acc = 0.f;  // d log f_r = sum_{t>=r} db_t (b_t sums log f up to t)
      for (int t = Lc - 1; t >= 0; --t) {
        acc += dbv[t];
        const std::int64_t g = gate0 + static_cast<std::int64_t>(t) * H;
        df[g] = acc * xlstm_detail::sigmoid_neg(fgs[t]);
        di[g] = digv[t];
      }
    }
    // The start state's gradient becomes the previous chunk's end-state gradient.
    for (int idx = tid; idx < DD; idx += nt) {
      const int j = idx / D, i = idx - j * D;
      float acc = A * dC[idx];
      for (int t = 0; t < Lc; ++t) acc += av[t] * dnum[t * D + j] * qs[t * D + i];
      dC[idx] = acc;
    }
    for (int i = tid; i < D; i += nt) {
      float acc = A * dn[i];
      for (int t = 0; t < Lc; ++t) acc += av[t] * dden[t] * qs[t * D + i];
      dn[i] = acc;
    }
    __syncthreads();
  }
}

// One step for (b, h) = blockIdx.x; warp w updates rows j = w, w + 4, ... of C.
__global__ void __launch_bounds__(kStepThreads)
    mlstm_step_kernel(float* __restrict__ h, float* __restrict__ state, const float* __restrict__ q,
                      const float* __restrict__ k, const float* __restrict__ v, const float* __restrict__ i_pre,
                      const float* __restrict__ f_pre, const std::uint8_t* __restrict__ reset, int H, int D,
                      std::int64_t state_stride) {
  extern __shared__ float sm[];
  __shared__ float g_s;
  float* qv = sm;
  float* kv = qv + D;
  float* vv = kv + D;
  float* nn = vv + D;
  float* numv = nn + D;
  const int bh = blockIdx.x, b = bh / H, tid = threadIdx.x, nt = blockDim.x;
  const int lane = tid & 31, warp = tid >> 5, nwarps = nt >> 5;
  const int DD = D * D, S_h = DD + D + 1;
  float* st = state + static_cast<std::int64_t>(b) * state_stride + static_cast<std::int64_t>(bh - b * H) * S_h;
  const bool fresh = reset != nullptr && reset[b] != 0;
  const float scale = rsqrtf(static_cast<float>(D));
  const std::int64_t row = static_cast<std::int64_t>(bh) * D;
  for (int i = tid; i < D; i += nt) {
    qv[i] = q[row + i];
    kv[i] = k[row + i] * scale;
    vv[i] = v[row + i];
  }
  const float m_prev = fresh ? 0.f : st[DD + D];
  const float lf = xlstm_detail::log_sigmoid(f_pre[bh]), it = i_pre[bh];
  const float m_new = fmaxf(lf + m_prev, it);
  const float fp = expf(lf + m_prev - m_new), ip = expf(it - m_new);
  __syncthreads();
  for (int i = tid; i < D; i += nt) {
    const float val = fp * (fresh ? 0.f : st[DD + i]) + ip * kv[i];
    st[DD + i] = val;
    nn[i] = val;
  }
  for (int j = warp; j < D; j += nwarps) {
    float acc = 0.f;
    for (int i = lane; i < D; i += 32) {
      const float val = fp * (fresh ? 0.f : st[j * D + i]) + ip * vv[j] * kv[i];
      st[j * D + i] = val;
      acc += val * qv[i];
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) numv[j] = acc;
  }
  __syncthreads();
  if (tid == 0) {
    float den = 0.f;
    for (int i = 0; i < D; ++i) den += nn[i] * qv[i];
    g_s = fmaxf(fabsf(den), expf(-m_new));
    st[DD + D] = m_new;
  }
  __syncthreads();
  for (int j = tid; j < D; j += nt) h[row + j] = numv[j] / g_s;
}

void check_shape(const MlstmShape& s, const char* what) {
  FH_EXPECT(s.batch >= 1 && s.T >= 1 && s.heads >= 1 && s.head_dim >= 1,
            std::string(what) + ": batch, T, heads and head_dim must be >= 1");
  FH_EXPECT(s.chunk >= 1 && s.chunk <= kChunkThreads,
            std::string(what) + ": chunk must be in [1, 256], got " + std::to_string(s.chunk));
  FH_EXPECT(s.T <= (1 << 30) && s.heads * s.batch <= (1 << 30), std::string(what) + ": shape too large");
}

// The chunk length actually run: no more than T (a short sequence is one chunk), halved until the
// backward's shared memory fits gpu::kSharedBudgetBytes (the chunk length changes rounding only).
std::int64_t run_chunk(const MlstmShape& s) {
  std::int64_t L = s.chunk < s.T ? s.chunk : s.T;
  while (L > 1 && backward_smem_floats(L, s.head_dim) * sizeof(float) > gpu::kSharedBudgetBytes) L = (L + 1) / 2;
  return L;
}

}  // namespace

std::int64_t mlstm_state_features(std::int64_t heads, std::int64_t head_dim) {
  return heads * (head_dim * head_dim + head_dim + 1);
}

std::size_t mlstm_workspace_bytes(const MlstmShape& shape) {
  check_shape(shape, "mlstm_workspace_bytes");
  const std::int64_t L = run_chunk(shape), NC = (shape.T + L - 1) / L;
  const std::size_t floats = static_cast<std::size_t>(shape.batch * NC * mlstm_state_features(shape.heads, shape.head_dim));
  return (floats * sizeof(float) + 255) / 256 * 256;
}

void mlstm_forward(float* h, float* state_out, const float* q, const float* k, const float* v, const float* i_pre,
                   const float* f_pre, const float* state0, const MlstmShape& shape, std::byte* workspace,
                   cudaStream_t stream) {
  check_shape(shape, "mlstm_forward");
  FH_EXPECT(h && q && k && v && i_pre && f_pre && workspace, "mlstm_forward: null h, input or workspace");
  const std::int64_t L = run_chunk(shape), D = shape.head_dim;
  const std::size_t smem = forward_smem_floats(L, D) * sizeof(float);
  const int limit = gpu::max_shared_bytes_per_block();
  FH_EXPECT(smem <= static_cast<std::size_t>(limit),
            "mlstm_forward: chunk " + std::to_string(L) + " with head_dim " + std::to_string(D) + " needs " +
                std::to_string(smem) + " bytes of shared memory, the device has " + std::to_string(limit));
  FH_CHECK(cudaFuncSetAttribute(mlstm_chunk_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem)));
  const auto grid = static_cast<unsigned>(shape.batch * shape.heads);
  mlstm_chunk_forward_kernel<<<grid, kChunkThreads, smem, stream>>>(
      h, state_out, reinterpret_cast<float*>(workspace), q, k, v, i_pre, f_pre, state0, static_cast<int>(shape.T),
      static_cast<int>(shape.heads), static_cast<int>(D), static_cast<int>(L));
  FH_CHECK_LAUNCH();
}

void mlstm_backward(float* dq, float* dk, float* dv, float* di, float* df, const float* dh, const float* q,
                    const float* k, const float* v, const float* i_pre, const float* f_pre, const MlstmShape& shape,
                    const std::byte* workspace, cudaStream_t stream) {
  check_shape(shape, "mlstm_backward");
  FH_EXPECT(dq && dk && dv && di && df && dh && q && k && v && i_pre && f_pre && workspace,
            "mlstm_backward: null gradient, input or workspace");
  const std::int64_t L = run_chunk(shape), D = shape.head_dim;
  const std::size_t smem = backward_smem_floats(L, D) * sizeof(float);
  const int limit = gpu::max_shared_bytes_per_block();
  FH_EXPECT(smem <= static_cast<std::size_t>(limit),
            "mlstm_backward: chunk " + std::to_string(L) + " with head_dim " + std::to_string(D) + " needs " +
                std::to_string(smem) + " bytes of shared memory, the device has " + std::to_string(limit));
  FH_CHECK(cudaFuncSetAttribute(mlstm_chunk_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem)));
  const auto grid = static_cast<unsigned>(shape.batch * shape.heads);
  mlstm_chunk_backward_kernel<<<grid, kChunkThreads, smem, stream>>>(
      dq, dk, dv, di, df, dh, reinterpret_cast<const float*>(workspace), q, k, v, i_pre, f_pre,
      static_cast<int>(shape.T), static_cast<int>(shape.heads), static_cast<int>(D), static_cast<int>(L));
  FH_CHECK_LAUNCH();
}

void mlstm_step(float* h, float* state, const float* q, const float* k, const float* v, const float* i_pre,
                const float* f_pre, const std::uint8_t* reset, std::int64_t batch, std::int64_t heads,
                std::int64_t head_dim, std::int64_t state_stride, cudaStream_t stream) {
  FH_EXPECT(batch >= 1 && heads >= 1 && head_dim >= 1, "mlstm_step: batch, heads and head_dim must be >= 1");
  const std::int64_t S = mlstm_state_features(heads, head_dim);
  if (state_stride == 0) state_stride = S;
  FH_EXPECT(state_stride >= S, "mlstm_step: state_stride must be 0 or >= " + std::to_string(S));
  FH_EXPECT(h && state && q && k && v && i_pre && f_pre, "mlstm_step: null output, state or input");
  const std::size_t smem = static_cast<std::size_t>(5 * head_dim) * sizeof(float);
  mlstm_step_kernel<<<static_cast<unsigned>(batch * heads), kStepThreads, smem, stream>>>(
      h, state, q, k, v, i_pre, f_pre, reset, static_cast<int>(heads), static_cast<int>(head_dim), state_stride);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
