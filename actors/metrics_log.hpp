#pragma once
// Metrics files of a run, written from the host scalars the progress loop collects (which left
// the device through the exit module):
//   metrics.jsonl                      one JSON object per line: {"step":..,"wall_time":..,"<tag>":..}
//   events.out.tfevents.<time>.<host>  TensorBoard's format, so `tensorboard --logdir RUN_DIR` works:
//     TFRecord framing  [u64 length][u32 masked crc32c(length)][data][u32 masked crc32c(data)]
//     data = an Event protobuf: wall_time (1, double), step (2, int64), file_version (3, string)
//            or summary (5) { repeated value (1) { tag (1, string), simple_value (2, float) } }
//     encoded by hand (no protobuf dependency).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace foxhunt::actors {

// CRC-32C (Castagnoli), and the masked form TFRecord stores.
std::uint32_t crc32c(std::span<const std::uint8_t> data);
inline std::uint32_t masked_crc32c(std::span<const std::uint8_t> data) {
  const std::uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// One Event protobuf (exposed for the tests).
std::vector<std::uint8_t> encode_scalar_event(double wall_time, std::int64_t step,
                                              const std::vector<std::pair<std::string, double>>& scalars);
std::vector<std::uint8_t> encode_file_version_event(double wall_time);
// One TFRecord around `data`.
std::vector<std::uint8_t> tfrecord(std::span<const std::uint8_t> data);

class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::filesystem::path& dir);  // creates the events file
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  void scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values, double wall_time);
  void flush();
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  void write(const std::vector<std::uint8_t>& event);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

class JsonlWriter {
 public:
  explicit JsonlWriter(const std::filesystem::path& file);  // appends (a resumed run continues it)
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  void scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values, double wall_time);
  void flush();

 private:
  std::FILE* file_ = nullptr;
};

double wall_time_now();  // seconds since the epoch

}  // namespace foxhunt::actors
