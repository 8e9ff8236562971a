#include "llmrr/safeio/output.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "llmrr/safeio/input.h"

namespace llmrr::safeio {
namespace {

std::string opt_prefix(std::string_view option, const std::string& path) {
  return std::string(option) + " " + path + ": ";
}

// Ok, or the error for an output that is one of the inputs.
Status not_an_input(const std::string& out, const struct stat& ost, std::string_view option,
                    const std::vector<std::string>& inputs) {
  for (const std::string& in : inputs) {
    struct stat ist;
    if (in.empty() || ::stat(in.c_str(), &ist) != 0) continue;
    if (ist.st_dev == ost.st_dev && ist.st_ino == ost.st_ino) {
      return make_error(ErrorCode::kInvalidArgument,
                        opt_prefix(option, out) + "is the input " + in +
                            " (the same file), expected a new path: llmrr never overwrites "
                            "its input");
    }
  }
  return Status::Ok();
}

// A FIFO, a device or a socket where an output file goes: never opened (a FIFO without a
// reader would block the open, a device would take whatever is written); the output is a new
// file renamed into place, and renaming over such a file is not what anyone asked for.
Status not_a_file(const std::string& out, const struct stat& st, std::string_view option) {
  return make_error(ErrorCode::kInvalidArgument,
                    opt_prefix(option, out) + "is " + file_kind(st.st_mode) +
                        ", expected a regular file or a new path (llmrr writes a new file and "
                        "renames it over the path)");
}

Status parent_exists(const std::string& out, std::string_view option) {
  const std::string dir = dir_of(out);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      return make_error(ErrorCode::kNotFound,
                        opt_prefix(option, out) + "the directory " + dir +
                            " does not exist (llmrr does not create parent directories)");
    }
    return make_error(ErrorCode::kIo, opt_prefix(option, out) + "cannot use the directory " + dir +
                                          ": " + std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) {
    return make_error(ErrorCode::kInvalidArgument,
                      opt_prefix(option, out) + dir + " is " + file_kind(st.st_mode) +
                          ", expected a directory");
  }
  return Status::Ok();
}

// Replaces the trailing "XXXXXX" of `*templ` with random letters and creates it — a file
// (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600; returns the descriptor) or a directory (mode
// 0700; returns 0) — trying other names while one is taken. With `slot`, the name is tracked
// (cleanup.h) before it is created, so that a signal arriving while it is being created
// still removes it (unlinking a name that does not exist yet is harmless). -1 and errno on
// failure; the slot is then released.
int create_unique(std::string* templ, bool directory, CleanupSlot* slot) {
  static constexpr char kLetters[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   (static_cast<uint64_t>(::getpid()) << 32)};
  const size_t at = templ->size() - 6;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    for (size_t i = 0; i < 6; ++i) (*templ)[at + i] = kLetters[rng() % (sizeof kLetters - 1)];
    if (slot != nullptr) *slot = CleanupSlot(*templ, /*tree=*/directory);
    const int fd = directory ? ::mkdir(templ->c_str(), 0700)
                             : ::open(templ->c_str(),
                                      O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
    const int e = errno;
    if (slot != nullptr) slot->release();
    errno = e;
    if (e != EEXIST) return -1;
  }
  errno = EEXIST;
  return -1;
}

Status empty_path(std::string_view option, std::string_view expected) {
  return make_error(ErrorCode::kInvalidArgument,
                    std::string(option) + ": the path is empty, expected " +
                        std::string(expected));
}

}  // namespace

std::string dir_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::FILE* open_for_writing(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) return nullptr;
  std::FILE* f = ::fdopen(fd, "wb");
  if (f == nullptr) {
    const int e = errno;
    ::close(fd);
    errno = e;
  }
  return f;
}

Status check_output_file(const std::string& out, std::string_view option,
                         const std::vector<std::string>& inputs) {
  if (out.empty()) return empty_path(option, "a file name");
  struct stat st;
  if (::stat(out.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return make_error(ErrorCode::kIsDirectory,
                        opt_prefix(option, out) + "is a directory, expected a file path");
    }
    if (!S_ISREG(st.st_mode)) return not_a_file(out, st, option);
    RETURN_IF_ERROR(not_an_input(out, st, option, inputs));
  }
  return parent_exists(out, option);
}

