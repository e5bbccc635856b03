#pragma once
// Sampling a batch: one kernel that draws the indices (stratified proportional sampling down the
// priority tree, or uniform), computes the IS weights and gathers the transitions (bf16 -> f32).
//
// Prioritized: the sum [0, total) is split into `batch` equal strata; sample i draws
// u = (i + U_i) / batch * total with U_i from 53 Philox bits (double precision all the way down,
// so 2^24+ leaves are resolved). Weight w_i = (N P_i)^-beta / max_j (N P_j)^-beta
// = (p_min / p_i)^beta with p_min the global min priority kept in the tree (not the batch's).
// Uniform: index = floor(size * R_i / 2^64) from 64 Philox bits; weights 1.
// Every returned index is a stored slot in [0, size) and every weight is in [0, 1] by construction:
// the descent enters only non-empty children (float rounding past a node's children takes the last
// non-empty one), the final index is clamped into the stored range and the bootstrap slot into
// the ring, so no gather can read an unwritten slot whatever the priorities (1e-38 .. inf sums).
//
// Everything the kernel needs that changes over time (stored size, Philox counter = number of
// sample calls, tree) is read on the device, so a captured sample replays correctly in a CUDA
// graph; with `step < 0` beta is scheduled from the device count of sample calls too.
#include <cuda_runtime.h>

#include <cstdint>

#include "rl/replay/config.hpp"
#include "rl/replay/priority_tree.hpp"
#include "rl/replay/ring.hpp"
#include "rl/replay/state.hpp"
#include "rl/replay/transition_batch.hpp"

namespace foxhunt::rl {

struct SampleParams {
  SamplingMode mode = SamplingMode::prioritized;
  std::uint64_t seed = 0;
  std::uint32_t rng_stream = 0;
  double beta0 = 0.4;             // beta at step 0
  double beta1 = 1.0;             // beta after the anneal
  std::int64_t anneal_steps = 0;  // 0: constant beta0
  std::int64_t step = -1;         // >= 0: beta at this host step; < 0: at state->sample_calls
};

// The caller guarantees out.batch <= stored size (ReplayBuffer::sample checks it on the host).
// `tree` may be null only in uniform mode. out.batch == 0 returns without launching.
void sample_transitions(const SampledBatchView& out, const RingView& ring, const TreeView* tree, ReplayState* state,
                        const SampleParams& params, cudaStream_t stream);

}  // namespace foxhunt::rl
