// summary.json of `llmrr fuzz` (write, read, merge shards) and the text report.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <type_traits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "json.h"
#include "llmrr/replayer/fuzz.h"
#include "llmrr/safeio/json.h"

namespace llmrr::replay {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

Json comp_to_json(const Composition& c) {
  Json others = Json::array();
  for (const CoRequest& r : c.others) {
    others.push_back(
        {{"prompt_ids", r.prompt}, {"max_tokens", r.max_tokens}, {"arrival_step", r.arrival_step}});
  }
  return {{"target_arrival", c.target_arrival},
          {"prefill_chunk", c.prefill_chunk},
          {"capacity_factor", c.capacity_factor},
          {"overflow", overflow_name(c.overflow)},
          {"co_requests", c.others.size()},
          {"prompt_tokens", c.prompt_tokens()},
          {"others", others}};
}

Overflow overflow_from(const std::string& s) {
  if (s == "drop") return Overflow::kDrop;
  if (s == "reroute") return Overflow::kReroute;
  return Overflow::kNone;
}

Composition comp_from_json(const Json& j) {
  Composition c;
  c.target_arrival = j.at("target_arrival").get<int64_t>();
  c.prefill_chunk = j.at("prefill_chunk").get<int32_t>();
  c.capacity_factor = j.at("capacity_factor").get<double>();
  c.overflow = overflow_from(j.at("overflow").get<std::string>());
  for (const Json& r : j.at("others")) {
    CoRequest x;
    x.prompt = r.at("prompt_ids").get<std::vector<int32_t>>();
    x.max_tokens = r.at("max_tokens").get<int32_t>();
    x.arrival_step = r.at("arrival_step").get<int64_t>();
    c.others.push_back(std::move(x));
  }
  return c;
}

Json cmp_to_json(const FuzzComparison& c) {
  return {{"verdict", fuzz_verdict_name(c.verdict)}, {"numerical_token", c.numerical_token},
          {"visible_token", c.visible_token},         {"cause", c.cause},
          {"cause_position", c.cause_position},       {"cause_layer", c.cause_layer}};
}

FuzzComparison cmp_from_json(const Json& j) {
  FuzzComparison c;
  const std::string v = j.at("verdict").get<std::string>();
  c.verdict = v == "visible"     ? FuzzVerdict::kVisible
              : v == "numerical" ? FuzzVerdict::kNumerical
                                 : FuzzVerdict::kIdentical;
  c.numerical_token = j.at("numerical_token").get<int32_t>();
  c.visible_token = j.at("visible_token").get<int32_t>();
  c.cause = j.at("cause").get<std::string>();
  c.cause_position = j.at("cause_position").get<int32_t>();
  c.cause_layer = j.at("cause_layer").get<int32_t>();
  return c;
}

template <typename K>
Json hist_json(const std::map<K, int64_t>& h) {
  Json j = Json::object();
  for (const auto& [k, v] : h) {
    if constexpr (std::is_same_v<K, std::string>) {
      j[k] = v;
    } else {
      j[std::to_string(k)] = v;
    }
  }
  return j;
}

double share(int64_t n, int64_t total) { return total > 0 ? static_cast<double>(n) / total : 0; }

}  // namespace

std::string fuzz_space_json(const FuzzSpace& sp) {
  Json j = {{"max_co_requests", sp.max_co_requests},
            {"min_prompt", sp.min_prompt},
            {"max_prompt", sp.max_prompt},
            {"max_new", sp.max_new},
            {"max_arrival", sp.max_arrival},
            {"max_target_arrival", sp.max_target_arrival},
            {"prefill_chunk", sp.prefill_chunk ? Json(*sp.prefill_chunk) : Json("random")},
            {"capacity_factor", sp.capacity_factor ? Json(*sp.capacity_factor) : Json("random")},
            {"overflow", sp.overflow ? Json(overflow_name(*sp.overflow)) : Json("random")},
            {"moe", sp.moe},
            {"tokens", {sp.token_lo, sp.token_hi}}};
  return safeio::dump(j);
}

