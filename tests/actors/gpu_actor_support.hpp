#pragma once
// Shared by the end-to-end actor tests on the device (gpu_end_to_end_test.cu, gpu_fault_test.cu,
// gpu_train_test.cu): a small DQN run config, the completion-mode guard, the run hooks every such
// test starts from (WatchedRun), a watchdog around run_pipeline, and the checks that a checkpoint LOADS (into a fresh
// learner, and as the start of a resumed run, the way `foxhunt train --resume` starts one: actors/train_run.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/checkpoint_store.hpp"
#include "actors/completion_poller.hpp"
#include "actors/dqn_stages.hpp"
#include "actors/pipeline.hpp"
#include "actors/ratio.hpp"
#include "actors/run_config.hpp"
#include "actors/stage_factory.hpp"
#include "gpu/context.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::actors::e2e {

namespace fs = std::filesystem;

// CartPole-v1 with every learner feature the DQN pipeline has on at once: prioritized replay with
// 3-step returns, dueling heads, double DQN, a Polyak target, Huber loss, gradient clipping.
// 32 envs: one slot is 32 transitions, so every count below is a whole number of slots.
// Updates = replay_ratio * (total - learning_starts): 200 for total 2112.
constexpr std::int64_t kEnvs = 32;
constexpr std::int64_t kLearningStarts = 512;
inline std::string small_cartpole_toml(std::int64_t total_env_steps, std::int64_t checkpoint_every,
                                       const std::string& completions = "hostfn", std::uint64_t seed = 3) {
  return "[run]\nname = \"actor_e2e\"\nseed = " + std::to_string(seed) +
         "\ntotal_env_steps = " + std::to_string(total_env_steps) +
         "\n"
         "[env]\nkind = \"cartpole\"\nnum_envs = " +
         std::to_string(kEnvs) +
         "\nsteps_per_slot = 1\n"
         "[replay]\ncapacity = 8192\nbatch_size = 64\nprioritized = true\nalpha = 0.6\nbeta = 0.4\n"
         "n_step = 3\ngamma = 0.99\n"
         "[learner]\nkind = \"dqn\"\nhidden = [64, 64]\nlr = 0.0005\ndueling = true\ndouble_dqn = true\nloss = \"huber\"\n"
         "grad_clip = 10.0\ntarget = \"polyak\"\ntau = 0.01\nepsilon_decay_steps = 2000\n"
         "[pipeline]\nreplay_ratio = 0.125\nlearning_starts = " +
         std::to_string(kLearningStarts) +
         "\nratio_slack = 8\nslots = 4\nbatches = 3\nsync_every = 8\ncompletions = \"" + completions +
         "\"\n"
         "[checkpoint]\nevery_env_steps = " +
         std::to_string(checkpoint_every) +
         "\n"
         "[logging]\ntimeline = false\ntensorboard = false\njsonl = false\n";
}

// The pipeline's completion mode, as `[pipeline] completions` sets it (actors/train_run.cpp):
// "polled" = the CompletionPoller (process-wide, so set before the stages are built and kept
// until they are drained) plus the low-latency scheduler. Both restored on destruction.
class CompletionMode {
 public:
  CompletionMode(const std::string& mode, RunHooks& hooks)
      : hooks_(hooks), previous_polling_(completion_polling()), previous_low_latency_(hooks.low_latency_scheduler) {
    if (mode != "hostfn" && mode != "polled")
      throw std::invalid_argument("completions = \"" + mode + "\": must be hostfn | polled");
    const bool polled = mode == "polled";
    set_completion_polling(polled);
    hooks_.low_latency_scheduler = polled;
  }
  ~CompletionMode() {
    set_completion_polling(previous_polling_);
    hooks_.low_latency_scheduler = previous_low_latency_;
  }
  CompletionMode(const CompletionMode&) = delete;
  CompletionMode& operator=(const CompletionMode&) = delete;

 private:
  RunHooks& hooks_;
  bool previous_polling_, previous_low_latency_;
};

