// `--runtime vllm` on fuzz, replay and bisect: the work runs in vLLM's Python, by a module of
// the llmrr package (llmrr.vllm_fuzz, llmrr.vllm_replay), which this binary execs.
#pragma once

#include <string>
#include <vector>

namespace llmrr::cli {

// `llmrr COMMAND --runtime vllm ...`: true when argv (argv[1..]) names a runtime, with the exit
// code in *rc: 2, said on stderr, for a runtime other than vllm; else this process is replaced
// by vLLM's Python running `module_args` followed by every other argument, e.g.
// {"-m", "llmrr.vllm_replay", "replay"} — $LLMRR_VLLM_PYTHON, else build/venv-vllm/bin/python
// beside this binary's build folder (tools/setup/vllm makes it), with $LLMRR_BIN set to this
// binary for the module's own calls — and *rc is 2 only when that cannot be done. False: no
// --runtime, the command goes on with llmrr's own engine.
bool run_in_vllm(const char* command, std::vector<std::string> module_args, int argc,
                 char** argv, int* rc);

// `llmrr COMMAND --runtime RUNTIME ...` for a stdlib-only script of the llmrr package (e.g.
// llmrr/llamacpp_fuzz.py): true when argv names exactly `runtime`; then this process is
// replaced by python3 from PATH running the checkout's python/`script` (python/ beside this
// binary's build folder; run as a file, so the package's numpy-using __init__ is not imported)
// with every other argument and $LLMRR_BIN set to this binary; *rc is 2, said, only when that
// cannot be done. False: no --runtime or another one (the caller goes on, e.g. to run_in_vllm).
bool run_in_python(const char* command, const char* runtime, const char* script, int argc,
                   char** argv, int* rc);

}  // namespace llmrr::cli
