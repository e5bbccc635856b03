// Deterministic mode and resume on the device (OU market, run.deterministic = true):
//   1. two uninterrupted runs of 2N env steps end bitwise equal (learner weights, Adam moments,
//      target, state; collector env state and acting network; the replay files);
//   2. the collector's and the replay buffer's state round-trip through a final checkpoint
//      bitwise (write, restore into fresh stages, write again: identical files);
//   3. a run of N steps, stopped (final checkpoint: learner, collector, replay buffer and its
//      pending priority updates) and resumed to 2N, ends bitwise equal to the uninterrupted 2N
//      run: the same counts and the same files. This config has no policy version pending at the
//      stop (sync_every / replay_ratio = 16 env steps < one slot of 64, so the due version does
//      not lag) and one slot holds batch_size transitions;
//   4. the same for CartPole (its env state: collector.env.bin);
//   5. a lagging policy schedule (a version every 256 env steps = 4 slots, due 4 slots late): the
//      stop leaves versions published but not acted on (collector.policies.bin), and the resumed
//      run still equals the uninterrupted one;
//   6. checkpoint.replay = "always": resuming from a PERIODIC checkpoint (with its replay buffer)
//      at N reaches 2N equal to the uninterrupted run, and so does the run that wrote it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "actors/dqn_stages.hpp"
#include "actors/train_run.hpp"
#include "tests/support/file_bytes.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

using foxhunt::test::bytes_of;
using foxhunt::test::differing_bytes;

constexpr std::int64_t kN = 16'384;  // 256 collects of 64 envs

// The "stop" at N is a run whose total is N. Every schedule must then be independent of the
// total: epsilon has its own length, and beta is constant (beta = beta_final), because the beta
// anneal lasts the expected update count of total_env_steps (stage_factory expected_updates).
struct Variant {
  std::string env = "market";   // market (OU) | cartpole
  std::int64_t sync_every = 2;  // with replay_ratio 0.125: a version every 8 * sync_every env steps
  int slots = 2;
  std::int64_t every = 0;        // checkpoint.every_env_steps
  std::string replay = "final";  // checkpoint.replay
};

std::string config_text(std::int64_t total, const Variant& v = {}) {
  const fs::path market = test::configs_dir() / "markets" / "ou_mean_reversion.toml";
  const std::string env = v.env == "cartpole"
                              ? std::string("[env]\nkind = \"cartpole\"\nnum_envs = 64\n")
                              : "[env]\nkind = \"market\"\nmarket = \"" + market.string() + "\"\nnum_envs = 64\n";
  return "[run]\nname = \"resume_test\"\nseed = 5\ntotal_env_steps = " + std::to_string(total) +
         "\ndeterministic = true\n" + env +
         "[replay]\ncapacity = 100000\nbatch_size = 64\nn_step = 3\nbeta = 0.5\nbeta_final = 0.5\n"
         "[learner]\nkind = \"dqn\"\nhidden = [64, 64]\nlr = 0.0003\ntarget = \"polyak\"\ntau = 0.01\nepsilon_decay_steps = 20000\n"
         "[pipeline]\nreplay_ratio = 0.125\nlearning_starts = 2000\nsync_every = " +
         std::to_string(v.sync_every) + "\nslots = " + std::to_string(v.slots) +
         "\nbatches = 2\n"
         "[checkpoint]\nevery_env_steps = " +
         std::to_string(v.every) + "\nreplay = \"" + v.replay +
         "\"\n"
         "[logging]\ntimeline = false\ntensorboard = false\nprogress_interval_ms = 100\n";
}

const std::vector<std::string> kLearnerFiles = {"learner.online.safetensors", "learner.target.safetensors",
                                                "learner.state.bin"};
const std::vector<std::string> kCollectorFiles = {"collector.env.bin", "collector.obs.bin",
                                                  "collector.policy.online.safetensors", "collector.policy.state.bin"};
const std::vector<std::string> kReplayFiles = {GpuReplayStage::kCheckpointFile, GpuReplayStage::kPendingFile};
const std::vector<std::string> kPolicyFiles = {DqnCollectorStage::kPoliciesFile};

// The pending policy versions a final checkpoint lists (collector.json's "pending_policies" array;
// empty when it is null or absent). A plain scan: the file is nlohmann's dump of one flat object.
std::vector<std::int64_t> pending_policies(const fs::path& ckpt) {
  const std::vector<char> bytes = bytes_of(ckpt / "collector.json");
  const std::string text(bytes.begin(), bytes.end());
  std::vector<std::int64_t> v;
  const std::size_t key = text.find("\"pending_policies\"");
  if (key == std::string::npos) return v;
  const std::size_t open = text.find_first_not_of(" \t\r\n:", key + 18);
  if (open == std::string::npos || text[open] != '[') return v;
  const std::size_t close = text.find(']', open);
  std::size_t i = open + 1;
  while (i < close) {
    const std::size_t d = text.find_first_of("0123456789", i);
    if (d == std::string::npos || d >= close) break;
    std::size_t end = d;
    while (end < close && text[end] >= '0' && text[end] <= '9') ++end;
    v.push_back(std::stoll(text.substr(d, end - d)));
    i = end;
  }
  return v;
}