inline fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("foxhunt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The run hooks an actor test on the device starts from: checkpoints under `checkpoints`, a stall
// timeout, a progress interval, and a soft deadline: once a progress report comes `deadline_s`
// seconds into the run, the stop flag is raised (a graceful stop; tests assert the flag stayed 0),
// so a pipeline that does not end fails the test instead of blocking it. The test's own progress
// callback (on_progress) runs after that check on every report.
class WatchedRun {
 public:
  struct Timing {
    double deadline_s = 60;
    std::chrono::seconds stall{30};
    std::chrono::milliseconds progress{20};
  };
  WatchedRun(const fs::path& checkpoints, Timing timing) : deadline_s_(timing.deadline_s) {
    hooks.store = std::make_shared<CheckpointStore>(checkpoints);
    hooks.stall_timeout = timing.stall;
    hooks.progress_interval = timing.progress;
    hooks.stop_signal = &stop;
    hooks.on_progress = [this](const ProgressSnapshot& s) {
      if (s.seconds > deadline_s_) stop.store(2);
      if (then_) then_(s);
    };
  }
  explicit WatchedRun(const fs::path& checkpoints) : WatchedRun(checkpoints, Timing{}) {}
  WatchedRun(const WatchedRun&) = delete;  // hooks point into this object
  WatchedRun& operator=(const WatchedRun&) = delete;

  void on_progress(std::function<void(const ProgressSnapshot&)> then) { then_ = std::move(then); }

  RunHooks hooks;
  std::atomic<int> stop{0};  // 2 once the soft deadline passed

 private:
  double deadline_s_;
  std::function<void(const ProgressSnapshot&)> then_;
};

// run_pipeline on another thread; a run that has not returned after `deadline` is a hang, which
// cannot be recovered from inside the process: the test fails and the binary aborts (as the CPU
// protocol tests do). Tests also stop the run gracefully (stop flag) well before this.
inline RunResult run_watched(const PipelineConfig& cfg, const PipelineStages& stages, const RunHooks& hooks,
                             std::chrono::seconds deadline = std::chrono::seconds(120)) {
  auto fut = std::async(std::launch::async, [&] { return run_pipeline(cfg, stages, hooks); });
  if (fut.wait_for(deadline) != std::future_status::ready) {
    ADD_FAILURE() << "run_pipeline did not return within " << deadline.count() << " s (hang)";
    std::fflush(stdout);
    std::abort();
  }
  return fut.get();
}

// The learner config of a run (as make_stages builds it), for a fresh learner to load into.
inline rl::DqnLearnerConfig learner_config_of(const RunConfig& cfg) {
  const std::unique_ptr<rl::VecEnv> env = make_env(cfg, 1);
  const rl::ActionSpace space = env->action_space();
  return dqn_learner_config(cfg, env->obs_dim(), space.branches, space.choices);
}

// Everything DqnLearner::save writes, read back to the host, per declared tensor (the arenas'
// alignment padding is not part of a checkpoint).
struct LearnerContents {
  rl::DqnState state{};
  std::vector<std::vector<float>> online, adam_m, adam_v, target;
};

inline std::vector<std::vector<float>> tensors_of(const gpu::ParameterArena& a, const float* base) {
  std::vector<std::vector<float>> out;
  for (const auto& e : a.entries()) out.push_back(test::download(base + e.offset, static_cast<std::size_t>(e.numel)));
  return out;
}

// Test-only readback of a learner whose stream is idle (after run_pipeline or load).
inline LearnerContents contents_of(rl::DqnLearner& l) {
  FH_CHECK(cudaStreamSynchronize(l.stream()));
  LearnerContents c;
  c.state = test::download(l.state(), 1).at(0);
  c.online = tensors_of(l.online_arena(), l.online_arena().params());
  c.adam_m = tensors_of(l.online_arena(), l.online_arena().adam_m());
  c.adam_v = tensors_of(l.online_arena(), l.online_arena().adam_v());
  c.target = tensors_of(l.target_arena(), l.target_arena().params());
  return c;
}

// A checkpoint's learner files loaded into a FRESH learner with the loader the resume path uses
// (DqnLearnerStage's constructor: DqnLearner::load(<dir>/learner)). Throws what load throws.
inline LearnerContents load_learner(const rl::DqnLearnerConfig& lc, const fs::path& checkpoint) {
  gpu::DeviceContext ctx(0, 1);
  rl::DqnLearner fresh(lc, ctx.blas(0));
  fresh.load(checkpoint / "learner");
  return contents_of(fresh);
}

// "" when equal bit for bit, else what differs first.
inline std::string differences(const LearnerContents& a, const LearnerContents& b) {
  if (std::memcmp(&a.state, &b.state, sizeof(rl::DqnState)) != 0)
    return "DqnState differs (updates_attempted " + std::to_string(a.state.updates_attempted) + " vs " +
           std::to_string(b.state.updates_attempted) + ", updates_applied " + std::to_string(a.state.updates_applied) +
           " vs " + std::to_string(b.state.updates_applied) + ")";
  const auto cmp = [](const std::vector<std::vector<float>>& x, const std::vector<std::vector<float>>& y,
                      const char* what) -> std::string {
    if (x.size() != y.size()) return std::string(what) + ": tensor count differs";
    for (std::size_t t = 0; t < x.size(); ++t)
      if (x[t].size() != y[t].size() ||
          (!x[t].empty() && std::memcmp(x[t].data(), y[t].data(), x[t].size() * sizeof(float)) != 0))
        return std::string(what) + ": tensor " + std::to_string(t) + " differs";
    return {};
  };
  for (const auto& s : {cmp(a.online, b.online, "online weights"), cmp(a.adam_m, b.adam_m, "Adam m"),
                        cmp(a.adam_v, b.adam_v, "Adam v"), cmp(a.target, b.target, "target weights")})
    if (!s.empty()) return s;
  return {};
}

inline bool counters_equal(const Counters& a, const Counters& b) {
  return a.env_steps == b.env_steps && a.updates == b.updates && a.policy_version == b.policy_version;
}

// Checkpoint directories under a store's root other than `except` (step_*, not *.tmp).
inline int checkpoints_under(const fs::path& root, const std::optional<fs::path>& except = std::nullopt) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step_", 0) != 0 || name.ends_with(".tmp")) continue;
    if (except && fs::equivalent(e.path(), *except)) continue;
    ++n;
  }
  return n;
}