Status check_output_dir(const std::string& out, std::string_view option,
                        const std::vector<std::string>& inputs) {
  if (out.empty()) return empty_path(option, "a directory");
  struct stat st;
  if (::stat(out.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return make_error(ErrorCode::kInvalidArgument,
                        opt_prefix(option, out) + "is " + file_kind(st.st_mode) +
                            ", expected a directory");
    }
    return not_an_input(out, st, option, inputs);
  }
  return parent_exists(out, option);
}

Status make_output_dir(const std::string& dir, std::string_view option) {
  if (::mkdir(dir.c_str(), 0777) == 0) return Status::Ok();
  const int err = errno;
  struct stat st;
  if (err == EEXIST && ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::Ok();
  if (err == ENOENT) RETURN_IF_ERROR(parent_exists(dir, option));
  return make_error(ErrorCode::kIo, opt_prefix(option, dir) + "cannot create the directory: " +
                                        std::strerror(err));
}

Result<OutputFile> OutputFile::create(const std::string& path, std::string_view option,
                                      Kind kind) {
  if (path.empty()) return empty_path(option, "a file name");
  OutputFile o;
  o.path_ = path;
  struct stat st;
  mode_t mode = 0;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return make_error(ErrorCode::kIsDirectory,
                        opt_prefix(option, path) + "is a directory, expected a file path");
    }
    if (!S_ISREG(st.st_mode)) return not_a_file(path, st, option);
    // A symlink to a regular file: the file it names is replaced, the link stays.
    char real[PATH_MAX];
    if (::realpath(path.c_str(), real) != nullptr) o.path_ = real;
    mode = st.st_mode & 07777;
  } else {
    RETURN_IF_ERROR(parent_exists(path, option));
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  const std::string dir = dir_of(o.path_);
  std::string base = o.path_.substr(o.path_.rfind('/') == std::string::npos
                                        ? 0
                                        : o.path_.rfind('/') + 1);
  if (base.size() > 200) base.resize(200);
  std::string templ = (dir == "." && o.path_.find('/') == std::string::npos ? "" : dir + "/") +
                      (kind == Kind::kPartial ? base + ".partial-XXXXXX"
                                              : "." + base + ".llmrr-XXXXXX");
  // Created with O_CREAT | O_EXCL | O_NOFOLLOW: a file or a link already there (planted by
  // someone else, or another writer's temporary) makes it try another name. Tracked before
  // it exists, so a signal at any moment finds it.
  const int fd = create_unique(&templ, /*directory=*/false,
                               kind == Kind::kTemporary ? &o.slot_ : nullptr);
  if (fd < 0) {
    return make_error(ErrorCode::kIo, opt_prefix(option, path) + "cannot create a file in " + dir +
                                          ": " + std::strerror(errno));
  }
  ::fchmod(fd, mode);
  o.temp_ = templ;
  o.f_ = ::fdopen(fd, "wb");
  if (o.f_ == nullptr) {
    const int e = errno;
    ::close(fd);
    o.discard();
    return make_error(ErrorCode::kIo, opt_prefix(option, path) + "cannot open: " +
                                          std::strerror(e));
  }
  return o;
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : f_(std::exchange(o.f_, nullptr)), path_(std::move(o.path_)),
      temp_(std::exchange(o.temp_, std::string())), slot_(std::move(o.slot_)) {}

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this != &o) {
    discard();
    f_ = std::exchange(o.f_, nullptr);
    path_ = std::move(o.path_);
    temp_ = std::exchange(o.temp_, std::string());
    slot_ = std::move(o.slot_);
  }
  return *this;
}

OutputFile::~OutputFile() {
  discard();
}

void OutputFile::discard() {
  if (f_ != nullptr) std::fclose(f_);
  f_ = nullptr;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
  slot_.release();
}

Status OutputFile::in_final_terms(const Status& st) const {
  if (st.ok() || temp_.empty()) return st;
  std::string m = st.message();
  for (size_t at = m.find(temp_); at != std::string::npos; at = m.find(temp_, at + path_.size()))
    m.replace(at, temp_.size(), path_);
  return make_error(st.code(), m);
}

std::string OutputFile::keep() {
  if (f_ != nullptr) std::fclose(f_);
  f_ = nullptr;
  slot_.release();
  return std::exchange(temp_, std::string());
}

