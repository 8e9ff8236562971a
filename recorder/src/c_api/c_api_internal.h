// What the C ABI's translation units share (c_api.cc, c_api_rows.cc): the handle behind
// llmrr_recorder and the checks and conversions every call makes.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "llmrr/format/fingerprint.h"
#include "llmrr/format/status.h"
#include "llmrr/recorder.h"
#include "llmrr/format/site.h"
#include "llmrr/recording/step_recorder.h"

struct llmrr_recorder {
  std::mutex mu;
  std::unique_ptr<llmrr::recording::StepRecorder> rec;
  int32_t vocab = 0;  // from the config; 0 = unchecked
  bool caller_hashes = false;  // config.fingerprint "mixsum64": rows come as fingerprints
  // config.inline_steps: record_rows fingerprints the rows where they are, on the calling
  // thread, instead of copying them for the recorder's thread.
  bool inline_rows = false;
  bool in_step = false;
  bool any_step = false;
  int64_t step = 0;
  int64_t step_rows = 0;
  std::vector<llmrr::trace::Segment> segments;
  std::unordered_set<uint64_t> plan_sites, row_sites;
  std::unordered_set<int32_t> routing_layers;
  std::set<std::pair<uint64_t, int32_t>> logits_rows, token_rows;
  std::unordered_set<uint64_t> requests, finished;
  std::vector<uint64_t> step_finished;  // finished in the open step (discard_step undoes)
  std::vector<float> scratch;
  std::vector<llmrr::trace::Fingerprint> fingerprints;  // record_fingerprints' copy
  llmrr::Status sticky;  // the error that stopped recording
};

namespace llmrr::c_api_internal {

using llmrr::ErrorCode;
using llmrr::Status;

// The message of the last failed call on this thread (llmrr_recorder_last_error).
inline thread_local std::string g_last_error;

inline int code_of(const Status& st) {
  return static_cast<int>(st.code());
}

inline int fail_call(ErrorCode code, const std::string& message) {
  g_last_error = Status(code, message).to_string();
  return static_cast<int>(code);
}

// A bad call: nothing recorded for it; the trace says records were dropped.
inline int bad_call(llmrr_recorder* r, const char* fn, const std::string& what) {
  std::string message = std::string(fn) + ": " + what;
  if (r && r->rec) r->rec->mark_lossy("a record was dropped: " + message);
  return fail_call(ErrorCode::kInvalidArgument, message);
}

// After a forwarded callback: did recording stop?
inline int after(llmrr_recorder* r) {
  if (!r->rec->status().ok()) {
    r->sticky = r->rec->status();
    g_last_error = r->sticky.to_string();
    return code_of(r->sticky);
  }
  return LLMRR_OK;
}

inline int stopped(llmrr_recorder* r) {
  if (r->sticky.ok() && !r->rec->status().ok()) r->sticky = r->rec->status();
  if (r->sticky.ok()) return LLMRR_OK;
  g_last_error = r->sticky.to_string();
  return code_of(r->sticky);
}

// Runs `body` with the handle locked, turning anything thrown into an error code. The
// recorder inside catches its own failures; this guard covers the conversions here.
template <typename F>
inline int guarded(llmrr_recorder* r, const char* fn, F&& body) {
  if (r == nullptr)
    return fail_call(ErrorCode::kInvalidArgument, std::string(fn) + ": null recorder");
  try {
    std::lock_guard<std::mutex> lock(r->mu);
    if (!r->rec)
      return fail_call(ErrorCode::kInvalidArgument, std::string(fn) + ": closed recorder");
    if (int s = stopped(r); s != LLMRR_OK) return s;
    return body();
  } catch (const std::bad_alloc&) {
    return fail_call(ErrorCode::kResourceLimit, std::string(fn) + ": out of memory");
  } catch (const std::exception& e) {
    return fail_call(ErrorCode::kInternal, std::string(fn) + ": " + e.what());
  } catch (...) {
    return fail_call(ErrorCode::kInternal, std::string(fn) + ": unknown exception");
  }
}

inline std::string str(const char* s) {
  return s ? std::string(s) : std::string();
}

inline bool parse_site_name(const char* name, llmrr::SiteId* out) {
  if (name == nullptr) return false;
  std::optional<llmrr::SiteId> site = llmrr::parse_site(name);
  if (!site) return false;
  *out = *site;
  return true;
}

inline std::string unknown_site(const char* name) {
  return "unknown site '" + str(name) +
         "' (llmrr site names: embed, L<i>.attn.q, L<i>.mlp.down, L<i>.moe.e<j>.up, L<i>.out, "
         "final_norm, logits, ...; see format/include/llmrr/format/site.h)";
}

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Exact IEEE half → single (subnormals, infinities and NaN payloads kept).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {
    // Subnormal: normalize.
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Widens rows × cols elements (row stride ld) of `dtype` into out (dense, ld = cols).
inline void widen(const void* data, int32_t dtype, int64_t rows, int64_t cols, int64_t ld,
           std::vector<float>* out) {
  out->resize(static_cast<size_t>(rows * cols));
  const uint16_t* p = static_cast<const uint16_t*>(data);
  float* o = out->data();
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = p + r * ld;
    float* dst = o + r * cols;
    if (dtype == LLMRR_DTYPE_BF16) {
      for (int64_t c = 0; c < cols; ++c) dst[c] = bf16_to_f32(row[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) dst[c] = f16_to_f32(row[c]);
    }
  }
}

inline bool dtype_ok(int32_t dtype) {
  return dtype == LLMRR_DTYPE_F32 || dtype == LLMRR_DTYPE_BF16 || dtype == LLMRR_DTYPE_F16;
}

inline const llmrr::trace::Segment* segment_of(const llmrr_recorder* r, uint64_t request, int32_t position,
                                      int64_t* batch_row) {
  int64_t row = 0;
  for (const llmrr::trace::Segment& g : r->segments) {
    if (g.request == request && position >= g.start && position < g.start + g.count) {
      if (batch_row) *batch_row = row + (position - g.start);
      return &g;
    }
    row += g.count;
  }
  return nullptr;
}

}  // namespace llmrr::c_api_internal
