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
  uint64_t prompt_hash = 0;  // R's, to find it in a replay
  std::string label;
  std::vector<uint64_t> co;  // R's co-requests, ascending (the candidates)
  // A request whose first rows start past position 0 reuses the KV cells of the request before
  // it on its sequence (llama-server's prompt cache): that one is kept whenever it is.
  std::map<uint64_t, uint64_t> provider;
  std::vector<uint64_t> fixed;  // R's own providers: kept in every replay
  int replays = 0, max_replays = 0;
  struct Replayed {
    std::string path;  // the replay's trace
    uint64_t id;       // R's id in it
  };
  std::map<std::vector<uint64_t>, Replayed> done;  // kept requests (closure) -> the replay

  // `kept` with the providers of R and of every request in it (transitively), ascending.
  std::vector<uint64_t> closure(const std::vector<uint64_t>& kept) const {
    std::set<uint64_t> all(kept.begin(), kept.end());
    std::vector<uint64_t> todo(kept.begin(), kept.end());
    todo.push_back(request);
    while (!todo.empty()) {
      const uint64_t x = todo.back();
      todo.pop_back();
      auto it = provider.find(x);
      if (it != provider.end() && it->second != request && all.insert(it->second).second)
        todo.push_back(it->second);
    }
    return {all.begin(), all.end()};
  }

  // R's id in a replay that keeps `kept` (the replay numbers requests by their first rows).
  uint64_t id_in(const std::vector<uint64_t>& kept_) const {
    uint64_t before = 0;
    for (uint64_t k : closure(kept_)) before += k < request;
    return first_id + before;
  }

  // Replays R with `kept` (the others dropped), once per kept set.
  Result<Replayed> replay(const std::vector<uint64_t>& kept_) {
    const std::vector<uint64_t> kept = closure(kept_);
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
    // A lossy replay is no counterfactual (a row's KV came from a request it dropped).
    auto r = trace::TraceReader::open(out);
    if (!r.ok()) return r.status();
    if ((*r)->lossy())
      return make_error(ErrorCode::kInternal, "the replay keeping " + ids_text(kept) +
                                                  " is lossy (" + (*r)->lossy_reason() +
                                                  "): it is not the run without the others");
    Result<uint64_t> id = id_in_replay(**r, prompt_hash, label, id_in(kept));
    if (!id.ok()) return id.status();
    return done[kept] = Replayed{out, *id};
  }

  // 1 when R replayed with `kept` differs from R alone, 0 when identical.
  Result<int> splits(const std::vector<uint64_t>& kept) {
    Result<Replayed> alone = replay({});
    if (!alone.ok()) return alone.status();
    Result<Replayed> with = replay(kept);
    if (!with.ok()) return with.status();
    cli::Child d;
    d.argv = {cli::self_exe(), "diff", alone->path, with->path, "--request",
              std::to_string(alone->id) + ":" + std::to_string(with->id)};
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
        s.prompt_hash = q.prompt_hash;
        s.label = q.label;
      }
    }
    if (!found)
      return report("bisect", make_error(ErrorCode::kInvalidArgument,
                                         "--request " + std::to_string(request) +
                                             ": no such request in " + path));
    // The co-requests: every other request whose rows came before R's last step (they can
    // share R's batches or move its KV cells).
    std::set<uint64_t> co;
    std::map<uint64_t, std::string> seq_of;     // request -> its label's sequence
    std::map<std::string, uint64_t> last_on;    // sequence -> the last request that started on it
    std::set<uint64_t> started;
    trace::StepCursor c = (*r)->steps();
    trace::StepRecord st;
    for (;;) {
      auto more = c.next(&st);
      if (!more.ok()) return report("bisect", more.status());
      if (!*more || (last >= 0 && st.step > last)) break;
      for (const trace::RequestRecord& q : st.arrivals) {
        const size_t at = q.label.rfind("seq=");
        seq_of[q.id] = at == std::string::npos ? q.label : q.label.substr(at);
      }
      for (const trace::Segment& g : st.segments) {
        if (g.request != request) co.insert(g.request);
        if (!started.insert(g.request).second) continue;
        const std::string& seq = seq_of[g.request];
        auto prev = last_on.find(seq);
        if (g.start > 0 && prev != last_on.end()) s.provider[g.request] = prev->second;
        last_on[seq] = g.request;
      }
    }
    s.fixed = s.closure({});
    for (uint64_t f : s.fixed) co.erase(f);
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
  nlohmann::json j = {{"trace", path}, {"request", request}, {"co_requests", s.co},
                      {"kept_for_cache", s.fixed}};
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
    Result<Search::Replayed> alone = s.replay({});
    Result<Search::Replayed> with = s.replay(minimal);
    if (!alone.ok() || !with.ok()) return fail(!alone.ok() ? alone.status() : with.status());
    const std::string pair = std::to_string(alone->id) + ":" + std::to_string(with->id);
    std::vector<uint64_t> with_providers;  // the minimal set's own providers, kept with it
    for (uint64_t x : s.closure(minimal))
      if (!std::binary_search(minimal.begin(), minimal.end(), x) &&
          std::find(s.fixed.begin(), s.fixed.end(), x) == s.fixed.end())
        with_providers.push_back(x);
    j["kept_with_minimal"] = with_providers;
    for (bool json : {false, true}) {
      cli::Child d;
      d.argv = {cli::self_exe(), "diff", alone->path, with->path, "--request", pair};
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
    j["alone_trace"] = fs::path(alone->path).filename().string();
    j["alone_id"] = alone->id;
    j["minimal_trace"] = fs::path(with->path).filename().string();
    j["minimal_id"] = with->id;
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
  if (!s.fixed.empty())
    std::printf("kept in every replay: %s (the request's cached prefix is their KV cells)\n",
                ids_text(s.fixed).c_str());
  std::string with_text;
  for (const auto& x : j["kept_with_minimal"]) with_text += (with_text.empty() ? "" : ",") +
                                                            std::to_string(x.get<uint64_t>());
  std::printf("request %llu: minimal co-request set %s of %zu (%s)%s%s; %d replays, %.1f s\n",
              static_cast<unsigned long long>(request), ids_text(minimal).c_str(), s.co.size(),
              ids_text(s.co).c_str(),
              with_text.empty() ? "" : (" (with " + with_text + ", whose KV cells its cached "
                                        "prefixes reuse)").c_str(),
              one_minimal ? ", 1-minimal" : " (budget spent before 1-minimality was checked)",
              s.replays, secs);
  std::printf("the request alone (A) against it with %s (B):\n%s", ids_text(minimal).c_str(),
              story.c_str());
  return kExitDiffer;
}

}  // namespace llmrr::runtimes::llamacpp
