#include "cli/child.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace llmrr::cli {

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
