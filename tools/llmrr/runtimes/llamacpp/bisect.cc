// `llmrr bisect --runtime llamacpp TRACE --model GGUF --request R`: the smallest set of R's
// co-requests whose rows, replayed with R's (llmrr replay --runtime llamacpp --drop the
// others), still split R from R replayed alone: delta debugging (ddmin) over the co-requests,
// each test one replay in libllama, then the first difference of that minimal replay against
// R alone, with its op-level cause (diff's op records).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/child.h"
#include "cli/cli.h"
#include "llmrr/format/trace_reader.h"
#include "runtimes/llamacpp/llamacpp.h"

namespace llmrr::runtimes::llamacpp {

using cli::kExitBadInput;
using cli::kExitDiffer;
using cli::kExitInternal;
using cli::kExitOk;
using cli::parse;
using cli::report;

namespace {

std::string ids_text(const std::vector<uint64_t>& ids) {
  std::string s;
  for (uint64_t x : ids) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s.empty() ? "none" : s;
}

struct Search {
  std::string trace, model, dir;
  uint64_t request = 0;
  uint64_t first_id = 0;
  std::vector<uint64_t> co;  // R's co-requests, ascending
  int replays = 0, max_replays = 0;
  std::map<std::vector<uint64_t>, std::string> done;  // kept co-requests -> replay trace

  // R's id in a replay that keeps `kept` (the replay numbers requests by their first rows).
  uint64_t id_in(const std::vector<uint64_t>& kept) const {
    uint64_t before = 0;
    for (uint64_t k : kept) before += k < request;
    return first_id + before;
  }

  // Replays R with `kept` (the others dropped); the replay's trace, or an error.
  Result<std::string> replay(const std::vector<uint64_t>& kept) {
    if (auto it = done.find(kept); it != done.end()) return it->second;
    if (replays >= max_replays)
      return make_error(ErrorCode::kResourceLimit, "--max-replays " + std::to_string(max_replays) +
                                                       " spent");
    std::vector<uint64_t> drop;
    for (uint64_t c : co)
      if (!std::binary_search(kept.begin(), kept.end(), c)) drop.push_back(c);
    const std::string out = dir + "/replay-" + std::to_string(replays++) + ".trace";
    cli::Child c;
    c.argv = {cli::self_exe(), "replay", "--runtime", "llamacpp", trace, "--model", model,
              "--request", std::to_string(request), "-o", out};
    if (!drop.empty()) c.argv.insert(c.argv.end(), {"--drop", ids_text(drop)});
    std::string text;
    c.out = &text;
    Result<int> rc = cli::run_child("bisect", std::move(c));
    if (!rc.ok()) return rc.status();
    if (*rc != 0 && *rc != 1)
      return make_error(ErrorCode::kInternal, "replay keeping " + ids_text(kept) + " exited " +
                                                  std::to_string(*rc) + ": " + text);
    done[kept] = out;
    return out;
  }

