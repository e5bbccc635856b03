#include "rl/dqn/fused.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "gpu/adam.cuh"
#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/loss.cuh"
#include "gpu/partial_sum.cuh"

namespace foxhunt::rl {
namespace {

// NaN or inf, tested on the bits (exponent all ones) so no fast-math flag can fold it away.
__device__ __forceinline__ bool nonfinite(float x) { return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u; }

// ---- stack ------------------------------------------------------------------------------------

__global__ void stack_kernel(float* __restrict__ out, const float* __restrict__ a, const float* __restrict__ b,
                             std::int64_t n, bool vec4) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec4) {  // n % 4 == 0 and every pointer 16-byte aligned: out + n is aligned too
    const std::int64_t n4 = n / 4;
    auto* o4 = reinterpret_cast<float4*>(out);
    for (std::int64_t j = tid; j < 2 * n4; j += stride)
      o4[j] = j < n4 ? reinterpret_cast<const float4*>(a)[j] : reinterpret_cast<const float4*>(b)[j - n4];
    return;
  }
  for (std::int64_t i = tid; i < 2 * n; i += stride) out[i] = i < n ? a[i] : b[i - n];
}

// ---- targets + TD loss + statistics ------------------------------------------------------------

// One block up to kTdThreads samples (the standard learner's 256: no completion step). Larger batches
// with a workspace: ceil(B / kTdThreads) blocks (B = 4096: 4 blocks, one sample per thread instead
// of four in series per thread), each storing its block sums; the last block to finish adds them in
// block order (deterministic for a given B).
constexpr int kTdThreads = 1024;
constexpr std::int64_t kTdMaxBlocks = 64;

std::int64_t td_blocks(std::int64_t batch) {
  return std::min<std::int64_t>((batch + kTdThreads - 1) / kTdThreads, kTdMaxBlocks);
}

// Workspace layout: the completion counter on its own 16-byte slot, then (loss, q sum) per block.
constexpr std::size_t kTdCounterBytes = 16;

__device__ __forceinline__ std::int32_t argmax_row(const float* q, std::int64_t n) {
  std::int32_t best = 0;
  float bv = q[0];
  for (std::int64_t a = 1; a < n; ++a)
    if (q[a] > bv) {  // strict: ties keep the lowest index
      bv = q[a];
      best = static_cast<std::int32_t>(a);
    }
  return best;
}

// argmax_row for rows of at most kTdRegActions: the row's loads are issued together (addresses
// clamped into the row, so unconditional) instead of one dependent load per compare; the same
// strict scan in order of a over the first n values (same ties, same NaN behaviour).
constexpr int kTdRegActions = 16;

__device__ __forceinline__ std::int32_t argmax_row_short(const float* __restrict__ q, std::int64_t n) {
  float v[kTdRegActions];
#pragma unroll
  for (int a = 0; a < kTdRegActions; ++a) v[a] = __ldg(q + (a < n ? a : n - 1));
  std::int32_t best = 0;
  float bv = v[0];
#pragma unroll
  for (int a = 1; a < kTdRegActions; ++a)
    if (a < n && v[a] > bv) {
      bv = v[a];
      best = a;
    }
  return best;
}

