// llmrr fuzz: run one prompt under many seeded batch compositions, compare each run with the
// prompt alone, shrink what splits visibly and save it as a trace pair; `llmrr fuzz merge`
// combines the summaries of a sharded campaign.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/cli.h"
#include "runtimes/adapter.h"
#include "engine_options.h"
#include "llmrr/replayer/fuzz.h"
#include "llmrr/safeio/cleanup.h"
#include "llmrr/safeio/input.h"
#include "llmrr/safeio/output.h"

namespace {

using namespace llmrr;
namespace fs = std::filesystem;

constexpr const char* kCmd = "llmrr fuzz";

int fail(const Status& st) {
  std::string msg = st.to_string();
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  std::fprintf(stderr, "%s: error: %s\n", kCmd, msg.c_str());
  return exit_code_for(st);
}

int usage_error(const std::string& what) {
  std::fprintf(stderr, "%s: error: %s (see llmrr fuzz --help)\n", kCmd, what.c_str());
  return 2;
}

bool parse_int(const std::string& s, int64_t* v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

// summary.json, written whole or not at all (a temporary file renamed over it); never one
// of `inputs` (fuzz merge DIR --out DIR would replace the summary it reads).
Status write_summary(const std::string& out_dir, const std::string& text,
                     const std::vector<std::string>& inputs) {
  const std::string p = (fs::path(out_dir) / "summary.json").string();
  RETURN_IF_ERROR(safeio::check_output_file(p, "--out", inputs));
  ASSIGN_OR_RETURN(safeio::OutputFile f, safeio::OutputFile::create(p, "--out"));
  RETURN_IF_ERROR(f.write(text));
  return f.commit();
}

// fuzz merge --out DIR: summary.json written into a staging directory (mkstemp-named, beside
// DIR or inside it when it exists), fsynced, and moved into place whole.
Status write_merged_summary(const std::string& out_dir, const std::string& text,
                            const std::vector<std::string>& inputs) {
  ASSIGN_OR_RETURN(safeio::OutputDir d, safeio::OutputDir::create(out_dir, "--out", inputs));
  const std::string target = (fs::path(out_dir) / "summary.json").string();
  Result<int> fd = d.create_file("summary.json");
  if (!fd.ok()) return d.in_final_terms(fd.status());
  std::FILE* f = ::fdopen(*fd, "wb");
  if (f == nullptr) {
    const int e = errno;
    ::close(*fd);
    return make_error(ErrorCode::kIo, target + ": cannot open: " + std::strerror(e));
  }
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size() &&
                     std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int e = errno;
  if (std::fclose(f) != 0 || !wrote) {
    return make_error(ErrorCode::kIo,
                      target + ": cannot write: " + std::strerror(wrote ? errno : e));
  }
  return d.commit();
}

// The --out directory when this run creates it: removed with what is in it on an error
// (the destructor) or on SIGINT, SIGTERM, SIGHUP or SIGXFSZ (the cleanup handler), kept by
// keep() once summary.json is in place. A directory that was there before is left alone
// (its split directories and summary are each written whole, renamed into place).
class CreatedDir {
 public:
  Status make(const std::string& dir, std::string_view option) {
    struct stat st;
    const bool existed = ::stat(dir.c_str(), &st) == 0;
    RETURN_IF_ERROR(safeio::make_output_dir(dir, option));
    if (!existed) {
      dir_ = dir;
      slot_ = safeio::CleanupSlot(dir, /*tree=*/true);
    }
    return Status::Ok();
  }
  void keep() {
    slot_.release();
    dir_.clear();
  }
  ~CreatedDir() {
    if (!dir_.empty()) safeio::remove_tree(dir_.c_str());
    slot_.release();
  }

 private:
  std::string dir_;
  safeio::CleanupSlot slot_;
};

// A shard's summary.json holds one line per run: 1 GiB is some ten million runs.
constexpr uint64_t kMaxSummaryBytes = uint64_t{1} << 30;

int exit_for(const replay::FuzzSummary& s) { return s.numerical + s.visible > 0 ? 1 : 0; }

int run_merge(int argc, char** argv) {
  CLI::App app{"llmrr fuzz merge: combine the summaries of a sharded fuzz campaign"};
  app.name("fuzz merge");
  app.footer(
      "\nExamples:\n"
      "  llmrr fuzz merge out/shard-*/ --out out/all\n"
      "  llmrr fuzz merge a/summary.json b/summary.json --json\n"
      "\nExit: 0 no split, 1 some run split, 2 bad input (shards of different campaigns,\n"
      "a run or shard twice).");
  std::vector<std::string> inputs;
  std::string out;
  bool json = false;
  app.add_option("inputs", inputs, "shard output directories or their summary.json")->required();
  app.add_option("--out", out,
                 "write the merged summary.json into this directory (created if absent, its "
                 "parent must exist; never over a summary it reads)");
  app.add_flag("--json", json, "print the merged summary.json to stdout instead of the report");
  // One line on stderr and exit 2 for a usage error, --help on stdout.
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  std::vector<replay::FuzzSummary> shards;
  std::vector<std::string> dirs, files;
  for (const std::string& in : inputs) {
    fs::path p = in;
    std::error_code ec;
    if (fs::is_directory(p, ec)) p /= "summary.json";
    files.push_back(p.string());
    Result<std::string> text = safeio::read_file(p.string(), kMaxSummaryBytes, "fuzz summary");
    if (!text.ok()) return fail(text.status());
    Result<replay::FuzzSummary> s = replay::parse_fuzz_summary(*text, p.string());
    if (!s.ok()) return fail(s.status());
    shards.push_back(std::move(*s));
    dirs.push_back(p.parent_path().empty() ? "." : p.parent_path().string());
  }
  if (app.count("--out") > 0) {
    // No summary read is replaced, and no missing parent directory is created.
    Status st = safeio::check_output_dir(out, "--out", files);
    std::error_code ec;
    if (st.ok() && fs::is_directory(out, ec)) {
      st = safeio::check_output_file((fs::path(out) / "summary.json").string(), "--out", files);
    }
    if (!st.ok()) return fail(st);
  }
  // Split directories are named relative to --out, which does not exist yet when this run
  // creates it: an absolute path relates to them the same either way.
  std::error_code abs_ec;
  const fs::path out_abs = out.empty() ? fs::path() : fs::absolute(out, abs_ec);
  Result<replay::FuzzSummary> m = replay::merge_fuzz_summaries(
      shards, dirs, abs_ec ? out : out_abs.string());
  if (!m.ok()) return fail(m.status());
  const std::string j = replay::fuzz_summary_json(*m);
  if (!out.empty()) {
    // Staged (safeio::OutputDir): a directory this run creates appears with its summary.json
    // whole, by one rename, so no signal, not even kill -9, leaves it half made; into an
    // existing directory the summary is moved when whole.
    Status st = write_merged_summary(out, j + "\n", files);
    if (!st.ok()) return fail(st);
  }
  if (json) {
    std::printf("%s\n", j.c_str());
  } else {
    std::fputs(replay::format_fuzz_summary(*m).c_str(), stdout);
    if (static_cast<int64_t>(m->results.size()) < m->runs) {
      std::fprintf(stderr, "%s merge: %zu of %lld runs present (missing shards)\n", kCmd,
                   m->results.size(), static_cast<long long>(m->runs));
    }
  }
  return exit_for(*m);
}

}  // namespace

int run_fuzz_command(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "merge") return run_merge(argc - 1, argv + 1);
  // `llmrr fuzz --runtime NAME ARGS`: the campaign runs in that runtime (vllm: the module
  // llmrr.campaigns.vllm_fuzz in the vLLM venv; llamacpp: llama-server under record-llamacpp,
  // driven by python/llmrr/campaigns/llamacpp_fuzz.py): tools/llmrr/runtimes/NAME.
  if (int rc = 0; runtimes::dispatch("fuzz", argc, argv, &rc)) return rc;
  CLI::App app{
      "llmrr fuzz: run a prompt under many batch compositions and report what splits it"};
  app.name("fuzz");
  app.footer(
      "\nEach run i draws a composition from --seed: co-requests (count, prompt lengths and\n"
      "contents, arrival steps, max tokens), the target's arrival step, the prefill chunk,\n"
      "and for MoE models the expert capacity factor and overflow. It is compared with the\n"
      "target alone under the same engine config: identical, numerical split (logits differ)\n"
      "or visible split (a token differs), with the first split's token index and its cause\n"
      "(plan: batch-dependent reduction plans; routing: the router's top-k changed;\n"
      "capacity: the router chose the same experts and capacity moved the token). Each\n"
      "distinct visible split is shrunk (fewest co-requests, shortest prompts, latest\n"
      "arrivals that still split) and saved under OUT/splits/ as solo.trace + split.trace\n"
      "(capture all), their requests files and repro.sh with the llmrr record commands.\n"
      "\nExamples:\n"
      "  llmrr fuzz --model builtin:tiny-moe --dtype bf16 --prompt 'Once upon a time' \\\n"
      "      --runs 200 --out fz\n"
      "  llmrr fuzz --model builtin:tiny-moe --dtype bf16 --prompt 'Once upon a time' \\\n"
      "      --runs 200 --policy invariant --capacity-factor 0 --out fz-inv   # 0 splits\n"
      "  mkdir -p fz && llmrr fuzz ... --runs 1000 --shard 3/8 --out fz/shard-3   # task 3 of 8\n"
      "  llmrr fuzz merge fz/shard-* --out fz/all\n"
      "  llmrr fuzz --runtime vllm MODEL_DIR --runs 200 -o fz/vllm   "
      "# python -m llmrr.campaigns.vllm_fuzz\n"
      "  llmrr fuzz --runtime llamacpp --model M.gguf --runs 200 --out fz/lc   # llama-server\n"
      "\nExit: 0 no run split, 1 some run split, 2 bad input or usage, 3 internal error.");
  cli::EngineOptions o;
  int64_t runs = -1;
  int32_t jobs = 1;
  std::string out, shard = "0/1", prefill = "random", capacity = "random", overflow = "random";
  int32_t co_requests = 16, max_prompt = 48, max_new = 32, max_shrink = 8, shrink_budget = 64;
  int64_t max_arrival = 12, max_target_arrival = 8;
  bool json = false, quiet = false;
  app.add_option("--model", o.model, "builtin:<name>, a safetensors directory or a .gguf file")
      ->required();
  app.add_option("--prompt", o.prompt, "the target's prompt text");
  app.add_option("--prompt-ids", o.prompt_ids, "the target's prompt as token ids, e.g. 1,2,3");
  app.add_flag("--chat", o.chat, "wrap the prompt in the model's chat template");
  app.add_flag("--raw", o.raw, "use the prompt as is");
  app.add_option("--runs", runs, "compositions to run (run indices 0 .. N-1)")->required();
  app.add_option("--policy", o.policy, "production | invariant (default production)");
  app.add_option("--seed", o.seed, "generator seed (default 0); decoding is greedy")
      ->check(cli::non_negative());
  app.add_option("--jobs", jobs, "runs in parallel (default 1); engine threads default to "
                                 "cores / jobs");
  app.add_option("--threads", o.threads, "engine threads per run (never changes results)");
  app.add_option("--max-tokens", o.max_tokens, "tokens the target generates (default 32)");
  app.add_option("--dtype", o.dtype, "fp32 | bf16 (default: as stored)");
  app.add_option("--out", out,
                 "output directory (summary.json, splits/); created if absent, its parent must "
                 "exist")
      ->required();
  app.add_option("--shard", shard, "i/n: run only indices i, i+n, i+2n, ... (default 0/1)");
  app.add_option("--co-requests", co_requests, "most co-requests per run (default 16)");
  app.add_option("--max-prompt", max_prompt, "longest co-request prompt (default 48)");
  app.add_option("--max-new", max_new, "most tokens a co-request generates (default 32)");
  app.add_option("--max-arrival", max_arrival, "latest co-request arrival step (default 12)");
  app.add_option("--max-target-arrival", max_target_arrival,
                 "latest target arrival step (default 8)");
  app.add_option("--prefill-chunk", prefill, "random (0, 8, 16, 32, 64) or N (0 = no limit)");
  app.add_option("--capacity-factor", capacity,
                 "MoE: random (dropless, 1, 1.25, 1.5, 2) or F (0 = dropless)");
  app.add_option("--overflow", overflow, "MoE: random | drop | reroute");
  app.add_option("--max-shrink", max_shrink, "distinct visible splits shrunk and saved (default 8)");
  app.add_option("--shrink-budget", shrink_budget, "runs per shrink (default 64)");
  app.add_option("--max-batch-tokens", o.max_batch_tokens, "rows per step (default 256)");
  app.add_option("--max-seqs", o.max_seqs, "requests running at once (default 16)");
  app.add_option("--kv-block", o.kv_block, "KV cache block size (default 16)");
  app.add_option("--sms", o.sms, "virtual device: SM count (default 132)");
  app.add_option("--blocks-per-sm", o.blocks_per_sm, "virtual device: CTAs per SM (default 2)");
  app.add_option("--attn-split", o.attn_split, "invariant policy: attention split size");
  app.add_option("--gemm-split", o.gemm_split,
                 "invariant policy: K columns per GEMM split (multiple of 16; 0 = no split-K)");
  app.add_flag("--json", json, "print summary.json to stdout instead of the report");
  app.add_flag("-q,--quiet", quiet, "no progress bar");
  // One line on stderr and exit 2 for a usage error, --help on stdout.
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;