  // 1 when R replayed with `kept` differs from R alone, 0 when identical.
  Result<int> splits(const std::vector<uint64_t>& kept) {
    Result<std::string> alone = replay({});
    if (!alone.ok()) return alone.status();
    Result<std::string> with = replay(kept);
    if (!with.ok()) return with.status();
    cli::Child d;
    d.argv = {cli::self_exe(), "diff", *alone, *with, "--request",
              std::to_string(id_in({})) + ":" + std::to_string(id_in(kept))};
    std::string text;
    d.out = &text;
    Result<int> rc = cli::run_child("bisect", std::move(d));
    if (!rc.ok()) return rc.status();
    if (*rc != 0 && *rc != 1)
      return make_error(ErrorCode::kInternal, "diff of the replays exited " +
                                                  std::to_string(*rc) + ": " + text);
    return *rc;
  }
};

// ddmin (Zeller): a 1-minimal subset of `c` that still splits, given that `c` does.
Result<std::vector<uint64_t>> ddmin(Search& s, std::vector<uint64_t> c, bool* one_minimal) {
  size_t n = 2;
  *one_minimal = false;
  while (c.size() >= 2) {
    const size_t chunk = (c.size() + n - 1) / n;
    bool reduced = false;
    std::vector<std::vector<uint64_t>> parts;
    for (size_t i = 0; i < c.size(); i += chunk)
      parts.emplace_back(c.begin() + i, c.begin() + std::min(c.size(), i + chunk));
    for (const auto& p : parts) {  // a part alone
      Result<int> r = s.splits(p);
      if (!r.ok()) return r.status();
      if (*r == 1) {
        c = p;
        n = 2;
        reduced = true;
        break;
      }
    }
    if (!reduced && parts.size() > 2) {
      for (const auto& p : parts) {  // everything but a part
        std::vector<uint64_t> rest;
        for (uint64_t x : c)
          if (std::find(p.begin(), p.end(), x) == p.end()) rest.push_back(x);
        Result<int> r = s.splits(rest);
        if (!r.ok()) return r.status();
        if (*r == 1) {
          c = rest;
          n = std::max<size_t>(n - 1, 2);
          reduced = true;
          break;
        }
      }
    }
    if (reduced) continue;
    if (n >= c.size()) break;
    n = std::min(c.size(), 2 * n);
  }
  // 1-minimal: no single co-request can go (for one left: R alone does not split).
  *one_minimal = true;
  if (c.size() > 1) {
    for (size_t i = 0; i < c.size(); ++i) {
      std::vector<uint64_t> rest = c;
      rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
      Result<int> r = s.splits(rest);
      if (!r.ok()) return r.status();
      if (*r == 1) *one_minimal = false;
    }
  }
  return c;
}

}  // namespace

int bisect(const char* command, int argc, char** argv) {
  (void)command;
  CLI::App app{"Shrink a llama.cpp split to the co-requests that cause it (--runtime llamacpp).",
               "bisect"};
  std::string path, model, dir;
  uint64_t request = 0;
  int max_replays = 32;
  app.add_option("TRACE", path, "a trace recorded by llmrr record-llamacpp")->required();
  app.add_option("--model", model, "the GGUF file it was recorded with")->required();
  app.add_option("--request", request, "the request whose split is explained")->required();
  app.add_option("-o,--output", dir, "a new folder for the replays and bisect.json "
                                     "(default: TRACE.bisect)");
  app.add_option("--max-replays", max_replays, "replays at most (default 32)")
      ->check(CLI::Range(2, 4096));
  app.footer(
      "Example:\n"
      "  llmrr bisect --runtime llamacpp run.trace --model SmolLM2.gguf --request 0\n"
      "\n"
      "Replays the request alone and with subsets of its co-requests (llmrr replay --runtime\n"
      "llamacpp --drop), each in libllama under the shim, and keeps the smallest set whose rows\n"
      "still split it from the request alone (ddmin; 1-minimal when the budget allows), then\n"
      "prints the first difference of that replay against the request alone, with the ops that\n"
      "ran otherwise there. DIR/bisect.json holds the search. Exit codes: 0 the request\n"
      "replays alone as recorded (no co-request changes it); 1 a minimal set was found; 2 bad\n"
      "input; 3 a replay failed.");
  if (int rc = parse(app, argc, argv); rc >= 0) return rc;
  namespace fs = std::filesystem;
  Search s;
  s.trace = path;
  s.model = model;
  s.request = request;
  s.max_replays = max_replays;
  {
    auto r = trace::TraceReader::open(path);
    if (!r.ok()) return report("bisect", r.status());
    bool found = false;
    int64_t last = -1;
    if (!(*r)->requests().empty()) s.first_id = (*r)->requests()[0].id;
    for (const trace::RequestSummary& q : (*r)->requests()) {
      s.first_id = std::min(s.first_id, q.id);
      if (q.id == request) {
        found = true;
        last = q.finish_step;
      }
    }
    if (!found)
      return report("bisect", make_error(ErrorCode::kInvalidArgument,
                                         "--request " + std::to_string(request) +
                                             ": no such request in " + path));
    // The co-requests: every other request whose rows came before R's last step (they can
    // share R's batches or move its KV cells).
    std::set<uint64_t> co;
    trace::StepCursor c = (*r)->steps();
    trace::StepRecord st;
    for (;;) {
      auto more = c.next(&st);
      if (!more.ok()) return report("bisect", more.status());
      if (!*more || (last >= 0 && st.step > last)) break;
      for (const trace::Segment& g : st.segments)
        if (g.request != request) co.insert(g.request);
    }
    s.co.assign(co.begin(), co.end());
  }
  if (dir.empty()) dir = path + ".bisect";
  std::error_code ec;
  if (fs::exists(dir, ec))
    return report("bisect", make_error(ErrorCode::kInvalidArgument,
                                       dir + ": exists; bisect writes a new folder (-o)"));
  if (!fs::create_directory(dir, ec))
    return report("bisect", make_error(ErrorCode::kIo, dir + ": cannot create: " + ec.message()));
  s.dir = dir;
  const auto t0 = std::chrono::steady_clock::now();
  auto fail = [&](const Status& st) {
    std::fprintf(stderr, "llmrr bisect: error: %s\n", st.message().c_str());
    return st.code() == ErrorCode::kInvalidArgument ? kExitBadInput : kExitInternal;
  };
  nlohmann::json j = {{"trace", path}, {"request", request}, {"co_requests", s.co}};
  // Does the request split from itself alone at all?
  Result<int> all = s.splits(s.co);
  if (!all.ok()) return fail(all.status());
  std::vector<uint64_t> minimal;
  bool one_minimal = false;
  if (*all == 1) {
    Result<std::vector<uint64_t>> m = ddmin(s, s.co, &one_minimal);
    if (!m.ok()) return fail(m.status());
    minimal = *m;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  j["splits"] = *all == 1;
  j["minimal"] = minimal;
  j["one_minimal"] = one_minimal;
  j["replays"] = s.replays;
  j["seconds"] = secs;
  std::string story;
  if (*all == 1) {
    // The minimal split against the request alone, as diff tells it (JSON for bisect.json).
    Result<std::string> alone = s.replay({});
    Result<std::string> with = s.replay(minimal);
    if (!alone.ok() || !with.ok()) return fail(!alone.ok() ? alone.status() : with.status());
    const std::string pair = std::to_string(s.id_in({})) + ":" + std::to_string(s.id_in(minimal));
    for (bool json : {false, true}) {
      cli::Child d;
      d.argv = {cli::self_exe(), "diff", *alone, *with, "--request", pair};
      if (json) d.argv.push_back("--json");
      std::string text;
      d.out = &text;
      Result<int> rc = cli::run_child("bisect", std::move(d));
      if (!rc.ok()) return fail(rc.status());
      if (!json) {
        story = text;
        continue;
      }
      nlohmann::json dj = nlohmann::json::parse(text, nullptr, false);
      if (dj.is_object() && dj.contains("requests") && dj["requests"].is_array() &&
          !dj["requests"].empty())
        j["first_difference"] = dj["requests"][0].value("first_difference", nlohmann::json());
    }
    // Relative to DIR (a campaign moves the folder), with the target's id in each.
    j["alone_trace"] = fs::path(*alone).filename().string();
    j["alone_id"] = s.id_in({});
    j["minimal_trace"] = fs::path(*with).filename().string();
    j["minimal_id"] = s.id_in(minimal);
  }
  {
    std::FILE* f = std::fopen((dir + "/bisect.json").c_str(), "wx");
    if (f == nullptr) return fail(make_error(ErrorCode::kIo, dir + "/bisect.json: cannot create"));
    const std::string text = j.dump(1) + "\n";
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  if (*all != 1) {
    std::printf("request %llu replayed with its %zu co-request%s (%s) is identical to it replayed "
                "alone: they do not change it (%d replays, %.1f s)\n",
                static_cast<unsigned long long>(request), s.co.size(),
                s.co.size() == 1 ? "" : "s", ids_text(s.co).c_str(), s.replays, secs);
    return kExitOk;
  }
  std::printf("request %llu: minimal co-request set %s of %zu (%s)%s; %d replays, %.1f s\n",
              static_cast<unsigned long long>(request), ids_text(minimal).c_str(), s.co.size(),
              ids_text(s.co).c_str(), one_minimal ? ", 1-minimal" : " (budget spent before "
              "1-minimality was checked)", s.replays, secs);
  std::printf("the request alone (A) against it with %s (B):\n%s", ids_text(minimal).c_str(),
              story.c_str());
  return kExitDiffer;
}

}  // namespace llmrr::runtimes::llamacpp
