#include "tape.h"

#include <algorithm>
#include <climits>
#include <cstdio>

namespace llmrr::llamacpp {

Tape::Tape(llmrr_recorder* rec, int32_t n_vocab, std::vector<int32_t> eog_tokens,
           int32_t max_tokens)
    : rec_(rec), n_vocab_(n_vocab), max_tokens_(max_tokens > 0 ? max_tokens : 1),
      eog_(std::move(eog_tokens)) {
  std::sort(eog_.begin(), eog_.end());
}

bool Tape::eog(int32_t token) const { return std::binary_search(eog_.begin(), eog_.end(), token); }

void Tape::lossy(const std::string& why) {
  static bool warned = false;
  if (!warned) {
    std::fprintf(stderr, "llmrr: llama.cpp recording is lossy: %s\n", why.c_str());
    warned = true;
  }
  llmrr_recorder_mark_lossy(rec_, why.c_str());
}

Tape::Seq& Tape::seq(int32_t s) { return seqs_[s]; }

void Tape::decoded(const std::vector<BatchRow>& rows, const std::vector<const float*>& row_logits,
                   std::vector<SiteFingerprints> sites, std::vector<OpInfo> ops) {
  check_cuts(rows);
  auto step = std::make_shared<TapeStep>();
  step->sites = std::move(sites);
  step->ops = std::move(ops);
  std::vector<int64_t> present;
  last_rows_.assign(rows.size(), {-1, -1});
  std::vector<char> decode_row(rows.size(), 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const BatchRow& row = rows[i];
    if (row.n_seq != 1 && row.n_seq > 1)
      lossy("batch row " + std::to_string(i) + " belongs to " + std::to_string(row.n_seq) +
            " sequences; it is recorded for the first only");
    Seq& s = seq(row.seq);
    int64_t r = s.request;
    const bool next = row.pos == static_cast<int32_t>(s.tokens.size());
    if (r >= 0 && !next) {
      end_request(r, false);
      r = -1;
    }
    if (r >= 0 && requests_[r].pending_pos >= 0) {
      resolve_token(requests_[r], row.token);
      decode_row[i] = 1;
    }
    if (r < 0) {
      // A new request on this sequence: positions before row.pos are reused from its memory.
      if (row.pos < 0) {
        lossy("batch row " + std::to_string(i) + " has position " + std::to_string(row.pos));
        continue;
      }
      if (static_cast<size_t>(row.pos) > s.tokens.size()) {
        lossy("sequence " + std::to_string(row.seq) + " continues at position " +
              std::to_string(row.pos) + " past the " + std::to_string(s.tokens.size()) +
              " positions seen; the earlier tokens are unknown (recorded as 0)");
        s.tokens.resize(row.pos, -1);
      }
      s.tokens.resize(row.pos);
      Request q;
      q.id = next_id_++;
      q.seq = row.seq;
      q.cached = row.pos;
      requests_.push_back(std::move(q));
      r = static_cast<int64_t>(requests_.size()) - 1;
      s.request = r;
      step->arrivals.push_back(requests_[r].id);
    }
    Request& q = requests_[r];
    s.tokens.push_back(row.token);
    q.last_step = step;
    present.push_back(r);
    last_rows_[i] = {r, row.pos};
    // Segment: consecutive batch rows of one request at consecutive positions.
    if (!step->segments.empty() && i > 0 && last_rows_[i - 1].first == r &&
        step->segments.back().start + step->segments.back().count == row.pos) {
      step->segments.back().count += 1;
    } else {
      llmrr_segment g{};
      g.request = q.id;
      g.start = row.pos;
      g.count = 1;
      g.cached = row.pos;
      g.kind = LLMRR_SEGMENT_PREFILL;
      g.sample = 0;
      step->segments.push_back(g);
    }
    if (decode_row[i]) step->segments.back().kind = LLMRR_SEGMENT_DECODE;

    if (!row.logits) continue;
    const bool seg_last = i + 1 >= rows.size() || rows[i + 1].seq != row.seq ||
                          rows[i + 1].pos != row.pos + 1;
    if (!seg_last) {
      lossy("batch row " + std::to_string(i) + " wants logits but is not the last row of its "
            "request's rows in the batch; its logits are not recorded");
      continue;
    }
    step->segments.back().sample = 1;
    if (!q.prompt_known) {
      q.prompt.assign(s.tokens.begin(), s.tokens.end());
      for (int32_t& t : q.prompt)
        if (t < 0) t = 0;
      q.prompt_known = true;
    }
    LogitsRow lr{q.id, row.pos, static_cast<int32_t>(i), {}};
    if (row_logits[i] != nullptr) lr.values.assign(row_logits[i], row_logits[i] + n_vocab_);
    step->logits.push_back(std::move(lr));
    q.pending_step = step;
    q.pending_pos = row.pos;
    q.pending_token = -1;
    step->unresolved += 1;
  }
  for (llmrr_segment& g : step->segments)
    if (g.count != 1) g.kind = LLMRR_SEGMENT_PREFILL;
  // A request whose sampled token the sampler accepted but the program did not feed back in
  // this decode has stopped (llama-server decodes every generating slot in each batch).
  std::sort(present.begin(), present.end());
  for (size_t r = 0; r < requests_.size(); ++r) {
    Request& q = requests_[r];
    if (q.finished || q.pending_pos < 0 || q.pending_token < 0 || q.pending_step == step) continue;
    if (!std::binary_search(present.begin(), present.end(), static_cast<int64_t>(r))) {
      end_request(static_cast<int64_t>(r), false);
      Seq& s = seq(q.seq);
      if (s.request == static_cast<int64_t>(r)) s.request = -1;
    }
  }
  tape_.push_back(step);
  flush();
}

void Tape::resolve_token(Request& q, int32_t token) {
  if (q.pending_pos < 0) return;
  TapeStep& st = *q.pending_step;
  if (forced_ && q.pending_token >= 0) {
    token = q.pending_token;
  } else if (q.pending_token >= 0 && q.pending_token != token) {
    lossy("request " + std::to_string(q.id) + ": the sampler accepted token " +
          std::to_string(q.pending_token) + " at position " + std::to_string(q.pending_pos + 1) +
          " but the program decoded token " + std::to_string(token) + " there");
  }
  if (token >= 0) {
    st.tokens.push_back({q.id, q.pending_pos + 1, token});
    q.generated += 1;
    q.last_token = token;
    any_sampled_ = true;
  }
  st.unresolved -= 1;
  q.pending_step.reset();
  q.pending_pos = -1;
  q.pending_token = -1;
}

void Tape::accepted(int32_t row, int32_t token) {
  if (row < 0 || static_cast<size_t>(row) >= last_rows_.size()) return;
  const auto [r, pos] = last_rows_[row];
  if (r < 0) return;
  Request& q = requests_[r];
  if (!q.finished && q.pending_pos == pos && q.pending_token < 0) q.pending_token = token;
}

void Tape::end_request(int64_t r, bool by_clear) {
  Request& q = requests_[r];
  if (q.finished) return;
  if (q.pending_pos >= 0) {
    if (q.pending_token >= 0)
      resolve_token(q, q.pending_token);  // the last token: sampled, never decoded
    else
      resolve_token(q, -1);
  }
  int32_t reason;
  if (!q.prompt_known) {
    const Seq& s = seqs_[q.seq];
    q.prompt.assign(s.tokens.begin(), s.tokens.end());
    for (int32_t& t : q.prompt)
      if (t < 0) t = 0;
    q.prompt_known = true;
    reason = LLMRR_FINISH_ABORTED;
  } else {
    reason = q.generated > 0 && eog(q.last_token) ? LLMRR_FINISH_EOS : LLMRR_FINISH_MAX_TOKENS;
  }
  q.finished = true;
  q.probe = q.generated == 0 && !any_sampled_;
  (void)by_clear;
  if (q.last_step) {
    if (q.last_step->written)
      lossy("request " + std::to_string(q.id) + " ended after its last step was written; its "
            "finish is not recorded");
    else
      q.last_step->finishes.push_back({q.id, reason, q.generated});
  }
  q.last_step.reset();
  Seq& s = seqs_[q.seq];
  if (s.request == r) s.request = -1;
}

void Tape::memory_diverges(const std::string& call, const std::string& why) {
  if (!unrepeatable_.empty()) return;
  unrepeatable_ = "before step " + std::to_string(written_ + static_cast<int64_t>(tape_.size())) +
                  ", " + call + " " + why;
  lossy(unrepeatable_ + ": where the rows decoded after it sit in the KV cache, and so the order "
        "attention sums over them, is not in the trace, and a replay may differ from that step "
        "on (llama-server keeps to the memory calls a replay repeats with --no-cache-idle-slots "
        "--cache-ram 0)");
}

void Tape::check_cuts(const std::vector<BatchRow>& rows) {
  std::map<int32_t, int32_t> first;  // sequence -> position of its first row in the batch
  for (const BatchRow& r : rows) first.emplace(r.seq, r.pos);
  const bool probing = !any_sampled_;  // a warmup or probe: llama_memory_clear follows
  for (const auto& [sid, p0] : cuts_) {
    auto it = first.find(sid);
    if (probing || (it != first.end() && it->second == p0)) continue;
    memory_diverges("llama_memory_seq_rm(" + std::to_string(sid) + ", " + std::to_string(p0) +
                        ", -1)",
                    it == first.end()
                        ? "freed KV cells of a sequence the next decode does not continue "
                          "(llama-server does so to idle slots with --cache-idle-slots, its default)"
                        : "freed KV cells of a sequence the next decode continues at position " +
                              std::to_string(it->second) + ", not there");
    break;
  }
  cuts_.clear();
  if (probing) return;
  // A replay cuts a sequence back where each of its requests starts; where the program did
  // not, the replay would free cells the program kept.
  for (const auto& [sid, p] : first) {
    auto s = seqs_.find(sid);
    if (s == seqs_.end() || p < 0 || static_cast<size_t>(p) >= s->second.tokens.size()) continue;
    memory_diverges("a decode at position " + std::to_string(p) + " of sequence " +
                        std::to_string(sid),
                    "wrote over " + std::to_string(s->second.tokens.size() - p) +
                        " positions the sequence still held (no llama_memory_seq_rm before it; "
                        "a replay removes them)");
    break;
  }
}

void Tape::seq_rm(int32_t sid, int32_t p0, int32_t p1) {
  auto apply = [&](int32_t id, Seq& s) {
    const int32_t n = static_cast<int32_t>(s.tokens.size());
    const int32_t a = p0 < 0 ? 0 : p0;
    const int32_t b = p1 < 0 ? INT_MAX : p1;
    if (a >= n || a >= b) return;
    if (s.request >= 0) end_request(s.request, false);
    if (b >= n) {
      s.tokens.resize(a);
      auto [it, added] = cuts_.emplace(id, a);
      if (!added) it->second = std::min(it->second, a);
    } else {
      for (int32_t p = a; p < b; ++p) s.tokens[p] = -1;
      if (any_sampled_)
        memory_diverges("llama_memory_seq_rm(" + std::to_string(id) + ", " + std::to_string(p0) +
                            ", " + std::to_string(p1) + ")",
                        "freed KV cells inside the sequence (a replay cuts sequences only at "
                        "their ends)");
    }
  };
  if (sid < 0) {
    for (auto& [id, s] : seqs_) apply(id, s);
  } else {
    apply(sid, seq(sid));
  }
  flush();
}

void Tape::seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
  if (src == dst) return;
  Seq& d = seq(dst);
  if (d.request >= 0) end_request(d.request, false);
  const std::vector<int32_t> from = seq(src).tokens;
  const int32_t a = p0 < 0 ? 0 : p0;
  const int32_t b = std::min<int32_t>(p1 < 0 ? INT_MAX : p1, static_cast<int32_t>(from.size()));
  if (a < b && any_sampled_)
    memory_diverges("llama_memory_seq_cp(" + std::to_string(src) + ", " + std::to_string(dst) +
                        ", " + std::to_string(p0) + ", " + std::to_string(p1) + ")",
                    "shared KV cells between sequences");
  if (d.tokens.size() < static_cast<size_t>(std::max(a, b))) d.tokens.resize(std::max(a, b), -1);
  for (int32_t p = a; p < b; ++p) d.tokens[p] = from[p];
  flush();
}

