#pragma once
// The market environment: N independent portfolios, each trading `assets` instruments whose
// prices follow the configured law (GBM with drift, OU on the log price, regime switching, Merton
// jumps, correlated through a Cholesky factor; or historical replay), with fees, half-spread,
// size- and volatility-dependent slippage, position limits, a leverage cap and borrow costs.
//
// One step, per environment (all accounting in double):
//   E   = cash + sum_a q_a S_a                          (equity before trading, prices S_t)
//   w_a = target weight from the action, |w_a| <= position_limit; if sum |w| exceeds
//         leverage_cap the traded targets are scaled down to fit
//   q*_a = w_a E / S_a; dq = q*_a - q_a; notional = |dq| S_a
//   px  = S_a (1 + sign(dq) (half_spread + slippage * vol_a * sqrt(notional / liquidity)))
//   cash -= dq px + fee * notional;  q_a = q*_a
//   cash -= borrow_rate * dt * sum_a max(-q_a, 0) S_a  (shorts pay borrow on their notional)
//   prices move S_t -> S_{t+1}; E' = cash + sum_a q_a S_{t+1}; R = E'/E - 1
//   reward = pnl: (E' - E) / initial_cash | log_return: log(E'/E) | differential_sharpe
//            (Moody & Saffell, on R), minus drawdown_penalty * (1 - E'/peak) and
//            turnover_penalty * sum notional / E, all times reward_scale (episode returns sum
//            the scaled reward; Sharpe, drawdown and turnover statistics are unaffected)
//   terminated when E' < min_equity * initial_cash; truncated after episode_length steps.
// Actions: discrete int32 (T, N, assets), one sub-action per asset (action branching): the index
// of a level in config.levels (target weight = level * position_limit); -1 keeps the current
// holdings of that asset (no trade); other out-of-range values are clamped. Continuous f32
// (T, N, assets): target weight = clamp(value, -1, 1) * position_limit; NaN keeps the holdings.
//
// Observation (obs_dim = window*assets + assets + 3 + extra_features + (price_level ? assets : 0)):
//   [window x assets] log returns / (sigma_ref sqrt(dt)), oldest first, assets interleaved
//   [assets]          current weights q_a S_a / E
//   [1]               unrealized PnL sum_a q_a (S_a - cost basis_a) / E
//   [1]               episode progress t / episode_length
//   [1]               log(E / initial_cash)
//   [extra_features]  copied from the caller's device block (N, extra_features), zeros if unset
//   [assets]          observation.price_level only: the level of each log price x_a, from the
//                     current regime r's parameters: OU (x_a - mean_ra) / (sigma_ra / sqrt(2
//                     kappa_ra)) with mean = log S0_a + theta_ra (the state the OU oracle trades
//                     on); GBM (x_a - log S0_a) / (sigma_ra sqrt(dt) sqrt(episode_length)); 0 when
//                     sigma_ra = 0. Written with every row (reset, step, final_obs) from the state
//                     the row describes.
// The window is full from the first step: a reset simulates `window` steps of the process before
// the episode starts (GBM is then shifted so the episode starts at initial_price); replay starts
// at a random bar with the real history before it. A generated market (process.kind =
// "generated") trades the returns its diffusion model samples (rl/envs/market_generator.hpp): the
// log price moves by y step_vol for the normalized return y, the observation shows y itself; its
// streams continue across episodes (an episode starts at initial_price with the last `window`
// returns of the stream as its history).
//
// Randomness: Philox (seed, env index, counter) with counter = (step << 4 | block) for steps and
// (1 << 63 | step << 14 | j << 4 | block) for resets (j = burn-in step; window: initial normals;
// window + 1: initial regime and replay offset); blocks 0-3 Brownian normals, 4-7 jump counts,
// 8-11 jump sizes, 12 regime transition.
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/buffer.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/market_params.hpp"
#include "rl/envs/vec_env.hpp"