std::string composition_json(const Composition& c) { return safeio::dump(comp_to_json(c)); }

std::string fuzz_summary_json(const FuzzSummary& s) {
  const int64_t n = static_cast<int64_t>(s.results.size());
  Json results = Json::array();
  for (const FuzzRunResult& r : s.results) {
    Json j = cmp_to_json(r.comparison);
    j["index"] = r.index;
    j["co_requests"] = r.co_requests;
    j["prompt_tokens"] = r.prompt_tokens;
    j["target_arrival"] = r.target_arrival;
    j["prefill_chunk"] = r.prefill_chunk;
    j["capacity_factor"] = r.capacity_factor;
    j["overflow"] = overflow_name(r.overflow);
    j["completion"] = r.completion;
    j["target_dropped"] = r.dropped;
    j["target_rerouted"] = r.rerouted;
    results.push_back(std::move(j));
  }
  Json completions = Json::object();
  std::map<std::string, int64_t> counts;
  for (const FuzzRunResult& r : s.results) ++counts[r.completion];
  for (const auto& [h, ids] : s.completion_tokens) {
    auto t = s.completion_text.find(h);
    completions[h] = {{"tokens", ids},
                      {"text", t == s.completion_text.end() ? "" : t->second},
                      {"runs", counts.count(h) ? counts[h] : 0}};
  }
  Json splits = Json::array();
  for (const FuzzSplit& sp : s.splits) {
    splits.push_back({{"first_index", sp.first_index},
                      {"completion", sp.completion},
                      {"original", comp_to_json(sp.original)},
                      {"shrunk", comp_to_json(sp.shrunk)},
                      {"shrink_runs", sp.shrink_runs},
                      {"shrunk_comparison", cmp_to_json(sp.shrunk_comparison)},
                      {"dir", sp.dir},
                      {"commands", sp.commands},
                      {"diff", {{"verdict", sp.diff_verdict},
                                {"cause", sp.diff_cause},
                                {"cause_text", sp.diff_cause_text}}}});
  }
  // Our own text (fuzz_space_json, or a summary parsed under safeio's caps), parsed under
  // the same caps all the same; kept as the string it is should it ever not parse.
  Result<Json> parsed = safeio::parse_json(s.space_json, "generator space", ErrorCode::kInternal);
  const Json space = parsed.ok() ? std::move(parsed).value() : Json(s.space_json);
  Json j = {
      {"llmrr_fuzz_summary", 1},
      {"campaign",
       {{"model", s.model_spec},
        {"model_identity", s.model_identity},
        {"policy", s.policy},
        {"dtype", s.dtype},
        {"target_prompt_ids", s.target_prompt},
        {"prompt", s.prompt_text},
        {"max_tokens", s.max_tokens},
        {"seed", s.seed},
        {"runs", s.runs},
        {"shards", s.shards},
        {"space", space}}},
      {"shard_list", s.shard_list},
      {"runs_done", n},
      {"seconds", s.seconds},
      {"baseline_completion", s.baseline_completion},
      {"stats",
       {{"identical", s.identical},
        {"numerical", s.numerical},
        {"visible", s.visible},
        {"share_numerical", share(s.numerical, n)},
        {"share_visible", share(s.visible, n)},
        {"unique_completions", s.unique_completions},
        {"first_split_token", hist_json(s.numerical_hist)},
        {"first_visible_split_token", hist_json(s.visible_hist)},
        {"causes", hist_json(s.causes)},
        {"visible_causes", hist_json(s.visible_causes)}}},
      {"completions", completions},
      {"splits", splits},
      {"results", results}};
  return safeio::dump(j, 1);
}

