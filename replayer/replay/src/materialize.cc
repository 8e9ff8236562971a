// Materialization: --materialize SITE@STEP parsed, and the Materializer, the Observer that
// collects those rows during a replay and writes them as .npy files (replay.cc runs the replay).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "internal.h"
#include "llmrr/replayer/npy.h"
#include "llmrr/replayer/replay.h"

namespace llmrr::replay {
namespace replay_internal {

bool Materializer::wants_rows(SiteId site) {
  for (const MaterializeSpec& s : specs_) {
    if (s.step == step_ && s.site == site) return true;
  }
  return false;
}

void Materializer::on_rows(const RowsView& v) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].step != v.step || !(specs_[i].site == v.site)) continue;
    Got& g = got_[i];
    g.cols = v.cols;
    g.seen = true;
    for (int64_t r = 0; r < v.rows; ++r) {
      g.rows.push_back(v.batch_rows ? v.batch_rows[r] : static_cast<int32_t>(r));
      g.data.insert(g.data.end(), v.data + r * v.ld, v.data + r * v.ld + v.cols);
    }
  }
}

void Materializer::on_step_end(int64_t step) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].step != step || !got_[i].seen || got_[i].written || !status_.ok()) continue;
    status_ = write(i);
  }
}

// After the replay: the files written, or why not.
Status Materializer::finish(std::vector<std::string>* written) {
  RETURN_IF_ERROR(status_);
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (!got_[i].written) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--materialize " + site_name(specs_[i].site) + "@" +
                            std::to_string(specs_[i].step) +
                            ": the replay produced no rows of that site at that step (no such "
                            "step, or the site does not run there: e.g. an expert no row was "
                            "routed to, or a dense site of an MoE layer)");
    }
    written->push_back(got_[i].file);
    written->push_back(got_[i].rows_file);
  }
  return Status::Ok();
}

Status Materializer::write(size_t i) {
  Got& g = got_[i];
  // Batch row order.
  std::vector<size_t> order(g.rows.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return g.rows[a] < g.rows[b]; });
  std::vector<float> data(g.data.size());
  std::vector<int32_t> rows(g.rows.size());
  for (size_t j = 0; j < order.size(); ++j) {
    rows[j] = g.rows[order[j]];
    std::copy_n(g.data.begin() + order[j] * g.cols, g.cols, data.begin() + j * g.cols);
  }
  std::string base = dir_ + "/" + materialize_file_name(specs_[i]);
  g.file = base;
  g.rows_file = base.substr(0, base.size() - 4) + ".rows.npy";
  const int64_t n = static_cast<int64_t>(rows.size());
  RETURN_IF_ERROR(write_npy_f32(g.file, {n, g.cols}, data.data()));
  RETURN_IF_ERROR(write_npy_i32(g.rows_file, {n}, rows.data()));
  g.written = true;
  std::vector<float>().swap(g.data);
  return Status::Ok();
}

}  // namespace replay_internal

Result<MaterializeSpec> parse_materialize(std::string_view text) {
  size_t at = text.rfind('@');
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--materialize '" + std::string(text) + "': " + why +
                          " (expected SITE@STEP, e.g. L3.mlp.down@17 or logits@17)");
  };
  if (at == std::string_view::npos || at == 0 || at + 1 == text.size()) return bad("no @STEP");
  std::optional<SiteId> site = parse_site(text.substr(0, at));
  if (!site) return bad("unknown site '" + std::string(text.substr(0, at)) + "'");
  int64_t step = 0;
  for (char c : text.substr(at + 1)) {
    if (c < '0' || c > '9' || step > (int64_t{1} << 50)) return bad("step is not a number");
    step = step * 10 + (c - '0');
  }
  return MaterializeSpec{*site, step};
}

std::string materialize_file_name(const MaterializeSpec& spec) {
  return site_name(spec.site) + "@" + std::to_string(spec.step) + ".npy";
}

}  // namespace llmrr::replay
