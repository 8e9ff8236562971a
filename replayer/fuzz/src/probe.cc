// One fuzz run in process: the engine over a composition, an Observer that keeps only what
// the comparison needs of the target (id 0), and the comparison with its baseline.
#include <algorithm>
#include <string>
#include <vector>

#include "llmrr/replayer/fuzz.h"
#include "llmrr/runtime/memory_trace.h"

namespace llmrr::replay {
namespace {

constexpr RequestId kTarget = 0;

class TargetProbe final : public Observer {
 public:
  TargetProbe(TargetObservation* out, int32_t layers) : out_(out), layers_(layers) {}

  bool wants_rows(SiteId site) override {
    // Two hashes per row per layer: enough to tell the attention half from the MLP half.
    return site.kind == SiteKind::kAttnResid || site.kind == SiteKind::kLayerOut;
  }
  void on_step(const StepInfo& step) override {
    row_pos_.assign(static_cast<size_t>(step.rows), -1);
    int64_t row = 0;
    for (const BatchSegment& s : step.segments) {
      if (s.request == kTarget) {
        for (int32_t i = 0; i < s.count; ++i) row_pos_[static_cast<size_t>(row + i)] = s.start + i;
      }
      row += s.count;
    }
  }
  void on_rows(const RowsView& v) override {
    if (v.site.layer < 0 || v.site.layer >= layers_) return;
    for (int64_t r = 0; r < v.rows; ++r) {
      const int32_t pos = position(v.batch_rows ? v.batch_rows[r] : r);
      if (pos < 0) continue;
      uint64_t h = hash_row(v.data + r * v.ld, v.cols);
      TargetObservation::RowLayer& rl = layer(pos, v.site.layer);
      (v.site.kind == SiteKind::kAttnResid ? rl.attn : rl.out) = h;
    }
  }
  void on_routing(const RoutingView& v) override {
    if (v.layer < 0 || v.layer >= layers_) return;
    for (int64_t r = 0; r < v.rows; ++r) {
      const int32_t pos = position(v.batch_rows ? v.batch_rows[r] : r);
      if (pos < 0) continue;
      TargetObservation::RowLayer& rl = layer(pos, v.layer);
      rl.chosen.assign(v.chosen + r * v.k, v.chosen + (r + 1) * v.k);
      rl.experts.assign(v.experts + r * v.k, v.experts + (r + 1) * v.k);
      for (int32_t j = 0; j < v.k; ++j) {
        out_->dropped += v.outcome[r * v.k + j] == RouteOutcome::kDropped;
        out_->rerouted += v.outcome[r * v.k + j] == RouteOutcome::kRerouted;
      }
    }
  }
  void on_logits(const LogitsView& v) override {
    if (v.request == kTarget) out_->logits.push_back(hash_row(v.logits, v.vocab));
  }
  void on_token(const TokenEvent& t) override {
    if (t.request == kTarget) out_->tokens.push_back(t.token);
  }

 private:
  int32_t position(int64_t batch_row) const {
    if (batch_row < 0 || batch_row >= static_cast<int64_t>(row_pos_.size())) return -1;
    return row_pos_[static_cast<size_t>(batch_row)];
  }
  TargetObservation::RowLayer& layer(int32_t pos, int32_t l) {
    std::vector<TargetObservation::RowLayer>& v = out_->rows[pos];
    if (v.empty()) v.resize(static_cast<size_t>(layers_));
    return v[static_cast<size_t>(l)];
  }

  TargetObservation* out_;
  int32_t layers_;
  std::vector<int32_t> row_pos_;
};

}  // namespace

const char* fuzz_verdict_name(FuzzVerdict v) {
  switch (v) {
    case FuzzVerdict::kIdentical: return "identical";
    case FuzzVerdict::kNumerical: return "numerical";
    case FuzzVerdict::kVisible: return "visible";
  }
  return "?";
}

Result<TargetObservation> run_composition(const FuzzEngine& fe, const FuzzTarget& target,
                                          const Composition& c, bool solo,
                                          const std::vector<Observer*>& observers) {
  if (!fe.model) return make_error(ErrorCode::kInvalidArgument, "fuzz: no model");
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                   Engine::create(*fe.model, fe.config_for(c), fe.make_policy()));
  TargetObservation obs;
  TargetProbe probe(&obs, engine->model_config().layers);
  engine->add_observer(&probe);
  for (Observer* o : observers) engine->add_observer(o);
  for (const RequestSpec& r : composition_requests(target, c, solo)) {
    RETURN_IF_ERROR(engine->add_request(r));
  }
  RETURN_IF_ERROR(engine->run());
  return obs;
}

FuzzComparison compare_with_baseline(const TargetObservation& base, const TargetObservation& run) {
  FuzzComparison cmp;
  const size_t nl = std::min(base.logits.size(), run.logits.size());
  for (size_t i = 0; i < nl; ++i) {
    if (base.logits[i] != run.logits[i]) {
      cmp.numerical_token = static_cast<int32_t>(i);
      break;
    }
  }
  const size_t nt = std::min(base.tokens.size(), run.tokens.size());
  for (size_t i = 0; i < nt; ++i) {
    if (base.tokens[i] != run.tokens[i]) {
      cmp.visible_token = static_cast<int32_t>(i);
      break;
    }
  }
  if (cmp.visible_token < 0 && base.tokens.size() != run.tokens.size()) {
    cmp.visible_token = static_cast<int32_t>(nt);  // one stopped at EOS earlier
  }
  if (cmp.visible_token >= 0) {
    cmp.verdict = FuzzVerdict::kVisible;
    // A token differs only after the logits did (or, at EOS, at the same index).
    if (cmp.numerical_token < 0 || cmp.numerical_token > cmp.visible_token) {
      cmp.numerical_token = cmp.visible_token;
    }
  } else if (cmp.numerical_token >= 0) {
    cmp.verdict = FuzzVerdict::kNumerical;
  } else {
    return cmp;
  }
  // The cause at the first differing row, as diff names it (see fuzz.h).
  for (const auto& [pos, layers] : base.rows) {
    auto it = run.rows.find(pos);
    if (it == run.rows.end()) continue;
    const auto& other = it->second;
    for (size_t l = 0; l < layers.size() && l < other.size(); ++l) {
      const TargetObservation::RowLayer& a = layers[l];
      const TargetObservation::RowLayer& b = other[l];
      std::string cause;
      if (a.attn != b.attn) {
        cause = "plan";
      } else if (a.experts != b.experts) {
        cause = a.chosen == b.chosen ? "capacity" : "routing";
      } else if (a.out != b.out) {
        cause = "plan";
      }
      if (!cause.empty()) {
        cmp.cause = cause;
        cmp.cause_position = pos;
        cmp.cause_layer = static_cast<int32_t>(l);
        return cmp;
      }
    }
  }
  cmp.cause = "plan";  // every layer agrees: the final norm or the lm_head plan
  return cmp;
}

}  // namespace llmrr::replay
