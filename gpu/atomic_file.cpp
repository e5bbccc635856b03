#include "gpu/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace foxhunt::gpu {

// Temp file + fsync + rename + directory fsync. Cleans up the temp file on every failure path.
void write_file_atomically(const std::filesystem::path& path, const std::vector<std::span<const std::byte>>& pieces,
                           const std::string& what) {
  const std::string tmp = path.string() + ".tmp." + std::to_string(::getpid());
  auto fail = [&](const std::string& step, int err) {
    throw std::runtime_error("cannot write " + what + " '" + path.string() + "': " + step + ": " +
                             std::error_code(err, std::generic_category()).message());
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("creating temporary file '" + tmp + "'", errno);
  auto fail_and_remove = [&](const std::string& step, int err, bool close_fd) {
    if (close_fd) ::close(fd);
    ::unlink(tmp.c_str());
    fail(step, err);
  };
  for (const auto& piece : pieces) {
    const std::byte* p = piece.data();
    std::size_t left = piece.size();
    while (left > 0) {
      const ssize_t w = ::write(fd, p, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail_and_remove("writing '" + tmp + "'", errno, true);
      }
      p += w;
      left -= static_cast<std::size_t>(w);
    }
  }
  if (::fsync(fd) != 0) fail_and_remove("fsync of '" + tmp + "'", errno, true);
  if (::close(fd) != 0) fail_and_remove("closing '" + tmp + "'", errno, false);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail_and_remove("renaming '" + tmp + "' over it", errno, false);
  std::string step;
  if (const int err = fsync_parent_directory(path, step)) fail(step, err);
}

int fsync_parent_directory(const std::filesystem::path& path, std::string& step) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    step = "written, but opening directory '" + dir.string() + "' to fsync it";
    return errno;
  }
  int err = 0;
  if (::fsync(dfd) != 0 && errno != EINVAL) {
    err = errno;
    step = "written, but fsync of directory '" + dir.string() + "'";
  }
  ::close(dfd);
  return err;
}

}  // namespace foxhunt::gpu
