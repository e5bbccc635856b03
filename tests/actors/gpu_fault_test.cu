// Failures of the real DQN pipeline on the device (actors/stage_factory make_stages, CartPole-v1,
// the small all-features config of tests/actors/gpu_actor_support.hpp) end in a clean stop with a
// checkpoint that LOADS: into a fresh learner (bit for bit the run's learner where the run's
// learner is still readable), and as the start of a resumed run, the way `foxhunt train --resume`
// starts one, which must then complete.
//
//   ActorFault.InjectedCudaError...   a real, non-sticky CUDA error (a launch with 4096 threads per
//                                     block) raised in the learner stage at its K-th update; also
//                                     in one of two agents run at once (run_agents);
//   ActorKill.KilledActor.../<actor>  an actor killed (exit_reason::kill) in the middle of the run;
//   ActorFault.StickyDeviceFault...   a kernel writing through a null pointer: the CUDA context is
//                                     lost for the whole process, so it runs in a child process
//                                     (ActorFault.StickyDeviceFaultChild, which skips unless the
//                                     parent sets FOXHUNT_STICKY_FAULT_DIR); the parent loads the
//                                     latest periodic checkpoint the child left and resumes from it.
// None of them belongs under compute-sanitizer: the first and the last provoke CUDA errors on
// purpose (the sanitizer counts them), and scripts/gpu-host.sh leaves ActorFault.* and ActorKill.*
// out of its runs (ActorEndToEnd.* is the sanitized end-to-end run).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "actors/dqn_stages.hpp"
#include "actors/pipeline.hpp"
#include "actors/run_config.hpp"
#include "actors/stage_factory.hpp"
#include "gpu/check.hpp"
#include "tests/actors/gpu_actor_support.hpp"
#include "tests/support/gpu_test.hpp"

extern char** environ;

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kEndless = 100'000'000;  // total env steps: these runs end by their failure
constexpr std::int64_t kResumeSteps = 4096;     // env steps of the resumed run (128 collects)
constexpr double kSoftDeadline = 60;            // s: then the test stops the run (and fails)
constexpr const char* kChildEnv = "FOXHUNT_STICKY_FAULT_DIR";
constexpr const char* kChildTest = "ActorFault.StickyDeviceFaultChild";
constexpr const char* kChildMarker = "FOXHUNT_CHILD_RESULT";

// Launched with 4096 threads per block (the limit is 1024): the launch fails with
// cudaErrorInvalidConfiguration, which is not sticky (the context stays usable), and never runs.
__global__ void oversized_block_kernel(float* out) {
  if (out != nullptr) out[threadIdx.x] = 0.f;
}

// Launched with a null pointer: an illegal address on the device, a sticky error that makes the
// CUDA context unusable for the rest of the process.
__global__ void write_through_pointer(volatile int* p) { *p = 1; }

enum class Fault { invalid_launch, illegal_address };

// Test-only decorator of the real learner stage: forwards every virtual method of LearnerStage
// (actors/stages.hpp) to it, and at its K-th update() (once armed) makes a real CUDA error on the
// learner's stream. invalid_launch: the launch is checked with FH_CHECK_LAUNCH, so the error
// becomes the exception that ends the learner actor, instead of that update. illegal_address: the
// launch succeeds and the update is enqueued behind the faulting kernel; the pipeline finds the
// error later (health probe, a failing CUDA call, the shutdown synchronization).
class FaultyLearner final : public LearnerStage {
 public:
  FaultyLearner(std::shared_ptr<DqnLearnerStage> inner, Fault fault, std::int64_t at_update, int device)
      : inner_(std::move(inner)), fault_(fault), at_(at_update), device_(device) {}

  void wait(std::uint64_t event) override { inner_->wait(event); }
  void when_done(std::function<void()> fn) override { inner_->when_done(std::move(fn)); }
  void synchronize() override { inner_->synchronize(); }
  std::string health() override { return inner_->health(); }
  bool poll_metrics(Scalars& out) override { return inner_->poll_metrics(out); }
  LocalDeviceHandle update(const LocalDeviceHandle& batch) override {
    ++calls_;  // the learner actor's thread only
    if (!fired_.load() && calls_ >= at_ && armed_.load()) {
      fired_.store(true);
      inject();
    }
    return inner_->update(batch);
  }
  LocalDeviceHandle snapshot(std::uint64_t version, std::uint64_t reuse_after) override {
    return inner_->snapshot(version, reuse_after);
  }
  std::function<void(const std::filesystem::path& dir)> checkpoint_job() override { return inner_->checkpoint_job(); }

