// export_npy: fingerprints, top-K logits and routing as .npy arrays (llmrr/replayer/export.h).
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "llmrr/replayer/export.h"
#include "llmrr/replayer/npy.h"
#include "llmrr/format/site.h"
#include "llmrr/safeio/json.h"
#include "llmrr/safeio/output.h"

namespace llmrr::replay {

Result<NpyExportSummary> export_npy(const trace::TraceReader& reader, const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (::mkdir(dir.c_str(), 0777) != 0) {
      return make_error(ErrorCode::kIo,
                        dir + ": cannot create the directory: " + std::strerror(errno));
    }
  } else if (!S_ISDIR(st.st_mode)) {
    return make_error(ErrorCode::kInvalidArgument, dir + ": exists and is not a directory");
  }
  std::vector<uint64_t> fp_hash;
  std::vector<float> fp_summary;
  std::vector<int64_t> fp_index;
  std::map<uint64_t, int64_t> site_index;
  std::vector<uint64_t> site_list;
  std::vector<std::vector<int32_t>> top_ids;
  std::vector<std::vector<float>> top_values;
  std::vector<float> margins;
  std::vector<int64_t> logits_index;
  std::vector<int32_t> chosen, experts, outcome;
  std::vector<float> gates;
  std::vector<int64_t> routing_index;
  int32_t route_k = -1;
  size_t max_k = 0;

  trace::StepCursor cur = reader.steps();
  trace::StepRecord s;
  std::vector<int64_t> owner, pos;
  for (;;) {
    ASSIGN_OR_RETURN(bool got, cur.next(&s));
    if (!got) break;
    owner.clear();
    pos.clear();
    for (const trace::Segment& g : s.segments) {
      for (int32_t j = 0; j < g.count; ++j) {
        owner.push_back(static_cast<int64_t>(g.request));
        pos.push_back(g.start + j);
      }
    }
    auto who = [&](int64_t row, int64_t* req, int64_t* p) {
      const bool known = row >= 0 && row < static_cast<int64_t>(owner.size());
      *req = known ? owner[row] : -1;
      *p = known ? pos[row] : -1;
    };
    for (const trace::SiteRows& sr : s.rows) {
      auto [it, fresh] = site_index.emplace(sr.site, static_cast<int64_t>(site_list.size()));
      if (fresh) site_list.push_back(sr.site);
      for (size_t i = 0; i < sr.rows.size(); ++i) {
        const int64_t row = sr.batch_rows.empty() ? static_cast<int64_t>(i) : sr.batch_rows[i];
        int64_t req, p;
        who(row, &req, &p);
        fp_hash.push_back(sr.rows[i].hash);
        fp_summary.push_back(sr.rows[i].l2);
        fp_summary.push_back(sr.rows[i].max_abs);
        fp_index.insert(fp_index.end(), {s.step, req, p, it->second});
      }
    }
    for (const trace::LogitsRecord& l : s.logits) {
      top_ids.push_back(l.top_ids);
      top_values.push_back(l.top_values);
      max_k = std::max(max_k, l.top_ids.size());
      margins.push_back(l.margin);
      logits_index.insert(logits_index.end(),
                          {s.step, static_cast<int64_t>(l.request), l.position});
    }
    for (const trace::Routing& r : s.routing) {
      if (route_k >= 0 && r.k != route_k) {
        return make_error(ErrorCode::kUnsupported,
                          reader.path() + ": step " + std::to_string(s.step) + ", layer " +
                              std::to_string(r.layer) + ": routing k " + std::to_string(r.k) +
                              " differs from k " + std::to_string(route_k) +
                              " earlier; one [R, k] array cannot hold both");
      }
      route_k = r.k;
      for (int32_t row = 0; row < r.rows; ++row) {
        int64_t req, p;
        who(row, &req, &p);
        const size_t a = static_cast<size_t>(row) * r.k, b = a + r.k;
        chosen.insert(chosen.end(), r.chosen.begin() + a, r.chosen.begin() + b);
        experts.insert(experts.end(), r.experts.begin() + a, r.experts.begin() + b);
        gates.insert(gates.end(), r.gates.begin() + a, r.gates.begin() + b);
        for (size_t i = a; i < b; ++i) outcome.push_back(static_cast<int32_t>(r.outcome[i]));
        routing_index.insert(routing_index.end(), {s.step, r.layer, req, p});
      }
    }
  }

