// libllmrr_llamacpp.so: records what a program that links libllama does, preloaded
// (LD_PRELOAD; `llmrr record-llamacpp` sets it up). It defines libllama's entry points that
// matter to a recording and forwards each to the real one (dlsym RTLD_NEXT):
//   llama_init_from_model      installs the graph callback (cb_eval; a program's own one is
//                              chained) and keeps the context's parameters for the header
//   llama_decode, llama_process  one step per successful decode of the recorded context (the
//                              first context that decodes outside warmup): the batch's rows,
//                              the fingerprints the callback took, the logits of every row that
//                              wants them (the real llama_get_logits_ith, right after)
//   llama_batch_ext_*          a mirror of each extended batch the program builds (its rows are
//                              opaque to a caller), read at llama_process
//   llama_memory_*             what the program does to each sequence (a removal back to
//                              position p starts the sequence's next request there)
//   llama_state_seq_*_ext      saved and restored sequences keep their tokens (by content hash)
//   llama_get_logits_ith + llama_sampler_accept  the token the sampler chose for a row
//   llama_free                 the trace is completed and closed (also at exit)
// Settings (environment): LLMRR_LLAMACPP_TRACE (the trace; nothing is recorded without it),
// LLMRR_CAPTURE (none | layers | all, default layers), LLMRR_TOP_K (32), LLMRR_LLAMACPP_FORCED
// (1: the program feeds recorded tokens, as llmrr-llamacpp-replay does: each row's token is the
// one its sampler accepted).
// Never disturbs the program: every failure is a message on stderr and a lossy trace.
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "dl.h"
#include "header.h"
#include "llama.h"
#include "ops.h"
#include "tape.h"

using llmrr::llamacpp::BatchRow;
using llmrr::llamacpp::SiteFingerprints;
using llmrr::llamacpp::Tape;

using llmrr::llamacpp::any_fn;
using llmrr::llamacpp::next_fn;

