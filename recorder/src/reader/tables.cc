// The reader's tables (tables.h): one pass over the steps of a range, appending to the
// tables asked for. Moved from c_api_read.cc, whose eager open is read_tables over every
// step and table.
#include "reader/tables.h"

#include <limits>
#include <unordered_map>

#include "llmrr/format/records.h"

namespace llmrr::cread {

namespace trace = llmrr::trace;

const char* const kTableNames =
    "requests prompt_tokens steps segments plans fingerprints routing logits logits_topk "
    "tokens finishes kernels";

Table::Table(std::initializer_list<std::pair<const char*, const char*>> spec) {
  for (const auto& [name, type] : spec) {
    columns.push_back(Column{name, type, {}, 0});
    if (!listing.empty()) listing += ' ';
    listing += std::string(name) + ":" + type;
  }
}

const Column* Table::find(const char* name) const {
  for (const Column& c : columns)
    if (c.name == name) return &c;
  return nullptr;
}

namespace {

constexpr uint64_t kNoRequest = ~uint64_t{0};

// Batch row -> (request, position) of one step, from its segments.
struct RowMap {
  std::vector<uint64_t> request;
  std::vector<int32_t> position;
  void build(const trace::StepRecord& s) {
    request.clear();
    position.clear();
    for (const trace::Segment& g : s.segments)
      for (int32_t i = 0; i < g.count; ++i) {
        request.push_back(g.request);
        position.push_back(g.start + i);
      }
  }
  uint64_t req(int64_t row) const {
    return row >= 0 && row < static_cast<int64_t>(request.size()) ? request[row] : kNoRequest;
  }
  int32_t pos(int64_t row) const {
    return row >= 0 && row < static_cast<int64_t>(position.size()) ? position[row] : -1;
  }
};

}  // namespace

Result<TableSet> read_tables(const trace::TraceReader& r, int64_t first, int64_t last,
                             const std::vector<std::string>& only) {
  auto asked = [&](const char* name) {
    if (only.empty()) return true;
    for (const std::string& o : only)
      if (o == name) return true;
    return false;
  };
  // Built with the table that points into it.
  auto want = [&](const char* name) {
    if (asked(name)) return true;
    if (std::strcmp(name, "prompt_tokens") == 0) return asked("requests");
    if (std::strcmp(name, "logits_topk") == 0) return asked("logits");
    return false;
  };
  TableSet set;
  auto add = [&](const char* name, Table t) -> Table& {
    if (want(name)) {
      if (!set.names.empty()) set.names += ' ';
      set.names += name;
    }
    return set.tables.emplace(name, std::move(t)).first->second;
  };

  Table& req = add("requests", Table{{"id", "u64"},
                                     {"arrival_step", "i64"},
                                     {"finish_step", "i64"},
                                     {"prompt_len", "i32"},
                                     {"prompt_offset", "i64"},
                                     {"prompt_hash", "u64"},
                                     {"generated", "i32"},
                                     {"finish_reason", "u8"},
                                     {"temperature", "f32"},
                                     {"top_k", "i32"},
                                     {"top_p", "f32"},
                                     {"seed", "u64"},
                                     {"max_tokens", "i32"},
                                     {"stop_at_eos", "u8"},
                                     {"label", "str"},
                                     {"carried", "u8"},
                                     {"history_len", "i32"}});
  Table& prompt = add("prompt_tokens", Table{{"request", "u64"}, {"token", "i32"}});
  Table& steps = add("steps", Table{{"step", "i64"},
                                    {"rows", "i64"},
                                    {"segments", "i32"},
                                    {"arrivals", "i32"},
                                    {"logits", "i32"},
                                    {"tokens", "i32"},
                                    {"finishes", "i32"}});
  Table& seg = add("segments", Table{{"step", "i64"},
                                     {"request", "u64"},
                                     {"start", "i32"},
                                     {"count", "i32"},
                                     {"cached", "i32"},
                                     {"kind", "u8"},
                                     {"sample", "u8"},
                                     {"batch_row", "i32"}});
  Table& plans = add("plans", Table{{"step", "i64"},
                                    {"site", "u64"},
                                    {"op", "u8"},
                                    {"mode", "u8"},
                                    {"order", "u8"},
                                    {"separate_new_kv", "u8"},
                                    {"splits", "i32"},
                                    {"split_size", "i32"},
                                    {"k_tile", "i32"}});
  Table& fp = add("fingerprints", Table{{"step", "i64"},
                                        {"site", "u64"},
                                        {"batch_row", "i32"},
                                        {"request", "u64"},
                                        {"position", "i32"},
                                        {"cols", "i32"},
                                        {"hash", "u64"},
                                        {"l2", "f32"},
                                        {"max_abs", "f32"}});
  Table& rt = add("routing", Table{{"step", "i64"},
                                   {"layer", "i32"},
                                   {"batch_row", "i32"},
                                   {"request", "u64"},
                                   {"position", "i32"},
                                   {"rank", "i32"},
                                   {"chosen", "i32"},
                                   {"expert", "i32"},
                                   {"gate", "f32"},
                                   {"outcome", "u8"},
                                   {"experts_total", "i32"},
                                   {"capacity", "i32"}});
  Table& lg = add("logits", Table{{"step", "i64"},
                                  {"request", "u64"},
                                  {"position", "i32"},
                                  {"batch_row", "i32"},
                                  {"vocab", "i32"},
                                  {"margin", "f32"},
                                  {"hash", "u64"},
                                  {"l2", "f32"},
                                  {"max_abs", "f32"},
                                  {"blob", "i64"},
                                  {"top_count", "i32"},
                                  {"logsumexp", "f64"}});  // NaN: not recorded (before 1.5)
  Table& topk =
      add("logits_topk", Table{{"logit", "i64"}, {"rank", "i32"}, {"id", "i32"}, {"value", "f32"}});
  Table& tok = add("tokens", Table{{"step", "i64"},
                                   {"request", "u64"},
                                   {"position", "i32"},
                                   {"token", "i32"},
                                   {"uniform", "f64"}});
  Table& fin =
      add("finishes",
          Table{{"step", "i64"}, {"request", "u64"}, {"reason", "u8"}, {"generated", "i32"}});
  Table& ker = add("kernels", Table{{"step", "i64"},
                                    {"stream", "u64"},
                                    {"correlation", "u64"},
                                    {"start_ns", "i64"},
                                    {"end_ns", "i64"},
                                    {"grid_x", "i32"},
                                    {"grid_y", "i32"},
                                    {"grid_z", "i32"},
                                    {"block_x", "i32"},
                                    {"block_y", "i32"},
                                    {"block_z", "i32"},
                                    {"name", "str"}});

  const bool want_req = want("requests"), want_steps = want("steps"), want_seg = want("segments"),
             want_plans = want("plans"), want_fp = want("fingerprints"), want_rt = want("routing"),
             want_lg = want("logits"), want_tok = want("tokens"), want_fin = want("finishes"),
             want_prompt = want("prompt_tokens"), want_topk = want("logits_topk");
  const bool any_step_table = want_req || want_steps || want_seg || want_plans || want_fp ||
                              want_rt || want_lg || want_tok || want_fin || want_prompt ||
                              want_topk;
  // Request summaries (finish step, generated) keyed by id; the arrival records carry the rest.
  std::unordered_map<uint64_t, const trace::RequestSummary*> summary;
  for (const trace::RequestSummary& s : r.requests()) summary[s.id] = &s;

  trace::StepCursor cur = r.steps(first, last);
  trace::StepRecord s;
  RowMap map;
  int64_t logit_index = 0;
  while (any_step_table) {
    llmrr::Result<bool> got = cur.next(&s);
    if (!got.ok()) return got.status();
    if (!*got) break;
    map.build(s);
    if (want_req || want_prompt) {
      for (const trace::RequestRecord& a : s.arrivals) {
        auto it = summary.find(a.id);
        const trace::RequestSummary* sum = it == summary.end() ? nullptr : it->second;
        req[0].push(a.id);
        req[1].push(s.step);
        req[2].push(sum ? sum->finish_step : int64_t{-1});
        req[3].push(static_cast<int32_t>(a.prompt.size()));
        req[4].push(prompt[0].count);
        req[5].push(trace::prompt_hash(a.prompt));
        req[6].push(sum ? sum->generated : int32_t{0});
        // 255: not finished when the trace ended.
        req[7].push(sum && sum->finish_step >= 0 ? static_cast<uint8_t>(sum->reason)
                                                 : uint8_t{255});
        req[8].push(a.temperature);
        req[9].push(a.top_k);
        req[10].push(a.top_p);
        req[11].push(a.seed);
        req[12].push(a.max_tokens);
        req[13].push(static_cast<uint8_t>(a.stop_at_eos));
        req[14].push_str(a.label);
        req[15].push(static_cast<uint8_t>(a.carried));
        req[16].push(static_cast<int32_t>(a.history.size()));
        ++req.rows;
        for (int32_t t : a.prompt) {
          prompt[0].push(a.id);
          prompt[1].push(t);
          ++prompt.rows;
        }
      }
    }
    if (want_steps) {
      steps[0].push(s.step);
      steps[1].push(s.row_count());
      steps[2].push(static_cast<int32_t>(s.segments.size()));
      steps[3].push(static_cast<int32_t>(s.arrivals.size()));
      steps[4].push(static_cast<int32_t>(s.logits.size()));
      steps[5].push(static_cast<int32_t>(s.tokens.size()));
      steps[6].push(static_cast<int32_t>(s.finishes.size()));
      ++steps.rows;
    }
    if (want_seg) {
      int32_t first_row = 0;
      for (const trace::Segment& g : s.segments) {
        seg[0].push(s.step);
        seg[1].push(g.request);
        seg[2].push(g.start);
        seg[3].push(g.count);
        seg[4].push(g.cached);
        seg[5].push(static_cast<uint8_t>(g.kind));
        seg[6].push(static_cast<uint8_t>(g.sample));
        seg[7].push(first_row);
        first_row += g.count;
        ++seg.rows;
      }
    }
    if (want_plans) {
      for (const trace::SitePlan& p : s.plans) {
        plans[0].push(s.step);
        plans[1].push(p.site);
        plans[2].push(static_cast<uint8_t>(p.plan.op));
        plans[3].push(static_cast<uint8_t>(p.plan.mode));
        plans[4].push(static_cast<uint8_t>(p.plan.order));
        plans[5].push(static_cast<uint8_t>(p.plan.separate_new_kv));
        plans[6].push(static_cast<int32_t>(p.plan.splits));
        plans[7].push(static_cast<int32_t>(p.plan.split_size));
        plans[8].push(static_cast<int32_t>(p.plan.k_tile));
        ++plans.rows;
      }
    }
    if (want_fp) {
      for (const trace::SiteRows& sr : s.rows)
        for (size_t i = 0; i < sr.rows.size(); ++i) {
          const int32_t row = sr.batch_rows.empty()      ? static_cast<int32_t>(i)
                              : i < sr.batch_rows.size() ? sr.batch_rows[i]
                                                         : int32_t{-1};
          fp[0].push(s.step);
          fp[1].push(sr.site);
          fp[2].push(row);
          fp[3].push(map.req(row));
          fp[4].push(map.pos(row));
          fp[5].push(sr.cols);
          fp[6].push(sr.rows[i].hash);
          fp[7].push(sr.rows[i].l2);
          fp[8].push(sr.rows[i].max_abs);
          ++fp.rows;
        }
    }
    if (want_rt) {
      for (const trace::Routing& ro : s.routing)
        for (int32_t row = 0; row < ro.rows; ++row)
          for (int32_t k = 0; k < ro.k; ++k) {
            const size_t i = static_cast<size_t>(row) * ro.k + k;
            rt[0].push(s.step);
            rt[1].push(ro.layer);
            rt[2].push(row);
            rt[3].push(map.req(row));
            rt[4].push(map.pos(row));
            rt[5].push(k);
            // The arrays are rows × k in a well-formed trace; one that is short (a hostile
            // or damaged record the reader passed) reads as missing, never past its end.
            rt[6].push(i < ro.chosen.size() ? ro.chosen[i] : int32_t{-1});
            rt[7].push(i < ro.experts.size() ? ro.experts[i] : int32_t{-1});
            rt[8].push(i < ro.gates.size() ? ro.gates[i] : std::numeric_limits<float>::quiet_NaN());
            rt[9].push(i < ro.outcome.size() ? static_cast<uint8_t>(ro.outcome[i]) : uint8_t{255});
            rt[10].push(ro.experts_total);
            rt[11].push(ro.capacity);
            ++rt.rows;
          }
    }
    if (want_lg || want_topk) {
      for (const trace::LogitsRecord& l : s.logits) {
        lg[0].push(s.step);
        lg[1].push(l.request);
        lg[2].push(l.position);
        lg[3].push(l.batch_row);
        lg[4].push(l.vocab);
        lg[5].push(l.margin);
        lg[6].push(l.full.hash);
        lg[7].push(l.full.l2);
        lg[8].push(l.full.max_abs);
        lg[9].push(l.blob);
        lg[10].push(static_cast<int32_t>(l.top_ids.size()));
        lg[11].push(l.logsumexp.value_or(std::numeric_limits<double>::quiet_NaN()));
        ++lg.rows;
        for (size_t k = 0; k < l.top_ids.size(); ++k) {
          topk[0].push(logit_index);
          topk[1].push(static_cast<int32_t>(k));
          topk[2].push(l.top_ids[k]);
          topk[3].push(k < l.top_values.size() ? l.top_values[k]
                                               : std::numeric_limits<float>::quiet_NaN());
          ++topk.rows;
        }
        ++logit_index;
      }
    }
    if (want_tok) {
      for (const trace::TokenRecord& t : s.tokens) {
        tok[0].push(s.step);
        tok[1].push(t.request);
        tok[2].push(t.position);
        tok[3].push(t.token);
        tok[4].push(t.uniform);
        ++tok.rows;
      }
    }
    if (want_fin) {
      for (const trace::FinishRecord& f : s.finishes) {
        fin[0].push(s.step);
        fin[1].push(f.request);
        fin[2].push(static_cast<uint8_t>(f.reason));
        fin[3].push(f.generated);
        ++fin.rows;
      }
    }
  }

  if (want("kernels")) {
    std::vector<trace::KernelRecord> kernels;
    const std::vector<trace::FrameInfo>& frames = r.frames();
    for (size_t f = 0; f < frames.size(); ++f) {
      if (frames[f].kind != trace::FrameKind::kKernelRecords) continue;
      kernels.clear();
      if (Status st = r.read_kernels(static_cast<int64_t>(f), &kernels); !st.ok()) return st;
      for (const trace::KernelRecord& k : kernels) {
        if (k.step < first || k.step > last) continue;
        auto dim = [](const std::vector<int32_t>& v, size_t i) { return i < v.size() ? v[i] : 1; };
        ker[0].push(k.step);
        ker[1].push(k.stream);
        ker[2].push(k.correlation);
        ker[3].push(k.start_ns);
        ker[4].push(k.end_ns);
        for (size_t i = 0; i < 3; ++i) ker[5 + i].push(dim(k.grid, i));
        for (size_t i = 0; i < 3; ++i) ker[8 + i].push(dim(k.block, i));
        ker[11].push_str(k.name);
        ++ker.rows;
      }
    }
  }
  for (auto it = set.tables.begin(); it != set.tables.end();) {
    it = want(it->first.c_str()) ? std::next(it) : set.tables.erase(it);
  }
  return set;
}

}  // namespace llmrr::cread
