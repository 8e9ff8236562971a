// llmrr report: the page for a split pair (alone vs under load, production policy) and for
// one trace; escaping of prompts that carry HTML; rendering in headless Chromium.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <regex>

#include "llmrr/replayer/report.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::read_file;
using rtest::run_command;
using rtest::temp_path;

std::string llmrr() {
  return rtest::llmrr_binary();
}

// The demo's pair: 'Once upon a time' alone, then with 16 other requests (bf16, production):
// a visible split.
struct Pair {
  std::string a, b;
};
const Pair& split_pair() {
  static const Pair p = [] {
    Pair x{temp_path("alone.trace"), temp_path("loaded.trace")};
    const std::string common =
        " record --model builtin:tiny-moe --dtype bf16 --prompt "
        "'Once upon a time' --max-tokens 48 --capture all -o ";
    std::string out;
    EXPECT_EQ(run_command(llmrr() + common + x.a, &out, true), 0) << out;
    EXPECT_EQ(run_command(llmrr() + common + x.b + " --load 16", &out, true), 0) << out;
    return x;
  }();
  return p;
}

const char* kHostilePrompt =
    "<script>document.title='pwned'</script></textarea><img src=x "
    "onerror=\"document.title='pwned'\"><!-- & \"quoted\" 'single'";

const std::string& hostile_trace() {
  static const std::string path = [] {
    const std::string p = temp_path("hostile.trace");
    std::string out;
    // The prompt goes through a file: no shell quoting of the payload.
    const std::string req = temp_path("hostile.jsonl");
    nlohmann::json line = {
        {"prompt", kHostilePrompt}, {"max_tokens", 6}, {"label", "<b>label</b>"}};
    rtest::write_file(req, line.dump() + "\n");
    EXPECT_EQ(run_command(llmrr() + " record --model builtin:tiny-moe --requests " + req +
                              " --capture layers -o " + p,
                          &out, true),
              0)
        << out;
    return p;
  }();
  return path;
}

bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

TEST(Report, SplitPairHasEveryPart) {
  const Pair& p = split_pair();
  const std::string html_path = temp_path("pair.html");
  std::string out;
  ASSERT_EQ(run_command(llmrr() + " report " + p.a + " " + p.b + " -o " + html_path, &out, true), 0)
      << out;
  const std::string html = read_file(html_path);
  for (const char* id :
       {"id=\"runs\"", "id=\"summary\"", "id=\"requests\"", "id=\"batches\"", "id=\"plans\"",
        "id=\"routing\"", "id=\"margins-0\"", "id=\"heatmap-0\"", "id=\"batch-rows\"",
        "id=\"expert-load-0\"", "id=\"expert-load-1\"", "mark class=\"split\""}) {
    EXPECT_TRUE(has(html, id)) << id;
  }
  EXPECT_TRUE(has(html, "visible split"));
  // Routing before the split: a chart of the layers where it differs, or the sentence that
  // it does not.
  EXPECT_TRUE(has(html, "id=\"routing-diff-0\"") || has(html, "went to the same experts"));
  EXPECT_TRUE(has(html, "differs</text>"));
  // The policy row is the same, the load differs and is highlighted.
  EXPECT_TRUE(std::regex_search(html, std::regex("<tr class=\"differs\"><th>load / seed</th>")));
  // Self-contained: nothing fetched from anywhere.
  EXPECT_FALSE(has(html, "http://") && !has(html, "http://www.w3.org/2000/svg"));
  EXPECT_FALSE(std::regex_search(html, std::regex("(src|href)=\"(https?:)?//")));
  EXPECT_EQ(count(html, "<script"), 1u);
  // The same from a bundle of the two traces.
  const std::string bundle = temp_path("pair.llmrr");
  ASSERT_EQ(run_command(llmrr() + " pack " + p.a + " " + p.b + " -q -o " + bundle, &out, true), 0)
      << out;
  ASSERT_EQ(run_command(llmrr() + " report " + bundle + " -o " + html_path + ".2", &out, true), 0)
      << out;
  EXPECT_TRUE(has(read_file(html_path + ".2"), "id=\"heatmap-0\""));
}

TEST(Report, OneTrace) {
  const std::string html_path = temp_path("one.html");
  std::string out;
  ASSERT_EQ(run_command(llmrr() + " report " + split_pair().b + " -o " + html_path, &out, true), 0)
      << out;
  const std::string html = read_file(html_path);
  for (const char* id : {"id=\"runs\"", "id=\"requests\"", "id=\"batches\"", "id=\"plans\"",
                         "id=\"routing\"", "id=\"margins-0\"", "id=\"expert-load-0\""}) {
    EXPECT_TRUE(has(html, id)) << id;
  }
  EXPECT_FALSE(has(html, "id=\"summary\""));
  EXPECT_TRUE(has(html, "Once upon a time"));
}

TEST(Report, BadInputExitsTwo) {
  std::string out;
  const std::string junk = temp_path("junk.trace");
  rtest::write_file(junk, "not a trace");
  EXPECT_EQ(run_command(llmrr() + " report " + junk + " -o " + temp_path("x.html"), &out, true), 2);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(run_command(llmrr() + " report", &out, true), 2);
}

