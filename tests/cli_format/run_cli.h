// Runs the llmrr binary and captures exit code, stdout and stderr (for CLI tests).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/test_paths.h"

namespace llmrr::testing {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
  std::vector<std::string> err_lines() const {
    std::vector<std::string> v;
    std::istringstream s(err);
    std::string line;
    while (std::getline(s, line)) v.push_back(line);
    return v;
  }
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs LLMRR_BINARY ($LLMRR_BINARY, else the build-time path) with `args` (each shell-quoted).
inline CliResult run_llmrr(const std::vector<std::string>& args) {
  static int counter = 0;
  // Built with += only: GCC 12 warns (falsely, -Wrestrict) on "literal" + std::string.
  std::string base = "/tmp/llmrr_cli_";
  base += std::to_string(::getpid());
  base += '_';
  base += std::to_string(counter++);
  std::string cmd = shell_quote(LLMRR_PATH(LLMRR_BINARY));
  for (const std::string& a : args) {
    cmd += ' ';
    cmd += shell_quote(a);
  }
  cmd += " >";
  cmd += base;
  cmd += ".out 2>";
  cmd += base;
  cmd += ".err </dev/null";
  CliResult r;
  const int st = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

}  // namespace llmrr::testing
