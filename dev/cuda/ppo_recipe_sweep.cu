// Recurrent-PPO recipe sweep behind configs/ppo_lstm_cartpole_novel.toml and the NoVel learning
// tests (tests/rl/ppo_learning_test.cu): trains each recipe x seed on CartPole-v1 without its
// velocities (observation columns 0 and 2), all at once, one host thread, stream and cuBLASLt lane
// per run, and prints one row per run: the step at which the mean return of the last >= 100
// episodes first reached 475 (the test's measure, in chunks of 20 iterations), the best such
// mean, the curve every 100k steps, and the wall time.
//
//   foxhunt_dev_ppo_recipe_sweep [--steps 500000] [--seeds 1,2,3] [--budget 500] --recipe SPEC ...
//
// SPEC: comma-separated key=value over the novel_cartpole defaults (8 envs, relu, lr 1e-3 annealed
// over --steps, gamma 0.98, no entropy bonus):
//   envs T ep mb gamma lam lr clip cv(clip_value 0|1) rn(normalize_rewards 0|1) ent vf gn(grad
//   norm) h(trunk widths, '/'-separated; '-': none) lstm(width; 0: feed-forward) name
// A run stops at 475 or at --budget seconds (its row then shows how far it got).
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/context.hpp"
#include "rl/envs/cartpole.hpp"
#include "rl/envs/obs_filter.hpp"
#include "rl/ppo/trainer.hpp"

using namespace foxhunt;
using namespace foxhunt::rl;
using namespace foxhunt::rl::ppo;
using Clock = std::chrono::steady_clock;

namespace {

struct Recipe {
  std::string name;
  PpoConfig config;
};

Recipe parse_recipe(const std::string& spec) {
  Recipe r;
  PpoConfig& c = r.config;
  c.num_envs = 8;
  c.rollout_steps = 128;
  c.activation = gpu::Activation::relu;
  c.lr = 1e-3f;
  c.gamma = c.gae_lambda = 0.98f;
  c.ent_coef = 0.f;
  c.hidden = {64};
  c.lstm_hidden = 128;
  r.name = spec;
  std::stringstream ss(spec);
  std::string kv;
  while (std::getline(ss, kv, ',')) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("recipe item without '=': " + kv);
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "envs") c.num_envs = std::stoll(v);
    else if (k == "T") c.rollout_steps = std::stoll(v);
    else if (k == "ep") c.epochs = std::stoi(v);
    else if (k == "mb") c.minibatches = std::stoi(v);
    else if (k == "gamma") c.gamma = std::stof(v);
    else if (k == "lam") c.gae_lambda = std::stof(v);
    else if (k == "lr") c.lr = std::stof(v);
    else if (k == "clip") c.clip = std::stof(v);
    else if (k == "cv") c.clip_value = v == "1";
    else if (k == "rn") c.normalize_rewards = v == "1";
    else if (k == "ent") c.ent_coef = std::stof(v);
    else if (k == "vf") c.vf_coef = std::stof(v);
    else if (k == "gn") c.max_grad_norm = std::stof(v);
    else if (k == "lstm") c.lstm_hidden = std::stoll(v);
    else if (k == "name") r.name = v;
    else if (k == "h") {
      c.hidden.clear();
      if (v != "-") {
        std::stringstream hs(v);
        std::string w;
        while (std::getline(hs, w, '/')) c.hidden.push_back(std::stoll(w));
      }
    } else
      throw std::invalid_argument("unknown recipe key: " + k);
  }
  return r;
}

struct Run {
  Run(const Recipe& rc, std::uint64_t sd, std::int64_t steps, gpu::BlasLane lane) : recipe(rc), seed(sd) {
    PpoConfig c = recipe.config;
    env = std::make_unique<ObservationFilter>(std::make_unique<CartPoleEnv>(c.num_envs),
                                              std::vector<std::int32_t>{0, 2}, lane.stream);
    c.head = head_for(env->action_space());
    c.seed = seed;
    iterations = steps / c.batch_rows();
    c.anneal_iterations = iterations;
    validate(c);
    trainer = std::make_unique<PpoTrainer>(c, *env, lane);
    trainer->reset(seed);
  }

