#include "cli/vllm_exec.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cli/child.h"

namespace llmrr::cli {

namespace {

// `--runtime X` / `--runtime=X` among argv[1..]: true with X in *runtime and every other
// argument, in order, in *rest; false when the option is absent.
bool take_runtime(int argc, char** argv, std::string* runtime, std::vector<std::string>* rest) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    int used = 0;
    if (a == "--runtime" && i + 1 < argc) {
      *runtime = argv[i + 1];
      used = 2;
    } else if (a.rfind("--runtime=", 0) == 0) {
      *runtime = a.substr(10);
      used = 1;
    } else {
      continue;
    }
    rest->clear();
    for (int k = 1; k < argc; ++k) {
      if (k < i || k >= i + used) rest->push_back(argv[k]);
    }
    return true;
  }
  return false;
}

// Replaces this process with vLLM's Python running `args`; returns 2, said, when it cannot.
int exec_vllm_python(const char* command, const std::vector<std::string>& args) {
  std::string py;
  if (const char* e = std::getenv("LLMRR_VLLM_PYTHON"); e != nullptr && *e != '\0') {
    py = e;
  } else if (const std::string self = self_exe(); !self.empty()) {
    namespace fs = std::filesystem;
    py = (fs::path(self).parent_path().parent_path().parent_path() / "venv-vllm" / "bin" /
          "python")
             .string();
  }
  if (py.empty() || ::access(py.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "llmrr %s: error: --runtime vllm needs the vLLM python: none at '%s' (run "
                 "tools/setup/vllm, or set $LLMRR_VLLM_PYTHON)\n",
                 command, py.c_str());
    return 2;
  }
  if (std::getenv("LLMRR_BIN") == nullptr) {
    if (const std::string self = self_exe(); !self.empty())
      ::setenv("LLMRR_BIN", self.c_str(), 1);
  }
  std::vector<std::string> all = {py};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(py.c_str(), argv.data());
  std::fprintf(stderr, "llmrr %s: error: cannot run %s: %s\n", command, py.c_str(),
               std::strerror(errno));
  return 2;
}

}  // namespace

bool run_in_vllm(const char* command, std::vector<std::string> module_args, int argc,
                 char** argv, int* rc) {
  std::string runtime;
  std::vector<std::string> rest;
  if (!take_runtime(argc, argv, &runtime, &rest)) return false;
  if (runtime != "vllm") {
    std::fprintf(stderr,
                 "llmrr %s: error: --runtime: expected vllm (llmrr's own engine is the "
                 "default), found '%s' (see llmrr %s --help)\n",
                 command, runtime.c_str(), command);
    *rc = 2;
    return true;
  }
  module_args.insert(module_args.end(), rest.begin(), rest.end());
  *rc = exec_vllm_python(command, module_args);
  return true;
}

bool run_in_python(const char* command, const char* runtime, const char* script, int argc,
                   char** argv, int* rc) {
  std::string found;
  std::vector<std::string> rest;
  if (!take_runtime(argc, argv, &found, &rest) || found != runtime) return false;
  *rc = 2;
  namespace fs = std::filesystem;
  const std::string self = self_exe();
  if (self.empty()) {
    std::fprintf(stderr, "llmrr %s: error: --runtime %s: cannot find this binary's path\n",
                 command, runtime);
    return true;
  }
  if (std::getenv("LLMRR_BIN") == nullptr) ::setenv("LLMRR_BIN", self.c_str(), 1);
  // build/<preset>/tools/llmrr -> the checkout's python/SCRIPT
  std::string path =
      (fs::path(self).parent_path().parent_path().parent_path().parent_path() / "python" / script)
          .string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    std::fprintf(stderr, "llmrr %s: error: --runtime %s needs %s, not found (a checkout's build)\n",
                 command, runtime, path.c_str());
    return true;
  }
  std::vector<std::string> all = {"python3", path};
  all.insert(all.end(), rest.begin(), rest.end());
  std::vector<char*> args;
  for (std::string& a : all) args.push_back(a.data());
  args.push_back(nullptr);
  ::execvp("python3", args.data());
  std::fprintf(stderr, "llmrr %s: error: --runtime %s needs python3 on PATH: %s\n", command,
               runtime, std::strerror(errno));
  return true;
}

}  // namespace llmrr::cli
