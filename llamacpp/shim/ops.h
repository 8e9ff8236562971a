// Op records of a llama.cpp decode (format 1.6, Step.ops): what each reduction node of the
// decode's graphs ran with, taken when the scheduler asks the graph callback about a node,
// before it runs (no tensor data is read). `llmrr diff` compares them at the first differing
// site and names what changed: a matmul's rows, the KV cells an attention read, the weights'
// buffer, the threads.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ggml.h"
#include "tape.h"

namespace llmrr::llamacpp {

class OpRecorder {
 public:
  // A decode starts.
  void reset();
  // Every node of the decode's graphs, in the order the scheduler asks about them.
  void take(const ggml_tensor* t);
  // The graph in flight (the decode's ubatch), from 0; -1 before the first node.
  int32_t graph() const { return graph_; }
  // The decode's records: each with its graph's rows (ub_rows[g] = first row and count, as the
  // layer fingerprints saw them; first -1: not known), then one "graph" record per graph (its
  // node count, tokens, and the threads llama.cpp computes it on: n_threads for one token,
  // n_threads_batch for more).
  std::vector<OpInfo> finish(const std::vector<std::pair<int64_t, int64_t>>& ub_rows,
                             int64_t batch_rows, int32_t n_threads, int32_t n_threads_batch);

 private:
  struct LastOp {  // the latest record of one op name in the graph in flight
    std::string stem;
    uint64_t key;
    size_t index;
  };
  std::vector<OpInfo> ops_;
  std::vector<LastOp> last_;
  const ggml_tensor* first_node_ = nullptr;
  std::string first_name_;
  int32_t graph_ = -1;
  std::vector<int64_t> nodes_;  // per graph
  int32_t cur_layer_ = -1;      // the layer of the last node named with one (name-L)
  int32_t occ_layer_ = -1;      // occ_: nodes of each name seen so far in that layer
  std::vector<std::pair<std::string, int>> occ_;
};

}  // namespace llmrr::llamacpp
