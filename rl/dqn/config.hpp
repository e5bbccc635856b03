#pragma once
// A DQN-family run as a configs/*.toml file says it: environment, network, learner, replay and
// training loop. Parsed with toml++ and validated; every rejection names the key as written in the
// file (e.g. `dqn.tau`), the allowed range and, for parse errors and bad values, the file and line.
// Unknown tables and keys are rejected. Plain C++: no device code (CPU tests use it).
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace foxhunt::rl {

class DqnConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct DqnRunConfig {
  // [env]
  std::string env = "cartpole";  // cartpole | market
  std::string market_config;     // market: path of the market TOML (relative to this file)
  std::int64_t num_envs = 1;     // [1, 65536]
  // [network]
  std::vector<std::int64_t> hidden{120, 84};  // 1..8 layers of [1, 65536]
  std::string activation = "relu";            // relu | gelu
  bool dueling = false;
  bool noisy = false;
  double sigma0 = 0.5;                 // [0, 10]
  std::int64_t atoms = 1;              // 1 or [2, 1024]
  double v_min = -10.0, v_max = 10.0;  // finite, v_min < v_max
  bool branching = false;              // market with several assets: one branch per asset (BDQ)
  // [dqn]
  std::int64_t batch = 128;                        // [1, 1 << 20]
  double gamma = 0.99;                             // [0, 1]
  std::int64_t n_step = 1;                         // [1, 32]
  bool double_q = true;                            // key: double
  std::string loss = "huber";                      // huber | mse
  double huber_delta = 1.0;                        // (0, 1e6]
  double lr = 2.5e-4;                              // (0, 1]
  double lr_end = -1.0;                            // [0, 1]; < 0 (absent) = lr (constant)
  std::int64_t lr_anneal_updates = 0;              // >= 0
  double adam_eps = 1e-8;                          // [0, 1]
  double adam_beta1 = 0.9, adam_beta2 = 0.999;     // [0, 1)
  double max_grad_norm = 10.0;                     // >= 0 (0: no clipping)
  double tau = 1.0;                                // (0, 1]
  std::int64_t target_period = 500;                // updates, >= 1
  double epsilon_start = 1.0, epsilon_end = 0.05;  // [0, 1]
  std::int64_t epsilon_steps = 250000;             // env steps, >= 0
  std::uint64_t seed = 1;
  // [replay]
  std::int64_t capacity = 10000;  // [batch, 2^31 - 1]
  bool prioritized = false;
  double alpha = 0.6;                    // [0, 10]
  double beta = 0.4, beta_final = 1.0;   // [0, 1]
  std::int64_t beta_anneal_updates = 0;  // >= 0
  double priority_eps = 1e-6;            // (0, 1]
  // [train]
  std::int64_t total_steps = 500000;     // env transitions (all envs), >= 1
  std::int64_t learning_starts = 10000;  // transitions before the first update, >= batch
  std::int64_t train_every = 10;         // transitions between updates, >= 1
  std::int64_t updates_per_train = 1;    // [1, 1024]
};

// Parses TOML text; `source` names it in messages. Throws DqnConfigError.
DqnRunConfig parse_dqn_config(const std::string& toml_text, const std::string& source = "<string>");
// Reads and parses a file (market_config resolved relative to it). Throws DqnConfigError.
DqnRunConfig load_dqn_config(const std::filesystem::path& path);
// The range checks alone (parse_dqn_config runs them); for configs built in code.
void validate(const DqnRunConfig& config);

}  // namespace foxhunt::rl
