#pragma once
// ObservationFilter: a VecEnv that shows only some columns of another's observation (e.g.
// CartPole without its two velocities, which makes the task partially observable: a policy
// needs memory to solve it). Everything else is the inner environment's. final_obs rows of
// environments that did not finish hold stale values (as the interface allows).
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/buffer.hpp"
#include "rl/envs/vec_env.hpp"

namespace foxhunt::rl {

class ObservationFilter final : public VecEnv {
 public:
  // columns: distinct indices into the inner observation, in the order they are shown.
  ObservationFilter(std::unique_ptr<VecEnv> inner, std::vector<std::int32_t> columns, cudaStream_t stream);

  std::int64_t num_envs() const override { return inner_->num_envs(); }
  std::int64_t obs_dim() const override { return static_cast<std::int64_t>(columns_.size()); }
  ActionSpace action_space() const override { return inner_->action_space(); }
  void reset(void* obs, gpu::DType obs_dtype, std::uint64_t seed, cudaStream_t stream) override;
  void step(const StepOutputs& out, const ActionInput& actions, std::int64_t steps, cudaStream_t stream) override;
  void reduce_stats(EpisodeStats* out, bool clear, cudaStream_t stream) override {
    inner_->reduce_stats(out, clear, stream);
  }

  VecEnv& inner() noexcept { return *inner_; }
  const std::vector<std::int32_t>& columns() const noexcept { return columns_; }

 private:
  std::unique_ptr<VecEnv> inner_;
  std::vector<std::int32_t> columns_;
  gpu::DeviceBuffer<std::int32_t> d_columns_;
  gpu::DeviceBuffer<float> obs_, final_obs_;  // the inner env's full observations, f32
};

// out (rows, k) = in (rows, c)[:, columns] (f32 or bf16 out).
void select_columns(void* out, gpu::DType out_dtype, const float* in, const std::int32_t* columns, std::int64_t rows,
                    std::int64_t in_cols, std::int64_t k, cudaStream_t stream);

}  // namespace foxhunt::rl
