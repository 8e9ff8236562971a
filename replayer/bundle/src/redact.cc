// redact_trace: a trace reduced to the requests a user may share (pack.h says what stays).
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "llmrr/format/splice.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "llmrr/replayer/pack.h"
#include "llmrr/safeio/json.h"

namespace llmrr::replay {
namespace {

// The header without what may carry user data outside the kept requests: the command line
// (prompts are often given there), the paths of a requests file and a reference trace.
// extra_config_json is parsed under safeio's caps: a header that is not a JSON object within
// them is refused (it would otherwise be dumped back recursively, or pass through unredacted).
Status redact_header(trace::RunHeader* h, const std::string& path,
                     const std::vector<RequestId>& keep, RedactReport* rep) {
  rep->command_line_removed = !h->command_line.empty();
  h->command_line.clear();
  ASSIGN_OR_RETURN(nlohmann::json x,
                   safeio::parse_json_object(h->extra_config_json,
                                             path + ": run header extra_config_json",
                                             ErrorCode::kSemantic));
  if (x.contains("recorder") && x["recorder"].is_object()) {
    x["recorder"].erase("requests_file");
    x["recorder"].erase("reference");
  }
  x["redaction"] = {{"kept", keep}};
  h->extra_config_json = safeio::dump(x);
  return Status::Ok();
}

class StepRedactor {
 public:
  StepRedactor(const std::set<RequestId>& keep, RedactReport* rep) : keep_(keep), rep_(rep) {}

  // Old blob id → new blob id (kept blobs only).
  std::unordered_map<int64_t, int64_t> blob_ids;

  void redact(trace::StepRecord& s) {
    for (trace::RequestRecord& a : s.arrivals) {
      if (keep_.count(a.id)) continue;
      rep_->prompt_tokens_removed += static_cast<int64_t>(a.prompt.size());
      std::fill(a.prompt.begin(), a.prompt.end(), -1);
      if (!a.label.empty()) ++rep_->labels_removed;
      a.label.clear();
    }
    // Which batch rows are kept. Without segments the trace does not say whose a row is:
    // then no row is kept.
    kept_row_.clear();
    for (const trace::Segment& g : s.segments) {
      kept_row_.insert(kept_row_.end(), static_cast<size_t>(std::max(g.count, 0)),
                       keep_.count(g.request) != 0);
    }
    auto kept = [&](int64_t row) {
      return row >= 0 && row < static_cast<int64_t>(kept_row_.size()) && kept_row_[row];
    };
    for (trace::SiteRows& sr : s.rows) {
      std::vector<int32_t> rows;
      std::vector<trace::Fingerprint> fps;
      for (size_t r = 0; r < sr.rows.size(); ++r) {
        const int32_t row = sr.batch_rows.empty() ? static_cast<int32_t>(r) : sr.batch_rows[r];
        if (kept(row)) {
          rows.push_back(row);
          fps.push_back(sr.rows[r]);
        } else {
          ++rep_->row_fingerprints_removed;
        }
      }
      sr.batch_rows = std::move(rows);
      sr.rows = std::move(fps);
    }
    // A site with no row left says nothing; the writer would store an empty entry.
    s.rows.erase(std::remove_if(s.rows.begin(), s.rows.end(),
                                [](const trace::SiteRows& sr) { return sr.rows.empty(); }),
                 s.rows.end());
    for (trace::Routing& r : s.routing) {
      for (int32_t row = 0; row < r.rows; ++row) {
        if (kept(row)) continue;
        ++rep_->routing_rows_blanked;
        for (int32_t i = 0; i < r.k; ++i) {
          const size_t at = static_cast<size_t>(row) * r.k + i;
          r.chosen[at] = r.experts_total > 0 ? i % r.experts_total : 0;
          r.experts[at] = -1;
          r.gates[at] = 0.0f;
          r.outcome[at] = trace::RouteOutcome::kDropped;
        }
      }
    }
    std::vector<trace::LogitsRecord> logits;
    for (trace::LogitsRecord& l : s.logits) {
      if (!keep_.count(l.request)) {
        ++rep_->logits_removed;
        continue;
      }
      if (l.blob >= 0) {
        auto it = blob_ids.find(l.blob);
        l.blob = it == blob_ids.end() ? -1 : it->second;
      }
      logits.push_back(std::move(l));
    }
    s.logits = std::move(logits);
    const size_t tokens = s.tokens.size();
    s.tokens.erase(
        std::remove_if(s.tokens.begin(), s.tokens.end(),
                       [&](const trace::TokenRecord& t) { return !keep_.count(t.request); }),
        s.tokens.end());
    rep_->tokens_removed += static_cast<int64_t>(tokens - s.tokens.size());
  }