namespace foxhunt::rl {

// Device state, struct of arrays. Per-asset arrays are (assets, N): element [a * N + i].
struct MarketState {
  double* log_price = nullptr;           // (assets, N)
  double* holdings = nullptr;            // (assets, N) units
  double* cost_basis = nullptr;          // (assets, N) average entry price of the open position
  double* cash = nullptr;                // (N)
  double* peak_equity = nullptr;         // (N) running peak in the episode
  double* dsr_a = nullptr;               // (N) differential Sharpe first moment
  double* dsr_b = nullptr;               // (N) differential Sharpe second moment
  double* sum_ret = nullptr;             // (N) sum of per-step returns R in the episode
  double* sum_ret_sq = nullptr;          // (N)
  double* max_drawdown = nullptr;        // (N)
  double* turnover = nullptr;            // (N)
  double* episode_reward = nullptr;      // (N)
  std::int32_t* trades = nullptr;        // (N)
  std::int32_t* regime = nullptr;        // (N)
  std::int32_t* episode_step = nullptr;  // (N)
  std::int64_t* bar = nullptr;           // (N) replay: index of the current bar
  std::uint64_t* counter = nullptr;      // (N) steps taken
  float* ring = nullptr;                 // (N, window, assets) normalized log returns, ring by step
  float* tail = nullptr;                 // (N, assets + 3) weights, unrealized PnL, progress, log equity
  EpisodeAccum* accum = nullptr;         // (N)
  // process.kind = "generated" (rl/envs/market_generator.hpp), null otherwise: the chunk pairs
  // (N, 2 gen_window, assets) of normalized returns and the step counter k of the streams.
  const float* gen_returns = nullptr;
  const std::uint64_t* gen_step = nullptr;
  std::int64_t gen_window = 0;
};

// An optional per-step record of every environment (evaluation reports, rl/eval/metrics.hpp),
// written by the step kernel before an episode end resets the state. Row t is the environment's
// t-th step since reset() (its step counter), element [t * N + i] ([(t * N + i) * assets + a] for
// weights); steps at or past `steps` are not recorded. All pointers are device memory.
struct MarketTrace {
  std::int64_t steps = 0;          // rows every array holds (T); 0: no trace
  double* equity = nullptr;        // (T, N) equity after the step, at the new prices
  double* cost = nullptr;          // (T, N) fees + half-spread + slippage paid in the step (currency)
  double* borrow = nullptr;        // (T, N) borrow charged in the step (currency)
  double* turnover = nullptr;      // (T, N) traded notional / equity before trading
  float* weight = nullptr;         // (T, N, assets) q_a S_a / E after the step (the observed weights)
  std::int32_t* trades = nullptr;  // (T, N) assets traded with non-zero size
  std::uint8_t* ended = nullptr;   // (T, N) 0 running, 1 truncated, 2 terminated at this step
};
inline constexpr std::uint8_t kTraceTruncated = 1;
inline constexpr std::uint8_t kTraceTerminated = 2;

class MarketGenerator;

class MarketEnv final : public VecEnv {
 public:
  // `replay` must be given (loaded data) when config.process is replay; it is uploaded once. A
  // generated market loads its model (read_generator_checkpoint; ConfigError when it does not fit).
  MarketEnv(const MarketConfig& config, std::int64_t num_envs, const OhlcvData* replay = nullptr);
  ~MarketEnv() override;

  std::int64_t num_envs() const override { return n_; }
  std::int64_t obs_dim() const override { return obs_dim_; }
  ActionSpace action_space() const override;

  void reset(void* obs, gpu::DType obs_dtype, std::uint64_t seed, cudaStream_t stream) override;
  void step(const StepOutputs& out, const ActionInput& actions, std::int64_t steps, cudaStream_t stream) override;
  void reduce_stats(EpisodeStats* out, bool clear, cudaStream_t stream) override;

  // The extra observation block: a device pointer (N, extra_features) f32 that others fill; read
  // at every step. nullptr writes zeros.
  void set_extra_features(const float* device_block) { extra_ = device_block; }
  // Records every following step into `trace` (MarketTrace above; every pointer set and each
  // array sized for num_envs()); a default MarketTrace stops recording. Recording changes nothing
  // the environment computes.
  void set_trace(const MarketTrace& trace);
  const MarketTrace& trace() const { return trace_; }

  // Minimum bytes of one step() of `steps` steps (actions, outputs, state read and written).
  std::int64_t step_bytes(std::int64_t steps, gpu::DType obs_dtype) const;

  const MarketConfig& config() const { return config_; }
  const MarketState& state() const { return state_; }
  std::uint64_t seed() const { return seed_; }
  const MarketParams& params() const { return params_; }
  // The returns' sampler of a generated market (its state is part of the env's); null otherwise.
  MarketGenerator* generator() { return generator_.get(); }

 private:
  MarketConfig config_;
  std::int64_t n_;
  std::int64_t obs_dim_;
  std::uint64_t seed_ = 0;
  bool started_ = false;
  const float* extra_ = nullptr;
  MarketTrace trace_;
  MarketParams params_;
  gpu::DeviceBuffer<double> f64_;  // all double arrays, one allocation
  gpu::DeviceBuffer<std::int32_t> i32_;
  gpu::DeviceBuffer<std::int64_t> bar_;
  gpu::DeviceBuffer<std::uint64_t> counter_;
  gpu::DeviceBuffer<float> ring_, tail_;
  gpu::DeviceBuffer<double> replay_log_price_;  // (assets, bars) log close
  gpu::DeviceBuffer<EpisodeAccum> accum_;
  gpu::DeviceBuffer<std::byte> stats_workspace_;
  MarketState state_;
  std::unique_ptr<MarketGenerator> generator_;
};

// The environment of a market config with its data: a replay market's bars are loaded with
// load_ohlcv (the part config.replay_split names, rl::split_market) and uploaded; CsvError or
// ConfigError when they cannot be.
std::unique_ptr<MarketEnv> make_market_env(const MarketConfig& config, std::int64_t num_envs);

}  // namespace foxhunt::rl
