// The llama.cpp recorder's bookkeeping, free of llama.cpp types: the batches a context decoded
// (rows of sequences at positions), what the program did to each sequence's memory, and the
// requests llmrr sees in them. Steps wait on a tape until what they need is known (a request's
// prompt is known at its first row that wants logits; a sampled token when it is fed back or
// accepted by the sampler), then go to the llmrr recorder in order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llmrr/recorder.h"

namespace llmrr::llamacpp {

// One row of a batch as the program built it.
struct BatchRow {
  int32_t token = -1;  // -1: an embedding row
  int32_t pos = 0;
  int32_t seq = 0;
  int32_t n_seq = 1;  // > 1: the row belongs to several sequences (recorded for the first)
  bool logits = false;
};

// Fingerprints of one site over a step's rows (filled by the graph callback).
struct SiteFingerprints {
  std::string site;
  int64_t cols = 0;
  std::vector<uint64_t> hashes;
  std::vector<float> l2, max_abs;
  std::vector<int32_t> batch_rows;
};

// What one op of a decode's graph ran with (llmrr_recorder_record_op; the graph callback
// takes them from the graph, the reductions only): consecutive layers whose op ran the same
// way share one record.
struct OpInfo {
  int32_t layer = -1, layers = 1;
  int32_t graph = 0;                 // the decode's ubatch, from 0
  int32_t first_row = 0, rows = 0;   // that ubatch's batch rows (rows 0: not known)
  std::string name, op, attrs;
};

struct LogitsRow {
  uint64_t request;
  int32_t pos;
  int32_t batch_row;
  std::vector<float> values;
};

struct TapeStep {
  std::vector<llmrr_segment> segments;
  std::vector<uint64_t> arrivals;  // requests whose first rows are in this step
  std::vector<SiteFingerprints> sites;
  std::vector<OpInfo> ops;
  std::vector<LogitsRow> logits;
  struct Token {
    uint64_t request;
    int32_t pos, token;
  };
  std::vector<Token> tokens;
  struct Finish {
    uint64_t request;
    int32_t reason, generated;
  };
  std::vector<Finish> finishes;
  int unresolved = 0;  // logits rows whose token is not known yet
  bool written = false;
};

class Tape {
 public:
  // rec: the open recorder (owned by the caller; may become unusable: status is checked).
  // max_tokens: what requests are recorded with (the program's own limit is not visible to
  // libllama; the context size bounds it).
  Tape(llmrr_recorder* rec, int32_t n_vocab, std::vector<int32_t> eog_tokens, int32_t max_tokens);

  // A decode the program made (rows in batch order), after it succeeded: row_logits[i] is the
  // logits of batch row i (nullptr for rows that want none), sites the fingerprints the graph
  // callback took during it, ops what its graphs ran with.
  void decoded(const std::vector<BatchRow>& rows, const std::vector<const float*>& row_logits,
               std::vector<SiteFingerprints> sites, std::vector<OpInfo> ops = {});

  // The sampler accepted `token` right after the program read the logits of batch row `row`
  // of the last decode.
  void accepted(int32_t row, int32_t token);

  // Memory calls on the recorded context.
  void seq_rm(int32_t seq, int32_t p0, int32_t p1);
  void seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1);
  void seq_keep(int32_t seq);
  void seq_shift(int32_t seq, const char* what);  // seq_add / seq_div: positions change
  void clear();
  // The sequence's tokens as the program saved them with its state / restored them.
  std::vector<int32_t> seq_tokens(int32_t seq) const;
  void set_seq_tokens(int32_t seq, std::vector<int32_t> tokens);

  // Where a decode's rows land in the KV cache (and so the order attention sums them in)
  // follows every memory call since the context was made. A replay (llmrr-llamacpp-replay)
  // repeats the recorded decodes and one memory call: before a request's first rows, its
  // sequence is cut back to where the request starts. Any other call that frees, copies or
  // restores cells is not in the trace: the first one marks the trace lossy, naming it.
  // Empty while every memory call so far is one the replay repeats.
  const std::string& unrepeatable() const { return unrepeatable_; }

  // Ends every request and writes every step still on the tape.
  void finish_all();

  void lossy(const std::string& why);
  // Replays feed the recorded tokens whatever the sampler chose: the token recorded for a row
  // is then the sampler's choice (the one accepted), not the one fed.
  void set_forced(bool forced) { forced_ = forced; }
  // The first step and request id written (a replay of a slice numbers as the slice does).
  void set_numbering(int64_t first_step, uint64_t first_id) {
    written_ = first_step;
    next_out_id_ = first_id;
  }
  int64_t steps_written() const { return written_; }

 private:
  struct Request {
    uint64_t id;
    int32_t seq;
    int32_t cached;                 // positions reused from the sequence's memory
    std::vector<int32_t> prompt;    // final once prompt_known
    bool prompt_known = false;
    int32_t generated = 0;
    int32_t last_token = -1;
    bool finished = false;
    bool probe = false;  // ended unsampled before anything was sampled: a warmup or probe
    bool added = false;  // its arrival is written
    uint64_t out_id = 0;  // its id in the trace: requests are numbered as they are written
    // the row whose token is pending: its step, position, and the sampler's choice
    std::shared_ptr<TapeStep> pending_step;
    int32_t pending_pos = -1;
    int32_t pending_token = -1;
    std::shared_ptr<TapeStep> last_step;  // where a finish goes
  };
  struct Seq {
    std::vector<int32_t> tokens;  // token at each position (-1 unknown)
    int64_t request = -1;         // index into requests_
  };

  Seq& seq(int32_t s);
  void end_request(int64_t r, bool by_clear);
  void resolve_token(Request& q, int32_t token);
  void memory_diverges(const std::string& call, const std::string& why);
  void check_cuts(const std::vector<BatchRow>& rows);
  void flush();
  void write(TapeStep& s);
  bool eog(int32_t token) const;
  int64_t by_id(uint64_t id) const;

  llmrr_recorder* rec_;
  int32_t n_vocab_;
  int32_t max_tokens_;
  std::vector<int32_t> eog_;
  std::map<int32_t, Seq> seqs_;
  std::vector<Request> requests_;
  std::vector<std::shared_ptr<TapeStep>> tape_;
  // Rows of the last decode: (request index, pos) by batch row, for accepted().
  std::vector<std::pair<int64_t, int32_t>> last_rows_;
  int64_t written_ = 0;
  uint64_t next_id_ = 0;
  uint64_t next_out_id_ = 0;
  bool any_sampled_ = false;
  bool forced_ = false;
  // seq -> first position a removal freed, waiting for that sequence's next request to start
  // there in the next decode (what the replay repeats)
  std::map<int32_t, int32_t> cuts_;
  std::string unrepeatable_;
};

}  // namespace llmrr::llamacpp