  // Values first, so that a typo fails before the model loads.
  if (runs < 0 || runs > 100000000) return usage_error("--runs must be in [0, 1e8]");
  if (jobs < 1 || jobs > 256) return usage_error("--jobs must be in [1, 256]");
  int64_t shard_i = 0, shard_n = 1;
  {
    const size_t slash = shard.find('/');
    if (slash == std::string::npos || !parse_int(shard.substr(0, slash), &shard_i) ||
        !parse_int(shard.substr(slash + 1), &shard_n) || shard_n < 1 || shard_n > 100000 ||
        shard_i < 0 || shard_i >= shard_n) {
      return usage_error("--shard must be i/n with 0 <= i < n (got '" + shard + "')");
    }
  }
  if (co_requests < 0 || co_requests > 4096) return usage_error("--co-requests must be in [0, 4096]");
  if (max_prompt < 1) return usage_error("--max-prompt must be >= 1");
  if (max_new < 1) return usage_error("--max-new must be >= 1");
  if (max_arrival < 0 || max_target_arrival < 0) {
    return usage_error("--max-arrival and --max-target-arrival must be >= 0");
  }
  if (max_shrink < 0) return usage_error("--max-shrink must be >= 0");
  if (shrink_budget < 0) return usage_error("--shrink-budget must be >= 0");
  std::optional<int32_t> pinned_chunk;
  if (prefill != "random") {
    int64_t v = 0;
    if (!parse_int(prefill, &v) || v < 0 || v > 1 << 20) {
      return usage_error("--prefill-chunk must be random or an integer >= 0 (got '" + prefill + "')");
    }
    pinned_chunk = static_cast<int32_t>(v);
    o.prefill_chunk = *pinned_chunk;
  }
  std::optional<double> pinned_factor;
  if (capacity != "random") {
    char* end = nullptr;
    double v = std::strtod(capacity.c_str(), &end);
    if (capacity.empty() || *end != '\0' || !std::isfinite(v) || v < 0) {
      return usage_error("--capacity-factor must be random or a number >= 0 (got '" + capacity + "')");
    }
    pinned_factor = v;
  }
  std::optional<Overflow> pinned_overflow;
  if (overflow == "drop") {
    pinned_overflow = Overflow::kDrop;
  } else if (overflow == "reroute") {
    pinned_overflow = Overflow::kReroute;
  } else if (overflow != "random") {
    return usage_error("--overflow must be random, drop or reroute (got '" + overflow + "')");
  }
  if (pinned_factor && *pinned_factor == 0 && pinned_overflow) {
    return usage_error("--overflow " + overflow + " needs a capacity factor > 0");
  }
  // The output directory: never the model, its parent must exist (none is created).
  if (Status st = safeio::check_output_dir(out, "--out", {o.model}); !st.ok()) return fail(st);
  const int32_t cores = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.threads == 0) o.threads = std::clamp(cores / jobs, 1, 8);

  Result<cli::EngineSetup> setup = cli::make_engine_setup(o);
  if (!setup.ok()) return fail(setup.status());
  cli::EngineSetup& s = *setup;
  if (!s.model.config.is_moe() && pinned_factor.value_or(0) > 0) {
    return usage_error("--capacity-factor applies to MoE models only (" + s.model.source +
                       " is dense)");
  }
  // Co-requests must fit the model's context: a longer prompt or generation would be cut
  // to it silently, and the campaign would not be the one asked for.
  const int32_t positions = s.model.config.max_positions;
  if (max_prompt > positions / 2) {
    return usage_error("--max-prompt " + std::to_string(max_prompt) + ": expected at most " +
                       std::to_string(positions / 2) + " (half of " + s.model.source + "'s " +
                       std::to_string(positions) + " positions)");
  }
  if (max_new > positions - 1) {
    return usage_error("--max-new " + std::to_string(max_new) + ": expected at most " +
                       std::to_string(positions - 1) + " (" + s.model.source + " has " +
                       std::to_string(positions) + " positions)");
  }
  if (o.threads * jobs > cores) {
    std::fprintf(stderr,
                 "%s: warning: --jobs %d x --threads %d exceeds the %d cores (slower, same "
                 "results)\n",
                 kCmd, jobs, o.threads, cores);
  }

  replay::FuzzCampaign c;
  c.engine.model = &s.model;
  c.engine.config = s.config;
  c.engine.policy = s.policy_kind;
  c.engine.device = s.device;
  c.engine.attn_split = o.attn_split;
  c.engine.gemm_split = o.gemm_split;
  c.model_spec = o.model;
  c.dtype = o.dtype;
  c.target.prompt = s.requests.front().prompt;
  c.target.max_tokens = o.max_tokens;
  c.prompt_text = o.prompt;
  c.space = replay::default_fuzz_space(s.model.config);
  c.space.max_co_requests = co_requests;
  c.space.max_prompt = max_prompt;
  c.space.max_new = max_new;
  c.space.max_arrival = max_arrival;
  c.space.max_target_arrival = max_target_arrival;
  c.space.prefill_chunk = pinned_chunk;
  c.space.capacity_factor = pinned_factor;
  c.space.overflow = pinned_overflow;
  c.seed = o.seed;
  c.runs = runs;
  c.shard = static_cast<int32_t>(shard_i);
  c.shards = static_cast<int32_t>(shard_n);
  c.jobs = jobs;
  c.max_shrink = max_shrink;
  c.shrink_budget = shrink_budget;
  c.out_dir = out;
  const bool bar = !quiet && isatty(STDERR_FILENO);
  if (bar) {
    c.progress = [](int64_t done, int64_t total) {
      std::fprintf(stderr, "\r\033[K%s: run %lld/%lld", kCmd, static_cast<long long>(done),
                   static_cast<long long>(total));
    };
  }
  CreatedDir created;
  if (Status st = created.make(out, "--out"); !st.ok()) return fail(st);

  Result<replay::FuzzSummary> sum = replay::run_fuzz_campaign(c);
  if (bar) std::fprintf(stderr, "\r\033[K");
  if (!sum.ok()) return fail(sum.status());
  const std::string j = replay::fuzz_summary_json(*sum);
  Status st = write_summary(out, j + "\n", {o.model});
  if (!st.ok()) return fail(st);
  created.keep();
  if (json) {
    std::printf("%s\n", j.c_str());
  } else {
    std::fputs(replay::format_fuzz_summary(*sum).c_str(), stdout);
  }
  return exit_for(*sum);
}
