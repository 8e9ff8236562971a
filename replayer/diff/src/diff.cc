#include "llmrr/replayer/diff.h"

#include <memory>
#include <thread>

#include "internal.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/replayer/run_config.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/tokenizers.h"

namespace llmrr::replay {

using namespace diff_internal;

bool DiffReport::identical() const {
  if (kernels && !kernels->identical()) return false;
  if (!engine) return kernels.has_value();
  if (requests.empty()) return false;
  for (const RequestDiff& r : requests) {
    if (r.verdict != Verdict::kIdentical) return false;
  }
  return true;
}

Result<DiffReport> diff_traces(const std::string& a_path, const std::string& b_path,
                               const DiffOptions& o) {
  Result<std::unique_ptr<trace::TraceReader>> open_a = trace::TraceReader::open(a_path);
  Result<std::unique_ptr<trace::TraceReader>> open_b = trace::TraceReader::open(b_path);
  // A trace with nothing to compare (killed before its first step chunk) is bad input, not
  // a difference; said before either trace's own error.
  for (const Result<std::unique_ptr<trace::TraceReader>>* r : {&open_a, &open_b}) {
    if (!r->ok()) continue;
    TraceContent c = trace_content(***r);
    if (!c.engine_steps && !c.kernel_records) {
      return make_error(ErrorCode::kSemantic,
                        (**r)->path() +
                            ": holds no whole step (the recording stopped before its "
                            "first step chunk): nothing to diff");
    }
  }
  if (!open_a.ok()) return open_a.status();
  if (!open_b.ok()) return open_b.status();
  std::unique_ptr<trace::TraceReader> a = std::move(open_a).value();
  std::unique_ptr<trace::TraceReader> b = std::move(open_b).value();
  DiffReport rep;
  rep.a_path = a_path;
  rep.b_path = b_path;
  // Kernel sequences (llmrr record-cuda traces): alone when neither trace has engine steps.
  const TraceContent content_a = trace_content(*a), content_b = trace_content(*b);
  if (content_a.kernel_records && content_b.kernel_records) {
    ASSIGN_OR_RETURN(KernelDiffReport k, diff_kernel_traces(*a, *b));
    rep.kernels = std::move(k);
    if (!content_a.engine_steps && !content_b.engine_steps) {
      rep.engine = false;
      return rep;
    }
  }
  rep.a_header = a->run_header();
  rep.b_header = b->run_header();
  rep.a_complete = a->complete();
  rep.b_complete = b->complete();
  rep.a_last_step = a->last_step();
  rep.b_last_step = b->last_step();
  rep.a_steps = a->step_count();
  rep.b_steps = b->step_count();
  rep.a_requests = static_cast<int64_t>(a->requests().size());
  rep.b_requests = static_cast<int64_t>(b->requests().size());
  rep.header_differences = header_differences(rep.a_header, rep.b_header);
  for (auto [r, name] : {std::pair{a.get(), "A"}, std::pair{b.get(), "B"}}) {
    if (!r->complete()) {
      rep.notes.push_back(std::string(name) + " (" + r->path() +
                          ") is truncated (no footer): diffed up to its last whole step, step " +
                          std::to_string(r->last_step()));
    }
    if (r->lossy()) {
      rep.notes.push_back(std::string(name) + " is lossy: " + r->lossy_reason());
    }
  }

  // Pass 1.
  const trace::CaptureLevel ca = rep.a_header.engine.capture, cb = rep.b_header.engine.capture;
  DigestSites which = (ca == trace::CaptureLevel::kAll && cb == trace::CaptureLevel::kAll)
                          ? DigestSites::kAll
                      : (ca == trace::CaptureLevel::kNone || cb == trace::CaptureLevel::kNone)
                          ? DigestSites::kNone
                          : DigestSites::kLayers;
  // Row hashes of different kinds (xxh3-64 from llmrr's engine or host-side hooks, mixsum64
  // hashed on the tensor's device) never compare equal: rows are left out, logits and tokens
  // (hashed by the library in both) are still compared.
  const std::string fa = trace::fingerprint_kind(rep.a_header.engine),
                    fb = trace::fingerprint_kind(rep.b_header.engine);
  if (fa != fb) {
    which = DigestSites::kNone;
    rep.notes.push_back("the traces hash rows differently (" + fa + " vs " + fb +
                        "): rows are not compared, only logits and tokens; record both the same "
                        "way to name the first differing site");
  }
  if (ca != cb && fa == fb) {
    rep.notes.push_back(std::string("the traces captured different sites (") +
                        trace::capture_level_name(ca) + " vs " + trace::capture_level_name(cb) +
                        "): rows are compared at the sites both hold");
  }
  Matcher matcher(o);
  Scanner scan_a(*a, which, o.align, [&](ReqSummary&& r) { matcher.add(0, std::move(r)); });
  Scanner scan_b(*b, which, o.align, [&](ReqSummary&& r) { matcher.add(1, std::move(r)); });
  auto drain = [](Scanner& sc) -> Status {
    for (;;) {
      ASSIGN_OR_RETURN(bool more, sc.next());
      if (!more) return Status::Ok();
    }
  };
  Status status_a, status_b;
  if (o.parallel) {
    std::thread t([&] { status_b = drain(scan_b); });
    status_a = drain(scan_a);
    t.join();
  } else {
    // One thread: the two traces step by step in turn, so that requests meet their
    // counterparts as early as they do on two threads.
    bool more_a = true, more_b = true;
    while ((more_a || more_b) && status_a.ok() && status_b.ok()) {
      if (more_a) {
        Result<bool> r = scan_a.next();
        if (r.ok()) {
          more_a = *r;
        } else {
          status_a = r.status();
        }
      }
      if (more_b) {
        Result<bool> r = scan_b.next();
        if (r.ok()) {
          more_b = *r;
        } else {
          status_b = r.status();
        }
      }
    }
  }
  if (!status_a.ok()) return status_a.with_context("A: ");
  if (!status_b.ok()) return status_b.with_context("B: ");

  if (o.request) {
    rep.alignment = "explicit ids";
    if (!matcher.found(0)) {
      return make_error(ErrorCode::kInvalidArgument, "--request: " + a_path + " has no request " +
                                                         std::to_string(o.request->first));
    }
    if (!matcher.found(1)) {
      return make_error(ErrorCode::kInvalidArgument, "--request: " + b_path + " has no request " +
                                                         std::to_string(o.request->second));
    }
  } else {
    rep.alignment = align_by_name(o.align);
    matcher.pair_held();  // --align tokens pairs here, once both scans are done
    rep.only_a = matcher.unmatched(0);
    rep.only_b = matcher.unmatched(1);
  }
  std::vector<PairWork> pairs = matcher.take_pairs();
  if (pairs.empty() && !o.request && !rep.only_a.empty() && !rep.only_b.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "nothing to compare: no request of " + a_path + " matches one of " +
                          b_path + " by " + rep.alignment + ": " + matcher.why_unmatched() +
                          " (--align prompt|ids|tokens, or --request RA:RB, pairs them anyway)");
  }