Result<FuzzSummary> parse_fuzz_summary(const std::string& text, const std::string& name) {
  // A summary nests 4 levels: anything deeper is refused before the parser recurses into it.
  RETURN_IF_ERROR(safeio::check_json_depth(text, name, ErrorCode::kInvalidArgument));
  Result<Json> parsed = safeio::parse_json(text, name, ErrorCode::kInvalidArgument);
  const Json j = parsed.ok() ? std::move(parsed).value() : Json();
  if (!j.is_object() || !j.contains("llmrr_fuzz_summary")) {
    return make_error(ErrorCode::kInvalidArgument,
                      name + ": not a summary.json written by llmrr fuzz");
  }
  FuzzSummary s;
  try {
    const Json& c = j.at("campaign");
    s.model_spec = c.at("model").get<std::string>();
    s.model_identity = c.at("model_identity").get<std::string>();
    s.policy = c.at("policy").get<std::string>();
    s.dtype = c.at("dtype").get<std::string>();
    s.target_prompt = c.at("target_prompt_ids").get<std::vector<int32_t>>();
    s.prompt_text = c.at("prompt").get<std::string>();
    s.max_tokens = c.at("max_tokens").get<int32_t>();
    s.seed = c.at("seed").get<uint64_t>();
    s.runs = c.at("runs").get<int64_t>();
    s.shards = c.at("shards").get<int32_t>();
    s.space_json = safeio::dump(c.at("space"));
    s.shard_list = j.at("shard_list").get<std::vector<int32_t>>();
    s.seconds = j.at("seconds").get<double>();
    s.baseline_completion = j.at("baseline_completion").get<std::string>();
    for (const auto& [h, v] : j.at("completions").items()) {
      s.completion_tokens[h] = v.at("tokens").get<std::vector<int32_t>>();
      s.completion_text[h] = v.at("text").get<std::string>();
    }
    for (const Json& r : j.at("results")) {
      FuzzRunResult x;
      x.comparison = cmp_from_json(r);
      x.index = r.at("index").get<int64_t>();
      x.co_requests = r.at("co_requests").get<int32_t>();
      x.prompt_tokens = r.at("prompt_tokens").get<int64_t>();
      x.target_arrival = r.at("target_arrival").get<int64_t>();
      x.prefill_chunk = r.at("prefill_chunk").get<int32_t>();
      x.capacity_factor = r.at("capacity_factor").get<double>();
      x.overflow = overflow_from(r.at("overflow").get<std::string>());
      x.completion = r.at("completion").get<std::string>();
      x.dropped = r.at("target_dropped").get<int64_t>();
      x.rerouted = r.at("target_rerouted").get<int64_t>();
      s.results.push_back(std::move(x));
    }
    for (const Json& p : j.at("splits")) {
      FuzzSplit x;
      x.first_index = p.at("first_index").get<int64_t>();
      x.completion = p.at("completion").get<std::string>();
      x.original = comp_from_json(p.at("original"));
      x.shrunk = comp_from_json(p.at("shrunk"));
      x.shrink_runs = p.at("shrink_runs").get<int32_t>();
      x.shrunk_comparison = cmp_from_json(p.at("shrunk_comparison"));
      x.dir = p.at("dir").get<std::string>();
      x.commands = p.at("commands").get<std::vector<std::string>>();
      x.diff_verdict = p.at("diff").at("verdict").get<std::string>();
      x.diff_cause = p.at("diff").at("cause").get<std::string>();
      x.diff_cause_text = p.at("diff").at("cause_text").get<std::string>();
      s.splits.push_back(std::move(x));
    }
  } catch (const Json::exception& e) {
    return make_error(ErrorCode::kInvalidArgument,
                      name + ": malformed llmrr fuzz summary: " + std::string(e.what()));
  }
  summarize(&s);
  return s;
}