namespace {
#define REAL(name)                                         \
  static decltype(&name) real = next_fn(&name, #name);    \
  if (real == nullptr) {                                   \
    std::fprintf(stderr, "llmrr: no %s in libllama\n", #name); \
    std::abort();                                          \
  }

struct CtxInfo {
  llama_context_params params{};
  ggml_backend_sched_eval_callback user_cb = nullptr;
  void* user_ud = nullptr;
  const llama_model* model = nullptr;
};

struct Capture {
  // the decode in flight
  bool active = false;
  const CtxInfo* ctx = nullptr;
  const std::vector<BatchRow>* rows = nullptr;
  std::string first_name;
  int64_t ub_off = 0, ub_n = -1;
  std::vector<SiteFingerprints> sites;
  std::unordered_map<std::string, size_t> site_index;
  std::vector<float> scratch;
  llmrr::llamacpp::OpRecorder ops;  // op records of the decode's graphs
  std::vector<std::pair<int64_t, int64_t>> ub_rows;  // each graph's rows, as take_rows saw
};

struct State {
  std::mutex mu;
  bool enabled = false;
  std::string trace;
  int capture = LLMRR_CAPTURE_LAYERS;
  int top_k = 32;
  bool ops = true;  // op records (LLMRR_LLAMACPP_OPS=0: none)
  std::string model_path;
  std::unordered_map<const llama_context*, CtxInfo*> ctxs;  // never freed: callbacks
  llama_context* ctx = nullptr;  // the recorded context
  llama_memory_t mem = nullptr;
  llmrr_recorder* rec = nullptr;
  Tape* tape = nullptr;
  bool stopped = false;  // recording failed to start or the context is gone
  std::unordered_map<const llama_batch_ext*, std::vector<BatchRow>> batches;
  std::unordered_map<uint64_t, std::vector<int32_t>> saved;  // state hash -> seq tokens
  std::vector<int32_t> out_rows;  // batch rows with logits, in order, of the last decode
  Capture cap;
};

State& S() {
  static State* s = [] {
    auto* st = new State();  // never destroyed: the program's exit may still call into us
    if (const char* t = std::getenv("LLMRR_LLAMACPP_TRACE"); t != nullptr && *t != '\0') {
      st->enabled = true;
      st->trace = t;
    }
    if (const char* c = std::getenv("LLMRR_CAPTURE"); c != nullptr) {
      if (std::strcmp(c, "none") == 0) st->capture = LLMRR_CAPTURE_NONE;
      else if (std::strcmp(c, "all") == 0) st->capture = LLMRR_CAPTURE_ALL;
      else if (std::strcmp(c, "layers") != 0)
        std::fprintf(stderr, "llmrr: LLMRR_CAPTURE=%s: expected none, layers or all; using layers\n", c);
    }
    if (const char* k = std::getenv("LLMRR_TOP_K"); k != nullptr) st->top_k = std::atoi(k);
    if (const char* o = std::getenv("LLMRR_LLAMACPP_OPS"); o != nullptr && *o == '0')
      st->ops = false;
    return st;
  }();
  return *s;
}

thread_local int32_t t_logits_row = -1;  // batch row whose logits the thread read last

// llmrr's name of a graph node the capture level keeps ("" = not kept).
std::string site_of(const char* name, int capture) {
  if (capture == LLMRR_CAPTURE_NONE || name == nullptr) return {};
  const char* dash = std::strrchr(name, '-');
  if (dash == nullptr) {
    if (capture == LLMRR_CAPTURE_ALL && std::strcmp(name, "result_norm") == 0) return "final_norm";
    return {};
  }
  const std::string stem(name, static_cast<size_t>(dash - name));
  char* end = nullptr;
  const long layer = std::strtol(dash + 1, &end, 10);
  if (end == dash + 1 || *end != '\0' || layer < 0 || layer > 100000) return {};
  const char* kind = nullptr;
  if (stem == "l_out") kind = "out";
  else if (capture != LLMRR_CAPTURE_ALL) return {};
  else if (stem == "attn_norm") kind = "attn_norm";
  else if (stem == "ffn_inp") kind = "attn.resid";
  else if (stem == "ffn_norm") kind = "mlp_norm";
  else if (stem == "ffn_out") kind = "mlp.down";
  if (kind == nullptr) return {};
  char buf[64];
  std::snprintf(buf, sizeof buf, "L%ld.%s", layer, kind);
  return buf;
}

// Fingerprints the rows of t (one per token of the ubatch, or one per output row).
void take_rows(State& st, const ggml_tensor* t, const std::string& site) {
  Capture& c = st.cap;
  if (t->type != GGML_TYPE_F32 || t->ne[2] != 1 || t->ne[3] != 1 || t->nb[0] != sizeof(float))
    return;
  const int64_t cols = t->ne[0], nrows = t->ne[1];
  const std::vector<BatchRow>& rows = *c.rows;
  if (c.first_name.empty() || site == c.first_name) {  // a new ubatch starts
    if (c.first_name.empty()) c.first_name = site;
    else c.ub_off += c.ub_n;
    c.ub_n = nrows;
    if (c.ub_off + c.ub_n > static_cast<int64_t>(rows.size())) {
      st.tape->lossy("a ubatch holds rows past the batch's; layer rows of that decode are not "
                     "recorded");
      c.ub_n = 0;
      return;
    }
    // The op records of the graph in flight (this ubatch's) cover these rows.
    if (const int32_t g = c.ops.graph(); g >= 0) {
      if (c.ub_rows.size() <= static_cast<size_t>(g)) c.ub_rows.resize(g + 1, {-1, 0});
      c.ub_rows[g] = {c.ub_off, c.ub_n};
    }
  }
  std::vector<int32_t> map;
  if (nrows == c.ub_n) {
    for (int64_t r = 0; r < nrows; ++r) map.push_back(static_cast<int32_t>(c.ub_off + r));
  } else {
    for (int64_t r = c.ub_off; r < c.ub_off + c.ub_n; ++r)
      if (rows[r].logits) map.push_back(static_cast<int32_t>(r));
    if (static_cast<int64_t>(map.size()) != nrows) return;  // rows not mappable: skip
  }
  const char* base = static_cast<const char*>(t->data);
  static auto is_host = any_fn(&ggml_backend_buffer_is_host, "ggml_backend_buffer_is_host");
  static auto tensor_get = any_fn(&ggml_backend_tensor_get, "ggml_backend_tensor_get");
  const bool host = t->buffer == nullptr || (is_host != nullptr && is_host(t->buffer));
  if (!host) {  // a device tensor: one copy to the host (the cost the README names)
    if (tensor_get == nullptr) return;
    c.scratch.resize(static_cast<size_t>(cols * nrows));
    for (int64_t r = 0; r < nrows; ++r)
      tensor_get(const_cast<ggml_tensor*>(t), c.scratch.data() + r * cols, r * t->nb[1],
                 cols * sizeof(float));
    base = nullptr;
  }
  auto [it, inserted] = c.site_index.emplace(site, c.sites.size());
  if (inserted) {
    c.sites.push_back({});
    c.sites.back().site = site;
    c.sites.back().cols = cols;
  }
  SiteFingerprints& f = c.sites[it->second];
  if (f.cols != cols) return;
  for (int64_t r = 0; r < nrows; ++r) {
    const float* x = base != nullptr ? reinterpret_cast<const float*>(base + r * t->nb[1])
                                     : c.scratch.data() + r * cols;
    double ss = 0.0;
    float mx = 0.0f;
    for (int64_t k = 0; k < cols; ++k) {
      ss += static_cast<double>(x[k]) * x[k];
      mx = std::fmax(mx, std::fabs(x[k]));
    }
    f.hashes.push_back(llmrr_fingerprint_mixsum64(x, cols));
    f.l2.push_back(static_cast<float>(std::sqrt(ss)));
    f.max_abs.push_back(mx);
    f.batch_rows.push_back(map[r]);
  }
}

bool eval_cb(ggml_tensor* t, bool ask, void* ud) {
  State& st = S();
  const CtxInfo* info = static_cast<const CtxInfo*>(ud);
  bool user = false;
  if (info != nullptr && info->user_cb != nullptr) user = info->user_cb(t, ask, info->user_ud);
  // cap.active is set and cleared by the decoding thread, which also runs this callback.
  if (!st.cap.active || st.cap.ctx != info) return ask ? user : true;
  const std::string site = site_of(t->name, st.capture);
  if (ask) {
    if (st.ops) st.cap.ops.take(t);
    return user || !site.empty();
  }
  if (!site.empty()) {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.tape != nullptr) take_rows(st, t, site);
  }
  return info != nullptr && info->user_cb != nullptr ? user : true;
}

// Opens the trace for ctx (the first context that decodes). Caller holds the mutex.
bool start(State& st, llama_context* ctx) {
  if (st.rec != nullptr) return st.ctx == ctx;
  if (st.stopped || !st.enabled) return false;
  auto it = st.ctxs.find(ctx);
  if (it == st.ctxs.end()) return false;
  st.stopped = true;  // until it succeeds
  llmrr::llamacpp::HeaderInfo h = llmrr::llamacpp::describe(ctx, it->second->params, st.model_path);
  llmrr_recorder_config cfg;
  llmrr_recorder_config_init(&cfg);
  h.fill(cfg);
  cfg.capture = st.capture;
  cfg.top_k = st.top_k;
  cfg.fingerprint = "mixsum64";
  cfg.inline_steps = 0;
  if (llmrr_recorder_open(st.trace.c_str(), &cfg, &st.rec) != LLMRR_OK) {
    std::fprintf(stderr, "llmrr: cannot record llama.cpp into %s: %s\n", st.trace.c_str(),
                 llmrr_recorder_last_error());
    st.rec = nullptr;
    return false;
  }
  st.ctx = ctx;
  static auto get_memory = any_fn(&llama_get_memory, "llama_get_memory");
  st.mem = get_memory != nullptr ? get_memory(ctx) : nullptr;
  static auto n_ctx = any_fn(&llama_n_ctx, "llama_n_ctx");
  st.tape = new Tape(st.rec, h.vocab, h.eog_tokens,
                     n_ctx != nullptr ? static_cast<int32_t>(n_ctx(ctx)) : 0);
  if (const char* f = std::getenv("LLMRR_LLAMACPP_FORCED"); f != nullptr && *f == '1')
    st.tape->set_forced(true);
  {
    // A replay of a slice (llmrr cut): steps and request ids continue the slice's numbering.
    const char* fs = std::getenv("LLMRR_LLAMACPP_FIRST_STEP");
    const char* fi = std::getenv("LLMRR_LLAMACPP_FIRST_ID");
    const long long step = fs != nullptr ? std::atoll(fs) : 0;
    const long long id = fi != nullptr ? std::atoll(fi) : 0;
    if (step > 0 || id > 0)
      st.tape->set_numbering(std::max(step, 0LL), static_cast<uint64_t>(std::max(id, 0LL)));
  }
  st.stopped = false;
  std::atexit([] {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.tape != nullptr) s.tape->finish_all();
    if (s.rec != nullptr) llmrr_recorder_close(s.rec);
    s.rec = nullptr;
    s.tape = nullptr;
    s.stopped = true;
  });
  return true;
}

bool recording(State& st, llama_context* ctx) { return start(st, ctx); }

// Before the real decode: the capture of this batch's rows.
void begin(State& st, llama_context* ctx, const std::vector<BatchRow>& rows) {
  Capture& c = st.cap;
  c.active = true;
  auto it = st.ctxs.find(ctx);
  c.ctx = it != st.ctxs.end() ? it->second : nullptr;
  c.rows = &rows;
  c.first_name.clear();
  c.ub_off = 0;
  c.ub_n = -1;
  c.sites.clear();
  c.site_index.clear();
  c.ops.reset();
  c.ub_rows.clear();
}

// After the real decode.
void end(State& st, llama_context* ctx, const std::vector<BatchRow>& rows, int32_t ret) {
  Capture& c = st.cap;
  c.active = false;
  if (ret != 0) {
    if (ret == 2 || ret < -1)
      st.tape->lossy("llama_decode returned " + std::to_string(ret) +
                     ": the ubatches it processed stay in memory but are not recorded");
    return;
  }
  static decltype(&llama_get_logits_ith) real_logits =
      next_fn(&llama_get_logits_ith, "llama_get_logits_ith");
  std::vector<const float*> logits(rows.size(), nullptr);
  st.out_rows.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].logits) continue;
    st.out_rows.push_back(static_cast<int32_t>(i));
    if (real_logits != nullptr) logits[i] = real_logits(ctx, static_cast<int32_t>(i));
  }
  const auto it = st.ctxs.find(ctx);
  const bool unified = it == st.ctxs.end() || it->second->params.kv_unified ||
                       it->second->params.n_seq_max <= 1;
  std::vector<SiteFingerprints> sites = std::move(c.sites);
  if (!unified && !sites.empty()) {
    bool several = false;
    for (const BatchRow& r : rows) several = several || r.seq != rows[0].seq;
    if (several) {
      st.tape->lossy("a KV cache per sequence (kv_unified off) reorders a batch's rows into "
                     "ubatches: layer rows of batches with several sequences are not recorded "
                     "(run with --kv-unified)");
      sites.clear();
    }
  }
  const int32_t n_threads = c.ctx != nullptr ? c.ctx->params.n_threads : 0;
  const int32_t n_threads_batch = c.ctx != nullptr ? c.ctx->params.n_threads_batch : 0;
  st.tape->decoded(rows, logits, std::move(sites),
                   c.ops.finish(c.ub_rows, static_cast<int64_t>(rows.size()), n_threads,
                                n_threads_batch));
}

