// Bad input to the `foxhunt` command line, tried as a new user would, through the real command
// code (apps::run_cli): each refusal names the flag, key or path, and leaves nothing on disk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "actors/run_config.hpp"
#include "apps/cli.hpp"
#include "gpu/device.hpp"
#include "tests/support/host_checkpoint.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/staged_configs.hpp"

namespace fs = std::filesystem;
using foxhunt::apps::run_cli;

namespace {

struct Result {
  int code = 0;
  std::string out, err;
};

Result cli(std::vector<std::string> args) {
  args.insert(args.begin(), "foxhunt");
  std::ostringstream out, err;
  Result r;
  r.code = run_cli(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// Every table of a run, small enough that a CPU test can size it.
std::string config_text(const std::string& hidden = "[16, 16]") {
  return "[run]\nname = \"cli_test\"\ntotal_env_steps = 20000\n"
         "[env]\nkind = \"cartpole\"\nnum_envs = 4\n"
         "[replay]\ncapacity = 1000\nbatch_size = 32\n"
         "[learner]\nkind = \"dqn\"\nhidden = " +
         hidden +
         "\n"
         "[pipeline]\nlearning_starts = 100\n"
         "[checkpoint]\nevery_env_steps = 0\n"
         "[logging]\nlevel = \"info\"\n";
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/foxhunt_cli_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    config_ = write("run.toml", config_text());
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path write(const std::string& name, const std::string& text) {
    fs::create_directories((root_ / name).parent_path());
    std::ofstream(root_ / name) << text;
    return root_ / name;
  }
  // The names under root_, to assert that a refusal created nothing.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(root_)) names.push_back(e.path().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  // A run directory holding one checkpoint that fits config_.
  fs::path previous_run(const std::string& name) {
    const fs::path run = root_ / name;
    foxhunt::test::write_host_checkpoint(run / "checkpoints" / "step_000000001000",
                                         foxhunt::actors::load_run_config(config_));
    std::ofstream(run / "checkpoints" / "latest") << "step_000000001000\n";
    std::ofstream(run / "config.resolved.toml") << config_text();
    return run;
  }

  fs::path root_, config_;
};

TEST_F(Cli, MisspelledCommandGetsASuggestion) {
  const Result r = cli({"trian", "--config", config_.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("'trian' is not a command"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean 'train'?"), std::string::npos) << r.err;
  EXPECT_NE(cli({"chek"}).err.find("did you mean 'check'?"), std::string::npos);
  EXPECT_EQ(cli({"frobnicate"}).err.find("did you mean"), std::string::npos);  // nothing close: no guess
}

TEST_F(Cli, MisspelledFlagGetsASuggestion) {
  const Result r = cli({"check", "--confg", config_.string(), "--config", config_.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--confg"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean --config?"), std::string::npos) << r.err;
  // The only --config misspelled: CLI11 reports the required flag missing; the suggestion stays.
  const Result only = cli({"train", "--confg", config_.string()});
  EXPECT_EQ(only.code, 2);
  EXPECT_NE(only.err.find("--config is required"), std::string::npos) << only.err;
  EXPECT_NE(only.err.find("unknown flag --confg; did you mean --config?"), std::string::npos) << only.err;
}

TEST_F(Cli, EvalSeedMustBeANonNegativeInteger) {
  for (const char* bad : {"-1", "1.5", "seven", "18446744073709551616"}) {
    const Result r = cli({"eval", "--checkpoint", root_.string(), "--seed", bad});
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("--seed"), std::string::npos) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("[0, 18446744073709551615]"), std::string::npos) << bad << ": " << r.err;
  }
}

TEST_F(Cli, EvalEpisodesInRange) {
  for (const char* bad : {"0", "-3", "1048577"}) {
    const Result r = cli({"eval", "--checkpoint", root_.string(), "--episodes", bad});
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("--episodes"), std::string::npos) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("1048576"), std::string::npos) << bad << ": " << r.err;
  }
  const Result r = cli({"eval", "--checkpoint", root_.string(), "--episodes", "2.5"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--episodes"), std::string::npos) << r.err;
}

TEST_F(Cli, GpusIsRefusedWithRankFlagsAndAnUnfitConfig) {
  const fs::path run = root_ / "gpus_run";
  Result r = cli({"train", "--config", config_.string(), "--gpus", "2", "--rank", "1", "--run-dir", run.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--gpus runs every rank in this process"), std::string::npos) << r.err;
  r = cli({"train", "--config", config_.string(), "--gpus", "0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--gpus"), std::string::npos) << r.err;
  // DQN over several ranks needs the deterministic mode (every replica runs the same updates)
  r = cli({"train", "--config", config_.string(), "--gpus", "2", "--run-dir", run.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--gpus 2: a DQN run over several ranks needs run.deterministic = true"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(run));
}

TEST_F(Cli, ExtraArgumentsAreRefused) {
  const Result r = cli({"devices", "now"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("now"), std::string::npos) << r.err;
}

TEST_F(Cli, ConfigThatDoesNotExist) {
  for (const char* cmd : {"train", "check"}) {
    const Result r = cli({cmd, "--config", (root_ / "nope.toml").string()});
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--config"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("nope.toml"), std::string::npos) << r.err;
  }
  const Result dir = cli({"check", "--config", root_.string()});
  EXPECT_EQ(dir.code, 2);
  EXPECT_NE(dir.err.find("--config"), std::string::npos) << dir.err;
}

TEST_F(Cli, CheckPrintsTheResolvedConfigAndTheMemoryEstimate) {
  const Result r = cli({"check", "--config", config_.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("[replay]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("capacity = 1000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run.device = 0"), std::string::npos) << r.out;
  for (const char* row : {"replay", "learner", "collector", "total"})
    EXPECT_NE(r.out.find(std::string("  ") + row), std::string::npos) << row << "\n" << r.out;
}

// Placement "split" with the collector on another device: the estimate's share of each device.
TEST_F(Cli, CheckPrintsEachDevicesShareOfASplitRun) {
  const fs::path split =
      write("split.toml", config_text() + "[distributed]\nplacement = \"split\"\ncollector_device = 1\n");
  const Result r = cli({"check", "--config", split.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("on device 0 (replay, learner): "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("on device 1 (collector): "), std::string::npos) << r.out;
  const Result one = cli({"check", "--config", config_.string()});
  EXPECT_EQ(one.out.find("on device"), std::string::npos) << one.out;
}

// Every run config the project ships passes `foxhunt check` as shipped (configs/markets/ holds
// market files, which a run config names; the [features] ones beside a stand-in of the pretrain
// run they name: tests/support/staged_configs.hpp).
TEST_F(Cli, CheckAcceptsEveryShippedConfig) {
  ASSERT_TRUE(fs::is_directory(foxhunt::test::configs_dir())) << foxhunt::test::configs_dir();
  const fs::path dir = foxhunt::test::stage_shipped_configs(root_ / "shipped");
  int checked = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".toml") continue;
    const Result r = cli({"check", "--config", e.path().string()});
    EXPECT_EQ(r.code, 0) << e.path() << "\n" << r.err;
    // The memory estimate has a line for a [features] extractor, and none without one.
    const bool features = e.path().filename().string().find("_features_") != std::string::npos;
    EXPECT_EQ(r.out.find("\n  features ") != std::string::npos, features) << e.path() << "\n" << r.out;
    ++checked;
  }
  EXPECT_GE(checked, 6) << "run configs in " << dir;
}

// A pretrain config gets `foxhunt pretrain`'s checks: every shipped one passes, a bad key and a bad
// value are named with their lines.
TEST_F(Cli, CheckValidatesPretrainConfigs) {
  const fs::path dir = foxhunt::test::configs_dir() / "pretrain";
  int checked = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".toml") continue;
    const Result r = cli({"check", "--config", e.path().string()});
    EXPECT_EQ(r.code, 0) << e.path() << "\n" << r.err;
    EXPECT_NE(r.out.find("a pretrain config"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[optim]"), std::string::npos) << r.out;
    ++checked;
  }
  EXPECT_GE(checked, 8) << "pretrain configs in " << dir;
  const fs::path bad = write("bad_pretrain.toml",
                             "[model]\nkind = \"lstm\"\nwidth = 3\n[data]\nsource = \"market\"\nmarket = \"" +
                                 (foxhunt::test::configs_dir() / "markets" / "ou_mean_reversion.toml").string() +
                                 "\"\n[task]\nkind = \"returns\"\n[optim]\nlr = 7\n");
  const Result r = cli({"check", "--config", bad.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad_pretrain.toml:3: model.width: unknown key"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("optim.lr = 7"), std::string::npos) << r.err;
}

TEST_F(Cli, CheckListsTheConfigsErrors) {
  const fs::path bad = write("bad.toml", config_text() + "[replay]\n");  // a table defined twice
  const fs::path typo = write("typo.toml", "[run]\ntotal_env_stepz = 5\n[env]\nkind = \"cartpole\"\n");
  for (const fs::path& f : {bad, typo}) {
    const Result r = cli({"check", "--config", f.string()});
    EXPECT_EQ(r.code, 2) << f;
    EXPECT_NE(r.err.find(f.filename().string()), std::string::npos) << r.err;
  }
  EXPECT_NE(cli({"check", "--config", typo.string()}).err.find("total_env_stepz"), std::string::npos);
}

// A replay market whose CSV has a bad row: `check` and `train` both refuse it naming the run
// config's env.market, the market file's replay.files line and the CSV's own file and line, and
// train creates no run directory.
TEST_F(Cli, MalformedCsvIsReportedWithItsFileAndLine) {
  std::string csv = "date,open,high,low,close,volume\n";  // bar 40 on line 42
  for (int k = 0; k < 60; ++k)
    csv += std::to_string(1000 + k) + "," + (k == 40 ? "1,2,1,oops,1" : "1,2,1,1.5,1") + "\n";
  write("data.csv", csv);
  const fs::path market = write("m.toml",
                                "[market]\nwindow = 4\nepisode_length = 10\n[process]\nkind = \"replay\"\n"
                                "[replay]\nfiles = \"data.csv\"\n");
  const fs::path run = write("replay.toml",
                             "[run]\nname = \"r\"\n[env]\nkind = \"market\"\nmarket = \"m.toml\"\n"
                             "[learner]\nkind = \"dqn\"\n");
  const auto before = listing();
  for (const char* cmd : {"check", "train"}) {
    SCOPED_TRACE(cmd);
    std::vector<std::string> args = {cmd, "--config", run.string()};
    if (std::string(cmd) == "train") args.insert(args.end(), {"--run-dir", (root_ / "out").string()});
    const Result r = cli(args);
    EXPECT_EQ(r.code, 2) << r.err;
    for (const std::string& part : {run.string() + ":5: env.market", market.string() + ":7: replay.files",
                                    (root_ / "data.csv").string() + ":42: non-numeric field in column 'close': 'oops'"})
      EXPECT_NE(r.err.find(part), std::string::npos) << "no \"" << part << "\" in:\n" << r.err;
  }
  EXPECT_EQ(listing(), before) << "a refused train created files";
}

TEST_F(Cli, RunDirThatIsAFile) {
  const fs::path file = write("taken", "not a directory");
  const auto before = listing();
  const Result r = cli({"train", "--config", config_.string(), "--run-dir", file.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--run-dir " + file.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("existing file"), std::string::npos) << r.err;
  EXPECT_EQ(listing(), before);
}

TEST_F(Cli, RunDirThatCannotBeCreated) {
  const fs::path file = write("taken", "not a directory");
  const auto before = listing();
  const fs::path under = file / "run";
  const Result r = cli({"train", "--config", config_.string(), "--run-dir", under.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--run-dir " + under.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cannot be created"), std::string::npos) << r.err;
  EXPECT_EQ(listing(), before);
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(root_ / "locked");
    fs::permissions(root_ / "locked", fs::perms::owner_read | fs::perms::owner_exec);
    const auto locked_before = listing();
    const Result p = cli({"train", "--config", config_.string(), "--run-dir", (root_ / "locked" / "run").string()});
    EXPECT_EQ(p.code, 2);
    EXPECT_NE(p.err.find("no write permission"), std::string::npos) << p.err;
    EXPECT_EQ(listing(), locked_before);
    fs::permissions(root_ / "locked", fs::perms::owner_all);
  }
}

TEST_F(Cli, NonEmptyRunDirIsRefusedWithTheWayOut) {
  const fs::path run = previous_run("old");
  const auto before = listing();
  const Result r = cli({"train", "--config", config_.string(), "--run-dir", run.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--run-dir " + run.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("checkpoints/ (1 checkpoint)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--resume " + run.string() + " --run-dir NEW"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--overwrite"), std::string::npos) << r.err;
  EXPECT_EQ(listing(), before);
}

TEST_F(Cli, ResumeIntoItsOwnRunDirIsRefused) {
  const fs::path run = previous_run("old");
  const auto before = listing();
  for (bool overwrite : {false, true}) {
    // With --overwrite, the same directory spelled "X/": still the checkpoint's own run directory.
    std::vector<std::string> args = {"train",
                                     "--config",
                                     config_.string(),
                                     "--resume",
                                     run.string(),
                                     "--run-dir",
                                     run.string() + (overwrite ? "/" : "")};
    if (overwrite) args.push_back("--overwrite");  // would delete the checkpoint it reads
    const Result r = cli(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--run-dir " + run.string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("a resume writes into a new run directory"), std::string::npos) << r.err;
    EXPECT_EQ(listing(), before);
  }
}

TEST_F(Cli, CorruptOrMismatchedResumeCreatesNothing) {
  const fs::path run = previous_run("old");
  const fs::path ckpt = run / "checkpoints" / "step_000000001000";
  const fs::path fresh = root_ / "fresh";
  // A config whose network differs from the checkpoint's: every mismatch named with both shapes.
  const fs::path wider = write("wider.toml", config_text("[32, 16]"));
  auto before = listing();
  Result r = cli({"train", "--config", wider.string(), "--resume", run.string(), "--run-dir", fresh.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--resume " + ckpt.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find((ckpt / "learner.online.safetensors").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tensor 'trunk.0.weight' has shape (16, 4), the config implies (32, 4)"), std::string::npos)
      << r.err;
  EXPECT_EQ(listing(), before);
  EXPECT_FALSE(fs::exists(fresh));
  // The same through `foxhunt check --resume`.
  r = cli({"check", "--config", wider.string(), "--resume", run.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("trunk.0.weight"), std::string::npos) << r.err;

  // Corrupt files: a truncated safetensors, a short state, unparsable counters.
  std::ofstream(ckpt / "learner.target.safetensors") << "garbage";
  std::ofstream(ckpt / "learner.state.bin") << "x";
  std::ofstream(ckpt / "counters.json") << "{\"env_steps\": -5";
  before = listing();
  r = cli({"train", "--config", config_.string(), "--resume", ckpt.string(), "--run-dir", fresh.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find((ckpt / "counters.json").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find((ckpt / "learner.target.safetensors").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find((ckpt / "learner.state.bin").string() + ": 1 bytes, expected"), std::string::npos) << r.err;
  EXPECT_EQ(listing(), before);
}

TEST_F(Cli, DanglingLatestIsReportedAsSuch) {
  const fs::path run = previous_run("old");
  fs::remove_all(run / "checkpoints" / "step_000000001000");
  const auto before = listing();
  for (const char* cmd : {"train", "check"}) {
    const Result r = cli({cmd, "--config", config_.string(), "--resume", run.string()});
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find((run / "checkpoints" / "latest").string() + " names step_000000001000, which does not exist"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(listing(), before);
  }
  // As a symlink to a removed directory.
  fs::remove(run / "checkpoints" / "latest");
  fs::create_directory_symlink("step_000000001000", run / "checkpoints" / "latest");
  const Result r = cli({"check", "--config", config_.string(), "--resume", run.string()});
  EXPECT_NE(r.err.find("names step_000000001000, which does not exist"), std::string::npos) << r.err;
}

TEST_F(Cli, CheckAcceptsAFittingResume) {
  const fs::path run = previous_run("old");
  const Result r = cli({"check", "--config", config_.string(), "--resume", run.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ok (env_steps 1000, updates 10)"), std::string::npos) << r.out;
}

// Without a device every host check passes first and the refusal names the device; with
// --overwrite the old run is still there (it is replaced only once the run can start).
TEST_F(Cli, NoDeviceIsReportedAfterTheHostChecksAndWritesNothing) {
  if (foxhunt::gpu::device_count() > 0) GTEST_SKIP() << "a CUDA device is present: train would run";
  const fs::path run = previous_run("old");
  const auto before = listing();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"train", "--config", config_.string(), "--run-dir", (root_ / "fresh").string()},
        std::vector<std::string>{"train", "--config", config_.string(), "--run-dir", run.string(), "--overwrite"},
        std::vector<std::string>{"train", "--config", config_.string(), "--resume", run.string(), "--run-dir",
                                 (root_ / "fresh").string()}}) {
    const Result r = cli(args);
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("needs a CUDA device"), std::string::npos) << r.err;
    EXPECT_EQ(listing(), before);
  }
}

}  // namespace