  void arm() { armed_.store(true); }  // any thread
  bool fired() const { return fired_.load(); }
  std::int64_t update_calls() const { return calls_; }  // after the run

 private:
  void inject() {
    FH_CHECK(cudaSetDevice(device_));
    const cudaStream_t s = inner_->stream();
    if (fault_ == Fault::invalid_launch) {
      oversized_block_kernel<<<1, 4096, 0, s>>>(nullptr);
      FH_CHECK_LAUNCH();  // throws foxhunt::gpu::Error: "CUDA error: invalid argument in `kernel launch` ..." (CUDA 13)
      throw std::logic_error("FaultyLearner: a launch of 4096 threads per block succeeded");
    }
    write_through_pointer<<<1, 1, 0, s>>>(nullptr);
    FH_CHECK_LAUNCH();  // the launch itself is valid; the fault comes when the kernel runs
  }

  std::shared_ptr<DqnLearnerStage> inner_;
  Fault fault_;
  std::int64_t at_, calls_ = 0;
  int device_;
  std::atomic<bool> armed_{false}, fired_{false};
};

bool contains(const std::string& text, std::string_view what) { return text.find(what) != std::string::npos; }

// The CUDA error a null-pointer write raises (cudaErrorIllegalAddress), by name or by text; a
// driver that reports it as a launch failure is accepted too.
bool names_sticky_cuda_error(const std::string& text) {
  for (const char* s :
       {"illegal memory access", "cudaErrorIllegalAddress", "unspecified launch failure", "cudaErrorLaunchFailure"})
    if (contains(text, s)) return true;
  return false;
}

class ActorFault : public test::GpuTest {};

// 3. A real, non-sticky CUDA error in the learner stage at its K-th update.
TEST_F(ActorFault, InjectedCudaErrorInLearnerStopsCleanlyWithLoadableCheckpoint) {
  constexpr std::int64_t kAt = 100;
  const RunConfig cfg = parse_run_config(e2e::small_cartpole_toml(kEndless, 0), "ActorFault");
  PipelineStages stages = make_stages(cfg, std::nullopt);
  auto real = std::dynamic_pointer_cast<DqnLearnerStage>(stages.learner);
  ASSERT_NE(real, nullptr);
  auto faulty = std::make_shared<FaultyLearner>(real, Fault::invalid_launch, kAt, cfg.run.device);
  faulty->arm();
  stages.learner = faulty;

  const fs::path dir = e2e::fresh_dir("actor_fault");
  e2e::WatchedRun run(dir, {kSoftDeadline});
  const RunResult r = e2e::run_watched(cfg.pipeline_config(), stages, run.hooks);

  EXPECT_EQ(run.stop.load(), 0) << "the run had to be stopped by the test's deadline";
  EXPECT_TRUE(faulty->fired());
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed) << r.outcome.reason;
  EXPECT_TRUE(contains(r.outcome.reason, "learner failed")) << r.outcome.reason;
  // The driver's wording for an oversized block changed between releases ("invalid configuration
  // argument", CUDA 13: "invalid argument"): the test pins that the CUDA error of the launch is named.
  EXPECT_TRUE(contains(r.outcome.reason, "CUDA error: invalid")) << r.outcome.reason;
  EXPECT_TRUE(contains(r.outcome.reason, "kernel launch")) << r.outcome.reason;
  EXPECT_NE(r.exit_code(), 0);
  EXPECT_EQ(r.counters.updates, kAt - 1) << "the K-th update must not have run";
  EXPECT_EQ(faulty->update_calls(), kAt);
  ASSERT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
  EXPECT_TRUE(e2e::counters_equal(CheckpointStore::read_counters(*r.final_checkpoint), r.counters));
  e2e::LearnerContents loaded;
  e2e::expect_learner_loads(cfg, *r.final_checkpoint, &loaded);
  EXPECT_EQ(e2e::differences(loaded, e2e::contents_of(real->learner())), "")
      << "the final checkpoint is not the learner's state at the stop";
  EXPECT_EQ(loaded.state.updates_attempted, kAt - 1);
  e2e::expect_resumes(*r.final_checkpoint, kResumeSteps);
  fs::remove_all(dir);
}