Result<FuzzSummary> merge_fuzz_summaries(const std::vector<FuzzSummary>& in,
                                         const std::vector<std::string>& dirs,
                                         const std::string& out_dir) {
  if (in.empty()) return make_error(ErrorCode::kInvalidArgument, "fuzz merge: no summaries");
  FuzzSummary m = in.front();
  m.results.clear();
  m.splits.clear();
  m.shard_list.clear();
  m.seconds = 0;
  std::set<int32_t> shards;
  std::set<int64_t> indices;
  for (size_t i = 0; i < in.size(); ++i) {
    const FuzzSummary& s = in[i];
    const std::string where = i < dirs.size() ? dirs[i] : "#" + std::to_string(i);
    auto differs = [&](const char* what) {
      return make_error(ErrorCode::kInvalidArgument,
                        "fuzz merge: " + where + " is from another campaign (" + what +
                            " differs from " + (dirs.empty() ? "the first" : dirs[0]) + "'s)");
    };
    if (s.model_identity != m.model_identity) return differs("model");
    if (s.policy != m.policy) return differs("policy");
    if (s.dtype != m.dtype) return differs("dtype");
    if (s.target_prompt != m.target_prompt) return differs("target prompt");
    if (s.max_tokens != m.max_tokens) return differs("max tokens");
    if (s.seed != m.seed) return differs("seed");
    if (s.runs != m.runs) return differs("runs");
    if (s.shards != m.shards) return differs("shard count");
    if (s.space_json != m.space_json) return differs("generator space");
    if (s.baseline_completion != m.baseline_completion) return differs("baseline");
    for (int32_t sh : s.shard_list) {
      if (!shards.insert(sh).second) {
        return make_error(ErrorCode::kInvalidArgument,
                          "fuzz merge: shard " + std::to_string(sh) + " appears twice (" + where + ")");
      }
      m.shard_list.push_back(sh);
    }
    for (const FuzzRunResult& r : s.results) {
      if (!indices.insert(r.index).second) {
        return make_error(ErrorCode::kInvalidArgument,
                          "fuzz merge: run " + std::to_string(r.index) + " appears twice");
      }
      m.results.push_back(r);
    }
    for (const auto& [h, t] : s.completion_tokens) m.completion_tokens.emplace(h, t);
    for (const auto& [h, t] : s.completion_text) m.completion_text.emplace(h, t);
    for (FuzzSplit sp : s.splits) {
      if (i < dirs.size() && !sp.dir.empty()) {
        fs::path p = fs::path(dirs[i]) / sp.dir;
        std::error_code ec;
        fs::path rel = out_dir.empty() ? p : fs::relative(p, out_dir, ec);
        sp.dir = (ec || rel.empty() ? p : rel).lexically_normal().string();
      }
      m.splits.push_back(std::move(sp));
    }
    m.seconds += s.seconds;
  }
  std::sort(m.shard_list.begin(), m.shard_list.end());
  std::sort(m.results.begin(), m.results.end(),
            [](const auto& a, const auto& b) { return a.index < b.index; });
  // One split per completion, from its first run (what a single run would have kept).
  std::sort(m.splits.begin(), m.splits.end(),
            [](const auto& a, const auto& b) { return a.first_index < b.first_index; });
  std::set<std::string> seen;
  std::vector<FuzzSplit> splits;
  for (FuzzSplit& sp : m.splits) {
    if (seen.insert(sp.completion).second) splits.push_back(std::move(sp));
  }
  m.splits = std::move(splits);
  std::set<std::string> used;
  for (const FuzzRunResult& r : m.results) used.insert(r.completion);
  used.insert(m.baseline_completion);
  for (auto it = m.completion_tokens.begin(); it != m.completion_tokens.end();) {
    it = used.count(it->first) ? std::next(it) : m.completion_tokens.erase(it);
  }
  for (auto it = m.completion_text.begin(); it != m.completion_text.end();) {
    it = used.count(it->first) ? std::next(it) : m.completion_text.erase(it);
  }
  summarize(&m);
  return m;
}

