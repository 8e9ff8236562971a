// The CLI under hostile inputs: exit 2, one line on stderr naming what was wrong, and no
// input destroyed or output left half-written.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "../common/test_paths.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::run_command;
using rtest::temp_path;

const std::string& good_trace() {
  static const std::string path = [] {
    const std::string p = temp_path("hostile-good.trace");
    std::string out;
    EXPECT_EQ(run_command(rtest::llmrr_binary() +
                              " record --model builtin:tiny-moe --prompt abc --max-tokens 6 -o " + p,
                          &out, true),
              0)
        << out;
    return p;
  }();
  return path;
}

// Runs `llmrr <args>` and expects exit 2 with one stderr line holding `says`.
void expect_refused(const std::string& args, const std::string& says) {
  std::string out;
  const int rc = run_command("{ timeout 20 " + rtest::llmrr_binary() + " " + args + " 2>&1 >/dev/null; }", &out);
  EXPECT_EQ(rc, 2) << args << "\n" << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << args << "\n" << out;
  EXPECT_NE(out.find(says), std::string::npos) << args << "\n" << out;
}

TEST(HostileCli, FifoIsRefusedByEveryReader) {
  const std::string fifo = temp_path("hostile.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string t = good_trace();
  for (const std::string& args :
       {"inspect " + fifo, "replay " + fifo, "diff " + t + " " + fifo, "report " + fifo + " -o " + fifo + ".html",
        "export " + fifo + " --perfetto " + fifo + ".json", "unpack --list " + fifo, "verify " + fifo,
        "dump " + fifo, "run --model " + fifo + " --prompt a",
        "pack " + t + " --with-model --model " + fifo + " -o " + fifo + ".llmrr",
        "record --model builtin:tiny-moe --requests " + fifo + " -o " + fifo + ".trace"}) {
    expect_refused(args, "expected a");  // "a regular trace file", "a model (...)"
  }
  for (const char* ext : {".html", ".json", ".llmrr", ".trace"}) {
    EXPECT_EQ(::access((fifo + ext).c_str(), F_OK), -1) << ext;
  }
}

TEST(HostileCli, NoOutputOverwritesAnInput) {
  const std::string t = temp_path("hostile-input.trace");
  ASSERT_EQ(run_command("cp " + good_trace() + " " + t, nullptr), 0);
  const std::string before = rtest::read_file(t);
  const std::string gguf = temp_path("hostile-model.gguf");
  ASSERT_EQ(run_command("cp " + LLMRR_PATH(LLMRR_FIXTURES_DIR) + "/tiny-llama-f32.gguf " + gguf, nullptr), 0);
  const std::string model_before = rtest::read_file(gguf);
  expect_refused("report " + t + " -o " + t, "never overwrites its input");
  expect_refused("pack " + t + " -o " + t, "never overwrites its input");
  expect_refused("export " + t + " --perfetto " + t, "never overwrites its input");
  expect_refused("record --model " + gguf + " --prompt-ids 1,2 --max-tokens 2 -o " + gguf,
                 "never overwrites its input");
  EXPECT_EQ(rtest::read_file(t), before);
  EXPECT_EQ(rtest::read_file(gguf), model_before);
}

TEST(HostileCli, OutputsInMissingDirectoriesAreRefusedBeforeWork) {
  const std::string t = good_trace();
  const std::string missing = temp_path("hostile-no-such-dir");
  ::rmdir(missing.c_str());
  expect_refused("record --model builtin:tiny-moe --prompt a --max-tokens 400 -o " + missing + "/x.trace",
                 "does not exist");
  expect_refused("report " + t + " -o " + missing + "/x.html", "does not exist");
  expect_refused("export " + t + " --npy " + missing + "/npy", "does not exist");
  expect_refused("replay " + t + " --materialize logits@0 -o " + missing + "/m", "does not exist");
  // A directory the replay created and then wrote nothing into is not left behind.
  const std::string m = temp_path("hostile-materialize-none");
  ::rmdir(m.c_str());
  expect_refused("replay " + t + " --materialize logits@999 -o " + m, "produced no rows");
  EXPECT_EQ(::access(m.c_str(), F_OK), -1);
  expect_refused("record --model builtin:tiny-moe --prompt a -o ''", "the path is empty");
  EXPECT_EQ(::access(missing.c_str(), F_OK), -1);
}

TEST(HostileCli, UnboundedAndDeepJsonInputs) {
  const std::string deep = temp_path("hostile-deep.jsonl");
  rtest::write_file(deep, std::string(200000, '[') + "\n");
  expect_refused("record --model builtin:tiny-moe --requests " + deep + " -o " + deep + ".trace",
                 "nested deeper than 64");
  expect_refused("record --model builtin:tiny-moe --requests /dev/zero -o " + deep + ".trace",
                 "character device");
  const std::string dir = temp_path("hostile-deep-config");
  ASSERT_EQ(run_command("rm -rf " + dir + " && mkdir -p " + dir + " && cp " +
                            LLMRR_PATH(LLMRR_FIXTURES_DIR) + "/tiny-llama/model.safetensors " + dir,
                        nullptr),
            0);
  rtest::write_file(dir + "/config.json", "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": " +
                                              std::string(100000, '[') + std::string(100000, ']') + "}");
  expect_refused("run --model " + dir + " --prompt-ids 1,2 --max-tokens 2", "nested deeper than 64");
  rtest::write_file(dir + "/config.json", "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 1000000000000}");
  expect_refused("run --model " + dir + " --prompt-ids 1,2 --max-tokens 2", "expected an integer below 2^31");
}

TEST(HostileCli, GgufSizesOfZeroSayWhich) {
  std::string g = rtest::read_file(LLMRR_PATH(LLMRR_FIXTURES_DIR) + "/tiny-llama-f32.gguf");
  const std::string key = "llama.embedding_length";
  const size_t at = g.find(key);
  ASSERT_NE(at, std::string::npos);
  std::memset(g.data() + at + key.size() + 4, 0, 4);  // the u32 value after its type
  const std::string p = temp_path("hostile-embedding0.gguf");
  rtest::write_file(p, g);
  expect_refused("run --model " + p + " --prompt-ids 1,2 --max-tokens 2",
                 "llama.embedding_length = 0, expected a positive integer");
}

TEST(HostileCli, OptionsOutOfRange) {
  const std::string t = good_trace();
  expect_refused("replay " + t + " --request -1", "--request -1");
  expect_refused("pack " + t + " " + t + " " + t + " -o " + temp_path("three.llmrr"), "TRACES");
  expect_refused("dump " + t + " --steps -1", "no step of");
  expect_refused("dump " + t + " --steps 500:600", "no step of");
  expect_refused("diff " + t + " " + t + " --explain -1", "--explain");
  expect_refused("run --model builtin:tiny-moe --prompt a --seed -1", "--seed: expected an integer >= 0");
  expect_refused("report " + t + " --model builtin:nope -o " + temp_path("nope.html"),
                 "--model: builtin:nope");
  EXPECT_EQ(::access(temp_path("nope.html").c_str(), F_OK), -1);
  std::string out;
  EXPECT_EQ(run_command("{ LLMRR_ISA=bogus " + rtest::llmrr_binary() +
                            " run --model builtin:tiny-moe --prompt a 2>&1 >/dev/null; }",
                        &out),
            2);
  EXPECT_NE(out.find("LLMRR_ISA=bogus: expected scalar, avx2 or avx512"), std::string::npos) << out;
}

TEST(HostileCli, CorruptionIsCaughtOutsideVerify) {
  // A flipped bit inside a step chunk: inspect and pack read every frame's checksum.
  std::string bytes = rtest::read_file(good_trace());
  std::string out;
  ASSERT_EQ(run_command("{ " + rtest::llmrr_binary() + " verify " + good_trace() + "; }", &out), 0);
  const std::string flipped = temp_path("hostile-flipped.trace");
  bytes[bytes.size() / 2] ^= 0x10;
  rtest::write_file(flipped, bytes);
  expect_refused("inspect " + flipped, "checksum");
  expect_refused("pack " + flipped + " -o " + temp_path("flipped.llmrr"), "checksum");
  EXPECT_EQ(::access(temp_path("flipped.llmrr").c_str(), F_OK), -1);
  // Cut after the run header: nothing to replay or diff, which is not "bit-exact".
  const std::string good = rtest::read_file(good_trace());
  // The run header is frame 0: a 32-byte frame header (stored size at its byte 12) after
  // the 16-byte file header.
  uint32_t stored = 0;
  std::memcpy(&stored, good.data() + 16 + 12, 4);
  const std::string cut = flipped;
  rtest::write_file(cut, good.substr(0, 16 + 32 + stored));
  ASSERT_EQ(run_command("{ " + rtest::llmrr_binary() + " verify --allow-incomplete " + cut + "; }",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("0 steps"), std::string::npos) << out;
  expect_refused("replay " + cut, "holds no whole step");
  expect_refused("diff " + good_trace() + " " + cut, "holds no whole step");
}

TEST(HostileCli, ADamagedTrailerOrAppendedBytesAreNotAKilledRecording) {
  const std::string good = rtest::read_file(good_trace());
  const std::string p = temp_path("hostile-appended.trace");
  rtest::write_file(p, good + std::string(1 << 20, '\0'));
  expect_refused("verify --allow-incomplete " + p, "bytes were appended to a closed trace");
  std::string damaged = good;
  damaged[damaged.size() - 6] ^= 1;  // inside the trailer's check; its magic stays whole
  rtest::write_file(p, damaged);
  expect_refused("verify --allow-incomplete " + p, "the trailer is damaged");
  // A recording killed while closing (footer written, trailer not) still reads.
  rtest::write_file(p, good.substr(0, good.size() - 16));
  std::string out;
  EXPECT_EQ(run_command("{ " + rtest::llmrr_binary() + " verify --allow-incomplete " + p + "; }", &out), 0)
      << out;
}

TEST(HostileCli, VerifyOfABundleSaysSo) {
  const std::string b = temp_path("hostile-verify.llmrr");
  std::string out;
  ASSERT_EQ(run_command("{ " + rtest::llmrr_binary() + " pack -q " + good_trace() + " -o " + b + "; }", &out), 0);
  EXPECT_EQ(run_command("{ " + rtest::llmrr_binary() + " verify " + b + "; }", &out), 0);
  EXPECT_NE(out.find("a bundle (llmrr pack) of 1 trace(s)"), std::string::npos) << out;
}

TEST(HostileCli, InvalidUtf8IsEscapedInJson) {
  // A prompt byte 0xff and a file name that is not UTF-8: inspect --json and export write
  // valid JSON (U+FFFD in place of the bad bytes) and exit 0.
  const std::string t = temp_path("hostile-\xff.trace");
  std::string out;
  ASSERT_EQ(run_command("{ " + rtest::llmrr_binary() +
                            " record --model builtin:tiny-moe --prompt \"$(printf 'a\\xffb')\" "
                            "--max-tokens 3 -o \"$(printf '" + t + "')\" 2>&1; }",
                        &out),
            0)
      << out;
  EXPECT_EQ(run_command("{ " + rtest::llmrr_binary() + " inspect --json \"$(printf '" + t +
                            "')\" | python3 -c 'import json,sys; json.load(sys.stdin)'; }",
                        &out, true),
            0)
      << out;
  const std::string json = temp_path("hostile-utf8.json");
  EXPECT_EQ(run_command("{ " + rtest::llmrr_binary() + " export \"$(printf '" + t +
                            "')\" --perfetto " + json + " --npy " + temp_path("hostile-utf8-npy") +
                            " && python3 -c 'import json,sys; json.load(open(sys.argv[1]))' " + json +
                            "; }",
                        &out, true),
            0)
      << out;
}

// A failure after some output files were written leaves none of them: export --npy and
// replay --materialize stage into a directory of their own and move the files into place
// only when every one was written.
TEST(HostileCli, FailureMidwayLeavesNoOutput) {
  const std::string dir = temp_path("hostile-midway");
  ASSERT_EQ(run_command("rm -rf " + dir + " && mkdir " + dir, nullptr), 0);
  const std::string t = dir + "/all.trace";
  ASSERT_EQ(run_command(rtest::llmrr_binary() + " record --model builtin:tiny-moe --prompt abc " +
                            "--max-tokens 24 --capture all -o " + t + " 2>/dev/null",
                        nullptr),
            0);
  // The arrays of this trace: fingerprints.hash.npy and .summary.npy are 16 KiB each and
  // written first, fingerprints.index.npy is 64 KiB: a 40 KiB file size limit (EFBIG; the
  // signal ignored) fails the export at its third file.
  const std::string limited = "bash -c \"ulimit -f 40; trap '' XFSZ; exec " +
                              rtest::llmrr_binary() + " ";
  for (const std::string& out : {dir + "/npy-new", dir + "/npy-old"}) {
    if (out == dir + "/npy-old") {
      ASSERT_EQ(run_command("mkdir " + out + " && echo kept > " + out + "/old.txt", nullptr), 0);
    }
    std::string err;
    const int rc = run_command(
        "{ " + limited + "export " + t + " --npy " + out + "\" 2>&1 >/dev/null; }", &err);
    EXPECT_EQ(rc, 2) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_NE(err.find(out + "/fingerprints.index.npy: write failed"), std::string::npos) << err;
  }
  std::string ls;
  ASSERT_EQ(run_command("ls -A " + dir + " " + dir + "/npy-old", &ls), 0);
  EXPECT_EQ(ls, dir + ":\nall.trace\nnpy-old\n\n" + dir + "/npy-old:\nold.txt\n");
  // Without the limit the same export lands whole, beside what the directory held.
  ASSERT_EQ(run_command(rtest::llmrr_binary() + " export " + t + " --npy " + dir +
                            "/npy-old 2>/dev/null",
                        nullptr),
            0);
  ASSERT_EQ(run_command("ls -A " + dir + "/npy-old | wc -l", &ls), 0);
  EXPECT_EQ(ls, "15\n");  // old.txt + 14 arrays and JSON files

  // Two --materialize specs, the second of a step the replay never reaches: the first file
  // was written at step 0, and neither lands, in a new or an existing directory.
  for (const std::string& out : {dir + "/m-new", dir + "/npy-old"}) {
    expect_refused("replay " + t + " --materialize logits@0 --materialize logits@999 -o " + out,
                   "produced no rows");
  }
  ASSERT_EQ(run_command("ls -A " + dir + " && ls -A " + dir + "/npy-old | wc -l", &ls), 0);
  EXPECT_EQ(ls, "all.trace\nnpy-old\n15\n");
}

}  // namespace
}  // namespace llmrr
