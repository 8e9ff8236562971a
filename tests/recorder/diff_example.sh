#!/bin/sh
# llmrr diff on traces of the C example (when this build has `diff`): the same run twice is
# identical (exit 0); a run whose down projection splits K differently is a numerical split
# that diff pins on that op and its plan (exit 1).
#   diff_example.sh LLMRR TOY_DECODE DIR
llmrr=$1
toy=$2
dir=$3
if ! "$llmrr" --help | grep -q "^  diff\( \|$\)"; then
  echo "llmrr diff: not in this build; skipped"
  exit 77
fi
a=$dir/diff_a.trace
b=$dir/diff_b.trace
c=$dir/diff_c.trace
"$toy" "$a" >/dev/null && "$toy" "$b" >/dev/null && "$toy" "$c" --splits 4 >/dev/null || exit 1
out=$("$llmrr" diff "$a" "$b" 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  echo "identical runs: expected exit 0, got $rc:"
  printf '%s\n' "$out"
  exit 1
fi
out=$("$llmrr" diff "$a" "$c" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 1 ]; then
  echo "split-K 1 vs 4: expected exit 1, got $rc"
  exit 1
fi
for want in "L0.mlp.down" "split-K 4"; do
  if ! printf '%s\n' "$out" | grep -qF "$want"; then
    echo "diff does not name '$want'"
    exit 1
  fi
done
rm -f "$a" "$b" "$c"
exit 0
