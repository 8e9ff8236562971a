// llmrr inspect TRACE: what a trace holds, at a glance — version, completeness, run header,
// requests, steps, tokens, bytes per token by record kind, compression ratio.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli/cli.h"
#include "cli/trace_input.h"
#include "cli/trace_text.h"
#include "llmrr/format/run_header_json.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/safeio/json.h"

namespace {

using namespace llmrr;
using namespace llmrr::trace;
using llmrr::cli::human_bytes;
using llmrr::cli::human_number;

struct Sizes {
  std::map<std::string, uint64_t> stored_by_frame_kind, raw_by_frame_kind;
  uint64_t chunk_raw = 0, chunk_stored = 0;
};

Sizes frame_sizes(const TraceReader& r) {
  Sizes s;
  for (const FrameInfo& f : r.frames()) {
    const std::string k = frame_kind_name(f.kind);
    s.stored_by_frame_kind[k] += f.stored_size + kFrameHeaderBytes;
    s.raw_by_frame_kind[k] += f.raw_size;
    if (f.kind == FrameKind::kStepChunk) {
      s.chunk_raw += f.raw_size;
      s.chunk_stored += f.stored_size + kFrameHeaderBytes;
    }
  }
  return s;
}

// Kernel-record frames (CUPTI activity, llmrr record-cuda): what they hold.
struct KernelCounts {
  int64_t frames = 0, kernels = 0, memcpys = 0, ranges = 0;
  std::set<int64_t> steps;
};

Result<KernelCounts> kernel_counts(const TraceReader& r) {
  KernelCounts c;
  std::vector<KernelRecord> recs;
  for (size_t f = 0; f < r.frames().size(); ++f) {
    if (r.frames()[f].kind != FrameKind::kKernelRecords) continue;
    ++c.frames;
    RETURN_IF_ERROR(r.read_kernels(static_cast<int64_t>(f), &recs));
    for (const KernelRecord& k : recs) {
      (k.kind == ActivityKind::kKernel   ? c.kernels
       : k.kind == ActivityKind::kMemcpy ? c.memcpys
                                         : c.ranges)++;
      if (k.kind != ActivityKind::kRange && k.step >= 0) c.steps.insert(k.step);
    }
  }
  return c;
}

bool is_step_kind(const std::string& k) {
  return k != "run_header" && k != "blobs" && k != "kernels";
}

// Stored over raw bytes of the step chunks, raw meaning the records' FlatBuffer bytes (the
// footer's per-kind counts): a column-coded chunk (format 1.3) decodes to its FlatBuffer
// plus the columns moved out of it, so its frame's raw size counts those values twice.
double step_chunk_ratio(const TraceReader& r, const Sizes& sz) {
  uint64_t records = 0;
  for (const KindBytes& k : r.kind_bytes())
    if (is_step_kind(k.kind)) records += k.raw_bytes;
  const uint64_t raw = records ? records : sz.chunk_raw;
  return raw ? static_cast<double>(sz.chunk_stored) / static_cast<double>(raw) : 1.0;
}

int print_json(const TraceReader& r) {
  using nlohmann::json;
  const Sizes sz = frame_sizes(r);
  json j;
  j["path"] = r.path();
  j["file_bytes"] = r.file_size();
  j["format"] = std::to_string(r.format_major()) + "." + std::to_string(r.format_minor());
  j["complete"] = r.complete();
  j["has_footer"] = r.has_footer();
  j["lossy"] = r.lossy();
  j["lossy_reason"] = r.lossy_reason();
  j["warnings"] = r.warnings();
  const RunHeader& h = r.run_header();
  j["run_header"] = run_header_json(h);
  // "M.m" as inspect has always written it, beside run_header_json's format_major / _minor.
  j["run_header"]["format"] = std::to_string(h.format_major) + "." + std::to_string(h.format_minor);
  j["steps"] = r.step_count();
  j["first_step"] = r.first_step();
  j["last_step"] = r.last_step();
  j["tokens"] = r.token_count();
  j["blobs"] = r.blob_count();
  j["kernel_records"] = r.kernel_record_count();
  j["dropped_records"] = r.dropped_records();
  j["frames"] = r.frames().size();
  j["raw_bytes"] = r.raw_bytes();
  j["compression_ratio"] =
      r.file_size() ? static_cast<double>(r.raw_bytes()) / static_cast<double>(r.file_size()) : 0.0;
  json reqs = json::array();
  for (const RequestSummary& q : r.requests())
    reqs.push_back({{"id", q.id},
                    {"label", q.label},
                    {"prompt_len", q.prompt_len},
                    {"prompt_hash", cli::hash_text(q.prompt_hash)},
                    {"arrival_step", q.arrival_step},
                    {"carried", q.carried},
                    {"finish_step", q.finish_step},
                    {"generated", q.generated},
                    {"reason", q.finish_step >= 0 ? finish_reason_name(q.reason) : "running"}});
  j["requests"] = reqs;
  json kinds = json::object();
  const double tokens = static_cast<double>(r.token_count());
  const double chunk_ratio = step_chunk_ratio(r, sz);
  for (const KindBytes& k : r.kind_bytes()) {
    json e{{"raw_bytes", k.raw_bytes}};
    if (tokens > 0) {
      e["raw_bytes_per_token"] = static_cast<double>(k.raw_bytes) / tokens;
      if (is_step_kind(k.kind))
        e["stored_bytes_per_token_estimate"] =
            static_cast<double>(k.raw_bytes) * chunk_ratio / tokens;
    }
    kinds[k.kind] = e;
  }
  j["record_kinds"] = kinds;
  json fk = json::object();
  for (const auto& [k, v] : sz.stored_by_frame_kind)
    fk[k] = {{"stored_bytes", v}, {"raw_bytes", sz.raw_by_frame_kind.at(k)}};
  j["frame_kinds"] = fk;
  std::printf("%s\n", safeio::dump(j, 2).c_str());
  return 0;
}

int print_text(const TraceReader& r) {
  const RunHeader& h = r.run_header();
  const Sizes sz = frame_sizes(r);
  std::string state = r.complete()     ? "complete"
                      : r.has_footer() ? "not closed cleanly"
                                       : "incomplete (no footer)";
  if (r.lossy()) state += ", LOSSY: " + r.lossy_reason();
  std::printf("trace      %s (%s, format %u.%u, %s)\n", r.path().c_str(),
              human_bytes(r.file_size()).c_str(), r.format_major(), r.format_minor(),
              state.c_str());
  std::printf("recorded   llmrr %s, %s%s%s\n", h.tool_version.c_str(),
              cli::time_text(h.created_unix_ns).c_str(), h.run_id.empty() ? "" : ", run id ",
              h.run_id.c_str());
  if (!h.command_line.empty()) std::printf("command    %s\n", h.command_line.c_str());
  std::printf("host       %s, %s, %s, %d cores, kernels %s\n", h.host.hostname.c_str(),
              h.host.os.c_str(), h.host.cpu.c_str(), h.host.cores,
              h.host.isa.empty() ? "-" : h.host.isa.c_str());
  std::printf(
      "device     %s%s%s%s\n", h.device.kind.c_str(), h.device.name.empty() ? "" : " ",
      h.device.name.c_str(),
      h.device.sm_count ? (" (" + std::to_string(h.device.sm_count) + " SMs)").c_str() : "");
  if (h.device.kind == "cuda") {
    auto or_dash = [](const std::string& v) { return v.empty() ? "-" : v.c_str(); };
    std::printf("           compute capability %s, driver %s, runtime %s, cuBLASLt %s, %s\n",
                or_dash(h.device.compute_capability), or_dash(h.device.driver),
                or_dash(h.device.runtime), or_dash(h.device.cublaslt),
                human_bytes(static_cast<uint64_t>(h.device.memory_bytes)).c_str());
  }
  auto kc = kernel_counts(r);
  if (!kc.ok()) return cli::report("inspect", kc.status());
  // A trace of GPU activity only (llmrr record-cuda) has no model and no engine.
  const bool activity_only = r.step_count() == 0 && h.model.name.empty() && kc->frames > 0;
  if (activity_only) {
    std::printf("model      none (GPU activity of an unmodified program, llmrr record-cuda)\n");
  } else {
    const ModelInfo& m = h.model;
    std::printf("model      %s%s%s (%s, %d layers, hidden %d, vocab %d, heads %d/%d",
                m.name.c_str(), m.path.empty() ? "" : " from ", m.path.c_str(),
                m.architecture.c_str(), m.layers, m.hidden, m.vocab, m.heads, m.kv_heads);
    if (m.experts) std::printf(", %d experts top-%d", m.experts, m.experts_per_token);
    std::printf(", %s weights, %s compute)\n", m.weight_dtype.c_str(), m.compute_dtype.c_str());
    std::printf("weights    %s\n", m.weight_hash.empty() ? "-" : m.weight_hash.c_str());
    const EngineConfig& e = h.engine;
    std::printf("engine     policy %s, virtual device %d SMs x %d blocks, %d threads\n",
                e.policy.c_str(), e.virtual_sms, e.blocks_per_sm, e.threads);
    std::printf(
        "           max batch tokens %d, max seqs %d, prefill chunk %d, KV block %d, load %d, seed "
        "%llu\n",
        e.max_batch_tokens, e.max_seqs, e.prefill_chunk, e.kv_block_size, e.load,
        static_cast<unsigned long long>(e.seed));
    std::printf("           MoE capacity factor %s (%s), atomics %s\n",
                e.capacity_factor > 0 ? human_number(e.capacity_factor).c_str() : "off (dropless)",
                overflow_policy_name(e.overflow), e.atomics ? "on" : "off");
    std::printf("capture    sites %s, logits %s", capture_level_name(e.capture),
                logits_mode_name(e.logits_mode));
    if (e.logits_mode == LogitsMode::kTopK) std::printf(" (top-%d)", e.top_k);
    std::printf(", row hash %s\n", fingerprint_kind(e).c_str());
  }
  if (!h.extra_config_json.empty()) std::printf("extra      %s\n", h.extra_config_json.c_str());

  int finished = 0;
  for (const RequestSummary& q : r.requests()) finished += q.finish_step >= 0;
  std::printf("requests   %zu (%d finished)\n", r.requests().size(), finished);
  for (const RequestSummary& q : r.requests()) {
    std::printf("  %-6llu %-10s prompt %d tokens (hash %s), %s at step %lld, ",
                static_cast<unsigned long long>(q.id), q.label.empty() ? "-" : q.label.c_str(),
                q.prompt_len, cli::hash_text(q.prompt_hash).c_str(),
                q.carried ? "carried in (it arrived earlier)" : "arrived",
                static_cast<long long>(q.arrival_step));
    if (q.finish_step >= 0)
      std::printf("finished at step %lld (%s, %d generated)\n",
                  static_cast<long long>(q.finish_step), finish_reason_name(q.reason), q.generated);
    else
      std::printf("unfinished\n");
  }
  std::printf("steps      %lld", static_cast<long long>(r.step_count()));
  if (r.step_count() > 0)
    std::printf(" (%lld..%lld)", static_cast<long long>(r.first_step()),
                static_cast<long long>(r.last_step()));
  std::printf(", tokens %lld, blobs %lld, frames %zu\n", static_cast<long long>(r.token_count()),
              static_cast<long long>(r.blob_count()), r.frames().size());
  if (kc->frames > 0 || r.dropped_records() > 0)
    std::printf(
        "kernels    %lld kernels, %lld memcpys, %lld ranges in %zu steps, %lld frames, %lld "
        "dropped\n",
        static_cast<long long>(kc->kernels), static_cast<long long>(kc->memcpys),
        static_cast<long long>(kc->ranges), kc->steps.size(), static_cast<long long>(kc->frames),
        static_cast<long long>(r.dropped_records()));
  const double ratio =
      r.file_size() ? static_cast<double>(r.raw_bytes()) / static_cast<double>(r.file_size()) : 0;
  std::printf("size       raw %s, stored %s, compression %sx\n", human_bytes(r.raw_bytes()).c_str(),
              human_bytes(r.file_size()).c_str(), human_number(ratio).c_str());
  const double tokens = static_cast<double>(r.token_count());
  if (!r.kind_bytes().empty()) {
    const double chunk_ratio = step_chunk_ratio(r, sz);
    std::printf(
        "bytes per token by record kind (raw; stored is estimated at the step chunks' ratio "
        "%sx):\n",
        human_number(chunk_ratio > 0 ? 1.0 / chunk_ratio : 0).c_str());
    for (const KindBytes& k : r.kind_bytes()) {
      if (k.raw_bytes == 0) continue;
      if (tokens > 0) {
        std::printf(
            "  %-14s %10s raw  %10s stored", k.kind.c_str(),
            human_number(static_cast<double>(k.raw_bytes) / tokens).c_str(),
            is_step_kind(k.kind)
                ? human_number(static_cast<double>(k.raw_bytes) * chunk_ratio / tokens).c_str()
                : "-");
        std::printf("  (%s total)\n", human_bytes(k.raw_bytes).c_str());
      } else {
        std::printf("  %-14s %s raw\n", k.kind.c_str(), human_bytes(k.raw_bytes).c_str());
      }
    }
  } else {
    std::printf("bytes per record kind: unavailable (no footer)\n");
  }
  std::printf("stored by frame kind:\n");
  for (const auto& [k, v] : sz.stored_by_frame_kind) {
    const uint64_t raw = sz.raw_by_frame_kind.at(k);
    std::printf("  %-14s %10s stored  %10s raw  %sx", k.c_str(), human_bytes(v).c_str(),
                human_bytes(raw).c_str(),
                human_number(v ? static_cast<double>(raw) / static_cast<double>(v) : 0).c_str());
    if (tokens > 0)
      std::printf("  %s B/token", human_number(static_cast<double>(v) / tokens).c_str());
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int run_inspect_command(int argc, char** argv) {
  CLI::App app{
      "Show what a trace holds: version, completeness, run header, requests, steps,\n"
      "tokens, bytes per token by record kind and the compression ratio.",
      "inspect"};
  std::string path;
  bool json = false;
  app.add_option("TRACE", path, "trace file (.trace) or bundle (llmrr pack: each trace)")
      ->required();
  app.add_flag("--json", json, "print one JSON object (a line per trace) instead of text");
  app.footer(
      "Examples:\n"
      "  llmrr inspect run.trace\n"
      "  llmrr inspect run.trace --json | jq .requests\n"
      "\n"
      "Exit codes: 0 ok, 2 bad input (unreadable or damaged trace), 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  Result<cli::TraceInput> input = cli::open_trace_input(path);
  if (!input.ok()) return cli::report("inspect", input.status());
  int rc = 0;
  for (const std::string& p : input->traces) {
    auto r = TraceReader::open(p);
    if (!r.ok()) return cli::report("inspect", r.status());
    // Every frame's checksum and the records' semantics before a summary that would call a
    // damaged trace complete (open() reads the header and the footer's index only).
    if (Status st = (*r)->verify(); !st.ok()) return cli::report("inspect", st);
    for (const std::string& w : (*r)->warnings()) cli::warn("inspect", w);
    if (!json && p != input->traces.front()) std::printf("\n");
    rc = std::max(rc, json ? print_json(**r) : print_text(**r));
  }
  return rc;
}
