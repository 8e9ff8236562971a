#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <set>
#include <string>

#include "llmrr/safeio/cleanup.h"
#include "llmrr/safeio/input.h"
#include "llmrr/safeio/json.h"
#include "llmrr/safeio/output.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::temp_path;

// The names in a directory, "." and ".." left out; {"<missing>"} when it does not exist.
std::set<std::string> names_in(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return {"<missing>"};
  std::set<std::string> names;
  while (const struct dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.insert(n);
  }
  ::closedir(d);
  return names;
}

// A fresh, empty directory for one test.
std::string fresh_dir(const std::string& name) {
  const std::string d = temp_path(name);
  rtest::run_command("rm -rf '" + d + "'", nullptr);
  EXPECT_EQ(::mkdir(d.c_str(), 0777), 0) << d;
  return d;
}

TEST(Safeio, NonRegularFilesAreRefusedWithoutBlocking) {
  const std::string fifo = temp_path("safeio.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<std::string> r = safeio::read_file(fifo, 1 << 20, "trace");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().to_string().find("is a FIFO, expected a regular trace file") == std::string::npos, false)
      << r.status().to_string();
  EXPECT_FALSE(safeio::read_file("/dev/zero", 1 << 20, "requests file").ok());
  EXPECT_EQ(safeio::require_regular_file("/tmp", "model").code(), ErrorCode::kIsDirectory);
  EXPECT_EQ(safeio::require_regular_file(temp_path("nope"), "model").code(), ErrorCode::kNotFound);
}

TEST(Safeio, ReadsAreCapped) {
  const std::string p = temp_path("safeio.txt");
  rtest::write_file(p, std::string(1000, 'x'));
  EXPECT_TRUE(safeio::read_file(p, 1000, "file").ok());
  Result<std::string> r = safeio::read_file(p, 999, "file");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kResourceLimit);
}

TEST(Safeio, JsonDepthIsCappedBeforeParsing) {
  EXPECT_TRUE(safeio::parse_json(std::string(64, '[') + std::string(64, ']'), "x", ErrorCode::kBadModel).ok());
  Result<nlohmann::json> deep =
      safeio::parse_json(std::string(200000, '['), "x.json", ErrorCode::kBadModel);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().to_string().find("x.json: JSON nested deeper than 64 levels at byte 65"),
            std::string::npos)
      << deep.status().to_string();
  // Brackets inside strings do not count.
  EXPECT_TRUE(safeio::parse_json("\"" + std::string(1000, '[') + "\"", "x", ErrorCode::kBadModel).ok());
  Result<nlohmann::json> bad = safeio::parse_json("{\"a\": \xff}", "x", ErrorCode::kBadModel);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().to_string().find('\xff'), std::string::npos);
}

TEST(Safeio, TypedFieldsNameTheField) {
  nlohmann::json j = {{"format", 5}, {"redacted", "yes"}};
  Result<std::string> f = safeio::string_field(j, "format", "m.json", "");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().to_string().find("m.json: field \"format\" is an integer (5), expected a string"),
            std::string::npos)
      << f.status().to_string();
  EXPECT_FALSE(safeio::bool_field(j, "redacted", "m.json", false).ok());
  EXPECT_EQ(*safeio::bool_field(j, "missing", "m.json", true), true);
  // Invalid UTF-8 is replaced, never thrown.
  EXPECT_NO_THROW(safeio::dump(nlohmann::json(std::string("a\xff"))));
}

TEST(Safeio, OutputFileLeavesNothingUnlessCommitted) {
  const std::string p = temp_path("safeio-out.txt");
  ::unlink(p.c_str());
  {
    Result<safeio::OutputFile> f = safeio::OutputFile::create(p, "-o");
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_TRUE(f->write("half").ok());
    EXPECT_EQ(::access(f->temp_path().c_str(), F_OK), 0);
  }
  EXPECT_EQ(::access(p.c_str(), F_OK), -1);
  Result<safeio::OutputFile> f = safeio::OutputFile::create(p, "-o");
  ASSERT_TRUE(f.ok());
  const std::string temp = f->temp_path();
  ASSERT_TRUE(f->write("whole").ok());
  ASSERT_TRUE(f->commit().ok());
  EXPECT_EQ(rtest::read_file(p), "whole");
  EXPECT_EQ(::access(temp.c_str(), F_OK), -1);
}

TEST(Safeio, OutputChecks) {
  const std::string in = temp_path("safeio-in.trace");
  rtest::write_file(in, "x");
  const std::string link = temp_path("safeio-in-link.trace");
  ::unlink(link.c_str());
  ASSERT_EQ(::link(in.c_str(), link.c_str()), 0);
  EXPECT_FALSE(safeio::check_output_file(in, "-o", {in}).ok());
  EXPECT_FALSE(safeio::check_output_file(link, "-o", {in}).ok());  // same inode, other name
  EXPECT_TRUE(safeio::check_output_file(temp_path("safeio-new.trace"), "-o", {in}).ok());
  Status missing = safeio::check_output_file(temp_path("no-such-dir/x.trace"), "-o", {});
  EXPECT_NE(missing.to_string().find("does not exist"), std::string::npos);
  EXPECT_NE(safeio::check_output_file("", "-o", {}).to_string().find("the path is empty"),
            std::string::npos);
  EXPECT_FALSE(safeio::check_output_dir(temp_path("no-such-dir/out"), "--npy", {}).ok());
  EXPECT_TRUE(safeio::check_output_dir(temp_path("new-out-dir"), "--npy", {}).ok());
}