int32_t decode_rows(llama_context* ctx, std::vector<BatchRow> rows, auto&& call) {
  State& st = S();
  std::unique_lock<std::mutex> lock(st.mu);
  if (!recording(st, ctx)) {
    lock.unlock();
    return call();
  }
  begin(st, ctx, rows);
  lock.unlock();  // the graph callback takes the lock itself
  const int32_t ret = call();
  lock.lock();
  if (st.tape != nullptr) end(st, ctx, rows, ret);
  st.cap.active = false;
  return ret;
}

uint64_t hash_bytes(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over 8-byte words, then the tail
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h ^ n;
}

}  // namespace

extern "C" {

llama_model* llama_model_load_from_file(const char* path, llama_model_params params) {
  REAL(llama_model_load_from_file);
  State& st = S();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.model_path.empty() && path != nullptr) st.model_path = path;
  }
  return real(path, params);
}

llama_context* llama_init_from_model(llama_model* model, llama_context_params params) {
  REAL(llama_init_from_model);
  State& st = S();
  if (!st.enabled) return real(model, params);
  auto* info = new CtxInfo();  // lives as long as the context may call back
  info->params = params;
  info->user_cb = params.cb_eval;
  info->user_ud = params.cb_eval_user_data;
  info->model = model;
  if (st.capture != LLMRR_CAPTURE_NONE) {
    params.cb_eval = eval_cb;
    params.cb_eval_user_data = info;
  }
  llama_context* ctx = real(model, params);
  if (ctx != nullptr) {
    std::lock_guard<std::mutex> lock(st.mu);
    st.ctxs[ctx] = info;
  }
  return ctx;
}

