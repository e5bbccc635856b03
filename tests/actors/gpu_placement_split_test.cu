// Placement "split" (docs/distributed.md): the collector on distributed.collector_device, replay
// and learner on run.device, transition slots and policies moved by cudaMemcpyPeerAsync on events.
// The copies move bytes only, so in deterministic mode (CartPole, 64 envs):
//   PlacementSplit.StagedInsertReleasesAfterTheCopyAndStoresTheSameBytes: GpuReplayStage alone:
//     the staged insert stores what the in-place one does, with the slot poisoned right after
//     its release event (random slots, the ring wrapping).
//   PlacementSplit.OneGpuSplitEqualsAllBitwise: split with collector_device = run.device (the
//     whole copy path on one GPU) ends byte for byte as the "all" run: learner (weights, Adam,
//     target, state), collector (envs, observations, acting network, exploration counters),
//     replay (buffer, pending priorities) and the pending policy versions; its replay stages the
//     slots (the "all" one does not). A lagging policy schedule, so versions are pending at the end.
//   PlacementSplit.SplitCheckpointResumesBitExactlyUnderEitherPlacement: a split run stopped at N
//     and resumed to 2N (as split, and as "all") equals the uninterrupted split 2N run.
//   PlacementSplit.TwoGpusEqualOneGpu: with 2+ GPUs, split across devices 0 (learner) and 1
//     (collector) equals the "all" run on device 0, and its checkpoint resumes on one GPU to the
//     same end (skips with "needs 2 GPUs" otherwise).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "actors/dqn_stages.hpp"
#include "actors/gpu_replay_stage.hpp"
#include "actors/stage_factory.hpp"
#include "actors/train_run.hpp"
#include "gpu/device.hpp"
#include "tests/support/file_bytes.hpp"
#include "tests/support/gpu_test.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

using foxhunt::test::differing_bytes;

constexpr std::int64_t kN = 4096;  // 64 collects of 64 envs

struct Placement {
  std::string placement = "all";
  int collector_device = -1;  // only written with "split"
  int device = 0;             // run.device
};

// Every schedule is independent of the total (epsilon has its own length, beta is constant), so
// a run stopped at N and resumed to 2N can equal the 2N run. A version every 32 updates = 256 env
// steps = 4 slots of 64, due 4 slots late: versions are pending at every stop.
std::string config_text(std::int64_t total, const Placement& p) {
  std::string distributed = "[distributed]\nplacement = \"" + p.placement + "\"\n";
  if (p.placement == "split") distributed += "collector_device = " + std::to_string(p.collector_device) + "\n";
  return "[run]\nname = \"split_test\"\nseed = 11\ndevice = " + std::to_string(p.device) +
         "\ntotal_env_steps = " + std::to_string(total) +
         "\ndeterministic = true\n"
         "[env]\nkind = \"cartpole\"\nnum_envs = 64\n"
         "[replay]\ncapacity = 20000\nbatch_size = 64\nn_step = 3\nbeta = 0.5\nbeta_final = 0.5\n"
         "[learner]\nkind = \"dqn\"\nhidden = [64, 64]\nlr = 0.0003\ntarget = \"polyak\"\ntau = 0.01\n"
         "epsilon_decay_steps = 6000\n"
         "[pipeline]\nreplay_ratio = 0.125\nlearning_starts = 1000\nsync_every = 32\nslots = 4\nbatches = 2\n"
         "[logging]\ntimeline = false\ntensorboard = false\nprogress_interval_ms = 100\n" +
         distributed;
}

const std::vector<std::string> kFiles = {
    "learner.online.safetensors",  "learner.target.safetensors",          "learner.state.bin",
    "collector.env.bin",           "collector.obs.bin",                   "collector.policy.online.safetensors",
    "collector.policy.state.bin",  GpuReplayStage::kCheckpointFile,       GpuReplayStage::kPendingFile,
    DqnCollectorStage::kPoliciesFile};

