// Running the user's program under a recording command (record-cuda, record-vllm): fork,
// set up the child's environment, exec, and wait with the terminal's signals left to the
// program.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "llmrr/format/status.h"

namespace llmrr::cli {

// Runs `command` (argv[0] looked up on PATH) after `in_child` ran in the forked child (set
// its environment there). Returns the program's exit status, 128 + signal when it was
// killed, 127 when it could not be started (said on stderr as "llmrr <tool>: error: ...").
// While it runs, SIGINT and SIGTERM are ignored here: the program gets them itself.
Result<int> run_program(const char* tool, std::vector<std::string> command,
                        const std::function<void()>& in_child);

}  // namespace llmrr::cli
