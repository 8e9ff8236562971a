// `--runtime llamacpp` on replay: the recorded batches are re-executed in libllama by
// llmrr-llamacpp-replay (llamacpp/replay) under the recording shim, and the new trace is
// compared with the recorded one by `llmrr diff`.
#pragma once

namespace llmrr::cli {

// True when argv (argv[1..]) names `--runtime llamacpp`, with the exit code in *rc (0
// bit-exact, 1 differs, 2 bad input or a part missing, 3 internal). False otherwise (the
// command goes on: another runtime, or llmrr's own engine).
bool run_in_llamacpp(const char* command, int argc, char** argv, int* rc);

}  // namespace llmrr::cli
