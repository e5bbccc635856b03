// `foxhunt pretrain` configuration: defaults, the resolved TOML round trip, each malformed key's
// message, the files a config names, the CSV split, the shipped configs, and docs/configs.md's
// "## Pretrain config" listing exactly the keys the reader accepts.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "pretrain/config.hpp"
#include "pretrain/model_factory.hpp"
#include "support/paths.hpp"

using namespace foxhunt::pretrain;
namespace fs = std::filesystem;

namespace {

// The shipped configs (tests/support/paths.hpp) and the source tree above them (docs/).
fs::path configs() { return foxhunt::test::configs_dir(); }

constexpr const char* kMinimal =
    "[model]\nkind = \"lstm\"\n[data]\nsource = \"market\"\nmarket = \"m.toml\"\n[task]\nkind = \"returns\"\n";

std::string errors_of(const std::string& text) {
  try {
    parse_pretrain_config(text, "p.toml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("foxhunt_pretrain_cfg_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path write(const std::string& name, const std::string& text) const {
    const fs::path p = path_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

}  // namespace

TEST(PretrainConfigTest, MinimalConfigGivesDefaults) {
  const PretrainConfig c = parse_pretrain_config(kMinimal);
  EXPECT_EQ(c.model.kind, "lstm");
  EXPECT_EQ(c.model.hidden, 64);
  EXPECT_EQ(c.model.layers, 1);
  EXPECT_EQ(c.data.source, "market");
  EXPECT_EQ(c.data.market, "m.toml");
  EXPECT_EQ(c.data.window, 64);
  EXPECT_EQ(c.task.kind, "returns");
  EXPECT_EQ(c.task.loss, "mse");
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-3);
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.9, 0.999}));
  EXPECT_EQ(c.optim.decay, "cosine");
  EXPECT_EQ(c.optim.math, "fp32");
  EXPECT_EQ(c.run.seed, 1u);
  EXPECT_EQ(c.run.eval_every, 500);
}

TEST(PretrainConfigTest, ReadsValuesAndResolvedTomlRoundTrips) {
  const char* text = R"(
[model]
kind = "lstm"
hidden = 32
layers = 2
[data]
source = "csv"
path = ["a.csv", "b.csv"]
window = 16
horizon = 3
[data.split]
train = 0.6
validation = 0.2
test = 0.2
[task]
kind = "returns"
loss = "quantile"
quantiles = [0.05, 0.5, 0.95]
[optim]
lr = 0.0005
weight_decay = 0
betas = [0.8, 0.99]
warmup_steps = 10
decay = "linear"
batch = 64
steps = 100
math = "bf16"
[run]
name = "q-1"
seed = 9
eval_every = 25
)";
  const PretrainConfig c = parse_pretrain_config(text);
  EXPECT_EQ(c.model.layers, 2);
  EXPECT_EQ(c.data.path, (std::vector<std::string>{"a.csv", "b.csv"}));
  EXPECT_EQ(c.task.quantiles, (std::vector<double>{0.05, 0.5, 0.95}));
  EXPECT_DOUBLE_EQ(c.optim.weight_decay, 0.0);  // an integer where a number is expected is fine
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.8, 0.99}));
  EXPECT_EQ(c.optim.math, "bf16");
  const TaskShape shape = task_shape(c, 2, 1);
  EXPECT_EQ(shape.targets, 6);   // horizon 3 x 2 assets
  EXPECT_EQ(shape.outputs, 18);  // x 3 quantiles

  const std::string resolved = resolved_pretrain_toml(c);
  const PretrainConfig back = parse_pretrain_config(resolved, "resolved");
  EXPECT_EQ(resolved_pretrain_toml(back), resolved);
  EXPECT_EQ(back.task.quantiles, c.task.quantiles);
  EXPECT_EQ(back.data.path, c.data.path);
  EXPECT_DOUBLE_EQ(back.optim.lr, c.optim.lr);
  EXPECT_DOUBLE_EQ(back.data.split.validation, 0.2);
}