Status OutputFile::write(std::string_view bytes) {
  if (f_ == nullptr) return make_error(ErrorCode::kInternal, path_ + ": written after close");
  if (std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size()) {
    return make_error(ErrorCode::kIo, path_ + ": write failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status OutputFile::commit() {
  if (temp_.empty()) return make_error(ErrorCode::kInternal, path_ + ": committed twice");
  if (f_ != nullptr) {
    std::FILE* f = std::exchange(f_, nullptr);
    const bool flushed = std::fflush(f) == 0;
    const int err = errno;
    if (std::fclose(f) != 0 || !flushed) {
      const int e = flushed ? errno : err;
      discard();
      return make_error(ErrorCode::kIo, path_ + ": write failed: " + std::strerror(e));
    }
  }
  // The file at the temporary name reaches the disk before it takes the path's place (a
  // writer that takes a path may have written a new file there: that is the one synced).
  const int fd = ::open(temp_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    discard();
    return make_error(ErrorCode::kIo, path_ + ": cannot write (fsync): " + std::strerror(e));
  }
  ::close(fd);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    discard();
    return make_error(ErrorCode::kIo, path_ + ": cannot write: " + std::strerror(e));
  }
  temp_.clear();
  slot_.release();
  return Status::Ok();
}

Result<OutputDir> OutputDir::create(const std::string& dir, std::string_view option,
                                    const std::vector<std::string>& inputs) {
  RETURN_IF_ERROR(check_output_dir(dir, option, inputs));
  OutputDir o;
  o.path_ = dir;
  o.option_ = std::string(option);
  o.inputs_ = inputs;
  struct stat st;
  o.existed_ = ::stat(dir.c_str(), &st) == 0;
  std::string p = dir;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  std::string base = p.substr(p.rfind('/') == std::string::npos ? 0 : p.rfind('/') + 1);
  if (base.size() > 200) base.resize(200);
  std::string templ;
  if (o.existed_) {
    templ = p + "/.llmrr-staging-XXXXXX";
  } else {
    const std::string parent = dir_of(p);
    templ = (parent == "." && p.find('/') == std::string::npos ? "" : parent + "/") + "." +
            base + ".llmrr-XXXXXX";
  }
  if (create_unique(&templ, /*directory=*/true, &o.slot_) < 0) {
    return make_error(ErrorCode::kIo, opt_prefix(option, dir) +
                                          "cannot create a directory next to it: " +
                                          std::strerror(errno));
  }
  o.staging_ = templ;
  return o;
}

OutputDir::OutputDir(OutputDir&& o) noexcept
    : path_(std::move(o.path_)), staging_(std::exchange(o.staging_, std::string())),
      option_(std::move(o.option_)), inputs_(std::move(o.inputs_)), existed_(o.existed_),
      staging_fd_(std::exchange(o.staging_fd_, -1)), slot_(std::move(o.slot_)) {}

OutputDir& OutputDir::operator=(OutputDir&& o) noexcept {
  if (this != &o) {
    discard();
    path_ = std::move(o.path_);
    staging_ = std::exchange(o.staging_, std::string());
    option_ = std::move(o.option_);
    inputs_ = std::move(o.inputs_);
    existed_ = o.existed_;
    staging_fd_ = std::exchange(o.staging_fd_, -1);
    slot_ = std::move(o.slot_);
  }
  return *this;
}

OutputDir::~OutputDir() {
  discard();
}

void OutputDir::discard() {
  if (staging_fd_ >= 0) ::close(staging_fd_);
  staging_fd_ = -1;
  if (!staging_.empty()) remove_tree(staging_.c_str());
  staging_.clear();
  slot_.release();
}

std::string OutputDir::final_path(const std::string& staged) const {
  if (staging_.empty() || staged.compare(0, staging_.size(), staging_) != 0) return staged;
  return path_ + staged.substr(staging_.size());
}

Status OutputDir::in_final_terms(const Status& st) const {
  if (st.ok() || staging_.empty()) return st;
  std::string m = st.message();
  for (size_t at = m.find(staging_); at != std::string::npos;
       at = m.find(staging_, at + path_.size())) {
    m.replace(at, staging_.size(), path_);
  }
  return make_error(st.code(), m);
}

Result<int> OutputDir::create_file(const std::string& rel) {
  if (staging_.empty()) return make_error(ErrorCode::kInternal, path_ + ": written after commit");
  if (staging_fd_ < 0) {
    staging_fd_ = ::open(staging_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (staging_fd_ < 0) {
      return make_error(ErrorCode::kIo, opt_prefix(option_, path_) +
                                            "cannot open its staging directory: " +
                                            std::strerror(errno));
    }
  }
  const std::string target = path_ + "/" + rel;
  std::vector<std::string> parts;
  for (size_t start = 0; start <= rel.size();) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    parts.push_back(rel.substr(start, end - start));
    start = end + 1;
  }
  for (const std::string& part : parts) {
    if (part.empty() || part == "." || part == "..") {
      return make_error(ErrorCode::kInvalidArgument,
                        target + ": expected a relative path without empty, '.' or '..' parts");
    }
  }
  int cur = staging_fd_;
  auto leave = [&](int next) {
    if (cur != staging_fd_) ::close(cur);
    cur = next;
  };
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (::mkdirat(cur, parts[i].c_str(), 0777) != 0 && errno != EEXIST) {
      const int e = errno;
      leave(-1);
      return make_error(ErrorCode::kIo, target + ": cannot create the directory " + parts[i] +
                                            ": " + std::strerror(e));
    }
    const int next = ::openat(cur, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) {
      const int e = errno;
      leave(-1);
      return make_error(ErrorCode::kIo, target + ": " + parts[i] + " is not a directory (" +
                                            std::strerror(e) + ")");
    }
    leave(next);
  }
  const int fd = ::openat(cur, parts.back().c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  const int e = errno;
  leave(-1);
  if (fd < 0) {
    return make_error(ErrorCode::kIo, target + ": cannot create: " + std::strerror(e));
  }
  return fd;
}

namespace {

struct DirFd {
  int fd = -1;
  explicit DirFd(int f) : fd(f) {}
  ~DirFd() {
    if (fd >= 0) ::close(fd);
  }
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;
};

int open_subdir(int at, const std::string& name) {
  return ::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

// The names in an open directory (not "." and ".."), sorted; false when it cannot be read.
bool list_at(int fd, std::vector<std::string>* names) {
  const int dup = ::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup < 0) return false;
  DIR* d = ::fdopendir(dup);
  if (d == nullptr) {
    ::close(dup);
    return false;
  }
  while (const struct dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names->push_back(n);
  }
  ::closedir(d);
  std::sort(names->begin(), names->end());
  return true;
}

using FileIds = std::vector<std::pair<dev_t, ino_t>>;

// Whether everything staged in `from` can move into `to` (the directory `where`): no
// directory where a file goes, no link or other file where a directory goes, no input.
Status check_into(int from, int to, const std::string& where, std::string_view option,
                  const FileIds& inputs) {
  std::vector<std::string> names;
  if (!list_at(from, &names)) {
    return make_error(ErrorCode::kIo, opt_prefix(option, where) +
                                          "cannot read the staging directory: " +
                                          std::strerror(errno));
  }
  for (const std::string& n : names) {
    const std::string target = where + "/" + n;
    struct stat s, t;
    if (::fstatat(from, n.c_str(), &s, AT_SYMLINK_NOFOLLOW) != 0) {
      return make_error(ErrorCode::kIo, opt_prefix(option, target) + "staged entry vanished: " +
                                            std::strerror(errno));
    }
    if (::fstatat(to, n.c_str(), &t, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return make_error(ErrorCode::kIo, opt_prefix(option, target) + "cannot use: " +
                                            std::strerror(errno));
    }
    if (S_ISDIR(s.st_mode)) {
      if (!S_ISDIR(t.st_mode)) {
        return make_error(ErrorCode::kInvalidArgument,
                          opt_prefix(option, target) + "is " +
                              (S_ISLNK(t.st_mode) ? std::string("a symbolic link")
                                                  : file_kind(t.st_mode)) +
                              ", expected a directory (llmrr never writes through a link or "
                              "into anything but a directory it finds in an output directory)");
      }
      DirFd sf(open_subdir(from, n)), tf(open_subdir(to, n));
      if (sf.fd < 0 || tf.fd < 0) {
        return make_error(ErrorCode::kIo, opt_prefix(option, target) + "cannot open: " +
                                              std::strerror(errno));
      }
      RETURN_IF_ERROR(check_into(sf.fd, tf.fd, target, option, inputs));
      continue;
    }
    if (S_ISDIR(t.st_mode)) {
      return make_error(ErrorCode::kIsDirectory,
                        opt_prefix(option, target) + "is a directory, expected a file path");
    }
    // A link at a file's place is replaced by the rename, never written through.
    if (S_ISLNK(t.st_mode)) continue;
    for (const auto& [dev, ino] : inputs) {
      if (t.st_dev == dev && t.st_ino == ino) {
        return make_error(ErrorCode::kInvalidArgument,
                          opt_prefix(option, target) +
                              "is one of the inputs (the same file), expected a new path: "
                              "llmrr never overwrites its input");
      }
    }
  }
  return Status::Ok();
}

// Moves everything staged in `from` into `to`: directories first (merged into one already
// there, renamed whole where there is none), then the files, so a top-level file
// (manifest.json) is the last to arrive.
Status move_into(int from, int to, const std::string& where, std::string_view option) {
  std::vector<std::string> names, files;
  if (!list_at(from, &names)) {
    return make_error(ErrorCode::kIo, opt_prefix(option, where) +
                                          "cannot read the staging directory: " +
                                          std::strerror(errno));
  }
  for (const std::string& n : names) {
    const std::string target = where + "/" + n;
    struct stat s, t;
    if (::fstatat(from, n.c_str(), &s, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISDIR(s.st_mode)) {
      files.push_back(n);
      continue;
    }
    if (::fstatat(to, n.c_str(), &t, AT_SYMLINK_NOFOLLOW) == 0) {
      DirFd sf(open_subdir(from, n)), tf(open_subdir(to, n));
      if (sf.fd < 0 || tf.fd < 0) {
        return make_error(ErrorCode::kIo, opt_prefix(option, target) + "cannot open: " +
                                              std::strerror(errno));
      }
      RETURN_IF_ERROR(move_into(sf.fd, tf.fd, target, option));
      continue;
    }
    if (::renameat(from, n.c_str(), to, n.c_str()) != 0) {
      return make_error(ErrorCode::kIo, opt_prefix(option, target) + "cannot write: " +
                                            std::strerror(errno));
    }
  }
  for (const std::string& n : files) {
    if (::renameat(from, n.c_str(), to, n.c_str()) != 0) {
      return make_error(ErrorCode::kIo, opt_prefix(option, where + "/" + n) + "cannot write: " +
                                            std::strerror(errno));
    }
  }
  return Status::Ok();
}

}  // namespace

Status OutputDir::commit() {
  if (staging_.empty()) return make_error(ErrorCode::kInternal, path_ + ": committed twice");
  if (staging_fd_ >= 0) ::close(staging_fd_);
  staging_fd_ = -1;
  const mode_t mask = ::umask(0);
  ::umask(mask);
  struct stat st;
  if (!existed_ && ::lstat(path_.c_str(), &st) != 0) {
    // The usual case: the directory appears whole, with the mode a mkdir would give it.
    ::chmod(staging_.c_str(), 0777 & ~mask);
    if (::rename(staging_.c_str(), path_.c_str()) == 0) {
      staging_.clear();
      slot_.release();
      return Status::Ok();
    }
    if (::lstat(path_.c_str(), &st) != 0) {
      const int e = errno;
      discard();
      return make_error(ErrorCode::kIo, opt_prefix(option_, path_) +
                                            "cannot create the directory: " + std::strerror(e));
    }
  }
  // Into an existing directory (the one the user named; links inside it are never
  // followed): every target is checked before the first rename.
  FileIds inputs;
  for (const std::string& in : inputs_) {
    struct stat is;
    if (!in.empty() && ::stat(in.c_str(), &is) == 0) inputs.emplace_back(is.st_dev, is.st_ino);
  }
  Status s = Status::Ok();
  {
    DirFd to(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    DirFd from(::open(staging_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (to.fd < 0 || from.fd < 0) {
      s = make_error(ErrorCode::kIo,
                     opt_prefix(option_, path_) + "cannot open: " + std::strerror(errno));
    }
    if (s.ok()) s = check_into(from.fd, to.fd, path_, option_, inputs);
    if (s.ok()) s = move_into(from.fd, to.fd, path_, option_);
  }
  discard();  // what is left: emptied directories, or everything after an error
  return s;
}

}  // namespace llmrr::safeio
