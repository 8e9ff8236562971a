// The C ABI's row calls (llmrr/recorder.h): rows the library fingerprints
// (llmrr_recorder_record_rows) and rows whose fingerprints the caller made on its device
// (llmrr_recorder_record_fingerprints).
#include <cstdio>
#include <cstring>
#include <new>
#include <limits>
#include <string>
#include <vector>

#include "c_api_internal.h"
#include "llmrr/format/fingerprint.h"
#include "llmrr/recorder.h"

using namespace llmrr::c_api_internal;

namespace {

// What record_rows and record_fingerprints both check: an open step, a known site not yet
// recorded in it, sizes, and batch rows each once inside the step's batch.
int check_rows(llmrr_recorder* r, const char* fn, const char* site_name, int64_t rows,
               int64_t cols, const int32_t* batch_rows, llmrr::SiteId* site) {
  if (!r->in_step) return bad_call(r, fn, "no open step (call llmrr_recorder_begin_step)");
  if (!parse_site_name(site_name, site)) return bad_call(r, fn, unknown_site(site_name));
  const std::string where = std::string("site ") + site_name;
  if (r->row_sites.count(site->packed())) {
    return bad_call(r, fn, where + ": rows already recorded in step " + std::to_string(r->step));
  }
  if (rows < 1 || cols < 1 || cols > std::numeric_limits<int32_t>::max()) {
    return bad_call(r, fn,
                    where + ": needs rows >= 1 and cols in [1, 2^31) (rows " +
                        std::to_string(rows) + ", cols " + std::to_string(cols) + ")");
  }
  if (batch_rows == nullptr && rows > r->step_rows) {
    return bad_call(r, fn,
                    where + ": " + std::to_string(rows) + " rows in a batch of " +
                        std::to_string(r->step_rows));
  }
  if (batch_rows != nullptr) {
    std::vector<bool> seen(static_cast<size_t>(r->step_rows), false);
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t b = batch_rows[i];
      if (b < 0 || b >= r->step_rows || seen[static_cast<size_t>(b)]) {
        return bad_call(r, fn,
                        where + ": batch_rows[" + std::to_string(i) + "] is " +
                            std::to_string(b) + " (each once, in [0, " +
                            std::to_string(r->step_rows) + "))");
      }
      seen[static_cast<size_t>(b)] = true;
    }
  }
  return LLMRR_OK;
}

}  // namespace