TEST(PretrainConfigTest, ResolvedTomlOfDefaultsRoundTrips) {
  for (const char* kind : {"returns", "volatility", "regime", "direction"}) {
    SCOPED_TRACE(kind);
    std::string text = kMinimal;
    text.replace(text.find("\"returns\""), 9, std::string("\"") + kind + "\"");
    const PretrainConfig c = parse_pretrain_config(text);
    const std::string resolved = resolved_pretrain_toml(c);
    EXPECT_EQ(resolved_pretrain_toml(parse_pretrain_config(resolved, "resolved")), resolved);
  }
}

// run.interpret is written for a TFT (either value) and kept through the resolved config.
TEST(PretrainConfigTest, InterpretRoundTripsForTft) {
  std::string text = kMinimal;
  text.replace(text.find("kind = \"lstm\""), 13, "kind = \"tft\"");
  for (const bool on : {false, true}) {
    const PretrainConfig c = parse_pretrain_config(text + (on ? "[run]\ninterpret = true\n" : ""));
    EXPECT_EQ(c.run.interpret, on);
    const std::string resolved = resolved_pretrain_toml(c);
    EXPECT_NE(resolved.find(on ? "interpret = true" : "interpret = false"), std::string::npos) << resolved;
    EXPECT_EQ(parse_pretrain_config(resolved, "resolved").run.interpret, on);
  }
  EXPECT_EQ(resolved_pretrain_toml(parse_pretrain_config(kMinimal)).find("interpret"), std::string::npos);
}

