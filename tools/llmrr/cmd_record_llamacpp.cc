// llmrr record-llamacpp [--capture LEVEL] -o x.trace -- PROGRAM ARGS...: runs a program that
// links libllama (llama-server, llama-cli, llama-cpp-python, your own) with the llmrr shim
// preloaded (libllmrr_llamacpp.so, llamacpp/shim), so each llama_decode of its context is
// recorded as a step. SIGINT and SIGTERM are passed on to the program, which closes the trace
// as it exits. The program's exit status is passed through (128 + signal when it was killed);
// afterwards the trace is read back and summarized, and only then put at -o.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/child.h"
#include "cli/cli.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/safeio/output.h"

namespace {

using namespace llmrr;
using cli::absolute_path;
using cli::has_bytes;
using cli::is_file;
using cli::self_dir;

// $LLMRR_LLAMACPP_SHIM (the only place when set), else next to this binary, else ../lib.
std::string find_shim(std::vector<std::string>* tried) {
  if (const char* e = std::getenv("LLMRR_LLAMACPP_SHIM")) {
    tried->push_back(e);
    return is_file(e) ? absolute_path(e) : "";
  }
  const std::string dir = self_dir();
  for (const std::string& c : {dir + "/libllmrr_llamacpp.so", dir + "/../lib/libllmrr_llamacpp.so"}) {
    tried->push_back(c);
    if (is_file(c)) return absolute_path(c);
  }
  return "";
}

volatile sig_atomic_t g_child = 0;

void forward(int sig) {
  if (g_child > 0) ::kill(static_cast<pid_t>(g_child), sig);
}

}  // namespace

int run_record_llamacpp_command(int argc, char** argv) {
  CLI::App app{
      "Record a program that links libllama (llama-server, llama-cli, ...): every decode of\n"
      "its context as a step (batch rows, sequences, positions), layer fingerprints, the logits\n"
      "of every row that wants them, the sampled tokens, and the context's settings.",
      "record-llamacpp"};
  std::string out, capture = "layers";
  int top_k = 32;
  std::vector<std::string> command;
  app.add_option("-o,--output", out, "trace file to write")->required();
  app.add_option("--capture", capture,
                 "row fingerprints: none, layers (l_out-N as L<N>.out, default) or all (also "
                 "attention and FFN nodes)")
      ->check(CLI::IsMember({"none", "layers", "all"}));
  app.add_option("--top-k", top_k, "logits kept per row that wants them (default 32)")
      ->check(CLI::Range(0, 65536));
  app.add_option("command", command, "the program and its arguments (after --)")->required();
  app.footer(
      "Examples:\n"
      "  llmrr record-llamacpp -o run.trace -- llama-server -m model.gguf -np 4 --kv-unified\n"
      "  llmrr verify run.trace\n"
      "\n"
      "The program gets LD_PRELOAD=libllmrr_llamacpp.so (appended to any LD_PRELOAD it has) and\n"
      "LLMRR_LLAMACPP_TRACE; the same works without this command. The program must use a shared\n"
      "libllama (tools/setup/llamacpp builds one). Stop a server with SIGINT or SIGTERM to this\n"
      "command: it is passed on, and the server closes the trace as it exits.\n"
      "\n"
      "Exit codes: the program's exit status (128 + signal if killed); 2 bad usage or no trace\n"
      "written; 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  std::vector<std::string> tried;
  const std::string shim = find_shim(&tried);
  if (shim.empty()) {
    std::string where;
    for (const std::string& t : tried) where += (where.empty() ? "" : ", ") + t;
    return cli::report("record-llamacpp",
                       make_error(ErrorCode::kNotFound,
                                  "no libllmrr_llamacpp.so (looked at " + where +
                                      "): build llmrr with llama.cpp present (tools/setup/"
                                      "llamacpp, then reconfigure), or set LLMRR_LLAMACPP_SHIM"));
  }
  const std::string path = absolute_path(out);
  if (is_file(path) || ::access(path.c_str(), F_OK) == 0) {
    return cli::report("record-llamacpp",
                       make_error(ErrorCode::kInvalidArgument,
                                  path + ": exists; record-llamacpp never overwrites a file "
                                         "(choose another -o or remove it)"));
  }
  if (Status st = safeio::check_output_file(path, "-o", {}); !st.ok())
    return cli::report("record-llamacpp", st);
  Result<safeio::OutputFile> partial =
      safeio::OutputFile::create(path, "-o", safeio::OutputFile::Kind::kPartial);
  if (!partial.ok()) return cli::report("record-llamacpp", partial.status());
  const std::string written = partial->write_path();

  const pid_t child = ::fork();
  if (child < 0)
    return cli::report("record-llamacpp",
                       make_error(ErrorCode::kIo, std::string("fork: ") + std::strerror(errno)));
  if (child == 0) {
    std::string preload = shim;
    if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0')
      preload = std::string(old) + ":" + shim;
    ::setenv("LD_PRELOAD", preload.c_str(), 1);
    ::setenv("LLMRR_LLAMACPP_TRACE", written.c_str(), 1);
    ::setenv("LLMRR_CAPTURE", capture.c_str(), 1);
    ::setenv("LLMRR_TOP_K", std::to_string(top_k).c_str(), 1);
    std::vector<char*> args;
    for (std::string& c : command) args.push_back(c.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "llmrr record-llamacpp: error: %s: cannot run: %s\n", args[0],
                 std::strerror(errno));
    std::_Exit(127);
  }
  g_child = child;
  struct sigaction sa {};
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR)
      return cli::report("record-llamacpp", make_error(ErrorCode::kInternal,
                                                       std::string("waitpid: ") +
                                                           std::strerror(errno)));
  }
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  const int code = WIFEXITED(status)     ? WEXITSTATUS(status)
                   : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                         : 3;
  if (code == 127 && !has_bytes(written)) return 127;
  if (!has_bytes(written)) {
    cli::report("record-llamacpp",
                make_error(ErrorCode::kNotFound,
                           path + ": no trace written: the program decoded nothing with a "
                                  "shared libllama (a statically linked llama.cpp cannot be "
                                  "recorded)"));
    return code != 0 ? code : cli::kExitBadInput;
  }
  long long steps = 0, reqs = 0;
  bool complete = true, lossy = false;
  std::string reason;
  {
    auto r = trace::TraceReader::open(written);
    if (!r.ok()) {
      const std::string kept = partial->keep();
      cli::report("record-llamacpp", r.status());
      std::fprintf(stderr, "llmrr record-llamacpp: %s is kept for a look\n", kept.c_str());
      return code != 0 ? code : cli::exit_code(r.status());
    }
    const trace::TraceReader& rd = **r;
    steps = static_cast<long long>(rd.step_count());
    reqs = static_cast<long long>(rd.requests().size());
    complete = rd.complete();
    lossy = rd.lossy();
    if (lossy) reason = rd.lossy_reason();
  }
  if (Status st = partial->commit(); !st.ok()) return cli::report("record-llamacpp", st);
  std::fprintf(stderr, "llmrr record-llamacpp: %s: %lld steps, %lld requests%s%s; program "
                       "exited with %d\n",
               path.c_str(), steps, reqs,
               !complete ? " (no footer: the program was killed; recovered up to its last whole "
                           "step)"
                         : "",
               lossy ? (", LOSSY: " + reason).c_str() : "", code);
  return code;
}
