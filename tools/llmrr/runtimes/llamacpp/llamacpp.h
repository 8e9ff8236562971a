// The llama.cpp adapter's pieces shared by its files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/format/trace_reader.h"

namespace llmrr::runtimes::llamacpp {

// $ENV when set (the only place then), else NAME beside this binary, else ../lib/NAME; each
// place looked at is appended to *tried; "" when none holds the file.
std::string find_part(const char* env, const char* name, std::vector<std::string>* tried);
// "looked at A, B: build llmrr with llama.cpp present (...), or set ENV".
std::string missing_part(const std::vector<std::string>& tried, const char* env);

// A recorded request's id in a replay's trace that left some requests out (which numbers the
// requests it decodes by their first rows, so ids move): `guess` (what that numbering gives)
// when the replay's request of that id has the recorded prompt hash and label, else the
// first request that has both; an error when none does.
Result<uint64_t> id_in_replay(const std::string& replay_trace, uint64_t prompt_hash,
                              const std::string& label, uint64_t guess);
Result<uint64_t> id_in_replay(const trace::TraceReader& replay, uint64_t prompt_hash,
                              const std::string& label, uint64_t guess);

// `llmrr replay --runtime llamacpp TRACE --model GGUF` (replay.cc).
int replay(const char* command, int argc, char** argv);
// `llmrr bisect --runtime llamacpp TRACE --model GGUF --request R` (bisect.cc).
int bisect(const char* command, int argc, char** argv);

}  // namespace llmrr::runtimes::llamacpp
