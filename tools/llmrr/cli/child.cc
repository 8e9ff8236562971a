#include "cli/child.h"

#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace llmrr::cli {

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string self_dir() {
  const std::string p = self_exe();
  if (p.empty()) return "";
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

std::string absolute_path(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return p;
  return std::string(cwd) + "/" + p;
}

bool is_file(const std::string& p) {
  struct stat st;
  return !p.empty() && ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool has_bytes(const std::string& p) {
  struct stat st;
  return !p.empty() && ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

Result<int> run_program(const char* tool, std::vector<std::string> command,
                        const std::function<void()>& in_child) {
  const pid_t child = ::fork();
  if (child < 0) return make_error(ErrorCode::kIo, std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    in_child();
    std::vector<char*> args;
    for (std::string& c : command) args.push_back(c.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "llmrr %s: error: %s: cannot run: %s\n", tool, args[0],
                 std::strerror(errno));
    std::_Exit(127);
  }
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      return make_error(ErrorCode::kInternal, std::string("waitpid: ") + std::strerror(errno));
    }
  }
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 3;
}

}  // namespace llmrr::cli
