#pragma once
// GPU test plumbing for the replay tests: a host block uploaded as a collector's device buffers,
// a downloaded sampled batch, and downloads of the priority tree.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "rl/replay/replay_buffer.hpp"
#include "support/gpu_test.hpp"
#include "tests/rl/replay_model.hpp"

namespace foxhunt::rl::test_model {

// A collector's block on the device (f32 observations, or bf16 when `bf16_obs`).
struct DeviceBlock {
  gpu::DeviceBuffer<float> obs, next_obs, rewards;
  gpu::DeviceBuffer<__nv_bfloat16> obs16, next_obs16;
  gpu::DeviceBuffer<std::int32_t> actions;
  gpu::DeviceBuffer<std::uint8_t> terminated, truncated;
  TransitionBatch batch;

  DeviceBlock(const HostBlock& h, const TransitionLayout& layout, cudaStream_t stream, bool bf16_obs = false) {
    rewards = test::upload(h.rewards, stream);
    actions = test::upload(h.actions, stream);
    terminated = test::upload(h.terminated, stream);
    truncated = test::upload(h.truncated, stream);
    batch.layout = layout;
    batch.layout.obs_dtype = bf16_obs ? gpu::DType::bf16 : gpu::DType::f32;
    batch.steps = h.steps;
    batch.envs = h.envs;
    if (bf16_obs) {
      obs16 = test::upload(to_bf16(h.obs), stream);
      next_obs16 = test::upload(to_bf16(h.next_obs), stream);
      batch.obs = obs16.data();
      batch.next_obs = next_obs16.data();
    } else {
      obs = test::upload(h.obs, stream);
      next_obs = test::upload(h.next_obs, stream);
      batch.obs = obs.data();
      batch.next_obs = next_obs.data();
    }
    batch.actions = actions.data();
    batch.rewards = rewards.data();
    batch.terminated = terminated.data();
    batch.truncated = truncated.data();
  }

  static std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& x) {
    std::vector<__nv_bfloat16> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = __float2bfloat16_rn(x[i]);
    return y;
  }
};

// A sampled batch on the host.
struct HostSample {
  std::vector<std::int32_t> indices;
  std::vector<float> weights, obs, returns, discounts, next_obs;
  std::vector<std::uint32_t> actions;
};

inline HostSample download_sample(const SampledBatchView& v, const TransitionLayout& layout, cudaStream_t stream) {
  const auto b = static_cast<std::size_t>(v.batch);
  HostSample s;
  s.indices = test::download(v.indices, b, stream);
  s.weights = test::download(v.weights, b, stream);
  s.obs = test::download(v.obs, b * static_cast<std::size_t>(layout.obs_dim), stream);
  s.next_obs = test::download(v.next_obs, b * static_cast<std::size_t>(layout.obs_dim), stream);
  s.actions = test::download(static_cast<const std::uint32_t*>(v.actions),
                             b * static_cast<std::size_t>(layout.action_dim), stream);
  s.returns = test::download(v.returns, b, stream);
  s.discounts = test::download(v.discounts, b, stream);
  return s;
}

// Leaf priorities (p^alpha; 0 for empty slots) of the first `count` slots.
inline std::vector<float> download_leaves(const ReplayBuffer& rb, cudaStream_t stream) {
  const TreeView* t = rb.tree_view();
  const auto stamps = test::download(t->leaves, static_cast<std::size_t>(rb.capacity()), stream);
  std::vector<float> v(stamps.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto bits = static_cast<std::uint32_t>(stamps[i] & 0xFFFFFFFFull);
    std::memcpy(&v[i], &bits, 4);
  }
  return v;
}

inline ReplayState download_state(const ReplayBuffer& rb, cudaStream_t stream) {
  return test::download(rb.device_state(), 1, stream)[0];
}

// One single-env producer inserting `rows` random rows in blocks of at most 50021, synchronously.
inline void insert_rows(ReplayBuffer& rb, int producer, std::int64_t rows, std::mt19937_64& rng, cudaStream_t stream) {
  while (rows > 0) {
    const std::int64_t steps = std::min<std::int64_t>(rows, 50021);
    const HostBlock h = random_block(steps, 1, rb.config().layout.obs_dim, 1, rng);
    DeviceBlock d(h, rb.config().layout, stream);
    rb.insert(producer, d.batch, stream);
    FH_CHECK(cudaStreamSynchronize(stream));
    rows -= steps;
  }
}

