// `foxhunt launch --gpus N --config FILE [--run-dir DIR] [--port P]`: starts ranks 0..N-1 of a
// data-parallel run on this host (each `foxhunt train --rank r --world N --device r --coordinator
// 127.0.0.1:P`, docs/distributed.md) and supervises them: when a rank ends with an error or a
// signal, the others are given distributed.timeout_ms to end themselves (they see it through the
// rendezvous' watch and exit with code 3), then SIGTERM, then SIGKILL; no process is left behind.
// Exit code: 0 when every rank finished; else the first failed rank's (128 + signal when killed),
// with a line naming the rank and its cause.
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/run_config.hpp"
#include "apps/commands.hpp"
#include "apps/rank_resume.hpp"
#include "apps/run_checks.hpp"
#include "apps/run_dir.hpp"
#include "gpu/device.hpp"

extern char** environ;

namespace foxhunt::apps {
namespace fs = std::filesystem;

namespace {

struct LaunchArgs {
  std::string config, run_dir, resume;
  int gpus = 0;
  int port = 0;  // 0: a free loopback port
  bool overwrite = false, rendezvous_only = false;
  std::int64_t hold_ms = 0;
};

// A free TCP port on loopback (the kernel's choice; released again for rank 0 to take).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot find a free loopback port: " + why);
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string self_exe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("foxhunt") : p.string();
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}
int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::atomic<int> g_launch_signal{0};
extern "C" void on_launch_signal(int sig) { g_launch_signal.store(sig); }

int launch(const LaunchArgs& a, Console& io) {
  CheckedRun run;
  try {
    run = check_run(a.config, a.resume);  // rank 0's checkpoint; each rank checks its own again
  } catch (const std::invalid_argument& e) {
    io.err << "foxhunt launch: " << e.what() << "\n";
    return 2;
  }
  if (a.gpus < 1 || a.gpus > 1024) {
    io.err << "foxhunt launch: --gpus must be in [1, 1024], got " << a.gpus << "\n";
    return 2;
  }
  // Placement "split": rank r's learner on device r, its collector on collector_device + r.
  if (const std::string why = split_collectors_problem(run.config, a.gpus, gpu::device_count()); !why.empty()) {
    io.err << "foxhunt launch: " << why << "\n";
    return 2;
  }
  if (run.resume) {  // every rank's share of the checkpoint, before any rank starts
    try {
      for (int r = 0; r < a.gpus; ++r) {
        actors::RunConfig c = run.config;
        c.distributed.world = a.gpus;
        c.distributed.rank = r;
        (void)plan_rank_resume(*run.resume, c);
      }
    } catch (const std::invalid_argument& e) {
      io.err << "foxhunt launch: " << e.what() << "\n";
      return 2;
    }
  }
  int port = a.port;
  try {
    if (port == 0) port = free_loopback_port();
  } catch (const std::exception& e) {
    io.err << "foxhunt launch: " << e.what() << "\n";
    return 1;
  }
  const std::string run_dir =
      a.run_dir.empty() ? default_run_dir(run.config.run.name).string() : a.run_dir;
  const std::string exe = self_exe();
  std::vector<pid_t> pids(static_cast<std::size_t>(a.gpus), -1);
  for (int r = 0; r < a.gpus; ++r) {
    std::vector<std::string> argv{exe,       "train",        "--config", a.config,
                                  "--rank",  std::to_string(r), "--world", std::to_string(a.gpus),
                                  "--device", std::to_string(r), "--coordinator", "127.0.0.1:" + std::to_string(port),
                                  "--run-dir", run_dir};
    // Every rank is given rank 0's run directory; each finds its own shard beside it
    // (apps/rank_resume.hpp), whatever the old run's world size.
    if (!a.resume.empty()) argv.insert(argv.end(), {"--resume", a.resume});
    if (a.overwrite) argv.emplace_back("--overwrite");
    if (a.rendezvous_only) argv.insert(argv.end(), {"--rendezvous-only", "--hold-ms", std::to_string(a.hold_ms)});
    std::vector<char*> cargv;
    for (auto& s : argv) cargv.push_back(s.data());
    cargv.push_back(nullptr);
    pid_t pid = -1;
    if (const int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, cargv.data(), environ); rc != 0) {
      io.err << "foxhunt launch: cannot start rank " << r << ": " << std::strerror(rc) << "\n";
      for (const pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      for (const pid_t p : pids)
        if (p > 0) ::waitpid(p, nullptr, 0);
      return 1;
    }
    pids[static_cast<std::size_t>(r)] = pid;
  }
  io.out << "foxhunt launch: " << a.gpus << " ranks, coordinator 127.0.0.1:" << port << ", run directory " << run_dir
         << std::endl;

  struct sigaction sa {};
  sa.sa_handler = on_launch_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  using clock = std::chrono::steady_clock;
  const auto grace = std::chrono::milliseconds(run.config.distributed.timeout_ms);
  std::vector<int> status(pids.size(), 0);
  std::vector<bool> running(pids.size(), true);
  int first_failed = -1;
  clock::time_point failed_at{}, termed_at{};
  bool termed = false, killed = false, forwarded = false;
  std::size_t alive = pids.size();
  while (alive > 0) {
    for (std::size_t r = 0; r < pids.size(); ++r) {
      if (!running[r]) continue;
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        running[r] = false;
        status[r] = st;
        --alive;
        const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok && first_failed < 0) {
          first_failed = static_cast<int>(r);
          failed_at = clock::now();
          io.err << "foxhunt launch: rank " << r << " ended: " << describe_status(st) << "; ending the other ranks"
                 << std::endl;
        }
      }
    }
    if (const int sig = g_launch_signal.load(); sig != 0 && !forwarded) {
      forwarded = true;  // the ranks stop gracefully and checkpoint
      for (std::size_t r = 0; r < pids.size(); ++r)
        if (running[r]) ::kill(pids[r], SIGTERM);
    }
    const auto now = clock::now();
    if (first_failed >= 0 && !termed && now - failed_at > grace) {
      termed = true;
      termed_at = now;
      for (std::size_t r = 0; r < pids.size(); ++r)
        if (running[r]) ::kill(pids[r], SIGTERM);
    }
    if (termed && !killed && now - termed_at > std::chrono::seconds(5)) {
      killed = true;
      for (std::size_t r = 0; r < pids.size(); ++r)
        if (running[r]) ::kill(pids[r], SIGKILL);
    }
    if (alive > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (first_failed < 0) {
    io.out << "foxhunt launch: all " << a.gpus << " ranks finished" << std::endl;
    return 0;
  }
  for (std::size_t r = 0; r < pids.size(); ++r)
    if (static_cast<int>(r) != first_failed)
      io.err << "foxhunt launch: rank " << r << ": " << describe_status(status[r]) << "\n";
  io.err << "foxhunt launch: failed: rank " << first_failed << " " << describe_status(status[static_cast<std::size_t>(first_failed)])
         << "\n";
  return code_of(status[static_cast<std::size_t>(first_failed)]);
}

}  // namespace

