// Paths a test needs at run time (the llmrr binary, the fixtures, a probe program): CMake
// bakes the build tree's absolute path in as a compile definition, and an environment variable
// of the same name overrides it, so test binaries copied to another machine (tools/gpu/check
// --prebuilt) find the repository's fixtures and the copied binaries there. Header-only, so any
// test target can include it whether or not it links llmrr_test_common.
#pragma once

#include <cstdlib>
#include <string>

namespace llmrr::test {

// $`var` when it is set and not empty, else `baked` (the build-time path).
inline std::string path_from_env(const char* var, const char* baked) {
  const char* v = std::getenv(var);
  return v != nullptr && *v != '\0' ? std::string(v) : std::string(baked);
}

}  // namespace llmrr::test

// LLMRR_PATH(NAME): the run-time value of path NAME (LLMRR_BINARY, LLMRR_FIXTURES_DIR, ...),
// $NAME overriding the compile definition NAME.
#define LLMRR_PATH(NAME) ::llmrr::test::path_from_env(#NAME, NAME)
