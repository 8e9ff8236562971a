// The llama.cpp adapter's pieces shared by its files.
#pragma once

#include <string>
#include <vector>

namespace llmrr::runtimes::llamacpp {

// $ENV when set (the only place then), else NAME beside this binary, else ../lib/NAME; each
// place looked at is appended to *tried; "" when none holds the file.
std::string find_part(const char* env, const char* name, std::vector<std::string>* tried);
// "looked at A, B: build llmrr with llama.cpp present (...), or set ENV".
std::string missing_part(const std::vector<std::string>& tried, const char* env);

// `llmrr replay --runtime llamacpp TRACE --model GGUF` (replay.cc).
int replay(const char* command, int argc, char** argv);
// `llmrr bisect --runtime llamacpp TRACE --model GGUF --request R` (bisect.cc).
int bisect(const char* command, int argc, char** argv);

}  // namespace llmrr::runtimes::llamacpp
