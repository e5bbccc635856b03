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
// PPO through the actors (pipeline.mode = "actors"; CartPole, 8 envs x 32 steps per rollout):
//   PlacementSplit.RolloutCopyCarriesEveryArray: rl::ppo::copy_rollout of random rollouts
//     (feed-forward and recurrent) into NaN-poisoned ones equals the source in every array.
//   PlacementSplit.PpoStagedUpdateReleasesTheSlotAfterTheCopy: PpoGpuLearnerStage alone: staged
//     updates of random rollouts (two slots in turn), the slot poisoned right after its release
//     event, end with the same weights and Adam moments as in-place updates, byte for byte.
//   PlacementSplit.PpoOneGpuSplitEqualsAllBitwise: split with collector_device = run.device ends
//     byte for byte as "all" (learner.safetensors, ppo.state, env.state, policy.safetensors,
//     counters.json), for policy_lag 0 and 1 and a recurrent policy; its learner stages the slots.
//   PlacementSplit.PpoSplitCheckpointResumesBitExactlyAsAll: a split run stopped at N resumes to
//     2N as "all" equal to the uninterrupted "all" 2N run (policy_lag 0 and 1), and an "all"
//     checkpoint resumes as split (lag 1).
//   PlacementSplit.PpoTwoGpusEqualOneGpu: with 2+ GPUs, split across devices 0 (learner) and 1
//     (collector) equals "all" on device 0 for both lags, and its checkpoint resumes on one GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/dqn_stages.hpp"
#include "actors/env_shape.hpp"
#include "actors/gpu_replay_stage.hpp"
#include "actors/ppo_gpu_stages.hpp"
#include "actors/ppo_run.hpp"
#include "actors/stage_factory.hpp"
#include "actors/train_run.hpp"
#include "gpu/device.hpp"
#include "rl/ppo/rollout.hpp"
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
  // PPO through the actors (the config of ppo_text below).
  RunConfig ppo_config_of(const std::string& name, std::int64_t total, int lag, bool recurrent, const Placement& p);
  TrainOutcome train_ppo(const std::string& name, std::int64_t total, int lag, bool recurrent, const Placement& p,
                         const std::optional<fs::path>& resume = {});
};

