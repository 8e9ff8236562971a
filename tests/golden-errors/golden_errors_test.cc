// Every committed bad input is rejected with its named error: through the library (error
// code, message) and through `llmrr verify` (exit 2 and exactly one clear line on stderr).
// Never a crash, a hang or an unbounded allocation (the suite runs under ASan in CI too).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "bad_inputs.h"
#include "llmrr/format/trace_reader.h"
#include "run_cli.h"

namespace llmrr::trace {
namespace {

namespace fs = std::filesystem;

struct Expected {
  std::string name;
  int exit = -1;
  std::string code, message;
};

std::vector<Expected> committed() {
  std::vector<Expected> v;
  for (const auto& e : fs::directory_iterator(LLMRR_GOLDEN_ERRORS_DIR)) {
    if (e.path().extension() != ".expected") continue;
    Expected x;
    x.name = e.path().stem().string();
    std::ifstream f(e.path());
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("exit ", 0) == 0) x.exit = std::stoi(line.substr(5));
      if (line.rfind("code ", 0) == 0) x.code = line.substr(5);
      if (line.rfind("message ", 0) == 0) x.message = line.substr(8);
    }
    v.push_back(x);
  }
  std::sort(v.begin(), v.end(),
            [](const Expected& a, const Expected& b) { return a.name < b.name; });
  return v;
}

std::string trace_path(const std::string& name) {
  return std::string(LLMRR_GOLDEN_ERRORS_DIR) + "/" + name + ".trace";
}

TEST(GoldenErrors, EveryRecipeIsCommitted) {
  std::set<std::string> files;
  for (const Expected& e : committed()) files.insert(e.name);
  for (const golden_errors::BadInput& b : golden_errors::bad_inputs()) {
    EXPECT_TRUE(files.count(b.name)) << b.name << " is not committed: run make_golden_errors";
    EXPECT_TRUE(fs::exists(trace_path(b.name))) << b.name;
  }
  EXPECT_GE(files.size(), 30u);
}

class GoldenError : public ::testing::TestWithParam<Expected> {};

TEST_P(GoldenError, LibraryRejectsIt) {
  const Expected& e = GetParam();
  auto r = TraceReader::open(trace_path(e.name));
  Status st = r.ok() ? (*r)->verify() : r.status();
  std::string text = st.message();
  if (st.ok()) {
    // Readable but incomplete: `llmrr verify` turns that into a truncated error.
    ASSERT_FALSE((*r)->has_footer()) << e.name << " was accepted";
    st = make_error(ErrorCode::kTruncated, "incomplete trace");
    for (const std::string& w : (*r)->warnings()) text += " | " + w;
    text += " | incomplete trace";
  }
  EXPECT_EQ(error_code_name(st.code()), e.code) << e.name << ": " << st.to_string();
  EXPECT_NE(text.find(e.message), std::string::npos) << e.name << ": " << text;
  EXPECT_EQ(exit_code_for(st), 2) << e.name;
}

TEST_P(GoldenError, VerifyExitsTwoWithOneClearLine) {
  const Expected& e = GetParam();
  llmrr::testing::CliResult res = llmrr::testing::run_llmrr({"verify", trace_path(e.name)});
  EXPECT_EQ(res.exit_code, e.exit) << e.name << ": " << res.err;
  const auto lines = res.err_lines();
  ASSERT_EQ(lines.size(), 1u) << e.name << ": " << res.err;
  EXPECT_NE(lines[0].find("llmrr verify: error: " + e.code + " ("), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(e.message), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(e.name + ".trace"), std::string::npos)
      << "the line names the file: " << lines[0];
  EXPECT_TRUE(res.out.empty()) << res.out;
}

INSTANTIATE_TEST_SUITE_P(Files, GoldenError, ::testing::ValuesIn(committed()),
                         [](const ::testing::TestParamInfo<Expected>& i) { return i.param.name; });

TEST(GoldenErrors, DirectoryIsRejected) {
  const std::string dir = "/tmp/llmrr_golden_dir_" + std::to_string(::getpid()) + ".trace";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  llmrr::testing::CliResult res = llmrr::testing::run_llmrr({"verify", dir});
  auto r = TraceReader::open(dir);
  ::rmdir(dir.c_str());
  EXPECT_EQ(res.exit_code, 2);
  ASSERT_EQ(res.err_lines().size(), 1u) << res.err;
  EXPECT_NE(res.err.find("is_directory (202)"), std::string::npos) << res.err;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kIsDirectory);
}

TEST(GoldenErrors, MissingFileIsRejected) {
  llmrr::testing::CliResult res = llmrr::testing::run_llmrr({"verify", "/tmp/llmrr_no_such_file.trace"});
  EXPECT_EQ(res.exit_code, 2);
  ASSERT_EQ(res.err_lines().size(), 1u) << res.err;
  EXPECT_NE(res.err.find("not_found (201)"), std::string::npos) << res.err;
}

}  // namespace
}  // namespace llmrr::trace