extern "C" {

int llmrr_recorder_record_rows(llmrr_recorder* r, const char* site_name, const void* data,
                               int32_t dtype, int64_t rows, int64_t cols, int64_t ld,
                               const int32_t* batch_rows) {
  static const char* fn = "llmrr_recorder_record_rows";
  return guarded(r, fn, [&]() -> int {
    llmrr::SiteId site;
    if (int rc = check_rows(r, fn, site_name, rows, cols, batch_rows, &site); rc != LLMRR_OK)
      return rc;
    const std::string where = std::string("site ") + site_name;
    if (!dtype_ok(dtype))
      return bad_call(r, fn, where + ": unknown dtype " + std::to_string(dtype));
    if (ld == 0) ld = cols;
    if (ld < cols) {
      return bad_call(r, fn,
                      where + ": ld must be 0 or >= cols (cols " + std::to_string(cols) +
                          ", ld " + std::to_string(ld) + ")");
    }
    if (data == nullptr) return bad_call(r, fn, where + ": data is null");
    r->row_sites.insert(site.packed());
    if (!r->rec->wants_rows(site)) return LLMRR_OK;  // not at this capture level
    llmrr::recording::RowsView v;
    v.step = r->step;
    v.site = site;
    v.rows = rows;
    v.cols = cols;
    v.batch_rows = batch_rows;
    if (dtype == LLMRR_DTYPE_F32) {
      v.data = static_cast<const float*>(data);
      v.ld = ld;
    } else {
      widen(data, dtype, rows, cols, ld, &r->scratch);
      v.data = r->scratch.data();
      v.ld = cols;
    }
    if (r->inline_rows) {
      // Fingerprint the rows where they are (no copy: at a prefill step of capture "all"
      // the copies are hundreds of MB of fresh pages); the step's completion then has only
      // the fingerprints to store.
      std::vector<llmrr::trace::Fingerprint>& fp = r->fingerprints;
      fp.resize(static_cast<size_t>(rows));
      for (int64_t i = 0; i < rows; ++i) {
        const float* row = v.data + i * v.ld;
        fp[static_cast<size_t>(i)] = r->caller_hashes
                                         ? llmrr::trace::fingerprint_row_mixsum64(row, cols)
                                         : llmrr::trace::fingerprint_row(row, cols);
      }
      v.data = nullptr;
      v.fingerprints = fp.data();
    }
    r->rec->rows(v);
    return after(r);
  });
}

int llmrr_recorder_record_fingerprints(llmrr_recorder* r, const char* site_name,
                                       const uint64_t* hashes, const float* l2,
                                       const float* max_abs, int64_t rows, int64_t cols,
                                       const int32_t* batch_rows) {
  static const char* fn = "llmrr_recorder_record_fingerprints";
  return guarded(r, fn, [&]() -> int {
    llmrr::SiteId site;
    if (int rc = check_rows(r, fn, site_name, rows, cols, batch_rows, &site); rc != LLMRR_OK)
      return rc;
    const std::string where = std::string("site ") + site_name;
    if (!r->caller_hashes) {
      return bad_call(r, fn, where + ": this trace's row hashes are xxh3-64, made by the "
                                     "library: give the rows to llmrr_recorder_record_rows, or "
                                     "open with config.fingerprint = \"mixsum64\"");
    }
    if (hashes == nullptr) return bad_call(r, fn, where + ": hashes is null");
    r->row_sites.insert(site.packed());
    if (!r->rec->wants_rows(site)) return LLMRR_OK;  // not at this capture level
    std::vector<llmrr::trace::Fingerprint>& fp = r->fingerprints;
    fp.resize(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      fp[static_cast<size_t>(i)].hash = hashes[i];
      fp[static_cast<size_t>(i)].l2 = l2 ? l2[i] : 0.0f;
      fp[static_cast<size_t>(i)].max_abs = max_abs ? max_abs[i] : 0.0f;
    }
    llmrr::recording::RowsView v;
    v.step = r->step;
    v.site = site;
    v.rows = rows;
    v.cols = cols;
    v.batch_rows = batch_rows;
    v.fingerprints = fp.data();
    r->rec->rows(v);
    return after(r);
  });
}

int llmrr_fingerprint_files(const char* const* paths, size_t n, char* out, size_t out_size) {
  static const char* fn = "llmrr_fingerprint_files";
  try {
    if (out == nullptr || out_size < 25 || (paths == nullptr && n > 0))
      return fail_call(ErrorCode::kInvalidArgument,
                       std::string(fn) + ": expected paths and an out buffer of >= 25 bytes");
    std::vector<std::string> files;
    for (size_t i = 0; i < n; ++i) {
      if (paths[i] == nullptr)
        return fail_call(ErrorCode::kInvalidArgument,
                         std::string(fn) + ": path " + std::to_string(i) + " is null");
      files.emplace_back(paths[i]);
    }
    llmrr::Result<std::string> h = llmrr::trace::hash_files(files);
    if (!h.ok()) return fail_call(h.status().code(), std::string(fn) + ": " + h.status().message());
    std::snprintf(out, out_size, "%s", h->c_str());
    return LLMRR_OK;
  } catch (const std::bad_alloc&) {
    return fail_call(ErrorCode::kResourceLimit, std::string(fn) + ": out of memory");
  }
}

uint64_t llmrr_fingerprint_mixsum64(const float* row, int64_t n) {
  if (row == nullptr || n < 0) return 0;
  return llmrr::trace::mixsum64(row, n);
}

}  // extern "C"
