// A fuzz campaign: baselines, the runs of one shard on `jobs` threads, the greedy shrinker
// and the trace pairs of the shrunk visible splits.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "json.h"
#include "llmrr/recorder/trace_recorder.h"
#include "llmrr/replayer/diff.h"
#include "llmrr/replayer/fuzz.h"
#include "llmrr/replayer/run_config.h"
#include "llmrr/safeio/json.h"
#include "llmrr/safeio/output.h"

namespace llmrr::replay {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// FNV-1a over the token ids: a completion's name in summaries (stable across hosts).
std::string completion_hash(const std::vector<int32_t>& tokens) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t t : tokens) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint32_t>(t) >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

using ConfigKey = std::tuple<int32_t, double, int>;
ConfigKey config_key(const Composition& c) {
  return {c.prefill_chunk, c.capacity_factor, static_cast<int>(c.overflow)};
}

// Runs fn(i) for i in [0, n) on `jobs` threads; the first error wins.
Status parallel_for(int64_t n, int32_t jobs, const std::function<Status(int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  std::mutex mu;
  Status first = Status::Ok();
  std::atomic<bool> failed{false};
  auto work = [&] {
    for (;;) {
      int64_t i = next.fetch_add(1);
      if (i >= n || failed.load()) return;
      Status st = fn(i);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = st;
        failed = true;
      }
    }
  };
  const int64_t threads = std::clamp<int64_t>(jobs, 1, std::max<int64_t>(n, 1));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return first;
}

class Baselines {
 public:
  explicit Baselines(const FuzzCampaign& c) : c_(c) {}
  Status compute(const std::vector<Composition>& comps, int32_t jobs) {
    std::vector<Composition> todo;
    for (const Composition& x : comps) {
      if (map_.count(config_key(x)) == 0 && std::none_of(todo.begin(), todo.end(), [&](auto& y) {
            return config_key(y) == config_key(x);
          })) {
        todo.push_back(x);
      }
    }
    std::vector<TargetObservation> got(todo.size());
    RETURN_IF_ERROR(parallel_for(static_cast<int64_t>(todo.size()), jobs, [&](int64_t i) -> Status {
      ASSIGN_OR_RETURN(got[static_cast<size_t>(i)],
                       run_composition(c_.engine, c_.target, todo[static_cast<size_t>(i)], true));
      return Status::Ok();
    }));
    for (size_t i = 0; i < todo.size(); ++i) map_[config_key(todo[i])] = std::move(got[i]);
    return Status::Ok();
  }
  const TargetObservation& of(const Composition& c) const { return map_.at(config_key(c)); }

 private:
  const FuzzCampaign& c_;
  std::map<ConfigKey, TargetObservation> map_;
};

