#include "rl/ppo/fused_mlp.hpp"

#include <algorithm>
#include <string>

#include "gpu/check.hpp"
#include "gpu/device.hpp"
#include "gpu/launch.cuh"
#include "gpu/reduce.cuh"
#include "rl/ppo/heads.cuh"

namespace foxhunt::rl::ppo {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kR = kFusedTileRows;
constexpr int kRowsPerWarp = kR / kWarps;  // forward and input-gradient rows of one warp
constexpr int kStatCols = 5;               // tile partials: pg, entropy, approx_kl, clipped rows, value loss
constexpr int kMaxSegments = 4 * kFusedMaxLayers + 1;
static_assert(kR == 32, "the per-row loss runs on one warp, a lane per row");

enum Act : int { kIdentity = 0, kTanh = 1, kRelu = 2 };

// Shared-memory layout of one network's block, in floats: per layer the transposed weight
// wt[k * ws + j] = W[j][k] (ws = out rounded up to odd: lanes over j or over k never share a
// bank) and the bias; each layer's activations (R rows of its width; act[0] is the input); two
// gradient buffers of R rows of the widest layer output.
struct Layout {
  int wt[kFusedMaxLayers], bias[kFusedMaxLayers], ws[kFusedMaxLayers];
  int act[kFusedMaxLayers + 1];
  int delta[2];
  int floats;
};
__host__ __device__ inline Layout layout_of(const FusedNet& n) {
  Layout o{};
  int off = 0, widest = 1;
  for (int l = 0; l < n.layers; ++l) {
    o.ws[l] = n.width[l + 1] | 1;
    o.wt[l] = off;
    off += n.width[l] * o.ws[l];
    o.bias[l] = off;
    off += n.width[l + 1];
    widest = n.width[l + 1] > widest ? n.width[l + 1] : widest;
  }
  for (int l = 0; l <= n.layers; ++l) {
    o.act[l] = off;
    off += kR * n.width[l];
  }
  o.delta[0] = off;
  off += kR * widest;
  o.delta[1] = off;
  off += kR * widest;
  o.floats = off;
  return o;
}

__device__ __forceinline__ float activate(float x, int act) {
  return act == kTanh ? tanhf(x) : act == kRelu ? fmaxf(x, 0.f) : x;
}
// The derivative from the activation's output y.
__device__ __forceinline__ float activation_grad(float y, int act) {
  return act == kTanh ? 1.f - y * y : act == kRelu ? (y > 0.f ? 1.f : 0.f) : 1.f;
}

// Every load of a thread is issued before its stores (float4 when the rows allow), so staging
// costs about one global latency instead of one per element: at a few rows it is most of a step.
__device__ void load_weights(float* sm, const FusedNet& n, const Layout& lo) {
  constexpr int kBatch = 8;
  for (int l = 0; l < n.layers; ++l) {
    const int in = n.width[l], out = n.width[l + 1], ws = lo.ws[l];
    float* wt = sm + lo.wt[l];
    if (in % 4 == 0) {  // arena tensors start 256-byte aligned
      const auto* w4 = reinterpret_cast<const float4*>(n.w[l]);
      const int n4 = in * out / 4, in4 = in / 4;
      for (int base = 0; base < n4; base += kBatch * kThreads) {
        float4 v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = base + u * kThreads + threadIdx.x;
          if (i < n4) v[u] = __ldg(w4 + i);
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = base + u * kThreads + threadIdx.x;
          if (i >= n4) continue;
          const int j = i / in4, k = (i - j * in4) * 4;
          wt[k * ws + j] = v[u].x;
          wt[(k + 1) * ws + j] = v[u].y;
          wt[(k + 2) * ws + j] = v[u].z;
          wt[(k + 3) * ws + j] = v[u].w;
        }
      }
    } else {
      const float* w = n.w[l];
      for (int base = 0; base < in * out; base += kBatch * kThreads) {
        float v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = base + u * kThreads + threadIdx.x;
          if (i < in * out) v[u] = __ldg(w + i);
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = base + u * kThreads + threadIdx.x;
          if (i >= in * out) continue;
          const int j = i / in, k = i - j * in;
          wt[k * ws + j] = v[u];
        }
      }
    }
    for (int j = threadIdx.x; j < out; j += kThreads) sm[lo.bias[l] + j] = __ldg(n.b[l] + j);
  }
}

