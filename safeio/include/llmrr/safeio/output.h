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

namespace llmrr::safeio {

// Refuses `out` (the value of `option`, e.g. "-o") when it is empty, when it names the same
// file as one of `inputs` (same device and inode; an input that does not exist is skipped),
// or when its directory does not exist or is not a directory. Messages say which.
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

// A file written under a temporary name in the destination's directory
// (".<name>.llmrr-XXXXXX"), renamed over `path` by commit(); removed by the destructor when
// commit() was not called or failed, so a failure leaves nothing behind. Created before the
// work starts, so an unwritable destination fails first.
class OutputFile {
 public:
  static Result<OutputFile> create(const std::string& path, std::string_view option);
  OutputFile() = default;
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&& o) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  std::FILE* file() const { return f_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }
  // Where a writer that takes a path writes: the temporary file (or the device written
  // through). Its contents replace path() at commit().
  const std::string& write_path() const { return temp_.empty() ? path_ : temp_; }
  Status write(std::string_view bytes);
  // Flushes, closes and renames the temporary file over path().
  Status commit();

 private:
  void discard();
  std::FILE* f_ = nullptr;
  std::string path_, temp_;
};

// An output directory filled whole or not at all (export --npy DIR, replay --materialize -o
// DIR). Files are written into a staging directory (".<name>.llmrr-XXXXXX": next to `dir`
// when `dir` does not exist yet, inside it when it does, so the final renames stay on one
// file system); commit() moves them into place — the staging directory renamed to `dir`, or
// each file renamed into the existing `dir` after all of them were checked against the
// inputs. Without commit(), or when it fails, the destructor removes the staging directory
// and everything in it: a failure midway leaves nothing behind. `dir` itself is checked
// with check_output_dir by create().
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
  Status commit();

 private:
  void discard();
  std::string path_, staging_, option_;
  std::vector<std::string> inputs_;
  bool existed_ = false;
};

// The directory part of a path ("." when it has none).
std::string dir_of(const std::string& path);

}  // namespace llmrr::safeio
