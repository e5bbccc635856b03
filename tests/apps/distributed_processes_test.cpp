// The rendezvous of a data-parallel run between real processes over loopback (caf::io): the
// `foxhunt` binary in its CPU-only mode (`train --rendezvous-only`: config hash, build and world
// checks and the NCCL unique id exchange, then watching the other ranks; no device). Two ranks join
// and finish; a different config hash or world size is refused with a clear error; a rank with no
// coordinator gives up after the timeout; a rank killed mid-run ends the other within the bound
// with exit code 3 naming it; `foxhunt launch` supervises its ranks and, when one is killed, ends
// the rest and names the rank.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

const char* kBinary = FOXHUNT_BINARY;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A child process with its stdout and stderr in files.
struct Proc {
  pid_t pid = -1;
  fs::path out, err;
  std::optional<int> status;

  Proc(const std::vector<std::string>& args, const fs::path& dir, const std::string& name)
      : out(dir / (name + ".out")), err(dir / (name + ".err")) {
    std::vector<std::string> argv{kBinary};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& s : argv) cargv.push_back(s.data());
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = posix_spawn(&pid, kBinary, &fa, nullptr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(rc, 0) << "cannot start " << kBinary;
  }
  ~Proc() {
    if (pid > 0 && !status) {
      ::kill(pid, SIGKILL);
      int st = 0;
      ::waitpid(pid, &st, 0);
    }
  }
  // The exit status within `limit`, or nullopt.
  std::optional<int> wait(std::chrono::milliseconds limit) {
    const auto until = clock_type::now() + limit;
    while (!status) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        status = st;
        break;
      }
      if (clock_type::now() > until) break;
      std::this_thread::sleep_for(10ms);
    }
    return status;
  }
  int exit_code(std::chrono::milliseconds limit = 30s) {
    const auto st = wait(limit);
    if (!st) return -1;
    return WIFEXITED(*st) ? WEXITSTATUS(*st) : 128 + WTERMSIG(*st);
  }
  std::string stdout_text() const { return read_file(out); }
  std::string stderr_text() const { return read_file(err); }
  bool printed(const std::string& what, std::chrono::milliseconds limit) const {
    const auto until = clock_type::now() + limit;
    while (clock_type::now() < until) {
      if (stdout_text().find(what) != std::string::npos) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
};

class DistributedProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("foxhunt_dist_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    port_ = free_port();
    config_ = write_config("a.toml", 0.001);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write_config(const std::string& name, double lr, std::int64_t timeout_ms = 3000) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << "[run]\ndeterministic = true\ntotal_env_steps = 20000\n[env]\nkind = \"cartpole\"\n"
                     << "num_envs = 8\n[learner]\nkind = \"dqn\"\nhidden = [16]\nlr = " << lr
                     << "\n[distributed]\nworld = 2\ntimeout_ms = " << timeout_ms << "\n";
    return p;
  }
  std::vector<std::string> rank_args(int rank, const fs::path& config, int world = 2, std::int64_t hold_ms = 1500) {
    return {"train", "--config", config.string(), "--rank", std::to_string(rank), "--world", std::to_string(world),
            "--coordinator", "127.0.0.1:" + std::to_string(port_), "--rendezvous-only", "--hold-ms",
            std::to_string(hold_ms)};
  }

  fs::path dir_, config_;
  int port_ = 0;
};

TEST_F(DistributedProcesses, TwoRanksJoinWithTheSameConfigHashAndFinish) {
  Proc r1(rank_args(1, config_), dir_, "r1");  // before rank 0: it retries until rank 0 listens
  std::this_thread::sleep_for(200ms);
  Proc r0(rank_args(0, config_), dir_, "r0");
  EXPECT_EQ(r0.exit_code(), 0) << r0.stderr_text();
  EXPECT_EQ(r1.exit_code(), 0) << r1.stderr_text();
  const std::string o0 = r0.stdout_text(), o1 = r1.stdout_text();
  EXPECT_NE(o0.find("rank 0 of 2 joined"), std::string::npos) << o0;
  EXPECT_NE(o1.find("rank 1 of 2 joined"), std::string::npos) << o1;
  const auto hash = [](const std::string& s) { return s.substr(s.find("(config "), 26); };
  EXPECT_EQ(hash(o0), hash(o1));
}

TEST_F(DistributedProcesses, RefusesADifferentConfigHash) {
  const fs::path other = write_config("b.toml", 0.002);
  Proc r0(rank_args(0, config_), dir_, "r0");
  Proc r1(rank_args(1, other), dir_, "r1");
  EXPECT_EQ(r1.exit_code(), 4);
  const std::string e1 = r1.stderr_text();
  EXPECT_NE(e1.find("refused by rank 0: config hash"), std::string::npos) << e1;
  // Rank 0 waits for a valid rank 1 until its timeout (3 s), then gives up naming the cause.
  EXPECT_EQ(r0.exit_code(20s), 4);
  EXPECT_NE(r0.stderr_text().find("not every rank joined"), std::string::npos) << r0.stderr_text();
}

