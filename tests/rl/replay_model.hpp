#pragma once
// CPU reference of the replay buffer for the GPU tests: which transition sits in which slot, its
// data, and the n-step fields computed in double from the whole history of its producer.
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "rl/replay/config.hpp"

namespace foxhunt::rl::test_model {

// One (steps, envs) block as host vectors, time-major rows.
struct HostBlock {
  std::int64_t steps = 0, envs = 0, obs_dim = 0, action_dim = 0;
  std::vector<float> obs, next_obs, rewards;
  std::vector<std::int32_t> actions;
  std::vector<std::uint8_t> terminated, truncated;
};

// Random, never-zero data; episode ends with probability p_end per step, split between
// terminated, truncated and (rarely) both.
inline HostBlock random_block(std::int64_t steps, std::int64_t envs, std::int64_t obs_dim, std::int64_t action_dim,
                              std::mt19937_64& rng, double p_end = 0.15) {
  HostBlock b;
  b.steps = steps;
  b.envs = envs;
  b.obs_dim = obs_dim;
  b.action_dim = action_dim;
  const std::int64_t rows = steps * envs;
  std::normal_distribution<float> normal(0.5f, 2.0f);
  std::uniform_real_distribution<float> reward(-1.0f, 1.0f);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::uniform_int_distribution<std::int32_t> act(0, 1000);
  b.obs.resize(static_cast<std::size_t>(rows * obs_dim));
  b.next_obs.resize(b.obs.size());
  for (auto& x : b.obs) x = normal(rng);
  for (auto& x : b.next_obs) x = normal(rng);
  b.actions.resize(static_cast<std::size_t>(rows * action_dim));
  for (auto& a : b.actions) a = act(rng);
  b.rewards.resize(static_cast<std::size_t>(rows));
  for (auto& r : b.rewards) {
    r = reward(rng);
    if (r == 0.0f) r = 0.25f;
  }
  b.terminated.assign(static_cast<std::size_t>(rows), 0);
  b.truncated.assign(static_cast<std::size_t>(rows), 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const double c = coin(rng);
    if (c < p_end * 0.45)
      b.terminated[r] = 1;
    else if (c < p_end * 0.9)
      b.truncated[r] = 1;
    else if (c < p_end)
      b.terminated[r] = b.truncated[r] = 1;  // terminated wins
  }
  return b;
}

struct NStepRef {
  double ret = 0, discount = 1;
  std::int64_t bootstrap_slot = 0;
};

class ReplayModel {
 public:
  ReplayModel(std::int64_t capacity, int n_step, double gamma) : capacity_(capacity), n_(n_step), gamma_(gamma) {}

  int add_producer(std::int64_t envs) {
    producers_.push_back(Producer{envs, {}});
    return static_cast<int>(producers_.size()) - 1;
  }

  void insert(int producer, const HostBlock& b) {
    Producer& p = producers_[static_cast<std::size_t>(producer)];
    for (std::int64_t t = 0; t < b.steps; ++t) {
      std::vector<Step> row(static_cast<std::size_t>(b.envs));
      for (std::int64_t e = 0; e < b.envs; ++e) {
        const std::int64_t r = t * b.envs + e;
        Step& s = row[static_cast<std::size_t>(e)];
        s.global = head_ + r;
        s.reward = b.rewards[r];
        s.terminated = b.terminated[r] != 0;
        s.truncated = b.truncated[r] != 0;
        Stored st;
        st.producer = producer;
        st.step = static_cast<std::int64_t>(p.steps.size());
        st.env = e;
        st.obs.assign(b.obs.begin() + r * b.obs_dim, b.obs.begin() + (r + 1) * b.obs_dim);
        st.next_obs.assign(b.next_obs.begin() + r * b.obs_dim, b.next_obs.begin() + (r + 1) * b.obs_dim);
        st.actions.assign(b.actions.begin() + r * b.action_dim, b.actions.begin() + (r + 1) * b.action_dim);
        slots_[s.global % capacity_] = st;
      }
      p.steps.push_back(std::move(row));
    }
    head_ += b.steps * b.envs;
  }

  std::int64_t head() const { return head_; }
  std::int64_t size() const { return head_ < capacity_ ? head_ : capacity_; }
  bool stored(std::int64_t slot) const { return slots_.count(slot) != 0; }

  struct Stored {
    int producer = 0;
    std::int64_t step = 0, env = 0;
    std::vector<float> obs, next_obs;
    std::vector<std::int32_t> actions;
  };
  const Stored& at(std::int64_t slot) const { return slots_.at(slot); }

  // n-step fields of the transition in `slot`, from everything its producer inserted so far.
  NStepRef nstep(std::int64_t slot) const {
    const Stored& st = slots_.at(slot);
    const Producer& p = producers_[static_cast<std::size_t>(st.producer)];
    NStepRef ref;
    ref.bootstrap_slot = slot;
    for (int k = 0; k < n_; ++k) {
      const std::int64_t t = st.step + k;
      if (t >= static_cast<std::int64_t>(p.steps.size())) break;
      const Step& s = p.steps[static_cast<std::size_t>(t)][static_cast<std::size_t>(st.env)];
      ref.ret += std::pow(gamma_, k) * s.reward;
      ref.discount = std::pow(gamma_, k + 1);
      ref.bootstrap_slot = s.global % capacity_;
      if (s.terminated) {
        ref.discount = 0.0;
        break;
      }
      if (s.truncated) break;
    }
    return ref;
  }

 private:
  struct Step {
    std::int64_t global = 0;
    float reward = 0;
    bool terminated = false, truncated = false;
  };
  struct Producer {
    std::int64_t envs = 0;
    std::vector<std::vector<Step>> steps;  // [step][env]
  };
  std::int64_t capacity_;
  int n_;
  double gamma_;
  std::int64_t head_ = 0;
  std::vector<Producer> producers_;
  std::map<std::int64_t, Stored> slots_;
};

// Chi-square upper-tail p-value for `df` degrees of freedom (Wilson-Hilferty cube-root normal
// approximation: accurate to a few percent of p for df >= 30, enough for a 1e-4 threshold).
inline double chi_square_p_value(double chi2, double df) {
  const double z = (std::cbrt(chi2 / df) - (1.0 - 2.0 / (9.0 * df))) / std::sqrt(2.0 / (9.0 * df));
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

}  // namespace foxhunt::rl::test_model