// Per sample: the target y (argmax of q_select, mean over branches of q_eval), then per branch the TD
// error, its loss term and gradient (gpu/loss.cuh, shared with gpu/loss.cu) and |TD| into the
// priority. The batch sums (loss, q_mean) are added in double, in a fixed order: per block as below,
// then (several blocks) the block sums in block order by the last block.
template <bool kHuber>
__global__ void __launch_bounds__(kTdThreads)
    td_fused_kernel(float* __restrict__ d_q, float* __restrict__ priorities, DqnState* __restrict__ st,
                    const float* __restrict__ q, const float* __restrict__ q_select, const float* __restrict__ q_eval,
                    const std::int32_t* __restrict__ acts, const float* __restrict__ returns,
                    const float* __restrict__ discounts, const float* __restrict__ weights, std::int64_t batch,
                    std::int64_t branches, std::int64_t actions, float delta, float eps, double* __restrict__ partials,
                    unsigned int* __restrict__ counter) {
  static_assert(kTdThreads == 32 * 32, "the block sums assume 32 warps");
  __shared__ double s_loss[32];
  __shared__ double s_q[32];
  const float inv_n = 1.f / static_cast<float>(batch * branches);
  double loss_acc = 0.0, q_acc = 0.0;
  const bool short_rows = actions <= kTdRegActions;
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * kTdThreads + threadIdx.x; b < batch;
       b += static_cast<std::int64_t>(gridDim.x) * kTdThreads) {
    // Branch 0 peeled: its q_select row, a0 and the sample's scalars in one round trip, then
    // q_eval[best] and q[a0] together in a second (the common D == 1 needs no more).
    const std::int64_t row0 = b * branches * actions;
    const std::int32_t a0 = acts[b * branches];
    const float disc = discounts[b], ret = returns[b], w = weights ? weights[b] : 1.f;
    const std::int32_t best0 =
        short_rows ? argmax_row_short(q_select + row0, actions) : argmax_row(q_select + row0, actions);
    const float qa0 = q[row0 + a0];
    float sum = 0.f;
    sum += q_eval[row0 + best0];
    for (std::int64_t d = 1; d < branches; ++d) {
      const std::int64_t row = (b * branches + d) * actions;
      const std::int32_t best =
          short_rows ? argmax_row_short(q_select + row, actions) : argmax_row(q_select + row, actions);
      sum += q_eval[row + best];
    }
    const float y = fmaf(disc, sum / static_cast<float>(branches), ret);
    const float scale = w * inv_n;
    float loss = 0.f, prio = 0.f;
    for (std::int64_t d = 0; d < branches; ++d) {
      const std::int64_t row = (b * branches + d) * actions;
      const std::int32_t a = d == 0 ? a0 : acts[b * branches + d];
      const float qa = d == 0 ? qa0 : q[row + a];
      const float td = qa - y;
      const float ad = fabsf(td);
      float g;
      const float l = kHuber ? gpu::huber_term(td, delta, g) : gpu::mse_term(td, g);
      loss += l;
      prio += ad;
      q_acc += static_cast<double>(qa);
      for (std::int64_t k = 0; k < actions; ++k) d_q[row + k] = k == a ? scale * g : 0.f;
    }
    loss_acc += static_cast<double>(scale * loss);
    if (priorities) priorities[b] = prio + eps;
  }
  // Fixed-order block sums in double: xor butterflies within each warp, the 32 warp sums through
  // shared memory, the same butterfly in warp 0 (one barrier instead of a 10-round shared tree).
  for (int off = 16; off > 0; off >>= 1) {
    loss_acc += __shfl_xor_sync(0xffffffffu, loss_acc, off);
    q_acc += __shfl_xor_sync(0xffffffffu, q_acc, off);
  }
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  if (lane == 0) {
    s_loss[warp] = loss_acc;
    s_q[warp] = q_acc;
  }
  __syncthreads();
  if (warp == 0) {
    loss_acc = s_loss[lane];  // kTdThreads / 32 == 32 warps: one value per lane
    q_acc = s_q[lane];
    for (int off = 16; off > 0; off >>= 1) {
      loss_acc += __shfl_xor_sync(0xffffffffu, loss_acc, off);
      q_acc += __shfl_xor_sync(0xffffffffu, q_acc, off);
    }
    if (lane == 0) {
      s_loss[0] = loss_acc;
      s_q[0] = q_acc;
    }
  }
  double loss_sum = 0.0, q_sum = 0.0;  // thread 0: the batch sums
  if (gridDim.x == 1) {
    if (threadIdx.x != 0) return;
    loss_sum = s_loss[0];
    q_sum = s_q[0];
  } else {
    // Completion (thread 0 alone: it wrote s_loss[0] and s_q[0] itself, lane 0 of warp 0).
    if (threadIdx.x != 0) return;
    partials[2 * blockIdx.x] = s_loss[0];
    partials[2 * blockIdx.x + 1] = s_q[0];
    __threadfence();  // this block's sums are visible device-wide before the count says so
    if (atomicAdd(counter, 1u) != gridDim.x - 1) return;  // not the last block
    __threadfence();
    for (unsigned int i = 0; i < gridDim.x; ++i) {  // block order
      loss_sum += __ldcg(partials + 2 * i);
      q_sum += __ldcg(partials + 2 * i + 1);
    }
    *counter = 0u;  // ready for the next call
  }
  const float loss = static_cast<float>(loss_sum);
  st->loss = loss;
  st->q_mean = static_cast<float>(q_sum / static_cast<double>(batch * branches));
  if (nonfinite(loss)) st->skip = 1u;  // the only writer of skip while this kernel runs
}