TEST_F(DistributedProcesses, RefusesADifferentWorldSize) {
  Proc r0(rank_args(0, config_), dir_, "r0");
  Proc r1(rank_args(1, config_, 3), dir_, "r1");
  EXPECT_EQ(r1.exit_code(), 4);
  EXPECT_NE(r1.stderr_text().find("world size 3 differs from rank 0's 2"), std::string::npos) << r1.stderr_text();
  EXPECT_EQ(r0.exit_code(20s), 4);
}

TEST_F(DistributedProcesses, ARankWithoutCoordinatorGivesUpAfterTheTimeout) {
  const fs::path quick = write_config("quick.toml", 0.001, 1000);
  const auto t0 = clock_type::now();
  Proc r1(rank_args(1, quick), dir_, "r1");
  EXPECT_EQ(r1.exit_code(), 4);
  EXPECT_LT(clock_type::now() - t0, 15s);
  EXPECT_NE(r1.stderr_text().find("cannot reach rank 0's coordinator"), std::string::npos) << r1.stderr_text();
}

TEST_F(DistributedProcesses, AKilledRankEndsTheOtherWithinTheBound) {
  for (const int victim : {1, 0}) {
    SCOPED_TRACE("killed rank " + std::to_string(victim));
    port_ = free_port();
    Proc r0(rank_args(0, config_, 2, 120'000), dir_, "r0");
    Proc r1(rank_args(1, config_, 2, 120'000), dir_, "r1");
    ASSERT_TRUE(r0.printed("joined", 20s)) << r0.stderr_text();
    ASSERT_TRUE(r1.printed("joined", 20s)) << r1.stderr_text();
    Proc& dead = victim == 0 ? r0 : r1;
    Proc& survivor = victim == 0 ? r1 : r0;
    ::kill(dead.pid, SIGKILL);
    EXPECT_EQ(dead.exit_code(), 128 + SIGKILL);
    const auto t0 = clock_type::now();
    EXPECT_EQ(survivor.exit_code(10s), 3) << "the survivor did not end within 10 s";
    EXPECT_LT(clock_type::now() - t0, 10s);
    const std::string e = survivor.stderr_text();
    EXPECT_NE(e.find(victim == 0 ? "rank 0 (the coordinator) is gone" : "rank 1 is gone"), std::string::npos) << e;
  }
}

TEST_F(DistributedProcesses, AFrozenRankEndsTheOtherAfterTheTimeout) {
  const fs::path quick = write_config("quick.toml", 0.001, 2000);  // heartbeats every 200 ms
  Proc r0(rank_args(0, quick, 2, 120'000), dir_, "r0");
  Proc r1(rank_args(1, quick, 2, 120'000), dir_, "r1");
  ASSERT_TRUE(r0.printed("joined", 20s)) << r0.stderr_text();
  ASSERT_TRUE(r1.printed("joined", 20s)) << r1.stderr_text();
  ::kill(r1.pid, SIGSTOP);  // alive, connection open, silent
  const auto t0 = clock_type::now();
  EXPECT_EQ(r0.exit_code(15s), 3) << "rank 0 did not end within 15 s";
  EXPECT_LT(clock_type::now() - t0, 15s);
  EXPECT_NE(r0.stderr_text().find("rank 1 is gone"), std::string::npos) << r0.stderr_text();
  ::kill(r1.pid, SIGKILL);
  ::kill(r1.pid, SIGCONT);
}

// A stop is a CAF message: SIGTERM to rank 1 alone reaches rank 0 through its coordinator, and
// both end cleanly (exit 0) and write their final state (the fake run's final.json).
TEST_F(DistributedProcesses, AStopSentToOneRankStopsEveryRank) {
  const fs::path run = dir_ / "run";
  auto args = [&](int rank) {
    auto v = rank_args(rank, config_, 2, 120'000);
    v.insert(v.end(), {"--run-dir", run.string()});
    return v;
  };
  Proc r0(args(0), dir_, "r0");
  Proc r1(args(1), dir_, "r1");
  ASSERT_TRUE(r0.printed("joined", 20s)) << r0.stderr_text();
  ASSERT_TRUE(r1.printed("joined", 20s)) << r1.stderr_text();
  ::kill(r1.pid, SIGTERM);
  const auto t0 = clock_type::now();
  EXPECT_EQ(r1.exit_code(10s), 0) << r1.stderr_text();
  EXPECT_EQ(r0.exit_code(10s), 0) << "rank 0 did not stop: " << r0.stderr_text();
  EXPECT_LT(clock_type::now() - t0, 10s);
  EXPECT_NE(r0.stdout_text().find("rank 0 of 2: stopped (rank 1 received SIGTERM)"), std::string::npos)
      << r0.stdout_text();
  const std::string f0 = read_file(run / "final.json"), f1 = read_file(fs::path(run.string() + ".rank1") / "final.json");
  EXPECT_NE(f0.find("\"rank\": 0"), std::string::npos) << f0;
  EXPECT_NE(f0.find("\"stopped_by\": 1"), std::string::npos) << f0;
  EXPECT_NE(f1.find("\"stopped_by\": 1"), std::string::npos) << f1;
}

// Every rank's metrics travel to rank 0 as CAF messages; rank 0 writes their aggregate under
// world/ into its own metrics.jsonl: the fake run's ranks report episode return rank + 1, so the
// mean is 1.5 only with rank 1's messages (1 alone), and the env steps sum both ranks'.
TEST_F(DistributedProcesses, RankZeroAggregatesEveryRanksMetrics) {
  const fs::path run = dir_ / "run";
  auto args = [&](int rank) {
    auto v = rank_args(rank, config_, 2, 1500);
    v.insert(v.end(), {"--run-dir", run.string()});
    return v;
  };
  Proc r0(args(0), dir_, "r0");
  Proc r1(args(1), dir_, "r1");
  EXPECT_EQ(r0.exit_code(), 0) << r0.stderr_text();
  EXPECT_EQ(r1.exit_code(), 0) << r1.stderr_text();
  std::ifstream in(run / "metrics.jsonl");
  int both = 0, lines = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines;
    if (line.find("\"world/ranks\":2.0") == std::string::npos) continue;
    ++both;
    EXPECT_NE(line.find("\"world/episode_return\":1.5"), std::string::npos) << line;
    // Rank 0's own steps are the line's step; the world's are more (rank 1's added).
    const auto num = [&](const std::string& key) {
      const auto at = line.find("\"" + key + "\":");
      return at == std::string::npos ? -1.0 : std::stod(line.substr(at + key.size() + 3));
    };
    EXPECT_GT(num("world/env_steps"), num("step")) << line;
    EXPECT_GT(num("world/env_steps_per_s"), 0.0) << line;
  }
  EXPECT_GT(lines, 5);
  EXPECT_GT(both, 0) << "no line aggregated both ranks";
  EXPECT_FALSE(fs::exists(fs::path(run.string() + ".rank1") / "metrics.jsonl")) << "only rank 0 writes the world";
}

std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}
std::string cmdline_of(pid_t pid) {
  std::string s = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  std::replace(s.begin(), s.end(), '\0', ' ');
  return s;
}

TEST_F(DistributedProcesses, LaunchStartsAndSupervisesItsRanks) {
  {
    Proc launch({"launch", "--gpus", "2", "--config", config_.string(), "--rendezvous-only", "--hold-ms", "500"},
                dir_, "launch_ok");
    EXPECT_EQ(launch.exit_code(), 0) << launch.stderr_text();
    EXPECT_NE(launch.stdout_text().find("all 2 ranks finished"), std::string::npos) << launch.stdout_text();
  }
  Proc launch({"launch", "--gpus", "2", "--config", config_.string(), "--rendezvous-only", "--hold-ms", "120000"},
              dir_, "launch_kill");
  std::vector<pid_t> kids;
  const auto until = clock_type::now() + 20s;
  while (clock_type::now() < until && kids.size() < 2) {
    kids = children_of(launch.pid);
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(kids.size(), 2u) << "/proc/<pid>/task/<pid>/children lists the ranks";
  std::this_thread::sleep_for(1500ms);  // joined
  pid_t rank1 = -1;
  for (const pid_t k : kids)
    if (cmdline_of(k).find("--rank 1 ") != std::string::npos) rank1 = k;
  ASSERT_GT(rank1, 0);
  ::kill(rank1, SIGKILL);
  const auto t0 = clock_type::now();
  EXPECT_EQ(launch.exit_code(15s), 128 + SIGKILL);
  EXPECT_LT(clock_type::now() - t0, 15s);
  const std::string e = launch.stderr_text();
  EXPECT_NE(e.find("rank 1 ended: killed by signal"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 0: exit code 3"), std::string::npos) << e;  // rank 0 ended itself
  for (const pid_t k : kids) EXPECT_NE(::kill(k, 0), 0) << "a rank was left behind";
}

}  // namespace

TEST_F(DistributedProcesses, LaunchRefusesSplitCollectorsOnDevicesTheHostLacks) {
  // Placement "split": rank r's collector on collector_device + r; devices 64 and 65 exist nowhere.
  const fs::path p = dir_ / "split.toml";
  std::ofstream(p) << "[run]\ndeterministic = true\ntotal_env_steps = 20000\n[env]\nkind = \"cartpole\"\n"
                   << "num_envs = 8\n[learner]\nkind = \"dqn\"\nhidden = [16]\n"
                   << "[distributed]\nworld = 2\nplacement = \"split\"\ncollector_device = 64\n";
  Proc launch({"launch", "--gpus", "2", "--config", p.string()}, dir_, "launch_split");
  EXPECT_EQ(launch.exit_code(), 2) << launch.stderr_text();
  const std::string e = launch.stderr_text();
  EXPECT_NE(e.find("distributed.collector_device = 64"), std::string::npos) << e;
  EXPECT_NE(e.find("64..65"), std::string::npos) << e;
}
