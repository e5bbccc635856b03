#pragma once
// PPO policy heads: the action distribution a network's head output parameterizes, sampled for
// acting, evaluated (log-prob, entropy) for the update. Row-major throughout; one row per
// environment (acting) or per minibatch sample (update).
//
// Categorical (Discrete, MultiDiscrete): head_out (rows, branches * choices) holds branch-major
// logits; the branches are independent categoricals, so log-prob and entropy are sums over
// branches. Log-softmax subtracts the branch max; logits of -inf (masked choices) are never drawn
// and add nothing to the entropy.
//
// Gaussian (Box): head_out (rows, dim) holds the means; log_std (dim) is a state-independent
// parameter (CleanRL's actor_logstd). The sample u = mean + exp(log_std) * z is stored as `raw`;
// the environment gets
//   clip: clamp(u, low, high); log-prob is that of u under N(mean, std) (CleanRL: the env clips);
//   tanh: low + (tanh(u) + 1) / 2 * (high - low); log-prob is that of the squashed action:
//         log N(u) - sum_d log((high - low) / 2 * (1 - tanh(u_d)^2)), with
//         log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)) (finite for every finite u).
// Entropy (both bounds) is the diagonal Gaussian's of u: sum_d (1/2 + log(2 pi)/2 + log_std_d).
// The squashed distribution has no closed-form entropy; SB3 and CleanRL use the same stand-in,
// whose gradient (d/d log_std = 1) is what the entropy bonus needs.
//
// Randomness: Philox4x32-10 (gpu/philox.cuh) keyed by `seed`, with the 128-bit counter block
//   {lo32(c), hi32(c), stream_id, j},  c = (*step) * rows + row,
// j = branch / 4 (categorical) or d / 4 (gaussian): one block serves four branches or dimensions.
// Branch b draws u = u32_to_uniform_open0(word b % 4) in (0, 1] and takes the first choice whose
// running sum of exp(logit - max) reaches u * sum (inverse CDF, one uniform per branch). Dimension
// d takes normal lane d % 4 of the block: Box-Muller on words (x, y) for lanes 0-1, (z, w) for 2-3
// (gpu::normal2). j = 0 is exactly gpu::random_bits4(seed, stream_id, c). *step lives in device
// memory and is never advanced here (advance_counter in rl/ppo/minibatch.hpp), so one captured
// graph draws fresh numbers at every replay; give each caller its own stream_id.
//
// Limits: branches <= 128, dim <= 128 (kMaxHeadLanes); any number of choices >= 1.
// Every launcher is graph-capturable and deterministic (sums over branches and dimensions in a
// fixed order); rows == 0 launches nothing.
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::rl::ppo {

inline constexpr int kMaxHeadLanes = 128;  // most branches (categorical) or dimensions (gaussian) per row

struct HeadShape {
  enum class Kind : std::uint8_t { categorical, gaussian } kind = Kind::categorical;
  int branches = 1;              // categorical: sub-actions per row (multi-discrete, one per asset)
  int choices = 2;               // categorical: choices per branch
  int dim = 0;                   // gaussian: action values per row
  float low = -1.f, high = 1.f;  // gaussian: env bounds
  enum class Bound : std::uint8_t { clip, tanh } bound = Bound::clip;

  // Floats of the network head output per row: branches * choices logits (branch-major), or dim means.
  __host__ __device__ int width() const { return kind == Kind::categorical ? branches * choices : dim; }
  // Values per stored action: branches (int32 actions) or dim (float actions).
  __host__ __device__ int action_width() const { return kind == Kind::categorical ? branches : dim; }
  __host__ __device__ bool gaussian() const { return kind == Kind::gaussian; }
};

// Throws (FH_EXPECT) unless the shape is usable: categorical 1 <= branches <= 128, choices >= 1;
// gaussian 1 <= dim <= 128, finite low < high.
void check_head_shape(const HeadShape& shape, const char* who);

// Acting. head_out (rows, width). Categorical writes discrete (rows, branches) int32; gaussian writes
// raw (rows, dim) = u and env_actions (rows, dim) (bounded as above). logp (rows) = log-prob of the
// stored action (null: not written). log_std: (dim) device parameter, gaussian only.
void sample_actions(std::int32_t* discrete, float* raw, float* env_actions, float* logp, const float* head_out,
                    const float* log_std, std::int64_t rows, const HeadShape& shape, std::uint64_t seed,
                    std::uint32_t stream_id, const std::uint64_t* step, cudaStream_t stream);

// Deterministic (evaluation) actions: argmax per branch (ties -> lowest index) into discrete
// (rows, branches); gaussian: the mean, bounded as above, into env_actions (rows, dim).
void greedy_actions(std::int32_t* discrete, float* env_actions, const float* head_out, std::int64_t rows,
                    const HeadShape& shape, cudaStream_t stream);

// Per-row log-prob and entropy of given actions (the update's evaluate): logp (rows), entropy
// (rows), either nullable. Categorical reads discrete (rows, branches), gaussian raw (rows, dim).
// An action index outside [0, choices) gives logp = NaN.
void log_prob_entropy(float* logp, float* entropy, const float* head_out, const float* log_std,
                      const std::int32_t* discrete, const float* raw, std::int64_t rows, const HeadShape& shape,
                      cudaStream_t stream);

}  // namespace foxhunt::rl::ppo
