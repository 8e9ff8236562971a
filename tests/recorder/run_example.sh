#!/bin/sh
# Runs a C ABI example that writes TRACE, then the trace tools on it (those this build has):
#   run_example.sh LLMRR TRACE -- COMMAND [ARGS...]
# Exit 77 (skip) passes through from the example (e.g. numpy missing).
llmrr=$1
trace=$2
shift 3
rm -f "$trace"
"$@"
rc=$?
[ $rc -eq 0 ] || exit $rc
[ -s "$trace" ] || { echo "no trace at $trace"; exit 1; }
help=$("$llmrr" --help)
for cmd in verify inspect dump; do
  if printf '%s\n' "$help" | grep -q "^  $cmd\( \|$\)"; then
    if ! out=$("$llmrr" "$cmd" "$trace" 2>&1); then
      echo "llmrr $cmd $trace failed:"
      printf '%s\n' "$out"
      exit 1
    fi
    printf '%s\n' "$out" | head -n 12
  else
    echo "llmrr $cmd: not in this build; not checked"
  fi
done
rm -f "$trace"
exit 0
