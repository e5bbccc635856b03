#include "actors/run_config.hpp"

#include <toml++/toml.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace foxhunt::actors {
namespace {

std::string fmt_num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string describe_node(const toml::node& n) {
  std::ostringstream s;
  if (n.is_string())
    s << '"' << n.as_string()->get() << '"';
  else if (n.is_table())
    s << "a table";
  else if (n.is_array())
    s << "an array";
  else
    n.visit([&](const auto& v) {
      if constexpr (toml::is_value<decltype(v)>) s << v.get();
    });
  return s.str();
}

// Reads one section at a time, remembering every key it was asked about, filling defaults into
// `out` (the resolved configuration) and collecting every problem.
class Reader {
 public:
  explicit Reader(const toml::table& root) : root_(root) {}

  void section(const std::string& name) {
    sec_name_ = name;
    sections_.insert(name);
    sec_ = nullptr;
    if (const toml::node* n = root_.get(name)) {
      if (n->is_table())
        sec_ = n->as_table();
      else
        error(name + " = " + describe_node(*n) + ": must be a table ([" + name + "])");
    }
    out_.insert_or_assign(name, toml::table{});
  }

  void integer(const char* key, std::int64_t& v, std::int64_t lo, std::int64_t hi) {
    if (const toml::node* n = find(key)) {
      if (!n->is_integer())
        error(path(key) + " = " + describe_node(*n) + ": must be an integer in [" + std::to_string(lo) + ", " +
              std::to_string(hi) + "]");
      else if (auto x = n->as_integer()->get(); x < lo || x > hi)
        error(path(key) + " = " + std::to_string(x) + ": must be an integer in [" + std::to_string(lo) + ", " +
              std::to_string(hi) + "]");
      else
        v = x;
    }
    put(key, v);
  }
  void integer(const char* key, int& v, int lo, int hi) {
    std::int64_t x = v;
    integer(key, x, lo, hi);
    v = static_cast<int>(x);
  }
  void unsigned_integer(const char* key, std::uint64_t& v) {
    std::int64_t x = static_cast<std::int64_t>(v);
    integer(key, x, 0, std::numeric_limits<std::int64_t>::max());
    v = static_cast<std::uint64_t>(x);
  }
  // [lo, hi], or (lo, hi] with lo_open
  void number(const char* key, double& v, double lo, double hi, bool lo_open = false) {
    const std::string range = std::string(lo_open ? "(" : "[") + fmt_num(lo) + ", " + fmt_num(hi) + "]";
    if (const toml::node* n = find(key)) {
      if (!n->is_number()) {
        error(path(key) + " = " + describe_node(*n) + ": must be a number in " + range);
      } else {
        const double x = n->value<double>().value_or(NAN);
        if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
          error(path(key) + " = " + fmt_num(x) + ": must be a number in " + range);
        else
          v = x;
      }
    }
    put(key, v);
  }
  void boolean(const char* key, bool& v) {
    if (const toml::node* n = find(key)) {
      if (!n->is_boolean())
        error(path(key) + " = " + describe_node(*n) + ": must be true or false");
      else
        v = n->as_boolean()->get();
    }
    put(key, v);
  }
  void choice(const char* key, std::string& v, const std::vector<std::string>& allowed) {
    std::string set;
    for (auto& a : allowed) set += (set.empty() ? "" : " | ") + a;
    if (const toml::node* n = find(key)) {
      const std::string* s = n->is_string() ? &n->as_string()->get() : nullptr;
      bool ok = false;
      if (s)
        for (auto& a : allowed) ok = ok || a == *s;
      if (!ok)
        error(path(key) + " = " + describe_node(*n) + ": must be one of " + set);
      else
        v = *s;
    }
    put(key, v);
  }
  void text(const char* key, std::string& v) {
    if (const toml::node* n = find(key)) {
      if (!n->is_string() || n->as_string()->get().empty())
        error(path(key) + " = " + describe_node(*n) + ": must be a non-empty string");
      else
        v = n->as_string()->get();
    }
    put(key, v);
  }
  // A string that may be empty (an optional path: "" = not set).
  void optional_text(const char* key, std::string& v) {
    if (const toml::node* n = find(key)) {
      if (!n->is_string())
        error(path(key) + " = " + describe_node(*n) + ": must be a string");
      else
        v = n->as_string()->get();
    }
    put(key, v);
  }
  // A known key that must not be set here (and is not written to the resolved config).
  void forbid(const char* key, const std::string& why) {
    if (const toml::node* n = find(key)) error(path(key) + " = " + describe_node(*n) + ": " + why);
  }
  void int_list(const char* key, std::vector<std::int64_t>& v, std::size_t min_len, std::size_t max_len,
                std::int64_t lo, std::int64_t hi) {
    const std::string what = "must be a list of " + std::to_string(min_len) + " to " + std::to_string(max_len) +
                             " integers in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (const toml::node* n = find(key)) {
      const toml::array* a = n->as_array();
      bool ok = a && a->size() >= min_len && a->size() <= max_len;
      std::vector<std::int64_t> out;
      if (ok)
        for (const auto& e : *a) {
          if (!e.is_integer() || e.as_integer()->get() < lo || e.as_integer()->get() > hi) {
            ok = false;
            break;
          }
          out.push_back(e.as_integer()->get());
        }
      if (!ok)
        error(path(key) + " = " + describe_node(*n) + ": " + what);
      else
        v = out;
    }
    toml::array arr;
    for (auto x : v) arr.push_back(x);
    out_[sec_name_].as_table()->insert_or_assign(key, std::move(arr));
    known_.insert(path(key));
  }

