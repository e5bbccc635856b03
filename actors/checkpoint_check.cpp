#include "actors/checkpoint_check.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>
#include <stdexcept>
#include <string>

#include "actors/checkpoint_store.hpp"
#include "actors/dqn_stages.hpp"
#include "actors/env_shape.hpp"
#include "actors/ppo_gpu_stages.hpp"
#include "actors/ppo_run.hpp"
#include "rl/ppo/actor_critic.hpp"
#include "actors/env_state.hpp"
#include "actors/gpu_replay_stage.hpp"
#include "actors/stage_factory.hpp"
#include "gpu/arena.hpp"
#include "gpu/safetensors.hpp"
#include "models/dense.hpp"
#include "models/q_network.hpp"
#include "pretrain/model_factory.hpp"
#include "pretrain/tuned_features.hpp"
#include "rl/dqn/state.hpp"
#include "rl/replay/replay_buffer.hpp"
#include "rl/replay/snapshot.hpp"

namespace foxhunt::actors {
namespace fs = std::filesystem;

namespace {

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

std::vector<std::int64_t> dims(const gpu::Shape& shape) {
  return {shape.dims.begin(), shape.dims.begin() + shape.rank};
}

class Checker {
 public:
  Checker(const RunConfig& c, fs::path dir) : config_(c), dir_(std::move(dir)) {}

  std::vector<std::string> run() {
    if (!fs::is_directory(dir_)) {
      add(dir_.string() + ": not a directory");
      return problems_;
    }
    counters();
    shape_ = env_shape(config_);
    if (config_.learner.kind == "ppo") {
      rl::ppo::ActorCritic(ppo_config(config_, shape_), shape_.obs_dim).declare(arena_);
      arena_file("learner.safetensors", true);
      if (finetune()) {
        tuned_features_file(kTunedFeaturesFile, true);
        if (!config_.features.shared) tuned_features_file(kTunedCriticFeaturesFile, true);  // the critic's
      }
      // Through the actors: the collector's acting network (and acting extractor), no moments.
      if (fs::exists(dir_ / kPpoPolicyFile)) {
        arena_file(kPpoPolicyFile, false);
        if (finetune()) tuned_features_file(kPpoPolicyFeaturesFile, false);
      }
      spans_file("ppo.state", ppo_state_arrays(config_, shape_));
      spans_file("env.state", shape_.state_arrays);
      return problems_;
    }
    const rl::DqnLearnerConfig lc = dqn_learner_config(config_, shape_.obs_dim, shape_.branches, shape_.actions);
    models::QNetwork(lc.net).declare(arena_);
    learner_files("learner");
    // A fine-tuned extractor: the learner's with its Adam moments; each policy carries its weights.
    if (finetune())
      policy_floats_ += tuned_features_file(std::string("learner") + rl::DqnLearner::kFeaturesSuffix, true);
    collector();
    replay();
    return problems_;
  }

 private:
  void add(std::string problem) { problems_.push_back(std::move(problem)); }
  std::string name(const std::string& file) const { return (dir_ / file).string(); }

  void counters() {
    try {
      const Counters c = CheckpointStore::read_counters(dir_);
      if (c.env_steps >= config_.run.total_env_steps)
        add(name("counters.json") + ": env_steps = " + std::to_string(c.env_steps) +
            " is not below run.total_env_steps = " + std::to_string(config_.run.total_env_steps) +
            " (nothing left to train: raise run.total_env_steps)");
    } catch (const std::exception& e) {
      add(e.what());
    }
  }

