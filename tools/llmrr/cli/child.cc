#include "cli/child.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cli/cli.h"
#include "llmrr/format/splice.h"
#include "llmrr/recording/ring.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/safeio/output.h"

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

void prepend_env(const char* name, const std::string& path) {
  const char* old = std::getenv(name);
  const std::string v = old != nullptr && *old != '\0' ? path + ":" + old : path;
  ::setenv(name, v.c_str(), 1);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

namespace {

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_signal = 0;  // the last signal that came (forwarded or not)

char g_trigger[4096] = {0};  // Child::snapshot_trigger, for on_usr1
volatile sig_atomic_t g_trigger_written = 0;  // on_usr1 wrote to it (record_child removes it)

void on_usr1(int) {
  const int saved = errno;
  // Never through a link, never blocking on a FIFO planted there (a handler must not wait).
  const int fd =
      ::open(g_trigger, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd >= 0) {
    g_trigger_written = 1;
    // A line more: the file's size changes, whatever the clock's granularity.
    [[maybe_unused]] const ssize_t n = ::write(fd, "snapshot\n", 9);
    ::close(fd);
  }
  errno = saved;
}

void forward(int sig, siginfo_t* info, void*) {
  g_signal = sig;
  // From the terminal (SI_KERNEL: the tty sent it to the foreground process group, the
  // child included): the child has it already.
  if (info != nullptr && info->si_code == SI_KERNEL) return;
  if (g_child > 0) ::kill(static_cast<pid_t>(g_child), sig);
}

// Waits for `child` for up to `ms`; true when it ended (its status in *status).
bool wait_for(pid_t child, int ms, int* status) {
  for (int waited = 0; waited < ms; waited += 20) {
    const pid_t r = ::waitpid(child, status, WNOHANG);
    if (r == child) return true;
    if (r < 0 && errno != EINTR) return false;
    ::usleep(20 * 1000);
  }
  return false;
}

}  // namespace

Result<int> run_child(const char* tool, Child c) {
  if (c.argv.empty()) return make_error(ErrorCode::kInvalidArgument, "no program to run");
  int fds[2] = {-1, -1};
  if (c.out != nullptr && ::pipe(fds) != 0)
    return make_error(ErrorCode::kIo, std::string("pipe: ") + std::strerror(errno));
  // The signals are blocked across fork, so none is lost or taken by the wrong process:
  // the child unblocks them with their default actions, this process once it knows the pid.
  sigset_t block, old_mask;
  sigemptyset(&block);
  for (int s : kForwarded) sigaddset(&block, s);
  struct sigaction old_actions[3];
  if (c.forward_signals) {
    ::sigprocmask(SIG_BLOCK, &block, &old_mask);
    struct sigaction sa {};
    sa.sa_sigaction = forward;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) ::sigaction(kForwarded[i], &sa, &old_actions[i]);
  }
  const bool take_usr1 = !c.snapshot_trigger.empty() && c.snapshot_trigger.size() < sizeof g_trigger;
  struct sigaction old_usr1 {};
  if (take_usr1) {
    std::memcpy(g_trigger, c.snapshot_trigger.c_str(), c.snapshot_trigger.size() + 1);
    g_trigger_written = 0;
    struct sigaction sa {};
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGUSR1, &sa, &old_usr1);
  }
  auto restore = [&] {
    if (take_usr1) ::sigaction(SIGUSR1, &old_usr1, nullptr);
    if (!c.forward_signals) return;
    g_child = 0;
    g_signal = 0;
    for (int i = 0; i < 3; ++i) ::sigaction(kForwarded[i], &old_actions[i], nullptr);
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  };
  const pid_t child = ::fork();
  if (child < 0) {
    const int e = errno;
    restore();
    if (fds[0] >= 0) ::close(fds[0]), ::close(fds[1]);
    return make_error(ErrorCode::kIo, std::string("fork: ") + std::strerror(e));
  }
  if (child == 0) {
    if (take_usr1) ::signal(SIGUSR1, SIG_DFL);
    if (c.forward_signals) {
      for (int s : kForwarded) ::signal(s, SIG_DFL);
      ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    }
    if (c.in_child) c.in_child();
    if (c.out != nullptr) {
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::close(fds[1]);
    }
    std::vector<char*> args;
    for (std::string& a : c.argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "llmrr %s: error: %s: cannot run: %s\n", tool, args[0],
                 std::strerror(errno));
    std::_Exit(127);
  }
  if (c.forward_signals) {
    g_child = child;
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  }
  if (c.out != nullptr) {
    ::close(fds[1]);
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
      if (n > 0) c.out->append(buf, static_cast<size_t>(n));
    ::close(fds[0]);
  }
  int status = 0;
  bool repeated = false;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno == EINTR && c.forward_signals && c.repeat_signal_after_ms > 0 && !repeated &&
        g_signal != 0) {
      // A signal came while waiting: give the child its grace, then the signal once more.
      const int sig = g_signal;
      if (wait_for(child, c.repeat_signal_after_ms, &status)) break;
      repeated = true;
      std::fprintf(stderr, "llmrr %s: %s still running %d ms after %s: sending it again\n",
                   tool, c.argv[0].c_str(), c.repeat_signal_after_ms, signal_name(sig));
      ::kill(child, sig);
      continue;
    }
    if (errno != EINTR) {
      const int e = errno;
      restore();
      return make_error(ErrorCode::kInternal, std::string("waitpid: ") + std::strerror(e));
    }
  }
  restore();
  return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 3;
}

