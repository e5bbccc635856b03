// learner.math for DQN agents: each value reaches the Q-network spec the learner, the collector's
// policy and the evaluation build from (actors/stage_factory dqn_learner_config), survives the
// resolved config, and anything else is refused naming the key and the allowed values.
#include <gtest/gtest.h>

#include <string>

#include "actors/run_config.hpp"
#include "actors/stage_factory.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;

namespace {

std::string dqn_config(const std::string& learner_extra) {
  return "[run]\n[env]\nkind = \"cartpole\"\n[learner]\nkind = \"dqn\"\n" + learner_extra;
}

}  // namespace

TEST(DqnLearnerMathConfig, EachValueReachesTheNetworkSpec) {
  EXPECT_EQ(dqn_learner_config(parse_run_config(dqn_config("")), 4, 1, 2).net.math, gpu::LinearMath::fp32);
  const struct {
    const char* value;
    gpu::LinearMath math;
  } cases[] = {{"fp32", gpu::LinearMath::fp32}, {"tf32", gpu::LinearMath::tf32}, {"bf16", gpu::LinearMath::bf16}};
  for (const auto& k : cases) {
    SCOPED_TRACE(k.value);
    const RunConfig c = parse_run_config(dqn_config(std::string("math = \"") + k.value + "\"\n"));
    EXPECT_EQ(c.learner.math, k.value);
    EXPECT_EQ(dqn_learner_config(c, 4, 1, 2).net.math, k.math);
    // Noisy heads take the same arithmetic (their composed weights go through the same GEMMs).
    const RunConfig noisy = parse_run_config(dqn_config(std::string("math = \"") + k.value + "\"\nnoisy = true\n"));
    EXPECT_EQ(dqn_learner_config(noisy, 4, 1, 2).net.math, k.math);
    const RunConfig back = parse_run_config(resolved_toml(c), "resolved");
    EXPECT_EQ(back.learner.math, k.value);
  }
}

TEST(DqnLearnerMathConfig, UnknownValueIsRefusedNamingTheKey) {
  try {
    (void)parse_run_config(dqn_config("math = \"fp16\"\n"));
    FAIL() << "math = \"fp16\" was accepted";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("learner.math = \"fp16\": must be one of \"fp32\" | \"tf32\" | \"bf16\""), std::string::npos)
        << what;
  }
}
