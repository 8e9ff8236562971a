#include "llmrr/safeio/output.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
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

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return ::remove(path);
}

// The names in a directory (not "." and ".."), or empty when it cannot be read.
std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const struct dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
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

Status check_output_file(const std::string& out, std::string_view option,
                         const std::vector<std::string>& inputs) {
  if (out.empty()) return empty_path(option, "a file name");
  struct stat st;
  if (::stat(out.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return make_error(ErrorCode::kIsDirectory,
                        opt_prefix(option, out) + "is a directory, expected a file path");
    }
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

Result<OutputFile> OutputFile::create(const std::string& path, std::string_view option) {
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
    if (!S_ISREG(st.st_mode)) {
      // A device or FIFO (/dev/stdout, a pipe): written through, never replaced.
      o.f_ = std::fopen(path.c_str(), "wb");
      if (o.f_ == nullptr) {
        return make_error(ErrorCode::kIo,
                          opt_prefix(option, path) + "cannot open: " + std::strerror(errno));
      }
      return o;
    }
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
                      "." + base + ".llmrr-XXXXXX";
  const int fd = ::mkstemp(templ.data());
  if (fd < 0) {
    return make_error(ErrorCode::kIo, opt_prefix(option, path) + "cannot create a file in " + dir +
                                          ": " + std::strerror(errno));
  }
  ::fchmod(fd, mode);
  o.temp_ = templ;
  o.f_ = ::fdopen(fd, "wb");
  if (o.f_ == nullptr) {
    ::close(fd);
    ::unlink(templ.c_str());
    o.temp_.clear();
    return make_error(ErrorCode::kIo, opt_prefix(option, path) + "cannot open: " +
                                          std::strerror(errno));
  }
  return o;
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : f_(std::exchange(o.f_, nullptr)), path_(std::move(o.path_)),
      temp_(std::exchange(o.temp_, std::string())) {}

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this != &o) {
    discard();
    f_ = std::exchange(o.f_, nullptr);
    path_ = std::move(o.path_);
    temp_ = std::exchange(o.temp_, std::string());
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
}

Status OutputFile::write(std::string_view bytes) {
  if (f_ == nullptr) return make_error(ErrorCode::kInternal, path_ + ": written after close");
  if (std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size()) {
    return make_error(ErrorCode::kIo, path_ + ": write failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status OutputFile::commit() {
  if (f_ == nullptr) return make_error(ErrorCode::kInternal, path_ + ": committed twice");
  std::FILE* f = std::exchange(f_, nullptr);
  const bool flushed = std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !flushed) {
    const int e = flushed ? errno : err;
    discard();
    return make_error(ErrorCode::kIo, path_ + ": write failed: " + std::strerror(e));
  }
  if (temp_.empty()) return Status::Ok();  // written through
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    discard();
    return make_error(ErrorCode::kIo, path_ + ": cannot write: " + std::strerror(e));
  }
  temp_.clear();
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
  if (::mkdtemp(templ.data()) == nullptr) {
    return make_error(ErrorCode::kIo, opt_prefix(option, dir) +
                                          "cannot create a directory next to it: " +
                                          std::strerror(errno));
  }
  o.staging_ = templ;
  return o;
}

OutputDir::OutputDir(OutputDir&& o) noexcept
    : path_(std::move(o.path_)), staging_(std::exchange(o.staging_, std::string())),
      option_(std::move(o.option_)), inputs_(std::move(o.inputs_)), existed_(o.existed_) {}

OutputDir& OutputDir::operator=(OutputDir&& o) noexcept {
  if (this != &o) {
    discard();
    path_ = std::move(o.path_);
    staging_ = std::exchange(o.staging_, std::string());
    option_ = std::move(o.option_);
    inputs_ = std::move(o.inputs_);
    existed_ = o.existed_;
  }
  return *this;
}

OutputDir::~OutputDir() {
  discard();
}

void OutputDir::discard() {
  if (!staging_.empty()) ::nftw(staging_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  staging_.clear();
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

Status OutputDir::commit() {
  if (staging_.empty()) return make_error(ErrorCode::kInternal, path_ + ": committed twice");
  const mode_t mask = ::umask(0);
  ::umask(mask);
  struct stat st;
  if (!existed_ && ::stat(path_.c_str(), &st) != 0) {
    // The usual case: the directory appears whole, with the mode a mkdir would give it.
    ::chmod(staging_.c_str(), 0777 & ~mask);
    if (::rename(staging_.c_str(), path_.c_str()) == 0) {
      staging_.clear();
      return Status::Ok();
    }
    if (::stat(path_.c_str(), &st) != 0) {
      const int e = errno;
      discard();
      return make_error(ErrorCode::kIo, opt_prefix(option_, path_) +
                                            "cannot create the directory: " + std::strerror(e));
    }
  }
  // Into an existing directory: every target is checked before the first rename.
  const std::vector<std::string> names = list_dir(staging_);
  for (const std::string& n : names) {
    const std::string target = path_ + "/" + n;
    if (Status s = check_output_file(target, option_, inputs_); !s.ok()) {
      discard();
      return s;
    }
  }
  for (const std::string& n : names) {
    const std::string target = path_ + "/" + n;
    if (::rename((staging_ + "/" + n).c_str(), target.c_str()) != 0) {
      const int e = errno;
      discard();
      return make_error(ErrorCode::kIo, opt_prefix(option_, target) + "cannot write: " +
                                            std::strerror(e));
    }
  }
  ::rmdir(staging_.c_str());
  staging_.clear();
  return Status::Ok();
}

}  // namespace llmrr::safeio
