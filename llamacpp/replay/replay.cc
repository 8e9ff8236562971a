// llmrr-llamacpp-replay TRACE MODEL [--n-batch N] [--n-ubatch N] [--threads N]
// [--flash-attn on|off|auto] [--drop ID,ID...] [--force]:
// re-executes a llama.cpp trace (recorded by libllmrr_llamacpp.so) in libllama: the context is
// built from the header's extra_config_json (overridable), and the recorded batches are fed to
// llama_decode in the recorded order, each rebuilt from its segments (tokens from the request's
// prompt and recorded tokens, positions, the sequence from the request's label, a logits flag
// on each segment that samples). Before a request's first rows, its sequence is cut back to
// where the request starts (llama_memory_seq_rm), as llama-server does when it reuses a slot.
// After each decode the sampler accepts the argmax of every row that wants logits (the recorded
// requests are greedy; continuations feed the recorded tokens, so the schedule stays the
// recorded one). Run under the shim (`llmrr replay --runtime llamacpp` does that), the replay
// is recorded as a new trace by the same code as the original. --drop leaves those requests'
// rows out of every batch (a counterfactual: the others' KV cells and batches as if they had
// not come; a step left empty is not decoded).
// Exit: 0 done, 2 bad input (unreadable trace, not a llama.cpp trace, other weights), 3 a
// decode failed.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "header.h"
#include "llama.h"
#include "llmrr/format/trace_reader.h"

namespace {

int bad(const std::string& msg) {
  std::fprintf(stderr, "llmrr-llamacpp-replay: error: %s\n", msg.c_str());
  return 2;
}

bool parse_int(const char* s, int* out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 0 || v > (1 << 24)) return false;
  *out = static_cast<int>(v);
  return true;
}

