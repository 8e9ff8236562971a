// Diff of kernel sequences (llmrr/replayer/diff_kernels.h).
#include "llmrr/replayer/diff_kernels.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "llmrr/format/trace_reader.h"
#include "llmrr/safeio/json.h"

namespace llmrr::replay {

namespace {

// One launch, compactly: a trace of millions of kernels repeats a few hundred names.
struct Launch {
  uint64_t correlation = 0;
  uint32_t name = 0;  // index into Loaded::names
  trace::ActivityKind kind = trace::ActivityKind::kKernel;
  uint8_t copy_kind = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  int32_t static_shared = 0, dynamic_shared = 0;
  uint64_t bytes = 0;
  uint64_t stream = 0;
  int32_t device = 0;
  int64_t start_ns = 0, end_ns = 0;

  bool same_kernel(const Launch& o) const { return kind == o.kind && name == o.name; }
  bool operator==(const Launch& o) const {
    return kind == o.kind && name == o.name && copy_kind == o.copy_kind &&
           std::equal(grid, grid + 3, o.grid) && std::equal(block, block + 3, o.block) &&
           static_shared == o.static_shared && dynamic_shared == o.dynamic_shared &&
           bytes == o.bytes;
  }
};

struct Loaded {
  KernelTraceSummary summary;
  std::map<int64_t, std::vector<Launch>> steps;  // step >= 0 → launches
};

// Names are interned across both traces so equal names compare as equal indices.
struct Names {
  std::vector<std::string> text;
  std::unordered_map<std::string, uint32_t> index;
  uint32_t intern(const std::string& s) {
    auto [it, fresh] = index.emplace(s, static_cast<uint32_t>(text.size()));
    if (fresh) text.push_back(s);
    return it->second;
  }
};

// extra_config_json["steps"], read under safeio's caps: a header past them is refused.
Result<std::string> step_source(const trace::RunHeader& h, const std::string& path) {
  ASSIGN_OR_RETURN(nlohmann::json j,
                   safeio::parse_json_object(h.extra_config_json,
                                             path + ": run header extra_config_json",
                                             ErrorCode::kSemantic));
  if (j.contains("steps") && j["steps"].is_string()) return j["steps"].get<std::string>();
  return std::string();
}

Status load(const std::string& path, Names* names, Loaded* out) {
  auto r = trace::TraceReader::open(path);
  if (!r.ok()) return r.status();
  const trace::TraceReader& rd = **r;
  KernelTraceSummary& s = out->summary;
  s.path = path;
  s.engine_steps = rd.step_count();
  s.dropped = rd.dropped_records();
  s.lossy = rd.lossy();
  ASSIGN_OR_RETURN(s.step_source, step_source(rd.run_header(), path));
  std::vector<trace::KernelRecord> recs;
  for (size_t f = 0; f < rd.frames().size(); ++f) {
    if (rd.frames()[f].kind != trace::FrameKind::kKernelRecords) continue;
    RETURN_IF_ERROR(rd.read_kernels(static_cast<int64_t>(f), &recs));
    for (const trace::KernelRecord& k : recs) {
      if (k.kind == trace::ActivityKind::kRange) {
        ++s.ranges;
        continue;
      }
      (k.kind == trace::ActivityKind::kKernel ? s.kernels : s.memcpys)++;
      if (k.step < 0) {
        ++s.outside_steps;
        continue;
      }
      Launch l;
      l.correlation = k.correlation;
      l.name = names->intern(k.name);
      l.kind = k.kind;
      l.copy_kind = k.copy_kind;
      for (size_t i = 0; i < 3; ++i) {
        l.grid[i] = i < k.grid.size() ? k.grid[i] : 0;
        l.block[i] = i < k.block.size() ? k.block[i] : 0;
      }
      l.static_shared = k.static_shared;
      l.dynamic_shared = k.dynamic_shared;
      l.bytes = k.bytes;
      l.stream = k.stream;
      l.device = k.device;
      l.start_ns = k.start_ns;
      l.end_ns = k.end_ns;
      out->steps[k.step].push_back(l);
    }
  }
  // Launch order: records arrive per buffer (per context, per stream), not in launch order.
  for (auto& [step, v] : out->steps)
    std::stable_sort(v.begin(), v.end(), [](const Launch& x, const Launch& y) {
      return x.correlation != y.correlation ? x.correlation < y.correlation : x.kind < y.kind;
    });
  s.steps = static_cast<int64_t>(out->steps.size());
  return Status::Ok();
}

trace::KernelRecord to_record(const Launch& l, const Names& names, int64_t step) {
  trace::KernelRecord k;
  k.name = names.text[l.name];
  k.step = step;
  k.kind = l.kind;
  if (l.kind == trace::ActivityKind::kKernel) {
    k.grid.assign(l.grid, l.grid + 3);
    k.block.assign(l.block, l.block + 3);
  }
  k.static_shared = l.static_shared;
  k.dynamic_shared = l.dynamic_shared;
  k.bytes = l.bytes;
  k.copy_kind = l.copy_kind;
  k.stream = l.stream;
  k.correlation = l.correlation;
  k.device = l.device;
  k.start_ns = l.start_ns;
  k.end_ns = l.end_ns;
  return k;
}

// Kernel names (with multiplicity) one step launches and the other does not.
void only_in(const std::vector<Launch>& x, const std::vector<Launch>& y, const Names& names,
             std::vector<std::string>* out) {
  std::map<uint32_t, int64_t> count;
  std::vector<uint32_t> order;  // first launch in x
  for (const Launch& l : x)
    if (l.kind == trace::ActivityKind::kKernel && count[l.name]++ == 0) order.push_back(l.name);
  for (const Launch& l : y)
    if (l.kind == trace::ActivityKind::kKernel) --count[l.name];
  for (uint32_t name : order) {
    const int64_t n = count[name];
    if (n == 1) out->push_back(names.text[name]);
    if (n > 1) out->push_back(names.text[name] + " (x" + std::to_string(n) + ")");
  }
}

}  // namespace

const char* kernel_difference_name(KernelDifference d) {
  switch (d) {
    case KernelDifference::kNone:
      return "identical";
    case KernelDifference::kOnlyInA:
      return "present in A only";
    case KernelDifference::kOnlyInB:
      return "present in B only";
    case KernelDifference::kConfig:
      return "launch configuration differs";
    case KernelDifference::kDifferent:
      return "different kernel";
    case KernelDifference::kStepCount:
      return "different number of steps";
  }
  return "unknown";
}

Result<TraceContent> trace_content(const std::string& path) {
  auto r = trace::TraceReader::open(path);
  if (!r.ok()) return r.status();
  TraceContent c;
  c.engine_steps = (*r)->step_count() > 0;
  for (const trace::FrameInfo& f : (*r)->frames())
    if (f.kind == trace::FrameKind::kKernelRecords) c.kernel_records = true;
  return c;
}

Result<KernelTraceSummary> summarize_kernel_trace(const std::string& path) {
  Names names;
  Loaded l;
  RETURN_IF_ERROR(load(path, &names, &l));
  return l.summary;
}

Result<KernelDiffReport> diff_kernel_traces(const std::string& a_path, const std::string& b_path) {
  Names names;
  Loaded a, b;
  RETURN_IF_ERROR(load(a_path, &names, &a));
  RETURN_IF_ERROR(load(b_path, &names, &b));
  KernelDiffReport rep;
  rep.a = a.summary;
  rep.b = b.summary;
  if (a.summary.lossy || b.summary.lossy)
    rep.notes.push_back("a trace is lossy (records were dropped): a difference may be a gap");
  if (a.summary.outside_steps || b.summary.outside_steps)
    rep.notes.push_back("launches outside every step range are not compared (A " +
                        std::to_string(a.summary.outside_steps) + ", B " +
                        std::to_string(b.summary.outside_steps) + ")");
  if (a.summary.step_source != b.summary.step_source)
    rep.notes.push_back("steps were delimited differently: A by " +
                        (a.summary.step_source.empty() ? "?" : a.summary.step_source) + ", B by " +
                        (b.summary.step_source.empty() ? "?" : b.summary.step_source));
  auto ia = a.steps.begin();
  auto ib = b.steps.begin();
  for (int64_t ord = 0; ia != a.steps.end() && ib != b.steps.end(); ++ia, ++ib, ++ord) {
    const std::vector<Launch>& x = ia->second;
    const std::vector<Launch>& y = ib->second;
    ++rep.steps_compared;
    size_t k = 0;
    while (k < x.size() && k < y.size() && x[k] == y[k]) ++k;
    if (k == x.size() && k == y.size()) continue;
    ++rep.steps_differing;
    if (rep.difference != KernelDifference::kNone) continue;
    rep.ordinal = ord;
    rep.step_a = ia->first;
    rep.step_b = ib->first;
    rep.launches_a = static_cast<int64_t>(x.size());
    rep.launches_b = static_cast<int64_t>(y.size());
    rep.index = static_cast<int64_t>(k);
    if (k > 0) rep.previous = to_record(x[k - 1], names, ia->first);
    if (k < x.size()) rep.kernel_a = to_record(x[k], names, ia->first);
    if (k < y.size()) rep.kernel_b = to_record(y[k], names, ib->first);
    if (k == y.size())
      rep.difference = KernelDifference::kOnlyInA;
    else if (k == x.size())
      rep.difference = KernelDifference::kOnlyInB;
    else if (x[k].same_kernel(y[k]))
      rep.difference = KernelDifference::kConfig;
    else if (k + 1 < y.size() && x[k] == y[k + 1])
      rep.difference = KernelDifference::kOnlyInB;  // B inserted a launch here
    else if (k + 1 < x.size() && x[k + 1] == y[k])
      rep.difference = KernelDifference::kOnlyInA;
    else
      rep.difference = KernelDifference::kDifferent;
    only_in(x, y, names, &rep.only_a);
    only_in(y, x, names, &rep.only_b);
  }
  const int64_t na = static_cast<int64_t>(a.steps.size()),
                nb = static_cast<int64_t>(b.steps.size());
  if (na != nb) {
    rep.steps_differing += std::max(na, nb) - rep.steps_compared;
    if (rep.difference == KernelDifference::kNone) {
      rep.difference = KernelDifference::kStepCount;
      rep.ordinal = rep.steps_compared;
      auto extra = na > nb ? std::next(a.steps.begin(), rep.ordinal)
                           : std::next(b.steps.begin(), rep.ordinal);
      (na > nb ? rep.step_a : rep.step_b) = extra->first;
      (na > nb ? rep.launches_a : rep.launches_b) = static_cast<int64_t>(extra->second.size());
      rep.index = 0;
      (na > nb ? rep.kernel_a : rep.kernel_b) =
          to_record(extra->second.front(), names, extra->first);
    }
  }
  if (a.summary.steps == 0 && b.summary.steps == 0)
    rep.notes.push_back("neither trace holds kernel launches in a step");
  return rep;
}

std::string launch_text(const trace::KernelRecord& k, size_t max_name) {
  auto dims = [](const std::vector<int32_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) {
      if (i) s += ',';
      s += std::to_string(d[i]);
    }
    return s + "]";
  };
  if (k.kind == trace::ActivityKind::kMemcpy)
    return std::string("memcpy ") + trace::memcpy_kind_name(k.copy_kind) + " " +
           std::to_string(k.bytes) + " B";
  std::string name = k.name;
  if (name.size() > max_name) name = name.substr(0, max_name) + "...";
  if (k.kind == trace::ActivityKind::kRange) return "range " + name;
  return "kernel " + name + " grid " + dims(k.grid) + " block " + dims(k.block) + " shared " +
         std::to_string(k.static_shared) + "+" + std::to_string(k.dynamic_shared);
}

