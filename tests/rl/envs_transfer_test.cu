// Stepping environments, running device baseline policies and exporting episode statistics move
// no data between host and device by memcpy: the statistics leave through the exit module only.
#include <cstdint>

#include "gpu/exit.hpp"
#include "gpu/transfer_audit.hpp"
#include "rl/envs/cartpole.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_policies.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::rl {
namespace {

class EnvTransferTest : public test::GpuTest {};

struct Io {
  Io(std::int64_t n, std::int64_t d, std::int64_t steps)
      : obs(n * d * steps), reward(n * steps), te(n * steps), tr(n * steps), final_obs(n * d * steps) {}
  StepOutputs view() {
    return StepOutputs{obs.data(), reward.data(), te.data(), tr.data(), final_obs.data(), gpu::DType::f32};
  }
  gpu::DeviceBuffer<float> obs, reward;
  gpu::DeviceBuffer<std::uint8_t> te, tr;
  gpu::DeviceBuffer<float> final_obs;
};

TEST_F(EnvTransferTest, StepsPoliciesAndStatisticsCopyNothing) {
  const std::int64_t n = 1024, steps = 8;
  MarketConfig mc;
  mc.process = PriceProcess::ou;
  mc.initial_price = {100.0};
  mc.kappa = {5.0};
  mc.theta = {0.0};
  mc.sigma = {0.2};
  mc.episode_length = 5;  // episodes end inside the audited region
  validate(mc);
  MarketEnv market(mc, n), rollout(mc, n);
  CartPoleEnv cartpole(n);
  Io mio(n, market.obs_dim(), 1), cio(n, 4, steps), rio(n, rollout.obs_dim(), steps);
  gpu::DeviceBuffer<std::int32_t> mact(n), cact(n * steps), ract(n * steps);
  cact.zero(stream());
  ract.zero(stream());
  market.reset(mio.obs.data(), gpu::DType::f32, 1, stream());
  cartpole.reset(cio.obs.data(), gpu::DType::f32, 2, stream());
  rollout.reset(rio.obs.data(), gpu::DType::f32, 3, stream());
  gpu::ExitSlot<EpisodeStats> slot;
  FH_CHECK(cudaStreamSynchronize(stream()));

  gpu::TransferAudit audit;
  try {
    audit.start();
  } catch (const gpu::TransferAuditUnavailable& e) {
    GTEST_SKIP() << e.what();
  }
  for (int t = 0; t < steps; ++t) {
    market_policy_actions(mact.data(), nullptr, market, BaselinePolicy::ou_oracle, 4, t, stream());
    market.step(mio.view(), ActionInput{mact.data(), nullptr}, 1, stream());
  }
  cartpole.step(cio.view(), ActionInput{cact.data(), nullptr}, steps, stream());
  rollout.step(rio.view(), ActionInput{ract.data(), nullptr}, steps, stream());  // T steps in one call
  market.export_stats(slot, true, stream());
  const EpisodeStats st = slot.wait();
  const gpu::TransferCounts counts = audit.stop();
  EXPECT_EQ(counts.device_to_host, 0) << counts.str();
  EXPECT_EQ(counts.host_to_device, 0) << counts.str();
  EXPECT_EQ(st.episodes, static_cast<double>(n));  // one 5-step episode each in 8 steps
}

}  // namespace
}  // namespace foxhunt::rl