// Priority update from host indices and TD errors, synchronously.
inline void update(ReplayBuffer& rb, const std::vector<std::int32_t>& idx, const std::vector<float>& td,
                   cudaStream_t stream) {
  auto d_idx = test::upload(idx, stream);
  auto d_td = test::upload(td, stream);
  rb.update_priorities(d_idx.data(), d_td.data(), static_cast<std::int64_t>(idx.size()), stream);
  FH_CHECK(cudaStreamSynchronize(stream));
}

// The CPU reference of a priority update on reference leaves `ref` (double): stored indices only,
// p = min(max((|td| + eps)^alpha, FLT_MIN), kMaxPriority), the largest of repeated indices wins.
inline void apply_update(std::vector<double>& ref, const std::vector<std::int32_t>& idx, const std::vector<float>& td,
                         const ReplayConfig& c, std::int64_t size) {
  std::map<std::int32_t, double> best;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0 || idx[i] >= size) continue;
    const double pr = std::min(std::max(std::pow(std::fabs(static_cast<double>(td[i])) + static_cast<double>(c.eps),
                                                 static_cast<double>(c.alpha)),
                                        double{FLT_MIN}),
                               double{TreeShape::kMaxPriority});
    auto [it, fresh] = best.emplace(idx[i], pr);
    if (!fresh) it->second = std::max(it->second, pr);
  }
  for (const auto& [i, pr] : best) ref[static_cast<std::size_t>(i)] = pr;
}

// The device leaves equal the reference ones (float rounding of p^alpha).
inline void expect_leaves(const ReplayBuffer& rb, const std::vector<double>& ref, cudaStream_t stream) {
  const auto leaves = download_leaves(rb, stream);
  for (std::size_t j = 0; j < ref.size(); ++j) ASSERT_NEAR(leaves[j], ref[j], 1e-6 * ref[j]) << "slot " << j;
}

// A leaf in the tree's fixed point, as the device quantizes it (p * 2^shift is exact in double;
// nearbyint rounds half to even like __double2ull_rn).
inline std::uint64_t quantize(float p, int shift) {
  if (!(p > 0.0f)) return 0;
  const auto q = static_cast<std::uint64_t>(std::nearbyint(std::ldexp(static_cast<double>(p), shift)));
  return q > 0 ? q : 1;
}

// Every node of levels 1..top holds exactly the fixed-point sum and the min of its children (the
// same bits as a rebuild from the leaves); padding nodes are empty; no insert arrival counter is
// left behind (they are 0 between calls).
inline void expect_tree_consistent(const ReplayBuffer& rb, cudaStream_t stream) {
  const TreeView* t = rb.tree_view();
  const TreeShape& shape = rb.tree_shape();
  const std::vector<float> leaves = download_leaves(rb, stream);
  std::vector<std::uint64_t> below_sum(static_cast<std::size_t>(shape.padded[0]), 0);
  std::vector<float> below_min(below_sum.size(), std::numeric_limits<float>::infinity());
  for (std::size_t i = 0; i < leaves.size() && i < below_sum.size(); ++i) {
    below_sum[i] = quantize(leaves[i], shape.sum_shift);
    if (leaves[i] > 0) below_min[i] = leaves[i];
  }
  for (int k = 1; k <= shape.top; ++k) {
    const auto n = static_cast<std::size_t>(shape.padded[k]);
    const auto sums = test::download(t->sums[k], n, stream);
    const auto mins = test::download(t->mins[k], n, stream);
    const auto dirty = test::download(t->dirty[k], n, stream);
    for (std::size_t q = 0; q < n; ++q) {
      std::uint64_t s = 0;
      float m = std::numeric_limits<float>::infinity();
      for (std::size_t c = 0; c < 128; ++c) {
        const std::size_t child = q * 128 + c;
        if (child >= below_sum.size()) break;
        s += below_sum[child];
        m = std::min(m, below_min[child]);
      }
      ASSERT_EQ(sums[q], s) << "level " << k << " node " << q;
      ASSERT_EQ(mins[q], m) << "level " << k << " node " << q;
      ASSERT_EQ(dirty[q], 0u) << "level " << k << " node " << q << " left a non-zero counter";
    }
    below_sum = sums;
    below_min = mins;
  }
}

}  // namespace foxhunt::rl::test_model
