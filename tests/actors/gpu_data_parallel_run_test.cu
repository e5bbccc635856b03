// The data-parallel plumbing of a whole run on one device: `foxhunt train`'s run (run_training)
// with StageOptions::data_parallel set to an NCCL communicator of world size 1 with the collective
// path forced on (DataParallel::always: the learners' graphs all-reduce their gradients and agree
// on their flags) ends bit for bit where the same deterministic run without it ends: DQN through
// the actors (learner files) and PPO through the actors and the synchronous loop (learner and PPO
// state files).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/train_run.hpp"
#include "gpu/data_parallel.hpp"
#include "gpu/nccl.hpp"
#include "tests/support/file_bytes.hpp"
#include "tests/support/gpu_test.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

std::string dqn_config() {
  return "[run]\nname = \"dp\"\nseed = 3\ntotal_env_steps = 8192\ndeterministic = true\n"
         "[env]\nkind = \"cartpole\"\nnum_envs = 64\n"
         "[replay]\ncapacity = 20000\nbatch_size = 64\n"
         "[learner]\nkind = \"dqn\"\nhidden = [64, 64]\nlr = 0.0003\nepsilon_decay_steps = 4000\n"
         "[pipeline]\nreplay_ratio = 0.125\nlearning_starts = 1000\nsync_every = 4\nslots = 2\nbatches = 2\n"
         "[checkpoint]\nevery_env_steps = 0\n"
         "[logging]\ntimeline = false\ntensorboard = false\nprogress_interval_ms = 100\n";
}

std::string ppo_config(const std::string& mode) {
  return "[run]\nname = \"dp\"\nseed = 3\ntotal_env_steps = 8192\ndeterministic = true\n"
         "[env]\nkind = \"cartpole\"\nnum_envs = 16\n"
         "[learner]\nkind = \"ppo\"\nhidden = [32, 32]\nrollout_steps = 32\ntarget_kl = 0.02\n"
         "[pipeline]\nmode = \"" + mode + "\"\n"
         "[checkpoint]\nevery_env_steps = 0\n"
         "[logging]\ntimeline = false\ntensorboard = false\nprogress_interval_ms = 100\n";
}

class DataParallelRun : public test::GpuTest {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("foxhunt_dp_run_" + std::to_string(::getpid()));
  void TearDown() override {
    fs::remove_all(dir_);
    test::GpuTest::TearDown();
  }
  fs::path train(const std::string& name, const std::string& text, gpu::NcclCommunicator* comm) {
    fs::create_directories(dir_ / name);
    std::ofstream(dir_ / name / "run.toml") << text;
    TrainRequest req;
    req.config = load_run_config(dir_ / name / "run.toml");
    req.run_dir = dir_ / name / "run";
    req.console = false;
    if (comm != nullptr) req.stage_options.data_parallel = gpu::DataParallel{comm, 1 << 14, true};
    const TrainOutcome out = run_training(req);
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << name << ": " << out.result.outcome.reason;
    EXPECT_TRUE(out.result.final_checkpoint.has_value()) << name << ": " << out.result.checkpoint_error;
    EXPECT_GT(out.result.counters.updates, 10);
    return out.result.final_checkpoint.value_or(fs::path{});
  }
};

TEST_F(DataParallelRun, DqnActorsWorldOneThroughTheAllReduceIsBitwiseThePlainRun) {
  gpu::NcclCommunicator comm(gpu::nccl_unique_id(), 1, 0);
  const fs::path plain = train("plain", dqn_config(), nullptr), replica = train("replica", dqn_config(), &comm);
  for (const char* f : {"learner.online.safetensors", "learner.target.safetensors", "learner.state.bin"})
    EXPECT_EQ(test::differing_bytes(plain / f, replica / f), 0) << f;
}

TEST_F(DataParallelRun, PpoWorldOneThroughTheAllReduceIsBitwiseThePlainRun) {
  gpu::NcclCommunicator comm(gpu::nccl_unique_id(), 1, 0);
  for (const std::string mode : {"actors", "sync"}) {
    SCOPED_TRACE(mode);
    const fs::path plain = train("plain_" + mode, ppo_config(mode), nullptr),
                   replica = train("replica_" + mode, ppo_config(mode), &comm);
    for (const char* f : {"learner.safetensors", "ppo.state"})
      EXPECT_EQ(test::differing_bytes(plain / f, replica / f), 0) << f;
  }
}

}  // namespace