  void check(bool ok, const std::string& message) {
    if (!ok) error(message);
  }
  // Every key in the file that nobody asked about.
  void reject_unknown() {
    for (const auto& [k, n] : root_) {
      const std::string name(k.str());
      if (!sections_.count(name)) {
        error("unknown section or key '" + name + "' (sections: " + join(sections_) + ")");
        continue;
      }
      if (const toml::table* t = n.as_table())
        for (const auto& [k2, n2] : *t) {
          const std::string full = name + "." + std::string(k2.str());
          if (!known_.count(full)) error("unknown key '" + full + "' (known in [" + name + "]: " + keys_of(name) + ")");
        }
    }
  }
  const std::vector<std::string>& errors() const { return errors_; }
  const toml::table& resolved() const { return out_; }

 private:
  const toml::node* find(const char* key) {
    known_.insert(path(key));
    return sec_ ? sec_->get(key) : nullptr;
  }
  std::string path(const char* key) const { return sec_name_ + "." + key; }
  template <class T>
  void put(const char* key, const T& v) {
    if constexpr (std::is_same_v<T, std::uint64_t>)
      out_[sec_name_].as_table()->insert_or_assign(key, static_cast<std::int64_t>(v));
    else
      out_[sec_name_].as_table()->insert_or_assign(key, v);
  }
  void error(std::string e) { errors_.push_back(std::move(e)); }
  static std::string join(const std::set<std::string>& s) {
    std::string r;
    for (auto& x : s) r += (r.empty() ? "" : ", ") + x;
    return r;
  }
  std::string keys_of(const std::string& sec) const {
    std::set<std::string> ks;
    for (auto& k : known_)
      if (k.rfind(sec + ".", 0) == 0) ks.insert(k.substr(sec.size() + 1));
    return join(ks);
  }

  const toml::table& root_;
  const toml::table* sec_ = nullptr;
  std::string sec_name_;
  std::set<std::string> sections_, known_;
  std::vector<std::string> errors_;
  toml::table out_;
};

constexpr std::int64_t kBig = std::int64_t{1} << 40;

