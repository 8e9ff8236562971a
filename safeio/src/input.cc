#include "llmrr/safeio/input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace llmrr::safeio {
namespace {

Status stat_error(const std::string& path, std::string_view what, int err) {
  return make_error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                    path + ": cannot open the " + std::string(what) + ": " + std::strerror(err));
}

// "trace" → "trace file"; "requests file" stays.
std::string as_file(std::string_view what) {
  std::string w(what);
  return w.size() >= 5 && w.compare(w.size() - 5, 5, " file") == 0 ? w : w + " file";
}

Status kind_error(const std::string& path, std::string_view what, unsigned mode) {
  return make_error(S_ISDIR(mode) ? ErrorCode::kIsDirectory : ErrorCode::kInvalidArgument,
                    path + ": is " + file_kind(mode) + ", expected a regular " + as_file(what));
}

}  // namespace

std::string file_kind(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

Status require_regular_file(const std::string& path, std::string_view what) {
  if (path.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "an empty path was given, expected a " + as_file(what));
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return stat_error(path, what, errno);
  if (!S_ISREG(st.st_mode)) return kind_error(path, what, st.st_mode);
  return Status::Ok();
}

Status require_file_or_directory(const std::string& path, std::string_view what) {
  if (path.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "an empty path was given, expected a " + std::string(what));
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return stat_error(path, what, errno);
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return make_error(ErrorCode::kInvalidArgument,
                      path + ": is " + file_kind(st.st_mode) + ", expected a " +
                          std::string(what) + " (a regular file or a directory)");
  }
  return Status::Ok();
}

Result<int> open_regular(const std::string& path, std::string_view what) {
  RETURN_IF_ERROR(require_regular_file(path, what));
  // O_NONBLOCK: a FIFO swapped in after the stat must not block the open.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return stat_error(path, what, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const unsigned mode = st.st_mode;
    ::close(fd);
    return kind_error(path, what, mode);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

Result<std::string> read_file(const std::string& path, uint64_t limit, std::string_view what) {
  ASSIGN_OR_RETURN(int fd, open_regular(path, what));
  struct stat st;
  const uint64_t size = ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  auto too_big = [&](uint64_t n) {
    return make_error(ErrorCode::kResourceLimit,
                      path + ": the " + std::string(what) + " is " + std::to_string(n) +
                          " bytes or more, expected at most " + std::to_string(limit));
  };
  if (size > limit) {
    ::close(fd);
    return too_big(size);
  }
  std::string out;
  out.reserve(static_cast<size_t>(size));
  char buf[1 << 16];
  for (;;) {
    ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return make_error(ErrorCode::kIo, path + ": cannot read the " + std::string(what) + ": " +
                                            std::strerror(err));
    }
    if (got == 0) break;
    if (out.size() + static_cast<uint64_t>(got) > limit) {
      ::close(fd);
      return too_big(out.size() + static_cast<uint64_t>(got));
    }
    out.append(buf, static_cast<size_t>(got));
  }
  ::close(fd);
  return out;
}

}  // namespace llmrr::safeio
