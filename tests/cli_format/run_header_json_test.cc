// Every RunHeader field (format/include/llmrr/format/records.h, read here as source text so
// that a field added there and not to run_header_json fails this test) appears, with the
// same value, in the three places a run header is shown: `llmrr inspect --json`'s
// "run_header", the reader C ABI's header JSON (what Python's Trace.header is) and the HTML
// report's run header.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "llmrr/reader.h"
#include "run_cli.h"

namespace {

using llmrr::testing::run_llmrr;
using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Member names of `struct name { ... };` in records.h, nested structs expanded as
// "device.runtime".
void fields_of(const std::string& src, const std::string& name, const std::string& prefix,
               std::vector<std::string>* out) {
  const size_t at = src.find("struct " + name + " {");
  ASSERT_NE(at, std::string::npos) << name;
  const size_t end = src.find("\n};", at);
  std::istringstream body(src.substr(at, end - at));
  std::string line;
  std::getline(body, line);  // "struct X {"
  const std::regex member(R"(^\s*([A-Za-z_][\w:<>, ]*?)\s+([a-z_][a-z_0-9]*)\s*(=[^;]*)?;\s*$)");
  while (std::getline(body, line)) {
    if (size_t c = line.find("//"); c != std::string::npos) line.erase(c);
    if (line.find('(') != std::string::npos) continue;  // operator==, functions
    std::smatch m;
    if (!std::regex_match(line, m, member)) continue;
    const std::string type = m[1], field = m[2];
    if (type == "HostInfo" || type == "DeviceInfo" || type == "ModelInfo" ||
        type == "EngineConfig") {
      fields_of(src, type, prefix + field + ".", out);
    } else {
      out->push_back(prefix + field);
    }
  }
}

const json* at_path(const json& j, const std::string& path) {
  const json* p = &j;
  size_t from = 0;
  for (;;) {
    const size_t dot = path.find('.', from);
    const std::string key = path.substr(from, dot == std::string::npos ? dot : dot - from);
    if (!p->is_object() || !p->contains(key)) return nullptr;
    p = &(*p)[key];
    if (dot == std::string::npos) return p;
    from = dot + 1;
  }
}

std::string html_unescape(std::string s) {
  const std::pair<const char*, const char*> map[] = {
      {"&quot;", "\""}, {"&#39;", "'"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}};
  for (const auto& [from, to] : map) {
    for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += std::strlen(to)) {
      s.replace(at, std::strlen(from), to);
    }
  }
  return s;
}

TEST(RunHeaderJson, EveryRecordsFieldInInspectCApiAndReport) {
  std::vector<std::string> fields;
  fields_of(read_text(LLMRR_RECORDS_H), "RunHeader", "", &fields);
  // The parse itself: the struct's members, and some of each nested struct's.
  ASSERT_GE(fields.size(), 45u);
  for (const char* f :
       {"format_major", "tool_version", "host.isa", "device.runtime", "device.cublaslt",
        "model.weight_hash", "engine.fingerprint", "extra_config_json", "command_line"}) {
    EXPECT_NE(std::find(fields.begin(), fields.end(), f), fields.end()) << f;
  }

  const std::string trace = std::string(LLMRR_GOLDEN_DIR) + "/moe_run.trace";
  auto insp = run_llmrr({"inspect", "--json", trace});
  ASSERT_EQ(insp.exit_code, 0) << insp.err;
  const json inspect = json::parse(insp.out)["run_header"];

  llmrr_reader* r = nullptr;
  ASSERT_EQ(llmrr_reader_open(trace.c_str(), &r), LLMRR_OK) << llmrr_reader_last_error();
  const json capi = json::parse(llmrr_reader_header_json(r));
  llmrr_reader_close(r);

  const std::string html_path = ::testing::TempDir() + "run_header_json_test.html";
  auto rep = run_llmrr({"report", trace, "-o", html_path});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const std::string html = read_text(html_path);
  std::remove(html_path.c_str());
  const std::string open = "<pre class=\"run-header text\" data-trace=\"trace\">";
  const size_t from = html.find(open);
  ASSERT_NE(from, std::string::npos);
  const size_t to = html.find("</pre>", from);
  const json report =
      json::parse(html_unescape(html.substr(from + open.size(), to - from - open.size())));

  for (const std::string& f : fields) {
    const json* a = at_path(inspect, f);
    const json* b = at_path(capi, f);
    const json* c = at_path(report, f);
    ASSERT_TRUE(a) << "inspect --json lacks run_header." << f;
    ASSERT_TRUE(b) << "llmrr_reader_header_json lacks " << f;
    ASSERT_TRUE(c) << "the report's run header lacks " << f;
    EXPECT_EQ(*a, *b) << f;
    EXPECT_EQ(*a, *c) << f;
  }
}

}  // namespace
