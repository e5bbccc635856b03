#include "actors/checkpoint_store.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <span>
#include <stdexcept>
#include <system_error>

#include "gpu/atomic_file.hpp"

namespace foxhunt::actors {
namespace fs = std::filesystem;

namespace {
// Temp file, fsync, rename (gpu/atomic_file): a crash leaves the old file or the new one.
void write_text_atomically(const fs::path& path, const std::string& text) {
  gpu::write_file_atomically(path, {std::as_bytes(std::span<const char>(text))}, "checkpoint file");
}
}  // namespace

CheckpointStore::CheckpointStore(fs::path root) : root_(std::move(root)) { fs::create_directories(root_); }

fs::path CheckpointStore::write(const Counters& c, const std::function<void(const fs::path&)>& job) {
  std::lock_guard lock(mutex_);
  char name[64];
  std::snprintf(name, sizeof name, "step_%012lld", static_cast<long long>(c.env_steps));
  const fs::path final_dir = root_ / name;
  fs::path tmp_dir = final_dir;
  tmp_dir += ".tmp";
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  try {
    fs::create_directories(tmp_dir);
    if (job) job(tmp_dir);
    for (const auto& [file, text] : attachments_) {
      fs::create_directories((tmp_dir / file).parent_path());  // an attachment may sit in a folder
      write_text_atomically(tmp_dir / file, text);
    }
    nlohmann::json j = {{"env_steps", c.env_steps}, {"updates", c.updates}, {"policy_version", c.policy_version}};
    write_text_atomically(tmp_dir / "counters.json", j.dump(2) + "\n");
    fs::remove_all(final_dir, ec);  // a re-save at the same step replaces the older one
    fs::rename(tmp_dir, final_dir);
    write_text_atomically(root_ / "latest", std::string(name) + "\n");
  } catch (const std::exception& e) {
    fs::remove_all(tmp_dir, ec);
    throw std::runtime_error("checkpoint " + final_dir.string() + " not written: " + e.what());
  }
  prune(final_dir);
  return final_dir;
}

void CheckpointStore::keep_newest(std::int64_t newest) {
  std::lock_guard lock(mutex_);
  keep_ = newest;
}

// Only after `latest` names the new checkpoint, so a crash here loses old checkpoints at worst.
// Names are zero-padded step counts: name order is step order.
void CheckpointStore::prune(const fs::path& just_written) {
  if (keep_ <= 0) return;
  std::vector<fs::path> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step_", 0) == 0 && e.path().extension().empty()) steps.push_back(e.path());
  }
  std::sort(steps.begin(), steps.end());
  std::int64_t excess = static_cast<std::int64_t>(steps.size()) - keep_;
  for (const auto& p : steps) {
    if (excess <= 0) break;
    if (p == just_written) continue;
    fs::remove_all(p, ec);  // best effort: a failed removal costs disk space, never a checkpoint
    --excess;
  }
}

void CheckpointStore::attach(std::string file_name, std::string text) {
  std::lock_guard lock(mutex_);
  attachments_.emplace_back(std::move(file_name), std::move(text));
}

std::optional<std::string> CheckpointStore::latest_name(const fs::path& root) {
  std::ifstream in(root / "latest");
  std::string name;
  if (!(in >> name)) return std::nullopt;
  return name;
}

std::optional<fs::path> CheckpointStore::latest(const fs::path& root) {
  const std::optional<std::string> name = latest_name(root);
  if (!name) return std::nullopt;
  fs::path dir = root / *name;
  if (!fs::is_directory(dir)) return std::nullopt;
  return dir;
}

Counters CheckpointStore::read_counters(const fs::path& dir) {
  const fs::path file = dir / "counters.json";
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    Counters c;
    c.env_steps = j.at("env_steps").get<std::int64_t>();
    c.updates = j.at("updates").get<std::int64_t>();
    c.policy_version = j.at("policy_version").get<std::int64_t>();
    if (c.env_steps < 0 || c.updates < 0 || c.policy_version < 0) throw std::runtime_error("negative counter");
    return c;
  } catch (const std::exception& e) {
    throw std::runtime_error(file.string() + ": " + e.what());
  }
}

BackgroundWorker::BackgroundWorker() : thread_([this] { loop(); }) {}

BackgroundWorker::~BackgroundWorker() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BackgroundWorker::post(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void BackgroundWorker::drain() {
  std::unique_lock lock(mutex_);
  idle_cv_.wait(lock, [this] { return jobs_.empty() && !busy_; });
}

void BackgroundWorker::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping and nothing left
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    busy_ = true;
    lock.unlock();
    try {
      job();  // jobs report their own failures through messages
    } catch (...) {
    }
    lock.lock();
    busy_ = false;
    if (jobs_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace foxhunt::actors