  void work(Clock::time_point t0, double deadline) {
    struct Chunk {
      double episodes, return_sum;
    };
    std::vector<Chunk> chunks;
    std::int64_t next_point = 100000;
    for (std::int64_t i = 1; i <= iterations; ++i) {
      trainer->iterate();
      if (i % 20 != 0 && i != iterations) continue;
      const TrainerStats st = trainer->wait_stats();
      steps_done.store(trainer->env_steps(), std::memory_order_relaxed);
      chunks.push_back({st.episodes.episodes, st.episodes.mean_return * st.episodes.episodes});
      Chunk w{0, 0};
      for (auto it = chunks.rbegin(); it != chunks.rend() && w.episodes < 100; ++it) {
        w.episodes += it->episodes;
        w.return_sum += it->return_sum;
      }
      if (w.episodes >= 100) {
        const double mean = w.return_sum / w.episodes;
        best = std::max(best, mean);
        if (trainer->env_steps() >= next_point) {
          next_point += 100000;
          char point[16];
          std::snprintf(point, sizeof point, " %.0f", mean);
          curve += point;
        }
        if (mean >= 475.0) {
          solved = trainer->env_steps();
          break;
        }
      }
      if (std::chrono::duration<double>(Clock::now() - t0).count() > deadline) break;
    }
    wall = std::chrono::duration<double>(Clock::now() - t0).count();
  }

  Recipe recipe;
  std::uint64_t seed;
  std::unique_ptr<VecEnv> env;
  std::unique_ptr<PpoTrainer> trainer;
  std::int64_t iterations = 0, solved = -1;
  std::atomic<std::int64_t> steps_done{0};
  std::atomic<bool> done{false};
  double best = 0, wall = 0;
  std::string curve, error;
};

}  // namespace

int main(int argc, char** argv) {
  std::int64_t steps = 500000;
  double budget = 500;
  std::vector<std::uint64_t> seeds{1, 2, 3};
  std::vector<Recipe> recipes;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      const std::string v = argv[++i];
      if (a == "--steps") steps = std::stoll(v);
      else if (a == "--budget") budget = std::stod(v);
      else if (a == "--recipe") recipes.push_back(parse_recipe(v));
      else if (a == "--seeds") {
        seeds.clear();
        std::stringstream ss(v);
        std::string s;
        while (std::getline(ss, s, ',')) seeds.push_back(std::stoull(s));
      } else
        throw std::invalid_argument("unknown flag " + a + " (--steps, --seeds, --budget, --recipe)");
    }
    if (recipes.empty()) throw std::invalid_argument("give at least one --recipe");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ppo_recipe_sweep: %s\n", e.what());
    return 2;
  }
  const int jobs = static_cast<int>(recipes.size() * seeds.size());
  gpu::DeviceContext ctx(0, jobs);
  std::vector<std::unique_ptr<Run>> runs;
  for (int j = 0; j < jobs; ++j)
    runs.push_back(std::make_unique<Run>(recipes[static_cast<std::size_t>(j) / seeds.size()],
                                         seeds[static_cast<std::size_t>(j) % seeds.size()], steps, ctx.blas(j)));
  FH_CHECK(cudaDeviceSynchronize());
  std::printf("ppo recipe sweep: %d runs, up to %lld steps, budget %.0f s\n", jobs, static_cast<long long>(steps),
              budget);
  std::fflush(stdout);
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> threads;
  for (auto& run : runs)
    threads.emplace_back([r = run.get(), &ctx, t0, budget] {
      try {
        ctx.make_current();
        r->work(t0, budget);
      } catch (const std::exception& e) {
        r->error = e.what();
      }
      r->done.store(true, std::memory_order_release);
    });
  double last = 0;
  for (;;) {
    bool all = true;
    for (auto& r : runs) all = all && r->done.load(std::memory_order_acquire);
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const double now = std::chrono::duration<double>(Clock::now() - t0).count();
    if (now - last >= 30) {
      last = now;
      std::printf("[%4.0f s] k steps:", now);
      for (auto& r : runs) std::printf(" %lld", static_cast<long long>(r->steps_done.load() / 1000));
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  for (auto& t : threads) t.join();
  std::printf("\n%-60s %4s %9s %6s %7s  %s\n", "recipe", "seed", "solved_at", "best", "wall_s", "mean every 100k");
  for (auto& r : runs)
    std::printf("%-60s %4llu %9lld %6.1f %7.1f %s%s\n", r->recipe.name.c_str(), static_cast<unsigned long long>(r->seed),
                static_cast<long long>(r->solved), r->best, r->wall, r->curve.c_str(),
                r->error.empty() ? "" : (" ERROR " + r->error).c_str());
  return 0;
}
