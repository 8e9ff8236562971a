// Helpers every test suite shares: cached models and temporary directories.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmrr/runtime/model.h"

namespace llmrr::test {

// The model loaded once per process and kept: `name` is a builtin name ("tiny-moe") or any
// load_model spec (a path, "builtin:..."). A load failure is a test failure (ADD_FAILURE)
// and yields an empty model.
const LoadedModel& builtin(const std::string& name);

// Byte-level token ids of `text` (the builtin models' vocabulary).
std::vector<int32_t> bytes(const std::string& text);

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it when the object
// goes away, unless LLMRR_KEEP_TEST_FILES is set.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "llmrr-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace llmrr::test
