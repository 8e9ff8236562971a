#!/bin/sh
# `llmrr run` on the Qwen3 fixtures (safetensors and GGUF) gives transformers' 16 greedy
# tokens (the manifest's `greedy` entries) under both policies, prefill chunked or not; a
# Qwen3 config asking for a RoPE scaling type the engine lacks exits 2 naming the key.
llmrr="$1"
fixtures="$2"
status=0
for model in tiny-qwen3 tiny-qwen3moe tiny-qwen3-f32.gguf tiny-qwen3moe-f32.gguf; do
  # The manifest's models.<model>.greedy.{generated, ids} (json.dump, indent 1, one number
  # per line).
  list() {
    awk -v m="\"$model\": {" -v k="\"$1\": [" '
      index($0, m) { inm = 1 } inm && index($0, "\"greedy\": {") { ing = 1 }
      ing && index($0, k) { on = 1; next } on && /\]/ { exit } on { gsub(/[ ,]/, ""); print }
    ' "$fixtures/manifest.json" | tr '\n' ' '
  }
  want=$(list generated)
  prompt=$(list ids | tr ' ' ',')
  if [ -z "$want" ]; then echo "no greedy entry for $model"; exit 1; fi
  n=$(echo "$want" | wc -w)
  # The first 7 ids of the greedy sequence are the prompt (p7).
  prompt=$(echo "$prompt" | cut -d, -f1-7)
  for policy in invariant production; do
    for chunk in 0 3; do
      got=$("$llmrr" run --model "$fixtures/$model" --prompt-ids "$prompt" --max-tokens "$n" --temperature 0 \
            --policy "$policy" --prefill-chunk "$chunk" 2>/dev/null) || { status=1; continue; }
      if [ "$(echo $got)" != "$(echo $want)" ]; then
        echo "$model $policy prefill-chunk $chunk: got '$got', transformers '$want'"
        status=1
      fi
    done
  done
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$fixtures/tiny-qwen3/model.safetensors" "$dir/"
sed 's/"rope_type": "default"/"rope_type": "yarn"/' "$fixtures/tiny-qwen3/config.json" \
  > "$dir/config.json"
err=$("$llmrr" run --model "$dir" --prompt-ids 1,2,3 --max-tokens 1 2>&1 >/dev/null)
rc=$?
if [ $rc -ne 2 ]; then echo "rope_type yarn: exit $rc, expected 2 ($err)"; status=1; fi
case "$err" in
  *rope_parameters.rope_type\ yarn*) ;;
  *) echo "rope_type yarn: the message does not name the key: $err"; status=1 ;;
esac
[ $status -eq 0 ] && echo "qwen3 cli: greedy tokens match transformers; yarn refused (exit 2)"
exit $status
