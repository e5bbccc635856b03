// actors::check_checkpoint on host-written checkpoints: a fitting one passes, each kind of damage
// or mismatch is named with the file, the tensor or key, and the expected against the found value.
#include "actors/checkpoint_check.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/host_checkpoint.hpp"

namespace fs = std::filesystem;
using namespace foxhunt;
using namespace foxhunt::actors;

namespace {

RunConfig small_config() {
  RunConfig c;
  c.run.total_env_steps = 20'000;
  c.env.num_envs = 4;
  c.replay.capacity = 1'000;
  c.learner.hidden = {16, 16};
  return c;
}

std::string all(const std::vector<std::string>& problems) {
  std::string s;
  for (const auto& p : problems) s += p + "\n";
  return s;
}

class CheckpointCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/foxhunt_ckpt_check_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    config_ = small_config();
    test::write_host_checkpoint(dir_, config_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  RunConfig config_;
};

TEST_F(CheckpointCheck, FittingCheckpointPasses) {
  EXPECT_TRUE(check_checkpoint(config_, dir_).empty()) << all(check_checkpoint(config_, dir_));
  EXPECT_NO_THROW(require_resumable(config_, dir_));
}

TEST_F(CheckpointCheck, NetworkShapeMismatchNamesTensorAndShapes) {
  RunConfig other = config_;
  other.learner.hidden = {16, 16, 16};  // one more layer: a missing tensor
  const std::string p = all(check_checkpoint(other, dir_));
  EXPECT_NE(p.find((dir_ / "learner.online.safetensors").string()), std::string::npos) << p;
  EXPECT_NE(p.find("tensor 'trunk.2.weight' missing (expected F32 (16, 16))"), std::string::npos) << p;
  other = config_;
  other.learner.dueling = false;  // value/advantage heads in the file, one head in the config
  const std::string q = all(check_checkpoint(other, dir_));
  EXPECT_NE(q.find("tensors the config's network does not have: 'value.weight'"), std::string::npos) << q;
  EXPECT_THROW(require_resumable(other, dir_), std::invalid_argument);
}

TEST_F(CheckpointCheck, MissingOptimizerStateAndStateSize) {
  test::write_arena_file(dir_ / "learner.online.safetensors", config_, false);
  std::ofstream(dir_ / "learner.state.bin") << "short";
  const std::string p = all(check_checkpoint(config_, dir_));
  EXPECT_NE(p.find("tensor 'adam_m.trunk.0.weight' missing"), std::string::npos) << p;
  EXPECT_NE(p.find("learner.state.bin: 5 bytes, expected " + std::to_string(sizeof(rl::DqnState))), std::string::npos)
      << p;
}

TEST_F(CheckpointCheck, CountersAreChecked) {
  std::ofstream(dir_ / "counters.json") << "{\"env_steps\": 1, \"updates\": -1, \"policy_version\": 0}";
  EXPECT_NE(all(check_checkpoint(config_, dir_)).find("counters.json: negative counter"), std::string::npos);
  std::ofstream(dir_ / "counters.json") << "{\"env_steps\": 20000, \"updates\": 1, \"policy_version\": 0}";
  EXPECT_NE(all(check_checkpoint(config_, dir_)).find("env_steps = 20000 is not below run.total_env_steps = 20000"),
            std::string::npos);
  fs::remove(dir_ / "counters.json");
  EXPECT_NE(all(check_checkpoint(config_, dir_)).find("cannot read " + (dir_ / "counters.json").string()),
            std::string::npos);
}

TEST_F(CheckpointCheck, CollectorStateAgainstTheEnvironment) {
  std::ofstream(dir_ / "collector.json") << "{\"num_envs\": 8, \"obs_dim\": 4, \"env_state\": true}";
  std::string p = all(check_checkpoint(config_, dir_));
  EXPECT_NE(p.find("collector state of num_envs 8 x obs_dim 4, the config implies env.num_envs = 4"), std::string::npos)
      << p;
  std::ofstream(dir_ / "collector.json") << "{\"num_envs\": 4, \"obs_dim\": 4, \"env_state\": true}";
  test::write_arena_file(dir_ / "collector.policy.online.safetensors", config_, false);  // rl::DqnPolicy::save
  fs::copy_file(dir_ / "learner.state.bin", dir_ / "collector.policy.state.bin");
  // An env state file of another num_envs (8 CartPoles: the float4 state is 128 bytes, not 64).
  {
    std::ofstream f(dir_ / "collector.env.bin", std::ios::binary);
    f << "foxhunt-env-state v1 1\nstate 128\n" << std::string(128, '\0');
  }
  p = all(check_checkpoint(config_, dir_));
  EXPECT_NE(p.find("collector.env.bin: 1 arrays, the config's environment has 4"), std::string::npos) << p;
  EXPECT_NE(p.find("collector.obs.bin"), std::string::npos) << p;  // absent
}

}  // namespace
