#include "rl/ppo/config.hpp"

#include <stdexcept>
#include <string>

namespace foxhunt::rl::ppo {
namespace {

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("PpoConfig: " + what);
}

}  // namespace

void validate(const PpoConfig& c) {
  expect(c.num_envs >= 1, "num_envs must be >= 1");
  expect(c.rollout_steps >= 1, "rollout_steps must be >= 1");
  expect(c.epochs >= 1, "epochs must be >= 1");
  expect(c.minibatches >= 1, "minibatches must be >= 1");
  expect(c.lstm_hidden >= 0, "lstm_hidden must be >= 0");
  expect(!c.recurrent() || c.num_envs % c.minibatches == 0,
         "a recurrent policy trains on whole sequences: num_envs (" + std::to_string(c.num_envs) +
             ") must be a multiple of minibatches (" + std::to_string(c.minibatches) + ")");
  expect(c.batch_rows() % c.minibatches == 0, "num_envs x rollout_steps (" + std::to_string(c.batch_rows()) +
                                                    ") must be a multiple of minibatches (" +
                                                    std::to_string(c.minibatches) + ")");
  expect(!c.normalize_advantages || c.minibatch_rows() >= 2,
         "advantage normalization needs minibatches of >= 2 rows");
  for (std::int64_t w : c.hidden) expect(w >= 1, "hidden widths must be >= 1");
  expect(c.activation == gpu::Activation::tanh || c.activation == gpu::Activation::relu,
         "activation must be tanh or relu");
  expect(c.head.width() >= 1, "the head must have at least one output");
  expect(c.gamma >= 0 && c.gamma <= 1 && c.gae_lambda >= 0 && c.gae_lambda <= 1, "gamma and gae_lambda in [0, 1]");
  expect(c.clip > 0, "clip must be > 0");
  expect(c.lr > 0 && c.lr_end >= 0, "lr must be > 0 and lr_end >= 0");
  expect(c.max_grad_norm >= 0, "max_grad_norm must be >= 0");
  expect(c.target_kl >= 0, "target_kl must be >= 0");
}

}  // namespace foxhunt::rl::ppo