// ---- gradient guard: non-finite flag, global norm, clip scale (one kernel) ------------------------

__device__ __forceinline__ float clip_coefficient(float norm, float max_norm) {
  const float c = max_norm / (norm + 1e-6f);
  return c >= 1.f ? 1.f : c;  // NaN propagates (as gpu::clip_scale / torch.clamp)
}

// First pass exactly as gpu/grad_norm's sum_squares_kernel (same grid, same per-thread order, same
// block_sum), second pass exactly as finish_partial_sum_kernel, run by the last block to finish.
__global__ void __launch_bounds__(gpu::kBlock)
    grad_guard_kernel(DqnState* __restrict__ st, float* __restrict__ priorities, const float* __restrict__ grad,
                      std::int64_t n, bool vec4, float max_norm, std::int64_t batch, float skip_priority,
                      float* __restrict__ partials, unsigned int* __restrict__ done_blocks) {
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  float acc = 0.f;
  bool bad = false;
  std::int64_t done = 0;
  if (vec4) {
    const std::int64_t n4 = n / 4;
    for (std::int64_t j = tid; j < n4; j += stride) {
      const float4 g = reinterpret_cast<const float4*>(grad)[j];
      bad |= nonfinite(g.x) || nonfinite(g.y) || nonfinite(g.z) || nonfinite(g.w);
      acc = fmaf(g.x, g.x, acc);
      acc = fmaf(g.y, g.y, acc);
      acc = fmaf(g.z, g.z, acc);
      acc = fmaf(g.w, g.w, acc);
    }
    done = n4 * 4;
  }
  for (std::int64_t i = done + tid; i < n; i += stride) {
    const float g = grad[i];
    bad |= nonfinite(g);
    acc = fmaf(g, g, acc);
  }
  acc = gpu::block_sum(acc);  // valid in thread 0
  bad = __syncthreads_or(bad);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    if (bad) atomicOr(&st->skip, 1u);
    partials[blockIdx.x] = acc;
    __threadfence();  // the partial is visible device-wide before the count says so
    last = atomicAdd(done_blocks, 1u) == gridDim.x - 1;
  }
  __syncthreads();    // also separates the two block_sum calls (they share one shared array)
  if (!last) return;  // uniform over the block
  __threadfence();
  float s = 0.f;
  // the loads of a thread's partials in flight together; the adds keep their order
#pragma unroll 4
  for (int i = threadIdx.x; i < static_cast<int>(gridDim.x); i += blockDim.x) s += __ldcg(partials + i);
  s = gpu::block_sum(s);
  __shared__ bool skip;
  if (threadIdx.x == 0) {
    const float norm = sqrtf(s);
    st->grad_norm = norm;
    if (max_norm > 0.f) st->clip_scale = clip_coefficient(norm, max_norm);
    *done_blocks = 0u;               // ready for the next call (no other block touches it any more)
    skip = __ldcg(&st->skip) != 0u;  // final: the loss guard ran before, every block's flag is in
  }
  __syncthreads();
  if (priorities && skip)
    for (std::int64_t i = threadIdx.x; i < batch; i += blockDim.x) priorities[i] = skip_priority;
}