 private:
  const std::set<RequestId>& keep_;
  RedactReport* rep_;
  std::vector<bool> kept_row_;
};

}  // namespace

Result<RedactReport> redact_trace(const std::string& in, const std::string& out,
                                  const std::vector<RequestId>& keep) {
  ASSIGN_OR_RETURN(std::unique_ptr<trace::TraceReader> reader, trace::TraceReader::open(in));
  RedactReport rep;
  std::set<RequestId> kept(keep.begin(), keep.end());
  if (kept.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "redaction needs at least one request to keep (--keep R)");
  }
  for (RequestId id : kept) {
    bool known = false;
    for (const trace::RequestSummary& r : reader->requests()) known |= r.id == id;
    if (!known) {
      std::string ids;
      for (size_t i = 0; i < reader->requests().size() && i < 16; ++i) {
        ids += (i ? ", " : "") + std::to_string(reader->requests()[i].id);
      }
      return make_error(ErrorCode::kInvalidArgument, "--keep " + std::to_string(id) + ": " + in +
                                                         " has no such request (requests: " + ids +
                                                         ")");
    }
  }
  rep.kept.assign(kept.begin(), kept.end());
  for (const trace::RequestSummary& r : reader->requests()) {
    if (!kept.count(r.id)) rep.redacted.push_back(r.id);
  }

  trace::RunHeader header = reader->run_header();
  RETURN_IF_ERROR(redact_header(&header, in, rep.kept, &rep));
  ASSIGN_OR_RETURN(std::unique_ptr<trace::TraceWriter> writer, trace::TraceWriter::open(out));
  RETURN_IF_ERROR(writer->append_run_header(header));

  // Frames in file order, so that every blob is appended before the step whose logits name
  // it, and kernel records keep their place.
  StepRedactor redactor(kept, &rep);
  trace::StepRecord step;
  std::vector<uint8_t> bytes;
  std::vector<trace::KernelRecord> kernels;
  const std::vector<trace::FrameInfo>& frames = reader->frames();
  for (size_t f = 0; f < frames.size(); ++f) {
    const trace::FrameInfo& fi = frames[f];
    if (fi.kind == trace::FrameKind::kStepChunk) {
      trace::StepCursor cur = reader->steps(fi.first, fi.last);
      for (;;) {
        ASSIGN_OR_RETURN(bool got, cur.next(&step));
        if (!got) break;
        redactor.redact(step);
        RETURN_IF_ERROR(writer->append_step(step).with_context("redacting " + in + ", step " +
                                                               std::to_string(step.step) + ": "));
      }
    } else if (fi.kind == trace::FrameKind::kTensorBlob) {
      ASSIGN_OR_RETURN(trace::BlobInfo info, reader->blob_info(fi.first));
      if (!kept.count(info.request)) {
        ++rep.blobs_removed;
        continue;
      }
      Result<int64_t> copied = trace::copy_blob(*reader, info.id, writer.get());
      if (!copied.ok()) {
        return copied.status().code() == ErrorCode::kUnsupported
                   ? make_error(ErrorCode::kUnsupported,
                                in + ": blob " + std::to_string(info.id) +
                                    " of a kept request is stored XOR-coded against trace " +
                                    info.reference_trace +
                                    ", which redaction cannot decode; record without --reference")
                   : copied.status();
      }
      const int64_t id = *copied;
      redactor.blob_ids[info.id] = id;
    } else if (fi.kind == trace::FrameKind::kKernelRecords) {
      RETURN_IF_ERROR(reader->read_kernels(static_cast<int64_t>(f), &kernels));
      RETURN_IF_ERROR(writer->append_kernels(kernels));
    }
  }
  if (reader->lossy()) writer->mark_lossy(reader->lossy_reason());
  RETURN_IF_ERROR(writer->close());
  return rep;
}

}  // namespace llmrr::replay
