// Synthetic load: concurrent requests that share batches with a target request, so that
// batch composition changes (`llmrr run --load N`). Everything derives from the seed.
#pragma once

#include <cstdint>
#include <vector>

#include "llmrr/runtime/model.h"
#include "llmrr/runtime/observer.h"

namespace llmrr {

struct LoadOptions {
  int32_t count = 0;
  uint64_t seed = 0;
  int32_t vocab = 256;
  int32_t max_positions = 2048;
  int32_t min_prompt = 4, max_prompt = 48;  // prompt lengths, uniform, inclusive
  int32_t min_new = 4, max_new = 32;        // max_tokens, uniform, inclusive
  int64_t max_arrival = 12;                 // arrival steps uniform in [0, max_arrival]
  RequestId first_id = 1;                   // ids first_id, first_id + 1, ...
  // Prompt tokens are drawn from [token_lo, token_hi) (the printable bytes for the builtin
  // byte-level models; the whole vocabulary otherwise).
  int32_t token_lo = 0, token_hi = 0;       // token_hi 0 = vocab
};

// Requests labelled "load-<i>", greedy, in id order. A pure function of the options.
std::vector<RequestSpec> make_load_requests(const LoadOptions& options);

// The load `llmrr run --load N --seed S` adds for a model: the defaults above, printable
// ASCII prompts for the byte-level builtin vocabularies.
std::vector<RequestSpec> make_load_for_model(const ModelConfig& model, int32_t count,
                                             uint64_t seed, RequestId first_id = 1);

}  // namespace llmrr