// ---- end of update + target update + parameter check -----------------------------------------------

// The end of an update, per block once its elements are done (both end kernels): a non-finite
// parameter sets the state's flag; the last block to finish advances the counters, after every
// block has read them (its threads read them before this block-wide barrier).
__device__ __forceinline__ void end_update_block(DqnState* st, unsigned int* done_blocks, bool bad,
                                                 std::int64_t applied, bool skip) {
  bad = __syncthreads_or(bad);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    if (bad) atomicOr(&st->params_nonfinite, 1u);
    __threadfence();
    last = atomicAdd(done_blocks, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {  // every block has read the counters: now they may change
    __threadfence();
    st->updates_attempted += 1;
    st->updates_applied = applied;
    st->skips_total += skip ? 1u : 0u;
    *done_blocks = 0u;
  }
}

__global__ void end_target_kernel(DqnState* __restrict__ st, float* __restrict__ priorities, std::int64_t batch,
                                  float skip_priority, float* __restrict__ target, const float* __restrict__ online,
                                  std::int64_t n, float tau, std::int64_t period, bool vec4,
                                  unsigned int* __restrict__ done_blocks) {
  const bool skip = st->skip != 0u;
  const std::int64_t applied = st->updates_applied + (skip ? 0 : 1);
  const bool move = !skip && applied % period == 0;  // uniform over the grid
  const bool copy = tau == 1.f;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (priorities && skip)
    for (std::int64_t i = tid; i < batch; i += stride) priorities[i] = skip_priority;
  bool bad = false;
  std::int64_t done = 0;
  if (vec4) {
    const std::int64_t n4 = n / 4;
    const auto* o4 = reinterpret_cast<const float4*>(online);
    auto* t4 = reinterpret_cast<float4*>(target);
    for (std::int64_t j = tid; j < n4; j += stride) {
      const float4 o = o4[j];
      bad |= nonfinite(o.x) || nonfinite(o.y) || nonfinite(o.z) || nonfinite(o.w);
      if (!move) continue;
      if (copy) {
        t4[j] = o;
      } else {  // target_update_kernel's fmaf per element
        float4 t = t4[j];
        t.x = fmaf(tau, o.x - t.x, t.x);
        t.y = fmaf(tau, o.y - t.y, t.y);
        t.z = fmaf(tau, o.z - t.z, t.z);
        t.w = fmaf(tau, o.w - t.w, t.w);
        t4[j] = t;
      }
    }
    done = n4 * 4;
  }
  for (std::int64_t i = done + tid; i < n; i += stride) {
    const float o = online[i];
    bad |= nonfinite(o);
    if (move) target[i] = copy ? o : fmaf(tau, o - target[i], target[i]);
  }
  // Barrier: every thread of this block has read st->skip and st->updates_applied.
  end_update_block(st, done_blocks, bad, applied, skip);
}

// ---- Adam + end of update + target update + parameter check (one pass) ----------------------------

using gpu::adam_element;  // gpu/adam.cuh: the same bits as adam_step_device
using gpu::adam_element4;
using gpu::AdamConstants;

struct AdamEndParams {
  AdamConstants c;  // host-folded part (as adam_step_device)
  float beta1, weight_decay;
  bool decoupled, clip;
  float skip_priority, tau;
  std::int64_t period;
};

// Per element: p' = Adam(p) unless skipped; nonfinite(p') sets params_nonfinite; when the target
// moves, target = tau * p' + (1 - tau) * target (target_update's fmaf; tau 1: copy). The state's
// skip / updates_applied / lr / clip_scale are read once per block (thread 0) before the block's
// completion count, and the counters change only in the last block (as end_target_kernel).
__global__ void __launch_bounds__(gpu::kBlock)
    adam_end_target_kernel(DqnState* __restrict__ st, float* __restrict__ params, float* __restrict__ m,
                           float* __restrict__ v, float* __restrict__ target, float* __restrict__ priorities,
                           const float* __restrict__ grads, std::int64_t n, std::int64_t batch, AdamEndParams ap,
                           bool vec4, unsigned int* __restrict__ done_blocks) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool copy = ap.tau == 1.f;
  const std::int64_t n4 = vec4 ? n / 4 : 0;  // vec4: every buffer 16-byte aligned
  auto* p4 = reinterpret_cast<float4*>(params);
  auto* m4 = reinterpret_cast<float4*>(m);
  auto* v4 = reinterpret_cast<float4*>(v);
  auto* t4 = reinterpret_cast<float4*>(target);
  const auto* g4 = reinterpret_cast<const float4*>(grads);
  // This thread's first float4 (the launch gives one per thread for the learner's sizes) is loaded
  // before the state is read: none of these loads depends on the state, so they are in flight
  // during thread 0's state read, the constant folding and the barrier (one round trip less).
  const float4 zero4 = make_float4(0.f, 0.f, 0.f, 0.f);
  const bool first = tid < n4;
  const float4 p_first = first ? p4[tid] : zero4, m_first = first ? m4[tid] : zero4;
  const float4 v_first = first ? v4[tid] : zero4, g_first = first ? g4[tid] : zero4;
  const float4 t_first = first && !copy ? t4[tid] : zero4;
  static_assert(gpu::kBlock >= 64, "threads 0 and 32 fold the Adam constants");
  __shared__ float s_scale, s_decay, s_step, s_bc2;
  __shared__ bool s_skip;
  __shared__ std::int64_t s_applied;  // updates_applied before this update
  // adam_device_kernel's folding, in double; its two pow() chains in two warps at once (thread 0:
  // the state and the step size, thread 32: the second bias correction; kBlock >= 64 threads)
  if (threadIdx.x == 0) {
    s_skip = st->skip != 0u;
    s_applied = st->updates_applied;
    s_scale = ap.clip ? st->clip_scale : 1.f;
    const double t = static_cast<double>(s_applied + 1);
    const double l = static_cast<double>(st->lr);
    s_decay = ap.decoupled ? static_cast<float>(1.0 - l * ap.weight_decay) : 1.f;
    s_step = static_cast<float>(l / (1.0 - pow(static_cast<double>(ap.beta1), t)));
  } else if (threadIdx.x == 32) {
    const double t = static_cast<double>(st->updates_applied + 1);
    s_bc2 = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(ap.c.beta2), t)));
  }
  __syncthreads();
  AdamConstants k = ap.c;
  k.decay_factor = s_decay;
  k.step_size = s_step;
  k.bc2_sqrt = s_bc2;
  const float scale = s_scale;
  const bool skip = s_skip;
  const std::int64_t applied = s_applied + (skip ? 0 : 1);
  const bool move = !skip && applied % ap.period == 0;  // uniform over the grid
  const float tau = ap.tau;
  if (priorities && skip)
    for (std::int64_t i = tid; i < batch; i += stride) priorities[i] = ap.skip_priority;
  bool bad = false;
  for (std::int64_t j = tid; j < n4; j += stride) {
    const bool pre = j == tid;  // the prefetched element
    float4 p = pre ? p_first : p4[j];
    if (!skip) {
      float4 mm = pre ? m_first : m4[j], vv = pre ? v_first : v4[j];
      const float4 g = pre ? g_first : g4[j];
      adam_element4(p, mm, vv, g, scale, k);
      p4[j] = p;
      m4[j] = mm;
      v4[j] = vv;
    }
    bad |= nonfinite(p.x) || nonfinite(p.y) || nonfinite(p.z) || nonfinite(p.w);
    if (!move) continue;
    if (copy) {
      t4[j] = p;
    } else {
      float4 t = pre ? t_first : t4[j];
      t.x = fmaf(tau, p.x - t.x, t.x);
      t.y = fmaf(tau, p.y - t.y, t.y);
      t.z = fmaf(tau, p.z - t.z, t.z);
      t.w = fmaf(tau, p.w - t.w, t.w);
      t4[j] = t;
    }
  }
  const std::int64_t done = n4 * 4;
  for (std::int64_t i = done + tid; i < n; i += stride) {
    float p = params[i];
    if (!skip) {
      float mm = m[i], vv = v[i];
      adam_element(p, mm, vv, grads[i], scale, k);
      params[i] = p;
      m[i] = mm;
      v[i] = vv;
    }
    bad |= nonfinite(p);
    if (move) target[i] = copy ? p : fmaf(tau, p - target[i], target[i]);
  }
  end_update_block(st, done_blocks, bad, applied, skip);
}

}  // namespace

