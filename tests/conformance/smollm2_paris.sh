#!/bin/sh
# llmrr run on SmolLM2-135M-Instruct must answer "What is the capital of France?" with Paris.
# Exit 77 (skipped) when the model has not been fetched (tools/setup/smollm2).
llmrr="$1"
model="${LLMRR_MODEL_DIR:-$HOME/.cache/llmrr/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$model" ]; then
  echo "skipped: $model is absent (run tools/setup/smollm2)"
  exit 77
fi
out=$("$llmrr" run --model "$model" --chat --prompt "What is the capital of France?" --max-tokens 16 \
      --threads 2) || exit 1
echo "llmrr run answered: $out"
case "$out" in
  *Paris*) exit 0 ;;
  *) echo "expected an answer naming Paris"; exit 1 ;;
esac