std::string format_fuzz_summary(const FuzzSummary& s) {
  std::string out;
  char buf[512];
  const int64_t n = static_cast<int64_t>(s.results.size());
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    out += buf;
  };
  std::string shards;
  if (s.shards > 1) {
    shards = ", shard";
    for (size_t i = 0; i < s.shard_list.size(); ++i) {
      shards += (i ? "," : " ") + std::to_string(s.shard_list[i]);
    }
    shards += " of " + std::to_string(s.shards);
  }
  line("fuzz: %s, %s%s%s, seed %" PRIu64 ": %" PRId64 " of %" PRId64 " runs%s (%.1f runs/s)\n",
       s.model_spec.c_str(), s.policy.c_str(), s.dtype.empty() ? "" : ", ", s.dtype.c_str(),
       s.seed, n, s.runs, shards.c_str(), s.seconds > 0 ? n / s.seconds : 0.0);
  auto text_of = [&](const std::string& h) {
    auto it = s.completion_text.find(h);
    std::string t = it == s.completion_text.end() ? "" : it->second;
    for (char& ch : t) {
      if (ch == '\n') ch = ' ';
    }
    if (t.size() > 60) t = t.substr(0, 57) + "...";
    return t;
  };
  line("  target: %zu prompt tokens%s%s%s, %d tokens; alone: \"%s\"\n", s.target_prompt.size(),
       s.prompt_text.empty() ? "" : " (\"", s.prompt_text.c_str(), s.prompt_text.empty() ? "" : "\")",
       s.max_tokens, text_of(s.baseline_completion).c_str());
  line("  identical %" PRId64 " (%.1f %%), numerical split %" PRId64 " (%.1f %%), visible split %"
       PRId64 " (%.1f %%)\n",
       s.identical, 100 * share(s.identical, n), s.numerical, 100 * share(s.numerical, n),
       s.visible, 100 * share(s.visible, n));
  line("  unique completions: %" PRId64 " of %" PRId64 " runs\n", s.unique_completions, n);
  if (!s.causes.empty()) {
    out += "  causes (first difference):";
    for (const auto& [k, v] : s.causes) out += " " + k + " " + std::to_string(v);
    out += "; of visible splits:";
    for (const auto& [k, v] : s.visible_causes) out += " " + k + " " + std::to_string(v);
    out += "\n";
  }
  auto histogram = [&](const char* title, const std::map<int32_t, int64_t>& h) {
    if (h.empty()) return;
    const int32_t width = std::max<int32_t>(1, (s.max_tokens + 7) / 8);
    std::map<int32_t, int64_t> buckets;
    int64_t top = 1;
    for (const auto& [k, v] : h) top = std::max(top, buckets[k / width] += v);
    line("  %s (token index):\n", title);
    for (const auto& [b, v] : buckets) {
      std::string bar(static_cast<size_t>((v * 40 + top - 1) / top), '#');
      line("    %4d-%-4d %-40s %" PRId64 "\n", b * width, b * width + width - 1, bar.c_str(), v);
    }
  };
  histogram("first numerical split", s.numerical_hist);
  histogram("first visible split", s.visible_hist);
  if (!s.splits.empty()) {
    int64_t distinct = 0;
    std::set<std::string> seen;
    for (const FuzzRunResult& r : s.results) {
      if (r.comparison.verdict == FuzzVerdict::kVisible && seen.insert(r.completion).second) {
        ++distinct;
      }
    }
    line("  shrunk visible splits (%zu of %" PRId64 " distinct):\n", s.splits.size(), distinct);
    for (const FuzzSplit& sp : s.splits) {
      line("    run %" PRId64 ": %zu co-requests, %" PRId64 " prompt tokens -> %zu, %" PRId64
           " (%d runs); split at token %d, %s\n",
           sp.first_index, sp.original.others.size(), sp.original.prompt_tokens(),
           sp.shrunk.others.size(), sp.shrunk.prompt_tokens(), sp.shrink_runs,
           sp.shrunk_comparison.visible_token, sp.shrunk_comparison.cause.c_str());
      if (!sp.dir.empty()) {
        line("      %s: diff says %s (%s)\n", sp.dir.c_str(), sp.diff_verdict.c_str(),
             sp.diff_cause.c_str());
      }
    }
  }
  return out;
}

}  // namespace llmrr::replay