  NpyExportSummary sum;
  nlohmann::json manifest;
  manifest["trace"] = reader.path();
  manifest["run_id"] = reader.run_header().run_id;
  manifest["arrays"] = nlohmann::json::object();
  auto file = [&](const std::string& name, const std::string& dtype,
                  const std::vector<int64_t>& shape, const std::string& what) {
    sum.files.push_back(dir + "/" + name);
    manifest["arrays"][name] = {{"dtype", dtype}, {"shape", shape}, {"columns", what}};
    return dir + "/" + name;
  };
  const int64_t N = static_cast<int64_t>(fp_hash.size());
  sum.fingerprints = N;
  RETURN_IF_ERROR(write_npy_u64(file("fingerprints.hash.npy", "<u8", {N}, "xxh3-64 of the row"),
                                {N}, fp_hash.data()));
  RETURN_IF_ERROR(write_npy_f32(file("fingerprints.summary.npy", "<f4", {N, 2}, "l2, max_abs"),
                                {N, 2}, fp_summary.data()));
  RETURN_IF_ERROR(write_npy_i64(
      file("fingerprints.index.npy", "<i8", {N, 4}, "step, request, position, site index"), {N, 4},
      fp_index.data()));
  nlohmann::json sites = nlohmann::json::array();
  for (uint64_t site : site_list) sites.push_back(site_name(SiteId::unpack(site)));
  {
    const std::string p = dir + "/sites.json";
    std::FILE* f = safeio::open_for_writing(p.c_str());
    const std::string text = safeio::dump(sites, 1) + "\n";
    bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (f != nullptr) ok = std::fclose(f) == 0 && ok;
    if (!ok) return make_error(ErrorCode::kIo, p + ": cannot write");
    sum.files.push_back(p);
  }

  const int64_t M = static_cast<int64_t>(margins.size());
  const int64_t K = static_cast<int64_t>(max_k);
  sum.logits = M;
  std::vector<int32_t> ids(static_cast<size_t>(M * K), -1);
  std::vector<float> vals(static_cast<size_t>(M * K), std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < M; ++i) {
    std::copy(top_ids[i].begin(), top_ids[i].end(), ids.begin() + i * K);
    std::copy(top_values[i].begin(), top_values[i].end(), vals.begin() + i * K);
  }
  RETURN_IF_ERROR(write_npy_i32(
      file("logits.top_ids.npy", "<i4", {M, K}, "top-K token ids, descending; -1 padding"), {M, K},
      ids.data()));
  RETURN_IF_ERROR(
      write_npy_f32(file("logits.top_values.npy", "<f4", {M, K}, "top-K values; NaN padding"),
                    {M, K}, vals.data()));
  RETURN_IF_ERROR(
      write_npy_f32(file("logits.margin.npy", "<f4", {M}, "top1 - top2"), {M}, margins.data()));
  RETURN_IF_ERROR(write_npy_i64(file("logits.index.npy", "<i8", {M, 3}, "step, request, position"),
                                {M, 3}, logits_index.data()));

  if (route_k > 0) {
    const int64_t R = static_cast<int64_t>(routing_index.size() / 4), k = route_k;
    sum.routing_rows = R;
    RETURN_IF_ERROR(write_npy_i32(file("routing.chosen.npy", "<i4", {R, k}, "router top-k"), {R, k},
                                  chosen.data()));
    RETURN_IF_ERROR(
        write_npy_i32(file("routing.experts.npy", "<i4", {R, k}, "experts used; -1 dropped"),
                      {R, k}, experts.data()));
    RETURN_IF_ERROR(write_npy_f32(file("routing.gates.npy", "<f4", {R, k}, "gate weights"), {R, k},
                                  gates.data()));
    RETURN_IF_ERROR(
        write_npy_i32(file("routing.outcome.npy", "<i4", {R, k}, "0 kept, 1 rerouted, 2 dropped"),
                      {R, k}, outcome.data()));
    RETURN_IF_ERROR(
        write_npy_i64(file("routing.index.npy", "<i8", {R, 4}, "step, layer, request, position"),
                      {R, 4}, routing_index.data()));
  }
  manifest["sites"] = sites;
  const std::string mp = dir + "/manifest.json";
  std::FILE* f = safeio::open_for_writing(mp.c_str());
  const std::string text = safeio::dump(manifest, 2) + "\n";
  bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f != nullptr) ok = std::fclose(f) == 0 && ok;
  if (!ok) return make_error(ErrorCode::kIo, mp + ": cannot write");
  sum.files.push_back(mp);
  return sum;
}

}  // namespace llmrr::replay
