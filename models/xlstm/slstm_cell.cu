#include "models/xlstm/slstm_cell.hpp"

#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "models/blocks/column_sum.cuh"
#include "models/xlstm/gates.cuh"

namespace foxhunt::models {
namespace {

using xlstm_detail::log_sigmoid;
using xlstm_detail::sigmoid;
using xlstm_detail::sigmoid_neg;

constexpr int kMaxThreads = 256;

// Rows of the batch tile one block runs: about kMaxThreads threads of D units each.
int batch_tile(std::int64_t D, std::int64_t B) {
  std::int64_t bt = kMaxThreads / D;
  if (bt < 1) bt = 1;
  if (bt > B) bt = B;
  return static_cast<int>(bt);
}

// The tape of the forward, per step: the pre-activations (B, T, 4, H, D), c, n, m, h (B, T, H, D),
// and the initial state after the reset mask (B, 4, H, D); then the backward's dR partial sums.
struct Tape {
  float *pre = nullptr, *c = nullptr, *n = nullptr, *m = nullptr, *h = nullptr, *init = nullptr;
  float* dr_partials = nullptr;
};
Tape carve_tape(std::byte* base, const SlstmShape& s) {
  const std::size_t rows = static_cast<std::size_t>(s.batch * s.T), HD = static_cast<std::size_t>(s.heads * s.head_dim);
  std::size_t off = 0;
  auto take = [&](std::size_t floats) {
    float* p = base != nullptr ? reinterpret_cast<float*>(base + off) : nullptr;
    off += (floats * sizeof(float) + 255) / 256 * 256;
    return p;
  };
  Tape t;
  t.pre = take(rows * 4 * HD);
  t.c = take(rows * HD);
  t.n = take(rows * HD);
  t.m = take(rows * HD);
  t.h = take(rows * HD);
  t.init = take(static_cast<std::size_t>(s.batch) * 4 * HD);
  t.dr_partials = take(blocks_detail::column_sum_floats(s.batch * s.T, 4 * s.heads * s.head_dim * s.head_dim));
  return t;
}
std::size_t tape_bytes(const SlstmShape& s) {
  const std::size_t rows = static_cast<std::size_t>(s.batch * s.T), HD = static_cast<std::size_t>(s.heads * s.head_dim);
  auto r = [](std::size_t floats) { return (floats * sizeof(float) + 255) / 256 * 256; };
  return r(rows * 4 * HD) + 4 * r(rows * HD) + r(static_cast<std::size_t>(s.batch) * 4 * HD) +
         r(blocks_detail::column_sum_floats(s.batch * s.T, 4 * s.heads * s.head_dim * s.head_dim));
}

// Block (batch tile, head): thread (bl, d) runs unit d of batch row blockIdx.x * Bt + bl through
// all T steps. Shared: Rt[g][e][d] = R[g][h][d][e] (consecutive d: no bank conflicts), two h buffers.
// Tape pointers null: no tape (the step form).
__global__ void __launch_bounds__(kMaxThreads)
    slstm_forward_kernel(float* __restrict__ h, float* state_out, Tape tape, const float* __restrict__ gx,
                         const float* __restrict__ R, const float* state0, const std::uint8_t* __restrict__ reset0,
                         int B, int T, int H, int D, int Bt, std::int64_t state_stride) {
  extern __shared__ float sm[];
  float* Rt = sm;
  float* hbuf0 = Rt + 4 * D * D;
  float* hbuf1 = hbuf0 + Bt * D;
  const int tid = threadIdx.x, bl = tid / D, d = tid - bl * D, hh = blockIdx.y;
  const int b = blockIdx.x * Bt + bl;
  const bool valid = bl < Bt && b < B;
  const int HD = H * D, DD = D * D;
  for (int idx = tid; idx < 4 * DD; idx += blockDim.x) {
    const int g = idx / DD, r = idx - g * DD, e = r / D, dd = r - e * D;
    Rt[idx] = R[(static_cast<std::int64_t>(g) * H + hh) * DD + static_cast<std::int64_t>(dd) * D + e];
  }
  float hv = 0.f, c = 0.f, n = 0.f, m = 0.f;
  const std::int64_t unit = static_cast<std::int64_t>(hh) * D + d;
  if (valid) {
    if (state0 != nullptr && (reset0 == nullptr || reset0[b] == 0)) {
      const float* s0 = state0 + static_cast<std::int64_t>(b) * state_stride + unit;
      hv = s0[0];
      c = s0[HD];
      n = s0[2 * HD];
      m = s0[3 * HD];
    }
    if (tape.init != nullptr) {
      float* ti = tape.init + static_cast<std::int64_t>(b) * 4 * HD + unit;
      ti[0] = hv;
      ti[HD] = c;
      ti[2 * HD] = n;
      ti[3 * HD] = m;
    }
    hbuf0[bl * D + d] = hv;
  }
  __syncthreads();
  float* hcur = hbuf0;
  float* hnext = hbuf1;
  for (int t = 0; t < T; ++t) {
    if (valid) {
      const std::int64_t row = static_cast<std::int64_t>(b) * T + t;
      const float* gp = gx + row * 4 * HD + unit;
      float pre[4];
#pragma unroll
      for (int g = 0; g < 4; ++g) {
        float acc = gp[g * HD];
        const float* rg = Rt + g * DD + d;
        const float* hp = hcur + bl * D;
        for (int e = 0; e < D; ++e) acc += rg[e * D] * hp[e];
        pre[g] = acc;
      }
      const bool fresh = n == 0.f;
      const float lf = log_sigmoid(pre[1]);
      const float m_new = fresh ? pre[0] : fmaxf(lf + m, pre[0]);
      const float ip = expf(pre[0] - m_new), fp = fresh ? 0.f : expf(lf + m - m_new);
      const float z = tanhf(pre[2]), o = sigmoid(pre[3]);
      c = fp * c + ip * z;
      n = fp * n + ip;
      m = m_new;
      hv = o * c / n;
      h[row * HD + unit] = hv;
      hnext[bl * D + d] = hv;
      if (tape.pre != nullptr) {
#pragma unroll
        for (int g = 0; g < 4; ++g) tape.pre[row * 4 * HD + g * HD + unit] = pre[g];
        tape.c[row * HD + unit] = c;
        tape.n[row * HD + unit] = n;
        tape.m[row * HD + unit] = m;
        tape.h[row * HD + unit] = hv;
      }
    }
    __syncthreads();
    float* tmp = hcur;
    hcur = hnext;
    hnext = tmp;
  }
  if (valid && state_out != nullptr) {
    float* so = state_out + static_cast<std::int64_t>(b) * state_stride + unit;
    so[0] = hv;
    so[HD] = c;
    so[2 * HD] = n;
    so[3 * HD] = m;
  }
}

// Backward through time, block (batch tile, head) as in the forward. Shared: R[g][d][e] of the
// head (consecutive e: no bank conflicts in dh_{t-1} = sum_g R_g^T d_pre_g), the tile's d_pre.
__global__ void __launch_bounds__(kMaxThreads)
    slstm_backward_kernel(float* __restrict__ d_gx, Tape tape, const float* __restrict__ dh,
                          const float* __restrict__ R, int B, int T, int H, int D, int Bt) {
  extern __shared__ float sm[];
  float* Rs = sm;
  float* dps = Rs + 4 * D * D;  // (Bt, 4, D)
  const int tid = threadIdx.x, bl = tid / D, d = tid - bl * D, hh = blockIdx.y;
  const int b = blockIdx.x * Bt + bl;
  const bool valid = bl < Bt && b < B;
  const int HD = H * D, DD = D * D;
  for (int idx = tid; idx < 4 * DD; idx += blockDim.x) {
    const int g = idx / DD, r = idx - g * DD;
    Rs[idx] = R[(static_cast<std::int64_t>(g) * H + hh) * DD + r];
  }
  const std::int64_t unit = static_cast<std::int64_t>(hh) * D + d;
  float dc = 0.f, dn = 0.f, dh_rec = 0.f;
  __syncthreads();
  for (int t = T - 1; t >= 0; --t) {
    if (valid) {
      const std::int64_t row = static_cast<std::int64_t>(b) * T + t;
      const float* pre = tape.pre + row * 4 * HD + unit;
      const float pi = pre[0], pf = pre[HD], pz = pre[2 * HD], po = pre[3 * HD];
      const float ct = tape.c[row * HD + unit], nt = tape.n[row * HD + unit], mt = tape.m[row * HD + unit];
      float cp, np, mp;
      if (t > 0) {
        cp = tape.c[(row - 1) * HD + unit];
        np = tape.n[(row - 1) * HD + unit];
        mp = tape.m[(row - 1) * HD + unit];
      } else {
        const float* ti = tape.init + static_cast<std::int64_t>(b) * 4 * HD + unit;
        cp = ti[HD];
        np = ti[2 * HD];
        mp = ti[3 * HD];
      }
      const bool fresh = np == 0.f;
      const float lf = log_sigmoid(pf);
      const float ip = expf(pi - mt), fp = fresh ? 0.f : expf(lf + mp - mt);
      const float z = tanhf(pz), o = sigmoid(po);
      const float dhv = dh[row * HD + unit] + dh_rec;
      const float inv_n = 1.f / nt;
      const float d_o = dhv * ct * inv_n;
      dc += dhv * o * inv_n;
      dn -= dhv * o * ct * inv_n * inv_n;
      const float dlogf = fresh ? 0.f : fp * (dc * cp + dn * np);
      const float dpi = ip * (dc * z + dn);
      const float dpf = dlogf * sigmoid_neg(pf);
      const float dpz = dc * ip * (1.f - z * z);
      const float dpo = d_o * o * (1.f - o);
      float* dg = d_gx + row * 4 * HD + unit;
      dg[0] = dpi;
      dg[HD] = dpf;
      dg[2 * HD] = dpz;
      dg[3 * HD] = dpo;
      float* dp = dps + bl * 4 * D + d;
      dp[0] = dpi;
      dp[D] = dpf;
      dp[2 * D] = dpz;
      dp[3 * D] = dpo;
      dc *= fp;
      dn *= fp;
    }
    __syncthreads();
    if (valid) {  // this thread's unit as e: dh_{t-1}[e] = sum_g sum_d R[g][d][e] d_pre_g[d]
      float acc = 0.f;
      const float* dp = dps + bl * 4 * D;
      for (int g = 0; g < 4; ++g)
        for (int dd = 0; dd < D; ++dd) acc += Rs[g * DD + dd * D + d] * dp[g * D + dd];
      dh_rec = acc;
    }
    __syncthreads();
  }
}

// dR[g][h][d][e] = sum over rows (b, t) of d_gx[b, t, g, h, d] * h_{t-1}[b, h, e]: column j =
// ((g * H + h) * D + d) * D + e of a deterministic column sum over the B * T rows.
struct RecurrentWeightTerm {
  const float *d_gx, *h, *init;
  std::int64_t T, H, D;
  __device__ float operator()(std::int64_t r, std::int64_t j) const {
    const std::int64_t HD = H * D, DD = D * D;
    const std::int64_t e = j % D, d = (j / D) % D, hh = (j / DD) % H, g = j / (H * DD);
    const std::int64_t t = r % T, hcol = hh * D + e;
    const float hprev = t == 0 ? init[(r / T) * 4 * HD + hcol] : h[(r - 1) * HD + hcol];
    return d_gx[r * 4 * HD + g * HD + hh * D + d] * hprev;
  }
};

void check_shape(const SlstmShape& s, const char* what) {
  FH_EXPECT(s.batch >= 1 && s.T >= 1 && s.heads >= 1 && s.head_dim >= 1,
            std::string(what) + ": batch, T, heads and head_dim must be >= 1");
  FH_EXPECT(s.head_dim <= kMaxThreads,
            std::string(what) + ": head_dim must be <= 256, got " + std::to_string(s.head_dim));
  FH_EXPECT(s.batch * s.T <= (1LL << 31) && s.T <= (1 << 30), std::string(what) + ": shape too large");
}

std::size_t checked_smem(std::int64_t floats, const char* what, std::int64_t D) {
  int dev = 0, limit = 0;
  FH_CHECK(cudaGetDevice(&dev));
  FH_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const std::size_t bytes = static_cast<std::size_t>(floats) * sizeof(float);
  FH_EXPECT(bytes <= static_cast<std::size_t>(limit), std::string(what) + ": head_dim " + std::to_string(D) +
                                                          " needs " + std::to_string(bytes) +
                                                          " bytes of shared memory, the device has " +
                                                          std::to_string(limit));
  return bytes;
}

void launch_forward(float* h, float* state_out, const Tape& tape, const float* gx, const float* R, const float* state0,
                    const std::uint8_t* reset0, std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t D,
                    std::int64_t state_stride, cudaStream_t stream) {
  const int Bt = batch_tile(D, B);
  const std::size_t smem = checked_smem(4 * D * D + 2 * Bt * D, "slstm_forward", D);
  FH_CHECK(cudaFuncSetAttribute(slstm_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(gpu::ceil_div(B, Bt)), static_cast<unsigned>(H));
  slstm_forward_kernel<<<grid, static_cast<unsigned>(Bt * D), smem, stream>>>(
      h, state_out, tape, gx, R, state0, reset0, static_cast<int>(B), static_cast<int>(T), static_cast<int>(H),
      static_cast<int>(D), Bt, state_stride);
  FH_CHECK_LAUNCH();
}

}  // namespace

std::int64_t slstm_state_features(std::int64_t heads, std::int64_t head_dim) { return 4 * heads * head_dim; }

std::size_t slstm_workspace_bytes(const SlstmShape& shape) {
  check_shape(shape, "slstm_workspace_bytes");
  return tape_bytes(shape);
}

void slstm_forward(float* h, float* state_out, const float* gx, const float* R, const float* state0,
                   const std::uint8_t* reset0, const SlstmShape& shape, std::byte* workspace, cudaStream_t stream) {
  check_shape(shape, "slstm_forward");
  FH_EXPECT(h && gx && R && workspace, "slstm_forward: null h, gx, R or workspace");
  launch_forward(h, state_out, carve_tape(workspace, shape), gx, R, state0, reset0, shape.batch, shape.T, shape.heads,
                 shape.head_dim, 4 * shape.heads * shape.head_dim, stream);
}

void slstm_backward(float* d_gx, float* dR, const float* dh, const float* R, const SlstmShape& shape,
                    const std::byte* workspace, cudaStream_t stream) {
  check_shape(shape, "slstm_backward");
  FH_EXPECT(d_gx && dR && dh && R && workspace, "slstm_backward: null d_gx, dR, dh, R or workspace");
  const Tape tape = carve_tape(const_cast<std::byte*>(workspace), shape);
  const std::int64_t B = shape.batch, D = shape.head_dim, H = shape.heads;
  const int Bt = batch_tile(D, B);
  const std::size_t smem = checked_smem(4 * D * D + 4 * Bt * D, "slstm_backward", D);
  FH_CHECK(cudaFuncSetAttribute(slstm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(gpu::ceil_div(B, Bt)), static_cast<unsigned>(H));
  slstm_backward_kernel<<<grid, static_cast<unsigned>(Bt * D), smem, stream>>>(
      d_gx, tape, dh, R, static_cast<int>(B), static_cast<int>(shape.T), static_cast<int>(H), static_cast<int>(D), Bt);
  FH_CHECK_LAUNCH();
  blocks_detail::column_sum(dR, B * shape.T, 4 * H * D * D, RecurrentWeightTerm{d_gx, tape.h, tape.init, shape.T, H, D},
                            tape.dr_partials, stream);
}

void slstm_step(float* h, float* state, const float* gx, const float* R, const std::uint8_t* reset,
                std::int64_t batch, std::int64_t heads, std::int64_t head_dim, std::int64_t state_stride,
                cudaStream_t stream) {
  check_shape(SlstmShape{batch, 1, heads, head_dim}, "slstm_step");
  FH_EXPECT(h && state && gx && R, "slstm_step: null h, state, gx or R");
  const std::int64_t S = slstm_state_features(heads, head_dim);
  if (state_stride == 0) state_stride = S;
  FH_EXPECT(state_stride >= S, "slstm_step: state_stride must be 0 or >= " + std::to_string(S));
  launch_forward(h, state, Tape{}, gx, R, state, reset, batch, 1, heads, head_dim, state_stride, stream);
}

}  // namespace foxhunt::models