// The learner of a checkpoint loads into a fresh learner, and its step counters agree with
// counters.json: each update enqueued before the checkpoint ran exactly once in it.
inline void expect_learner_loads(const RunConfig& cfg, const fs::path& checkpoint,
                                 LearnerContents* loaded_out = nullptr) {
  SCOPED_TRACE("checkpoint " + checkpoint.string());
  Counters c;
  ASSERT_NO_THROW(c = CheckpointStore::read_counters(checkpoint));
  LearnerContents loaded;
  ASSERT_NO_THROW(loaded = load_learner(learner_config_of(cfg), checkpoint));
  EXPECT_EQ(loaded.state.updates_attempted, c.updates) << "learner state vs counters.json";
  EXPECT_EQ(loaded.state.params_nonfinite, 0u);
  if (loaded_out) *loaded_out = std::move(loaded);
}

// A second run from `checkpoint` as `foxhunt train --resume` starts one: counters from its
// counters.json, stages built with it as the resume directory, `more_steps` further env steps
// (a whole number of slots). Must complete with a final checkpoint that loads.
inline void expect_resumes(const fs::path& checkpoint, std::int64_t more_steps,
                           const std::string& completions = "hostfn") {
  SCOPED_TRACE("resume from " + checkpoint.string());
  Counters start;
  ASSERT_NO_THROW(start = CheckpointStore::read_counters(checkpoint));
  ASSERT_EQ(start.env_steps % kEnvs, 0) << "a checkpoint holds whole slots";
  const std::int64_t total = start.env_steps + more_steps;
  const RunConfig cfg = parse_run_config(small_cartpole_toml(total, 0, completions), "resume");
  const fs::path root = fresh_dir("actor_resumed");
  WatchedRun run(root);  // a stuck resume fails instead of blocking
  CompletionMode mode(completions, run.hooks);
  PipelineStages stages;
  ASSERT_NO_THROW(stages = make_stages(cfg, checkpoint)) << "the checkpoint does not load into fresh stages";
  auto learner = std::dynamic_pointer_cast<DqnLearnerStage>(stages.learner);
  ASSERT_NE(learner, nullptr);
  EXPECT_EQ(contents_of(learner->learner()).state.updates_attempted, start.updates)
      << "the resumed learner did not start from the checkpoint's state";

  PipelineConfig pcfg = cfg.pipeline_config();
  pcfg.start = start;
  const RunResult r = run_watched(pcfg, stages, run.hooks);
  EXPECT_EQ(run.stop.load(), 0) << "the resumed run had to be stopped by its deadline";
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::completed) << r.outcome.reason;
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.counters.env_steps, total);
  EXPECT_GT(r.counters.updates, start.updates);
  const ReplayRatio ratio(cfg.pipeline.replay_ratio, cfg.pipeline.learning_starts, cfg.pipeline.ratio_slack,
                          cfg.replay.batch_size);
  EXPECT_LE(r.counters.updates, ratio.allowed_updates(total));
  EXPECT_GE(r.counters.policy_version, start.policy_version);
  ASSERT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
  LearnerContents loaded;
  expect_learner_loads(cfg, *r.final_checkpoint, &loaded);
  EXPECT_EQ(differences(loaded, contents_of(learner->learner())), "")
      << "the resumed run's final checkpoint is not its learner's state";
  fs::remove_all(root);
}

}  // namespace foxhunt::actors::e2e
