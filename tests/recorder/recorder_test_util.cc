#include "recorder_test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "llmrr/format/fingerprint.h"
#include "llmrr/runtime/load.h"

namespace llmrr::rectest {

namespace {
std::mutex temp_mu;
std::vector<std::string>* temp_files = nullptr;
}  // namespace

void remove_temp_files() {
  std::lock_guard<std::mutex> lock(temp_mu);
  if (!temp_files) return;
  for (const std::string& p : *temp_files) std::remove(p.c_str());
}

std::string temp_path(const std::string& stem) {
  static std::atomic<int> counter{0};
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() != '/') dir += '/';
  std::string path = dir + "llmrr_rec_" + std::to_string(::getpid()) + "_" +
                     std::to_string(counter++) + "_" + stem;
  std::lock_guard<std::mutex> lock(temp_mu);
  if (!temp_files) {
    temp_files = new std::vector<std::string>();
    std::atexit(remove_temp_files);
  }
  temp_files->push_back(path);
  return path;
}

RequestSpec request(RequestId id, const std::string& prompt, int32_t max_tokens, int64_t arrival) {
  RequestSpec r;
  r.id = id;
  r.prompt = bytes(prompt);
  r.max_tokens = max_tokens;
  r.arrival_step = arrival;
  r.label = id == 0 ? "target" : "req-" + std::to_string(id);
  return r;
}

std::vector<RequestSpec> load_requests(const LoadedModel& model, int32_t count, uint64_t seed,
                                       RequestId first_id) {
  LoadOptions lo;
  lo.count = count;
  lo.seed = seed;
  lo.vocab = model.config.vocab;
  lo.max_positions = model.config.max_positions;
  lo.first_id = first_id;
  lo.max_new = 12;
  lo.max_arrival = 6;
  lo.token_lo = 32;
  lo.token_hi = 127;
  return make_load_requests(lo);
}

void DetailObserver::on_rows(const RowsView& v) {
  cols[{v.step, v.site.packed()}] = v.cols;
  for (int64_t r = 0; r < v.rows; ++r) {
    int64_t row = v.batch_rows ? v.batch_rows[r] : r;
    fingerprints[{v.step, v.site.packed(), row}] =
        trace::fingerprint_row(v.data + r * v.ld, v.cols);
  }
}

void DetailObserver::on_routing(const RoutingView& v) {
  size_t n = static_cast<size_t>(v.rows) * static_cast<size_t>(v.k);
  RoutingView copy = v;
  copy.chosen = copy.experts = nullptr;
  copy.gates = nullptr;
  copy.outcome = nullptr;
  copy.batch_rows = nullptr;
  routing_views[{v.step, v.layer}] = copy;
  chosen[{v.step, v.layer}].assign(v.chosen, v.chosen + n);
  gates[{v.step, v.layer}].assign(v.gates, v.gates + n);
}

std::shared_ptr<Policy> make_policy(const std::string& name) {
  if (name == "invariant") return make_invariant_policy(64);
  ProductionOptions po;
  po.atomics = name == "atomics";
  return make_production_policy(po);
}

RecordedRun record_run(const RunSpec& spec) {
  RecordedRun run;
  run.path = spec.path.empty() ? temp_path("run.trace") : spec.path;
  const LoadedModel& model = builtin(spec.model);
  auto e = Engine::create(model, spec.config, make_policy(spec.policy));
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return run;
  run.engine = std::move(e).value();

  trace::RunHeader header = base_run_header();
  header.model.name = model.identity;
  header.model.vocab = model.config.vocab;
  header.engine.policy = spec.policy;
  auto rec = TraceRecorder::open(run.path, header, spec.recorder);
  EXPECT_TRUE(rec.ok()) << rec.status().to_string();
  if (!rec.ok()) return run;

  MemoryTrace::Options mo;
  mo.logits = true;
  mo.row_hashes = true;
  run.memory = std::make_unique<MemoryTrace>(mo);
  run.detail = std::make_unique<DetailObserver>(true);
  run.engine->add_observer(rec->get());
  run.engine->add_observer(run.memory.get());
  run.engine->add_observer(run.detail.get());
  for (const RequestSpec& r : spec.requests) {
    Status st = run.engine->add_request(r);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  run.run_status = run.engine->run();
  run.close_status = (*rec)->close();
  run.stats = (*rec)->stats();
  run.engine->remove_observer(rec->get());
  return run;
}

std::unique_ptr<MemoryTrace> plain_run(const RunSpec& spec) {
  const LoadedModel& model = builtin(spec.model);
  auto e = Engine::create(model, spec.config, make_policy(spec.policy));
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return nullptr;
  MemoryTrace::Options mo;
  mo.logits = true;
  auto memory = std::make_unique<MemoryTrace>(mo);
  (*e)->add_observer(memory.get());
  for (const RequestSpec& r : spec.requests) {
    Status st = (*e)->add_request(r);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  Status st = (*e)->run();
  EXPECT_TRUE(st.ok()) << st.to_string();
  return memory;
}

std::unique_ptr<trace::TraceReader> open_reader(const std::string& path) {
  auto r = trace::TraceReader::open(path);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return nullptr;
  return std::move(r).value();
}

std::vector<trace::StepRecord> read_steps(trace::TraceReader& reader) {
  std::vector<trace::StepRecord> out;
  trace::StepCursor cur = reader.steps();
  for (;;) {
    trace::StepRecord s;
    Result<bool> got = cur.next(&s);
    EXPECT_TRUE(got.ok()) << got.status().to_string();
    if (!got.ok() || !*got) break;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace llmrr::rectest