  // An arena file: every declared tensor as F32 with its declared shape; Adam moments present for
  // all (required) or none (optional: absent for a target arena); no other tensor.
  bool finetune() const { return config_.features.enabled() && config_.features.mode == "finetune"; }
  // A fine-tuned extractor's file: the pretrain model (at the market's window) and its head, with
  // or without Adam moments. Returns its arena's padded parameter count (0 without [features]).
  std::int64_t tuned_features_file(const std::string& file, bool adam_required) {
    const auto src = feature_source(config_);
    if (!src) return 0;
    gpu::ParameterArena tuned;
    pretrain::declare_tuned_parameters(*src, market_config(config_), tuned);
    arena_file(file, adam_required, &tuned);
    return tuned.padded_count();
  }
  void arena_file(const std::string& file, bool adam_required, const gpu::ParameterArena* which = nullptr) {
    const gpu::ParameterArena& arena = which != nullptr ? *which : arena_;
    const fs::path path = dir_ / file;
    if (!fs::is_regular_file(path)) {
      add(path.string() + ": missing (the checkpoint lacks the network's weights)");
      return;
    }
    gpu::SafetensorsFile f;
    std::vector<std::byte> bytes;
    try {
      bytes = gpu::read_file_bytes(path);
      f = gpu::parse_safetensors(bytes, path.string());
    } catch (const std::exception& e) {
      add(e.what());
      return;
    }
    bool any_adam = false;
    for (const auto& t : f.entries) any_adam |= t.name.starts_with("adam_m.") || t.name.starts_with("adam_v.");
    const bool with_adam = adam_required || any_adam;
    std::set<std::string, std::less<>> expected;
    int reported = 0;
    auto expect = [&](const std::string& key, const std::vector<std::int64_t>& shape) {
      expected.insert(key);
      const gpu::SafetensorsEntry* t = f.find(key);
      std::string p;
      if (!t)
        p = "tensor '" + key + "' missing (expected F32 " + shape_str(shape) + ")";
      else if (t->dtype != gpu::DType::f32)
        p = "tensor '" + key + "' is " + std::string(gpu::dtype_name(t->dtype)) + ", expected F32";
      else if (t->shape != shape)
        p = "tensor '" + key + "' has shape " + shape_str(t->shape) + ", the config implies " + shape_str(shape);
      if (!p.empty() && reported++ < 8) add(path.string() + ": " + p);
    };
    for (const auto& e : arena.entries()) {
      expect(e.name, dims(e.shape));
      if (with_adam) {
        expect("adam_m." + e.name, dims(e.shape));
        expect("adam_v." + e.name, dims(e.shape));
      }
    }
    std::vector<std::string> unknown;
    for (const auto& t : f.entries)
      if (!expected.contains(t.name)) unknown.push_back("'" + t.name + "' " + shape_str(t.shape));
    if (!unknown.empty()) {
      std::string list;
      for (std::size_t i = 0; i < unknown.size() && i < 8; ++i) list += (i ? ", " : "") + unknown[i];
      if (unknown.size() > 8) list += ", ... (" + std::to_string(unknown.size() - 8) + " more)";
      add(path.string() + ": tensors the config's network does not have: " + list +
          " (learner.hidden / dueling / atoms, or the environment's size, differ from the run that wrote it)");
    }
    if (reported > 8) add(path.string() + ": ... (" + std::to_string(reported - 8) + " more tensor problems)");
  }

  void learner_files(const std::string& stem) {
    arena_file(stem + ".online.safetensors", true);
    arena_file(stem + ".target.safetensors", false);
    state_file(stem);
  }

  // The collector's acting policy (rl::DqnPolicy::save): weights without optimizer moments and the
  // state record. A checkpoint written by an acting learner also has Adam moments and a target
  // arena; both are accepted, since DqnPolicy::load_weights ignores them.
  void policy_files(const std::string& stem) {
    arena_file(stem + ".online.safetensors", false);
    if (fs::exists(dir_ / (stem + ".target.safetensors"))) arena_file(stem + ".target.safetensors", false);
    state_file(stem);
  }

  void state_file(const std::string& stem) {
    const fs::path state = dir_ / (stem + ".state.bin");
    std::error_code ec;
    const auto size = fs::file_size(state, ec);
    if (ec)
      add(state.string() + ": missing (the learner's counters and schedules)");
    else if (size != sizeof(rl::DqnState))
      add(state.string() + ": " + std::to_string(size) + " bytes, expected " + std::to_string(sizeof(rl::DqnState)) +
          " (rl::DqnState)");
  }

  void spans_file(const std::string& file, const std::vector<std::pair<std::string, std::size_t>>& want) {
    const fs::path path = dir_ / file;
    std::vector<std::pair<std::string, std::size_t>> found;
    try {
      found = read_span_headers(path);
    } catch (const std::exception& e) {
      add(e.what());
      return;
    }
    if (found.size() != want.size()) {
      add(path.string() + ": " + std::to_string(found.size()) + " arrays, the config's environment has " +
          std::to_string(want.size()));
      return;
    }
    for (std::size_t k = 0; k < want.size(); ++k)
      if (found[k] != want[k]) {
        add(path.string() + ": array " + std::to_string(k) + " is \"" + found[k].first + "\" of " +
            std::to_string(found[k].second) + " bytes, the config implies \"" + want[k].first + "\" of " +
            std::to_string(want[k].second) + " (env.num_envs or the market differ)");
        return;
      }
  }

