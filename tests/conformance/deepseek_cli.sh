#!/bin/sh
# `llmrr run` on the DeepSeek-V3 fixtures (safetensors, GGUF, and the q_proj variant) gives
# transformers' 16 greedy tokens (the manifest's `greedy` entries) under both policies,
# prefill chunked or not; DeepSeek-V3's own RoPE scaling (yarn) and a softmax scoring_func
# exit 2 naming the key; --device cuda exits 2 (a build without CUDA says so first; with CUDA the
# engine refuses MLA before probing a device, runtime_test EngineDeepseek).
llmrr="$1"
fixtures="$2"
status=0
for model in tiny-deepseek tiny-deepseek-f32.gguf tiny-deepseek-qproj; do
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
cp "$fixtures/tiny-deepseek/model.safetensors" "$dir/"
refused() {  # refused WHAT PATTERN [llmrr options]: exit 2 and the message names PATTERN
  what="$1" pattern="$2"
  shift 2
  err=$("$llmrr" run --model "$dir" --prompt-ids 1,2,3 --max-tokens 1 "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -ne 2 ]; then echo "$what: exit $rc, expected 2 ($err)"; status=1; fi
  case "$err" in
    *$pattern*) ;;
    *) echo "$what: the message does not name $pattern: $err"; status=1 ;;
  esac
}
sed 's/"rope_type": "default"/"rope_type": "yarn", "factor": 40.0/' \
  "$fixtures/tiny-deepseek/config.json" > "$dir/config.json"
refused "rope_type yarn" "rope_parameters.rope_type yarn"
sed 's/"n_group": 4,/"n_group": 4, "scoring_func": "softmax",/' \
  "$fixtures/tiny-deepseek/config.json" > "$dir/config.json"
refused "scoring_func softmax" "scoring_func"
cp "$fixtures/tiny-deepseek/config.json" "$dir/config.json"
refused "--device cuda" "--device cuda" --device cuda
[ $status -eq 0 ] && echo "deepseek cli: greedy tokens match transformers; yarn, softmax and cuda refused (exit 2)"
exit $status