std::string format_kernel_diff(const KernelDiffReport& r) {
  std::string s;
  auto side = [&](const char* tag, const KernelTraceSummary& t) {
    s += std::string(tag) + "  " + t.path + ": " + std::to_string(t.steps) + " steps, " +
         std::to_string(t.kernels) + " kernels, " + std::to_string(t.memcpys) + " memcpys";
    if (t.ranges) s += ", " + std::to_string(t.ranges) + " ranges";
    if (!t.step_source.empty()) s += " (steps: " + t.step_source + ")";
    if (t.dropped) s += ", " + std::to_string(t.dropped) + " records DROPPED";
    s += "\n";
  };
  side("A", r.a);
  side("B", r.b);
  if (r.identical()) {
    s += "kernel sequences identical: " + std::to_string(r.steps_compared) + " steps compared\n";
  } else if (r.difference == KernelDifference::kStepCount) {
    s += "kernel sequences: the " + std::to_string(r.steps_compared) +
         " common steps are identical; " + (r.kernel_a ? "A" : "B") +
         " has more steps, from its step " + std::to_string(r.kernel_a ? r.step_a : r.step_b) +
         " (" + std::to_string(r.kernel_a ? r.launches_a : r.launches_b) + " launches, first " +
         launch_text(r.kernel_a ? *r.kernel_a : *r.kernel_b) + ")\n";
  } else {
    s += "kernel sequences differ: first at step " + std::to_string(r.step_a);
    if (r.step_b != r.step_a) s += " of A, step " + std::to_string(r.step_b) + " of B";
    s += " (step #" + std::to_string(r.ordinal) + " that launched work), launch #" +
         std::to_string(r.index) + " of " + std::to_string(r.launches_a) + " in A, " +
         std::to_string(r.launches_b) + " in B: " + kernel_difference_name(r.difference) + "\n";
    if (r.previous) s += "  after  " + launch_text(*r.previous) + "\n";
    s += "  A #" + std::to_string(r.index) + "   " +
         (r.kernel_a ? launch_text(*r.kernel_a) : std::string("(end of step)")) + "\n";
    s += "  B #" + std::to_string(r.index) + "   " +
         (r.kernel_b ? launch_text(*r.kernel_b) : std::string("(end of step)")) + "\n";
    auto names = [&](const char* who, const std::vector<std::string>& v) {
      if (v.empty()) return;
      s += std::string("  kernels of this step only ") + who + " launches:\n";
      for (const std::string& n : v) s += "    " + n + "\n";
    };
    names("A", r.only_a);
    names("B", r.only_b);
    s += "  steps compared " + std::to_string(r.steps_compared) + ", differing " +
         std::to_string(r.steps_differing) + "\n";
  }
  for (const std::string& n : r.notes) s += "note: " + n + "\n";
  return s;
}

