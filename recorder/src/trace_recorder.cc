#include "llmrr/recorder/trace_recorder.h"

#include <utility>

#include "llmrr/kernels/isa.h"
#include "llmrr/recorder/convert.h"

namespace llmrr {
namespace {

// The engine's JobSignal as the SDK's IdleSignal (one per on_idle call, on the stack).
class JobSignalView final : public recording::IdleSignal {
 public:
  explicit JobSignalView(const kernels::JobSignal& signal) : signal_(signal) {}
  bool job_waiting() const override { return signal_.job_waiting(); }

 private:
  const kernels::JobSignal& signal_;
};

}  // namespace

trace::RunHeader base_run_header() {
  trace::RunHeader h = recording::base_run_header();
  h.host.isa = kernels::isa_name(kernels::active_isa());
  return h;
}

TraceRecorder::TraceRecorder(std::unique_ptr<recording::StepRecorder> steps)
    : steps_(std::move(steps)) {}

TraceRecorder::~TraceRecorder() = default;

Result<std::unique_ptr<TraceRecorder>> TraceRecorder::open(const std::string& path,
                                                           trace::RunHeader header,
                                                           RecorderOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<recording::StepRecorder> steps,
                   recording::StepRecorder::open(path, std::move(header), options));
  return std::unique_ptr<TraceRecorder>(new TraceRecorder(std::move(steps)));
}

// The conversions below allocate (a request's prompt, a plan's arrival order); like every
// other call they must not throw into the engine: an allocation failure stops recording.
#define LLMRR_ADAPTER_GUARD(body)                                                        \
  try {                                                                                  \
    body;                                                                                \
  } catch (...) {                                                                        \
    steps_->stop(make_error(ErrorCode::kResourceLimit, "out of memory while recording")); \
  }

bool TraceRecorder::wants_rows(SiteId site) {
  return steps_->wants_rows(site);
}

void TraceRecorder::on_arrival(int64_t, const RequestSpec& r) {
  if (!steps_->recording()) return;
  LLMRR_ADAPTER_GUARD(steps_->arrival(to_request_record(r)))
}

void TraceRecorder::on_step(const StepInfo& s) {
  steps_->begin_step(s.step);
  for (const BatchSegment& g : s.segments) steps_->segment(to_trace_segment(g));
}

void TraceRecorder::on_plan(int64_t, SiteId site, const Plan& plan) {
  if (!steps_->recording()) return;
  LLMRR_ADAPTER_GUARD(steps_->plan(site, to_plan_record(plan)))
}

void TraceRecorder::on_rows(const RowsView& rows) {
  steps_->rows(rows);
}

void TraceRecorder::on_routing(const RoutingView& routing) {
  steps_->routing(routing);
}

void TraceRecorder::on_logits(const LogitsView& logits) {
  steps_->logits(logits);
}

void TraceRecorder::on_token(const TokenEvent& t) {
  steps_->token({t.request, t.position, t.token, t.sample.uniform});
}

void TraceRecorder::on_finish(const RequestFinish& f) {
  trace::FinishRecord rec;
  rec.request = f.request;
  rec.reason = f.reason;
  rec.generated = f.generated;
  steps_->finish(rec);
}

void TraceRecorder::on_step_end(int64_t) {
  steps_->end_step();
}

bool TraceRecorder::on_idle(const kernels::JobSignal& signal) {
  return steps_->help(JobSignalView(signal));
}

}  // namespace llmrr
