"""llmrr.campaigns: the programs that re-execute or fuzz another runtime, which the llmrr CLI
runs (`llmrr replay | bisect | fuzz --runtime vllm` exec `python -m
llmrr.campaigns.vllm_replay | vllm_fuzz`; `llmrr fuzz --runtime llamacpp` runs
llamacpp_fuzz.py with python3, stdlib only). Every fuzz campaign writes its summary.json
through fuzz_summary (docs/fuzz-summary.md), in the schema of `llmrr fuzz`'s own."""
