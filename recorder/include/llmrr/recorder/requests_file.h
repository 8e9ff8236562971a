// Requests files (`llmrr record --requests FILE.jsonl`): one JSON object a line.
//
//   {"id": 0, "prompt": "The quick brown fox", "max_tokens": 24, "label": "target"}
//   {"id": 1, "prompt_ids": [72, 101, 108], "temperature": 0.8, "seed": 7, "arrival_step": 3}
//
// Fields (all optional except one of prompt / prompt_ids):
//   id            unsigned integer, unique in the file (default: the line's request index)
//   prompt        text, tokenized with the model's tokenizer (chat template when enabled)
//   prompt_ids    array of token ids in [0, vocab)
//   max_tokens    integer >= 1                     (default: the command's --max-tokens)
//   temperature   number >= 0                      (default: --temperature)
//   top_k         integer >= 0                     (default: --top-k)
//   top_p         number in (0, 1]                 (default: --top-p)
//   seed          unsigned integer                 (default: --seed)
//   arrival_step  integer >= 0                     (default 0)
//   label         string                           (default "")
//   stop_at_eos   boolean                          (default true)
// Blank lines and lines whose first non-blank character is '#' are skipped. Any other
// field is an error (a misspelt field must not be silently ignored).
//
// Every problem is a kBadRequest naming the file, the line and the field, with what was
// expected and what was found: "reqs.jsonl:3: field 'max_tokens': expected an integer >= 1,
// found \"ten\"".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/kernels/sample.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/observer.h"

namespace llmrr {

// Bounds on a requests file, each refused with exit 2 naming the file (and the line): at most
// kMaxRequests requests (the one after is refused before it is parsed, so a file of a million
// lines fails within seconds instead of growing an engine run without bound), and at most
// kMaxRequestsFileBytes bytes. read_requests_file reads the file as a stream, a line at a
// time, so memory is the parsed requests plus one line of text.
inline constexpr size_t kMaxRequests = 100000;
inline constexpr uint64_t kMaxRequestsFileBytes = 64u << 20;

struct RequestDefaults {
  int32_t max_tokens = 32;
  kernels::SamplingParams sampling;
};

struct RequestsFileContext {
  const ModelConfig* model = nullptr;    // vocab and max_positions are checked against it
  const Tokenizer* tokenizer = nullptr;  // null: text prompts are refused
  std::string tokenizer_note;            // why there is no tokenizer (for the message)
  bool chat = false;                     // wrap text prompts in the chat template
};

// Parses the text of a requests file; `name` is used in messages.
Result<std::vector<RequestSpec>> parse_requests_jsonl(std::string_view text, std::string_view name,
                                                      const RequestDefaults& defaults,
                                                      const RequestsFileContext& context);

// Reads and parses `path` (kNotFound / kIsDirectory / kIo when it cannot be read).
Result<std::vector<RequestSpec>> read_requests_file(const std::string& path,
                                                    const RequestDefaults& defaults,
                                                    const RequestsFileContext& context);

}  // namespace llmrr
