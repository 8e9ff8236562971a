#include "test_common.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

namespace llmrr::test {

const LoadedModel& builtin(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<LoadedModel>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[name];
  if (!slot) {
    bool is_spec = name.find(':') != std::string::npos || name.find('/') != std::string::npos;
    Result<LoadedModel> m = load_model(is_spec ? name : "builtin:" + name);
    if (!m.ok()) {
      ADD_FAILURE() << m.status().to_string();
      slot = std::make_unique<LoadedModel>();
    } else {
      slot = std::make_unique<LoadedModel>(std::move(m).value());
    }
  }
  return *slot;
}

std::vector<int32_t> bytes(const std::string& text) {
  std::vector<int32_t> v;
  for (unsigned char c : text) v.push_back(c);
  return v;
}

TempDir::TempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  char* made = mkdtemp(tmpl.data());
  if (made == nullptr) {
    ADD_FAILURE() << "cannot create a temporary directory from " << tmpl;
    return;
  }
  path_ = made;
}

TempDir::~TempDir() {
  if (path_.empty() || std::getenv("LLMRR_KEEP_TEST_FILES")) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace llmrr::test
