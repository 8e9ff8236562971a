#!/bin/sh
# A raw prompt is continued as written (no chat template unless --chat), and the first greedy
# token is the one llama.cpp picks on the same GGUF: for "The capital of France is" llama.cpp
# (llama-cpp-python 0.3.36, 2 threads) tokenizes to 504,3575,282,4649,314 (no BOS: the file
# says add_bos_token = false) and its greedy next token is 7042 " Paris" (logit 17.34, next
# best 260 " the" at 14.80). Recorded numbers; llama.cpp is not run here.
# Exit 77 (skipped) when the model has not been fetched (tools/setup/smollm2).
llmrr="$1"
model="${LLMRR_MODEL_DIR:-$HOME/.cache/llmrr/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$model" ]; then
  echo "skipped: $model is absent (run tools/setup/smollm2)"
  exit 77
fi
text=$("$llmrr" run --model "$model" --prompt "The capital of France is" --max-tokens 1 \
       --threads 2) || exit 1
ids=$("$llmrr" run --model "$model" --prompt-ids 504,3575,282,4649,314 --max-tokens 1 \
      --threads 2) || exit 1
echo "text prompt -> '$text', id prompt -> '$ids'"
[ "$text" = " Paris" ] || { echo "expected ' Paris' (llama.cpp's token 7042)"; exit 1; }
[ "$ids" = " Paris" ] || { echo "expected ' Paris' from the ids too"; exit 1; }
