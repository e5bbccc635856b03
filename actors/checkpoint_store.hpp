#pragma once
// CheckpointStore: run checkpoints as directories, each written atomically.
//
//   <root>/step_000000012000/   learner files (written by LearnerStage::checkpoint_job) + counters.json
//   <root>/latest               the name of the newest complete checkpoint
//
// write() fills "<name>.tmp", then renames it to "<name>" and replaces `latest` by rename, so a
// reader (or --resume after a crash) sees either the previous or the new checkpoint, never half.
// BackgroundWorker runs checkpoint jobs (which wait on the GPU) off the CAF scheduler threads.
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/stages.hpp"

namespace foxhunt::actors {

class CheckpointStore {
 public:
  explicit CheckpointStore(std::filesystem::path root);
  const std::filesystem::path& root() const noexcept { return root_; }
  // Runs job(tmp_dir), writes counters.json, publishes atomically; returns the final directory.
  // Throws std::runtime_error (tmp dir removed, previous checkpoint untouched) on failure.
  std::filesystem::path write(const Counters& counters, const std::function<void(const std::filesystem::path&)>& job);
  // After each write, removes all but the `newest` step directories (0, the default: keeps all).
  // The one just written always stays.
  void keep_newest(std::int64_t newest);
  // A small file written into every checkpoint from now on (e.g. the run's resolved config, so a
  // checkpoint directory is self-describing); part of the atomic publication.
  void attach(std::string file_name, std::string text);
  // The newest complete checkpoint under root (nullopt when none).
  static std::optional<std::filesystem::path> latest(const std::filesystem::path& root);
  // The name <root>/latest holds (nullopt when the file is absent or empty), whether or not that
  // checkpoint exists: resolve_checkpoint reports a dangling `latest` with it.
  static std::optional<std::string> latest_name(const std::filesystem::path& root);
  // counters.json of a checkpoint directory; std::runtime_error naming the file when unreadable.
  static Counters read_counters(const std::filesystem::path& dir);

 private:
  std::filesystem::path root_;
  std::mutex mutex_;  // the worker and the final checkpoint may race at shutdown
  std::vector<std::pair<std::string, std::string>> attachments_;
  std::int64_t keep_ = 0;
  void prune(const std::filesystem::path& just_written);
};

// One thread running posted jobs in order; the destructor finishes queued jobs and joins.
class BackgroundWorker {
 public:
  BackgroundWorker();
  ~BackgroundWorker();
  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;
  void post(std::function<void()> job);
  void drain();  // returns when every posted job has run

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false, busy_ = false;
  std::thread thread_;
};

}  // namespace foxhunt::actors
