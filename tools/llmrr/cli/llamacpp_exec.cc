#include "cli/llamacpp_exec.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/safeio/output.h"

namespace llmrr::cli {

namespace {

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool is_file(const std::string& p) {
  struct stat st;
  return !p.empty() && ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// $ENV when set (the only place then), else NAME beside this binary.
std::string find_part(const char* env, const char* name, std::string* tried) {
  if (const char* e = std::getenv(env); e != nullptr && *e != '\0') {
    *tried = e;
    return is_file(e) ? std::string(e) : std::string();
  }
  const std::string exe = self_exe();
  const std::string p = exe.substr(0, exe.rfind('/') + 1) + name;
  *tried = p;
  return is_file(p) ? p : std::string();
}

// Runs argv with `env` added; stdout captured into *out when out is not null.
Result<int> run(const std::vector<std::string>& args, const std::vector<std::string>& env,
                std::string* out) {
  int fds[2] = {-1, -1};
  if (out != nullptr && ::pipe(fds) != 0)
    return make_error(ErrorCode::kIo, std::string("pipe: ") + std::strerror(errno));
  const pid_t child = ::fork();
  if (child < 0) return make_error(ErrorCode::kIo, std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
    if (out != nullptr) {
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::close(fds[1]);
    }
    std::vector<char*> a;
    for (const std::string& s : args) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    std::fprintf(stderr, "llmrr: %s: cannot run: %s\n", a[0], std::strerror(errno));
    std::_Exit(127);
  }
  if (out != nullptr) {
    ::close(fds[1]);
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
      if (n > 0) out->append(buf, static_cast<size_t>(n));
    ::close(fds[0]);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0)
    if (errno != EINTR)
      return make_error(ErrorCode::kInternal, std::string("waitpid: ") + std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int replay(int argc, char** argv) {
  CLI::App app{"Replay a llama.cpp trace in libllama (--runtime llamacpp).", "replay"};
  std::string runtime, path, model, out;
  int n_batch = 0, n_ubatch = 0, threads = 0;
  bool force = false;
  std::string flash_attn;
  app.add_option("--runtime", runtime, "llamacpp")->required();
  app.add_option("TRACE", path, "a trace recorded by llmrr record-llamacpp")->required();
  app.add_option("--model", model, "the GGUF file it was recorded with")->required();
  app.add_option("-o,--output", out, "the replay's trace (default: TRACE.replay.trace)");
  app.add_option("--n-batch", n_batch, "n_batch of the context (default: as recorded)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--n-ubatch", n_ubatch, "n_ubatch of the context (default: as recorded)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", threads, "threads (default: as recorded)")->check(CLI::Range(1, 1024));
  app.add_option("--flash-attn", flash_attn, "flash attention: on, off or auto (default: as recorded)")
      ->check(CLI::IsMember({"on", "off", "auto"}));
  app.add_flag("--force", force, "replay with a model whose hash differs from the trace's");
  app.footer(
      "Examples:\n"
      "  llmrr replay --runtime llamacpp run.trace --model SmolLM2.gguf\n"
      "  llmrr replay --runtime llamacpp run.trace --model SmolLM2.gguf --n-ubatch 7\n"
      "\n"
      "The recorded batches are fed to llama_decode in the recorded order (the context built\n"
      "from the trace's header), recorded again by the same shim, and compared with `llmrr\n"
      "diff`. Prints 'bit-exact: N steps, M rows' or the first step and site that differ.\n"
      "Exit codes: 0 bit-exact; 1 differs; 2 bad input (another model, not a llama.cpp trace,\n"
      "an existing -o); 3 internal error.");
  if (int rc = parse(app, argc, argv); rc >= 0) return rc;
  if (runtime != "llamacpp")
    return report("replay", make_error(ErrorCode::kInvalidArgument,
                                       "--runtime " + runtime + ": expected llamacpp"));
  std::string tried_driver, tried_shim;
  const std::string driver =
      find_part("LLMRR_LLAMACPP_REPLAY", "llmrr-llamacpp-replay", &tried_driver);
  const std::string shim = find_part("LLMRR_LLAMACPP_SHIM", "libllmrr_llamacpp.so", &tried_shim);
  if (driver.empty() || shim.empty())
    return report("replay", make_error(ErrorCode::kNotFound,
                                       "no " + (driver.empty() ? tried_driver : tried_shim) +
                                           ": build llmrr with llama.cpp present "
                                           "(tools/setup/llamacpp, then reconfigure)"));
  if (out.empty()) {
    out = path;
    if (out.size() > 6 && out.compare(out.size() - 6, 6, ".trace") == 0) out.resize(out.size() - 6);
    out += ".replay.trace";
  }
  if (::access(out.c_str(), F_OK) == 0)
    return report("replay", make_error(ErrorCode::kInvalidArgument,
                                       out + ": exists; replay never overwrites a file (choose "
                                             "another -o or remove it)"));
  std::string capture = "layers";
  std::string lossy;  // the recording's own account of what it is missing
  {
    auto r = trace::TraceReader::open(path);
    if (!r.ok()) return report("replay", r.status());
    capture = trace::capture_level_name((*r)->run_header().engine.capture);
    if ((*r)->lossy()) lossy = (*r)->lossy_reason();
  }
  if (Status st = safeio::check_output_file(out, "-o", {path}); !st.ok())
    return report("replay", st);
  Result<safeio::OutputFile> partial =
      safeio::OutputFile::create(out, "-o", safeio::OutputFile::Kind::kPartial);
  if (!partial.ok()) return report("replay", partial.status());
  std::vector<std::string> args{driver, path, model};
  if (n_batch > 0) args.insert(args.end(), {"--n-batch", std::to_string(n_batch)});
  if (n_ubatch > 0) args.insert(args.end(), {"--n-ubatch", std::to_string(n_ubatch)});
  if (threads > 0) args.insert(args.end(), {"--threads", std::to_string(threads)});
  if (!flash_attn.empty()) args.insert(args.end(), {"--flash-attn", flash_attn});
  if (force) args.push_back("--force");
  const char* old = std::getenv("LD_PRELOAD");
  std::vector<std::string> env{
      "LD_PRELOAD=" + (old != nullptr && *old != '\0' ? std::string(old) + ":" : "") + shim,
      "LLMRR_LLAMACPP_TRACE=" + partial->write_path(), "LLMRR_CAPTURE=" + capture,
      "LLMRR_LLAMACPP_FORCED=1"};
  Result<int> ran = run(args, env, nullptr);
  if (!ran.ok()) return report("replay", ran.status());
  if (*ran != 0) return *ran == 2 ? kExitBadInput : kExitInternal;
  int64_t steps = 0, rows = 0;
  {
    auto r = trace::TraceReader::open(partial->write_path());
    if (!r.ok()) return report("replay", r.status());
    steps = (*r)->step_count();
    trace::StepCursor c = (*r)->steps();
    trace::StepRecord s;
    for (;;) {
      auto more = c.next(&s);
      if (!more.ok()) return report("replay", more.status());
      if (!*more) break;
      rows += s.row_count();
    }
  }
  if (Status st = partial->commit(); !st.ok()) return report("replay", st);
  std::string text;
  Result<int> d = run({self_exe(), "diff", path, out, "--align", "ids"}, {}, &text);
  if (!d.ok()) return report("replay", d.status());
  std::printf("replayed %s -> %s\n", path.c_str(), out.c_str());
  if (*d == 0) {
    std::printf("bit-exact: %lld steps, %lld rows (every fingerprint, logits row and token as "
                "recorded)\n",
                static_cast<long long>(steps), static_cast<long long>(rows));
    if (!lossy.empty()) std::printf("the recording is lossy: %s\n", lossy.c_str());
    return kExitOk;
  }
  std::fputs(text.c_str(), stdout);
  // A llama.cpp recording that misses memory calls says which one first (KV cell placement
  // then differs from that step on): the reason a replay differs, named.
  if (!lossy.empty()) std::printf("the recording is lossy: %s\n", lossy.c_str());
  return *d == 1 ? kExitDiffer : *d;
}

}  // namespace

bool run_in_llamacpp(const char* command, int argc, char** argv, int* rc) {
  bool named = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--runtime" && i + 1 < argc && std::string(argv[i + 1]) == "llamacpp") ||
        a == "--runtime=llamacpp")
      named = true;
  }
  if (!named) return false;
  if (std::string(command) == "replay") {
    *rc = replay(argc, argv);
  } else {
    std::fprintf(stderr, "llmrr %s: error: --runtime llamacpp: not supported by %s (only "
                         "replay)\n", command, command);
    *rc = kExitBadInput;
  }
  return true;
}

}  // namespace llmrr::cli
