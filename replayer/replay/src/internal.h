// Internal to the replay sources (replay.h is the public face): what replay.cc (replay_trace
// and its verifying Observer), materialize.cc (the Materializer) and report.cc (the report as
// text and JSON) share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/replayer/replay.h"
#include "llmrr/runtime/observer.h"

namespace llmrr::replay::replay_internal {

inline std::string ints_text(const int32_t* v, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// Collects the rows of the requested (site, step)s and writes them as .npy files
// (materialize.cc).
class Materializer final : public Observer {
 public:
  Materializer(std::vector<MaterializeSpec> specs, std::string dir)
      : specs_(std::move(specs)), dir_(std::move(dir)), got_(specs_.size()) {}

  bool wants_rows(SiteId site) override;
  void on_step(const StepInfo& info) override { step_ = info.step; }
  void on_rows(const RowsView& v) override;
  void on_step_end(int64_t step) override;

  // After the replay: the files written, or why not.
  Status finish(std::vector<std::string>* written);

 private:
  struct Got {
    bool seen = false, written = false;
    int64_t cols = 0;
    std::vector<int32_t> rows;
    std::vector<float> data;
    std::string file, rows_file;
  };

  Status write(size_t i);

  std::vector<MaterializeSpec> specs_;
  std::string dir_;
  std::vector<Got> got_;
  int64_t step_ = -1;
  Status status_;
};

}  // namespace llmrr::replay::replay_internal