class PlacementSplit : public test::GpuTest {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("foxhunt_placement_split_" + std::to_string(::getpid()));
  void TearDown() override {
    fs::remove_all(dir_);
    test::GpuTest::TearDown();
  }
  RunConfig config(const std::string& name, std::int64_t total, const Placement& p) {
    fs::create_directories(dir_ / name);
    std::ofstream(dir_ / name / "run.toml") << config_text(total, p);
    return load_run_config(dir_ / name / "run.toml");
  }
  TrainOutcome train(const std::string& name, std::int64_t total, const Placement& p,
                     const std::optional<fs::path>& resume = {}) {
    TrainRequest req;
    req.config = config(name, total, p);
    req.run_dir = dir_ / name / "run";
    req.resume = resume;
    req.console = false;
    TrainOutcome out = run_training(req);
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << name << ": " << out.result.outcome.reason;
    EXPECT_TRUE(out.result.final_checkpoint.has_value()) << name << ": " << out.result.checkpoint_error;
    return out;
  }
};

// The same counts and every final-checkpoint file equal byte for byte.
void expect_same_end(const TrainOutcome& a, const TrainOutcome& b, const std::string& what) {
  ASSERT_TRUE(a.result.final_checkpoint && b.result.final_checkpoint) << what;
  EXPECT_EQ(a.result.counters.env_steps, b.result.counters.env_steps) << what;
  EXPECT_EQ(a.result.counters.updates, b.result.counters.updates) << what;
  EXPECT_EQ(a.result.counters.policy_version, b.result.counters.policy_version) << what;
  for (const auto& f : kFiles) {
    const fs::path fa = *a.result.final_checkpoint / f, fb = *b.result.final_checkpoint / f;
    ASSERT_TRUE(fs::exists(fa) && fs::exists(fb)) << f << " missing: " << what;
    EXPECT_EQ(differing_bytes(fa, fb), 0) << f << " differs: " << what;
  }
}

// A slot of fresh random transitions: observations, actions in [0, 4), rewards, 0/1 flags.
std::vector<std::byte> random_slot(const TransitionSlotLayout& l, std::mt19937_64& rng) {
  std::vector<std::byte> bytes(l.bytes, std::byte{0});
  const auto rows = static_cast<std::size_t>(l.steps * l.envs), obs = rows * static_cast<std::size_t>(l.layout.obs_dim);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::uniform_int_distribution<int> a(0, 3), flag(0, 9);
  auto* o = reinterpret_cast<float*>(bytes.data() + l.obs);
  auto* n = reinterpret_cast<float*>(bytes.data() + l.next_obs);
  for (std::size_t i = 0; i < obs; ++i) o[i] = u(rng), n[i] = u(rng);
  auto* act = reinterpret_cast<std::int32_t*>(bytes.data() + l.actions);
  auto* r = reinterpret_cast<float*>(bytes.data() + l.rewards);
  auto* term = reinterpret_cast<std::uint8_t*>(bytes.data() + l.terminated);
  auto* trunc = reinterpret_cast<std::uint8_t*>(bytes.data() + l.truncated);
  for (std::size_t i = 0; i < rows; ++i) {
    act[i] = a(rng);
    r[i] = u(rng);
    term[i] = flag(rng) == 0;
    trunc[i] = !term[i] && flag(rng) == 0;
  }
  return bytes;
}

