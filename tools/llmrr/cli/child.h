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

// Paths the recording commands hand to a child: this binary (/proc/self/exe; "" when it cannot
// be read), its directory, `p` made absolute against the working directory (as it is when that
// cannot be read), and whether `p` names a regular file (with bytes in it: has_bytes).
std::string self_exe();
std::string self_dir();
std::string absolute_path(const std::string& p);
bool is_file(const std::string& p);
bool has_bytes(const std::string& p);

}  // namespace llmrr::cli