// 3b. The same error in one of two agents run at once (run_agents, each with its own stages and
// checkpoint store): both stop, the reason names the faulty agent's learner, and each agent's final
// checkpoint loads into a fresh learner as that agent's learner state at the stop.
TEST_F(ActorFault, InjectedCudaErrorInOneOfTwoAgentsStopsBothWithLoadableCheckpoints) {
  constexpr std::int64_t kAt = 100;
  const RunConfig cfg = parse_run_config(e2e::small_cartpole_toml(kEndless, 0), "ActorFault");
  PipelineStages faulty_stages = make_stages(cfg, std::nullopt);
  PipelineStages healthy_stages = make_stages(cfg, std::nullopt);
  auto real = std::dynamic_pointer_cast<DqnLearnerStage>(faulty_stages.learner);
  auto healthy = std::dynamic_pointer_cast<DqnLearnerStage>(healthy_stages.learner);
  ASSERT_NE(real, nullptr);
  ASSERT_NE(healthy, nullptr);
  auto faulty = std::make_shared<FaultyLearner>(real, Fault::invalid_launch, kAt, cfg.run.device);
  faulty->arm();
  faulty_stages.learner = faulty;
  const std::shared_ptr<StageSet> faulty_set = make_dqn_stage_set(cfg.pipeline_config(), faulty_stages);
  const std::shared_ptr<StageSet> healthy_set = make_dqn_stage_set(cfg.pipeline_config(), healthy_stages);

  const fs::path dir = e2e::fresh_dir("actor_fault_two_agents");
  e2e::WatchedRun run(dir / "unused", {kSoftDeadline});  // the hooks; each agent has its own store
  run.hooks.store = nullptr;
  const std::vector<AgentSpec> agents{
      {"faulty", faulty_set.get(), std::make_shared<CheckpointStore>(dir / "faulty"), nullptr},
      {"healthy", healthy_set.get(), std::make_shared<CheckpointStore>(dir / "healthy"), nullptr}};
  auto fut = std::async(std::launch::async, [&] { return run_agents(agents, run.hooks); });
  if (fut.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    ADD_FAILURE() << "run_agents did not return within 120 s (hang)";
    std::fflush(stdout);
    std::abort();
  }
  const AgentsResult r = fut.get();

  EXPECT_EQ(run.stop.load(), 0) << "the run had to be stopped by the test's deadline";
  EXPECT_TRUE(faulty->fired());
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed) << r.outcome.reason;
  EXPECT_TRUE(contains(r.outcome.reason, "faulty/learner failed")) << r.outcome.reason;
  EXPECT_TRUE(contains(r.outcome.reason, "CUDA error: invalid")) << r.outcome.reason;
  EXPECT_NE(r.exit_code(), 0);
  ASSERT_EQ(r.agents.size(), 2u);
  const std::map<std::string, DqnLearnerStage*> learners{{"faulty", real.get()}, {"healthy", healthy.get()}};
  for (const AgentResult& a : r.agents) {
    SCOPED_TRACE(a.name);
    EXPECT_FALSE(a.finished);
    ASSERT_TRUE(a.final_checkpoint.has_value()) << a.checkpoint_error;
    EXPECT_TRUE(e2e::counters_equal(CheckpointStore::read_counters(*a.final_checkpoint), a.counters));
    e2e::LearnerContents loaded;
    e2e::expect_learner_loads(cfg, *a.final_checkpoint, &loaded);
    EXPECT_EQ(e2e::differences(loaded, e2e::contents_of(learners.at(a.name)->learner())), "")
        << "the final checkpoint is not the agent's learner state at the stop";
  }
  EXPECT_EQ(r.agents[0].counters.updates, kAt - 1) << "the faulty agent's K-th update must not have run";
  fs::remove_all(dir);
}