// libllama's own log: warnings and errors only (the replay's output is its report).
void quiet(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace llmrr;
  std::vector<std::string> pos;
  int n_batch = -1, n_ubatch = -1, threads = -1;
  bool force = false;
  std::string flash_attn;
  std::vector<uint64_t> drop;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--drop") {
      if (i + 1 >= argc) return bad("--drop: expected request ids, e.g. 1,3");
      const std::string list = argv[++i];
      size_t at = 0;
      while (at <= list.size()) {
        const size_t end = std::min(list.find(',', at), list.size());
        int id = -1;
        if (!parse_int(list.substr(at, end - at).c_str(), &id))
          return bad("--drop: '" + list + "': expected request ids separated by commas");
        drop.push_back(static_cast<uint64_t>(id));
        at = end + 1;
      }
      continue;
    }
    if (a == "--flash-attn") {
      if (i + 1 >= argc || (std::strcmp(argv[i + 1], "on") != 0 &&
                            std::strcmp(argv[i + 1], "off") != 0 &&
                            std::strcmp(argv[i + 1], "auto") != 0))
        return bad("--flash-attn: expected on, off or auto");
      flash_attn = argv[++i];
      continue;
    }
    int* target = a == "--n-batch" ? &n_batch : a == "--n-ubatch" ? &n_ubatch
                : a == "--threads" ? &threads : nullptr;
    if (target != nullptr) {
      if (i + 1 >= argc || !parse_int(argv[i + 1], target) || *target < 1)
        return bad(a + ": expected a positive integer");
      ++i;
    } else if (a == "--force") {
      force = true;
    } else if (!a.empty() && a[0] == '-') {
      return bad("unknown option " + a);
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() != 2)
    return bad("usage: llmrr-llamacpp-replay TRACE MODEL.gguf [--n-batch N] [--n-ubatch N] "
               "[--threads N] [--flash-attn on|off|auto] [--drop ID,...] [--force]");
  auto reader = trace::TraceReader::open(pos[0]);
  if (!reader.ok()) return bad(reader.status().message());
  const trace::RunHeader& h = (*reader)->run_header();
  nlohmann::json extra = nlohmann::json::parse(h.extra_config_json, nullptr, false);
  if (!extra.is_object() || extra.value("runtime", "") != "llamacpp" ||
      !extra.contains("llamacpp") || !extra["llamacpp"].is_object())
    return bad(pos[0] + ": not a llama.cpp trace (its header's extra_config_json has no "
               "\"runtime\": \"llamacpp\"; record one with llmrr record-llamacpp)");
  const nlohmann::json& lc = extra["llamacpp"];
  const std::string hash = llamacpp::file_hash(pos[1]);
  if (hash.empty()) return bad(pos[1] + ": cannot read the model file");
  if (!h.model.weight_hash.empty() && hash != h.model.weight_hash && !force)
    return bad(pos[1] + ": weight hash " + hash + " differs from the trace's " +
               h.model.weight_hash + " (another model file; --force replays anyway)");

  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(pos[1].c_str(), mp);
  if (model == nullptr) return bad(pos[1] + ": libllama cannot load it");
  llama_context_params cp = llama_context_default_params();
  auto geti = [&](const char* k, int64_t d) {
    return lc.contains(k) && lc[k].is_number_integer() ? lc[k].get<int64_t>() : d;
  };
  auto getb = [&](const char* k, bool d) {
    return lc.contains(k) && lc[k].is_boolean() ? lc[k].get<bool>() : d;
  };
  cp.n_ctx = static_cast<uint32_t>(geti("n_ctx", cp.n_ctx));
  cp.n_batch = static_cast<uint32_t>(n_batch > 0 ? n_batch : geti("n_batch", cp.n_batch));
  cp.n_ubatch = static_cast<uint32_t>(n_ubatch > 0 ? n_ubatch : geti("n_ubatch", cp.n_ubatch));
  cp.n_seq_max = static_cast<uint32_t>(geti("n_seq_max", cp.n_seq_max));
  cp.n_threads = static_cast<int32_t>(threads > 0 ? threads : geti("n_threads", cp.n_threads));
  cp.n_threads_batch =
      static_cast<int32_t>(threads > 0 ? threads : geti("n_threads_batch", cp.n_threads_batch));
  cp.flash_attn_type = static_cast<llama_flash_attn_type>(geti("flash_attn_type", cp.flash_attn_type));
  if (!flash_attn.empty())
    cp.flash_attn_type = flash_attn == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                               : LLAMA_FLASH_ATTN_TYPE_AUTO;
  cp.kv_unified = getb("kv_unified", cp.kv_unified);
  cp.swa_full = getb("swa_full", cp.swa_full);
  cp.offload_kqv = getb("offload_kqv", cp.offload_kqv);
  cp.op_offload = getb("op_offload", cp.op_offload);
  cp.type_k = static_cast<ggml_type>(geti("type_k", cp.type_k));
  cp.type_v = static_cast<ggml_type>(geti("type_v", cp.type_v));
  cp.n_rs_seq = static_cast<uint32_t>(geti("n_rs_seq", cp.n_rs_seq));
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) return bad("libllama cannot build the recorded context");
  llama_memory_t mem = llama_get_memory(ctx);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_sampler* smpl = llama_sampler_init_greedy();

  struct Req {
    int32_t seq = 0;
    std::vector<int32_t> tokens;  // by position: the prompt, then the recorded tokens
    bool started = false;
  };
  std::map<uint64_t, Req> reqs;
  trace::StepCursor cur = (*reader)->steps();
  trace::StepRecord s;
  int64_t steps = 0, rows_total = 0;
  llama_batch b = llama_batch_init(static_cast<int32_t>(cp.n_batch), 0, 1);
  for (;;) {
    auto more = cur.next(&s);
    if (!more.ok()) return bad(more.status().message());
    if (!*more) break;
    for (const trace::RequestRecord& r : s.arrivals) {
      if (r.carried)
        return bad("request " + std::to_string(r.id) + " (" + r.label + ") was carried into this "
                   "trace at step " + std::to_string(s.step) + " with " +
                   std::to_string(r.history.size()) + " tokens generated before it: its KV "
                   "cache was built in steps the trace does not hold, so its rows and its "
                   "co-requests' cannot be re-executed bit for bit (cut with llmrr cut "
                   "--whole-lives, so that every request arrives inside the slice)");
      Req q;
      const size_t at = r.label.rfind("seq=");
      if (at == std::string::npos || !parse_int(r.label.c_str() + at + 4, &q.seq))
        return bad("request " + std::to_string(r.id) + ": label '" + r.label +
                   "' names no sequence (expected 'llamacpp seq=N')");
      q.tokens = r.prompt;
      reqs[r.id] = std::move(q);
    }
    const int64_t n = s.row_count();
    if (n > static_cast<int64_t>(cp.n_batch)) {
      llama_batch_free(b);
      b = llama_batch_init(static_cast<int32_t>(n), 0, 1);
    }
    b.n_tokens = 0;
    for (const trace::Segment& g : s.segments) {
      if (std::find(drop.begin(), drop.end(), g.request) != drop.end()) continue;
      auto it = reqs.find(g.request);
      if (it == reqs.end()) return bad("step " + std::to_string(s.step) + ": unknown request");
      Req& q = it->second;
      if (!q.started) {  // the sequence is cut back to where this request starts
        llama_memory_seq_rm(mem, q.seq, g.start, -1);
        q.started = true;
      }
      for (int32_t p = g.start; p < g.start + g.count; ++p) {
        if (p < 0 || static_cast<size_t>(p) >= q.tokens.size())
          return bad("step " + std::to_string(s.step) + ": request " +
                     std::to_string(g.request) + " has no token at position " +
                     std::to_string(p));
        const int k = b.n_tokens++;
        b.token[k] = q.tokens[p];
        b.pos[k] = p;
        b.n_seq_id[k] = 1;
        b.seq_id[k][0] = q.seq;
        b.logits[k] = g.sample != 0 && p == g.start + g.count - 1;
      }
    }
    // tokens recorded in this step extend their requests (fed in later steps)
    for (const trace::TokenRecord& t : s.tokens) {
      Req& q = reqs[t.request];
      if (t.position >= 0 && static_cast<size_t>(t.position) >= q.tokens.size())
        q.tokens.resize(t.position + 1, 0);
      if (t.position >= 0) q.tokens[t.position] = t.token;
    }
    if (b.n_tokens == 0) continue;
    const int32_t ret = llama_decode(ctx, b);
    if (ret != 0) {
      std::fprintf(stderr, "llmrr-llamacpp-replay: step %" PRId64 ": llama_decode returned %d\n",
                   s.step, ret);
      return 3;
    }
    for (int k = 0; k < b.n_tokens; ++k) {
      if (!b.logits[k]) continue;
      const float* x = llama_get_logits_ith(ctx, k);
      if (x != nullptr) llama_sampler_accept(smpl, argmax(x, n_vocab));
    }
    ++steps;
    rows_total += b.n_tokens;
  }
  std::printf("replayed %" PRId64 " steps, %" PRId64 " rows\n", steps, rows_total);
  llama_batch_free(b);
  llama_sampler_free(smpl);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