std::string decode_text(const LoadedModel& m, const std::vector<int32_t>& ids) {
  if (m.tokenizer) return m.tokenizer->decode(ids);
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// ---- shrinking ------------------------------------------------------------------------

struct Shrinker {
  const FuzzCampaign& c;
  const TargetObservation& baseline;
  int32_t runs = 0;
  FuzzComparison last;

  // Whether `x` still splits visibly; false once the budget is spent.
  Result<bool> splits(const Composition& x) {
    if (runs >= c.shrink_budget) return false;
    ++runs;
    ASSIGN_OR_RETURN(TargetObservation o, run_composition(c.engine, c.target, x, false));
    FuzzComparison cmp = compare_with_baseline(baseline, o);
    if (cmp.verdict != FuzzVerdict::kVisible) return false;
    last = cmp;
    return true;
  }

  Result<Composition> shrink(Composition best) {
    // 1. Fewest co-requests: drop chunks, halving the chunk size (ddmin's complement step).
    for (size_t chunk = std::max<size_t>(best.others.size() / 2, 1); chunk >= 1; chunk /= 2) {
      for (size_t i = 0; i < best.others.size();) {
        Composition x = best;
        const size_t end = std::min(i + chunk, x.others.size());
        x.others.erase(x.others.begin() + static_cast<std::ptrdiff_t>(i),
                       x.others.begin() + static_cast<std::ptrdiff_t>(end));
        ASSIGN_OR_RETURN(bool ok, splits(x));
        if (ok) {
          best = std::move(x);
        } else {
          i += chunk;
        }
      }
      if (chunk == 1) break;
    }
    // 2. Shortest prompts, 3. shortest generations: halve while it still splits, then one
    // shot at the minimum.
    for (size_t j = 0; j < best.others.size(); ++j) {
      for (int field = 0; field < 2; ++field) {
        for (;;) {
          Composition x = best;
          CoRequest& r = x.others[j];
          const int64_t cur = field == 0 ? static_cast<int64_t>(r.prompt.size()) : r.max_tokens;
          if (cur <= 1) break;
          const int64_t to = cur / 2;
          if (field == 0) r.prompt.resize(static_cast<size_t>(to));
          else r.max_tokens = static_cast<int32_t>(to);
          ASSIGN_OR_RETURN(bool ok, splits(x));
          if (!ok) break;
          best = std::move(x);
        }
      }
    }
    // 4. Latest arrivals: push each co-request later while it still splits (less overlap
    // with the target makes the cause easier to read), and the target to step 0.
    if (best.target_arrival > 0) {
      Composition x = best;
      x.target_arrival = 0;
      ASSIGN_OR_RETURN(bool ok, splits(x));
      if (ok) best = std::move(x);
    }
    for (size_t j = 0; j < best.others.size(); ++j) {
      for (int64_t step : {8, 4, 2, 1}) {
        for (int tries = 0; tries < 4; ++tries) {
          Composition x = best;
          x.others[j].arrival_step += step;
          ASSIGN_OR_RETURN(bool ok, splits(x));
          if (!ok) break;
          best = std::move(x);
        }
      }
    }
    return best;
  }
};

// ---- saving a split ----------------------------------------------------------------

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_./:=,+@%") == std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// `llmrr record` options that rebuild FuzzEngine::config_for(c) exactly (engine_options.cc).
std::string record_command(const FuzzCampaign& c, const Composition& x, const std::string& reqs,
                           const std::string& trace) {
  const EngineConfig cfg = c.engine.config_for(x);
  std::string s = "llmrr record --model " + shell_quote(c.model_spec);
  if (!c.dtype.empty()) s += " --dtype " + c.dtype;
  const PolicyKind policy = c.engine.policy;
  s += " --policy " + std::string(policy.name());
  if (policy.fixed_split_sizes() && c.engine.attn_split > 0) {
    s += " --attn-split " + std::to_string(c.engine.attn_split);
  }
  if (policy.fixed_split_sizes() && c.engine.gemm_split > 0) {
    s += " --gemm-split " + std::to_string(c.engine.gemm_split);
  }
  if (policy.uses_virtual_device()) {
    s += " --sms " + std::to_string(c.engine.device.sms) + " --blocks-per-sm " +
         std::to_string(c.engine.device.blocks_per_sm);
  }
  s += " --max-batch-tokens " + std::to_string(cfg.scheduler.max_batch_tokens) + " --max-seqs " +
       std::to_string(cfg.scheduler.max_seqs) + " --prefill-chunk " +
       std::to_string(cfg.scheduler.prefill_chunk) + " --kv-block " + std::to_string(cfg.kv_block);
  if (cfg.capacity.enabled()) {
    s += " --capacity-factor " + fmt_double(cfg.capacity.factor) + " --overflow " +
         overflow_name(cfg.capacity.overflow);
  }
  s += " --max-tokens " + std::to_string(c.target.max_tokens) + " --requests " + reqs +
       " --capture all -q -o " + trace;
  return s;
}

Status write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  f.close();
  if (!f) return make_error(ErrorCode::kIo, "cannot write " + p.string());
  return Status::Ok();
}

