// `--runtime vllm` on fuzz, replay and bisect: the work runs in vLLM's Python, by a module of
// the llmrr package (llmrr.vllm_fuzz, llmrr.vllm_replay), which this binary execs.
#pragma once

#include <string>
#include <vector>

namespace llmrr::cli {

// Finds `--runtime X` / `--runtime=X` among argv[1..]: true with X in *runtime and every other
// argument, in order, in *rest; false when the option is absent.
bool take_runtime(int argc, char** argv, std::string* runtime, std::vector<std::string>* rest);

// Replaces this process with vLLM's Python running `args` (e.g. {"-m", "llmrr.vllm_replay",
// ...}): $LLMRR_VLLM_PYTHON, else build/venv-vllm/bin/python beside this binary's build folder
// (tools/setup/vllm makes it). $LLMRR_BIN is set to this binary for the module's own calls.
// Returns 2, with a message naming what is missing, only when it cannot.
int exec_vllm_python(const char* command, const std::vector<std::string>& args);

// `llmrr replay|bisect --runtime vllm ...`: true when argv names a runtime, with the exit code
// in *rc: 2 for a runtime other than vllm, else what running `python -m llmrr.vllm_replay
// COMMAND ...` in vLLM's Python gives (exec_vllm_python). False: no --runtime, go on.
bool run_vllm_replay(const char* command, int argc, char** argv, int* rc);

}  // namespace llmrr::cli