void dqn_stack_rows(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "dqn_stack_rows: n must be >= 0, got " + std::to_string(n));
  if (n == 0) return;
  FH_EXPECT(out && a && b, "dqn_stack_rows: null pointer");
  const bool vec4 = n % 4 == 0 && gpu::aligned16(out) && gpu::aligned16(a) && gpu::aligned16(b);
  const std::int64_t items = vec4 ? n / 2 : 2 * n;
  stack_kernel<<<gpu::grid_stride_blocks(items), gpu::kBlock, 0, stream>>>(out, a, b, n, vec4);
  FH_CHECK_LAUNCH();
}

std::size_t dqn_td_fused_workspace_bytes(std::int64_t batch) {
  FH_EXPECT(batch >= 1, "dqn_td_fused_workspace_bytes: batch must be >= 1, got " + std::to_string(batch));
  const std::int64_t blocks = td_blocks(batch);
  return kTdCounterBytes + (blocks > 1 ? static_cast<std::size_t>(blocks) * 2 * sizeof(double) : 0);
}

void dqn_td_fused(float* d_q, float* priorities, DqnState* state, const float* q, const float* q_select,
                  const float* q_eval, const std::int32_t* actions, const float* returns, const float* discounts,
                  const float* weights, std::int64_t batch, std::int64_t branches, std::int64_t actions_count,
                  TdLoss kind, float huber_delta, float priority_eps, cudaStream_t stream) {
  dqn_td_fused(d_q, priorities, state, q, q_select, q_eval, actions, returns, discounts, weights, batch, branches,
               actions_count, kind, huber_delta, priority_eps, nullptr, stream);
}