// out (R, n_out) = act(in (R, n_in) W^T + b): lane j (and j + 32) of warp w, rows w * 4 .. + 3.
__device__ void forward_layer(float* out, const float* in, const float* wt, int ws, const float* bias, int n_in,
                              int n_out, int act) {
  const int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * kRowsPerWarp;
  const int j = lane, j2 = lane + 32;
  if (j >= n_out) return;
  const bool two = j2 < n_out;
  float a[kRowsPerWarp], a2[kRowsPerWarp];
  const float b = bias[j], b2 = two ? bias[j2] : 0.f;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) a[i] = b, a2[i] = b2;
  for (int k = 0; k < n_in; ++k) {
    const float w = wt[k * ws + j];
    const float w2 = two ? wt[k * ws + j2] : 0.f;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const float x = in[(r0 + i) * n_in + k];
      a[i] = fmaf(x, w, a[i]);
      a2[i] = fmaf(x, w2, a2[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    out[(r0 + i) * n_out + j] = activate(a[i], act);
    if (two) out[(r0 + i) * n_out + j2] = activate(a2[i], act);
  }
}

// d_in (R, n_in) = (d_out (R, n_out) W) * act'(a_in): lanes over k.
__device__ void backward_input(float* d_in, const float* d_out, const float* wt, int ws, const float* a_in, int n_in,
                               int n_out, int act) {
  const int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * kRowsPerWarp;
  const int k = lane, k2 = lane + 32;
  if (k >= n_in) return;
  const bool two = k2 < n_in;
  float a[kRowsPerWarp] = {}, a2[kRowsPerWarp] = {};
  for (int j = 0; j < n_out; ++j) {
    const float w = wt[k * ws + j];
    const float w2 = two ? wt[k2 * ws + j] : 0.f;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const float d = d_out[(r0 + i) * n_out + j];
      a[i] = fmaf(d, w, a[i]);
      a2[i] = fmaf(d, w2, a2[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = r0 + i;
    d_in[r * n_in + k] = a[i] * activation_grad(a_in[r * n_in + k], act);
    if (two) d_in[r * n_in + k2] = a2[i] * activation_grad(a_in[r * n_in + k2], act);
  }
}

// This tile's dW (n_out, n_in) = d_out^T a_in and db = column sums of d_out, into global
// partials: warp w takes outputs 8w .. 8w + 7 (then + 64), lanes the inputs.
__device__ void weight_grads(float* dw, float* db, const float* d_out, const float* a_in, int n_in, int n_out) {
  constexpr int kJ = 8;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int j0 = warp * kJ; j0 < n_out; j0 += kWarps * kJ) {
    const int nj = min(kJ, n_out - j0);
    for (int k = lane; k < n_in; k += 32) {
      float acc[kJ] = {};
      for (int r = 0; r < kR; ++r) {
        const float x = a_in[r * n_in + k];
        const float* d = d_out + r * n_out + j0;
#pragma unroll
        for (int jj = 0; jj < kJ; ++jj)
          if (jj < nj) acc[jj] = fmaf(d[jj], x, acc[jj]);
      }
#pragma unroll
      for (int jj = 0; jj < kJ; ++jj)
        if (jj < nj) dw[(j0 + jj) * n_in + k] = acc[jj];
    }
  }
  for (int j = threadIdx.x; j < n_out; j += kThreads) {
    float s = 0.f;
    for (int r = 0; r < kR; ++r) s += d_out[r * n_out + j];
    db[j] = s;
  }
}

// Weights, then the tile's inputs (rows[r] < 0: a zero row), then the forward; returns the
// head's activations act[layers] (R, width[layers]).
__device__ float* load_and_forward(float* sm, const FusedNet& n, const Layout& lo, const float* obs,
                                   const std::int64_t* rows, int act) {
  load_weights(sm, n, lo);
  const int C = n.width[0];
  float* a0 = sm + lo.act[0];
  for (int i = threadIdx.x; i < kR * C; i += kThreads) {
    const int r = i / C, c = i - r * C;
    a0[i] = rows[r] >= 0 ? obs[rows[r] * C + c] : 0.f;
  }
  __syncthreads();
  for (int l = 0; l < n.layers; ++l) {
    forward_layer(sm + lo.act[l + 1], sm + lo.act[l], sm + lo.wt[l], lo.ws[l], sm + lo.bias[l], n.width[l],
                  n.width[l + 1], l + 1 < n.layers ? act : kIdentity);
    __syncthreads();
  }
  return sm + lo.act[n.layers];
}

struct ActArgs {
  FusedNet net[2];  // actor, critic
  HeadShape head;
  const float* log_std;
  FusedActOutputs out;
  const float* obs;
  std::int64_t rows;
  std::uint64_t seed;
  std::uint32_t stream_id;
  const std::uint64_t* step;
  std::uint64_t step_offset;
  int first_net;  // 1: the critic alone
  int act;
};

__global__ void __launch_bounds__(kThreads) act_kernel(ActArgs a) {
  extern __shared__ float sm[];
  __shared__ std::int64_t rows[kR];
  __shared__ FusedNet n;  // shared, not local: the layer loops index them at run time
  __shared__ Layout lo;
  const int which = a.first_net + static_cast<int>(blockIdx.y);
  if (threadIdx.x == 0) {
    n = a.net[which];
    lo = layout_of(n);
  }
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kR;
  if (threadIdx.x < kR) rows[threadIdx.x] = base + threadIdx.x < a.rows ? base + threadIdx.x : -1;
  __syncthreads();
  const float* head = load_and_forward(sm, n, lo, a.obs, rows, a.act);
  if (threadIdx.x >= kR || rows[threadIdx.x] < 0) return;
  const std::int64_t row = rows[threadIdx.x];
  const int W = n.width[n.layers];
  const float* h = head + threadIdx.x * W;
  if (which == 1) {
    a.out.value[row] = h[0];
    return;
  }
  const std::uint64_t c = (*a.step + a.step_offset) * static_cast<std::uint64_t>(a.rows) + static_cast<std::uint64_t>(row);
  const int aw = a.head.action_width();
  float lp = 0.f;
  for (int b = 0; b < aw; ++b)
    lp += heads::sample_branch(a.out.discrete + row * aw, a.out.raw + row * aw, a.out.env_actions + row * aw, h,
                               a.log_std, b, a.head, a.seed, a.stream_id, c);
  if (a.out.logp) a.out.logp[row] = lp;
}

struct LossArgs {
  HeadShape head;
  const float* log_std;
  int log_std_offset;
  float clip, ent_coef, vf_coef;
  bool clip_value;
};

struct MinibatchArgs {
  FusedNet net[2];
  LossArgs loss;
  FusedMinibatchInputs in;
  const std::int32_t* indices;
  std::int64_t rows;
  const float* norm;
  float* partials[2];
  double* stat_partials;  // (tiles, kStatCols)
  int act;
};

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The policy loss's gradient for the tile's head rows into d (R, width), the log-std terms into
// dls (R, dim); this lane's row is r. Writes the tile's statistics partials (lane 0).
__device__ void policy_rows(float* d, float* dls, const float* head, const MinibatchArgs& a, std::int64_t row, int r,
                            double* stats_out) {
  const LossArgs& L = a.loss;
  const HeadShape& s = L.head;
  const int W = s.width(), aw = s.action_width(), choices = s.choices;
  float* dr = d + r * W;
  double acc[4] = {0, 0, 0, 0};
  if (row >= 0) {
    const float* h = head + r * W;
    const float inv_b = 1.f / static_cast<float>(a.rows);
    float lp = 0.f, ent = 0.f;
    for (int b = 0; b < aw; ++b) {
      if (!s.gaussian()) {
        const float* l = h + b * choices;
        const heads::Branch st = heads::categorical_branch(l, choices);
        lp += heads::categorical_logp(l, choices, st, a.in.discrete[row * aw + b]);
        ent += st.entropy;
      } else {
        const float ls = L.log_std[b];
        lp += heads::gaussian_logp(a.in.raw[row * aw + b], h[b], ls, s);
        ent += heads::gaussian_entropy(ls);
      }
    }
    const float adv = a.in.advantages[row];
    const float an = a.norm ? (adv - a.norm[0]) / a.norm[1] : adv;
    const float log_ratio = lp - a.in.logp[row];
    const float ratio = expf(log_ratio);
    float pg;
    const float slope = heads::surrogate_slope(an, ratio, L.clip, &pg);
    const float coef = slope * ratio * inv_b;
    acc[0] = pg;
    acc[1] = ent;
    acc[2] = (ratio - 1.f) - log_ratio;
    acc[3] = fabsf(ratio - 1.f) > L.clip ? 1.0 : 0.0;
    for (int b = 0; b < aw; ++b) {
      if (!s.gaussian()) {
        const float* l = h + b * choices;
        const heads::Branch st = heads::categorical_branch(l, choices);
        const std::int32_t act = a.in.discrete[row * aw + b];
        const float ent_scale = L.ent_coef * inv_b;
        for (int k = 0; k < choices; ++k) {
          const float logp_k = (l[k] - st.max) - st.log_z;
          const float p = expf(logp_k);
          const float ent_term = p > 0.f ? ent_scale * p * (logp_k + st.entropy) : 0.f;
          dr[b * choices + k] = coef * ((k == act ? 1.f : 0.f) - p) + ent_term;
        }
      } else {
        const float inv_std = 1.f / expf(L.log_std[b]);
        const float z = (a.in.raw[row * aw + b] - h[b]) * inv_std;
        dr[b] = coef * z * inv_std;
        dls[r * s.dim + b] = slope * ratio * (z * z - 1.f);
      }
    }
  } else {
    for (int k = 0; k < W; ++k) dr[k] = 0.f;
    if (s.gaussian())
      for (int b = 0; b < s.dim; ++b) dls[r * s.dim + b] = 0.f;
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) acc[k] = warp_sum(acc[k]);
  if (r == 0)
    for (int k = 0; k < 4; ++k) stats_out[k] = acc[k];
}

__device__ void value_rows(float* d, const float* head, const MinibatchArgs& a, std::int64_t row, int r,
                           double* stats_out) {
  double l = 0;
  if (row >= 0) {
    float loss;
    const float g = heads::value_term(head[r], a.loss.clip_value ? a.in.values[row] : 0.f, a.in.returns[row],
                                      a.loss.clip, a.loss.clip_value, &loss);
    d[r] = g * (a.loss.vf_coef * 0.5f / static_cast<float>(a.rows));
    l = loss;
  } else {
    d[r] = 0.f;
  }
  l = warp_sum(l);
  if (r == 0) stats_out[4] = l;
}

__global__ void __launch_bounds__(kThreads) minibatch_kernel(MinibatchArgs a) {
  extern __shared__ float sm[];
  __shared__ std::int64_t rows[kR];
  __shared__ FusedNet n;
  __shared__ Layout lo;
  const int which = static_cast<int>(blockIdx.y);
  if (threadIdx.x == 0) {
    n = a.net[which];
    lo = layout_of(n);
  }
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kR;
  if (threadIdx.x < kR) rows[threadIdx.x] = base + threadIdx.x < a.rows ? a.indices[base + threadIdx.x] : -1;
  __syncthreads();
  const float* head = load_and_forward(sm, n, lo, a.in.obs, rows, a.act);
  float* tile_partials = a.partials[which] + static_cast<std::size_t>(blockIdx.x) * n.partial_floats;
  double* stats = a.stat_partials + static_cast<std::size_t>(blockIdx.x) * kStatCols;
  int cur = 0;
  float* d = sm + lo.delta[0];
  if (threadIdx.x < 32) {
    if (which == 0)
      policy_rows(d, sm + lo.delta[1], head, a, rows[threadIdx.x], threadIdx.x, stats);
    else
      value_rows(d, head, a, rows[threadIdx.x], threadIdx.x, stats);
  }
  __syncthreads();
  if (which == 0 && a.loss.head.gaussian()) {
    const int dim = a.loss.head.dim;
    const float* dls = sm + lo.delta[1];
    for (int b = threadIdx.x; b < dim; b += kThreads) {
      float s = 0.f;
      for (int r = 0; r < kR; ++r) s += dls[r * dim + b];
      tile_partials[a.loss.log_std_offset + b] = s;
    }
    __syncthreads();  // delta[1] is the next layer's gradient buffer
  }
  for (int l = n.layers - 1; l >= 0; --l) {
    const float* d_out = sm + lo.delta[cur];
    weight_grads(tile_partials + n.w_offset[l], tile_partials + n.b_offset[l], d_out, sm + lo.act[l], n.width[l],
                 n.width[l + 1]);
    if (l > 0)
      backward_input(sm + lo.delta[cur ^ 1], d_out, sm + lo.wt[l], lo.ws[l], sm + lo.act[l], n.width[l],
                     n.width[l + 1], a.act);
    __syncthreads();
    cur ^= 1;
  }
}

struct Segment {
  float* dst;
  const float* src;  // tile 0's partials of this tensor
  int count, stride;
  float scale, add;
};
struct ReduceArgs {
  Segment seg[kMaxSegments];
  int segments, tiles;
  const double* stat_partials;
  LossStats* stats;
  std::int64_t rows;
};

// blockIdx.y < segments: dst = scale * (sum over tiles in order) + add; the next row of blocks
// adds the statistics.
__global__ void __launch_bounds__(kThreads) reduce_kernel(ReduceArgs a) {
  if (static_cast<int>(blockIdx.y) < a.segments) {
    const Segment s = a.seg[blockIdx.y];
    for (int i = blockIdx.x * kThreads + threadIdx.x; i < s.count; i += gridDim.x * kThreads) {
      float sum = 0.f;
      const float* p = s.src + i;
#pragma unroll 8
      for (int t = 0; t < a.tiles; ++t) sum += p[static_cast<std::size_t>(t) * s.stride];
      s.dst[i] = sum * s.scale + s.add;
    }
    return;
  }
  if (blockIdx.x != 0) return;
  __shared__ double sums[kStatCols];
  if (threadIdx.x < kStatCols) {
    double s = 0;
    for (int t = 0; t < a.tiles; ++t) s += a.stat_partials[static_cast<std::size_t>(t) * kStatCols + threadIdx.x];
    sums[threadIdx.x] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const double inv_b = 1.0 / static_cast<double>(a.rows);
    const float kl = static_cast<float>(sums[2] * inv_b);
    LossStats* st = a.stats;
    st->policy_loss += static_cast<float>(sums[0] * inv_b);
    st->entropy += static_cast<float>(sums[1] * inv_b);
    st->approx_kl += kl;
    st->clip_fraction += static_cast<float>(sums[3] * inv_b);
    st->last_approx_kl = kl;
    st->minibatches += 1;
    st->value_loss += static_cast<float>(0.5 * sums[4] * inv_b);
  }
}

// norm[m] = {mean, unbiased std + 1e-8} of minibatch m's advantages (shifted sums in double, as
// rl/ppo/loss.cu's normalization).
__global__ void __launch_bounds__(kThreads)
    advantage_norms_kernel(float* __restrict__ norm, const float* __restrict__ adv,
                           const std::int32_t* __restrict__ indices, std::int64_t rows_per) {
  __shared__ double scratch[32];
  const std::int32_t* idx = indices + static_cast<std::int64_t>(blockIdx.x) * rows_per;
  const double shift = adv[idx[0]];
  double s1 = 0, s2 = 0;
  for (std::int64_t i = threadIdx.x; i < rows_per; i += kThreads) {
    const double d = static_cast<double>(adv[idx[i]]) - shift;
    s1 += d;
    s2 += d * d;
  }
  s1 = gpu::block_sum(s1, scratch);
  s2 = gpu::block_sum(s2, scratch);
  if (threadIdx.x == 0) {
    const double n = static_cast<double>(rows_per);
    const double var = fmax((s2 - s1 * s1 / n) / (n - 1.0), 0.0);
    norm[2 * blockIdx.x] = static_cast<float>(shift + s1 / n);
    norm[2 * blockIdx.x + 1] = static_cast<float>(sqrt(var)) + 1e-8f;
  }
}

int act_code(gpu::Activation a) { return a == gpu::Activation::tanh ? kTanh : kRelu; }
int tiles_of(std::int64_t rows) { return static_cast<int>((rows + kR - 1) / kR); }
std::size_t round256(std::size_t b) { return (b + 255) / 256 * 256; }

void fill(FusedNet& f, std::int64_t obs_dim, models::Mlp* trunk, models::Dense& head) {
  int l = 0;
  f.width[0] = static_cast<int>(obs_dim);
  auto add = [&](models::Dense& d) {
    f.w[l] = d.weight();
    f.b[l] = d.bias();
    f.dw[l] = d.weight_grad();
    f.db[l] = d.bias_grad();
    f.width[l + 1] = static_cast<int>(d.out_features());
    ++l;
  };
  if (trunk)
    for (models::Dense& d : trunk->layers()) add(d);
  add(head);
  f.layers = l;
  int off = 0;
  for (int k = 0; k < l; ++k) {
    f.w_offset[k] = off;
    off += f.width[k] * f.width[k + 1];
    f.b_offset[k] = off;
    off += f.width[k + 1];
  }
  f.partial_floats = off;
}

}  // namespace

std::string fused_unsupported_reason(const PpoConfig& c, std::int64_t obs_dim) {
  const std::string cap = std::to_string(kFusedMaxWidth);
  if (c.recurrent()) return "recurrent policies (lstm_hidden > 0) run on the GEMM path";
  if (c.shared_trunk) return "shared trunks run on the GEMM path";
  if (c.math != gpu::LinearMath::fp32) return "tf32 and bf16 math run on the GEMM path";
  if (c.activation != gpu::Activation::tanh && c.activation != gpu::Activation::relu)
    return "only tanh and relu trunks are fused";
  if (static_cast<int>(c.hidden.size()) >= kFusedMaxLayers)
    return "more than " + std::to_string(kFusedMaxLayers - 1) + " hidden layers";
  if (obs_dim > kFusedMaxWidth) return "observation width " + std::to_string(obs_dim) + " > " + cap;
  for (std::int64_t h : c.hidden)
    if (h > kFusedMaxWidth) return "hidden width " + std::to_string(h) + " > " + cap;
  if (c.head.width() > kFusedMaxWidth) return "head width " + std::to_string(c.head.width()) + " > " + cap;
  return {};
}

FusedActorCritic::FusedActorCritic(ActorCritic& net, const PpoConfig& config) : config_(config) {
  const std::string why = fused_unsupported_reason(config, net.obs_dim());
  FH_EXPECT(why.empty(), "FusedActorCritic: " + why);
  fill(actor_, net.obs_dim(), net.actor_trunk(), net.policy_head());
  fill(critic_, net.obs_dim(), net.critic_trunk(), net.value_head());
  if (config_.head.gaussian()) {
    log_std_ = net.log_std();
    log_std_grad_ = net.log_std_grad();
    log_std_offset_ = actor_.partial_floats;
    actor_.partial_floats += config_.head.dim;
  }
  smem_bytes_ = sizeof(float) * static_cast<std::size_t>(std::max(layout_of(actor_).floats, layout_of(critic_).floats));
  FH_EXPECT(smem_bytes_ <= static_cast<std::size_t>(gpu::max_shared_bytes_per_block()),
            "FusedActorCritic: " + std::to_string(smem_bytes_) + " bytes of shared memory exceed the device's");
  FH_CHECK(cudaFuncSetAttribute(act_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes_)));
  FH_CHECK(cudaFuncSetAttribute(minibatch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem_bytes_)));
}

