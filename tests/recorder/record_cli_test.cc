// `llmrr record` end to end: stdout as `llmrr run`, exit codes, a run header that describes
// the engine completely, requests files, what a record that fails, is killed or is
// interrupted leaves at -o and beside it, and the trace tools (inspect / verify / dump) on
// what it wrote.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "llmrr/format/trace_reader.h"
#include "recorder_test_util.h"

namespace llmrr::rectest {
namespace {

struct CliResult {
  int rc = -1;
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `llmrr <args>` (through /bin/sh, after `prefix`, e.g. a ulimit).
CliResult llmrr(const std::vector<std::string>& args, const std::string& prefix = "") {
  const std::string out = temp_path("stdout"), err = temp_path("stderr");
  // Appended piece by piece: g++ 12 warns (-Wrestrict, a false positive) on `"literal" + string`.
  std::string cmd = prefix;
  cmd += " exec ";
  cmd += quote(LLMRR_BIN);
  for (const std::string& a : args) {
    cmd += ' ';
    cmd += quote(a);
  }
  cmd += " >";
  cmd += quote(out);
  cmd += " 2>";
  cmd += quote(err);
  CliResult r;
  std::string shell = "/bin/sh -c ";
  shell += quote(cmd);
  int status = std::system(shell.c_str());
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

bool has_command(const std::string& name) {
  static const std::string help = llmrr({"--help"}).out;
  return help.find("  " + name + "\n") != std::string::npos;
}

const std::vector<std::string> kEngine = {
    "--model", "builtin:tiny-moe", "--prompt", "The quick brown fox", "--max-tokens",
    "12",      "--load",           "3",        "--threads",           "1"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(RecordCli, StdoutIsTheRunsTextAndTheTraceIsComplete) {
  const std::string path = temp_path("cli.trace");
  CliResult rec = llmrr(with(with({"record"}, kEngine), {"--capture", "all", "-o", path}));
  ASSERT_EQ(rec.rc, 0) << rec.err;
  CliResult run = llmrr(with({"run"}, kEngine));
  ASSERT_EQ(run.rc, 0) << run.err;
  EXPECT_EQ(rec.out, run.out);
  EXPECT_GT(rec.out.size(), 1u);
  // The closing summary: steps, tokens, size, bytes per token.
  EXPECT_NE(rec.err.find(" steps, "), std::string::npos) << rec.err;
  EXPECT_NE(rec.err.find(" tokens, "), std::string::npos) << rec.err;
  EXPECT_NE(rec.err.find("bytes/token"), std::string::npos) << rec.err;
  EXPECT_EQ(rec.err.find("\r"), std::string::npos) << "no progress bar when stderr is a file";

  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->complete());
  EXPECT_FALSE(reader->lossy());
  EXPECT_EQ(reader->requests().size(), 4u);
  Status v = reader->verify();
  EXPECT_TRUE(v.ok()) << v.to_string();

  if (has_command("inspect")) {
    CliResult ins = llmrr({"inspect", path});
    EXPECT_EQ(ins.rc, 0) << ins.err;
    EXPECT_NE(ins.out.find("builtin:tiny-moe"), std::string::npos) << ins.out;
  }
  if (has_command("verify")) {
    CliResult ver = llmrr({"verify", path});
    EXPECT_EQ(ver.rc, 0) << ver.out << ver.err;
  }
  if (has_command("dump")) {
    CliResult dump = llmrr({"dump", path, "--json"});
    EXPECT_EQ(dump.rc, 0) << dump.err;
    EXPECT_GT(dump.out.size(), 100u);
  }
}

// With stderr on a terminal (and stdout not), a progress bar is drawn and erased; under
// script(1) stderr is a pseudo-terminal.
TEST(RecordCli, ProgressBarOnATerminal) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1)";
  const std::string path = temp_path("pty.trace"), text = temp_path("pty.txt");
  std::string inner = quote(LLMRR_BIN) + " record --model builtin:tiny-moe --prompt hello " +
                      "--max-tokens 12 -o " + quote(path) + " > " + quote(text);
  const std::string pty = temp_path("pty.out");
  const std::string cmd = "script -qec " + quote(inner) + " /dev/null > " + quote(pty) + " 2>&1";
  ASSERT_EQ(std::system(("/bin/sh -c " + quote(cmd)).c_str()), 0);
  const std::string out = slurp(pty);
  EXPECT_NE(out.find("\r\033[K["), std::string::npos) << "no progress bar drawn: " << out;
  EXPECT_NE(out.find(" tokens, "), std::string::npos);
  EXPECT_NE(out.find("bytes/token"), std::string::npos) << "summary after the bar";
  EXPECT_GT(slurp(text).size(), 1u) << "stdout still carries the text";
}

// The header alone says how to rebuild the engine.
TEST(RecordCli, RunHeaderDescribesTheEngineCompletely) {
  const std::string path = temp_path("header.trace");
  CliResult rec = llmrr({"record",
                         "--model",
                         "builtin:tiny-moe",
                         "--prompt",
                         "Hello",
                         "--max-tokens",
                         "4",
                         "--load",
                         "2",
                         "--seed",
                         "5",
                         "--threads",
                         "2",
                         "--sms",
                         "64",
                         "--blocks-per-sm",
                         "3",
                         "--max-batch-tokens",
                         "128",
                         "--max-seqs",
                         "8",
                         "--prefill-chunk",
                         "32",
                         "--kv-block",
                         "8",
                         "--capacity-factor",
                         "1.25",
                         "--overflow",
                         "reroute",
                         "--atomics",
                         "--dtype",
                         "bf16",
                         "--scoring",
                         "sigmoid",
                         "--attn-split",
                         "96",
                         "--capture",
                         "none",
                         "--logits",
                         "full",
                         "--logits-top-k",
                         "7",
                         "-o",
                         path});
  ASSERT_EQ(rec.rc, 0) << rec.err;
  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  const trace::RunHeader& h = reader->run_header();
  EXPECT_FALSE(h.tool_version.empty());
  EXPECT_FALSE(h.run_id.empty());
  EXPECT_GT(h.created_unix_ns, 0);
  EXPECT_FALSE(h.host.hostname.empty());
  EXPECT_FALSE(h.host.os.empty());
  EXPECT_GT(h.host.cores, 0);
  EXPECT_TRUE(h.host.isa == "avx2" || h.host.isa == "avx512" || !h.host.isa.empty()) << h.host.isa;
  EXPECT_EQ(h.device.kind, "cpu");
  EXPECT_NE(h.command_line.find("record"), std::string::npos);
  EXPECT_NE(h.command_line.find("--capacity-factor 1.25"), std::string::npos) << h.command_line;

  const LoadedModel& m = builtin("tiny-moe");
  EXPECT_EQ(h.model.name, m.identity);
  EXPECT_EQ(h.model.path, "builtin:tiny-moe");
  EXPECT_EQ(h.model.architecture, "mixtral");
  char hash[40];
  std::snprintf(hash, sizeof hash, "xxh3-64:%016llx",
                static_cast<unsigned long long>(m.weight_hash));
  EXPECT_EQ(h.model.weight_hash, hash);
  EXPECT_EQ(h.model.weight_dtype, "bf16");
  EXPECT_EQ(h.model.compute_dtype, "bf16");
  EXPECT_EQ(h.model.layers, m.config.layers);
  EXPECT_EQ(h.model.hidden, m.config.hidden);
  EXPECT_EQ(h.model.vocab, m.config.vocab);
  EXPECT_EQ(h.model.heads, m.config.heads);
  EXPECT_EQ(h.model.kv_heads, m.config.kv_heads);
  EXPECT_EQ(h.model.experts, m.config.experts);
  EXPECT_EQ(h.model.experts_per_token, m.config.top_k);

  const trace::EngineConfig& e = h.engine;
  EXPECT_EQ(e.policy, "production+atomics");
  EXPECT_TRUE(e.atomics);
  EXPECT_EQ(e.virtual_sms, 64);
  EXPECT_EQ(e.blocks_per_sm, 3);
  EXPECT_EQ(e.threads, 2);
  EXPECT_EQ(e.max_batch_tokens, 128);
  EXPECT_EQ(e.max_seqs, 8);
  EXPECT_EQ(e.prefill_chunk, 32);
  EXPECT_EQ(e.kv_block_size, 8);
  EXPECT_EQ(e.capacity_factor, 1.25f);
  EXPECT_EQ(e.overflow, trace::OverflowPolicy::kNextBest);
  EXPECT_EQ(e.seed, 5u);
  EXPECT_EQ(e.load, 2);
  EXPECT_EQ(e.capture, trace::CaptureLevel::kNone);
  EXPECT_EQ(e.logits_mode, trace::LogitsMode::kFull);
  EXPECT_EQ(e.top_k, 7);

  nlohmann::json x = nlohmann::json::parse(h.extra_config_json, nullptr, false);
  ASSERT_TRUE(x.is_object()) << h.extra_config_json;
  EXPECT_EQ(x.value("attn_split", 0), 96);
  EXPECT_EQ(x.value("dtype", ""), "bf16");
  EXPECT_EQ(x.value("weight_type", ""), "bf16");
  EXPECT_EQ(x.value("bf16_activations", false), true);
  EXPECT_EQ(x.value("scoring", ""), "sigmoid");
  EXPECT_EQ(x.value("overflow", ""), "reroute");
  EXPECT_EQ(x.value("capacity_factor", 0.0), 1.25);
  EXPECT_TRUE(x.contains("chat_template"));
  ASSERT_TRUE(x.contains("engine_options"));
  EXPECT_EQ(x["engine_options"].value("sms", 0), 64);
  EXPECT_EQ(x["engine_options"].value("policy", ""), "production");
  ASSERT_TRUE(x.contains("recorder"));
  EXPECT_EQ(x["recorder"].value("capture", ""), "none");
  EXPECT_EQ(x["recorder"].value("logits_top_k", 0), 7);

  // The recorded logits follow --logits full / --logits-top-k.
  trace::StepRecord s;
  ASSERT_TRUE(reader->read_step(reader->first_step(), &s).ok());
  ASSERT_FALSE(s.logits.empty());
  EXPECT_EQ(s.logits[0].top_ids.size(), 7u);
  EXPECT_GE(s.logits[0].blob, 0);
  EXPECT_TRUE(s.rows.empty());
}

TEST(RecordCli, RequestsFile) {
  const std::string reqs = temp_path("reqs.jsonl");
  {
    std::ofstream out(reqs);
    out << "{\"id\": 10, \"prompt\": \"Once upon\", \"max_tokens\": 5}\n"
        << "{\"id\": 3, \"prompt\": \"Hello\", \"max_tokens\": 6, \"label\": \"target\", "
           "\"arrival_step\": 1}\n"
        << "{\"id\": 4, \"prompt_ids\": [72, 105], \"temperature\": 0.7, \"seed\": 2}\n";
  }
  const std::string path = temp_path("reqs.trace");
  CliResult rec = llmrr(
      {"record", "--model", "builtin:tiny-moe", "--requests", reqs, "--load", "2", "-o", path});
  ASSERT_EQ(rec.rc, 0) << rec.err;
  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  ASSERT_EQ(reader->requests().size(), 5u);
  std::map<uint64_t, trace::RequestSummary> by_id;
  for (const auto& r : reader->requests()) by_id[r.id] = r;
  ASSERT_TRUE(by_id.count(10) && by_id.count(3) && by_id.count(4));
  EXPECT_TRUE(by_id.count(11) && by_id.count(12)) << "load ids follow the file's";
  EXPECT_EQ(by_id[3].generated, 6);
  EXPECT_EQ(by_id[3].label, "target");
  EXPECT_GE(by_id[3].arrival_step, 1);
  // Stdout is the target's text (request 3): as `llmrr run` prints it for the same prompt
  // alone only if the batch does not change it, so check its length in bytes instead.
  EXPECT_EQ(rec.out.size(), 6u + 1u) << rec.out;  // byte tokenizer: 6 bytes + newline
}

struct BadFile {
  const char* name;
  const char* content;
  const char* expected;
};

TEST(RecordCli, RequestsFileErrorsExit2WithLineAndField) {
  const BadFile cases[] = {
      {"bad_json", "{\"prompt\": \"a\"}\n{\"prompt\": \"b\",}\n", ":2: not valid JSON"},
      {"missing", "{\"prompt\": \"a\"}\n{\"id\": 9}\n", ":2: missing field 'prompt'"},
      {"wrong_type", "{\"prompt\": \"a\", \"max_tokens\": \"ten\"}\n",
       ":1: field 'max_tokens': expected an integer >= 1, found \"ten\""},
      {"reused_id", "{\"id\": 2, \"prompt\": \"a\"}\n{\"id\": 2, \"prompt\": \"b\"}\n",
       ":2: field 'id': id 2 is already used on line 1"},
  };
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string reqs = temp_path(std::string(c.name) + ".jsonl");
    {
      std::ofstream out(reqs);
      out << c.content;
    }
    const std::string path = temp_path(std::string(c.name) + ".trace");
    CliResult r = llmrr({"record", "--model", "builtin:tiny-moe", "--requests", reqs, "-o", path});
    EXPECT_EQ(r.rc, 2) << r.err;
    EXPECT_NE(r.err.find(reqs + c.expected), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("bad_request (126)"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
    std::ifstream probe(path);
    EXPECT_FALSE(probe.good()) << "no trace is written for a bad requests file";
  }
  CliResult missing = llmrr({"record", "--model", "builtin:tiny-moe", "--requests",
                             temp_path("none.jsonl"), "-o", temp_path("x.trace")});
  EXPECT_EQ(missing.rc, 2);
  EXPECT_NE(missing.err.find("not_found"), std::string::npos) << missing.err;
}

TEST(RecordCli, UsageErrorsExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {"record", "--model", "builtin:tiny-moe", "--prompt", "a"},  // no -o
      {"record", "--model", "builtin:tiny-moe", "--prompt", "a", "--capture", "some", "-o", "x"},
      {"record", "--model", "builtin:tiny-moe", "--prompt", "a", "--logits", "all", "-o", "x"},
      {"record", "--model", "builtin:tiny-moe", "--prompt", "a", "--logits-top-k", "-1", "-o", "x"},
      {"record", "--model", "builtin:tiny-moe", "--prompt", "a", "--requests", "r.jsonl", "-o",
       "x"},
      {"record", "--model", "builtin:tiny-moe", "--prompt", "a", "--policy", "fast", "-o", "x"},
      {"record", "--model", "builtin:nope", "--prompt", "a", "-o", "x"},
      {"record", "--model", "builtin:tiny-moe", "--prompt", "a", "--reference",
       "/nonexistent.trace", "-o", "x"},
      {"record", "--bogus"},
  };
  for (const auto& args : cases) {
    CliResult r = llmrr(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.rc, 2) << joined << "\n" << r.err;
    EXPECT_FALSE(r.err.empty()) << joined;
  }
  CliResult help = llmrr({"record", "--help"});
  EXPECT_EQ(help.rc, 0);
  EXPECT_NE(help.out.find("--requests"), std::string::npos);
  EXPECT_NE(help.out.find("--capture"), std::string::npos);
}

// Files in the directory of `path` whose name starts with its name and ".partial-".
std::vector<std::string> partials_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = path.substr(0, slash), base = path.substr(slash + 1) + ".partial-";
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (std::string(e->d_name).rfind(base, 0) == 0) out.push_back(dir + "/" + e->d_name);
    }
    ::closedir(d);
  }
  return out;
}