void dqn_td_fused(float* d_q, float* priorities, DqnState* state, const float* q, const float* q_select,
                  const float* q_eval, const std::int32_t* actions, const float* returns, const float* discounts,
                  const float* weights, std::int64_t batch, std::int64_t branches, std::int64_t actions_count,
                  TdLoss kind, float huber_delta, float priority_eps, void* workspace, cudaStream_t stream) {
  FH_EXPECT(batch >= 1 && branches >= 1 && actions_count >= 1,
            "dqn_td_fused: need batch, branches, actions >= 1; got " + std::to_string(batch) + ", " +
                std::to_string(branches) + ", " + std::to_string(actions_count));
  FH_EXPECT(kind == TdLoss::mse || (huber_delta > 0.f && std::isfinite(huber_delta)),
            "dqn_td_fused: huber_delta must be finite and > 0, got " + std::to_string(huber_delta));
  FH_EXPECT(priority_eps >= 0.f, "dqn_td_fused: priority_eps must be >= 0");
  FH_EXPECT(d_q && state && q && q_select && q_eval && actions && returns && discounts, "dqn_td_fused: null pointer");
  FH_EXPECT(workspace == nullptr || gpu::aligned16(workspace), "dqn_td_fused: workspace must be 16-byte aligned");
  // No workspace: one block for any batch (the sums in the single-block order).
  const int blocks = workspace != nullptr ? static_cast<int>(td_blocks(batch)) : 1;
  auto* counter = static_cast<unsigned int*>(workspace);
  auto* partials =
      workspace != nullptr ? reinterpret_cast<double*>(static_cast<std::byte*>(workspace) + kTdCounterBytes) : nullptr;
  if (kind == TdLoss::huber)
    td_fused_kernel<true><<<blocks, kTdThreads, 0, stream>>>(
        d_q, priorities, state, q, q_select, q_eval, actions, returns, discounts, weights, batch, branches,
        actions_count, huber_delta, priority_eps, partials, counter);
  else
    td_fused_kernel<false><<<blocks, kTdThreads, 0, stream>>>(
        d_q, priorities, state, q, q_select, q_eval, actions, returns, discounts, weights, batch, branches,
        actions_count, huber_delta, priority_eps, partials, counter);
  FH_CHECK_LAUNCH();
}

