#include "apps/rank_resume.hpp"

#include <algorithm>
#include <stdexcept>

#include "actors/train_run.hpp"

namespace foxhunt::apps {
namespace fs = std::filesystem;
using actors::RunConfig;

namespace {

fs::path rank_dir(const fs::path& run0, int rank) {
  return rank == 0 ? run0 : fs::path(run0.string() + ".rank" + std::to_string(rank));
}

// The hash of a config as another world would have it: world and coordinator (launch picks a
// free port each time) are the new run's, the rank and device are normalized by the hash itself.
// The placement only decides which device holds which role's bytes, not the bytes: a run resumes
// another placement's checkpoint.
std::string hash_in_world(RunConfig c, const RunConfig& world) {
  c.distributed.world = world.distributed.world;
  c.distributed.coordinator = world.distributed.coordinator;
  c.distributed.timeout_ms = world.distributed.timeout_ms;
  c.distributed.placement = world.distributed.placement;
  c.distributed.collector_device = world.distributed.collector_device;
  return actors::distributed_config_hash(c);
}

}  // namespace

bool is_rank0_file(const std::string& name) {
  if (name.rfind("replay", 0) == 0 || name.rfind("collector", 0) == 0) return false;
  if (name == "env.state" || name == "ppo.state") return false;
  return true;
}

RankResumePlan plan_rank_resume(const fs::path& rank0_checkpoint, const RunConfig& config) {
  const int M = config.distributed.world, r = config.distributed.rank;
  const fs::path ckpt = rank0_checkpoint.lexically_normal();
  const fs::path step = ckpt.filename();
  const fs::path run0 = ckpt.parent_path().parent_path();
  if (ckpt.parent_path().filename() != "checkpoints" || run0.empty())
    throw std::invalid_argument("--resume " + rank0_checkpoint.string() +
                                ": a run of several ranks resumes from rank 0's run directory (or a checkpoint "
                                "in its checkpoints/), which holds each rank's directory beside it");
  if (const std::string name = run0.filename().string(); name.find(".rank") != std::string::npos)
    throw std::invalid_argument("--resume " + rank0_checkpoint.string() + ": " + run0.string() +
                                " is another rank's run directory; give every rank rank 0's (" +
                                name.substr(0, name.find(".rank")) + ")");
  if (!fs::is_directory(run0))
    throw std::invalid_argument("--resume: rank 0's run directory " + run0.string() + " does not exist");
  const auto config_file = actors::run_config_of(ckpt);
  if (!config_file)
    throw std::invalid_argument("--resume " + ckpt.string() + ": rank 0's run has no config.resolved.toml (its world "
                                "size and config are needed to re-deal the ranks)");
  RunConfig old;
  try {
    old = actors::load_run_config(*config_file);
  } catch (const std::exception& e) {
    throw std::invalid_argument("--resume: rank 0's config " + config_file->string() + ": " + e.what());
  }
  RankResumePlan plan;
  plan.old_world = old.distributed.world;
  plan.rank0_checkpoint = ckpt;
  const int N = plan.old_world;
  if (old.learner.kind != config.learner.kind)
    throw std::invalid_argument("--resume: rank 0's run is " + old.learner.kind + " (" + config_file->string() +
                                "), this config is " + config.learner.kind);
  if (const std::string a = hash_in_world(old, config), b = hash_in_world(config, config); a != b)
    throw std::invalid_argument("--resume: config hash " + b + " differs from rank 0's run's " + a + " (" +
                                config_file->string() +
                                "; a run resumes with the config it ran, only distributed.world and "
                                "distributed.coordinator may change)");
  if (M > N && config.learner.kind == "ppo")
    throw std::invalid_argument("--resume: a PPO run of " + std::to_string(N) + " ranks resumes on at most " +
                                std::to_string(N) + " ranks, not " + std::to_string(M) +
                                " (each rank's checkpoint holds its environments and rollout state, env.state and "
                                "ppo.state, which a new rank cannot take from another)");
  for (int q = M; q < N; ++q) plan.dropped.push_back(q);
  if (r < N) {
    const fs::path own = rank_dir(run0, r) / "checkpoints" / step;
    if (!fs::is_directory(rank_dir(run0, r)))
      throw std::invalid_argument("--resume: rank " + std::to_string(r) + "'s run directory " +
                                  rank_dir(run0, r).string() + " of the " + std::to_string(N) +
                                  "-rank run does not exist");
    if (!fs::exists(own / "counters.json"))
      throw std::invalid_argument("--resume: rank " + std::to_string(r) + " has no checkpoint " + own.string() +
                                  " (every rank checkpoints at the same step as rank 0's " + step.string() + ")");
    plan.own = own;
  } else {
    for (const auto& e : fs::directory_iterator(ckpt)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && is_rank0_file(name)) plan.from_rank0.push_back(name);
    }
    std::sort(plan.from_rank0.begin(), plan.from_rank0.end());
  }
  return plan;
}

fs::path materialize_rank_resume(const RankResumePlan& plan, const fs::path& dir) {
  if (plan.own) return *plan.own;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const std::string& name : plan.from_rank0)
    fs::create_symlink(fs::absolute(plan.rank0_checkpoint / name), dir / name);
  return dir;
}

}  // namespace foxhunt::apps