void Tape::seq_keep(int32_t keep) {
  for (auto& [id, s] : seqs_) {
    if (id == keep) continue;
    if (!s.tokens.empty() && any_sampled_)
      memory_diverges("llama_memory_seq_keep(" + std::to_string(keep) + ")",
                      "freed the KV cells of sequence " + std::to_string(id));
    if (s.request >= 0) end_request(s.request, false);
    s.tokens.clear();
  }
  flush();
}

void Tape::seq_shift(int32_t sid, const char* what) {
  Seq& s = seq(sid);
  if (s.request >= 0) end_request(s.request, false);
  if (!s.tokens.empty())
    lossy(std::string(what) + " on sequence " + std::to_string(sid) +
          ": its positions moved (context shift); the requests that reuse them are recorded "
          "with unknown (0) prompt tokens");
  std::fill(s.tokens.begin(), s.tokens.end(), -1);
  flush();
}

void Tape::clear() {
  if (any_sampled_) memory_diverges("llama_memory_clear", "emptied the KV cache");
  cuts_.clear();
  for (auto& [id, s] : seqs_) {
    if (s.request >= 0) end_request(s.request, true);
    s.tokens.clear();
  }
  flush();
}

std::vector<int32_t> Tape::seq_tokens(int32_t sid) const {
  auto it = seqs_.find(sid);
  return it == seqs_.end() ? std::vector<int32_t>{} : it->second.tokens;
}

