// Issue 37's second campaign: JSON inside a trace under the same nesting cap as JSON in a file,
// a requests file bounded in requests and memory, model settings checked finite and in range,
// and no failure without a message naming its path. Each test failed on the code before it:
// pack --redact died of SIGSEGV, a million-line requests file ran past 15 s at 800 MB, a
// rope_theta of inf ran, `diff --model /dev/zero` exited 1 without a word.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>
#include <unistd.h>
#include <string>

#include "../common/cpu_time.h"
#include "../common/test_paths.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/reader.h"
#include "llmrr/recorder.h"
#include "llmrr/recorder/requests_file.h"
#include "llmrr/safeio/json.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::run_command;
using rtest::temp_path;

// 100,000 levels: the campaign's depth, where nlohmann's dump (and Python's json) recurse
// past the stack.
const std::string& deep_object() {
  static const std::string s =
      "{\"note\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  return s;
}

struct CmdResult {
  int rc = 0;
  std::string err;  // stderr
};

CmdResult llmrr_cmd(const std::string& args) {
  CmdResult r;
  const std::string err = temp_path("bounded-stderr.txt");
  r.rc = run_command("{ timeout 60 " + rtest::llmrr_binary() + " " + args + " >/dev/null 2>" +
                         err + "; }",
                     nullptr);
  r.err = rtest::read_file(err);
  return r;
}

// Exit 2 and one stderr line that names `path` and holds `says`.
void expect_refused(const std::string& args, const std::string& path, const std::string& says) {
  CmdResult r = llmrr_cmd(args);
  EXPECT_EQ(r.rc, 2) << args << "\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(path), std::string::npos) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(says), std::string::npos) << args << "\n" << r.err;
}

const std::string& good_trace() {
  static const std::string path = [] {
    const std::string p = temp_path("bounded-good.trace");
    std::string out;
    EXPECT_EQ(run_command(rtest::llmrr_binary() + " record --model builtin:tiny-moe --prompt abc " +
                              "--max-tokens 6 -q -o " + p,
                          &out, true),
              0)
        << out;
    return p;
  }();
  return path;
}

// A real recording whose run header's extra_config_json is then made 100,000 deep.
const std::string& deep_trace() {
  static const std::string path = [] {
    const std::string p = temp_path("bounded-deep.trace");
    Status st = rtest::rewrite_trace(
        good_trace(), p, [](trace::RunHeader& h) { h.extra_config_json = deep_object(); },
        nullptr);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return p;
  }();
  return path;
}

TEST(DeepJsonInATrace, SafeioRefusesItAsAnObject) {
  Result<nlohmann::json> j =
      safeio::parse_json_object(deep_object(), "t.trace: extra", ErrorCode::kSemantic);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("t.trace: extra: JSON nested deeper than 64 levels"),
            std::string::npos)
      << j.status().message();
  EXPECT_TRUE(safeio::parse_json_object("", "x", ErrorCode::kSemantic).ok());  // "" is {}
  EXPECT_FALSE(safeio::parse_json_object("[1]", "x", ErrorCode::kSemantic).ok());
  EXPECT_FALSE(safeio::parse_json_object(std::string(safeio::kMaxEmbeddedJsonBytes + 1, ' '), "x",
                                         ErrorCode::kSemantic)
                   .ok());
}

TEST(DeepJsonInATrace, EveryCommandEndsWithoutASignal) {
  const std::string& t = deep_trace();
  // The recorded header, whole: only the extra config changed.
  auto r = trace::TraceReader::open(t);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ((*r)->run_header().extra_config_json.size(), deep_object().size());

  // Commands that parse the extra config refuse the trace, naming it.
  expect_refused("pack " + t + " --redact --keep 0 -o " + temp_path("bounded-deep.llmrr"), t,
                 "run header extra_config_json: JSON nested deeper than 64 levels");
  EXPECT_NE(::access(temp_path("bounded-deep.llmrr").c_str(), F_OK), 0);
  expect_refused("replay " + t, t, "JSON nested deeper than 64 levels");
  // Those that only show or compare it as text go on (exit 0: a trace against itself).
  for (const std::string& args :
       {"inspect " + t, "inspect --json " + t, "diff " + t + " " + t,
        "report " + t + " -o " + temp_path("bounded-deep.html")}) {
    CmdResult run = llmrr_cmd(args);
    EXPECT_EQ(run.rc, 0) << args << "\n" << run.err;
  }
}

TEST(DeepJsonInATrace, TheReaderAbiRefusesItNamingThePath) {
  const std::string& t = deep_trace();
  llmrr_reader* h = nullptr;
  EXPECT_EQ(llmrr_reader_open(t.c_str(), &h), static_cast<int>(ErrorCode::kSemantic));
  EXPECT_EQ(h, nullptr);
  const std::string msg = llmrr_reader_last_error();
  EXPECT_NE(msg.find(t + ": run header extra_config_json: JSON nested deeper than 64 levels"),
            std::string::npos)
      << msg;
}