class ActorResume : public test::GpuTest {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("foxhunt_actor_resume_" + std::to_string(::getpid()));
  void TearDown() override {
    fs::remove_all(dir_);
    test::GpuTest::TearDown();
  }
  TrainOutcome train(const std::string& name, std::int64_t total, const std::optional<fs::path>& resume = {},
                     const Variant& variant = {}) {
    fs::create_directories(dir_ / name);
    std::ofstream(dir_ / name / "run.toml") << config_text(total, variant);
    TrainRequest req;
    req.config = load_run_config(dir_ / name / "run.toml");
    req.run_dir = dir_ / name / "run";
    req.resume = resume;
    req.console = false;
    TrainOutcome out = run_training(req);
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << name << ": " << out.result.outcome.reason;
    EXPECT_TRUE(out.result.final_checkpoint.has_value()) << name << ": " << out.result.checkpoint_error;
    return out;
  }
};

TEST_F(ActorResume, DeterministicRunsAreBitwiseEqual) {
  TrainOutcome a = train("a", 2 * kN), b = train("b", 2 * kN);
  ASSERT_TRUE(a.result.final_checkpoint && b.result.final_checkpoint);
  EXPECT_EQ(a.result.counters.env_steps, 2 * kN);
  EXPECT_EQ(a.result.counters.env_steps, b.result.counters.env_steps);
  EXPECT_EQ(a.result.counters.updates, b.result.counters.updates);
  EXPECT_EQ(a.result.counters.policy_version, b.result.counters.policy_version);
  EXPECT_GT(a.result.counters.updates, 1000);
  for (const auto& files : {kLearnerFiles, kCollectorFiles, kReplayFiles})
    for (const auto& f : files)
      EXPECT_EQ(differing_bytes(*a.result.final_checkpoint / f, *b.result.final_checkpoint / f), 0) << f;
}

TEST_F(ActorResume, StateRoundTripsAndResumeContinuesBitExactly) {
  TrainOutcome half = train("half", kN);
  ASSERT_TRUE(half.result.final_checkpoint);
  const fs::path ckpt = *half.result.final_checkpoint;
  for (const auto& files : {kCollectorFiles, kReplayFiles})
    for (const auto& f : files) ASSERT_TRUE(fs::exists(ckpt / f)) << f;

  {                                                      // restore into fresh stages and write again: the same bytes
    std::ofstream(dir_ / "rt.toml") << config_text(kN);  // the same config (the replay file records it)
    const RunConfig cfg = load_run_config(dir_ / "rt.toml");
    PipelineStages stages = make_stages(cfg, ckpt);
    auto collector = std::dynamic_pointer_cast<DqnCollectorStage>(stages.collector);
    auto replay = std::dynamic_pointer_cast<GpuReplayStage>(stages.replay);
    ASSERT_NE(collector, nullptr);
    ASSERT_NE(replay, nullptr);
    EXPECT_GT(replay->buffer().size(), 0) << "the replay buffer was not restored";
    const fs::path again = dir_ / "rewritten";
    fs::create_directories(again);
    collector->checkpoint_job()(again);  // writes the attached replay buffer too
    for (const auto& files : {kCollectorFiles, kReplayFiles})
      for (const auto& f : files) EXPECT_EQ(differing_bytes(ckpt / f, again / f), 0) << f;
  }

  TrainOutcome resumed = train("resumed", 2 * kN, ckpt);
  TrainOutcome whole = train("whole", 2 * kN);
  ASSERT_TRUE(resumed.result.final_checkpoint && whole.result.final_checkpoint);
  EXPECT_EQ(resumed.result.counters.env_steps, whole.result.counters.env_steps);
  EXPECT_EQ(resumed.result.counters.updates, whole.result.counters.updates);
  EXPECT_EQ(resumed.result.counters.policy_version, whole.result.counters.policy_version);
  // Resume N -> 2N equals the uninterrupted 2N run, byte for byte: learner weights, Adam moments,
  // target, state; collector envs, observations, acting network, exploration counters; replay.
  for (const auto& files : {kLearnerFiles, kCollectorFiles, kReplayFiles})
    for (const auto& f : files)
      EXPECT_EQ(differing_bytes(*resumed.result.final_checkpoint / f, *whole.result.final_checkpoint / f), 0)
          << f << " differs between the resumed and the uninterrupted run";
}

}  // namespace

