// DqnLearner::save writes "<stem>.state.bin" atomically (temp file + fsync + rename): a save that
// fails leaves the previous checkpoint's state file byte for byte (a truncating write would have
// replaced it), a later save replaces it, and load() reads back what the learner held.
#include "models/fd_support.hpp"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "rl/dqn/learner.hpp"

namespace foxhunt::rl {
namespace {

class DqnCheckpointTest : public test::LaneTest {};

std::vector<char> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST_F(DqnCheckpointTest, FailedStateSaveKeepsThePreviousFile) {
  SCOPED_TRACE(seed_note());
  DqnLearnerConfig c;
  c.net.obs_dim = 5;
  c.net.hidden = {16};
  c.net.actions = 3;
  c.batch = 8;
  c.schedule.epsilon_start = 1.f;
  c.schedule.epsilon_end = 0.1f;
  c.schedule.epsilon_steps = 1000;
  c.seed = seed_;
  c.act_rows = 4;
  DqnLearner learner(c, lane());
  const auto dir = std::filesystem::temp_directory_path() / ("foxhunt_dqn_atomic_" + std::to_string(seed_));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto stem = dir / "ckpt";
  const std::filesystem::path state = stem.string() + ".state.bin";

  learner.save(stem);
  const std::vector<char> first = read_bytes(state);
  ASSERT_EQ(first.size(), sizeof(DqnState));

  learner.after_env_step(100);  // env_steps and epsilon change: the next state file differs
  const std::filesystem::path tmp = state.string() + ".tmp." + std::to_string(::getpid());
  std::filesystem::create_directory(tmp);  // blocks the temporary file: the state write fails
  EXPECT_THROW(learner.save(stem), std::runtime_error);
  EXPECT_EQ(read_bytes(state), first) << "a failed save changed the previous state file";
  std::filesystem::remove(tmp);

  learner.save(stem);
  const std::vector<char> second = read_bytes(state);
  ASSERT_EQ(second.size(), sizeof(DqnState));
  EXPECT_NE(second, first);
  DqnState saved{};
  std::memcpy(&saved, second.data(), sizeof saved);
  EXPECT_EQ(saved.env_steps, 100);

  DqnLearner other(c, lane());
  other.load(stem);
  const DqnState loaded = test::download(other.state(), 1, s())[0];
  EXPECT_EQ(loaded.env_steps, 100);
  EXPECT_EQ(loaded.epsilon, saved.epsilon);
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace foxhunt::rl
