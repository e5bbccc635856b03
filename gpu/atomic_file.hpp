#pragma once
// Durable whole-file replacement (checkpoints): the bytes go to "<path>.tmp.<pid>", which is
// fsynced and renamed over `path`; then the directory is fsynced. A reader sees the old file or
// the new one, never a truncated mix, and a crash or a failed write leaves the old file intact.
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace foxhunt::gpu {

// Writes the concatenation of `pieces` to `path` atomically. On failure the temporary file is
// removed, any previous file at `path` is left untouched, and std::runtime_error says
// "cannot write <what> '<path>': <failing step>: <errno text>".
// (Two threads of one process must not write the same path at once: they share the temp name.)
void write_file_atomically(const std::filesystem::path& path, const std::vector<std::span<const std::byte>>& pieces,
                           const std::string& what = "file");

// Makes a rename into `path`'s directory durable (fsync of the directory). Returns 0, or the errno
// of the step that failed with `step` naming it ("written, but ..."). A file system that cannot
// fsync directories (EINVAL) counts as success: the data is written and renamed.
int fsync_parent_directory(const std::filesystem::path& path, std::string& step);

}  // namespace foxhunt::gpu