TEST(DeepJsonInATrace, TheRecorderAbiWritesNoneOfIt) {
  llmrr_recorder_config c;
  llmrr_recorder_config_init(&c);
  const std::string extra = deep_object();
  c.extra_config_json = extra.c_str();
  const std::string p = temp_path("bounded-abi.trace");
  llmrr_recorder* rec = nullptr;
  EXPECT_EQ(llmrr_recorder_open(p.c_str(), &c, &rec),
            static_cast<int>(ErrorCode::kInvalidArgument));
  EXPECT_EQ(rec, nullptr);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("nested deeper than 64"),
            std::string::npos)
      << llmrr_recorder_last_error();
}

TEST(RequestsFile, AMillionLinesAreRefusedAtTheCap) {
  // A million requests (40 MB, under the 64 MiB size cap): read whole and parsed before
  // counting, as they once were, they held 800 MB and ran past 15 s; the stream refuses
  // request 100,001 as it reaches it. Judged by the child's peak memory, not the
  // wall clock, which measures the machine (a CI host once ran 20x slower than usual).
  const std::string p = temp_path("bounded-million.jsonl");
  {
    const std::string line = "{\"prompt_ids\": [1, 2], \"max_tokens\": 2}\n";
    std::string text;
    text.reserve(line.size() * 1000000);
    for (int i = 0; i < 1000000; ++i) text += line;
    rtest::write_file(p, text);
  }
  const std::string out = temp_path("bounded-million.trace");
  expect_refused("record --model builtin:tiny-moe --requests " + p + " -o " + out,
                 p + ":" + std::to_string(kMaxRequests + 1) + ":",
                 "more than 100000 requests, expected at most 100000");
  // Peak memory alone tells the two apart: CPU time does not (0.5 s here, 26 s under ASan).
  const long long rss = test::children_max_rss_bytes();
  EXPECT_LT(rss, 300LL << 20) << rss;  // 56 MB here
  EXPECT_NE(::access(out.c_str(), F_OK), 0);
}

TEST(RequestsFile, TheCapIsExactAndTheStreamKeepsLineNumbers) {
  // kMaxRequests lines parse; one more is refused at its own line number, blank lines and
  // comments counted, across the reader's 64 KiB chunks.
  std::string text = "# header\n\n";
  for (size_t i = 0; i < kMaxRequests; ++i) text += "{\"prompt_ids\": [1]}\n";
  const std::string p = temp_path("bounded-cap.jsonl");
  rtest::write_file(p, text);
  RequestDefaults d;
  Result<std::vector<RequestSpec>> ok = read_requests_file(p, d, {});
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->size(), kMaxRequests);
  EXPECT_EQ(ok->back().id, kMaxRequests - 1);
  rtest::write_file(p, text + "{\"prompt_ids\": [1]}");  // no final newline
  Result<std::vector<RequestSpec>> over = read_requests_file(p, d, {});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), ErrorCode::kBadRequest);
  const std::string at = p + ":" + std::to_string(kMaxRequests + 3) + ": more than";
  EXPECT_NE(over.status().message().find(at), std::string::npos)
      << over.status().message();
  // A line split by the chunk boundary is read whole: a long prompt_ids line.
  std::string ids = "1";
  for (int i = 0; i < 40000; ++i) ids += ",1";
  rtest::write_file(p, "{\"prompt_ids\": [2]}\n{\"prompt_ids\": [" + ids + "]}\n");
  Result<std::vector<RequestSpec>> two = read_requests_file(p, d, {});
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].prompt.size(), 40001u);
}

// The GGUF fixture with one f32 metadata value replaced.
std::string gguf_with(const std::string& key, float value) {
  std::string g = rtest::read_file(LLMRR_PATH(LLMRR_FIXTURES_DIR) + "/tiny-llama-f32.gguf");
  const size_t at = g.find(key);
  EXPECT_NE(at, std::string::npos) << key;
  uint32_t type = 0;
  std::memcpy(&type, g.data() + at + key.size(), 4);
  EXPECT_EQ(type, 6u) << key << " is not an f32";  // GGUF_TYPE_FLOAT32
  std::memcpy(g.data() + at + key.size() + 4, &value, 4);
  const std::string p = temp_path("bounded-" + key + ".gguf");
  rtest::write_file(p, g);
  return p;
}

