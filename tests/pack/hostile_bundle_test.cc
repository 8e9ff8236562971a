// Bundles made by hand the way a stranger could: manifests with fields of the wrong type,
// entries that lie about their size, a decompression bomb, a bad hash or count. Each is
// refused with exit 2 and one line that names the problem, and leaves nothing behind: not in
// the -o directory, not in $TMPDIR.
#include <dirent.h>
#include <gtest/gtest.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "llmrr/replayer/pack.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::run_command;
using rtest::temp_path;

struct Entry {
  std::string name, content;
  uint64_t declared = UINT64_MAX;  // the size the header claims (default: the content's)
  bool bad_hash = false;
};

void put(std::string* s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}

// A bundle in the layout of pack.h; `count_delta` makes the end record miscount.
std::string make_bundle(const std::vector<Entry>& entries, int count_delta = 0) {
  std::string body, headers;
  for (const Entry& e : entries) {
    std::string h = "LRPE";
    put(&h, e.name.size(), 2);
    put(&h, 0, 2);
    put(&h, e.declared == UINT64_MAX ? e.content.size() : e.declared, 8);
    put(&h, XXH3_64bits(e.content.data(), e.content.size()) ^ (e.bad_hash ? 1 : 0), 8);
    headers += h + e.name;
    body += h + e.name + e.content;
  }
  body += "LRPZ";
  put(&body, entries.size() + count_delta, 4);
  put(&body, XXH3_64bits(headers.data(), headers.size()), 8);
  std::string z(ZSTD_compressBound(body.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), body.data(), body.size(), 3));
  std::string file = "\x89LLMRRB\n";
  put(&file, replay::kPackMajor, 2);
  put(&file, replay::kPackMinor, 2);
  put(&file, 0, 4);
  return file + z;
}

std::string manifest(const std::string& extra = "") {
  return R"({"format": "llmrr-pack", "redacted": false, "traces": [{"entry": "traces/a.trace", "bytes": 5}])" +
         extra + "}";
}

// Files and directories under `dir`, recursively ("" when it does not exist).
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    out.push_back(n);
    for (const std::string& sub : listing(dir + "/" + n)) out.push_back(n + "/" + sub);
  }
  ::closedir(d);
  return out;
}

struct Case {
  std::string name;
  std::string bytes;
  std::string says;  // a piece of the one error line
};

std::vector<Case> cases() {
  const std::string five = "abcde";
  return {
      {"format-number", make_bundle({{"manifest.json", R"({"format": 5})"}}),
       "field \"format\" is an integer"},
      {"redacted-string",
       make_bundle({{"manifest.json", manifest(R"(, "redacted": "yes")")}, {"traces/a.trace", five}}),
       "field \"redacted\" is a string"},
      {"model-entry-number",
       make_bundle({{"manifest.json", manifest(R"(, "model": {"bundled": true, "entry": 5})")},
                    {"traces/a.trace", five}}),
       "field \"entry\" is an integer"},
      {"redacted-no-kept",
       make_bundle({{"manifest.json", manifest(R"(, "redacted": true, "kept": [])")},
                    {"traces/a.trace", five}}),
       "lists no request"},
      {"deep-manifest", make_bundle({{"manifest.json", std::string(100000, '[')}}),
       "nested deeper than 64"},
      {"bomb",
       make_bundle({{"manifest.json", R"({"format": "llmrr-pack", "traces": [{"entry": "traces/a.trace"}]})"},
                    {"traces/a.trace", five, uint64_t{3} << 30}}),
       "over the"},
      {"lying-size",
       make_bundle({{"manifest.json", manifest()}, {"traces/a.trace", "abcdefgh"}}),
       "manifest.json says 5"},
      {"unlisted",
       make_bundle({{"manifest.json", manifest()}, {"traces/a.trace", five}, {"traces/b.trace", five}}),
       "not listed in manifest.json"},
      {"bad-hash",
       make_bundle({{"manifest.json", manifest()}, {"traces/a.trace", five, UINT64_MAX, true}}),
       "content hash mismatch"},
      {"bad-count", make_bundle({{"manifest.json", manifest()}, {"traces/a.trace", five}}, 1),
       "the end record counts"},
      // An entry that is a file and also a directory of another: --list passed it, unpack
      // could not write it.
      {"file-and-directory",
       make_bundle({{"manifest.json",
                     R"({"format": "llmrr-pack", "traces": [{"entry": "traces/a.trace"}, )"
                     R"({"entry": "traces/a.trace/b.trace"}]})"},
                    {"traces/a.trace", five},
                    {"traces/a.trace/b.trace", five}}),
       "is an entry (a file) and a directory"},
      {"long-name-part",
       make_bundle({{"manifest.json", R"({"format": "llmrr-pack", "traces": [{"entry": "traces/)" +
                                          std::string(300, 'a') + R"("}]})"},
                    {"traces/" + std::string(300, 'a'), five}}),
       "expected at most 255"},
  };
}

TEST(HostileBundle, RefusedWithOneLineAndNothingLeftBehind) {
  const std::string tmp = temp_path("hostile-tmpdir");
  ASSERT_EQ(run_command("rm -rf " + tmp + " && mkdir -p " + tmp, nullptr), 0);
  for (const Case& k : cases()) {
    const std::string bundle = temp_path("hostile-" + k.name + ".llmrr");
    rtest::write_file(bundle, k.bytes);
    const std::string dir = temp_path("hostile-" + k.name + "-out");
    run_command("rm -rf " + dir, nullptr);
    for (const std::string& cmd : {" unpack --list " + bundle, " unpack " + bundle + " -o " + dir,
                                   " inspect " + bundle, " replay " + bundle,
                                   " report " + bundle + " -o " + dir + ".html"}) {
      std::string out;
      const int rc = run_command("TMPDIR=" + tmp + " " + rtest::llmrr_binary() + cmd, &out, true);
      EXPECT_EQ(rc, 2) << k.name << cmd << out;
      EXPECT_NE(out.find(k.says), std::string::npos) << k.name << cmd << out;
      EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << k.name << cmd << out;
    }
    EXPECT_EQ(listing(dir), std::vector<std::string>{}) << k.name;
    EXPECT_EQ(::access((dir + ".html").c_str(), F_OK), -1) << k.name;
    EXPECT_EQ(listing(tmp), std::vector<std::string>{}) << k.name;
  }
}

TEST(HostileBundle, AGoodHandMadeBundleExtracts) {
  // The helper itself is right: the same layout with honest sizes unpacks.
  const std::string bundle = temp_path("hostile-good.llmrr");
  rtest::write_file(bundle, make_bundle({{"manifest.json", manifest()}, {"traces/a.trace", "abcde"}}));
  const std::string dir = temp_path("hostile-good-out");
  run_command("rm -rf " + dir, nullptr);
  auto c = replay::unpack(bundle, dir);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(rtest::read_file(dir + "/traces/a.trace"), "abcde");
  std::vector<std::string> got = listing(dir);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"manifest.json", "traces", "traces/a.trace"}));
}

}  // namespace
}  // namespace llmrr
