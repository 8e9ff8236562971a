// Deterministic, realistic-looking trace records for tests, golden files, fuzz seeds and
// benchmarks: a small MoE run with requests arriving, prefill then decode, plans that
// change with the batch shape, fingerprints, routing, logits and tokens.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "llmrr/format/fingerprint.h"
#include "llmrr/format/records.h"

namespace llmrr::trace::testing {

// Portable randomness: std::mt19937_64 is specified bit for bit by the standard, and the
// "Gaussian" is Irwin–Hall (four uniforms), plain arithmetic, so the records — and the
// committed golden traces made from them — are the same with any compiler and libm.
inline float uniform01(std::mt19937_64& rng) {
  return static_cast<float>(static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0));
}
inline float gaussian(std::mt19937_64& rng) {
  const float s = uniform01(rng) + uniform01(rng) + uniform01(rng) + uniform01(rng);
  return (s - 2.0f) * 1.7320508f;
}

// Packed SiteId as format/site.h defines it: kind | (layer+1) << 8 | (expert+1) << 24.
inline uint64_t site(int kind, int layer = -1, int expert = -1) {
  return static_cast<uint64_t>(kind) | static_cast<uint64_t>(layer + 1) << 8 |
         static_cast<uint64_t>(expert + 1) << 24;
}

inline RunHeader sample_header(const std::string& run_id = "run-0001") {
  RunHeader h;
  h.tool_version = "0.1.0";
  h.created_unix_ns = 1733140000000000000LL;
  h.run_id = run_id;
  h.host = {"testhost", "Linux 6.1.0 x86_64", "Test CPU @ 3.0GHz", 2, "avx2"};
  h.device.kind = "cpu";
  h.model.name = "builtin:tiny-moe";
  h.model.path = "";
  h.model.architecture = "qwen2_moe";
  h.model.weight_hash = "xxh3-64:0123456789abcdef";
  h.model.weight_dtype = "bf16";
  h.model.compute_dtype = "f32";
  h.model.layers = 2;
  h.model.hidden = 64;
  h.model.vocab = 512;
  h.model.heads = 4;
  h.model.kv_heads = 2;
  h.model.experts = 8;
  h.model.experts_per_token = 2;
  h.engine.policy = "production";
  h.engine.virtual_sms = 132;
  h.engine.blocks_per_sm = 2;
  h.engine.threads = 2;
  h.engine.max_batch_tokens = 256;
  h.engine.max_seqs = 8;
  h.engine.prefill_chunk = 64;
  h.engine.kv_block_size = 16;
  h.engine.capacity_factor = 1.25f;
  h.engine.overflow = OverflowPolicy::kNextBest;
  h.engine.atomics = false;
  h.engine.seed = 42;
  h.engine.load = 3;
  h.engine.capture = CaptureLevel::kLayers;
  h.engine.logits_mode = LogitsMode::kTopK;
  h.engine.top_k = 8;
  h.extra_config_json = R"({"note":"sample"})";
  h.command_line = "llmrr record --model builtin:tiny-moe -o run.trace";
  return h;
}

inline PlanRecord gemm_plan(uint32_t splits, uint32_t k_tile = 0) {
  PlanRecord p;
  p.op = OpKind::kGemm;
  p.splits = splits;
  p.k_tile = k_tile;
  return p;
}

