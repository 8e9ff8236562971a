// What llmrr writes, under attack (issue 37): a link planted where a temporary file used to
// go, two writers racing for one output, a FIFO or a device given as an output, a signal in
// the middle of a write, a link to a directory inside an unpack target. Nothing is written
// through a link, nothing hangs, nothing half-written stays, and exit 0 means a whole file.
// Symlinks, FIFOs and signals mean the same when the tests run as root (no permission bit is
// involved).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "../common/cpu_time.h"
#include "../common/test_paths.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::run_command;
using rtest::temp_path;

// A fresh directory under the suite's temporary directory.
std::string fresh_dir(const std::string& name) {
  const std::string d = temp_path(name);
  EXPECT_EQ(run_command("rm -rf " + d + " && mkdir -p " + d, nullptr), 0);
  return d;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A trace with several requests (so --redact has some to remove); `big` makes one that takes
// pack a few seconds at --level 19.
std::string trace_in(const std::string& dir, bool big = false) {
  const std::string p = dir + (big ? "/big.trace" : "/run.trace");
  std::string out;
  const std::string args = big ? " --load 8 --max-tokens 1500 --capture all"
                               : " --load 3 --max-tokens 8";
  EXPECT_EQ(run_command(rtest::llmrr_binary() + " record --model builtin:tiny-moe --prompt abc" +
                            args + " -q -o " + p,
                        &out, true),
            0)
      << out;
  return p;
}

// Starts `llmrr args...` with stdout and stderr to `log`; returns its pid.
pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv_s = {rtest::llmrr_binary()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Files in `dir` whose name holds `piece`.
std::vector<std::string> with_piece(const std::string& dir, const std::string& piece) {
  std::vector<std::string> out;
  for (const std::string& n : names_in(dir)) {
    if (n.find(piece) != std::string::npos) out.push_back(n);
  }
  return out;
}

TEST(Outputs, ALinkPlantedAtTheOldRedactTemporaryIsNotFollowed) {
  const std::string dir = fresh_dir("out-redact-link");
  const std::string t = trace_in(dir);
  const std::string victim = dir + "/victim.txt";
  rtest::write_file(victim, "precious");
  const std::string out = dir + "/bug.llmrr";
  // The name pack --redact used for its first redacted copy, and a few after it.
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(::symlink(victim.c_str(), (out + ".redact" + std::to_string(i) + ".tmp").c_str()), 0);
  }
  std::string msg;
  ASSERT_EQ(run_command(rtest::llmrr_binary() + " pack " + t + " --redact --keep 0 -q -o " + out,
                        &msg, true),
            0)
      << msg;
  EXPECT_TRUE(rtest::read_file(victim) == "precious")
      << "the file the link names was written: " << rtest::read_file(victim).size() << " bytes";
  EXPECT_EQ(run_command(rtest::llmrr_binary() + " verify -q " + out, &msg, true), 0) << msg;
  // Nothing of pack's own is left beside the bundle.
  EXPECT_EQ(with_piece(dir, ".llmrr-"), std::vector<std::string>{});
}

TEST(Outputs, ConcurrentRedactingPacksToOneOutputBothFinishWhole) {
  const std::string dir = fresh_dir("out-redact-race");
  const std::string t = trace_in(dir, /*big=*/true);
  const std::string out = dir + "/bug.llmrr";
  for (int round = 0; round < 3; ++round) {
    std::vector<pid_t> pids;
    for (int k = 0; k < 3; ++k) {
      pids.push_back(spawn({"pack", t, "--redact", "--keep", std::to_string(k), "-q", "-o", out},
                           dir + "/pack" + std::to_string(k) + ".log"));
    }
    for (pid_t p : pids) {
      int status = 0;
      ASSERT_EQ(::waitpid(p, &status, 0), p);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
    // The last rename won, whole: every entry's hash and every trace in it verify.
    std::string msg;
    EXPECT_EQ(run_command(rtest::llmrr_binary() + " verify -q " + out, &msg, true), 0)
        << "round " << round << ": " << msg;
    EXPECT_EQ(with_piece(dir, ".llmrr-"), std::vector<std::string>{});
    EXPECT_EQ(with_piece(dir, ".tmp"), std::vector<std::string>{});
  }
}

TEST(Outputs, AFifoOrADeviceAsAnOutputIsRefusedAtOnce) {
  const std::string dir = fresh_dir("out-fifo");
  const std::string t = trace_in(dir);
  const std::string fifo = dir + "/out.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string bundle_msg;
  ASSERT_EQ(run_command(rtest::llmrr_binary() + " pack " + t + " -q -o " + dir + "/b.llmrr",
                        &bundle_msg, true),
            0)
      << bundle_msg;
  // Every writer; `timeout` turns a hang into exit 124 instead of a stuck CI job.
  for (const std::string& target : {fifo, std::string("/dev/null")}) {
    for (const std::string& args :
         {"record --model builtin:tiny-moe --prompt a --max-tokens 2 -o " + target,
          "pack " + t + " -o " + target, "pack " + t + " --redact --keep 0 -o " + target,
          "report " + t + " -o " + target, "export " + t + " --perfetto " + target,
          "export " + t + " --npy " + target, "unpack " + dir + "/b.llmrr -o " + target,
          "replay " + t + " --materialize L0.out@1 -o " + target,
          "fuzz --model builtin:tiny-moe --prompt a --runs 1 --out " + target}) {
      const double cpu0 = test::children_cpu_seconds();
      std::string out;
      const int rc =
          run_command("timeout 10 " + rtest::llmrr_binary() + " " + args + " </dev/null", &out, true);
      const double secs = test::children_cpu_seconds() - cpu0;
      EXPECT_EQ(rc, 2) << args << "\n" << out;
      EXPECT_NE(out.find(target), std::string::npos) << args << "\n" << out;
      // Refused before any work: the child's CPU time (a few hundred ms to start and load a
      // builtin model), not the wall clock, which measures the host; 124 above is the hang.
      EXPECT_LT(secs, 5.0) << args;
    }
  }
  struct stat st;
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(Outputs, SigtermDuringAWriteLeavesNoTemporary) {
  const std::string dir = fresh_dir("out-sigterm");
  const std::string t = trace_in(dir, /*big=*/true);
  const std::string out = dir + "/b.llmrr";
  rtest::write_file(out, "an older bundle");
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const pid_t pid = spawn({"pack", t, "--level", "19", "-q", "-o", out}, dir + "/pack.log");
    // Signalled once its temporary file exists: mid-write.
    bool seen = false;
    for (int i = 0; i < 3000 && !seen; ++i) {
      seen = !with_piece(dir, ".b.llmrr.llmrr-").empty();
      if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(seen) << "pack never started writing";
    ASSERT_EQ(::kill(pid, sig), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    // The default action, re-raised after the cleanup: the shell sees the signal.
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << " came after the write ended";
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_EQ(with_piece(dir, ".llmrr-"), std::vector<std::string>{}) << "signal " << sig;
    EXPECT_TRUE(rtest::read_file(out) == "an older bundle") << "signal " << sig;
  }
}

// fuzz --out fills its directory as the campaign runs (a split directory at a time): one it
// created is removed when a signal ends the run (tools/campaigns/outputs found it left, with
// split directories and no summary.json, after SIGINT, SIGTERM and SIGHUP).
TEST(Outputs, SignalDuringFuzzRemovesTheOutputDirectoryItCreated) {
  const std::string dir = fresh_dir("out-fuzz-signal");
  const std::string out = dir + "/fz";
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const pid_t pid = spawn({"fuzz", "--model", "builtin:tiny-moe", "--prompt", "a",
                             "--max-tokens", "8", "--runs", "100000", "-q", "--out", out},
                            dir + "/fuzz.log");
    struct stat st;
    bool seen = false;
    for (int i = 0; i < 6000 && !seen; ++i) {
      seen = ::stat(out.c_str(), &st) == 0;
      if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(seen) << "fuzz never created " << out << ": " << rtest::read_file(dir + "/fuzz.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // runs under way
    ASSERT_EQ(::kill(pid, sig), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << ": " << rtest::read_file(dir + "/fuzz.log");
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_NE(::lstat(out.c_str(), &st), 0) << "signal " << sig << ": " << out << " is left";
    EXPECT_EQ(names_in(dir), std::vector<std::string>{"fuzz.log"}) << "signal " << sig;
  }
}

TEST(Outputs, UnpackWritesNothingThroughALinkInTheOutputDirectory) {
  const std::string dir = fresh_dir("out-unpack-link");
  const std::string t = trace_in(dir);
  const std::string bundle = dir + "/b.llmrr";
  std::string msg;
  ASSERT_EQ(run_command(rtest::llmrr_binary() + " pack " + t + " -q -o " + bundle, &msg, true), 0)
      << msg;
  const std::string outside = fresh_dir("out-unpack-outside");
  rtest::write_file(outside + "/run.trace", "not a trace, and not to be replaced");
  const std::string target = dir + "/x";
  ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(outside.c_str(), (target + "/traces").c_str()), 0);
  const int rc = run_command(rtest::llmrr_binary() + " unpack " + bundle + " -o " + target, &msg, true);
  EXPECT_EQ(rc, 2) << msg;
  EXPECT_NE(msg.find("symbolic link"), std::string::npos) << msg;
  EXPECT_EQ(names_in(outside), std::vector<std::string>{"run.trace"});
  EXPECT_TRUE(rtest::read_file(outside + "/run.trace") == "not a trace, and not to be replaced");
  // Refused whole: not even manifest.json landed, and no staging directory is left.
  EXPECT_EQ(names_in(target), std::vector<std::string>{"traces"});
  EXPECT_EQ(with_piece(dir, ".llmrr-"), std::vector<std::string>{});
  // Without the link it extracts, and a second time over the first.
  ASSERT_EQ(::unlink((target + "/traces").c_str()), 0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(run_command(rtest::llmrr_binary() + " unpack " + bundle + " -o " + target, &msg, true), 0)
        << msg;
    EXPECT_TRUE(rtest::read_file(target + "/traces/run.trace") == rtest::read_file(t));
  }
  EXPECT_EQ(names_in(target), (std::vector<std::string>{"manifest.json", "traces"}));
}

}  // namespace
}  // namespace llmrr