void FusedActorCritic::act(const FusedActOutputs& out, const float* obs, std::int64_t rows, std::uint64_t seed,
                           std::uint32_t stream_id, const std::uint64_t* step, std::uint64_t step_offset,
                           cudaStream_t stream) const {
  FH_EXPECT(rows >= 0, "FusedActorCritic::act: rows must be >= 0");
  if (rows == 0) return;
  FH_EXPECT(obs && step, "FusedActorCritic::act: null obs or step");
  if (config_.head.gaussian())
    FH_EXPECT(out.raw && out.env_actions, "FusedActorCritic::act: gaussian needs raw and env_actions");
  else
    FH_EXPECT(out.discrete, "FusedActorCritic::act: categorical needs discrete");
  ActArgs a{};
  a.net[0] = actor_;
  a.net[1] = critic_;
  a.head = config_.head;
  a.log_std = log_std_;
  a.out = out;
  a.obs = obs;
  a.rows = rows;
  a.seed = seed;
  a.stream_id = stream_id;
  a.step = step;
  a.step_offset = step_offset;
  a.first_net = 0;
  a.act = act_code(config_.activation);
  const dim3 grid(static_cast<unsigned>(tiles_of(rows)), out.value ? 2u : 1u);
  act_kernel<<<grid, kThreads, smem_bytes_, stream>>>(a);
  FH_CHECK_LAUNCH();
}