// An earlier trace at `path`; its bytes.
std::string earlier_trace(const std::string& path) {
  CliResult r = llmrr({"record", "--model", "builtin:tiny-moe", "--prompt", "earlier",
                       "--max-tokens", "3", "-q", "-o", path});
  EXPECT_EQ(r.rc, 0) << r.err;
  return slurp(path);
}

// `llmrr record ... -o path` on a long run, started with SIGINT and SIGTERM at their default
// (a shell would start a background job with SIGINT ignored); returns its pid once its
// partial file holds a step chunk (the run is under way), or -1.
pid_t start_long_record(const std::string& path) {
  const std::vector<std::string> args = {LLMRR_BIN, "record", "--model", "builtin:tiny-moe",
                                         "--prompt", "abc", "--load", "8", "--max-tokens", "4000",
                                         "--threads", "1", "-q", "-o", path};
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    const int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) ::dup2(fd, 1);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  for (int i = 0; i < 6000; ++i) {
    for (const std::string& p : partials_of(path)) {
      struct stat st;
      if (::stat(p.c_str(), &st) == 0 && st.st_size > 16384) return pid;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ADD_FAILURE() << "no partial file of " << path << " grew past a step chunk";
  return -1;
}

// A record that cannot write (a file-size limit, the signal at its default: record turns
// it into a write error itself) stops recording, says so, exits 2, leaves no partial file
// and the trace that was at -o byte for byte. (Before: SIGXFSZ killed it, exit 153, and the
// earlier trace was gone.)
TEST(RecordCli, ARecordThatCannotWriteLeavesTheOldTraceAndNoPartialFile) {
  const std::string path = temp_path("limited.trace");
  const std::string before = earlier_trace(path);
  ASSERT_FALSE(before.empty());
  std::vector<std::string> args = with(with({"record"}, kEngine), {"--capture", "all", "-o", path});
  CliResult r = llmrr(args, "ulimit -f 8;");  // 4 KiB in 512-byte blocks
  EXPECT_EQ(r.rc, 2) << r.err;
  // The recorder never costs the user the run: the text is generated to its end.
  EXPECT_EQ(r.out, llmrr(with({"run"}, kEngine)).out);
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("could not be written"), std::string::npos) << r.err;
  EXPECT_TRUE(slurp(path) == before) << "the earlier trace at -o changed";
  EXPECT_EQ(partials_of(path), std::vector<std::string>{});
}

