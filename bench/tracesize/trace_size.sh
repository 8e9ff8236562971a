#!/usr/bin/env bash
# Trace size at the default capture, format 1.3 (column-coded step chunks, row summaries at
# --summary-bits 14) against format 1.2's plain step chunks, side by side in one run:
#   1. recorder_bench on SmolLM2 (target + load 8, max_tokens 32: the workload of the
#      1304 bytes/token baseline): throughput record off / on (1.3) / on (1.2 chunks),
#      medians of --reps rounds in rotating order, and bytes per token by record kind;
#   2. `llmrr record` of the issue's workload (one prompt + 7 load requests, --max-tokens 128)
#      and of 8 requests x 128 generated tokens, both layouts: whole-file bytes per token;
#   3. `llmrr replay` and `llmrr diff` (the trace against itself) of each layout's trace,
#      alternating, medians of --reps.
#
#   bench/tracesize/trace_size.sh [--build build/default] [--reps 5] [--out /tmp/trace_size]
set -euo pipefail

BUILD=build/default
REPS=5
OUT=/tmp/trace_size
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--reps N] [--out DIR]" >&2; exit 2 ;;
  esac
done
LLMRR=$BUILD/tools/llmrr
BENCH=$BUILD/bench/recorder/recorder_bench
MODEL=${LLMRR_SMOLLM2:-$HOME/.cache/llmrr/models/SmolLM2-135M-Instruct.Q4_1.gguf}
for f in "$LLMRR" "$BENCH" "$MODEL"; do
  [ -e "$f" ] || { echo "$0: $f not found (build llmrr and recorder_bench; tools/setup/smollm2)" >&2; exit 2; }
done
mkdir -p "$OUT"

echo "# trace size: format 1.3 (columns, --summary-bits 14) vs format 1.2 step chunks"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "## 1. recorder_bench (SmolLM2, target + load 8, max_tokens 32)"
"$BENCH" --models smollm2 --reps "$REPS" --summary-bits 14 --keep "$OUT" | sed -n '/^## /,$p'

echo
echo "## 2. llmrr record, whole file bytes per generated token"
python3 - "$OUT/reqs.jsonl" <<'EOF'
import json, sys
prompts = ["The capital of France is", "Once upon a time, in a small village,",
           "Write a short poem about the sea.", "Explain how a transistor works.",
           "List five fruits and their colors:", "The quick brown fox jumps over",
           "In 1969, the first humans", "A recipe for pancakes:"]
with open(sys.argv[1], "w") as f:
    for i, p in enumerate(prompts):
        f.write(json.dumps({"id": i, "prompt": p, "max_tokens": 128, "stop_at_eos": False}) + "\n")
EOF
declare -A WORK=(
  [issue]="--prompt 'The quick brown fox jumps over the lazy dog' --max-tokens 128 --load 7"
  [8x128]="--requests $OUT/reqs.jsonl"
)
echo "| workload | tokens | format 1.2 chunks B/token | format 1.3 B/token | 1.3 / 1.2 |"
echo "|---|---:|---:|---:|---:|"
for w in issue 8x128; do
  for layout in plain columns; do
    flag=""; [ $layout = plain ] && flag="--plain-chunks"
    eval "\"$LLMRR\" record --model \"$MODEL\" ${WORK[$w]} -q $flag -o \"$OUT/$w-$layout.trace\"" >/dev/null
  done
  tok=$("$LLMRR" inspect --json "$OUT/$w-columns.trace" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
  a=$(stat -c %s "$OUT/$w-plain.trace"); b=$(stat -c %s "$OUT/$w-columns.trace")
  python3 -c "t=$tok; a=$a; b=$b; print(f'| $w | {t} | {a/t:.1f} | **{b/t:.1f}** | {b/a:.3f} |')"
done

echo
echo "## 3. replay and diff time (8x128 traces, medians of $REPS, alternating)"
python3 - "$LLMRR" "$OUT" "$REPS" <<'EOF'
import statistics, subprocess, sys, time
llmrr, out, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def run(args):
    t0 = time.perf_counter()
    subprocess.run([llmrr] + args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0
times = {}
for rep in range(reps):
    order = ["plain", "columns"] if rep % 2 == 0 else ["columns", "plain"]
    for layout in order:
        t = f"{out}/8x128-{layout}.trace"
        times.setdefault(("replay", layout), []).append(run(["replay", t]))
        times.setdefault(("diff", layout), []).append(run(["diff", t, t]))
        times.setdefault(("verify", layout), []).append(run(["verify", t]))
print("| command | format 1.2 chunks s | format 1.3 s | 1.3 / 1.2 |")
print("|---|---:|---:|---:|")
for cmd in ["replay", "diff", "verify"]:
    a = statistics.median(times[(cmd, "plain")]); b = statistics.median(times[(cmd, "columns")])
    print(f"| llmrr {cmd} | {a:.3f} | {b:.3f} | {b/a:.3f} |")
EOF