void add_launch_command(CLI::App& app, Console& io) {
  auto args = std::make_shared<LaunchArgs>();
  auto* l = app.add_subcommand("launch", "Start and supervise every rank of a data-parallel run on this host's GPUs");
  l->add_option("--gpus", args->gpus, "ranks to start, one per local GPU (device r for rank r)")->required();
  l->add_option("--config", args->config, "TOML run configuration (the same for every rank)")
      ->required()
      ->check(CLI::ExistingFile);
  l->add_option("--run-dir", args->run_dir, "rank 0's run directory; rank r writes <dir>.rank<r>");
  l->add_option("--resume", args->resume,
                "rank 0's run directory to continue, on --gpus ranks whatever the old run's count "
                "(docs/distributed.md)");
  l->add_option("--port", args->port, "loopback port of rank 0's coordinator (default: a free one)");
  l->add_flag("--overwrite", args->overwrite, "replace the contents of non-empty run directories");
  l->add_flag("--rendezvous-only", args->rendezvous_only, "CPU only: the ranks' rendezvous, no training")->group("");
  l->add_option("--hold-ms", args->hold_ms, "with --rendezvous-only: how long the ranks stay joined")->group("");
  l->callback([args, &io] { io.exit_code = launch(*args, io); });
}

}  // namespace foxhunt::apps