void llama_free(llama_context* ctx) {
  REAL(llama_free);
  State& st = S();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (ctx != nullptr && ctx == st.ctx) {
      if (st.tape != nullptr) st.tape->finish_all();
      if (st.rec != nullptr) llmrr_recorder_close(st.rec);
      st.rec = nullptr;
      delete st.tape;
      st.tape = nullptr;
      st.stopped = true;
      st.ctx = nullptr;
    }
    st.ctxs.erase(ctx);
  }
  real(ctx);
}

int32_t llama_decode(llama_context* ctx, llama_batch batch) {
  REAL(llama_decode);
  State& st = S();
  if (!st.enabled) return real(ctx, batch);
  std::vector<BatchRow> rows(batch.n_tokens > 0 ? batch.n_tokens : 0);
  static auto pos_max = any_fn(&llama_memory_seq_pos_max, "llama_memory_seq_pos_max");
  static auto get_memory = any_fn(&llama_get_memory, "llama_get_memory");
  std::unordered_map<int32_t, int32_t> next_pos;
  for (int32_t i = 0; i < batch.n_tokens; ++i) {
    BatchRow& r = rows[i];
    r.token = batch.token != nullptr ? batch.token[i] : -1;
    r.n_seq = batch.n_seq_id != nullptr ? batch.n_seq_id[i] : 1;
    r.seq = batch.seq_id != nullptr && r.n_seq > 0 ? batch.seq_id[i][0] : 0;
    if (batch.pos != nullptr) {
      r.pos = batch.pos[i];
    } else {  // llama_batch_get_one: positions follow the sequence's memory
      auto it = next_pos.find(r.seq);
      if (it == next_pos.end()) {
        const int32_t p = pos_max != nullptr && get_memory != nullptr
                              ? pos_max(get_memory(ctx), r.seq) + 1
                              : 0;
        it = next_pos.emplace(r.seq, p).first;
      }
      r.pos = it->second++;
    }
    r.logits = batch.logits != nullptr ? batch.logits[i] != 0 : i + 1 == batch.n_tokens;
  }
  return decode_rows(ctx, std::move(rows), [&] { return real(ctx, batch); });
}

int32_t llama_process(llama_context* ctx, llama_process_type type, llama_batch_ext* batch) {
  REAL(llama_process);
  State& st = S();
  if (!st.enabled || type != LLAMA_PROCESS_TYPE_DECODE) return real(ctx, type, batch);
  std::vector<BatchRow> rows;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.batches.find(batch);
    if (it != st.batches.end()) rows = it->second;
  }
  return decode_rows(ctx, std::move(rows), [&] { return real(ctx, type, batch); });
}

// --- the extended batch's mirror -------------------------------------------------------
llama_batch_ext* llama_batch_ext_init(llama_context* ctx) {
  REAL(llama_batch_ext_init);
  llama_batch_ext* b = real(ctx);
  State& st = S();
  if (b != nullptr && st.enabled) {
    std::lock_guard<std::mutex> lock(st.mu);
    st.batches[b].clear();
  }
  return b;
}

void llama_batch_ext_free(llama_batch_ext* b) {
  REAL(llama_batch_ext_free);
  State& st = S();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.batches.erase(b);
  }
  real(b);
}

void llama_batch_ext_clear(llama_batch_ext* b) {
  REAL(llama_batch_ext_clear);
  real(b);
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  st.batches[b].clear();
}

namespace {
void mirror_add(llama_batch_ext* b, int32_t idx, llama_seq_id seq, int32_t token) {
  State& st = S();
  if (!st.enabled) return;
  std::lock_guard<std::mutex> lock(st.mu);
  auto& rows = st.batches[b];
  if (idx >= 0 && static_cast<size_t>(idx) == rows.size()) {
    BatchRow r;
    r.token = token;
    r.seq = seq;
    rows.push_back(r);
  } else if (idx == -2) {  // the entry was added, its token or embedding refused
    BatchRow r;
    r.seq = seq;
    rows.push_back(r);
  }
}
std::vector<BatchRow>* mirror(llama_batch_ext* b, int32_t idx) {
  State& st = S();
  auto it = st.batches.find(b);
  if (it == st.batches.end() || idx < 0 || static_cast<size_t>(idx) >= it->second.size())
    return nullptr;
  return &it->second;
}
}  // namespace

int32_t llama_batch_ext_add(llama_batch_ext* b, llama_seq_id seq) {
  REAL(llama_batch_ext_add);
  const int32_t idx = real(b, seq);
  mirror_add(b, idx, seq, -1);
  return idx;
}

int32_t llama_batch_ext_add_token(llama_batch_ext* b, llama_seq_id seq, llama_token id) {
  REAL(llama_batch_ext_add_token);
  const int32_t idx = real(b, seq, id);
  mirror_add(b, idx, seq, idx >= 0 ? id : -1);
  return idx;
}

int32_t llama_batch_ext_add_embd(llama_batch_ext* b, llama_seq_id seq, llama_embd embd) {
  REAL(llama_batch_ext_add_embd);
  const int32_t idx = real(b, seq, embd);
  mirror_add(b, idx, seq, -1);
  return idx;
}

bool llama_batch_ext_add_seq(llama_batch_ext* b, int32_t idx, llama_seq_id seq) {
  REAL(llama_batch_ext_add_seq);
  const bool ok = real(b, idx, seq);
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  if (ok)
    if (auto* rows = mirror(b, idx)) (*rows)[idx].n_seq += 1;
  return ok;
}

bool llama_batch_ext_set_pos(llama_batch_ext* b, int32_t idx, const llama_pos* pos) {
  REAL(llama_batch_ext_set_pos);
  const bool ok = real(b, idx, pos);
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  if (ok && pos != nullptr)
    if (auto* rows = mirror(b, idx)) (*rows)[idx].pos = pos[0];
  return ok;
}

bool llama_batch_ext_set_output_logits(llama_batch_ext* b, int32_t idx, bool value) {
  REAL(llama_batch_ext_set_output_logits);
  const bool ok = real(b, idx, value);
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  if (ok)
    if (auto* rows = mirror(b, idx)) (*rows)[idx].logits = value;
  return ok;
}

bool llama_batch_ext_set_output_embd(llama_batch_ext* b, int32_t idx, bool value) {
  REAL(llama_batch_ext_set_output_embd);
  const bool ok = real(b, idx, value);
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  if (ok)
    if (auto* rows = mirror(b, idx)) (*rows)[idx].logits = value;
  return ok;
}

// --- memory ---------------------------------------------------------------------------
#define ON_MEM(mem, body)                                  \
  do {                                                     \
    State& st = S();                                       \
    std::lock_guard<std::mutex> lock(st.mu);               \
    if (st.tape != nullptr && (mem) == st.mem) { body; }   \
  } while (0)

void llama_memory_clear(llama_memory_t mem, bool data) {
  REAL(llama_memory_clear);
  real(mem, data);
  ON_MEM(mem, st.tape->clear());
}