TEST(ModelSettings, NonFiniteOrOutOfRangeAreRefusedNamingTheKey) {
  const float inf = std::numeric_limits<float>::infinity();
  std::string p = gguf_with("llama.rope.freq_base", inf);
  expect_refused("run --model " + p + " --prompt-ids 1,2 --max-tokens 2", p,
                 "metadata llama.rope.freq_base is inf, expected a finite number in [1, 1e+12]");
  p = gguf_with("llama.attention.layer_norm_rms_epsilon", 1e30f);
  expect_refused("run --model " + p + " --prompt-ids 1,2 --max-tokens 2", p,
                 "metadata llama.attention.layer_norm_rms_epsilon is 1.00000002e+30, expected a "
                 "finite number in [0, 1]");

  const std::string dir = temp_path("bounded-config");
  ASSERT_EQ(run_command("rm -rf " + dir + " && cp -r " + LLMRR_PATH(LLMRR_FIXTURES_DIR) +
                            "/tiny-llama " + dir,
                        nullptr),
            0);
  const std::string cfg = rtest::read_file(dir + "/config.json");
  // tiny-llama states rope_parameters.rope_theta (transformers 5); a top-level rope_theta
  // beside it is still checked.
  for (const auto& [from, to, says] :
       {std::tuple<std::string, std::string, std::string>{
            "\"rope_theta\": 10000.0", "\"rope_theta\": 1e300",
            "rope_parameters.rope_theta is 1e+300, expected a finite number in [1, 1e+12]"},
        {"\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 1e-05, \"rope_theta\": -1",
         ": rope_theta is -1, expected"},
        {"\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 5", "rms_norm_eps is 5, expected"}}) {
    const size_t at = cfg.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    rtest::write_file(dir + "/config.json",
                      cfg.substr(0, at) + to + cfg.substr(at + from.size()));
    expect_refused("run --model " + dir + " --prompt-ids 1,2 --max-tokens 2", dir, says);
  }
}

TEST(ExitCodes, DiffModelNotARegularFileIsExit2NamingIt) {
  // Two runs that split visibly, so the old code reached the model only to note its failure.
  const std::string a = temp_path("bounded-alone.trace"), b = temp_path("bounded-load.trace");
  const std::string rec = rtest::llmrr_binary() +
                          " record --model builtin:tiny-moe --dtype bf16 --prompt 'record capital "
                          "upon answer dog' --max-tokens 12 -q -o ";
  ASSERT_EQ(run_command(rec + a, nullptr), 0);
  ASSERT_EQ(run_command(rec + b + " --load 8", nullptr), 0);
  ASSERT_EQ(llmrr_cmd("diff " + a + " " + b).rc, 1);
  expect_refused("diff " + a + " " + b + " --model /dev/zero", "--model: /dev/zero",
                 "is a character device");
  expect_refused("diff " + a + " " + a + " --model /dev/zero", "--model: /dev/zero",
                 "is a character device");
  expect_refused("diff " + a + " " + b + " --model " + temp_path("bounded-missing.gguf"),
                 temp_path("bounded-missing.gguf"), "No such file");
}

TEST(ExitCodes, AWriteErrorNamesThePath) {
  // A device as an output is refused before any work, naming it (it was written through,
  // and the bundle writer said ": write failed" with an empty name).
  const std::string& t = good_trace();
  for (const std::string& args : {"pack " + t + " -o /dev/full", "report " + t + " -o /dev/full",
                                  "export " + t + " --perfetto /dev/full"}) {
    expect_refused(args, "/dev/full", "is a character device");
  }
  // A write that fails (a file-size limit, the signal ignored so the write returns EFBIG)
  // names the output the user gave, not the temporary file it goes to, and leaves neither.
  const std::string dir = temp_path("bounded-efbig");
  ASSERT_EQ(run_command("rm -rf " + dir + " && mkdir " + dir, nullptr), 0);
  for (const std::string& args : {"pack " + t + " -o " + dir + "/b.llmrr",
                                  "report " + t + " -o " + dir + "/r.html",
                                  "export " + t + " --perfetto " + dir + "/p.json"}) {
    const std::string err = temp_path("bounded-efbig.txt");
    const int rc = run_command("{ trap '' XFSZ; ulimit -f 2; timeout 60 " + rtest::llmrr_binary() +
                                   " " + args + " >/dev/null 2>" + err + "; }",
                               nullptr);
    const std::string msg = rtest::read_file(err);
    EXPECT_EQ(rc, 2) << args << "\n" << msg;
    EXPECT_EQ(std::count(msg.begin(), msg.end(), '\n'), 1) << args << "\n" << msg;
    EXPECT_NE(msg.find("File too large"), std::string::npos) << args << "\n" << msg;
    EXPECT_NE(msg.find(args.substr(args.rfind(' ') + 1) + ":"), std::string::npos) << msg;
    EXPECT_EQ(msg.find(".llmrr-"), std::string::npos) << "names the temporary: " << msg;
  }
  std::string left;
  run_command("ls -A " + dir, &left);
  EXPECT_EQ(left, "");
}

}  // namespace
}  // namespace llmrr