TEST(Safeio, OutputDirLandsWholeOrNotAtAll) {
  const std::string parent = fresh_dir("safeio-outdir");
  const std::string out = parent + "/out";
  {
    // Written, then dropped without commit (a failure midway): nothing is left anywhere.
    Result<safeio::OutputDir> d = safeio::OutputDir::create(out, "--npy", {});
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(safeio::dir_of(d->write_path()), parent);
    rtest::write_file(d->write_path() + "/a.npy", "a");
    EXPECT_EQ(d->final_path(d->write_path() + "/a.npy"), out + "/a.npy");
    const Status named = d->in_final_terms(
        make_error(ErrorCode::kIo, d->write_path() + "/a.npy: write failed"));
    EXPECT_EQ(named.message(), out + "/a.npy: write failed");
  }
  EXPECT_EQ(names_in(parent), std::set<std::string>{});
  {
    // Committed: the directory appears with its files, and no staging directory stays.
    Result<safeio::OutputDir> d = safeio::OutputDir::create(out, "--npy", {});
    ASSERT_TRUE(d.ok());
    rtest::write_file(d->write_path() + "/a.npy", "a");
    rtest::write_file(d->write_path() + "/b.npy", "b");
    ASSERT_TRUE(d->commit().ok());
  }
  EXPECT_EQ(names_in(parent), std::set<std::string>{"out"});
  EXPECT_EQ(names_in(out), (std::set<std::string>{"a.npy", "b.npy"}));
  struct stat st;
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0777 & ~mask);  // as mkdir would make it, not mkdtemp's 0700
  {
    // Into an existing directory: staged inside it, dropped without a trace on failure.
    Result<safeio::OutputDir> d = safeio::OutputDir::create(out, "--npy", {});
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(safeio::dir_of(d->write_path()), out);
    rtest::write_file(d->write_path() + "/c.npy", "c");
  }
  EXPECT_EQ(names_in(out), (std::set<std::string>{"a.npy", "b.npy"}));
  {
    // ... and on success its files join the ones there (a file of the same name is replaced).
    Result<safeio::OutputDir> d = safeio::OutputDir::create(out, "--npy", {});
    ASSERT_TRUE(d.ok());
    rtest::write_file(d->write_path() + "/a.npy", "A");
    rtest::write_file(d->write_path() + "/c.npy", "c");
    ASSERT_TRUE(d->commit().ok());
  }
  EXPECT_EQ(names_in(out), (std::set<std::string>{"a.npy", "b.npy", "c.npy"}));
  EXPECT_EQ(rtest::read_file(out + "/a.npy"), "A");
  {
    // A staged file that would replace an input: refused at commit, before any file moves.
    const std::string input = out + "/b.npy";
    Result<safeio::OutputDir> d = safeio::OutputDir::create(out, "--npy", {input});
    ASSERT_TRUE(d.ok());
    rtest::write_file(d->write_path() + "/a.npy", "new");
    rtest::write_file(d->write_path() + "/b.npy", "new");
    const Status st = d->commit();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("never overwrites its input"), std::string::npos) << st.message();
  }
  EXPECT_EQ(names_in(out), (std::set<std::string>{"a.npy", "b.npy", "c.npy"}));
  EXPECT_EQ(rtest::read_file(out + "/a.npy"), "A");
  EXPECT_EQ(rtest::read_file(out + "/b.npy"), "b");
  // The directory is checked like any output directory before anything is created.
  EXPECT_FALSE(safeio::OutputDir::create(parent + "/missing/out", "--npy", {}).ok());
  EXPECT_FALSE(safeio::OutputDir::create(out + "/a.npy", "--npy", {}).ok());
  EXPECT_FALSE(safeio::OutputDir::create(out, "--npy", {out}).ok());
  EXPECT_EQ(names_in(parent), std::set<std::string>{"out"});
}