std::size_t dqn_grad_guard_workspace_bytes(std::int64_t n) {
  // partials (floats), then the counter on its own 16-byte slot
  return (gpu::partial_bytes(n) + 15) / 16 * 16 + 16;
}

void dqn_grad_guard(DqnState* state, float* priorities, const float* grads, std::int64_t n, float max_grad_norm,
                    std::int64_t batch, float skip_priority, void* workspace, cudaStream_t stream) {
  FH_EXPECT(n >= 1, "dqn_grad_guard: n must be >= 1, got " + std::to_string(n));
  FH_EXPECT(priorities == nullptr || batch >= 0, "dqn_grad_guard: batch must be >= 0");
  FH_EXPECT(std::isfinite(max_grad_norm), "dqn_grad_guard: max_grad_norm must be finite (<= 0: no clipping)");
  FH_EXPECT(state && grads && workspace, "dqn_grad_guard: null pointer (workspace: dqn_grad_guard_workspace_bytes)");
  FH_EXPECT(gpu::aligned16(workspace), "dqn_grad_guard: workspace must be 16-byte aligned");
  auto* partials = static_cast<float*>(workspace);
  auto* counter =
      reinterpret_cast<unsigned int*>(static_cast<std::byte*>(workspace) + (gpu::partial_bytes(n) + 15) / 16 * 16);
  // gpu::global_grad_norm's grid gives the same partials. On the float4 path, when that grid has at
  // most one float4 per thread (stride >= n / 4), its blocks past ceil(n / 4 / kBlock) hold no
  // element: their partials are +0, which the in-order finish adds last to sums >= +0 (or NaN / inf),
  // leaving every bit unchanged. So those empty blocks are not launched (the learner's ~85K
  // gradients: 84 blocks instead of 333; fewer completion atomics, one partial per finish thread).
  const bool vec4 = gpu::aligned16(grads);
  int blocks = gpu::partial_blocks(n);
  const std::int64_t n4 = n / 4;
  if (vec4 && static_cast<std::int64_t>(blocks) * gpu::kBlock >= n4)
    blocks = std::max(1, gpu::ceil_div(n4, gpu::kBlock));
  grad_guard_kernel<<<blocks, gpu::kBlock, 0, stream>>>(state, priorities, grads, n, vec4, max_grad_norm, batch,
                                                        skip_priority, partials, counter);
  FH_CHECK_LAUNCH();
}