// 4. A pipeline actor killed mid-run.
class ActorKill : public test::GpuTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(ActorKill, KilledActorStopsCleanlyWithLoadableCheckpoint) {
  constexpr std::int64_t kKillAfterUpdates = 50;
  const std::string victim = GetParam();
  const RunConfig cfg = parse_run_config(e2e::small_cartpole_toml(kEndless, 0), "ActorKill");
  PipelineStages stages = make_stages(cfg, std::nullopt);
  auto learner = std::dynamic_pointer_cast<DqnLearnerStage>(stages.learner);
  ASSERT_NE(learner, nullptr);

  const fs::path dir = e2e::fresh_dir("actor_kill_" + victim);
  e2e::WatchedRun run(dir, {kSoftDeadline});  // no clean stop after the kill: fail, not hang
  std::mutex m;
  caf::actor target;
  run.hooks.on_started = [&](caf::actor, const std::map<std::string, caf::actor>& children) {
    std::lock_guard lock(m);
    target = children.at(victim);
  };
  bool sent = false;
  Counters at_kill;
  run.on_progress([&](const ProgressSnapshot& s) {
    if (sent || s.updates_done < kKillAfterUpdates) return;
    std::lock_guard lock(m);
    if (!target) return;
    sent = true;
    at_kill = s.counters;
    caf::anon_send_exit(target, caf::exit_reason::kill);
  });
  const RunResult r = e2e::run_watched(cfg.pipeline_config(), stages, run.hooks);

