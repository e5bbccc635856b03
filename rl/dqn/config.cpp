#include "rl/dqn/config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string_view>

#include <toml++/toml.h>

namespace foxhunt::rl {
namespace {

struct Reader {
  std::string source;

  [[noreturn]] void fail(const toml::node* n, const std::string& key, const std::string& msg) const {
    std::ostringstream s;
    s << source;
    if (n != nullptr && n->source().begin.line > 0) s << ':' << n->source().begin.line;
    s << ": " << key << ": " << msg;
    throw DqnConfigError(s.str());
  }

  void check_keys(const toml::table& t, const std::string& path,
                  std::initializer_list<std::string_view> allowed) const {
    for (auto&& [k, v] : t) {
      const std::string_view key = k.str();
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      fail(&v, path.empty() ? std::string(key) : path + "." + std::string(key),
           path.empty() ? "unknown table; allowed: " + list : "unknown key; allowed here: " + list);
    }
  }

  const toml::table* table(const toml::table& root, std::string_view key) const {
    const toml::node* n = root.get(key);
    if (n == nullptr) return nullptr;
    if (!n->is_table()) fail(n, std::string(key), "must be a table");
    return n->as_table();
  }

  void number(const toml::table* t, const std::string& table, std::string_view key, double& out) const {
    if (t == nullptr) return;
    const toml::node* n = t->get(key);
    if (n == nullptr) return;
    const std::string path = table + "." + std::string(key);
    if (!n->is_number()) fail(n, path, "must be a number");
    const double v = n->is_integer() ? static_cast<double>(n->as_integer()->get()) : n->as_floating_point()->get();
    if (!std::isfinite(v)) fail(n, path, "must be finite");
    out = v;
  }
  void integer(const toml::table* t, const std::string& table, std::string_view key, std::int64_t& out) const {
    if (t == nullptr) return;
    const toml::node* n = t->get(key);
    if (n == nullptr) return;
    if (!n->is_integer()) fail(n, table + "." + std::string(key), "must be an integer");
    out = n->as_integer()->get();
  }
  void boolean(const toml::table* t, const std::string& table, std::string_view key, bool& out) const {
    if (t == nullptr) return;
    const toml::node* n = t->get(key);
    if (n == nullptr) return;
    if (!n->is_boolean()) fail(n, table + "." + std::string(key), "must be true or false");
    out = n->as_boolean()->get();
  }
  void string(const toml::table* t, const std::string& table, std::string_view key, std::string& out) const {
    if (t == nullptr) return;
    const toml::node* n = t->get(key);
    if (n == nullptr) return;
    if (!n->is_string()) fail(n, table + "." + std::string(key), "must be a string");
    out = n->as_string()->get();
  }
  void int_list(const toml::table* t, const std::string& table, std::string_view key,
                std::vector<std::int64_t>& out) const {
    if (t == nullptr) return;
    const toml::node* n = t->get(key);
    if (n == nullptr) return;
    const std::string path = table + "." + std::string(key);
    if (!n->is_array()) fail(n, path, "must be an array of integers");
    out.clear();
    for (auto&& e : *n->as_array()) {
      if (!e.is_integer()) fail(&e, path, "must be an array of integers");
      out.push_back(e.as_integer()->get());
    }
  }
};

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Range checks with the key and the allowed range in the message.
[[noreturn]] void bad(const std::string& key, const std::string& range, const std::string& got) {
  throw DqnConfigError(key + " must be " + range + ", got " + got);
}
void in_range(const char* key, double v, double lo, double hi, bool lo_open = false, bool hi_open = false) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok)
    bad(key, std::string("in ") + (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + (hi_open ? ")" : "]"), num(v));
}
void in_range(const char* key, std::int64_t v, std::int64_t lo, std::int64_t hi) {
  if (v < lo || v > hi) bad(key, "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", std::to_string(v));
}
void one_of(const char* key, const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (auto a : allowed) {
    if (v == a) return;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  bad(key, "one of " + list, "\"" + v + "\"");
}

}  // namespace

void validate(const DqnRunConfig& c) {
  constexpr std::int64_t kBig = std::int64_t{1} << 40;
  one_of("env.kind", c.env, {"cartpole", "market"});
  if (c.env == "market" && c.market_config.empty())
    bad("env.market_config", "set for env.kind = \"market\"", "nothing");
  in_range("env.num_envs", c.num_envs, 1, 65536);
  if (c.hidden.empty() || c.hidden.size() > 8)
    bad("network.hidden", "a list of 1 to 8 layer widths", std::to_string(c.hidden.size()) + " entries");
  for (auto h : c.hidden) in_range("network.hidden", h, 1, 65536);
  one_of("network.activation", c.activation, {"relu", "gelu"});
  in_range("network.sigma0", c.sigma0, 0.0, 10.0);
  if (c.atoms != 1) in_range("network.atoms", c.atoms, 2, 1024);
  in_range("network.v_min", c.v_min, -1e9, 1e9);
  in_range("network.v_max", c.v_max, -1e9, 1e9);
  if (!(c.v_min < c.v_max)) bad("network.v_max", "> network.v_min (" + num(c.v_min) + ")", num(c.v_max));
  if (c.atoms > 1 && c.branching) bad("network.branching", "false when network.atoms > 1 (C51 has one branch)", "true");
  in_range("dqn.batch", c.batch, 1, std::int64_t{1} << 20);
  in_range("dqn.gamma", c.gamma, 0.0, 1.0);
  in_range("dqn.n_step", c.n_step, 1, 32);
  one_of("dqn.loss", c.loss, {"huber", "mse"});
  in_range("dqn.huber_delta", c.huber_delta, 0.0, 1e6, true);
  in_range("dqn.lr", c.lr, 0.0, 1.0, true);
  if (c.lr_end >= 0.0) in_range("dqn.lr_end", c.lr_end, 0.0, 1.0);
  in_range("dqn.lr_anneal_updates", c.lr_anneal_updates, 0, kBig);
  in_range("dqn.adam_eps", c.adam_eps, 0.0, 1.0);
  in_range("dqn.adam_beta1", c.adam_beta1, 0.0, 1.0, false, true);
  in_range("dqn.adam_beta2", c.adam_beta2, 0.0, 1.0, false, true);
  in_range("dqn.max_grad_norm", c.max_grad_norm, 0.0, 1e9);
  in_range("dqn.tau", c.tau, 0.0, 1.0, true);
  in_range("dqn.target_period", c.target_period, 1, kBig);
  in_range("dqn.epsilon_start", c.epsilon_start, 0.0, 1.0);
  in_range("dqn.epsilon_end", c.epsilon_end, 0.0, 1.0);
  in_range("dqn.epsilon_steps", c.epsilon_steps, 0, kBig);
  in_range("replay.capacity", c.capacity, c.batch, 2147483647);
  in_range("replay.alpha", c.alpha, 0.0, 10.0);
  in_range("replay.beta", c.beta, 0.0, 1.0);
  in_range("replay.beta_final", c.beta_final, 0.0, 1.0);
  in_range("replay.beta_anneal_updates", c.beta_anneal_updates, 0, kBig);
  in_range("replay.priority_eps", c.priority_eps, 0.0, 1.0, true);
  in_range("train.total_steps", c.total_steps, 1, kBig);
  in_range("train.learning_starts", c.learning_starts, c.batch, kBig);
  in_range("train.train_every", c.train_every, 1, kBig);
  in_range("train.updates_per_train", c.updates_per_train, 1, 1024);
}

DqnRunConfig parse_dqn_config(const std::string& toml_text, const std::string& source) {
  Reader r{source};
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream s;
    s << source << ':' << e.source().begin.line << ": TOML parse error: " << e.description();
    throw DqnConfigError(s.str());
  }
  r.check_keys(root, "", {"env", "network", "dqn", "replay", "train"});
  DqnRunConfig c;
  const toml::table* env = r.table(root, "env");
  const toml::table* net = r.table(root, "network");
  const toml::table* dqn = r.table(root, "dqn");
  const toml::table* rep = r.table(root, "replay");
  const toml::table* tr = r.table(root, "train");
  if (env) r.check_keys(*env, "env", {"kind", "market_config", "num_envs"});
  if (net)
    r.check_keys(*net, "network",
                 {"hidden", "activation", "dueling", "noisy", "sigma0", "atoms", "v_min", "v_max", "branching"});
  if (dqn)
    r.check_keys(*dqn, "dqn",
                 {"batch", "gamma", "n_step", "double", "loss", "huber_delta", "lr", "lr_end", "lr_anneal_updates",
                  "adam_eps", "adam_beta1", "adam_beta2", "max_grad_norm", "tau", "target_period", "epsilon_start",
                  "epsilon_end", "epsilon_steps", "seed"});
  if (rep)
    r.check_keys(*rep, "replay",
                 {"capacity", "prioritized", "alpha", "beta", "beta_final", "beta_anneal_updates", "priority_eps"});
  if (tr) r.check_keys(*tr, "train", {"total_steps", "learning_starts", "train_every", "updates_per_train"});