// Each malformed key gives a message naming it and what is allowed.
TEST(PretrainConfigTest, EachMalformedKeyIsNamed) {
  struct Case {
    std::string extra;  // appended to the minimal config (or replacing it: full)
    std::vector<std::string> expect;
    bool full = false;
  };
  const std::string market = "[data]\nsource = \"market\"\nmarket = \"m.toml\"\n";
  const std::string csv = "[data]\nsource = \"csv\"\npath = \"a.csv\"\n";
  const std::string model = "[model]\nkind = \"lstm\"\n";
  const std::string task = "[task]\nkind = \"returns\"\n";
  const std::vector<Case> cases = {
      {"[optim]\nlrr = 0.1\n", {"p.toml:9: optim.lrr: unknown key", "did you mean 'lr'"}},
      {"[optimm]\nlr = 0.1\n", {"[optimm]: unknown table", "did you mean 'optim'"}},
      {model + "hidden = 0\n" + market + task, {"model.hidden = 0: must be an integer in [1, 8192]"}, true},
      {"[model]\nkind = \"gru\"\n" + market + task, {"model.kind = \"gru\": must be one of \"lstm\""}, true},
      {model + "layers = 65\n" + market + task, {"model.layers = 65: must be an integer in [1, 64]"}, true},
      {model + "d_state = 16\n" + market + task, {"model.d_state: unknown key"}, true},
      {"[data]\nsource = \"market\"\nmarket = \"m.toml\"\nwindow = 64.0\n" + model + task,
       {"data.window = 64.0: must be an integer in [2, 4096]"}, true},
      {"[data]\nsource = \"parquet\"\n" + model + task, {"data.source = \"parquet\": must be one of \"market\" | \"csv\""},
       true},
      {"[data]\nsource = \"market\"\n" + model + task, {"data.market: missing in [data]"}, true},
      {"[data]\nsource = \"csv\"\n" + model + task, {"data.path: missing in [data]"}, true},
      {"[data]\nsource = \"market\"\nmarket = \"m.toml\"\npath = \"a.csv\"\n" + model + task,
       {"data.path = \"a.csv\": has no effect with data.source = \"market\""}, true},
      {"[data.split]\ntrain = 0.5\n", {"data.split.train = 0.5: has no effect with data.source = \"market\""}},
      {csv + model + task + "[data.split]\ntrain = 0.8\nvalidation = 0.3\n",
       {"data.split.train = 0.8, data.split.validation = 0.3: train + validation + test must be <= 1"}, true},
      {csv + model + task + "[data.split]\ntrain = 1.5\n", {"data.split.train = 1.5: must be a number in (0, 1)"}, true},
      {csv + model + task + "[data.split]\ntrain_end = 100\n",
       {"data.split.validation_end: missing in [data.split]"}, true},
      {csv + model + task + "[data.split]\ntrain_end = 100\nvalidation_end = 50\n",
       {"data.split.validation_end = 50, data.split.train_end = 100: must be > data.split.train_end"}, true},
      {csv + model + task + "[data.split]\ntrain_end = 100\nvalidation_end = 150\ntrain = 0.5\n",
       {"data.split.train = 0.5: has no effect with data.split.train_end = 100"}, true},
      {model + market, {"[task]: missing table"}, true},
      {model + market + "[task]\nloss = \"mse\"\n", {"task.kind: missing in [task]"}, true},
      {model + market + "[task]\nkind = \"price\"\n",
       {"task.kind = \"price\": must be one of \"returns\" | \"volatility\" | \"regime\" | \"direction\""}, true},
      {model + market + "[task]\nkind = \"returns\"\nloss = \"huber\"\n",
       {"task.loss = \"huber\": must be one of \"mse\" | \"quantile\""}, true},
      {model + market + "[task]\nkind = \"returns\"\nquantiles = [0.5]\n",
       {"task.quantiles = [0.5]: has no effect with task.loss = \"mse\""}, true},
      {model + market + "[task]\nkind = \"returns\"\nloss = \"quantile\"\nquantiles = [0.5, 0.1]\n",
       {"task.quantiles = [0.5, 0.1]: must be quantile levels in (0, 1), strictly increasing"}, true},
      {model + market + "[task]\nkind = \"returns\"\nloss = \"quantile\"\nquantiles = [0.5, 1.0]\n",
       {"task.quantiles = [0.5, 1.0]: must be quantile levels in (0, 1), strictly increasing"}, true},
      {model + market + "[task]\nkind = \"returns\"\nloss = \"quantile\"\nquantiles = []\n",
       {"task.quantiles = []: must be a list of 1 to 32 quantile levels"}, true},
      {model + market + "[task]\nkind = \"volatility\"\nloss = \"quantile\"\n",
       {"task.loss = \"quantile\", task.kind = \"volatility\": realized-volatility regression trains on the mean "
        "squared error"},
       true},
      {model + market + "[task]\nkind = \"regime\"\nloss = \"mse\"\n",
       {"task.loss = \"mse\": has no effect with task.kind = \"regime\""}, true},
      {model + csv + "[task]\nkind = \"regime\"\n",
       {"task.kind = \"regime\", data.source = \"csv\": regime labels exist only in simulated markets"}, true},
      {model + market + "[task]\nkind = \"regime\"\n" + "[data.split]\n", {}, true},  // an empty table is fine
      {model + market + "[task]\nkind = \"direction\"\n[run]\nbaseline_fit_samples = 10\n",
       {"run.baseline_fit_samples = 10: has no effect with task.kind = \"direction\""}, true},
      {"[optim]\nlr = 0\n", {"optim.lr = 0: must be a number in (0, 1]"}},
      {"[optim]\nbetas = [0.9]\n", {"optim.betas = [0.9]: must be a list of 2 numbers (got 1 values)"}},
      {"[optim]\nbetas = [0.9, 1.0]\n", {"optim.betas = [0.9, 1.0]: must be [beta1, beta2], each in [0, 1)"}},
      {"[optim]\ndecay = \"exp\"\n", {"optim.decay = \"exp\": must be one of \"cosine\" | \"linear\" | \"none\""}},
      {"[optim]\nmath = \"tf32\"\n", {"optim.math = \"tf32\": must be one of \"fp32\" | \"bf16\""}},
      {"[optim]\nbatch = 0\n", {"optim.batch = 0: must be an integer in [1, 65536]"}},
      {"[optim]\ngrad_clip = -1\n", {"optim.grad_clip = -1: must be a number in [0, 1e+06]"}},
      {"[optim]\nsteps = 10\nwarmup_steps = 20\n",
       {"optim.warmup_steps = 20, optim.steps = 10: the warm-up must fit in the run"}},
      {"[optim]\nsteps = 10\nwarmup_steps = 10\ndecay = \"linear\"\n",
       {"optim.decay = \"linear\": has no effect with optim.warmup_steps = 10"}},
      {"[run]\neval_every = 0\n", {"run.eval_every = 0: must be an integer in [1, 1099511627776]"}},
      {"[run]\nname = \"a/b\"\n", {"run.name = \"a/b\""}},
      {"[run]\nlevel = \"loud\"\n", {"run.level = \"loud\": must be one of"}},
      {"[run]\njsonl = 1\n", {"run.jsonl = 1"}},
      {model + market + task + "[run]\ninterpret = true\n",
       {"run.interpret = true, model.kind = \"lstm\": only the Temporal Fusion Transformer"}, true},
      {"[model]\nkind = \"tft\"\n" + market + task + "[run]\ninterpret = true\n", {}, true},
      {"[model]\nkind = \"tft\"\n" + market + task + "[run]\ninterpret = \"yes\"\n", {"run.interpret = \"yes\""},
       true},
  };
  for (const Case& c : cases) {
    const std::string text = c.full ? c.extra : std::string(kMinimal) + c.extra;
    SCOPED_TRACE(text);
    const std::string e = errors_of(text);
    if (c.expect.empty()) {
      EXPECT_EQ(e, "");
      continue;
    }
    ASSERT_NE(e, "") << "accepted";
    for (const auto& piece : c.expect) EXPECT_NE(e.find(piece), std::string::npos) << "missing '" << piece << "' in:\n" << e;
  }
}

