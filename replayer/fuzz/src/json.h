// Internal to the fuzz sources: the generator's space as canonical JSON (shards of one
// campaign must agree on it byte for byte).
#pragma once

#include <string>

#include "llmrr/replayer/fuzz.h"

namespace llmrr::replay {

std::string fuzz_space_json(const FuzzSpace& space);

}  // namespace llmrr::replay