// The same counts and every final-checkpoint file of `files` (DQN's kFiles by default) equal byte
// for byte.
void expect_same_end(const TrainOutcome& a, const TrainOutcome& b, const std::string& what,
                     const std::vector<std::string>& files = kFiles) {
  ASSERT_TRUE(a.result.final_checkpoint && b.result.final_checkpoint) << what;
  EXPECT_EQ(a.result.counters.env_steps, b.result.counters.env_steps) << what;
  EXPECT_EQ(a.result.counters.updates, b.result.counters.updates) << what;
  EXPECT_EQ(a.result.counters.policy_version, b.result.counters.policy_version) << what;
  for (const auto& f : files) {
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

// ------------------------------------------------------------------------------------------ PPO

std::string ppo_text(std::int64_t total, int lag, bool recurrent, const Placement& p) {
  std::string t = "[run]\nname = \"ppo_split_test\"\nseed = 5\ndevice = " + std::to_string(p.device) +
                  "\ntotal_env_steps = " + std::to_string(total) + "\n[env]\nkind = \"cartpole\"\nnum_envs = 8\n" +
                  (recurrent ? "observe = [0, 2]\n" : "") +
                  "[learner]\nkind = \"ppo\"\nrollout_steps = 32\nminibatches = 4\nlr = 0.001\nlr_end = 0.001\n" +
                  (recurrent ? "hidden = [16]\nlstm_hidden = 16\n" : "hidden = [32, 32]\n") +
                  "[pipeline]\nmode = \"actors\"\npolicy_lag = " + std::to_string(lag) +
                  "\n[checkpoint]\nevery_env_steps = 0\n[logging]\ntimeline = false\ntensorboard = false\n"
                  "progress_interval_ms = 100\n[distributed]\nplacement = \"" +
                  p.placement + "\"\n";
  if (p.placement == "split") t += "collector_device = " + std::to_string(p.collector_device) + "\n";
  return t;
}

constexpr std::int64_t kPpoN = 8 * 32 * 6;  // 6 rollouts

const std::vector<std::string> kPpoFiles = {"learner.safetensors", "ppo.state", "env.state", kPpoPolicyFile,
                                            "counters.json"};

RunConfig PlacementSplit::ppo_config_of(const std::string& name, std::int64_t total, int lag, bool recurrent,
                                        const Placement& p) {
  fs::create_directories(dir_ / name);
  std::ofstream(dir_ / name / "run.toml") << ppo_text(total, lag, recurrent, p);
  return load_run_config(dir_ / name / "run.toml");
}

TrainOutcome PlacementSplit::train_ppo(const std::string& name, std::int64_t total, int lag, bool recurrent,
                                       const Placement& p, const std::optional<fs::path>& resume) {
  TrainRequest req;
  req.config = ppo_config_of(name, total, lag, recurrent, p);
  req.run_dir = dir_ / name / "run";
  req.resume = resume;
  req.console = false;
  TrainOutcome out = run_training(req);
  EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << name << ": " << out.result.outcome.reason;
  EXPECT_TRUE(out.result.final_checkpoint.has_value()) << name << ": " << out.result.checkpoint_error;
  return out;
}

// Every array of a rollout filled with fresh random values: observations and floats uniform,
// log-probabilities negative, discrete actions in [0, choices), flags 0/1.
template <class T>
void put(gpu::DeviceBuffer<T>& b, const std::vector<T>& host, cudaStream_t stream) {
  b.upload(std::span<const T>(host), stream);
  FH_CHECK(cudaStreamSynchronize(stream));  // the host vector dies after this
}

void fill_random(rl::ppo::Rollout& r, std::mt19937_64& rng, cudaStream_t stream) {
  auto floats = [&](gpu::DeviceBuffer<float>& b, float lo, float hi) {
    if (!b.empty()) put(b, test::random_uniform(b.size(), lo, hi, rng), stream);
  };
  for (auto* b : {&r.obs, &r.next_obs, &r.final_obs, &r.raw, &r.env_actions, &r.values, &r.rewards, &r.bootstrap,
                  &r.advantages, &r.returns, &r.next_value, &r.state, &r.state0, &r.scratch_state})
    floats(*b, -2.f, 2.f);
  floats(r.logp, -3.f, -0.05f);
  if (!r.discrete.empty()) {
    std::uniform_int_distribution<std::int32_t> a(0, r.head.choices - 1);
    std::vector<std::int32_t> host(r.discrete.size());
    for (auto& x : host) x = a(rng);
    put(r.discrete, host, stream);
  }
  std::bernoulli_distribution flag(0.1);
  for (auto* b : {&r.terminated, &r.truncated, &r.resets, &r.last_done}) {
    if (b->empty()) continue;
    std::vector<std::uint8_t> host(b->size());
    for (auto& x : host) x = flag(rng) ? 1 : 0;
    put(*b, host, stream);
  }
}

template <class T>
void expect_same_array(const gpu::DeviceBuffer<T>& a, const gpu::DeviceBuffer<T>& b, const char* name) {
  ASSERT_EQ(a.size(), b.size()) << name;
  if (a.empty()) return;
  const std::vector<T> x = test::download(a), y = test::download(b);
  EXPECT_EQ(std::memcmp(x.data(), y.data(), a.bytes()), 0) << name << " differs";
}

TEST_F(PlacementSplit, RolloutCopyCarriesEveryArray) {
  SCOPED_TRACE(seed_note());
  for (const std::int64_t state_features : {0, 24}) {
    SCOPED_TRACE(state_features > 0 ? "recurrent" : "feed-forward");
    rl::ppo::HeadShape head;
    head.branches = 2;
    head.choices = 3;
    rl::ppo::Rollout src(5, 7, 6, head, state_features, stream()), dst(5, 7, 6, head, state_features, stream());
    fill_random(src, rng(), stream());
    for (auto* b : {&dst.obs, &dst.next_obs, &dst.final_obs, &dst.raw, &dst.env_actions, &dst.logp, &dst.values,
                    &dst.rewards, &dst.bootstrap, &dst.advantages, &dst.returns, &dst.next_value, &dst.state,
                    &dst.state0, &dst.scratch_state})
      test::poison(*b, stream());
    test::poison(dst.discrete, stream());
    for (auto* b : {&dst.terminated, &dst.truncated, &dst.resets, &dst.last_done}) test::poison(*b, stream());
    rl::ppo::copy_rollout(dst, 0, src, 0, stream());
    FH_CHECK(cudaStreamSynchronize(stream()));
    expect_same_array(dst.obs, src.obs, "obs");
    expect_same_array(dst.next_obs, src.next_obs, "next_obs");
    expect_same_array(dst.final_obs, src.final_obs, "final_obs");
    expect_same_array(dst.discrete, src.discrete, "discrete");
    expect_same_array(dst.env_actions, src.env_actions, "env_actions");
    expect_same_array(dst.logp, src.logp, "logp");
    expect_same_array(dst.values, src.values, "values");
    expect_same_array(dst.rewards, src.rewards, "rewards");
    expect_same_array(dst.bootstrap, src.bootstrap, "bootstrap");
    expect_same_array(dst.advantages, src.advantages, "advantages");
    expect_same_array(dst.returns, src.returns, "returns");
    expect_same_array(dst.next_value, src.next_value, "next_value");
    expect_same_array(dst.terminated, src.terminated, "terminated");
    expect_same_array(dst.truncated, src.truncated, "truncated");
    expect_same_array(dst.state, src.state, "state");
    expect_same_array(dst.state0, src.state0, "state0");
    expect_same_array(dst.scratch_state, src.scratch_state, "scratch_state");
    expect_same_array(dst.resets, src.resets, "resets");
    expect_same_array(dst.last_done, src.last_done, "last_done");
    EXPECT_EQ(dst.state.empty(), state_features == 0);
  }
  {  // a gaussian head's raw actions
    rl::ppo::HeadShape head;
    head.kind = rl::ppo::HeadShape::Kind::gaussian;
    head.dim = 2;
    rl::ppo::Rollout src(3, 4, 5, head, 0, stream()), dst(3, 4, 5, head, 0, stream());
    fill_random(src, rng(), stream());
    test::poison(dst.raw, stream());
    rl::ppo::copy_rollout(dst, 0, src, 0, stream());
    FH_CHECK(cudaStreamSynchronize(stream()));
    expect_same_array(dst.raw, src.raw, "raw");
  }
}

TEST_F(PlacementSplit, PpoStagedUpdateReleasesTheSlotAfterTheCopy) {
  SCOPED_TRACE(seed_note());
  const RunConfig c = ppo_config_of("stage", kPpoN, 1, false, Placement{});
  const rl::ppo::PpoConfig pc = actors::ppo_config(c, env_shape(c));
  const std::int64_t obs_dim = env_shape(c).obs_dim;
  PpoGpuLearnerStage in_place(pc, obs_dim, 1, 0), staged(pc, obs_dim, 1, 0);
  std::vector<std::unique_ptr<rl::ppo::Rollout>> slots;
  std::vector<rl::ppo::Rollout*> ptrs;
  for (int k = 0; k < 2; ++k) {
    slots.push_back(std::make_unique<rl::ppo::Rollout>(pc.rollout_steps, pc.num_envs, obs_dim, pc.head, 0, stream()));
    ptrs.push_back(slots.back().get());
  }
  in_place.attach_rollouts(ptrs, 0, false);
  staged.attach_rollouts(ptrs, 0, true);
  ASSERT_FALSE(in_place.staged());
  ASSERT_TRUE(staged.staged());
  for (int i = 0; i < 4; ++i) {
    const int k = i % 2;
    rl::ppo::Rollout& slot = *slots[static_cast<std::size_t>(k)];
    fill_random(slot, rng(), stream());
    LocalDeviceHandle h;
    h.device = 0;
    h.ptr = LocalDeviceHandle::address(slot.obs.data());
    h.bytes = slot.obs.bytes();
    h.slot = k;
    (void)in_place.update(h);
    in_place.synchronize();
    const std::uint64_t released = staged.update(h);
    ASSERT_NE(released, 0u);
    // The collector's refill: after the release event, while the staged update may still run.
    FH_CHECK(cudaStreamWaitEvent(stream(), as_event(released), 0));
    for (auto* b : {&slot.obs, &slot.logp, &slot.values, &slot.advantages, &slot.returns}) test::poison(*b, stream());
    test::poison(slot.discrete, stream());
  }
  staged.synchronize();
  FH_CHECK(cudaStreamSynchronize(stream()));
  gpu::ParameterArena &a = in_place.learner().arena(), &b = staged.learner().arena();
  ASSERT_EQ(a.padded_count(), b.padded_count());
  const auto n = static_cast<std::size_t>(a.padded_count());
  for (const auto& [x, y, what] : {std::tuple{a.params(), b.params(), "parameters"},
                                   std::tuple{a.adam_m(), b.adam_m(), "Adam m"},
                                   std::tuple{a.adam_v(), b.adam_v(), "Adam v"}}) {
    const std::vector<float> hx = test::download(x, n), hy = test::download(y, n);
    EXPECT_EQ(std::memcmp(hx.data(), hy.data(), n * sizeof(float)), 0) << what << " differ";
  }
  const std::vector<float> p = test::download(a.params(), n);
  const bool finite = std::all_of(p.begin(), p.end(), [](float v) { return std::isfinite(v); });
  EXPECT_TRUE(finite) << "the in-place updates read poisoned data";
}

TEST_F(PlacementSplit, PpoOneGpuSplitEqualsAllBitwise) {
  const Placement all, split{"split", 0, 0};
  {  // the split learner stages its rollouts; the "all" one reads them in place
    PpoStages s = make_ppo_stages(ppo_config_of("stages_split", kPpoN, 1, false, split), std::nullopt);
    EXPECT_TRUE(std::dynamic_pointer_cast<PpoGpuLearnerStage>(s.learner)->staged());
    PpoStages a = make_ppo_stages(ppo_config_of("stages_all", kPpoN, 1, false, all), std::nullopt);
    EXPECT_FALSE(std::dynamic_pointer_cast<PpoGpuLearnerStage>(a.learner)->staged());
  }
  for (const auto& [lag, recurrent] : {std::pair{0, false}, std::pair{1, false}, std::pair{1, true}}) {
    const std::string tag = "lag" + std::to_string(lag) + (recurrent ? "_lstm" : "_mlp");
    SCOPED_TRACE(tag);
    TrainOutcome a = train_ppo(tag + "_all", kPpoN, lag, recurrent, all);
    TrainOutcome s = train_ppo(tag + "_split", kPpoN, lag, recurrent, split);
    EXPECT_EQ(a.result.counters.updates, 6);
    expect_same_end(a, s, tag + ": split on one GPU vs all", kPpoFiles);
  }
}

TEST_F(PlacementSplit, PpoSplitCheckpointResumesBitExactlyAsAll) {
  const Placement all, split{"split", -1, 0};  // -1: run.device
  for (const int lag : {0, 1}) {
    const std::string tag = "lag" + std::to_string(lag);
    SCOPED_TRACE(tag);
    TrainOutcome whole = train_ppo(tag + "_whole", 2 * kPpoN, lag, false, all);
    TrainOutcome split_half = train_ppo(tag + "_split_half", kPpoN, lag, false, split);
    ASSERT_TRUE(split_half.result.final_checkpoint);
    TrainOutcome as_all = train_ppo(tag + "_as_all", 2 * kPpoN, lag, false, all, *split_half.result.final_checkpoint);
    expect_same_end(as_all, whole, tag + ": split N -> stop -> all 2N vs all 2N", kPpoFiles);
    if (lag == 0) continue;  // the reverse once (lag 1: the acting policy one version behind)
    TrainOutcome all_half = train_ppo(tag + "_all_half", kPpoN, lag, false, all);
    ASSERT_TRUE(all_half.result.final_checkpoint);
    TrainOutcome as_split =
        train_ppo(tag + "_as_split", 2 * kPpoN, lag, false, split, *all_half.result.final_checkpoint);
    expect_same_end(as_split, whole, tag + ": all N -> stop -> split 2N vs all 2N", kPpoFiles);
  }
}

TEST_F(PlacementSplit, PpoTwoGpusEqualOneGpu) {
  if (gpu::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const Placement all, across{"split", 1, 0};  // learner on 0, collector on 1
  for (const int lag : {0, 1}) {
    const std::string tag = "lag" + std::to_string(lag);
    SCOPED_TRACE(tag);
    TrainOutcome one = train_ppo(tag + "_one", 2 * kPpoN, lag, false, all);
    TrainOutcome two = train_ppo(tag + "_two", 2 * kPpoN, lag, false, across);
    expect_same_end(one, two, tag + ": split across devices 0 and 1 vs all on device 0", kPpoFiles);
    TrainOutcome half = train_ppo(tag + "_half", kPpoN, lag, false, across);
    ASSERT_TRUE(half.result.final_checkpoint);
    TrainOutcome resumed = train_ppo(tag + "_resumed", 2 * kPpoN, lag, false, all, *half.result.final_checkpoint);
    expect_same_end(resumed, one, tag + ": two-GPU split N -> stop -> all 2N on one GPU vs all 2N", kPpoFiles);
  }
}

}  // namespace
