#pragma once
// The safetensors format (as written by PyTorch's `safetensors` package), pure CPU:
//
//   [u64 little-endian N][N bytes of JSON header][data section]
//   header = {"<name>": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {"key": "value", ...}}        (metadata optional, strings only)
//
// Offsets are relative to the start of the data section; tensors are packed without gaps or
// overlap and cover the data section exactly. The parser checks all of that (and more, see
// parse_safetensors) and rejects a file with a std::runtime_error naming the file and the reason.
// The writer pads the header with spaces to a multiple of 8 bytes, as the reference writer does,
// and replaces the target file atomically.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/tensor.hpp"

namespace foxhunt::gpu {

// Largest header accepted (the reference implementation's limit).
inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets into the data section, [begin, end)
  std::uint64_t end = 0;

  std::int64_t numel() const;
  std::uint64_t bytes() const { return end - begin; }
};

struct SafetensorsFile {
  std::vector<SafetensorsEntry> entries;        // in data-offset order
  std::map<std::string, std::string> metadata;  // "__metadata__", empty if absent
  std::span<const std::byte> data;              // the data section (a view into the parsed bytes)

  const SafetensorsEntry* find(std::string_view name) const;  // nullptr if absent
  std::span<const std::byte> bytes(const SafetensorsEntry& e) const { return data.subspan(e.begin, e.bytes()); }
};

// Parses and validates a whole file held in memory. Rejects (std::runtime_error whose message
// names `source_name` and the reason): a file shorter than 8 bytes; a header length beyond the
// file or above 100 MB; a header that is not valid JSON or not an object; duplicate tensor names;
// an entry that is not an object or lacks dtype/shape/data_offsets; a dtype other than F32, BF16,
// I32, U32, U8; a shape that is not a list of non-negative integers; data_offsets that are not two
// non-negative integers, end < begin, or past the data section; a byte size other than
// numel * dtype size; overlapping tensors; data bytes not covered by any tensor (gaps or trailing
// bytes); a __metadata__ that is not an object of strings.
SafetensorsFile parse_safetensors(std::span<const std::byte> file, std::string_view source_name);

// A tensor to write: its bytes (host memory, little-endian) must be numel * dtype size long.
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;
};

// The whole file in memory (tests, small files). Throws std::invalid_argument on a bad tensor
// list (duplicate or reserved name, negative dimension, data size not matching the shape).
std::vector<std::byte> serialize_safetensors(std::span<const SafetensorsTensor> tensors,
                                             const std::map<std::string, std::string>& metadata);

// The head of a file holding these tensors, data offsets assigned in list order: [u64 N][JSON
// header padded with spaces to a multiple of 8]. For writers that stream the data section
// themselves (rl/replay/snapshot): each tensor's `data` is not read. Throws std::invalid_argument
// on a duplicate or reserved name or a negative dimension.
std::string safetensors_header(std::span<const SafetensorsTensor> tensors,
                               const std::map<std::string, std::string>& metadata);

// Writes the file atomically: to "<path>.tmp.<pid>", fsync, rename over `path`, fsync the
// directory. On failure the temporary file is removed, any previous file at `path` is left
// untouched, and std::runtime_error names the path, the failing step and the errno text.
// (Two threads of one process must not write the same path at once: they share the temp name.)
void write_safetensors_file(const std::filesystem::path& path, std::span<const SafetensorsTensor> tensors,
                            const std::map<std::string, std::string>& metadata);

// Reads a whole file; std::runtime_error naming the path and the errno text on failure.
std::vector<std::byte> read_file_bytes(const std::filesystem::path& path);

}  // namespace foxhunt::gpu