  void collector() {
    const fs::path file = dir_ / "collector.json";
    if (!fs::exists(file)) return;  // a periodic checkpoint: the collector restarts from the counts
    nlohmann::json j;
    try {
      std::ifstream in(file);
      j = nlohmann::json::parse(in);
      const auto n = j.at("num_envs").get<std::int64_t>(), o = j.at("obs_dim").get<std::int64_t>();
      if (n != config_.env.num_envs || o != shape_.obs_dim) {
        add(file.string() + ": collector state of num_envs " + std::to_string(n) + " x obs_dim " + std::to_string(o) +
            ", the config implies env.num_envs = " + std::to_string(config_.env.num_envs) + " x obs_dim " +
            std::to_string(shape_.obs_dim));
        return;
      }
      policy_files("collector.policy");
      if (finetune()) tuned_features_file(DqnCollectorStage::kTunedFeaturesFile, false);  // the acting copy
      if (j.at("env_state").get<bool>()) {
        spans_file("collector.env.bin", shape_.state_arrays);
        const std::size_t obs = static_cast<std::size_t>(n * o) * sizeof(float);
        spans_file("collector.obs.bin", {{"obs", obs}, {"final_obs", obs}});
        // [features] frozen: the extractor's per-environment state (a fine-tuned one keeps none).
        if (const auto src = feature_source(config_); src && !src->diffusion() && !finetune()) {
          const std::int64_t S = pretrain::make_model(src->model)->state_features();  // host-only construction
          if (S > 0)
            spans_file(DqnCollectorStage::kFeaturesFile, {{"features_state", static_cast<std::size_t>(n * S) * sizeof(float)}});
        }
      }
      if (j.contains("pending_policies") && j.at("pending_policies").is_array()) {
        const std::size_t floats = static_cast<std::size_t>(arena_.padded_count() + policy_floats_) * sizeof(float);
        std::vector<std::pair<std::string, std::size_t>> want;
        for (const auto& v : j.at("pending_policies")) want.emplace_back("policy_v" + v.dump(), floats);
        if (!want.empty()) spans_file(DqnCollectorStage::kPoliciesFile, want);
      }
    } catch (const nlohmann::json::exception& e) {
      add(file.string() + ": " + e.what());
    }
  }

  void replay() {
    const fs::path file = dir_ / GpuReplayStage::kCheckpointFile;
    if (!fs::exists(file)) return;  // resumes with an empty buffer
    const rl::ReplayConfig rc = dqn_replay_config(config_, shape_.obs_dim, shape_.branches);
    try {
      const rl::SnapshotReader r(file);
      for (const auto& [key, want] : rl::replay_snapshot_keys(rc)) {
        const auto it = r.metadata().find(key);
        const std::string found = it == r.metadata().end() ? "(absent)" : it->second;
        if (found != want)
          add(file.string() + ": " + key + " is " + found + " in the file, the config implies " + want);
      }
      std::vector<std::string> shape_problems;
      const std::int64_t C = rc.capacity, O = rc.layout.obs_dim, A = rc.layout.action_dim;
      r.expect("ring.obs", rc.layout.obs_dtype, {C, O}, shape_problems);
      r.expect("ring.actions", gpu::DType::u32, {C, A}, shape_problems);
      r.expect("ring.rewards", gpu::DType::f32, {C}, shape_problems);
      for (const auto& p : shape_problems) add(file.string() + ": " + p);
    } catch (const std::exception& e) {
      add(e.what());
    }
    const fs::path pending = dir_ / GpuReplayStage::kPendingFile;
    if (!fs::exists(pending)) return;
    try {
      const std::vector<std::byte> bytes = gpu::read_file_bytes(pending);
      const gpu::SafetensorsFile f = gpu::parse_safetensors(bytes, pending.string());
      const std::int64_t B = config_.replay.batch_size, K = config_.pipeline.batches;
      for (const char* key : {"indices", "td"}) {
        const gpu::SafetensorsEntry* e = f.find(key);
        if (!e)
          add(pending.string() + ": tensor '" + key + "' missing");
        else if (e->shape.size() != 2 || e->shape[0] > K || e->shape[1] != B)
          add(pending.string() + ": tensor '" + key + "' has shape " + shape_str(e->shape) +
              ", expected (k <= pipeline.batches = " + std::to_string(K) +
              ", replay.batch_size = " + std::to_string(B) + ")");
      }
    } catch (const std::exception& e) {
      add(e.what());
    }
  }

  const RunConfig& config_;
  fs::path dir_;
  EnvShape shape_;
  gpu::ParameterArena arena_;
  std::int64_t policy_floats_ = 0;  // a policy's floats beyond the Q-network's (a fine-tuned extractor)
  std::vector<std::string> problems_;
};

}  // namespace

std::vector<std::string> check_checkpoint(const RunConfig& config, const fs::path& dir) {
  return Checker(config, dir).run();
}

void require_resumable(const RunConfig& config, const fs::path& dir) {
  const std::vector<std::string> problems = check_checkpoint(config, dir);
  if (problems.empty()) return;
  std::string msg = "--resume " + dir.string() + ": the checkpoint does not fit the config (" +
                    std::to_string(problems.size()) + (problems.size() == 1 ? " problem" : " problems") + "):";
  for (const auto& p : problems) msg += "\n  " + p;
  throw std::invalid_argument(msg);
}

}  // namespace foxhunt::actors