void dqn_end_and_target_update(DqnState* state, float* priorities, std::int64_t batch, float skip_priority,
                               float* target, const float* online, std::int64_t n, float tau, std::int64_t period,
                               void* workspace, cudaStream_t stream) {
  FH_EXPECT(tau > 0.f && tau <= 1.f, "dqn_end_and_target_update: tau must be in (0, 1], got " + std::to_string(tau));
  FH_EXPECT(period >= 1, "dqn_end_and_target_update: period must be >= 1, got " + std::to_string(period));
  FH_EXPECT(n >= 0 && batch >= 0, "dqn_end_and_target_update: n and batch must be >= 0");
  FH_EXPECT(std::isfinite(skip_priority) && skip_priority > 0.f,
            "dqn_end_and_target_update: skip_priority must be finite and > 0");
  FH_EXPECT(state && workspace && (n == 0 || (target && online)), "dqn_end_and_target_update: null pointer");
  const bool vec4 = gpu::aligned16(target) && gpu::aligned16(online);
  // Always launches (the counters advance even with nothing to copy).
  const std::int64_t items = std::max(vec4 ? (n + 3) / 4 : n, batch);
  end_target_kernel<<<gpu::grid_stride_blocks(items), gpu::kBlock, 0, stream>>>(state, priorities, batch, skip_priority,
                                                                                target, online, n, tau, period, vec4,
                                                                                static_cast<unsigned int*>(workspace));
  FH_CHECK_LAUNCH();
}

void dqn_adam_end_and_target_update(DqnState* state, float* online, float* adam_m, float* adam_v, float* target,
                                    float* priorities, const float* grads, std::int64_t n, std::int64_t batch,
                                    const gpu::AdamConfig& adam, bool clip, float skip_priority, float tau,
                                    std::int64_t period, void* workspace, cudaStream_t stream) {
  FH_EXPECT(tau > 0.f && tau <= 1.f,
            "dqn_adam_end_and_target_update: tau must be in (0, 1], got " + std::to_string(tau));
  FH_EXPECT(period >= 1, "dqn_adam_end_and_target_update: period must be >= 1, got " + std::to_string(period));
  FH_EXPECT(n >= 0 && batch >= 0, "dqn_adam_end_and_target_update: n and batch must be >= 0");
  FH_EXPECT(std::isfinite(skip_priority) && skip_priority > 0.f,
            "dqn_adam_end_and_target_update: skip_priority must be finite and > 0");
  FH_EXPECT(adam.beta1 >= 0.f && adam.beta1 < 1.f && adam.beta2 >= 0.f && adam.beta2 < 1.f && adam.eps >= 0.f &&
                adam.weight_decay >= 0.f,
            "dqn_adam_end_and_target_update: need beta1, beta2 in [0, 1), eps >= 0, weight_decay >= 0");
  FH_EXPECT(state && workspace && (n == 0 || (online && adam_m && adam_v && target && grads)),
            "dqn_adam_end_and_target_update: null pointer");
  AdamEndParams ap{};
  ap.c.beta2 = adam.beta2;  // adam_step_device's host folding
  ap.c.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(adam.beta1));
  ap.c.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(adam.beta2));
  ap.c.eps = adam.eps;
  ap.c.weight_decay = adam.decoupled ? 0.f : adam.weight_decay;
  ap.beta1 = adam.beta1;
  ap.weight_decay = adam.weight_decay;
  ap.decoupled = adam.decoupled;
  ap.clip = clip;
  ap.skip_priority = skip_priority;
  ap.tau = tau;
  ap.period = period;
  const bool vec4 = gpu::aligned16(online) && gpu::aligned16(adam_m) && gpu::aligned16(adam_v) &&
                    gpu::aligned16(target) && gpu::aligned16(grads);
  // Always launches (the counters advance even with nothing to update).
  const std::int64_t items = std::max(vec4 ? (n + 3) / 4 : n, batch);
  adam_end_target_kernel<<<gpu::grid_stride_blocks(items), gpu::kBlock, 0, stream>>>(
      state, online, adam_m, adam_v, target, priorities, grads, n, batch, ap, vec4,
      static_cast<unsigned int*>(workspace));
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl
