// libllmrr_cupti.so: records the kernel sequence of a CUDA program we do not own. The CUDA
// driver loads it when CUDA_INJECTION64_PATH names it and calls InitializeInjection() from
// cuInit. `llmrr record-cuda` sets that up; by hand:
//
//   CUDA_INJECTION64_PATH=/path/to/libllmrr_cupti.so LLMRR_CUPTI_OUTPUT=run.trace ./app
//
// What it enables is deliberately little (CUPTI injection has been seen to cost a serving
// engine most of its throughput): CONCURRENT_KERNEL and MEMCPY activity, plus callbacks on
// cudaDeviceSynchronize / cudaStreamSynchronize (step boundaries). With a step range
// (LLMRR_CUPTI_STEP_RANGE) the NVTX domain instead of the synchronisations. Everything that
// costs per record (parsing, demangling, writing) happens on CUPTI's buffer-completed thread;
// the application only ever takes a buffer from a fixed pool or, when the pool is empty, gets
// none and CUPTI drops records, which the footer counts.
//
// Environment (llmrr record-cuda sets the first three; the rest are knobs):
//   LLMRR_CUPTI_OUTPUT       trace path (default cuda.<pid>.trace)
//   LLMRR_CUPTI_STEP_RANGE   NVTX range name that delimits steps (default: synchronisations)
//   LLMRR_CUPTI_PID          process that writes LLMRR_CUPTI_OUTPUT; others (forked workers
//                            that also use CUDA) write <output without .trace>.<pid>.trace
//   LLMRR_CUPTI_COMMAND      command line for the run header
//   LLMRR_CUPTI_MEMCPY=0     no memcpy records
//   LLMRR_CUPTI_NVTX_ALL=1   also record every NVTX range (MARKER activity; costs more)
//   LLMRR_CUPTI_BUFFERS      activity buffers in the pool (default 8)
//   LLMRR_CUPTI_BUFFER_MB    size of each (default 4)
//   LLMRR_CUPTI_QUIET=1      no summary line on stderr at exit
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <generated_nvtx_meta.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>
#include <vector>

#include "llmrr/cupti/activity.h"
#include "llmrr/format/trace_writer.h"

namespace {

using namespace llmrr;
using llmrr::cupti::ActivityParser;
using llmrr::cupti::ActivitySink;
using llmrr::cupti::BufferPool;
using llmrr::cupti::StepSplitter;

struct State {
  std::string path;
  std::string step_range;  // empty: steps at synchronisations
  bool nvtx_all = false;
  bool memcpy = true;
  bool quiet = false;
  std::unique_ptr<trace::TraceWriter> writer;
  std::unique_ptr<StepSplitter> splitter;
  std::unique_ptr<BufferPool> pool;
  std::unique_ptr<ActivitySink> sink;
  CUpti_SubscriberHandle subscriber = nullptr;
  // Buffer-completed side (CUPTI's thread, or the thread that calls cuptiActivityFlushAll).
  std::mutex buffer_mu;
  ActivityParser parser;
  bool header_written = false;
  std::string command_line;
  // Range mode: NVTX start/end ids of our ranges, and the range open on each thread.
  std::mutex ranges_mu;
  std::unordered_set<uint64_t> start_end_ids;
  int range_depth = 0;  // outermost start/end ranges of our name open (any thread)
  struct Open {
    int64_t step = -1;
    uint64_t correlation = 0;
    uint64_t start_ns = 0;
  } open_range;
};

State* g = nullptr;
std::atomic<bool> g_finished{false};

// The probe: a driver call whose callback hands back the correlation id CUPTI gives it,
// i.e. the current position of the correlation counter (see StepSplitter).
thread_local bool t_probing = false;
thread_local uint64_t t_probe_correlation = 0;
thread_local std::vector<bool> t_push_stack;  // push/pop: which open pushes are our range

void warn(const std::string& what) {
  std::fprintf(stderr, "llmrr-cupti: warning: %s\n", what.c_str());
}

bool check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* s = "?";
  cuptiGetResultString(r, &s);
  warn(std::string(what) + ": " + s);
  return false;
}

std::string env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

long env_long(const char* name, long fallback, long lo, long hi) {
  const std::string v = env(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || x < lo || x > hi) {
    warn(std::string(name) + "=" + v + ": expected an integer in [" + std::to_string(lo) + ", " +
         std::to_string(hi) + "], using " + std::to_string(fallback));
    return fallback;
  }
  return x;
}

uint64_t probe_correlation() {
  t_probing = true;
  t_probe_correlation = 0;
  int version = 0;
  cuDriverGetVersion(&version);
  t_probing = false;
  return t_probe_correlation;
}

uint64_t now_ns() {
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  return t;
}

// --- run header (written lazily, before the first frame: the driver is usable by then) ----

std::string read_cmdline() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (char& c : s)
    if (c == '\0') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

trace::RunHeader make_header() {
  trace::RunHeader h;
  h.tool_version = LLMRR_VERSION;
  h.created_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  char buf[256] = {0};
  std::snprintf(buf, sizeof buf, "cupti-%d-%llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(h.created_unix_ns));
  h.run_id = buf;
  if (gethostname(buf, sizeof buf - 1) == 0) h.host.hostname = buf;
  struct utsname u;
  if (uname(&u) == 0) h.host.os = std::string(u.sysname) + " " + u.release + " " + u.machine;
  h.host.cores = static_cast<int32_t>(sysconf(_SC_NPROCESSORS_ONLN));
  h.device.kind = "cuda";
  CUdevice dev;
  if (cuDeviceGet(&dev, 0) == CUDA_SUCCESS) {
    if (cuDeviceGetName(buf, sizeof buf - 1, dev) == CUDA_SUCCESS) h.device.name = buf;
    int major = 0, minor = 0, sms = 0, driver = 0;
    cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    h.device.compute_capability = std::to_string(major) + "." + std::to_string(minor);
    h.device.sm_count = sms;
    if (cuDriverGetVersion(&driver) == CUDA_SUCCESS)
      h.device.driver = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
    size_t mem = 0;
    if (cuDeviceTotalMem(&mem, dev) == CUDA_SUCCESS)
      h.device.memory_bytes = static_cast<int64_t>(mem);
  }
  // No model and no engine: this trace holds GPU activity only (kernel-record frames).
  const cupti::LayoutInfo li = cupti::layout_info();
  nlohmann::json x{
      {"source", "llmrr record-cuda (CUPTI activity)"},
      {"cupti_api_version", li.cupti_api_version},
      {"steps", g->step_range.empty() ? "synchronisations" : "nvtx range " + g->step_range},
      {"activity", g->memcpy ? nlohmann::json{"concurrent_kernel", "memcpy"}
                             : nlohmann::json{"concurrent_kernel"}},
      {"nvtx_all", g->nvtx_all},
      {"buffers", g->pool->capacity()},
      {"buffer_bytes", g->pool->buffer_bytes()}};
  h.extra_config_json = x.dump();
  h.command_line = g->command_line;
  return h;
}

// Under buffer_mu.
void ensure_header() {
  if (g->header_written) return;
  g->header_written = true;
  Status st = g->writer->append_run_header(make_header());
  if (!st.ok()) warn("writing the run header: " + st.to_string());
}

// --- activity buffers -----------------------------------------------------------------------

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  uint8_t* b = g && !g_finished.load(std::memory_order_relaxed) ? g->pool->acquire() : nullptr;
  *buffer = b;
  *size = b ? g->pool->buffer_bytes() : 0;
  *max_records = 0;
}

const void* cupti_walk(const uint8_t* buffer, size_t valid, const void* prev, void*) {
  CUpti_Activity* rec = static_cast<CUpti_Activity*>(const_cast<void*>(prev));
  if (cuptiActivityGetNextRecord(const_cast<uint8_t*>(buffer), valid, &rec) != CUPTI_SUCCESS)
    return nullptr;
  return rec;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                               size_t valid) {
  if (g == nullptr) return;
  {
    std::lock_guard<std::mutex> lk(g->buffer_mu);
    if (valid > 0) {
      ensure_header();
      std::vector<trace::KernelRecord> recs;
      cupti::ParseStats st = g->parser.parse_buffer(buffer, valid, &recs, cupti_walk, nullptr);
      g->sink->consume(&recs, st);
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
      g->sink->add_dropped(static_cast<int64_t>(dropped));
  }
  g->pool->release(buffer);
}

// --- callbacks: step boundaries -------------------------------------------------------------

const char* nvtx_message(const nvtxEventAttributes_t* a) {
  if (a == nullptr || a->messageType != NVTX_MESSAGE_TYPE_ASCII) return nullptr;
  return a->message.ascii;
}

void begin_range() {
  const uint64_t corr = probe_correlation();
  State::Open o;
  o.correlation = corr;
  o.start_ns = now_ns();
  o.step = g->splitter->range_begin(corr);
  std::lock_guard<std::mutex> lk(g->ranges_mu);
  g->open_range = o;
}

void end_range() {
  const uint64_t corr = probe_correlation();
  g->splitter->range_end(corr);
  State::Open o;
  {
    std::lock_guard<std::mutex> lk(g->ranges_mu);
    o = g->open_range;
  }
  trace::KernelRecord r;
  r.kind = trace::ActivityKind::kRange;
  r.name = g->step_range;
  r.step = o.step;
  r.correlation = o.correlation;
  r.start_ns = static_cast<int64_t>(o.start_ns & 0x7fffffffffffffffull);
  r.end_ns = std::max(r.start_ns, static_cast<int64_t>(now_ns() & 0x7fffffffffffffffull));
  g->sink->add_range(std::move(r));
}

// An outermost range of our name opens or closes (nested ones of the same name do not
// start a new step). Returns whether the depth crossed zero.
void range_depth(int delta) {
  bool begin = false, end = false;
  {
    std::lock_guard<std::mutex> lk(g->ranges_mu);
    if (delta > 0) begin = g->range_depth++ == 0;
    if (delta < 0 && g->range_depth > 0) end = --g->range_depth == 0;
  }
  if (begin) begin_range();
  if (end) end_range();
}

void on_nvtx(CUpti_CallbackId cbid, const CUpti_NvtxData* d) {
  const char* msg = nullptr;
  switch (cbid) {
    case CUPTI_CBID_NVTX_nvtxRangePushA:
      msg = static_cast<const nvtxRangePushA_params*>(d->functionParams)->message;
      break;
    case CUPTI_CBID_NVTX_nvtxRangePushEx:
      msg =
          nvtx_message(static_cast<const nvtxRangePushEx_params*>(d->functionParams)->eventAttrib);
      break;
    case CUPTI_CBID_NVTX_nvtxDomainRangePushEx:
      msg = nvtx_message(
          static_cast<const nvtxDomainRangePushEx_params*>(d->functionParams)->core.eventAttrib);
      break;
    case CUPTI_CBID_NVTX_nvtxRangeStartA:
      msg = static_cast<const nvtxRangeStartA_params*>(d->functionParams)->message;
      break;
    case CUPTI_CBID_NVTX_nvtxRangeStartEx:
      msg =
          nvtx_message(static_cast<const nvtxRangeStartEx_params*>(d->functionParams)->eventAttrib);
      break;
    case CUPTI_CBID_NVTX_nvtxDomainRangeStartEx:
      msg = nvtx_message(
          static_cast<const nvtxDomainRangeStartEx_params*>(d->functionParams)->core.eventAttrib);
      break;
    default:
      break;
  }
  const bool ours = msg != nullptr && g->step_range == msg;
  switch (cbid) {
    case CUPTI_CBID_NVTX_nvtxRangePushA:
    case CUPTI_CBID_NVTX_nvtxRangePushEx:
    case CUPTI_CBID_NVTX_nvtxDomainRangePushEx:
      t_push_stack.push_back(ours);
      if (ours) range_depth(+1);
      break;
    case CUPTI_CBID_NVTX_nvtxRangePop:
    case CUPTI_CBID_NVTX_nvtxDomainRangePop:
      if (!t_push_stack.empty()) {
        const bool was = t_push_stack.back();
        t_push_stack.pop_back();
        if (was) range_depth(-1);
      }
      break;
    case CUPTI_CBID_NVTX_nvtxRangeStartA:
    case CUPTI_CBID_NVTX_nvtxRangeStartEx:
    case CUPTI_CBID_NVTX_nvtxDomainRangeStartEx:
      if (ours && d->functionReturnValue != nullptr) {
        const auto id = *static_cast<const nvtxRangeId_t*>(d->functionReturnValue);
        {
          std::lock_guard<std::mutex> lk(g->ranges_mu);
          g->start_end_ids.insert(id);
        }
        range_depth(+1);
      }
      break;
    case CUPTI_CBID_NVTX_nvtxRangeEnd:
    case CUPTI_CBID_NVTX_nvtxDomainRangeEnd: {
      const nvtxRangeId_t id =
          cbid == CUPTI_CBID_NVTX_nvtxRangeEnd
              ? static_cast<const nvtxRangeEnd_params*>(d->functionParams)->id
              : static_cast<const nvtxDomainRangeEnd_params*>(d->functionParams)->core.id;
      bool was = false;
      {
        std::lock_guard<std::mutex> lk(g->ranges_mu);
        was = g->start_end_ids.erase(id) > 0;
      }
      if (was) range_depth(-1);
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void* data) {
  if (g == nullptr || g_finished.load(std::memory_order_relaxed)) return;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    const auto* d = static_cast<const CUpti_CallbackData*>(data);
    if (t_probing && d->callbackSite == CUPTI_API_ENTER) t_probe_correlation = d->correlationId;
  } else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    const auto* d = static_cast<const CUpti_CallbackData*>(data);
    // At entry: every launch before the synchronisation has a smaller correlation id.
    if (d->callbackSite == CUPTI_API_ENTER) g->splitter->sync(d->correlationId);
  } else if (domain == CUPTI_CB_DOMAIN_NVTX) {
    on_nvtx(cbid, static_cast<const CUpti_NvtxData*>(data));
  }
}

// --- start and end ----------------------------------------------------------------------------

void finish() {
  if (g == nullptr || g_finished.exchange(true)) return;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (g->subscriber) cuptiUnsubscribe(g->subscriber);
  Status st = Status::Ok();
  cupti::SinkCounts c;
  {
    std::lock_guard<std::mutex> lk(g->buffer_mu);
    ensure_header();
    g->sink->add_refused_buffers(g->pool->refused());
    st = g->sink->finish();
    c = g->sink->counts();
  }
  Status closed = g->writer->close();
  if (!st.ok()) warn("writing " + g->path + ": " + st.to_string());
  if (!closed.ok()) warn("closing " + g->path + ": " + closed.to_string());
  if (!g->quiet)
    std::fprintf(stderr,
                 "llmrr-cupti: %lld kernels, %lld memcpys, %lld ranges, steps 0..%lld, %lld "
                 "dropped -> %s\n",
                 static_cast<long long>(c.kernels), static_cast<long long>(c.memcpys),
                 static_cast<long long>(c.ranges), static_cast<long long>(c.last_step),
                 static_cast<long long>(c.dropped), g->path.c_str());
}

std::string output_path() {
  std::string path = env("LLMRR_CUPTI_OUTPUT");
  const std::string pid = std::to_string(getpid());
  if (path.empty()) return "cuda." + pid + ".trace";
  const std::string owner = env("LLMRR_CUPTI_PID");
  if (!owner.empty() && owner != pid) {
    // Another process of the recorded program (a forked worker): its own file.
    const std::string ext = ".trace";
    if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
      path.resize(path.size() - ext.size());
    path += "." + pid + ".trace";
  }
  return path;
}

bool start() {
  g = new State();  // lives until exit: CUPTI may call back during teardown
  g->path = output_path();
  g->step_range = env("LLMRR_CUPTI_STEP_RANGE");
  g->nvtx_all = env("LLMRR_CUPTI_NVTX_ALL") == "1";
  g->memcpy = env("LLMRR_CUPTI_MEMCPY") != "0";
  g->quiet = env("LLMRR_CUPTI_QUIET") == "1";
  g->command_line = env("LLMRR_CUPTI_COMMAND");
  if (g->command_line.empty()) g->command_line = read_cmdline();
  const size_t buffers = static_cast<size_t>(env_long("LLMRR_CUPTI_BUFFERS", 8, 2, 1024));
  const size_t mb = static_cast<size_t>(env_long("LLMRR_CUPTI_BUFFER_MB", 4, 1, 256));
  auto w = trace::TraceWriter::open(g->path);
  if (!w.ok()) {
    warn("not recording: " + w.status().to_string());
    return false;
  }
  g->writer = std::move(*w);
  g->splitter = std::make_unique<StepSplitter>(g->step_range.empty() ? StepSplitter::Mode::kSync
                                                                     : StepSplitter::Mode::kRange);
  g->pool = std::make_unique<BufferPool>(buffers, mb << 20);
  g->sink = std::make_unique<ActivitySink>(g->writer.get(), g->splitter.get());

  if (!check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
             "cuptiActivityRegisterCallbacks"))
    return false;
  bool ok =
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel activity");
  if (g->memcpy) ok &= check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enabling memcpy");
  if (g->nvtx_all) ok &= check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MARKER), "enabling NVTX");
  if (!g->step_range.empty() || g->nvtx_all) {
    // NVTX reaches CUPTI only through NVTX's own injection hook; llmrr record-cuda sets it,
    // this covers a hand-made CUDA_INJECTION64_PATH (effective if NVTX is not yet in use).
    Dl_info info;
    if (std::getenv("NVTX_INJECTION64_PATH") == nullptr &&
        dladdr(reinterpret_cast<void*>(&cuptiSubscribe), &info) != 0 && info.dli_fname)
      setenv("NVTX_INJECTION64_PATH", info.dli_fname, 0);
  }
  if (!check(cuptiSubscribe(&g->subscriber, on_callback, nullptr), "cuptiSubscribe")) return ok;
  if (g->step_range.empty()) {
    check(cuptiEnableCallback(1, g->subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                              CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020),
          "callback on cudaDeviceSynchronize");
    check(cuptiEnableCallback(1, g->subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                              CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020),
          "callback on cudaStreamSynchronize");
  } else {
    check(cuptiEnableDomain(1, g->subscriber, CUPTI_CB_DOMAIN_NVTX), "NVTX callbacks");
    check(cuptiEnableCallback(1, g->subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                              CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion),
          "callback on cuDriverGetVersion");
  }
  return ok;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] {
    ok = start();
    if (g != nullptr && g->writer) std::atexit(finish);
  });
  return ok ? 1 : 0;
}
