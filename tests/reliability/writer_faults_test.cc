// TraceWriter under faults a device injects into its own system calls (fault_inject.c,
// preloaded into a child process running this binary with --child): what the API returns,
// which files are left, and what the footer says. The campaign (tools/campaigns/reliability) checks the
// same faults through `llmrr record`; these pin what the CLI cannot show: a file that was there
// before is never removed, a producer's own lossy reason is kept over a later close error, the
// rewritten footer agrees with the clean one in everything but the lossy flag, and the
// injection touches nothing but the matching file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "test_util.h"

extern char** environ;

namespace llmrr::trace {
namespace {

using namespace testing;

std::vector<StepRecord> sample_steps() {
  return sorted_plans(SampleRun(4, 8, 30).all());
}

// ---- the child: writes one trace (and optionally a second, unfaulted one) -------------------

// Prints what the writer returned, one "key value" line each, on stdout.
int child_main(int argc, char** argv) {
  std::string path, also, lossy;
  WriterOptions opt;
  opt.max_steps_per_chunk = 4;  // many frames
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--sync")
      opt.sync_on_close = true;
    else if (a == "--lossy" && i + 1 < argc)
      lossy = argv[++i];
    else if (a == "--also" && i + 1 < argc)
      also = argv[++i];
    else
      path = a;
  }
  auto write_one = [&](const std::string& p, const char* tag) {
    auto w = TraceWriter::open(p, opt);
    std::printf("%s.open %d %s\n", tag, static_cast<int>(w.status().code()),
                w.status().message().c_str());
    if (!w.ok()) return;
    Status st = (*w)->append_run_header(sample_header());
    int accepted = 0;
    for (const StepRecord& s : sample_steps()) {
      if (!st.ok()) break;
      st = (*w)->append_step(s);
      if (st.ok()) ++accepted;
    }
    if (!lossy.empty()) (*w)->mark_lossy(lossy);
    Status closed = (*w)->close();
    std::printf("%s.steps %d\n%s.close %d %s\n%s.again %d\n", tag, accepted, tag,
                static_cast<int>(closed.code()), closed.message().c_str(), tag,
                static_cast<int>((*w)->close().code()));
  };
  write_one(path, "a");
  if (!also.empty()) write_one(also, "b");
  std::fflush(stdout);
  return 0;
}

// ---- the parent -------------------------------------------------------------------------

struct Child {
  int exit_code = -1;
  std::map<std::string, std::string> out;  // "a.close" → "200 path: ..."
  std::string text;                        // stdout and stderr, as they came
  int code(const std::string& key) const {
    auto it = out.find(key);
    return it == out.end() ? -1 : std::atoi(it->second.c_str());
  }
  std::string message(const std::string& key) const {
    auto it = out.find(key);
    if (it == out.end()) return "";
    size_t sp = it->second.find(' ');
    return sp == std::string::npos ? "" : it->second.substr(sp + 1);
  }
};

Child run_child(const std::vector<std::string>& env, const std::vector<std::string>& args) {
  Child c;
  int fds[2];
  if (::pipe(fds) != 0) return c;
  std::vector<std::string> envs;
  // Under ASan its runtime wants to be the first library loaded; the preloaded one is.
  std::string asan = "ASAN_OPTIONS=verify_asan_link_order=0";
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "ASAN_OPTIONS=", 13) == 0)
      asan = std::string(*e) + ":verify_asan_link_order=0";
    else if (std::strncmp(*e, "LLMRR_FAULT_", 12) != 0 && std::strncmp(*e, "LD_PRELOAD=", 11) != 0)
      envs.emplace_back(*e);
  }
  envs.push_back(asan);
  envs.push_back(std::string("LD_PRELOAD=") + LLMRR_FAULT_LIB);
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<std::string> argv_s = {"writer_faults_test", "--child"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv, envp;
  for (std::string& s : argv_s) argv.push_back(s.data());
  for (std::string& s : envs) envp.push_back(s.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execve("/proc/self/exe", argv.data(), envp.data());
    std::_Exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) c.text.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  c.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  size_t at = 0;
  while (at < c.text.size()) {
    size_t end = c.text.find('\n', at);
    if (end == std::string::npos) end = c.text.size();
    std::string line = c.text.substr(at, end - at);
    at = end + 1;
    size_t sp = line.find(' ');
    if (line.rfind("a.", 0) == 0 || line.rfind("b.", 0) == 0)
      c.out[line.substr(0, sp)] = sp == std::string::npos ? "" : line.substr(sp + 1);
  }
  return c;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

int injected(const Child& c) {
  int n = 0;
  for (size_t at = 0; (at = c.text.find("llmrr_fault_inject: ", at)) != std::string::npos; ++at)
    ++n;
  return n;
}

TEST(WriterFaults, InjectionTouchesOnlyTheMatchingFile) {
  TempFile a("fault_a"), b("fault_b");
  // Every write to a fails; b, stdout and stderr are written as usual.
  Child c = run_child({"LLMRR_FAULT_PATH=" + a.path}, {a.path, "--also", b.path});
  ASSERT_EQ(c.exit_code, 0) << c.text;
  EXPECT_EQ(c.code("a.open"), static_cast<int>(ErrorCode::kIo)) << c.text;
  EXPECT_NE(c.message("a.open").find("Input/output error"), std::string::npos) << c.text;
  EXPECT_NE(c.message("a.open").find(a.path), std::string::npos) << c.text;
  EXPECT_EQ(injected(c), 1) << c.text;
  EXPECT_FALSE(exists(a.path));
  EXPECT_EQ(c.code("b.close"), 0) << c.text;
  auto r = TraceReader::open(b.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE((*r)->lossy());
  std::vector<StepRecord> got;
  ASSERT_TRUE(read_all(**r, &got).ok());
  EXPECT_EQ(got, sample_steps());
}

TEST(WriterFaults, FileHeaderErrorRemovesOnlyAFileItCreated) {
  TempFile f("fault_header");
  Child fresh = run_child({"LLMRR_FAULT_PATH=" + f.path, "LLMRR_FAULT_ERRNO=ENOSPC"}, {f.path});
  EXPECT_EQ(fresh.code("a.open"), static_cast<int>(ErrorCode::kIo)) << fresh.text;
  EXPECT_NE(fresh.message("a.open").find("No space left on device"), std::string::npos);
  EXPECT_FALSE(exists(f.path)) << "a file the writer created and could not start stays behind";

  // A file that was there before (it could be anything the caller named) is never removed.
  std::FILE* old = std::fopen(f.path.c_str(), "w");
  ASSERT_NE(old, nullptr);
  std::fputs("not a trace\n", old);
  std::fclose(old);
  Child existing = run_child({"LLMRR_FAULT_PATH=" + f.path}, {f.path});
  EXPECT_EQ(existing.code("a.open"), static_cast<int>(ErrorCode::kIo)) << existing.text;
  EXPECT_TRUE(exists(f.path));
}

TEST(WriterFaults, RunHeaderFrameErrorLeavesNoFile) {
  TempFile f("fault_run_header");
  // Call 1 is the file header (written by open), call 2 the run header frame.
  Child c = run_child(
      {"LLMRR_FAULT_PATH=" + f.path, "LLMRR_FAULT_AT_CALL=2", "LLMRR_FAULT_TIMES=1"}, {f.path});
  ASSERT_EQ(c.code("a.open"), 0) << c.text;
  EXPECT_EQ(c.code("a.close"), static_cast<int>(ErrorCode::kIo)) << c.text;
  EXPECT_NE(c.message("a.close").find("run header"), std::string::npos) << c.text;
  EXPECT_EQ(c.code("a.again"), static_cast<int>(ErrorCode::kIo));
  EXPECT_FALSE(exists(f.path)) << "a file with no run header is no trace";
}

// The clean trace of the child's steps: what a rewritten footer must agree with.
struct Clean {
  TempFile file{"fault_clean"};
  std::unique_ptr<TraceReader> reader;
  Clean() {
    Child c = run_child({}, {file.path});
    EXPECT_EQ(c.code("a.close"), 0) << c.text;
    auto r = TraceReader::open(file.path);
    if (r.ok()) reader = std::move(*r);
  }
};

void expect_same_but_lossy(const TraceReader& got, const TraceReader& clean,
                           const std::string& reason) {
  EXPECT_TRUE(got.has_footer());
  EXPECT_TRUE(got.complete());
  EXPECT_TRUE(got.lossy());
  EXPECT_NE(got.lossy_reason().find(reason), std::string::npos) << got.lossy_reason();
  EXPECT_EQ(got.step_count(), clean.step_count());
  EXPECT_EQ(got.token_count(), clean.token_count());
  EXPECT_EQ(got.frames().size(), clean.frames().size());
  Status v = got.verify();
  EXPECT_TRUE(v.ok()) << v.to_string();
}

TEST(WriterFaults, FsyncErrorRewritesTheFooterAsLossy) {
  Clean clean;
  ASSERT_NE(clean.reader, nullptr);
  TempFile f("fault_fsync");
  // Without sync_on_close there is no fsync to fail.
  Child nosync = run_child({"LLMRR_FAULT_PATH=" + f.path, "LLMRR_FAULT_OP=fsync"}, {f.path});
  EXPECT_EQ(nosync.code("a.close"), 0) << nosync.text;
  EXPECT_EQ(injected(nosync), 0);

  Child c = run_child({"LLMRR_FAULT_PATH=" + f.path, "LLMRR_FAULT_OP=fsync", "LLMRR_FAULT_TIMES=1"},
                      {f.path, "--sync"});
  EXPECT_EQ(c.code("a.close"), static_cast<int>(ErrorCode::kIo)) << c.text;
  EXPECT_NE(c.message("a.close").find("fsync: Input/output error"), std::string::npos) << c.text;
  EXPECT_EQ(c.code("a.again"), static_cast<int>(ErrorCode::kIo)) << "close() is idempotent";
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_same_but_lossy(**r, *clean.reader, "fsync: Input/output error");
  std::vector<StepRecord> got;
  ASSERT_TRUE(read_all(**r, &got).ok());
  EXPECT_EQ(got, sample_steps());
}

TEST(WriterFaults, CloseErrorRewritesTheFooterThroughAReopen) {
  Clean clean;
  ASSERT_NE(clean.reader, nullptr);
  TempFile f("fault_close");
  Child c = run_child({"LLMRR_FAULT_PATH=" + f.path, "LLMRR_FAULT_OP=close", "LLMRR_FAULT_TIMES=1"},
                      {f.path});
  EXPECT_EQ(c.code("a.close"), static_cast<int>(ErrorCode::kIo)) << c.text;
  EXPECT_NE(c.message("a.close").find("close: Input/output error"), std::string::npos) << c.text;
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_same_but_lossy(**r, *clean.reader, "close: Input/output error");
}

TEST(WriterFaults, ALossyReasonGivenEarlierIsKeptOverACloseError) {
  TempFile f("fault_first_reason");
  Child c = run_child({"LLMRR_FAULT_PATH=" + f.path, "LLMRR_FAULT_OP=fsync,close"},
                      {f.path, "--sync", "--lossy", "producer dropped 3 records"});
  EXPECT_EQ(c.code("a.close"), static_cast<int>(ErrorCode::kIo)) << c.text;
  EXPECT_NE(c.message("a.close").find("fsync"), std::string::npos) << c.text;
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE((*r)->lossy());
  EXPECT_EQ((*r)->lossy_reason(), "producer dropped 3 records");
  EXPECT_TRUE((*r)->verify().ok());
}

}  // namespace
}  // namespace llmrr::trace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--child") == 0) return llmrr::trace::child_main(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