  ASSERT_TRUE(sent) << "the run ended before " << kKillAfterUpdates << " updates: " << r.outcome.reason;
  EXPECT_EQ(run.stop.load(), 0) << "the pipeline did not stop by itself after the kill";
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed) << r.outcome.reason;
  EXPECT_TRUE(contains(r.outcome.reason, victim + " failed")) << r.outcome.reason;
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_GE(r.counters.updates, at_kill.updates);
  ASSERT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
  EXPECT_TRUE(e2e::counters_equal(CheckpointStore::read_counters(*r.final_checkpoint), r.counters));
  e2e::LearnerContents loaded;
  e2e::expect_learner_loads(cfg, *r.final_checkpoint, &loaded);
  EXPECT_EQ(e2e::differences(loaded, e2e::contents_of(learner->learner())), "")
      << "the final checkpoint is not the learner's state at the stop";
  e2e::expect_resumes(*r.final_checkpoint, kResumeSteps);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(, ActorKill,
                         ::testing::Values(std::string("learner"), std::string("replay"), std::string("collector"),
                                           std::string("target_sync")),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// 5. A sticky device fault, in a child process. Periodic checkpoints every kChildCheckpointEvery
// env steps; the fault is armed once one has been written (and kChildMinUpdates updates done).
constexpr std::int64_t kChildCheckpointEvery = 2048;
constexpr std::int64_t kChildMinUpdates = 100;

// The child: a normal test, skipped unless the parent below names the directory.
TEST_F(ActorFault, StickyDeviceFaultChild) {
  const char* where = std::getenv(kChildEnv);
  if (where == nullptr || *where == '\0')
    GTEST_SKIP() << "runs only as the child process of "
                    "ActorFault.StickyDeviceFaultInChildProcessLeavesLoadableCheckpoint";
  const fs::path dir(where);
  const RunConfig cfg = parse_run_config(e2e::small_cartpole_toml(kEndless, kChildCheckpointEvery), "child");
  PipelineStages stages = make_stages(cfg, std::nullopt);
  auto real = std::dynamic_pointer_cast<DqnLearnerStage>(stages.learner);
  ASSERT_NE(real, nullptr);
  auto faulty = std::make_shared<FaultyLearner>(real, Fault::illegal_address, 1, cfg.run.device);
  stages.learner = faulty;

  // Never faulted: the deadline stops the run, which exits 0 (and the parent fails).
  e2e::WatchedRun run(dir / "checkpoints", {kSoftDeadline});
  run.on_progress([&](const ProgressSnapshot& s) {
    if (s.checkpoints >= 1 && s.updates_done >= kChildMinUpdates) faulty->arm();
  });
  const RunResult r = e2e::run_watched(cfg.pipeline_config(), stages, run.hooks, std::chrono::seconds(100));

  std::printf("%s outcome=%s exit_code=%d fired=%d final_checkpoint=%s\n", kChildMarker, kind_name(r.outcome.kind),
              r.exit_code(), faulty->fired() ? 1 : 0,
              r.final_checkpoint ? r.final_checkpoint->string().c_str() : "none");
  std::printf("FOXHUNT_CHILD_REASON %s\n", r.outcome.reason.c_str());
  std::printf("FOXHUNT_CHILD_CHECKPOINT_ERROR %s\n", r.checkpoint_error.c_str());
  std::fflush(stdout);  // spdlog (the pipeline's log) writes to stdout too
  std::fflush(stderr);
  // The run's exit code is the process's. No destructors: the CUDA context is lost, and the
  // fixture's teardown (a stream synchronize) would only throw the same error again.
  std::_Exit(r.exit_code());
}

std::string read_text(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string line_after(const std::string& text, const std::string& prefix) {
  const auto at = text.find(prefix);
  if (at == std::string::npos) return {};
  const auto end = text.find('\n', at);
  return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

std::string tail(const std::string& text, std::size_t n = 6000) {
  return text.size() <= n ? text : "...\n" + text.substr(text.size() - n);
}

// The parent: re-executes this binary with only the child test, waits (120 s, then kills it and
// fails), and checks what the child left behind.
TEST_F(ActorFault, StickyDeviceFaultInChildProcessLeavesLoadableCheckpoint) {
  const fs::path dir = e2e::fresh_dir("actor_sticky");
  const fs::path log = dir / "child.log";

  // Our environment without gtest's (sharding, XML output: the child runs one test, writes no
  // report of ours), plus the directory.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (v.starts_with("GTEST_") || v.starts_with(std::string(kChildEnv) + "=")) continue;
    env.emplace_back(v);
  }
  env.push_back(std::string(kChildEnv) + "=" + dir.string());
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = "foxhunt_gpu_tests", arg1 = std::string("--gtest_filter=") + kChildTest;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};

  posix_spawn_file_actions_t actions;
  ASSERT_EQ(posix_spawn_file_actions_init(&actions), 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ASSERT_EQ(spawned, 0) << "posix_spawn /proc/self/exe: " << std::strerror(spawned);

  int status = 0;
  bool exited = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      exited = true;
      break;
    }
    ASSERT_EQ(w, 0) << "waitpid: " << std::strerror(errno);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  const std::string out = read_text(log);
  ASSERT_TRUE(exited) << "the child hung (killed after 120 s); its output:\n" << tail(out);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << "; its output:\n"
                                 << tail(out);
  EXPECT_NE(WEXITSTATUS(status), 0) << tail(out);
  const std::string result = line_after(out, kChildMarker);
  ASSERT_FALSE(result.empty()) << "the child did not finish its run; its output:\n" << tail(out);
  EXPECT_TRUE(contains(result, "outcome=failed exit_code=1 fired=1 final_checkpoint=none")) << result;
  EXPECT_EQ(WEXITSTATUS(status), 1) << "the child's exit code is its run's";
  const std::string reason = line_after(out, "FOXHUNT_CHILD_REASON");
  const std::string ckpt_error = line_after(out, "FOXHUNT_CHILD_CHECKPOINT_ERROR");
  EXPECT_TRUE(names_sticky_cuda_error(reason)) << reason;
  // actors/pipeline.cpp on a dead device: no final checkpoint, and the latest good one named.
  EXPECT_TRUE(contains(ckpt_error, "the device is unusable")) << ckpt_error;
  EXPECT_TRUE(names_sticky_cuda_error(ckpt_error)) << ckpt_error;

  const std::optional<fs::path> latest = CheckpointStore::latest(dir / "checkpoints");
  ASSERT_TRUE(latest.has_value()) << "no periodic checkpoint survived; the child's output:\n" << tail(out);
  EXPECT_TRUE(contains(ckpt_error, "the latest good checkpoint is " + latest->string())) << ckpt_error;
  const RunConfig cfg = parse_run_config(e2e::small_cartpole_toml(kEndless, kChildCheckpointEvery), "parent");
  e2e::expect_learner_loads(cfg, *latest);
  e2e::expect_resumes(*latest, kResumeSteps);
  if (!HasFailure()) fs::remove_all(dir);  // kept (with child.log) when something failed
}

}  // namespace
