// Output paths: never one of the inputs; written to a temporary file and renamed on success.
//
// The rule for directories (README, "Files llmrr writes"): llmrr never creates a missing
// parent directory. An output file's directory must exist; an output directory (unpack -o,
// export --npy, replay --materialize -o) is created when missing, but its parent must exist.
// Either is refused before any work starts.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/safeio/cleanup.h"

namespace llmrr::safeio {

// Refuses `out` (the value of `option`, e.g. "-o") when it is empty, when it is a directory,
// a FIFO, a device or a socket (kIsDirectory / kInvalidArgument: an output file is a new
// file renamed over the path, and none of these is opened), when it names the same file as
// one of `inputs` (same device and inode; an input that does not exist is skipped), or when
// its directory does not exist or is not a directory. Messages say which.
Status check_output_file(const std::string& out, std::string_view option,
                         const std::vector<std::string>& inputs);

// The same for an output directory: `out` may exist (then as a directory) or not (then its
// parent must exist), and no input may be `out` itself. An input inside the output directory
// is allowed (unpacking into the directory that holds the bundle); files written there are
// checked by check_output_file.
Status check_output_dir(const std::string& out, std::string_view option,
                        const std::vector<std::string>& inputs);

// Creates `dir` when missing (one level: its parent must exist). Ok when it is a directory.
Status make_output_dir(const std::string& dir, std::string_view option);

// A file written under a unique temporary name in the destination's directory
// (".<name>.llmrr-XXXXXX", six random letters, created O_CREAT|O_EXCL|O_NOFOLLOW, so never an
// existing file or a link planted at that name, and tracked for the cleanup handler before
// it exists), fsynced and renamed over `path` by commit(); removed by the
// destructor when commit() was not called or failed, and by the cleanup handler on SIGINT,
// SIGTERM, SIGHUP and SIGXFSZ (cleanup.h), so a failure leaves nothing behind and an existing
// file is replaced only by a complete new one. Two writers to one path each have their own
// temporary: the last rename wins, whole. Created before the work starts, so an unwritable
// destination fails first. A FIFO, a device, a socket or a directory at `path` is refused
// (kInvalidArgument / kIsDirectory naming it): it is never opened, so it cannot block.
class OutputFile {
 public:
  enum class Kind {
    kTemporary,  // ".<name>.llmrr-XXXXXX", removed on a signal
    // "<name>.partial-XXXXXX", visible and left alone by the cleanup handler: what a
    // recording that was killed keeps (record handles its own signals).
    kPartial,
  };
  static Result<OutputFile> create(const std::string& path, std::string_view option,
                                   Kind kind = Kind::kTemporary);
  OutputFile() = default;
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&& o) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  std::FILE* file() const { return f_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }
  // Where a writer that takes a path writes: the temporary file. Its contents replace
  // path() at commit().
  const std::string& write_path() const { return temp_; }
  // `st` with every mention of write_path() replaced by path(), so that an error from a
  // writer that takes a path names the file the user gave.
  Status in_final_terms(const Status& st) const;
  Status write(std::string_view bytes);
  // Flushes, fsyncs, closes and renames the temporary file over path(). The file renamed
  // is whatever write_path() names then (a writer that takes a path may have replaced it).
  Status commit();
  // Closes and removes the temporary file now (what the destructor does).
  void discard();
  // Closes the temporary file and leaves it where it is, path() untouched (a recording the
  // engine broke off: what it holds is kept under its own name). Returns its name.
  std::string keep();

 private:
  std::FILE* f_ = nullptr;
  std::string path_, temp_;
  CleanupSlot slot_;
};

// An output directory filled whole or not at all (export --npy DIR, replay --materialize -o
// DIR, unpack -o DIR). Files are written into a fresh staging directory (mkdir 0700,
// ".<name>.llmrr-XXXXXX", tracked before it exists: next to `dir` when `dir` does not exist yet, inside it when it
// does, so the final renames stay on one file system); commit() moves them into place — the
// staging directory renamed to `dir`, or, into an existing `dir`, every target checked first
// (none a directory where a file goes, none a link where a directory goes, none an input)
// and then moved with renameat through directory descriptors opened O_NOFOLLOW, the files
// at the top last (manifest.json after traces/): no link found inside `dir` is ever
// followed. Without commit(), or when it fails, the destructor removes the staging
// directory and everything in it (so does the cleanup handler on a signal): a failure
// midway leaves nothing behind. `dir` itself is checked with check_output_dir by create().
class OutputDir {
 public:
  static Result<OutputDir> create(const std::string& dir, std::string_view option,
                                  const std::vector<std::string>& inputs);
  OutputDir() = default;
  OutputDir(OutputDir&& o) noexcept;
  OutputDir& operator=(OutputDir&& o) noexcept;
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;
  ~OutputDir();

  const std::string& path() const { return path_; }
  // Where the writers write; its files land in path() at commit().
  const std::string& write_path() const { return staging_; }
  // A path under write_path() as it will be after commit() (for messages and reports).
  std::string final_path(const std::string& staged) const;
  // `st` with every mention of write_path() in its message replaced by path(), so that an
  // error from a writer names the directory the user gave.
  Status in_final_terms(const Status& st) const;
  // Creates the file `rel` ("traces/a.trace": parts without "." or "..") in the staging
  // directory, and the directories above it, through directory descriptors: mkdirat, then
  // openat with O_NOFOLLOW | O_DIRECTORY for each directory and O_CREAT | O_EXCL |
  // O_NOFOLLOW for the file, so nothing is written through a link. Returns a descriptor
  // open for writing, which the caller owns.
  Result<int> create_file(const std::string& rel);
  Status commit();

 private:
  void discard();
  std::string path_, staging_, option_;
  std::vector<std::string> inputs_;
  bool existed_ = false;
  int staging_fd_ = -1;
  CleanupSlot slot_;
};

// Opens `path` for writing ("wb": created, or truncated when it exists) without following
// a link at its last component (O_NOFOLLOW: a link planted there fails the open with ELOOP
// instead of sending the bytes to the file it names). For the writers that take a path and
// write inside a temporary file or a staging directory (OutputFile::write_path(),
// OutputDir::write_path()). Null with errno set on failure.
std::FILE* open_for_writing(const std::string& path);

// The directory part of a path ("." when it has none).
std::string dir_of(const std::string& path);

}  // namespace llmrr::safeio