TEST(Report, EveryTraceStringIsEscaped) {
  const std::string html_path = temp_path("hostile.html");
  std::string out;
  ASSERT_EQ(run_command(llmrr() + " report " + hostile_trace() + " -o " + html_path, &out, true), 0)
      << out;
  const std::string html = read_file(html_path);
  EXPECT_FALSE(has(html, "<script>document.title"));
  EXPECT_FALSE(has(html, "</textarea>"));
  EXPECT_FALSE(has(html, "<img src=x"));
  EXPECT_FALSE(has(html, "<b>label</b>"));
  EXPECT_FALSE(has(html, "<!-- &"));
  EXPECT_TRUE(
      has(html, "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;&lt;/textarea&gt;"))
      << "the prompt is shown, escaped";
  EXPECT_TRUE(has(html, "&lt;b&gt;label&lt;/b&gt;"));
  EXPECT_EQ(count(html, "<script"), 1u);
  EXPECT_EQ(replay::html_escape("a<b>&\"'\x01\xff"), "a&lt;b&gt;&amp;&quot;&#39;\\x01\\xff");
}

// ---- headless Chromium -------------------------------------------------------------------

std::string chromium() {
  if (const char* c = std::getenv("LLMRR_CHROMIUM"); c && *c) return c;
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    std::string out;
    if (run_command(std::string("command -v ") + name, &out) == 0 && !out.empty()) {
      while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
      return out;
    }
  }
  return "";
}

struct Rendered {
  int rc = -1;
  std::string dom, log;
};

// Loads `html` in headless Chromium; the DOM after scripts ran and the console log lines.
Rendered render(const std::string& html, const std::string& screenshot = "") {
  Rendered r;
  const std::string profile =
      temp_path("chromium-profile-" + std::to_string(::getpid()) + std::to_string(std::rand()));
  const std::string log = profile + ".log";
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
      "--no-first-run --disable-extensions --disable-background-networking "
      "--user-data-dir=" +
      profile + " --enable-logging=stderr --v=0 --virtual-time-budget=3000 ";
  r.rc = run_command(
      "(timeout 120 " + chromium() + flags + "--dump-dom file://" + html + " 2>" + log + ")",
      &r.dom);
  std::string all = read_file(log);
  // Console messages (errors, CSP refusals, uncaught exceptions) are logged as CONSOLE lines.
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\n', start);
    if (end == std::string::npos) end = all.size();
    std::string line = all.substr(start, end - start);
    if (line.find("CONSOLE") != std::string::npos) r.log += line + "\n";
    start = end + 1;
  }
  if (!screenshot.empty()) {
    std::string out;
    run_command("timeout 120 " + chromium() + flags +
                    "--hide-scrollbars --window-size=1280,2200 "
                    "--screenshot=" +
                    screenshot + " file://" + html + " 2>/dev/null",
                &out);
  }
  return r;
}

TEST(ReportChromium, ConsoleCheckCatchesAnError) {
  if (chromium().empty()) GTEST_SKIP() << "no chromium (tools/setup/report installs it)";
  // The check below is not vacuous: a page that throws and breaks its CSP is caught.
  const std::string bad = temp_path("bad.html");
  rtest::write_file(bad,
                    "<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" "
                    "content=\"script-src 'nonce-x'\"></head><body><script nonce=\"x\">"
                    "undefined_function();</script><script>1</script></body></html>");
  Rendered r = render(bad);
  EXPECT_EQ(r.rc, 0);
  EXPECT_TRUE(has(r.log, "undefined_function")) << r.log;
}

TEST(ReportChromium, RendersWithoutConsoleErrors) {
  if (chromium().empty()) GTEST_SKIP() << "no chromium (tools/setup/report installs it)";
  const Pair& p = split_pair();
  const std::string html = temp_path("chromium.html");
  std::string out;
  ASSERT_EQ(run_command(llmrr() + " report " + p.a + " " + p.b + " -o " + html, &out, true), 0)
      << out;
  const std::string png = std::string(LLMRR_REPORT_SCREENSHOT_DIR) + "/report.png";
  ::unlink(png.c_str());
  Rendered r = render(html, png);
  ASSERT_EQ(r.rc, 0) << r.log;
  EXPECT_TRUE(r.log.empty()) << "console output:\n" << r.log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.dom, m, std::regex("data-llmrr-rendered=\"([0-9]+)\"")))
      << "the page's script did not run";
  EXPECT_GE(std::stoi(m[1]), 8) << "charts rendered";
  EXPECT_FALSE(std::regex_search(r.dom, std::regex("<html[^>]*data-llmrr-error")));
  for (const char* id : {"id=\"runs\"", "id=\"summary\"", "id=\"heatmap-0\"", "id=\"plans\"",
                         "<mark class=\"split\""}) {
    EXPECT_TRUE(has(r.dom, id)) << id;
  }
  const std::string shot = read_file(png);
  ASSERT_GT(shot.size(), 20000u) << png;
  EXPECT_EQ(shot.substr(1, 3), "PNG");
  std::printf("screenshot: %s (%zu bytes)\n", png.c_str(), shot.size());
}

TEST(ReportChromium, HostilePromptDoesNotRun) {
  if (chromium().empty()) GTEST_SKIP() << "no chromium (tools/setup/report installs it)";
  const std::string html = temp_path("hostile-chromium.html");
  std::string out;
  ASSERT_EQ(run_command(llmrr() + " report " + hostile_trace() + " -o " + html, &out, true), 0)
      << out;
  Rendered r = render(html);
  ASSERT_EQ(r.rc, 0);
  EXPECT_TRUE(r.log.empty()) << r.log;
  EXPECT_FALSE(has(r.dom, "pwned</title>"));
  EXPECT_FALSE(has(r.dom, "<img src=\"x\""));
  EXPECT_TRUE(has(r.dom, "data-llmrr-rendered="));
}

}  // namespace
}  // namespace llmrr