void Tape::set_seq_tokens(int32_t sid, std::vector<int32_t> tokens) {
  memory_diverges("llama_state_seq_set_data_ext(sequence " + std::to_string(sid) + ")",
                  "restored a saved sequence into new KV cells (llama-server's prompt cache, "
                  "--cache-ram)");
  Seq& s = seq(sid);
  if (s.request >= 0) end_request(s.request, false);
  s.tokens = std::move(tokens);
  flush();
}

void Tape::finish_all() {
  for (size_t r = 0; r < requests_.size(); ++r) end_request(static_cast<int64_t>(r), false);
  flush();
  if (!tape_.empty()) {
    lossy(std::to_string(tape_.size()) + " decoded batches could not be completed at close");
    tape_.clear();
  }
}

void Tape::flush() {
  while (!tape_.empty()) {
    TapeStep& s = *tape_.front();
    if (s.unresolved > 0) return;
    for (const llmrr_segment& g : s.segments) {
      const Request& q = requests_[by_id(g.request)];
      if (!q.prompt_known) return;
    }
    write(s);
    s.written = true;
    tape_.erase(tape_.begin());
  }
}

int64_t Tape::by_id(uint64_t id) const { return static_cast<int64_t>(id); }

void Tape::write(TapeStep& s) {
  if (llmrr_recorder_status(rec_) != LLMRR_OK) return;
  bool all_probe = !s.segments.empty();
  for (const llmrr_segment& g : s.segments)
    if (!requests_[by_id(g.request)].probe) all_probe = false;
  if (all_probe) return;  // a warmup or capability probe before the first sampled token
  for (const llmrr_segment& g : s.segments) {
    Request& q = requests_[by_id(g.request)];
    if (q.added) continue;
    q.added = true;
    q.out_id = next_out_id_++;
    const std::string label = "llamacpp seq=" + std::to_string(q.seq);
    llmrr_request rq{};
    rq.id = q.out_id;
    rq.prompt = q.prompt.data();
    rq.prompt_len = q.prompt.size();
    rq.temperature = 0.0f;  // the program's sampler settings are not visible to libllama
    rq.top_k = 0;
    rq.top_p = 1.0f;
    rq.seed = 0;
    rq.max_tokens = max_tokens_;
    rq.arrival_step = written_;
    rq.stop_at_eos = 1;
    rq.label = label.c_str();
    llmrr_recorder_add_request(rec_, &rq);
  }
  std::vector<llmrr_segment> segments = s.segments;
  for (llmrr_segment& g : segments) g.request = requests_[by_id(g.request)].out_id;
  if (llmrr_recorder_begin_step(rec_, written_, segments.data(), segments.size()) != LLMRR_OK) {
    lossy(std::string("begin_step: ") + llmrr_recorder_last_error());
    return;
  }
  for (const SiteFingerprints& f : s.sites) {
    if (f.hashes.empty()) continue;
    llmrr_recorder_record_fingerprints(rec_, f.site.c_str(), f.hashes.data(), f.l2.data(),
                                       f.max_abs.data(), static_cast<int64_t>(f.hashes.size()),
                                       f.cols, f.batch_rows.data());
  }
  int64_t step_rows = 0;
  for (const llmrr_segment& g : segments) step_rows += g.count;
  for (const OpInfo& o : s.ops) {
    const bool rows_ok = int64_t{o.first_row} + o.rows <= step_rows;  // else: the whole step
    llmrr_recorder_record_op(rec_, o.layer, o.layers, o.graph, rows_ok ? o.first_row : 0,
                             rows_ok ? o.rows : 0, o.name.c_str(), o.op.c_str(),
                             o.attrs.c_str());
  }
  for (const LogitsRow& l : s.logits) {
    if (l.values.empty()) continue;
    llmrr_recorder_record_logits(rec_, requests_[by_id(l.request)].out_id, l.pos, l.batch_row,
                                 l.values.data(), LLMRR_DTYPE_F32,
                                 static_cast<int64_t>(l.values.size()));
  }
  for (const TapeStep::Token& t : s.tokens)
    llmrr_recorder_record_token(rec_, requests_[by_id(t.request)].out_id, t.pos, t.token, -1.0);
  for (const TapeStep::Finish& f : s.finishes)
    if (requests_[by_id(f.request)].added)
      llmrr_recorder_record_finish(rec_, requests_[by_id(f.request)].out_id, f.reason,
                                   f.generated);
  if (llmrr_recorder_end_step(rec_) != LLMRR_OK)
    lossy(std::string("end_step: ") + llmrr_recorder_last_error());
  ++written_;
}

}  // namespace llmrr::llamacpp