// Generates a run step by step. Requests arrive at steps 0, 0, 2, 5, ...; each prefills in
// one step then decodes `max_tokens` tokens.
class SampleRun {
 public:
  explicit SampleRun(uint64_t seed = 1, int requests = 4, int max_tokens = 6, int layers = 2,
                     int vocab = 512, int top_k = 8, int hidden = 64)
      : rng_(seed), layers_(layers), vocab_(vocab), top_k_(top_k), hidden_(hidden) {
    for (int i = 0; i < requests; ++i) {
      Req r;
      r.spec.id = 100 + static_cast<uint64_t>(i);
      const int len = 3 + static_cast<int>(rng_() % 12);
      for (int t = 0; t < len; ++t) r.spec.prompt.push_back(static_cast<int32_t>(rng_() % vocab));
      r.spec.temperature = i % 2 ? 0.7f : 0.0f;
      r.spec.top_k = i % 2 ? 40 : 0;
      r.spec.top_p = i % 2 ? 0.9f : 1.0f;
      r.spec.seed = 1000 + i;
      r.spec.max_tokens = max_tokens;
      r.spec.arrival_step = i < 2 ? 0 : 2 + 3 * (i - 2);
      r.spec.label = i == 0 ? "target" : "load-" + std::to_string(i);
      reqs_.push_back(r);
    }
  }

  bool done() const {
    for (const Req& r : reqs_)
      if (!r.finished) return false;
    return true;
  }