void FusedActorCritic::values(float* value, const float* obs, std::int64_t rows, cudaStream_t stream) const {
  FH_EXPECT(rows >= 0, "FusedActorCritic::values: rows must be >= 0");
  if (rows == 0) return;
  FH_EXPECT(value && obs, "FusedActorCritic::values: null value or obs");
  ActArgs a{};
  a.net[0] = actor_;
  a.net[1] = critic_;
  a.head = config_.head;
  a.out.value = value;
  a.obs = obs;
  a.rows = rows;
  a.first_net = 1;
  a.act = act_code(config_.activation);
  act_kernel<<<dim3(static_cast<unsigned>(tiles_of(rows)), 1u), kThreads, smem_bytes_, stream>>>(a);
  FH_CHECK_LAUNCH();
}

void FusedActorCritic::advantage_norms(float* norm, const float* advantages, const std::int32_t* indices,
                                       std::int64_t rows_per, int minibatches, cudaStream_t stream) const {
  FH_EXPECT(rows_per >= 2, "FusedActorCritic::advantage_norms: advantage normalization needs rows >= 2");
  FH_EXPECT(minibatches >= 1, "FusedActorCritic::advantage_norms: minibatches must be >= 1");
  FH_EXPECT(norm && advantages && indices, "FusedActorCritic::advantage_norms: null pointer");
  advantage_norms_kernel<<<minibatches, kThreads, 0, stream>>>(norm, advantages, indices, rows_per);
  FH_CHECK_LAUNCH();
}