std::string requests_jsonl(const std::vector<RequestSpec>& reqs) {
  std::string out;
  for (const RequestSpec& r : reqs) {
    Json j = {{"id", r.id},         {"label", r.label},       {"prompt_ids", r.prompt},
              {"max_tokens", r.max_tokens}, {"arrival_step", r.arrival_step}};
    out += safeio::dump(j) + "\n";
  }
  return out;
}

Status record_trace(const FuzzCampaign& c, const Composition& x, bool solo,
                    const std::string& path, const std::string& command) {
  trace::RunHeader h = base_run_header();
  const EngineConfig cfg = c.engine.config_for(x);
  std::shared_ptr<Policy> policy = c.engine.make_policy();
  const int32_t split = c.engine.attn_split > 0
                            ? c.engine.attn_split
                            : default_invariant_split_size(c.engine.model->config.hidden);
  fill_run_header(&h, *c.engine.model, cfg, policy->name(), c.engine.device,
                  c.engine.policy.fixed_split_sizes() || c.engine.attn_split > 0 ? split : 0, 0, 0,
                  c.engine.policy.fixed_split_sizes() ? c.engine.gemm_split : 0);
  if (!c.dtype.empty()) {
    ASSIGN_OR_RETURN(Json extra, safeio::parse_json_object(h.extra_config_json,
                                                           "run header: extra_config_json",
                                                           ErrorCode::kInternal));
    extra["dtype"] = c.dtype;
    h.extra_config_json = safeio::dump(extra);
  }
  h.command_line = command;
  RecorderOptions ro;
  ro.capture = trace::CaptureLevel::kAll;
  ASSIGN_OR_RETURN(std::unique_ptr<TraceRecorder> rec, TraceRecorder::open(path, h, ro));
  Result<TargetObservation> run = run_composition(c.engine, c.target, x, solo, {rec.get()});
  Status closed = rec->close();
  if (!run.ok()) return run.status();
  return closed;
}

Status fill_split(const FuzzCampaign& c, FuzzSplit* s, const fs::path& dir);

Status save_split(const FuzzCampaign& c, FuzzSplit* s, int ordinal) {
  char name[64];
  std::snprintf(name, sizeof name, "splits/%03d-run%" PRId64, ordinal, s->first_index);
  s->dir = name;
  const fs::path final_dir = fs::path(c.out_dir) / name;
  std::error_code ec;
  fs::create_directories(final_dir.parent_path(), ec);
  if (ec) {
    return make_error(ErrorCode::kIo,
                      "cannot create " + final_dir.parent_path().string() + ": " + ec.message());
  }
  // The split's files are written into a staging directory renamed into place when all of
  // them are (removed on an error or a signal): a split directory is whole or absent.
  ASSIGN_OR_RETURN(safeio::OutputDir staged,
                   safeio::OutputDir::create(final_dir.string(), "--out", {}));
  const fs::path dir = staged.write_path();
  Status st = fill_split(c, s, dir);
  if (!st.ok()) return staged.in_final_terms(st);
  return staged.commit();
}

