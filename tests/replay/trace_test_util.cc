#include "trace_test_util.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "llmrr/replayer/run_config.h"
#include "llmrr/runtime/load.h"
#include "llmrr/runtime/policy.h"
#include "../common/test_paths.h"

namespace llmrr::rtest {

std::string temp_path(const std::string& name) {
  static test::TempDir dir("llmrr-replay");
  return dir.file(name);
}

std::vector<RequestSpec> target_and_load(const LoadedModel& model, const std::string& prompt,
                                         int32_t max_tokens, int32_t load, uint64_t seed) {
  std::vector<RequestSpec> out;
  RequestSpec t;
  t.id = 0;
  t.label = "target";
  t.prompt = bytes(prompt);
  t.max_tokens = max_tokens;
  t.stop_at_eos = false;
  out.push_back(t);
  LoadOptions lo;
  lo.count = load;
  lo.seed = seed;
  lo.vocab = model.config.vocab;
  lo.max_positions = model.config.max_positions;
  lo.first_id = 1;
  lo.token_lo = 32;
  lo.token_hi = 127;
  lo.max_new = 12;
  lo.max_prompt = 40;
  lo.max_arrival = 6;
  for (RequestSpec r : make_load_requests(lo)) {
    r.stop_at_eos = false;
    out.push_back(std::move(r));
  }
  return out;
}

Recorded record(const LoadedModel& model, const RunSpec& spec, const std::string& path) {
  Recorded rec;
  rec.path = path;
  std::shared_ptr<Policy> policy;
  VirtualDevice device;
  if (spec.policy == "production") {
    ProductionOptions po;
    po.atomics = spec.atomics;
    po.device = device;
    policy = make_production_policy(po);
  } else if (spec.policy == "invariant") {
    policy = make_invariant_policy(default_invariant_split_size(model.config.hidden));
  } else if (spec.policy == "forced") {
    policy = make_forced_policy(spec.plans);
  } else {
    ADD_FAILURE() << "unknown policy " << spec.policy;
    return rec;
  }
  trace::RunHeader header = base_run_header();
  replay::fill_run_header(
      &header, model, spec.config, policy->name(), device,
      spec.policy == "invariant" ? default_invariant_split_size(model.config.hidden) : 0, 0,
      static_cast<int32_t>(spec.requests.size()) - 1);
  header.command_line = "test";
  RecorderOptions ro;
  ro.capture = spec.capture;
  ro.logits = spec.logits;
  ro.writer.max_steps_per_chunk = spec.max_steps_per_chunk;
  auto recorder = TraceRecorder::open(path, header, ro);
  EXPECT_TRUE(recorder.ok()) << recorder.status().to_string();
  if (!recorder.ok()) return rec;
  auto engine = Engine::create(model, spec.config, policy);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return rec;
  Engine& e = **engine;
  rec.mem = std::make_unique<MemoryTrace>(MemoryTrace::Options{true, true});
  e.add_observer(recorder->get());
  e.add_observer(rec.mem.get());
  if (spec.schedule) e.set_schedule_source(spec.schedule);
  if (spec.routing) e.set_routing_source(spec.routing, RoutingMode::kForce);
  for (const RequestSpec& r : spec.requests) {
    Status st = e.add_request(r);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return rec;
  }
  Status st = e.run();
  EXPECT_TRUE(st.ok()) << st.to_string();
  Status closed = (*recorder)->close();
  EXPECT_TRUE(closed.ok()) << closed.to_string();
  rec.ok = st.ok() && closed.ok();
  return rec;
}

Status rewrite_trace(const std::string& in, const std::string& out,
                     const std::function<void(trace::RunHeader&)>& edit_header,
                     const std::function<void(trace::StepRecord&)>& edit_step) {
  ASSIGN_OR_RETURN(auto reader, trace::TraceReader::open(in));
  trace::WriterOptions wo;
  wo.max_steps_per_chunk = 1;
  ASSIGN_OR_RETURN(auto writer, trace::TraceWriter::open(out, wo));
  trace::RunHeader h = reader->run_header();
  if (edit_header) edit_header(h);
  RETURN_IF_ERROR(writer->append_run_header(h));
  trace::StepCursor cur = reader->steps();
  trace::StepRecord s;
  for (;;) {
    ASSIGN_OR_RETURN(bool got, cur.next(&s));
    if (!got) break;
    if (edit_step) edit_step(s);
    RETURN_IF_ERROR(writer->append_step(s));
  }
  return writer->close();
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

int run_command(const std::string& command, std::string* out, bool with_stderr) {
  std::string cmd = command + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  if (out) out->clear();
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) {
    if (out) out->append(buf, n);
  }
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string llmrr_binary() {
  return LLMRR_PATH(LLMRR_BINARY);
}

}  // namespace llmrr::rtest