std::size_t FusedActorCritic::minibatch_workspace_bytes(std::int64_t rows) const {
  const auto tiles = static_cast<std::size_t>(tiles_of(rows));
  return round256(tiles * static_cast<std::size_t>(actor_.partial_floats) * sizeof(float)) +
         round256(tiles * static_cast<std::size_t>(critic_.partial_floats) * sizeof(float)) +
         round256(tiles * kStatCols * sizeof(double));
}

void FusedActorCritic::minibatch(LossStats* stats, const FusedMinibatchInputs& in, const std::int32_t* indices,
                                 std::int64_t rows, const float* norm, void* workspace, cudaStream_t stream) const {
  FH_EXPECT(rows >= 1, "FusedActorCritic::minibatch: rows must be >= 1");
  FH_EXPECT(stats && indices && workspace && in.obs && in.logp && in.advantages && in.returns,
            "FusedActorCritic::minibatch: null pointer");
  FH_EXPECT(!config_.clip_value || in.values, "FusedActorCritic::minibatch: clip_value needs the behaviour values");
  if (config_.head.gaussian())
    FH_EXPECT(in.raw, "FusedActorCritic::minibatch: gaussian needs raw");
  else
    FH_EXPECT(in.discrete, "FusedActorCritic::minibatch: categorical needs discrete");
  const int tiles = tiles_of(rows);
  auto* base = static_cast<unsigned char*>(workspace);
  MinibatchArgs a{};
  a.net[0] = actor_;
  a.net[1] = critic_;
  a.loss = LossArgs{config_.head, log_std_, log_std_offset_, config_.clip, config_.ent_coef, config_.vf_coef,
                    config_.clip_value};
  a.in = in;
  a.indices = indices;
  a.rows = rows;
  a.norm = norm;
  a.partials[0] = reinterpret_cast<float*>(base);
  base += round256(static_cast<std::size_t>(tiles) * actor_.partial_floats * sizeof(float));
  a.partials[1] = reinterpret_cast<float*>(base);
  base += round256(static_cast<std::size_t>(tiles) * critic_.partial_floats * sizeof(float));
  a.stat_partials = reinterpret_cast<double*>(base);
  a.act = act_code(config_.activation);
  minibatch_kernel<<<dim3(static_cast<unsigned>(tiles), 2u), kThreads, smem_bytes_, stream>>>(a);
  FH_CHECK_LAUNCH();

  ReduceArgs r{};
  int widest = 1;
  auto segment = [&](float* dst, const float* src, int count, int stride, float scale, float add) {
    r.seg[r.segments++] = Segment{dst, src, count, stride, scale, add};
    widest = std::max(widest, count);
  };
  for (int k = 0; k < 2; ++k) {
    const FusedNet& n = k == 0 ? actor_ : critic_;
    for (int l = 0; l < n.layers; ++l) {
      segment(n.dw[l], a.partials[k] + n.w_offset[l], n.width[l] * n.width[l + 1], n.partial_floats, 1.f, 0.f);
      segment(n.db[l], a.partials[k] + n.b_offset[l], n.width[l + 1], n.partial_floats, 1.f, 0.f);
    }
  }
  if (config_.head.gaussian())
    segment(log_std_grad_, a.partials[0] + log_std_offset_, config_.head.dim, actor_.partial_floats,
            1.f / static_cast<float>(rows), -config_.ent_coef);
  r.tiles = tiles;
  r.stat_partials = a.stat_partials;
  r.stats = stats;
  r.rows = rows;
  const dim3 grid(static_cast<unsigned>((widest + kThreads - 1) / kThreads), static_cast<unsigned>(r.segments + 1));
  reduce_kernel<<<grid, kThreads, 0, stream>>>(r);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl::ppo