int exec_program(const char* tool, std::vector<std::string> argv) {
  if (argv.empty()) return 2;
  if (std::getenv("LLMRR_BIN") == nullptr) {
    if (const std::string self = self_exe(); !self.empty()) ::setenv("LLMRR_BIN", self.c_str(), 1);
  }
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "llmrr %s: error: cannot run %s: %s\n", tool, args[0], std::strerror(errno));
  return 2;
}

void recover_ring(const char* tool, const std::string& trace) {
  const std::string dir = recording::ring_folder(trace);
  const std::vector<std::string> parts = recording::ring_segments(trace);
  if (parts.empty() || has_bytes(trace)) return;
  Result<trace::SpliceReport> joined =
      trace::join_traces(parts, trace, "flight recorder: the recording was stopped before it "
                                       "closed; its ring's segments were joined by llmrr");
  if (!joined.ok()) {
    std::fprintf(stderr, "llmrr %s: %s: the flight recorder's segments could not be joined (%s); "
                 "they are kept\n", tool, dir.c_str(), joined.status().to_string().c_str());
    return;
  }
  for (const std::string& p : parts) ::unlink(p.c_str());
  ::rmdir(dir.c_str());
  std::fprintf(stderr, "llmrr %s: joined %zu flight-recorder segment(s) left by the program "
               "(%lld steps)\n", tool, parts.size(), static_cast<long long>(joined->steps));
}

Result<std::string> summarize_steps(const std::string& path) {
  auto r = trace::TraceReader::open(path);
  if (!r.ok()) return r.status();
  const trace::TraceReader& rd = **r;
  std::string s = std::to_string(rd.step_count()) + " steps, " +
                  std::to_string(rd.requests().size()) + " requests, row hash " +
                  trace::fingerprint_kind(rd.run_header().engine);
  if (!rd.complete()) {
    s += " (no footer: the recording process was killed; recovered up to its last whole step)";
  } else if (rd.lossy()) {
    s += ", LOSSY: " + rd.lossy_reason();
  }
  return s;
}

int record_child(const RecordedChild& spec) {
  const char* tool = spec.tool;
  const std::string path = absolute_path(spec.output);
  if (Status st = safeio::check_output_file(path, "-o", {}); !st.ok()) return report(tool, st);
  Result<safeio::OutputFile> partial =
      safeio::OutputFile::create(path, "-o", safeio::OutputFile::Kind::kPartial);
  if (!partial.ok()) return report(tool, partial.status());
  const std::string written = partial->write_path();
  auto rank_files = [&] {
    std::vector<std::string> ranks;
    if (!spec.rank_files) return ranks;
    for (int rank = 1; rank < 1024 && is_file(written + ".rank" + std::to_string(rank)); ++rank)
      ranks.push_back(written + ".rank" + std::to_string(rank));
    return ranks;
  };
  struct RankCleanup {  // rank files of a partial trace that was not put into place
    std::function<std::vector<std::string>()> list;
    bool armed = true;
    ~RankCleanup() {
      if (armed)
        for (const std::string& r : list()) ::unlink(r.c_str());
    }
  } rank_cleanup{rank_files};

  Child child;
  child.argv = spec.command;
  child.in_child = [&] { spec.environment(written); };
  child.repeat_signal_after_ms = spec.repeat_signal_after_ms;
  child.snapshot_trigger = spec.snapshot_trigger;
  Result<int> ran = run_child(tool, std::move(child));
  if (!ran.ok()) return report(tool, ran.status());
  const int code = *ran;
  // The trigger is removed when this command wrote it (SIGUSR1); one the user made stays.
  if (!spec.snapshot_trigger.empty() && g_trigger_written) ::unlink(spec.snapshot_trigger.c_str());
  recover_ring(tool, written);
  // The partial file was created empty: nothing in it means no trace (it is removed).
  if (code == 127 && !has_bytes(written)) return 127;
  if (!has_bytes(written)) {
    report(tool, make_error(ErrorCode::kNotFound,
                            path + ": no trace written: " + spec.no_trace_hint));
    return code != 0 ? code : kExitBadInput;
  }
  const std::vector<std::string> ranks = rank_files();
  std::vector<std::string> written_traces{written};
  written_traces.insert(written_traces.end(), ranks.begin(), ranks.end());
  auto summarize = spec.summarize ? spec.summarize : summarize_steps;
  std::vector<std::string> lines;
  for (const std::string& t : written_traces) {
    Result<std::string> line = summarize(t);
    if (!line.ok()) {
      // Kept under their own names for a look (a killed program's trace may be a readable
      // prefix: verify --allow-incomplete); -o is left as it was.
      rank_cleanup.armed = false;
      const std::string kept = partial->keep();
      report(tool, line.status());
      std::fprintf(stderr, "llmrr %s: %s is kept; %s is left as it was\n", tool, kept.c_str(),
                   path.c_str());
      return code != 0 ? code : exit_code(line.status());
    }
    lines.push_back(*line);
  }
  std::vector<std::string> traces{path};
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::string target = path + ".rank" + std::to_string(i + 1);
    if (::rename(ranks[i].c_str(), target.c_str()) != 0) {
      return report(tool, make_error(ErrorCode::kIo,
                                     target + ": cannot write: " + std::strerror(errno)));
    }
    traces.push_back(target);
  }
  if (Status st = partial->commit(); !st.ok()) return report(tool, st);
  for (size_t i = 0; i < traces.size(); ++i) {
    std::fprintf(stderr, "llmrr %s: %s: %s; program exited with %d\n", tool, traces[i].c_str(),
                 lines[i].c_str(), code);
  }
  return code;
}

}  // namespace llmrr::cli