  // The next step (step numbers may skip: every 7th is skipped to exercise gaps).
  StepRecord next() {
    StepRecord s;
    if (step_ % 7 == 6) ++step_;
    s.step = step_;
    for (Req& r : reqs_) {
      if (!r.arrived && r.spec.arrival_step <= step_) {
        r.arrived = true;
        s.arrivals.push_back(r.spec);
      }
    }
    for (Req& r : reqs_) {
      if (!r.arrived || r.finished) continue;
      Segment g;
      g.request = r.spec.id;
      if (r.pos == 0) {
        g.start = 0;
        g.count = static_cast<int32_t>(r.spec.prompt.size());
        g.cached = 0;
        g.kind = SegmentKind::kPrefill;
      } else {
        g.start = r.pos;
        g.count = 1;
        g.cached = r.pos;
        g.kind = SegmentKind::kDecode;
      }
      g.sample = true;
      s.segments.push_back(g);
    }
    const int64_t rows = s.row_count();
    // Plans follow the batch shape: split-K 4 below 8 rows, else 1 (production-like).
    const uint32_t splits = rows < 8 ? 4 : 1;
    for (int l = 0; l < layers_; ++l) {
      s.plans.push_back({site(2, l), gemm_plan(splits)});
      s.plans.push_back({site(6, l), gemm_plan(splits, 64)});
      PlanRecord norm;
      norm.op = OpKind::kRmsNorm;
      norm.splits = rows < 4 ? 2 : 1;
      s.plans.push_back({site(1, l), norm});
      PlanRecord attn;
      attn.op = OpKind::kAttention;
      attn.mode = SplitMode::kSize;
      attn.split_size = 256;
      s.plans.push_back({site(5, l), attn});
      PlanRecord comb;
      comb.op = OpKind::kCombine;
      s.plans.push_back({site(22, l), comb});
    }
    s.plans.push_back({site(25), gemm_plan(splits)});
    // Fingerprints at layer outputs, all rows.
    auto g01 = [](std::mt19937_64& r) { return gaussian(r); };
    std::vector<float> row(static_cast<size_t>(hidden_));
    for (int l = 0; l < layers_; ++l) {
      SiteRows sr;
      sr.site = site(23, l);
      sr.cols = hidden_;
      for (int64_t r = 0; r < rows; ++r) {
        for (float& x : row) x = g01(rng_);
        sr.rows.push_back(fingerprint_row(row.data(), hidden_));
      }
      s.rows.push_back(std::move(sr));
    }
    // An expert site with a subset of rows.
    if (rows > 1) {
      SiteRows sr;
      sr.site = site(17, 0, 3);
      sr.cols = hidden_;
      for (int64_t r = 0; r < rows; r += 2) {
        for (float& x : row) x = g01(rng_);
        sr.batch_rows.push_back(static_cast<int32_t>(r));
        sr.rows.push_back(fingerprint_row(row.data(), hidden_));
      }
      s.rows.push_back(std::move(sr));
    }
    // Routing per layer.
    for (int l = 0; l < layers_; ++l) {
      Routing ro;
      ro.layer = l;
      ro.rows = static_cast<int32_t>(rows);
      ro.k = 2;
      ro.experts_total = 8;
      ro.capacity = static_cast<int32_t>((rows * 2 * 5 + 31) / 32);
      for (int64_t r = 0; r < rows; ++r) {
        const int a = static_cast<int>(rng_() % 8);
        const int b = (a + 1 + static_cast<int>(rng_() % 7)) % 8;
        for (int e : {a, b}) {
          ro.chosen.push_back(e);
          const uint32_t roll = static_cast<uint32_t>(rng_() % 20);
          if (roll == 0) {
            ro.experts.push_back(-1);
            ro.outcome.push_back(RouteOutcome::kDropped);
          } else if (roll == 1) {
            ro.experts.push_back((e + 2) % 8);
            ro.outcome.push_back(RouteOutcome::kRerouted);
          } else {
            ro.experts.push_back(e);
            ro.outcome.push_back(RouteOutcome::kKept);
          }
          ro.gates.push_back(0.5f + 0.25f * g01(rng_) * 0.1f);
        }
      }
      s.routing.push_back(std::move(ro));
    }
    // Logits + token per sampled row.
    int64_t batch_row = 0;
    std::vector<float> logits(static_cast<size_t>(vocab_));
    for (const Segment& g : s.segments) {
      batch_row += g.count;
      Req& r = find(g.request);
      for (float& x : logits) x = 2.0f * g01(rng_);
      LogitsRecord lr;
      lr.request = g.request;
      lr.position = g.start + g.count - 1;
      lr.batch_row = static_cast<int32_t>(batch_row - 1);
      lr.vocab = vocab_;
      std::vector<int32_t> ids(static_cast<size_t>(vocab_));
      for (int i = 0; i < vocab_; ++i) ids[static_cast<size_t>(i)] = i;
      std::partial_sort(ids.begin(), ids.begin() + top_k_, ids.end(), [&](int32_t a, int32_t b) {
        return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
               (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
      });
      for (int i = 0; i < top_k_; ++i) {
        lr.top_ids.push_back(ids[static_cast<size_t>(i)]);
        lr.top_values.push_back(logits[static_cast<size_t>(ids[static_cast<size_t>(i)])]);
      }
      lr.full = fingerprint_row(logits.data(), vocab_);
      lr.margin = lr.top_values[0] - lr.top_values[1];
      s.logits.push_back(std::move(lr));
      TokenRecord t;
      t.request = g.request;
      t.position = g.start + g.count;
      t.token = s.logits.back().top_ids[0];
      t.uniform = r.spec.temperature > 0
                      ? static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0)
                      : -1.0;
      s.tokens.push_back(t);
      r.pos = g.start + g.count;
      ++r.generated;
      if (r.generated >= r.spec.max_tokens) {
        r.finished = true;
        s.finishes.push_back({g.request, FinishReason::kMaxTokens, r.generated});
      }
    }
    ++step_;
    return s;
  }

  std::vector<StepRecord> all() {
    std::vector<StepRecord> v;
    while (!done()) v.push_back(next());
    return v;
  }

 private:
  struct Req {
    RequestRecord spec;
    bool arrived = false;
    bool finished = false;
    int32_t pos = 0;
    int32_t generated = 0;
  };
  Req& find(uint64_t id) {
    for (Req& r : reqs_)
      if (r.spec.id == id) return r;
    return reqs_[0];
  }

  std::mt19937_64 rng_;
  int layers_, vocab_, top_k_, hidden_;
  std::vector<Req> reqs_;
  int64_t step_ = 0;
};

// Logit-like values: a fixed-seed Gaussian body plus a softmax-like tail of a few large
// values (what an LM head produces), not constant arrays.
inline std::vector<float> logit_like(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = -2.0f + 2.5f * gaussian(rng);
  for (size_t i = 0; i < n / 200 + 1; ++i) v[rng() % n] = 8.0f + 4.0f * std::fabs(gaussian(rng));
  return v;
}

}  // namespace llmrr::trace::testing