// One pass reads every field (defaults where absent) and records the resolved table.
void read_all(Reader& r, RunConfig& c) {
  r.section("run");
  r.text("name", c.run.name);
  r.unsigned_integer("seed", c.run.seed);
  r.integer("total_env_steps", c.run.total_env_steps, 1, kBig);
  r.integer("device", c.run.device, 0, 63);
  r.boolean("deterministic", c.run.deterministic);

  r.section("env");
  r.choice("kind", c.env.kind, {"cartpole", "ou_market", "market"});
  r.integer("num_envs", c.env.num_envs, 1, std::int64_t{1} << 24);
  r.integer("steps_per_slot", c.env.steps_per_slot, 1, 4096);
  r.optional_text("market", c.env.market);
  if (!c.env.market.empty()) {
    // The inline OU keys are left out of the resolved config: the market file says it all.
    for (const char* k : {"kappa", "theta", "sigma", "dt", "fee_bps", "episode_length"})
      r.forbid(k, "not allowed beside env.market (the market file sets it)");
    r.check(c.env.kind != "cartpole",
            "env.market = \"" + c.env.market + "\": only for env.kind = \"ou_market\" or \"market\", not \"cartpole\"");
  } else {
    r.number("kappa", c.env.kappa, 0.0, 1e4, true);
    r.number("theta", c.env.theta, -1e3, 1e3);
    r.number("sigma", c.env.sigma, 0.0, 10.0, true);
    r.number("dt", c.env.dt, 0.0, 1.0, true);
    r.number("fee_bps", c.env.fee_bps, 0.0, 1e4);
    r.integer("episode_length", c.env.episode_length, 2, 1'000'000);
    r.check(c.env.kind != "market",
            "env.market: missing; env.kind = \"market\" needs a market config file (e.g. "
            "\"markets/ou_mean_reversion.toml\", relative to this file)");
  }

  r.section("replay");
  r.integer("capacity", c.replay.capacity, 1, std::int64_t{2147483647});
  r.integer("batch_size", c.replay.batch_size, 1, 1 << 20);
  r.boolean("prioritized", c.replay.prioritized);
  r.number("alpha", c.replay.alpha, 0.0, 10.0);
  r.number("beta", c.replay.beta, 0.0, 1.0);
  r.number("beta_final", c.replay.beta_final, 0.0, 1.0);
  r.integer("n_step", c.replay.n_step, 1, 32);
  r.number("gamma", c.replay.gamma, 0.0, 1.0);
  r.integer("beta_anneal_updates", c.replay.beta_anneal_updates, 0, kBig);
  r.number("priority_eps", c.replay.priority_eps, 0.0, 1.0, true);

  r.section("learner");
  r.int_list("hidden", c.learner.hidden, 1, 8, 1, 65536);
  r.number("lr", c.learner.lr, 0.0, 1.0, true);
  r.boolean("dueling", c.learner.dueling);
  r.boolean("double_dqn", c.learner.double_dqn);
  r.choice("loss", c.learner.loss, {"huber", "mse"});
  r.number("grad_clip", c.learner.grad_clip, 0.0, 1e6);
  r.choice("target", c.learner.target, {"hard", "polyak"});
  r.number("tau", c.learner.tau, 0.0, 1.0, true);
  r.number("epsilon_start", c.learner.epsilon_start, 0.0, 1.0);
  r.number("epsilon_final", c.learner.epsilon_final, 0.0, 1.0);
  r.integer("epsilon_decay_steps", c.learner.epsilon_decay_steps, 0, kBig);
  r.choice("activation", c.learner.activation, {"relu", "gelu"});
  r.boolean("noisy", c.learner.noisy);
  r.number("sigma0", c.learner.sigma0, 0.0, 10.0);
  r.integer("atoms", c.learner.atoms, 1, 1024);
  r.number("v_min", c.learner.v_min, -1e9, 1e9);
  r.number("v_max", c.learner.v_max, -1e9, 1e9);
  r.number("huber_delta", c.learner.huber_delta, 0.0, 1e6, true);
  if (c.learner.lr_end < 0) c.learner.lr_end = c.learner.lr;  // absent: constant lr
  r.number("lr_end", c.learner.lr_end, 0.0, 1.0);
  r.integer("lr_anneal_updates", c.learner.lr_anneal_updates, 0, kBig);
  r.number("adam_eps", c.learner.adam_eps, 0.0, 1.0);
  r.number("adam_beta1", c.learner.adam_beta1, 0.0, 0.999999);  // [0, 1) as the learner checks it
  r.number("adam_beta2", c.learner.adam_beta2, 0.0, 0.999999);
  r.integer("target_period", c.learner.target_period, 0, 10'000'000);

  r.section("pipeline");
  r.number("replay_ratio", c.pipeline.replay_ratio, 0.0, 1024.0, true);
  r.integer("learning_starts", c.pipeline.learning_starts, 1, kBig);
  r.integer("ratio_slack", c.pipeline.ratio_slack, 1, 1'000'000);
  r.integer("slots", c.pipeline.slots, 1, 64);
  r.integer("batches", c.pipeline.batches, 1, 64);
  r.integer("sync_every", c.pipeline.sync_every, 1, 10'000'000);
  r.choice("completions", c.pipeline.completions, {"hostfn", "polled"});

  r.section("checkpoint");
  r.integer("every_env_steps", c.checkpoint.every_env_steps, 0, kBig);
  r.integer("keep", c.checkpoint.keep, 0, 1'000'000);
  r.choice("replay", c.checkpoint.replay, {"final", "always", "never"});

  r.section("logging");
  r.integer("progress_interval_ms", c.logging.progress_interval_ms, 50, 3'600'000);
  r.boolean("tensorboard", c.logging.tensorboard);
  r.boolean("jsonl", c.logging.jsonl);
  r.boolean("timeline", c.logging.timeline);
  r.choice("level", c.logging.level, {"trace", "debug", "info", "warn", "error"});

  // Relations between keys.
  r.check(c.pipeline.learning_starts >= c.replay.batch_size,
          "pipeline.learning_starts = " + std::to_string(c.pipeline.learning_starts) +
              ": must be >= replay.batch_size (" + std::to_string(c.replay.batch_size) + ")");
  r.check(c.replay.capacity >= c.pipeline.learning_starts, "replay.capacity = " + std::to_string(c.replay.capacity) +
                                                               ": must be >= pipeline.learning_starts (" +
                                                               std::to_string(c.pipeline.learning_starts) + ")");
  r.check(c.replay.capacity >= c.env.num_envs * c.env.steps_per_slot * c.pipeline.slots,
          "replay.capacity = " + std::to_string(c.replay.capacity) +
              ": must hold the slots in flight (env.num_envs * env.steps_per_slot * pipeline.slots = " +
              std::to_string(c.env.num_envs * c.env.steps_per_slot * c.pipeline.slots) + ")");
  r.check(c.learner.v_min < c.learner.v_max, "learner.v_max = " + fmt_num(c.learner.v_max) +
                                                 ": must be > learner.v_min (" + fmt_num(c.learner.v_min) + ")");
  r.check(c.learner.atoms == 1 || c.learner.loss == "huber",
          "learner.loss = \"" + c.learner.loss + "\": C51 (learner.atoms = " + std::to_string(c.learner.atoms) +
              ") always uses its cross-entropy; leave learner.loss at \"huber\"");
  r.check(c.learner.lr_anneal_updates > 0 || c.learner.lr_end == c.learner.lr,
          "learner.lr_end = " + fmt_num(c.learner.lr_end) + ": differs from learner.lr (" + fmt_num(c.learner.lr) +
              ") but learner.lr_anneal_updates = 0 (set the anneal length, or leave lr_end out)");
  r.check(c.learner.epsilon_final <= c.learner.epsilon_start,
          "learner.epsilon_final = " + fmt_num(c.learner.epsilon_final) + ": must be <= learner.epsilon_start (" +
              fmt_num(c.learner.epsilon_start) + ")");
}