namespace {

// Every final-checkpoint file of two runs equal byte for byte, and the same counts.
void expect_same_end(const TrainOutcome& a, const TrainOutcome& b, const std::string& what) {
  ASSERT_TRUE(a.result.final_checkpoint && b.result.final_checkpoint) << what;
  EXPECT_EQ(a.result.counters.env_steps, b.result.counters.env_steps) << what;
  EXPECT_EQ(a.result.counters.updates, b.result.counters.updates) << what;
  EXPECT_EQ(a.result.counters.policy_version, b.result.counters.policy_version) << what;
  for (const auto& files : {kLearnerFiles, kCollectorFiles, kReplayFiles, kPolicyFiles})
    for (const auto& f : files)
      EXPECT_EQ(differing_bytes(*a.result.final_checkpoint / f, *b.result.final_checkpoint / f), 0)
          << f << " differs: " << what;
}

TEST_F(ActorResume, CartPoleResumeIsBitExact) {
  Variant cp;
  cp.env = "cartpole";
  TrainOutcome half = train("half", kN, {}, cp);
  ASSERT_TRUE(half.result.final_checkpoint);
  const fs::path ckpt = *half.result.final_checkpoint;
  ASSERT_TRUE(fs::exists(ckpt / "collector.env.bin")) << "CartPole's env state was not written";
  ASSERT_TRUE(fs::exists(ckpt / "collector.obs.bin"));
  TrainOutcome resumed = train("resumed", 2 * kN, ckpt, cp);
  TrainOutcome whole = train("whole", 2 * kN, {}, cp);
  EXPECT_EQ(whole.result.counters.env_steps, 2 * kN);
  EXPECT_GT(whole.result.counters.updates, 1000);
  expect_same_end(resumed, whole, "CartPole N -> stop -> 2N vs 2N");
}

TEST_F(ActorResume, PendingPolicyVersionsCarryOverTheStop) {
  Variant lag;
  lag.sync_every = 32;  // a version every 256 env steps (4 slots of 64), due 4 slots late
  lag.slots = 4;
  TrainOutcome half = train("half", kN, {}, lag);
  ASSERT_TRUE(half.result.final_checkpoint);
  const fs::path ckpt = *half.result.final_checkpoint;
  // The stop holds versions the collector has not acted on yet: the case this test is about.
  const std::vector<std::int64_t> pending = pending_policies(ckpt);
  ASSERT_FALSE(pending.empty()) << "no policy version pending at the stop: the schedule does not lag";
  EXPECT_EQ(pending.back(), half.result.counters.policy_version);
  EXPECT_EQ(half.result.counters.policy_version, half.result.counters.updates / lag.sync_every);
  ASSERT_TRUE(fs::exists(ckpt / DqnCollectorStage::kPoliciesFile));
  TrainOutcome resumed = train("resumed", 2 * kN, ckpt, lag);
  TrainOutcome whole = train("whole", 2 * kN, {}, lag);
  EXPECT_FALSE(pending_policies(*whole.result.final_checkpoint).empty());
  expect_same_end(resumed, whole, "lagging schedule: N -> stop -> 2N vs 2N");
}

TEST_F(ActorResume, ResumeFromAPeriodicCheckpointWithReplay) {
  Variant always;
  always.every = kN;
  always.replay = "always";
  TrainOutcome segmented = train("always", 2 * kN, {}, always);
  ASSERT_TRUE(segmented.result.final_checkpoint);
  char name[64];
  std::snprintf(name, sizeof name, "step_%012lld", static_cast<long long>(kN));
  const fs::path periodic = dir_ / "always" / "run" / "checkpoints" / name;
  ASSERT_TRUE(fs::is_directory(periodic)) << periodic;
  ASSERT_NE(periodic, *segmented.result.final_checkpoint);
  for (const auto& files : {kLearnerFiles, kCollectorFiles, kReplayFiles})
    for (const auto& f : files) EXPECT_TRUE(fs::exists(periodic / f)) << "the periodic checkpoint lacks " << f;
  EXPECT_EQ(CheckpointStore::read_counters(periodic).env_steps, kN);

  TrainOutcome resumed = train("resumed", 2 * kN, periodic, always);
  TrainOutcome whole = train("whole", 2 * kN);  // every_env_steps = 0, replay = "final": one segment
  expect_same_end(resumed, whole, "resume from the periodic checkpoint at N vs 2N");
  expect_same_end(segmented, whole, "the segmented run vs 2N");

  Variant never;
  never.replay = "never";
  TrainOutcome without = train("never", kN, {}, never);
  ASSERT_TRUE(without.result.final_checkpoint);
  EXPECT_FALSE(fs::exists(*without.result.final_checkpoint / GpuReplayStage::kCheckpointFile))
      << "checkpoint.replay = \"never\" wrote the replay buffer";
}

}  // namespace