TEST(PretrainConfigTest, AllProblemsOfAFileAtOnce) {
  const std::string e = errors_of(std::string(kMinimal) + "[optim]\nlr = 0\nbatch = 0\n[run]\nseed = -1\n");
  EXPECT_NE(e.find("3 problems"), std::string::npos) << e;
}

TEST(PretrainConfigTest, LoadResolvesTheMarketAgainstTheConfigFolder) {
  TempDir dir;
  const fs::path market = configs() / "markets" / "ou_mean_reversion.toml";
  const fs::path cfg = dir.write("sub/p.toml", "[model]\nkind = \"lstm\"\n[data]\nsource = \"market\"\nmarket = \"" +
                                                   market.string() + "\"\n[task]\nkind = \"returns\"\n");
  const PretrainConfig c = load_pretrain_config(cfg);
  EXPECT_EQ(fs::path(c.data.market), market.lexically_normal());
  EXPECT_EQ(pretrain_market(c).assets, 1);

  // Relative to the config's folder.
  fs::copy_file(market, dir.path() / "sub" / "m.toml");
  const PretrainConfig rel = load_pretrain_config(dir.write("sub/q.toml", kMinimal));
  EXPECT_EQ(fs::path(rel.data.market), (dir.path() / "sub" / "m.toml").lexically_normal());
}