// TOML text -> table; a syntax error names source:line:column.
toml::table parse_toml(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream s;
    s << source << ":" << e.source().begin.line << ":" << e.source().begin.column
      << ": TOML syntax error: " << e.description();
    throw std::invalid_argument(s.str());
  }
}

}  // namespace

PipelineConfig RunConfig::pipeline_config() const {
  PipelineConfig p;
  p.total_env_steps = run.total_env_steps;
  p.learning_starts = pipeline.learning_starts;
  p.replay_ratio = pipeline.replay_ratio;
  p.ratio_slack = pipeline.ratio_slack;
  p.sync_every = pipeline.sync_every;
  p.checkpoint_every = checkpoint.every_env_steps;
  p.deterministic = run.deterministic;
  return p;
}

RunConfig parse_run_config(const std::string& text, const std::string& source) {
  const toml::table root = parse_toml(text, source);
  RunConfig c;
  Reader r(root);
  read_all(r, c);
  r.reject_unknown();
  if (!r.errors().empty()) {
    std::string msg = source + ": invalid configuration:";
    for (const auto& e : r.errors()) msg += "\n  " + e;
    throw std::invalid_argument(msg);
  }
  return c;
}

std::string detect_config_schema(const std::string& text, const std::string& source) {
  const toml::table root = parse_toml(text, source);
  // [env] and [replay] are in both schemas; these are in one only.
  std::string dqn, pipeline;
  for (const char* t : {"network", "dqn", "train"})
    if (root.contains(t)) dqn += (dqn.empty() ? "[" : ", [") + std::string(t) + "]";
  for (const char* t : {"run", "learner", "pipeline", "checkpoint", "logging"})
    if (root.contains(t)) pipeline += (pipeline.empty() ? "[" : ", [") + std::string(t) + "]";
  if (!dqn.empty() && !pipeline.empty())
    throw std::invalid_argument(source + ": mixes the DQN-trainer schema's " + dqn + " with the actor pipeline's " +
                                pipeline +
                                " (use one schema: [run] [env] [replay] [learner] [pipeline] "
                                "[checkpoint] [logging], or [env] [network] [dqn] [replay] [train])");
  return dqn.empty() ? "pipeline" : "dqn";
}

