#pragma once
// Streaming safetensors files for large device arrays (the replay buffer's checkpoints).
//
// gpu/safetensors writes and reads whole files held in host memory; a replay ring may be tens of
// GB, so this streams instead: the writer copies each device tensor through ONE host chunk
// buffer into the file, and the reader validates the header (parse_safetensors over a read-only
// mapping: only the header pages are touched) and then copies tensors to the device chunk by
// chunk. Device<->host copies happen here ONLY because this is explicit checkpoint I/O.
//
// Integrity: every tensor's 64-bit checksum is in the metadata ("checksum.<name>", 16 hex
// digits), so a flipped data byte is caught by verify() before anything is loaded. The writer
// first writes the header with zero checksums, streams the data, then rewrites the header in
// place (same length) with the real ones; the file is then fsynced and renamed over the target
// (temp + fsync + rename + directory fsync, as gpu/atomic_file does).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "gpu/safetensors.hpp"
#include "gpu/tensor.hpp"

namespace foxhunt::rl {

inline constexpr std::size_t kSnapshotChunkBytes = std::size_t{64} << 20;

// One tensor to write: from device memory (`device`) or from host memory (`host`), exactly one.
struct SnapshotTensor {
  std::string name;
  gpu::DType dtype = gpu::DType::u8;
  std::vector<std::int64_t> shape;
  const void* device = nullptr;
  std::span<const std::byte> host;
};

// Synchronizes `stream` first when a tensor is on the device (host-only files need no device),
// so the arrays hold every enqueued update; then writes the file
// atomically. `metadata` must not use the "checksum." prefix. std::runtime_error naming the
// path and the failing step (the previous file is left untouched); std::invalid_argument on a
// bad tensor list.
void write_snapshot_file(const std::filesystem::path& path, std::span<const SnapshotTensor> tensors,
                         const std::map<std::string, std::string>& metadata, cudaStream_t stream,
                         std::size_t chunk_bytes = kSnapshotChunkBytes);

class SnapshotReader {
 public:
  // Opens and parses the header; std::runtime_error naming the file when it is not a valid
  // safetensors file (truncated, bad header, ...).
  explicit SnapshotReader(const std::filesystem::path& path, std::size_t chunk_bytes = kSnapshotChunkBytes);
  ~SnapshotReader();
  SnapshotReader(const SnapshotReader&) = delete;
  SnapshotReader& operator=(const SnapshotReader&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  const std::map<std::string, std::string>& metadata() const noexcept { return file_.metadata; }
  const std::vector<gpu::SafetensorsEntry>& entries() const noexcept { return file_.entries; }

  // The entry `name` when present with exactly this dtype and shape; else nullptr and one line
  // naming the key appended to `problems`.
  const gpu::SafetensorsEntry* expect(const std::string& name, gpu::DType dtype, const std::vector<std::int64_t>& shape,
                                      std::vector<std::string>& problems) const;
  // Appends a line to `problems` for every tensor without a checksum or whose data does not match
  // it (reads all the data once, chunk by chunk).
  void verify(std::vector<std::string>& problems) const;
  // A (small) tensor's bytes on the host.
  std::vector<std::byte> read_host(const gpu::SafetensorsEntry& e) const;
  // Copies a tensor to device memory `dst` (e.bytes() bytes), chunk by chunk on `stream`;
  // returns with the copies complete.
  void upload(void* dst, const gpu::SafetensorsEntry& e, cudaStream_t stream) const;

 private:
  void read_at(std::byte* out, std::uint64_t offset, std::size_t bytes) const;

  std::filesystem::path path_;
  std::size_t chunk_bytes_;
  int fd_ = -1;
  std::uint64_t data_start_ = 0;  // file offset of the data section
  gpu::SafetensorsFile file_;     // entries and metadata (its data span is not kept valid)
};

// The checksum of a byte string (chunk-independent: a streaming hash over 8-byte words, the
// length folded in at the end).
class SnapshotHash {
 public:
  void add(std::span<const std::byte> bytes);
  std::uint64_t value() const;

 private:
  std::uint64_t h_ = 0x9E3779B97F4A7C15ull;
  std::uint64_t tail_ = 0;  // pending bytes of a partial word
  int tail_bytes_ = 0;
  std::uint64_t length_ = 0;
};

}  // namespace foxhunt::rl