// The files of one split (save_split) into `dir`.
Status fill_split(const FuzzCampaign& c, FuzzSplit* s, const fs::path& dir) {
  RETURN_IF_ERROR(write_text(dir / "solo.jsonl",
                             requests_jsonl(composition_requests(c.target, s->shrunk, true))));
  RETURN_IF_ERROR(write_text(dir / "split.jsonl",
                             requests_jsonl(composition_requests(c.target, s->shrunk, false))));
  RETURN_IF_ERROR(write_text(dir / "composition.json", composition_json(s->shrunk) + "\n"));
  const std::string solo_cmd = record_command(c, s->shrunk, "solo.jsonl", "solo.trace");
  const std::string split_cmd = record_command(c, s->shrunk, "split.jsonl", "split.trace");
  s->commands = {solo_cmd, split_cmd, "llmrr diff solo.trace split.trace"};
  RETURN_IF_ERROR(write_text(dir / "repro.sh",
                             "#!/bin/sh\n# Re-records this split from its requests files (run in "
                             "this directory) and explains it.\nset -e\n" +
                                 solo_cmd + "\n" + split_cmd + "\nllmrr diff solo.trace split.trace\n"));
  RETURN_IF_ERROR(record_trace(c, s->shrunk, true, (dir / "solo.trace").string(), solo_cmd));
  RETURN_IF_ERROR(record_trace(c, s->shrunk, false, (dir / "split.trace").string(), split_cmd));
  DiffOptions dopt;
  dopt.model = c.model_spec;
  dopt.parallel = false;
  ASSIGN_OR_RETURN(DiffReport d, diff_traces((dir / "solo.trace").string(),
                                             (dir / "split.trace").string(), dopt));
  for (const RequestDiff& r : d.requests) {
    if (r.label != "target") continue;
    s->diff_verdict = verdict_name(r.verdict);
    s->diff_cause = r.cause;
    std::string story = format_diff_story(d, 1);
    // Paths in the story name the split's directory as it will be, not the staging one.
    const std::string staging = dir.string(), final_dir = (fs::path(c.out_dir) / s->dir).string();
    for (size_t at = story.find(staging); at != std::string::npos;
         at = story.find(staging, at + final_dir.size())) {
      story.replace(at, staging.size(), final_dir);
    }
    RETURN_IF_ERROR(write_text(dir / "diff.txt", story));
    // The story's sentence on the cause: the line after "First difference".
    size_t at = story.find("First difference");
    if (at != std::string::npos) {
      size_t end = story.find("\n  Token", at);
      s->diff_cause_text = story.substr(at, end == std::string::npos ? std::string::npos : end - at);
      while (!s->diff_cause_text.empty() && s->diff_cause_text.back() == '\n') {
        s->diff_cause_text.pop_back();
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<FuzzSummary> run_fuzz_campaign(const FuzzCampaign& c) {
  if (!c.engine.model) return make_error(ErrorCode::kInvalidArgument, "fuzz: no model");
  if (c.runs < 0) return make_error(ErrorCode::kInvalidArgument, "--runs must be >= 0");
  if (c.shards < 1 || c.shard < 0 || c.shard >= c.shards) {
    return make_error(ErrorCode::kInvalidArgument, "--shard must be i/n with 0 <= i < n");
  }
  const LoadedModel& model = *c.engine.model;
  FuzzSummary s;
  s.model_spec = c.model_spec;
  s.model_identity = model.identity;
  s.policy = std::string(c.engine.policy.name());
  s.dtype = c.dtype;
  s.target_prompt = c.target.prompt;
  s.prompt_text = c.prompt_text;
  s.max_tokens = c.target.max_tokens;
  s.seed = c.seed;
  s.runs = c.runs;
  s.shards = c.shards;
  s.shard_list = {c.shard};
  s.space_json = fuzz_space_json(c.space);

  std::vector<int64_t> indices;
  for (int64_t i = c.shard; i < c.runs; i += c.shards) indices.push_back(i);
  std::vector<Composition> comps;
  for (int64_t i : indices) comps.push_back(generate_composition(c.space, c.seed, i));

  // The campaign's default config alone, then the baselines of every config drawn.
  Composition defaults;
  defaults.prefill_chunk =
      c.space.prefill_chunk ? *c.space.prefill_chunk : c.engine.config.scheduler.prefill_chunk;
  defaults.capacity_factor = c.space.capacity_factor.value_or(0.0);
  defaults.overflow = defaults.capacity_factor > 0
                          ? c.space.overflow.value_or(Overflow::kDrop)
                          : Overflow::kNone;
  Baselines baselines(c);
  std::vector<Composition> wanted = comps;
  wanted.push_back(defaults);
  RETURN_IF_ERROR(baselines.compute(wanted, c.jobs));
  const TargetObservation& base0 = baselines.of(defaults);
  s.baseline_completion = completion_hash(base0.tokens);
  s.completion_tokens[s.baseline_completion] = base0.tokens;

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<FuzzRunResult> results(indices.size());
  std::vector<std::vector<int32_t>> tokens(indices.size());
  std::mutex progress_mu;
  int64_t done = 0;
  RETURN_IF_ERROR(parallel_for(static_cast<int64_t>(indices.size()), c.jobs, [&](int64_t k) -> Status {
    const size_t u = static_cast<size_t>(k);
    const Composition& x = comps[u];
    ASSIGN_OR_RETURN(TargetObservation o, run_composition(c.engine, c.target, x, false));
    FuzzRunResult& r = results[u];
    r.index = indices[u];
    r.co_requests = static_cast<int32_t>(x.others.size());
    r.prompt_tokens = x.prompt_tokens();
    r.target_arrival = x.target_arrival;
    r.prefill_chunk = x.prefill_chunk;
    r.capacity_factor = x.capacity_factor;
    r.overflow = x.overflow;
    r.comparison = compare_with_baseline(baselines.of(x), o);
    r.completion = completion_hash(o.tokens);
    r.dropped = o.dropped;
    r.rerouted = o.rerouted;
    tokens[u] = std::move(o.tokens);
    if (c.progress) {
      std::lock_guard<std::mutex> lock(progress_mu);
      c.progress(++done, static_cast<int64_t>(indices.size()));
    }
    return Status::Ok();
  }));
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t u = 0; u < results.size(); ++u) {
    s.completion_tokens.emplace(results[u].completion, tokens[u]);
  }
  s.results = std::move(results);
  for (const auto& [h, ids] : s.completion_tokens) s.completion_text[h] = decode_text(model, ids);

  // Distinct visible splits (by completion), first run first; shrink and save the first
  // max_shrink of them.
  std::set<std::string> seen;
  std::vector<size_t> picks;
  for (size_t u = 0; u < s.results.size(); ++u) {
    const FuzzRunResult& r = s.results[u];
    if (r.comparison.verdict != FuzzVerdict::kVisible) continue;
    if (!seen.insert(r.completion).second) continue;
    if (static_cast<int32_t>(picks.size()) < c.max_shrink) picks.push_back(u);
  }
  s.splits.resize(picks.size());
  RETURN_IF_ERROR(parallel_for(static_cast<int64_t>(picks.size()), c.jobs, [&](int64_t k) -> Status {
    const size_t u = picks[static_cast<size_t>(k)];
    FuzzSplit& sp = s.splits[static_cast<size_t>(k)];
    sp.first_index = s.results[u].index;
    sp.completion = s.results[u].completion;
    sp.original = comps[u];
    Shrinker sh{c, baselines.of(comps[u]), 0, s.results[u].comparison};
    ASSIGN_OR_RETURN(sp.shrunk, sh.shrink(comps[u]));
    sp.shrink_runs = sh.runs;
    sp.shrunk_comparison = sh.last;
    if (!c.out_dir.empty()) RETURN_IF_ERROR(save_split(c, &sp, static_cast<int>(k) + 1));
    return Status::Ok();
  }));
  summarize(&s);
  return s;
}

void summarize(FuzzSummary* s) {
  s->identical = s->numerical = s->visible = 0;
  s->numerical_hist.clear();
  s->visible_hist.clear();
  s->causes.clear();
  s->visible_causes.clear();
  std::set<std::string> unique;
  for (const FuzzRunResult& r : s->results) {
    unique.insert(r.completion);
    const FuzzComparison& cmp = r.comparison;
    switch (cmp.verdict) {
      case FuzzVerdict::kIdentical: ++s->identical; continue;
      case FuzzVerdict::kNumerical: ++s->numerical; break;
      case FuzzVerdict::kVisible:
        ++s->visible;
        ++s->visible_hist[cmp.visible_token];
        ++s->visible_causes[cmp.cause];
        break;
    }
    ++s->numerical_hist[cmp.numerical_token];
    ++s->causes[cmp.cause];
  }
  s->unique_completions = static_cast<int64_t>(unique.size());
}

}  // namespace llmrr::replay