RunConfig run_config_from_dqn(const rl::DqnRunConfig& d, const std::string& source) {
  std::vector<std::string> errors;
  RunConfig c;
  c.run.seed = d.seed;
  c.run.total_env_steps = d.total_steps;
  c.env.num_envs = d.num_envs;
  if (d.env == "cartpole") {
    c.env.kind = "cartpole";
  } else if (d.env == "market") {
    c.env.kind = "market";
    c.env.market = d.market_config;
  } else {
    errors.push_back("env.kind = \"" + d.env + "\": must be one of cartpole | market");
  }
  // [network]
  c.learner.hidden = d.hidden;
  c.learner.activation = d.activation;
  c.learner.dueling = d.dueling;
  c.learner.noisy = d.noisy;
  c.learner.sigma0 = d.sigma0;
  c.learner.atoms = d.atoms;
  c.learner.v_min = d.v_min;
  c.learner.v_max = d.v_max;
  // network.branching: the pipeline gives a market one branch per asset (BDQ heads when
  // assets > 1) and has no joint action space; checked against the market in load_run_config.
  // [dqn]
  c.replay.batch_size = d.batch;
  c.replay.gamma = d.gamma;
  c.replay.n_step = d.n_step;
  c.learner.double_dqn = d.double_q;
  c.learner.loss = d.atoms > 1 ? "huber" : d.loss;  // C51 ignores dqn.loss (cross-entropy) in both
  c.learner.huber_delta = d.huber_delta;
  c.learner.lr = d.lr;
  if (d.lr_end >= 0 && d.lr_anneal_updates == 0)
    c.learner.lr = c.learner.lr_end = d.lr_end;  // DqnSchedule: lr_end at once
  else
    c.learner.lr_end = d.lr_end >= 0 ? d.lr_end : d.lr;
  c.learner.lr_anneal_updates = d.lr_anneal_updates;
  c.learner.adam_eps = d.adam_eps;
  c.learner.adam_beta1 = d.adam_beta1;
  c.learner.adam_beta2 = d.adam_beta2;
  c.learner.grad_clip = d.max_grad_norm;
  c.learner.target = d.tau >= 1.0 ? "hard" : "polyak";
  if (d.tau < 1.0) c.learner.tau = d.tau;
  c.learner.target_period = d.target_period;
  c.pipeline.sync_every = d.target_period;  // the policy is published with the target update
  c.learner.epsilon_start = d.epsilon_start;
  c.learner.epsilon_final = d.epsilon_end;
  c.learner.epsilon_decay_steps = d.epsilon_steps;
  // [replay]
  c.replay.capacity = d.capacity;
  c.replay.prioritized = d.prioritized;
  c.replay.alpha = d.alpha;
  c.replay.beta = d.beta;
  c.replay.beta_final = d.beta_final;
  c.replay.beta_anneal_updates = d.beta_anneal_updates;
  c.replay.priority_eps = d.priority_eps;
  // [train]
  c.pipeline.learning_starts = d.learning_starts;
  c.pipeline.replay_ratio = static_cast<double>(d.updates_per_train) / static_cast<double>(d.train_every);
  if (d.epsilon_end > d.epsilon_start)
    errors.push_back("dqn.epsilon_end = " + fmt_num(d.epsilon_end) +
                     ": the actor pipeline needs it <= dqn.epsilon_start (" + fmt_num(d.epsilon_start) + ")");
  if (!errors.empty()) {
    std::string msg = source + ": DQN-trainer schema cannot run in the actor pipeline:";
    for (const auto& e : errors) msg += "\n  " + e;
    throw std::invalid_argument(msg);
  }
  // Everything else (ranges, relations) exactly as a pipeline file would be checked.
  return parse_run_config(resolved_toml(c), source + " (translated from the DQN-trainer schema)");
}