// Each writer its own temporary: two OutputFiles for one path never share a name, a FIFO
// or a device at the path is refused without being opened, and a link planted at a name
// a writer then opens by path (open_for_writing) is not followed.
TEST(Safeio, OutputFilesAreUniqueAndNeverOpenAFifoOrALink) {
  const std::string dir = fresh_dir("safeio-unique");
  const std::string p = dir + "/out.bin";
  Result<safeio::OutputFile> a = safeio::OutputFile::create(p, "-o");
  Result<safeio::OutputFile> b = safeio::OutputFile::create(p, "-o");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->temp_path(), b->temp_path());
  ASSERT_TRUE(a->write("first").ok());
  ASSERT_TRUE(b->write("second, longer").ok());
  ASSERT_TRUE(a->commit().ok());
  ASSERT_TRUE(b->commit().ok());
  EXPECT_EQ(rtest::read_file(p), "second, longer");  // the last rename wins, whole
  EXPECT_EQ(names_in(dir), std::set<std::string>{"out.bin"});

  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/null")}) {
    Result<safeio::OutputFile> f = safeio::OutputFile::create(path, "-o");
    ASSERT_FALSE(f.ok()) << path;
    EXPECT_EQ(f.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
    EXPECT_FALSE(safeio::check_output_file(path, "-o", {}).ok()) << path;
  }

  const std::string victim = dir + "/victim";
  rtest::write_file(victim, "keep");
  const std::string planted = dir + "/planted";
  ASSERT_EQ(::symlink(victim.c_str(), planted.c_str()), 0);
  errno = 0;
  EXPECT_EQ(safeio::open_for_writing(planted), nullptr);
  EXPECT_EQ(errno, ELOOP);
  EXPECT_EQ(rtest::read_file(victim), "keep");
  std::FILE* f = safeio::open_for_writing(dir + "/plain");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
}

// The cleanup handler: a process killed by SIGTERM (or SIGINT, SIGHUP, SIGXFSZ) while it
// holds temporaries removes them (a staging directory with everything in it, a link inside
// removed and not followed) and still dies of the signal.
TEST(Safeio, ASignalRemovesLiveTemporariesAndStillKills) {
  const std::string dir = fresh_dir("safeio-signal");
  const std::string outside = fresh_dir("safeio-signal-outside");
  rtest::write_file(outside + "/keep", "keep");
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGXFSZ}) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      for (int s : {SIGTERM, SIGINT, SIGHUP, SIGXFSZ}) std::signal(s, SIG_DFL);
      const struct rlimit no_core = {0, 0};
      ::setrlimit(RLIMIT_CORE, &no_core);  // SIGXFSZ's default action dumps core
      Result<safeio::OutputFile> f = safeio::OutputFile::create(dir + "/out.bin", "-o");
      Result<safeio::OutputDir> d = safeio::OutputDir::create(dir + "/tree", "-o", {});
      if (!f.ok() || !d.ok()) ::_exit(3);
      (void)f->write("partial");
      std::fflush(f->file());
      Result<int> fd = d->create_file("a/b/c.npy");
      if (!fd.ok()) ::_exit(4);
      ::close(*fd);
      if (::symlink(outside.c_str(), (d->write_path() + "/a/link").c_str()) != 0) ::_exit(5);
      (void)!::write(ready[1], "x", 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c;
    ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the child could not set up";
    ::close(ready[0]);
    ASSERT_EQ(::kill(pid, sig), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << sig;
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_EQ(names_in(dir), std::set<std::string>{}) << "signal " << sig;
    EXPECT_EQ(names_in(outside), std::set<std::string>{"keep"});
  }
}

// unpack's way in: files created through directory handles, and a commit into an existing
// directory that finds a link where a directory goes refuses before anything moves.
TEST(Safeio, OutputDirNeverWritesThroughALinkItFinds) {
  const std::string parent = fresh_dir("safeio-outdir-link");
  const std::string outside = fresh_dir("safeio-outdir-outside");
  const std::string out = parent + "/out";
  ASSERT_EQ(::mkdir(out.c_str(), 0777), 0);
  ASSERT_EQ(::symlink(outside.c_str(), (out + "/traces").c_str()), 0);
  {
    Result<safeio::OutputDir> d = safeio::OutputDir::create(out, "-o", {});
    ASSERT_TRUE(d.ok());
    for (const char* name : {"traces/a.trace", "manifest.json"}) {
      Result<int> fd = d->create_file(name);
      ASSERT_TRUE(fd.ok()) << fd.status().to_string();
      EXPECT_EQ(::write(*fd, "x", 1), 1);
      ::close(*fd);
    }
    EXPECT_FALSE(d->create_file("manifest.json").ok());  // O_EXCL: never written twice
    EXPECT_FALSE(d->create_file("../escape").ok());
    const Status st = d->commit();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("symbolic link"), std::string::npos) << st.message();
  }
  EXPECT_EQ(names_in(outside), std::set<std::string>{});
  EXPECT_EQ(names_in(out), std::set<std::string>{"traces"});  // not even manifest.json
  // safeio::remove_tree removes a link, never what it names.
  ASSERT_EQ(::mkdir((parent + "/t").c_str(), 0777), 0);
  ASSERT_EQ(::symlink(outside.c_str(), (parent + "/t/link").c_str()), 0);
  rtest::write_file(outside + "/keep", "keep");
  EXPECT_TRUE(safeio::remove_tree((parent + "/t").c_str()));
  EXPECT_EQ(names_in(parent), std::set<std::string>{"out"});
  EXPECT_EQ(rtest::read_file(outside + "/keep"), "keep");
}

}  // namespace
}  // namespace llmrr