// The staged insert on its own: replay stages each slot, releases it after the copy (the test
// then poisons the slot, as a collector refilling it would), and stores exactly what an in-place
// insert of the same slots stores (the saved buffers are equal byte for byte).
TEST_F(PlacementSplit, StagedInsertReleasesAfterTheCopyAndStoresTheSameBytes) {
  SCOPED_TRACE(seed_note());
  rl::ReplayConfig rc;
  rc.capacity = 1024;
  rc.layout.obs_dim = 5;
  rc.batch_size = 16;
  rc.n_step = 3;
  rc.seed = seed_;
  const int kSlots = 2;
  const TransitionSlotLayout layout = TransitionSlotLayout::make(2, 32, rc.layout);
  GpuReplayStage in_place(rc, layout, kSlots, 1, 0, false), staged(rc, layout, kSlots, 1, 0, true);
  ASSERT_FALSE(in_place.staged());
  ASSERT_TRUE(staged.staged());
  std::vector<gpu::DeviceBuffer<std::byte>> slots;
  for (int k = 0; k < kSlots; ++k) slots.emplace_back(layout.bytes);
  for (int i = 0; i < 12; ++i) {  // 768 transitions: the ring wraps
    const int k = i % kSlots;
    gpu::DeviceBuffer<std::byte>& slot = slots[static_cast<std::size_t>(k)];
    const std::vector<std::byte> host = random_slot(layout, rng());
    slot.upload(std::span<const std::byte>(host), stream());
    FH_CHECK(cudaStreamSynchronize(stream()));
    LocalDeviceHandle h;
    h.device = 0;
    h.ptr = LocalDeviceHandle::address(slot.data());
    h.bytes = layout.bytes;
    h.slot = k;
    in_place.insert(h);
    in_place.synchronize();
    const std::uint64_t released = staged.insert(h);
    ASSERT_NE(released, 0u);
    // The collector's refill: after the release event, while replay may still be inserting.
    FH_CHECK(cudaStreamWaitEvent(stream(), as_event(released), 0));
    FH_CHECK(cudaMemsetAsync(slot.data(), 0xFF, layout.bytes, stream()));
  }
  FH_CHECK(cudaStreamSynchronize(stream()));
  staged.synchronize();
  EXPECT_EQ(staged.stored(), in_place.stored());
  const fs::path a = dir_ / "in_place", b = dir_ / "staged";
  fs::create_directories(a);
  fs::create_directories(b);
  in_place.checkpoint_job()(a);
  staged.checkpoint_job()(b);
  EXPECT_EQ(differing_bytes(a / GpuReplayStage::kCheckpointFile, b / GpuReplayStage::kCheckpointFile), 0);
}

TEST_F(PlacementSplit, OneGpuSplitEqualsAllBitwise) {
  const Placement all, split{"split", 0, 0};
  {  // the split stages stage their slots; the "all" ones read them in place
    PipelineStages s = make_stages(config("stages_split", 2 * kN, split), std::nullopt);
    auto replay = std::dynamic_pointer_cast<GpuReplayStage>(s.replay);
    ASSERT_NE(replay, nullptr);
    EXPECT_TRUE(replay->staged());
    PipelineStages a = make_stages(config("stages_all", 2 * kN, all), std::nullopt);
    EXPECT_FALSE(std::dynamic_pointer_cast<GpuReplayStage>(a.replay)->staged());
  }
  TrainOutcome a = train("all", 2 * kN, all);
  TrainOutcome s = train("split", 2 * kN, split);
  EXPECT_EQ(a.result.counters.env_steps, 2 * kN);
  EXPECT_GT(a.result.counters.updates, 800);
  EXPECT_GT(a.result.counters.policy_version, 20);
  expect_same_end(a, s, "split on one GPU vs all");
}

TEST_F(PlacementSplit, SplitCheckpointResumesBitExactlyUnderEitherPlacement) {
  const Placement all, split{"split", -1, 0};  // -1: run.device
  TrainOutcome half = train("half", kN, split);
  ASSERT_TRUE(half.result.final_checkpoint);
  const fs::path ckpt = *half.result.final_checkpoint;
  ASSERT_TRUE(fs::exists(ckpt / DqnCollectorStage::kPoliciesFile)) << "the stop wrote no pending policy versions";
  TrainOutcome whole = train("whole", 2 * kN, split);
  TrainOutcome resumed = train("resumed", 2 * kN, split, ckpt);
  expect_same_end(resumed, whole, "split N -> stop -> split 2N vs split 2N");
  TrainOutcome as_all = train("as_all", 2 * kN, all, ckpt);
  expect_same_end(as_all, whole, "split N -> stop -> all 2N vs split 2N");
}

TEST_F(PlacementSplit, TwoGpusEqualOneGpu) {
  if (gpu::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const Placement all, across{"split", 1, 0};  // learner on 0, collector on 1
  TrainOutcome one = train("one", 2 * kN, all);
  TrainOutcome two = train("two", 2 * kN, across);
  expect_same_end(one, two, "split across devices 0 and 1 vs all on device 0");
  TrainOutcome half = train("half", kN, across);
  ASSERT_TRUE(half.result.final_checkpoint);
  TrainOutcome resumed = train("resumed", 2 * kN, all, *half.result.final_checkpoint);
  expect_same_end(resumed, one, "two-GPU split N -> stop -> all 2N on one GPU vs all 2N");
}

}  // namespace
