#include "rl/envs/vec_env.hpp"

#include <string>

namespace foxhunt::rl {

void VecEnv::check_step_args(const StepOutputs& out, const ActionInput& actions, std::int64_t steps) const {
  FH_EXPECT(steps >= 1, "step: steps must be >= 1 (got " + std::to_string(steps) + ")");
  FH_EXPECT(out.obs != nullptr, "step: out.obs must be a device buffer of (steps, N, obs_dim)");
  FH_EXPECT(out.reward != nullptr, "step: out.reward must be a device buffer of (steps, N)");
  FH_EXPECT(out.terminated != nullptr, "step: out.terminated must be a device buffer of (steps, N)");
  FH_EXPECT(out.truncated != nullptr, "step: out.truncated must be a device buffer of (steps, N)");
  FH_EXPECT(out.obs_dtype == gpu::DType::f32 || out.obs_dtype == gpu::DType::bf16,
            "step: out.obs_dtype must be f32 or bf16 (got " + std::string(gpu::dtype_name(out.obs_dtype)) + ")");
  if (action_space().kind == ActionSpace::Kind::discrete) {
    FH_EXPECT(actions.discrete != nullptr && actions.continuous == nullptr,
              "step: this environment takes discrete actions: set actions.discrete (int32, (steps, N, branches))");
  } else {
    FH_EXPECT(actions.continuous != nullptr && actions.discrete == nullptr,
              "step: this environment takes continuous actions: set actions.continuous (f32, (steps, N, dim))");
  }
}

}  // namespace foxhunt::rl