TEST(PretrainConfigTest, LoadNamesAMissingOrUnsuitableMarket) {
  TempDir dir;
  auto load_error = [&](const std::string& text) {
    try {
      load_pretrain_config(dir.write("p.toml", text));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string e = load_error(kMinimal);
  EXPECT_NE(e.find("data.market = \"m.toml\": "), std::string::npos) << e;
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;

  const fs::path bars = configs() / "markets" / "example_bars.toml";
  e = load_error("[model]\nkind = \"lstm\"\n[data]\nsource = \"market\"\nmarket = \"" + bars.string() +
                 "\"\n[task]\nkind = \"returns\"\n");
  EXPECT_NE(e.find("is a replay market"), std::string::npos) << e;

  const fs::path ou = configs() / "markets" / "ou_mean_reversion.toml";
  e = load_error("[model]\nkind = \"lstm\"\n[data]\nsource = \"market\"\nmarket = \"" + ou.string() +
                 "\"\n[task]\nkind = \"regime\"\n");
  EXPECT_NE(e.find("regime classification needs a market with [process.regimes] of >= 2 regimes"), std::string::npos)
      << e;

  e = load_error("[model]\nkind = \"lstm\"\n[data]\nsource = \"csv\"\npath = \"nope.csv\"\n[task]\nkind = \"returns\"\n");
  EXPECT_NE(e.find("data.path"), std::string::npos) << e;
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
}

TEST(PretrainConfigTest, SplitFractionsAndBarIndices) {
  PretrainConfig c = parse_pretrain_config(
      "[model]\nkind = \"lstm\"\n[data]\nsource = \"csv\"\npath = \"a.csv\"\nwindow = 10\n[task]\nkind = \"returns\"\n");
  EXPECT_EQ(bars_per_window(c), 10 + 1 + 1);  // returns with horizon 1 (vol_horizon is not read)
  c.task.kind = "volatility";
  EXPECT_EQ(bars_per_window(c), 10 + 1 + 20);
  c.task.kind = "returns";
  BarSplit s = resolve_split(c, 1000);
  EXPECT_EQ(s.train_end, 700);
  EXPECT_EQ(s.validation_end, 850);
  EXPECT_EQ(s.bars, 1000);
  c.data.split.train_end = 500;
  c.data.split.validation_end = 900;
  s = resolve_split(c, 1000);
  EXPECT_EQ(s.train_end, 500);
  EXPECT_EQ(s.validation_end, 900);
  c.data.split.validation_end = 990;  // a test part of 10 bars holds no window
  try {
    resolve_split(c, 1000);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the test part holds bars [990, 1000) of 1000"), std::string::npos) << e.what();
  }
  c.data.split.validation_end = 1100;
  EXPECT_THROW(resolve_split(c, 1000), std::invalid_argument);
}

TEST(PretrainConfigTest, TaskShapes) {
  PretrainConfig c = parse_pretrain_config(kMinimal);
  c.data.horizon = 2;
  EXPECT_EQ(task_shape(c, 3, 1).outputs, 6);
  c.task.kind = "volatility";
  EXPECT_EQ(task_shape(c, 3, 1).outputs, 3);
  c.task.kind = "regime";
  EXPECT_EQ(task_shape(c, 3, 4).outputs, 4);
  EXPECT_EQ(task_shape(c, 3, 4).classes, 4);
  c.task.kind = "direction";
  EXPECT_EQ(task_shape(c, 3, 4).outputs, 3);
}

TEST(PretrainConfigTest, ModelFactoryKnowsLstmAndNamesUnknownKinds) {
  const std::vector<std::string> kinds = model_kinds();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "lstm"), kinds.end());
  ModelSpec spec;
  spec.kind = "transformer";
  spec.in = 1;
  try {
    make_model(spec);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.kind = \"transformer\": unknown family (one of \"lstm\""),
              std::string::npos)
        << e.what();
  }
}

TEST(PretrainConfigTest, Mamba2StateTooLargeForTheSsdTilesIsNamed) {
  ModelSpec spec;
  spec.kind = "mamba2";
  spec.in = 1;
  spec.hidden = 128;
  spec.sequence_length = 64;
  spec.family.integers = {{"d_state", 256}, {"head_dim", 128}, {"expand", 2}, {"conv_kernel", 4}, {"chunk", 64}};
  try {
    make_model(spec);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.head_dim x model.d_state = 32768 must be <= 16384"), std::string::npos)
        << e.what();
  }
}

TEST(PretrainConfigTest, ShippedConfigsLoad) {
  const fs::path dir = configs() / "pretrain";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".toml") continue;
    SCOPED_TRACE(e.path().string());
    EXPECT_NO_THROW(load_pretrain_config(e.path()));
    ++n;
  }
  EXPECT_GE(n, 2);
}

// docs/configs.md's "## Pretrain config" part: each "### [table]" heading, then its rows "| `key` |".
TEST(PretrainConfigTest, DocsListEveryKey) {
  const fs::path doc = configs().parent_path() / "docs" / "configs.md";
  if (!fs::exists(doc)) GTEST_SKIP() << doc << " is not here (a package without the source tree)";
  std::ifstream in(doc);
  ASSERT_TRUE(in.good()) << doc << " cannot be read";
  std::set<std::string> page;
  bool inside = false;
  std::string table;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) inside = line == "## Pretrain config";
    if (!inside) continue;
    if (line.rfind("### [", 0) == 0) table = line.substr(5, line.find(']') - 5);
    if (line.rfind("| `", 0) == 0 && !table.empty()) page.insert(table + "." + line.substr(3, line.find('`', 3) - 3));
  }
  const std::vector<std::string> keys = pretrain_config_keys();
  const std::set<std::string> accepted(keys.begin(), keys.end());
  for (const auto& k : accepted) EXPECT_TRUE(page.count(k)) << k << ": accepted by the reader, missing from docs/configs.md";
  for (const auto& k : page) EXPECT_TRUE(accepted.count(k)) << k << ": in docs/configs.md, not accepted by the reader";
  EXPECT_GT(page.size(), 30u);
}