bool llama_memory_seq_rm(llama_memory_t mem, llama_seq_id seq, llama_pos p0, llama_pos p1) {
  REAL(llama_memory_seq_rm);
  const bool ok = real(mem, seq, p0, p1);
  if (ok) ON_MEM(mem, st.tape->seq_rm(seq, p0, p1));
  return ok;
}

void llama_memory_seq_cp(llama_memory_t mem, llama_seq_id src, llama_seq_id dst, llama_pos p0,
                         llama_pos p1) {
  REAL(llama_memory_seq_cp);
  real(mem, src, dst, p0, p1);
  ON_MEM(mem, st.tape->seq_cp(src, dst, p0, p1));
}

void llama_memory_seq_keep(llama_memory_t mem, llama_seq_id seq) {
  REAL(llama_memory_seq_keep);
  real(mem, seq);
  ON_MEM(mem, st.tape->seq_keep(seq));
}

void llama_memory_seq_add(llama_memory_t mem, llama_seq_id seq, llama_pos p0, llama_pos p1,
                          llama_pos delta) {
  REAL(llama_memory_seq_add);
  real(mem, seq, p0, p1, delta);
  if (delta != 0) ON_MEM(mem, st.tape->seq_shift(seq, "llama_memory_seq_add"));
}

void llama_memory_seq_div(llama_memory_t mem, llama_seq_id seq, llama_pos p0, llama_pos p1, int d) {
  REAL(llama_memory_seq_div);
  real(mem, seq, p0, p1, d);
  if (d != 1) ON_MEM(mem, st.tape->seq_shift(seq, "llama_memory_seq_div"));
}

size_t llama_state_seq_get_data_ext(llama_context* ctx, uint8_t* dst, size_t size,
                                    llama_seq_id seq, llama_state_seq_flags flags) {
  REAL(llama_state_seq_get_data_ext);
  const size_t n = real(ctx, dst, size, seq, flags);
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  if (n > 0 && dst != nullptr && st.tape != nullptr && ctx == st.ctx) {
    if (st.saved.size() > 4096) st.saved.clear();
    st.saved[hash_bytes(dst, n)] = st.tape->seq_tokens(seq);
  }
  return n;
}

size_t llama_state_seq_set_data_ext(llama_context* ctx, const uint8_t* src, size_t size,
                                    llama_seq_id seq, llama_state_seq_flags flags) {
  REAL(llama_state_seq_set_data_ext);
  const size_t n = real(ctx, src, size, seq, flags);
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.tape != nullptr && ctx == st.ctx && src != nullptr) {
    auto it = n > 0 ? st.saved.find(hash_bytes(src, size)) : st.saved.end();
    if (it != st.saved.end()) {
      st.tape->set_seq_tokens(seq, it->second);
    } else {
      st.tape->set_seq_tokens(seq, {});
      if (n > 0)
        st.tape->lossy("a sequence state not saved by this process was restored into sequence " +
                       std::to_string(seq) + "; the prompt tokens it holds are unknown");
    }
  }
  return n;
}

// --- the sampled token ------------------------------------------------------------------
float* llama_get_logits_ith(llama_context* ctx, int32_t i) {
  REAL(llama_get_logits_ith);
  float* res = real(ctx, i);
  State& st = S();
  if (st.enabled && ctx == st.ctx) {
    std::lock_guard<std::mutex> lock(st.mu);
    int32_t row = i;
    if (i < 0) {
      const int32_t k = static_cast<int32_t>(st.out_rows.size()) + i;
      row = k >= 0 && k < static_cast<int32_t>(st.out_rows.size()) ? st.out_rows[k] : -1;
    }
    t_logits_row = row;
  }
  return res;
}

void llama_sampler_accept(llama_sampler* smpl, llama_token token) {
  REAL(llama_sampler_accept);
  real(smpl, token);
  if (t_logits_row < 0) return;
  const int32_t row = t_logits_row;
  t_logits_row = -1;
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.tape != nullptr) st.tape->accepted(row, token);
}

}  // extern "C"
