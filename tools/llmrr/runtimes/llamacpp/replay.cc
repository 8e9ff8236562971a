// `llmrr replay --runtime llamacpp`: the recorded batches are re-executed in libllama by
// llmrr-llamacpp-replay (llamacpp/replay) under the recording shim, and the new trace is
// compared with the recorded one by `llmrr diff`.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/child.h"
#include "cli/cli.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/safeio/output.h"
#include "runtimes/adapter.h"
#include "runtimes/llamacpp/llamacpp.h"

namespace llmrr::runtimes::llamacpp {

extern const Adapter kAdapter;

using cli::kExitBadInput;
using cli::kExitDiffer;
using cli::kExitInternal;
using cli::kExitOk;
using cli::parse;
using cli::report;

int replay(const char* command, int argc, char** argv) {
  (void)command;
  CLI::App app{"Replay a llama.cpp trace in libllama (--runtime llamacpp).", "replay"};
  std::string path, model, out;
  int n_batch = 0, n_ubatch = 0, threads = 0;
  bool force = false;
  std::string flash_attn;
  app.add_option("TRACE", path, "a trace recorded by llmrr record-llamacpp")->required();
  app.add_option("--model", model, "the GGUF file it was recorded with")->required();
  app.add_option("-o,--output", out, "the replay's trace (default: TRACE.replay.trace)");
  app.add_option("--n-batch", n_batch, "n_batch of the context (default: as recorded)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--n-ubatch", n_ubatch, "n_ubatch of the context (default: as recorded)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", threads, "threads (default: as recorded)")->check(CLI::Range(1, 1024));
  app.add_option("--flash-attn", flash_attn, "flash attention: on, off or auto (default: as recorded)")
      ->check(CLI::IsMember({"on", "off", "auto"}));
  app.add_flag("--force", force, "replay with a model whose hash differs from the trace's");
  std::vector<uint64_t> drop;
  app.add_option("--drop", drop,
                 "leave these requests' rows out of every batch (a counterfactual; needs "
                 "--request, the request the replay is judged on)")
      ->delimiter(',');
  std::string only;
  app.add_option("--request", only,
                 "judge the replay on this request alone (default: every request; for a slice "
                 "of llmrr cut, the request it was cut for)");
  app.footer(
      "Examples:\n"
      "  llmrr replay --runtime llamacpp run.trace --model SmolLM2.gguf\n"
      "  llmrr replay --runtime llamacpp run.trace --model SmolLM2.gguf --n-ubatch 7\n"
      "  llmrr replay --runtime llamacpp run.trace --model SmolLM2.gguf --request 0 --drop 2,3\n"
      "\n"
      "The recorded batches are fed to llama_decode in the recorded order (the context built\n"
      "from the trace's header), recorded again by the same shim, and compared with `llmrr\n"
      "diff`. Prints 'bit-exact: N steps, M rows' or the first step and site that differ.\n"
      "A slice (llmrr cut --whole-lives) replays from an empty KV cache: its first requests'\n"
      "KV cells may lie where the recording's did not (cells freed before the slice), so it\n"
      "is judged on the request it was cut for, and the others are compared for information.\n"
      "Exit codes: 0 bit-exact; 1 differs; 2 bad input (another model, not a llama.cpp trace,\n"
      "an existing -o); 3 internal error.");
  if (int rc = parse(app, argc, argv); rc >= 0) return rc;
  std::vector<std::string> tried_driver, tried_shim;
  const std::string driver =
      find_part("LLMRR_LLAMACPP_REPLAY", "llmrr-llamacpp-replay", &tried_driver);
  const std::string shim = find_part("LLMRR_LLAMACPP_SHIM", "libllmrr_llamacpp.so", &tried_shim);
  if (driver.empty())
    return report("replay", make_error(ErrorCode::kNotFound,
                                       "no llmrr-llamacpp-replay (" +
                                           missing_part(tried_driver, "LLMRR_LLAMACPP_REPLAY") + ")"));
  if (shim.empty())
    return report("replay", make_error(ErrorCode::kNotFound,
                                       "no libllmrr_llamacpp.so (" +
                                           missing_part(tried_shim, "LLMRR_LLAMACPP_SHIM") + ")"));
  if (out.empty()) {
    out = path;
    if (out.size() > 6 && out.compare(out.size() - 6, 6, ".trace") == 0) out.resize(out.size() - 6);
    out += ".replay.trace";
  }
  if (::access(out.c_str(), F_OK) == 0)
    return report("replay", make_error(ErrorCode::kInvalidArgument,
                                       out + ": exists; replay never overwrites a file (choose "
                                             "another -o or remove it)"));
  std::string capture = "layers";
  std::string lossy;  // the recording's own account of what it is missing
  // A slice (llmrr cut) starts at a later step and request: the replay numbers its own the same.
  int64_t first_step = 0;
  uint64_t first_id = 0;
  std::string diff_request;  // diff's --request: ID, or ID:REPLAY_ID when --drop renumbers
  uint64_t judged_hash = 0, judged_guess = 0;  // with --drop: the judged request's prompt hash,
  std::string judged_label;                     // label and id as the replay numbers it
  {
    auto r = trace::TraceReader::open(path);
    if (!r.ok()) return report("replay", r.status());
    capture = trace::capture_level_name((*r)->run_header().engine.capture);
    if ((*r)->lossy()) lossy = (*r)->lossy_reason();
    if (only.empty()) {
      const nlohmann::json extra =
          nlohmann::json::parse((*r)->run_header().extra_config_json, nullptr, false);
      if (extra.is_object() && extra.contains("cut") && extra["cut"].is_object() &&
          extra["cut"].contains("request") && extra["cut"]["request"].is_number_unsigned())
        only = std::to_string(extra["cut"]["request"].get<uint64_t>());
    }
    first_step = std::max<int64_t>((*r)->first_step(), 0);
    if (!(*r)->requests().empty()) {
      first_id = (*r)->requests()[0].id;
      for (const trace::RequestSummary& q : (*r)->requests()) first_id = std::min(first_id, q.id);
    }
    if (!drop.empty()) {
      // The replay numbers the requests it decodes in order of their first rows, as the
      // recording did: the judged request's id there is first_id + the kept ones before it.
      uint64_t judged = 0;
      const char* end = only.data() + only.size();
      if (only.empty() || std::from_chars(only.data(), end, judged).ptr != end)
        return report("replay", make_error(ErrorCode::kInvalidArgument,
                                           "--drop needs --request ID (the request the "
                                           "replay is judged on)"));
      uint64_t before = 0;
      bool found = false;
      for (uint64_t d : drop) {
        bool known = false;
        for (const trace::RequestSummary& q : (*r)->requests()) known = known || q.id == d;
        if (!known || d == judged)
          return report("replay", make_error(ErrorCode::kInvalidArgument,
                                             "--drop " + std::to_string(d) + ": " +
                                                 (d == judged ? "is the judged request"
                                                              : "no such request in " + path)));
      }
      for (const trace::RequestSummary& q : (*r)->requests()) {
        if (q.id == judged) {
          found = true;
          judged_hash = q.prompt_hash;
          judged_label = q.label;
        }
        if (q.id < judged && std::find(drop.begin(), drop.end(), q.id) == drop.end()) ++before;
      }
      if (!found)
        return report("replay", make_error(ErrorCode::kInvalidArgument,
                                           "--request " + only + ": no such request in " + path));
      judged_guess = first_id + before;
    }
  }
  if (Status st = safeio::check_output_file(out, "-o", {path}); !st.ok())
    return report("replay", st);
  Result<safeio::OutputFile> partial =
      safeio::OutputFile::create(out, "-o", safeio::OutputFile::Kind::kPartial);
  if (!partial.ok()) return report("replay", partial.status());
  std::vector<std::string> args{driver, path, model};
  if (n_batch > 0) args.insert(args.end(), {"--n-batch", std::to_string(n_batch)});
  if (n_ubatch > 0) args.insert(args.end(), {"--n-ubatch", std::to_string(n_ubatch)});
  if (threads > 0) args.insert(args.end(), {"--threads", std::to_string(threads)});
  if (!flash_attn.empty()) args.insert(args.end(), {"--flash-attn", flash_attn});
  if (force) args.push_back("--force");
  if (!drop.empty()) {
    std::string list;
    for (uint64_t d : drop) list += (list.empty() ? "" : ",") + std::to_string(d);
    args.insert(args.end(), {"--drop", list});
  }
  cli::Child driver_run;
  driver_run.argv = args;
  driver_run.in_child = [&] {
    const char* old = std::getenv("LD_PRELOAD");
    const std::string preload = (old != nullptr && *old != '\0' ? std::string(old) + ":" : "") + shim;
    ::setenv("LD_PRELOAD", preload.c_str(), 1);
    ::setenv(trace_env(kAdapter).c_str(), partial->write_path().c_str(), 1);
    ::setenv(kCaptureEnv, capture.c_str(), 1);
    ::setenv("LLMRR_LLAMACPP_FORCED", "1", 1);
    ::setenv("LLMRR_LLAMACPP_FIRST_STEP", std::to_string(first_step).c_str(), 1);
    ::setenv("LLMRR_LLAMACPP_FIRST_ID", std::to_string(first_id).c_str(), 1);
  };
  Result<int> ran = cli::run_child("replay", std::move(driver_run));
  if (!ran.ok()) return report("replay", ran.status());
  if (*ran != 0) return *ran == 2 ? kExitBadInput : kExitInternal;
  int64_t steps = 0, rows = 0;
  {
    auto r = trace::TraceReader::open(partial->write_path());
    if (!r.ok()) return report("replay", r.status());
    steps = (*r)->step_count();
    trace::StepCursor c = (*r)->steps();
    trace::StepRecord s;
    for (;;) {
      auto more = c.next(&s);
      if (!more.ok()) return report("replay", more.status());
      if (!*more) break;
      rows += s.row_count();
    }
  }
  if (!drop.empty()) {  // the judged request in the replay, by its prompt and label
    Result<uint64_t> id =
        id_in_replay(partial->write_path(), judged_hash, judged_label, judged_guess);
    if (!id.ok()) return report("replay", id.status());
    diff_request = only + ":" + std::to_string(*id);
  }
  if (Status st = partial->commit(); !st.ok()) return report("replay", st);
  std::string text;
  cli::Child diff;
  diff.argv = {cli::self_exe(), "diff", path, out, "--align", "ids"};
  if (diff_request.empty()) diff_request = only;
  if (!diff_request.empty()) diff.argv.insert(diff.argv.end(), {"--request", diff_request});
  diff.out = &text;
  Result<int> d = cli::run_child("replay", std::move(diff));
  if (!d.ok()) return report("replay", d.status());
  std::printf("replayed %s -> %s\n", path.c_str(), out.c_str());
  if (!drop.empty()) {
    std::string list;
    for (uint64_t x : drop) list += (list.empty() ? "" : ",") + std::to_string(x);
    std::printf("judged on request %s, replayed without request%s %s\n", only.c_str(),
                drop.size() == 1 ? "" : "s", list.c_str());
  } else if (!only.empty()) {
    // The others, for information: how many are identical too.
    std::string all;
    cli::Child every;
    every.argv = {cli::self_exe(), "diff", path, out, "--align", "ids"};
    every.out = &all;
    Result<int> e = cli::run_child("replay", std::move(every));
    const size_t at = all.find(" common requests are identical");
    size_t from = at == std::string::npos ? at : all.rfind('\n', at);
    from = from == std::string::npos ? 0 : from + 1;
    std::printf("judged on request %s%s; the others: %s\n", only.c_str(),
                " (the request the slice was cut for, or --request)",
                e.ok() && *e == 0 ? "all identical too"
                : at != std::string::npos ? all.substr(from, at - from + 30).c_str()
                                          : "compared, see llmrr diff");
  }
  if (*d == 0) {
    if (only.empty())
      std::printf("bit-exact: %lld steps, %lld rows (every fingerprint, logits row and token as "
                  "recorded)\n",
                  static_cast<long long>(steps), static_cast<long long>(rows));
    else
      std::printf("bit-exact: request %s (every fingerprint, logits row and token as recorded), "
                  "%lld steps replayed\n",
                  only.c_str(), static_cast<long long>(steps));
    if (!lossy.empty()) std::printf("the recording is lossy: %s\n", lossy.c_str());
    return kExitOk;
  }
  std::fputs(text.c_str(), stdout);
  // A llama.cpp recording that misses memory calls says which one first (KV cell placement
  // then differs from that step on): the reason a replay differs, named.
  if (!lossy.empty()) std::printf("the recording is lossy: %s\n", lossy.c_str());
  return *d == 1 ? kExitDiffer : *d;
}

}  // namespace llmrr::runtimes::llamacpp