RunConfig load_run_config(const std::filesystem::path& file, bool* translated) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read config file " + file.string());
  std::ostringstream s;
  s << in.rdbuf();
  const bool dqn = detect_config_schema(s.str(), file.string()) == "dqn";
  if (translated) *translated = dqn;
  RunConfig c;
  bool branching = false;
  if (dqn) {
    rl::DqnRunConfig d;
    try {
      d = rl::parse_dqn_config(s.str(), file.string());
    } catch (const rl::DqnConfigError& e) {
      throw std::invalid_argument(e.what());
    }
    branching = d.branching;
    c = run_config_from_dqn(d, file.string());
    c.run.name = file.stem().string().empty() ? std::string("run") : file.stem().string();
  } else {
    c = parse_run_config(s.str(), file.string());
  }
  if (!c.env.market.empty()) {
    std::filesystem::path m(c.env.market);
    if (m.is_relative()) m = file.parent_path() / m;
    c.env.market = std::filesystem::absolute(m).lexically_normal().string();
    rl::MarketConfig mc;
    try {
      mc = market_config(c);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(file.string() + ": invalid configuration:\n  " + e.what());
    }
    if (c.learner.atoms > 1 && mc.assets > 1)
      throw std::invalid_argument(
          file.string() + ": invalid configuration:\n  " + std::string(dqn ? "network" : "learner") +
          ".atoms = " + std::to_string(c.learner.atoms) + ": C51 has one branch, but the market has " +
          std::to_string(mc.assets) + " assets (one branch each in the pipeline)");
    if (dqn && !branching && mc.assets > 1)
      throw std::invalid_argument(file.string() +
                                  ": invalid configuration:\n  network.branching = false: the actor "
                                  "pipeline gives each of the market's " +
                                  std::to_string(mc.assets) +
                                  " assets its own branch (BDQ heads) and has no joint action space; set "
                                  "network.branching = true");
  }
  return c;
}

rl::MarketConfig market_config(const RunConfig& c) {
  if (c.env.kind != "ou_market" && c.env.kind != "market")
    throw std::invalid_argument("env.kind = \"" + c.env.kind + "\": not a market environment");
  rl::MarketConfig m;
  if (c.env.market.empty()) {
    if (c.env.kind == "market")
      throw std::invalid_argument("env.market: missing; env.kind = \"market\" needs a market file");
    // The inline OU keys: configs/markets/bench_ou.toml's market (one asset, short/flat/long).
    m.assets = 1;
    m.dt = c.env.dt;
    m.episode_length = static_cast<int>(c.env.episode_length);
    m.process = rl::PriceProcess::ou;
    m.initial_price = {1.0};
    m.kappa = {c.env.kappa};
    m.theta = {c.env.theta};
    m.sigma = {c.env.sigma};
    m.fee_bps = c.env.fee_bps;
    m.levels = {-1.0, 0.0, 1.0};
    m.reward = rl::RewardKind::pnl;
    try {
      rl::validate(m);
    } catch (const rl::ConfigError& e) {
      throw std::invalid_argument(std::string("env (inline OU market): ") + e.what());
    }
  } else {
    if (!std::filesystem::is_regular_file(c.env.market))
      throw std::invalid_argument("env.market = \"" + c.env.market + "\": no such file");
    try {
      m = rl::load_market_config(c.env.market);
    } catch (const std::exception& e) {
      throw std::invalid_argument("env.market = \"" + c.env.market + "\": " + e.what());
    }
  }
  if (m.action != rl::ActionMode::discrete)
    throw std::invalid_argument(
        "env.market = \"" + c.env.market +
        "\": action.kind = \"continuous\" cannot run in the DQN pipeline (needs discrete levels)");
  if (m.process == rl::PriceProcess::replay)
    throw std::invalid_argument(
        "env.market = \"" + c.env.market +
        "\": process.kind = \"replay\" is not wired into the actor pipeline yet (OHLCV loading)");
  if (m.extra_features != 0)
    throw std::invalid_argument("env.market = \"" + c.env.market +
                                "\": market.extra_features must be 0 (nothing fills the extra block in the pipeline)");
  return m;
}

std::string resolved_toml(const RunConfig& c) {
  RunConfig copy = c;
  toml::table empty;
  Reader r(empty);
  read_all(r, copy);
  std::ostringstream s;
  s << "# foxhunt: the resolved configuration of this run (every default filled in)\n" << r.resolved() << "\n";
  return s.str();
}

}  // namespace foxhunt::actors