  r.string(env, "env", "kind", c.env);
  r.string(env, "env", "market_config", c.market_config);
  r.integer(env, "env", "num_envs", c.num_envs);
  r.int_list(net, "network", "hidden", c.hidden);
  r.string(net, "network", "activation", c.activation);
  r.boolean(net, "network", "dueling", c.dueling);
  r.boolean(net, "network", "noisy", c.noisy);
  r.number(net, "network", "sigma0", c.sigma0);
  r.integer(net, "network", "atoms", c.atoms);
  r.number(net, "network", "v_min", c.v_min);
  r.number(net, "network", "v_max", c.v_max);
  r.boolean(net, "network", "branching", c.branching);
  r.integer(dqn, "dqn", "batch", c.batch);
  r.number(dqn, "dqn", "gamma", c.gamma);
  r.integer(dqn, "dqn", "n_step", c.n_step);
  r.boolean(dqn, "dqn", "double", c.double_q);
  r.string(dqn, "dqn", "loss", c.loss);
  r.number(dqn, "dqn", "huber_delta", c.huber_delta);
  r.number(dqn, "dqn", "lr", c.lr);
  r.number(dqn, "dqn", "lr_end", c.lr_end);
  r.integer(dqn, "dqn", "lr_anneal_updates", c.lr_anneal_updates);
  r.number(dqn, "dqn", "adam_eps", c.adam_eps);
  r.number(dqn, "dqn", "adam_beta1", c.adam_beta1);
  r.number(dqn, "dqn", "adam_beta2", c.adam_beta2);
  r.number(dqn, "dqn", "max_grad_norm", c.max_grad_norm);
  r.number(dqn, "dqn", "tau", c.tau);
  r.integer(dqn, "dqn", "target_period", c.target_period);
  r.number(dqn, "dqn", "epsilon_start", c.epsilon_start);
  r.number(dqn, "dqn", "epsilon_end", c.epsilon_end);
  r.integer(dqn, "dqn", "epsilon_steps", c.epsilon_steps);
  std::int64_t seed = static_cast<std::int64_t>(c.seed);
  r.integer(dqn, "dqn", "seed", seed);
  if (seed < 0) r.fail(dqn->get("seed"), "dqn.seed", "must be >= 0, got " + std::to_string(seed));
  c.seed = static_cast<std::uint64_t>(seed);
  r.integer(rep, "replay", "capacity", c.capacity);
  r.boolean(rep, "replay", "prioritized", c.prioritized);
  r.number(rep, "replay", "alpha", c.alpha);
  r.number(rep, "replay", "beta", c.beta);
  r.number(rep, "replay", "beta_final", c.beta_final);
  r.integer(rep, "replay", "beta_anneal_updates", c.beta_anneal_updates);
  r.number(rep, "replay", "priority_eps", c.priority_eps);
  r.integer(tr, "train", "total_steps", c.total_steps);
  r.integer(tr, "train", "learning_starts", c.learning_starts);
  r.integer(tr, "train", "train_every", c.train_every);
  r.integer(tr, "train", "updates_per_train", c.updates_per_train);
  try {
    validate(c);
  } catch (const DqnConfigError& e) {
    throw DqnConfigError(source + ": " + e.what());
  }
  return c;
}

DqnRunConfig load_dqn_config(const std::filesystem::path& path) {
  std::ifstream f(path);
  if (!f) throw DqnConfigError(path.string() + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  DqnRunConfig c = parse_dqn_config(ss.str(), path.string());
  if (!c.market_config.empty() && std::filesystem::path(c.market_config).is_relative())
    c.market_config = (path.parent_path() / c.market_config).lexically_normal().string();
  return c;
}

}  // namespace foxhunt::rl