std::string kernel_diff_json(const KernelDiffReport& r) {
  using nlohmann::json;
  auto side = [](const KernelTraceSummary& t) {
    return json{{"path", t.path},
                {"steps", t.steps},
                {"kernels", t.kernels},
                {"memcpys", t.memcpys},
                {"ranges", t.ranges},
                {"outside_steps", t.outside_steps},
                {"dropped", t.dropped},
                {"lossy", t.lossy},
                {"engine_steps", t.engine_steps},
                {"step_source", t.step_source}};
  };
  auto launch = [](const std::optional<trace::KernelRecord>& k) -> json {
    if (!k) return nullptr;
    json j{{"kind", trace::activity_kind_name(k->kind)},
           {"name", k->name},
           {"step", k->step},
           {"correlation", k->correlation},
           {"stream", k->stream},
           {"text", launch_text(*k)}};
    if (k->kind == trace::ActivityKind::kKernel) {
      j["grid"] = k->grid;
      j["block"] = k->block;
      j["static_shared"] = k->static_shared;
      j["dynamic_shared"] = k->dynamic_shared;
    } else if (k->kind == trace::ActivityKind::kMemcpy) {
      j["copy_kind"] = trace::memcpy_kind_name(k->copy_kind);
      j["bytes"] = k->bytes;
    }
    return j;
  };
  json j{{"a", side(r.a)},
         {"b", side(r.b)},
         {"identical", r.identical()},
         {"difference", kernel_difference_name(r.difference)},
         {"steps_compared", r.steps_compared},
         {"steps_differing", r.steps_differing},
         {"ordinal", r.ordinal},
         {"step_a", r.step_a},
         {"step_b", r.step_b},
         {"launches_a", r.launches_a},
         {"launches_b", r.launches_b},
         {"index", r.index},
         {"kernel_a", launch(r.kernel_a)},
         {"kernel_b", launch(r.kernel_b)},
         {"previous", launch(r.previous)},
         {"only_a", r.only_a},
         {"only_b", r.only_b},
         {"notes", r.notes}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace llmrr::replay