  uint64_t ha = 0, hb = 0;
  bool weights_differ = parse_weight_hash(rep.a_header.model.weight_hash, &ha) &&
                        parse_weight_hash(rep.b_header.model.weight_hash, &hb) && ha != hb;
  bool config_differs = rep.a_header.model.compute_dtype != rep.b_header.model.compute_dtype ||
                        rep.a_header.extra_config_json != rep.b_header.extra_config_json;
  Explainer ex(*a, *b, o, weights_differ, config_differs);
  for (PairWork& w : pairs) {
    RETURN_IF_ERROR(ex.explain(&w));
    RequestDiff& d = w.d;
    RETURN_IF_ERROR(logits_distance(*a, *b, &d));
    if (d.verdict == Verdict::kIdentical && d.root_found) {
      d.notes.push_back(
          "logits and tokens are bit-identical, but rows differ inside: first at "
          "position " +
          std::to_string(d.root_position) + ", " + d.first_site);
    }
    rep.requests.push_back(std::move(d));
  }

  // Token text for visible splits.
  bool any_visible = false;
  for (const RequestDiff& d : rep.requests) any_visible |= d.verdict == Verdict::kVisible;
  TextDecoder dec;
  if (any_visible && o.model != "none") {
    const trace::ModelInfo& m = rep.a_header.model;
    if (o.model.empty() && m.name.rfind("builtin:", 0) == 0 && m.vocab == kByteVocab) {
      dec.set(make_byte_tokenizer());
    } else {
      Result<std::string> spec = resolve_model_spec(rep.a_header, o.model);
      if (spec.ok()) {
        Result<LoadedModel> lm = load_model(*spec);
        if (lm.ok() && lm->tokenizer) {
          dec.set(lm->tokenizer);
        } else {
          rep.notes.push_back("token text not shown: " +
                              (lm.ok()
                                   ? lm->source + " has no tokenizer (" + lm->tokenizer_note + ")"
                                   : lm.status().message()));
        }
      } else {
        rep.notes.push_back("token text not shown: " + spec.status().message());
      }
    }
  }
  rep.text_decoded = dec.ok();
  for (RequestDiff& d : rep.requests) fill_text(dec, &d);
  return rep;
}

}  // namespace llmrr::replay