// kill -9 mid-run: the earlier trace at -o is untouched, and the partial file beside it is
// the readable prefix of the run (verify refuses it as incomplete, --allow-incomplete reads it).
TEST(RecordCli, AKilledRecordLeavesTheOldTraceAndAReadablePartialFile) {
  const std::string path = temp_path("killed.trace");
  const std::string before = earlier_trace(path);
  const pid_t pid = start_long_record(path);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  EXPECT_TRUE(slurp(path) == before) << "the earlier trace at -o changed";
  const std::vector<std::string> partial = partials_of(path);
  ASSERT_EQ(partial.size(), 1u);
  EXPECT_EQ(llmrr({"verify", partial[0]}).rc, 2);
  CliResult v = llmrr({"verify", "--allow-incomplete", partial[0]});
  EXPECT_EQ(v.rc, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("incomplete"), std::string::npos) << v.out;
  std::remove(partial[0].c_str());
}

// Ctrl-C (SIGINT) and SIGTERM stop a long capture at a step boundary and keep it: the trace
// at -o verifies, complete (with its footer) and lossy "interrupted by SIGINT"; the exit
// status is the shell's for the signal; no partial file is left.
TEST(RecordCli, AnInterruptedRecordKeepsAVerifiableTraceMarkedInterrupted) {
  for (int sig : {SIGINT, SIGTERM}) {
    const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    const std::string path = temp_path("interrupted-" + name + ".trace");
    earlier_trace(path);
    const pid_t pid = start_long_record(path);
    ASSERT_GT(pid, 0);
    ASSERT_EQ(::kill(pid, sig), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << name << ": killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig) << name;
    EXPECT_EQ(partials_of(path), std::vector<std::string>{}) << name;
    CliResult v = llmrr({"verify", path});
    EXPECT_EQ(v.rc, 0) << name << v.out << v.err;
    EXPECT_NE(v.out.find("lossy: interrupted by " + name), std::string::npos) << v.out;
    auto reader = open_reader(path);
    ASSERT_NE(reader, nullptr);
    EXPECT_TRUE(reader->complete());
    EXPECT_TRUE(reader->lossy());
    EXPECT_EQ(reader->lossy_reason(), "interrupted by " + name);
    EXPECT_GT(reader->step_count(), 0);
    EXPECT_LT(reader->token_count(), 4000 + 8 * 4000) << "the run went to its end";
  }
}

// --reference with --logits full: the XOR-coded trace is smaller and the format tools read
// it.
TEST(RecordCli, ReferenceMakesARerunSmall) {
  const std::string a = temp_path("a.trace"), b = temp_path("b.trace"), c = temp_path("c.trace");
  std::vector<std::string> base = {"record",
                                   "--model",
                                   "builtin:tiny-moe",
                                   "--prompt",
                                   "The quick brown fox",
                                   "--max-tokens",
                                   "12",
                                   "--load",
                                   "3",
                                   "--capture",
                                   "none",
                                   "--logits",
                                   "full",
                                   "-q"};
  ASSERT_EQ(llmrr(with(base, {"--threads", "1", "-o", a})).rc, 0);
  ASSERT_EQ(llmrr(with(base, {"--threads", "2", "-o", b})).rc, 0);
  CliResult coded = llmrr(with(base, {"--threads", "2", "--reference", a, "-o", c}));
  ASSERT_EQ(coded.rc, 0) << coded.err;
  EXPECT_TRUE(coded.err.empty()) << "-q: " << coded.err;
  auto rb = open_reader(b);
  auto rc = open_reader(c);
  ASSERT_TRUE(rb && rc);
  EXPECT_LT(rc->file_size() * 2, rb->file_size());
  if (has_command("verify")) {
    CliResult ver = llmrr({"verify", c});
    EXPECT_EQ(ver.rc, 0) << ver.out << ver.err;
  }
  if (has_command("inspect")) {
    EXPECT_EQ(llmrr({"inspect", c}).rc, 0);
  }
}

}  // namespace
}  // namespace llmrr::rectest
