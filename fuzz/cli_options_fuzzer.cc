// Fuzz target: the CLI's numeric and range options. The input is split at NUL bytes into
// values for dump --steps (parse_range), --request R / RA:RB (parse_request_pair) and
// replay --materialize SITE@STEP (parse_materialize); each must be parsed or refused,
// never crash, and a parsed range must be ordered.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cli/cli.h"
#include "llmrr/replayer/replay.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  for (int field = 0; start <= all.size() && field < 16; ++field) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    const std::string v = all.substr(start, end - start);
    int64_t first = 0, last = 0;
    if (llmrr::cli::parse_range(v, &first, &last) && first > last) std::abort();
    (void)llmrr::cli::parse_request_pair(v);
    (void)llmrr::replay::parse_materialize(v);
    (void)llmrr::cli::human_bytes(static_cast<uint64_t>(first));
    start = end + 1;
  }
  return 0;
}
