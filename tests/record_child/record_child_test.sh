#!/bin/sh
# The recording commands' shared contract (tools/llmrr/cli/child.h record_child, the runtime
# table tools/llmrr/runtimes/), on fake_runtime, a C-ABI program that records until it is
# stopped: a signal sent to `llmrr record-<runtime>` reaches the program, which closes its
# trace, and the whole trace is at -o within seconds; the env scheme (LLMRR_<NAME>_TRACE,
# LLMRR_CAPTURE, LLMRR_TOP_K) reaches it; an earlier -o stays whole until a whole trace
# replaces it; kill -9 leaves the readable prefix; no trace is exit 2 with nothing left;
# `--runtime` names what it expected.
#   record_child_test.sh LLMRR FAKE_RUNTIME A_SHARED_LIBRARY WORKDIR
set -u
llmrr=$1
fake=$2
shim=$3   # any shared library: record-llamacpp preloads it as the shim
work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# wait_for FILE SECONDS: 0 when FILE appears in time
wait_for() {
  i=0
  while [ ! -e "$1" ]; do
    i=$((i + 1))
    [ "$i" -gt $(($2 * 20)) ] && return 1
    sleep 0.05
  done
}

# wait_exit PID SECONDS: the process's exit status, 255 when it outlived SECONDS (then killed)
wait_exit() {
  i=0
  while kill -0 "$1" 2>/dev/null; do
    i=$((i + 1))
    if [ "$i" -gt $(($2 * 20)) ]; then
      kill -9 "$1" 2>/dev/null
      wait "$1" 2>/dev/null
      return 255
    fi
    sleep 0.05
  done
  wait "$1"
}

# stop_by SIGNAL COMMAND NAME: runs `llmrr COMMAND` around fake_runtime NAME, sends SIGNAL
# to llmrr's pid once the program has recorded a step, and checks the trace.
stop_by() {
  sig=$1; cmd=$2; name=$3; shift 3
  t="$work/$cmd-$sig.trace"
  ready="$work/$cmd-$sig.ready"
  LLMRR_LLAMACPP_SHIM=$shim "$llmrr" "$cmd" "$@" -o "$t" -- "$fake" "$name" 100000 "$ready" \
    >"$t.out" 2>"$t.err" &
  pid=$!
  wait_for "$ready" 20 || fail "$cmd: the program never recorded a step: $(cat "$t.err")"
  sleep 0.2
  start=$(date +%s)
  kill -"$sig" "$pid"
  wait_exit "$pid" 10
  rc=$?
  took=$(($(date +%s) - start))
  [ "$rc" -eq 0 ] || fail "$cmd stopped by SIG$sig: exit $rc after ${took}s (expected 0: the program closed its trace): $(cat "$t.err")"
  grep -q "fake_runtime: stopped by signal" "$t.err" || fail "$cmd: SIG$sig did not reach the program: $(cat "$t.err")"
  v=$("$llmrr" verify "$t" 2>&1) || fail "$cmd SIG$sig: $t does not verify: $v"
  echo "$v" | grep -q "complete" || fail "$cmd SIG$sig: $t is not complete: $v"
  steps=$(echo "$v" | sed -n 's/.* \([0-9][0-9]*\) steps.*/\1/p')
  [ "${steps:-0}" -ge 2 ] || fail "$cmd SIG$sig: $steps steps in $t"
  grep -q "llmrr $cmd: $t: $steps steps, 1 requests, row hash xxh3-64; program exited with 0" "$t.err" ||
    fail "$cmd SIG$sig: no summary line: $(cat "$t.err")"
  ls "$work" | grep -q "partial" && fail "$cmd SIG$sig: a partial file is left: $(ls "$work")"
  echo "$cmd stopped by SIG$sig: exit $rc in ${took}s, $steps steps"
}

stop_by INT record-vllm VLLM
stop_by TERM record-vllm VLLM
stop_by HUP record-vllm VLLM
stop_by TERM record-llamacpp LLAMACPP --capture all --top-k 5
# The shared settings reached the program through LLMRR_CAPTURE and LLMRR_TOP_K.
"$llmrr" inspect "$work/record-llamacpp-TERM.trace" 2>&1 | grep -q "capture    sites all, logits topk (top-5)" ||
  fail "record-llamacpp --capture all --top-k 5 did not reach the program: $("$llmrr" inspect "$work/record-llamacpp-TERM.trace" 2>&1 | grep capture)"
# A runtime's switch is its own: LLMRR_VLLM_TRACE does not switch on a llama.cpp recorder.
LLMRR_LLAMACPP_SHIM=$shim "$llmrr" record-llamacpp -o "$work/wrong.trace" -- "$fake" VLLM 3 "$work/wrong.ready" \
  >/dev/null 2>"$work/wrong.err"
rc=$?
[ "$rc" -eq 2 ] || fail "record-llamacpp around a program that records nothing: exit $rc (expected 2)"
grep -q "no trace written" "$work/wrong.err" || fail "no 'no trace written': $(cat "$work/wrong.err")"
[ -e "$work/wrong.trace" ] && fail "record-llamacpp left a -o without a trace"
ls "$work" | grep -q "wrong.trace.partial" && fail "a partial file is left after no trace"

# A program that stops only at a second signal (llama-server waits on its open streams at a
# first): record-llamacpp sends it again 3 s after the first, the program closes its trace.
t="$work/second.trace"
LLMRR_LLAMACPP_SHIM=$shim "$llmrr" record-llamacpp -o "$t" -- "$fake" LLAMACPP 100000 \
  "$work/second.ready" second >/dev/null 2>"$t.err" &
pid=$!
wait_for "$work/second.ready" 20 || fail "second: the program never recorded a step: $(cat "$t.err")"
sleep 0.2
start=$(date +%s)
kill -INT "$pid"
wait_exit "$pid" 10
rc=$?
took=$(($(date +%s) - start))
[ "$rc" -eq 0 ] || fail "record-llamacpp around a program that stops at a second SIGINT: exit $rc after ${took}s: $(cat "$t.err")"
[ "$took" -ge 2 ] || fail "second: it ended after ${took}s, before the 3 s grace: $(cat "$t.err")"
grep -q "still running 3000 ms after SIGINT: sending it again" "$t.err" ||
  fail "second: record-llamacpp did not say it sent SIGINT again: $(cat "$t.err")"
grep -q "fake_runtime: stopped by signal 2 (2 seen)" "$t.err" ||
  fail "second: the program did not see two SIGINTs: $(cat "$t.err")"
"$llmrr" verify "$t" 2>&1 | grep -q "complete" || fail "second: $t is not a whole trace"
echo "record-llamacpp around a program that stops at a second SIGINT: exit $rc in ${took}s"

# The flight recorder: --ring 256K keeps the ring's folder under its bound while the program
# records ~100 times as much; SIGUSR1 writes a closed snapshot without stopping it; the trace
# at -o holds the last steps, says what was dropped, and carries the running request in; the
# request cut out of it (by its id) is the same steps.
t="$work/ring.trace"
printf 'an earlier snapshot' >"$work/ring.trace.snapshot-1"  # never replaced: the next is -2
FAKE_RUNTIME_STEP_US=50 "$llmrr" record-vllm --ring 256K -o "$t" -- "$fake" VLLM 100000 \
  "$work/ring.ready" >/dev/null 2>"$t.err" &
pid=$!
wait_for "$work/ring.ready" 20 || fail "ring: the program never recorded a step: $(cat "$t.err")"
# Until the ring has turned over a few times (segment 24: three times what it holds, however
# slow the build, e.g. under ASan), a snapshot at segment 12, at most 120 s.
max_kb=0
snapped=0
for i in $(seq 1 1200); do
  sleep 0.1
  d=$(ls -d "$work"/ring.trace.partial-*.ring 2>/dev/null | head -1)
  [ -n "$d" ] || continue
  kb=$(du -sk --apparent-size "$d" 2>/dev/null | cut -f1)
  [ "${kb:-0}" -gt "$max_kb" ] && max_kb=$kb
  last=$(ls "$d" 2>/dev/null | sed -n 's/^seg-0*\([0-9][0-9]*\)\.trace$/\1/p' | sort -n | tail -1)
  if [ "${last:-0}" -ge 12 ] && [ "$snapped" -eq 0 ]; then
    kill -USR1 "$pid"
    snapped=1
  fi
  [ "${last:-0}" -ge 24 ] && break
done
kill -INT "$pid"
wait_exit "$pid" 10
rc=$?
[ "$rc" -eq 0 ] || fail "ring: exit $rc: $(cat "$t.err")"
# 256 KiB of segments, plus the folder's own entry
[ "$max_kb" -gt 0 ] && [ "$max_kb" -le 264 ] || fail "ring: the ring's folder reached ${max_kb} KiB (bound 256 KiB)"
v=$("$llmrr" verify "$t" 2>&1) || fail "ring: $t does not verify: $v"
echo "$v" | grep -q "flight recorder (ring 256 KiB): the steps before [0-9]* were dropped" ||
  fail "ring: the trace does not say what the ring dropped: $v"
first=$(echo "$v" | sed -n 's/.*the steps before \([0-9]*\) were dropped.*/\1/p')
steps=$(echo "$v" | sed -n 's/.* \([0-9][0-9]*\) steps.*/\1/p')
[ "${first:-0}" -gt "${steps:-0}" ] || fail "ring: kept $steps steps from step $first: expected most dropped"
"$llmrr" inspect "$t" 2>&1 | grep -q "carried in (it arrived earlier) at step $first," ||
  fail "ring: the running request is not carried in: $("$llmrr" inspect "$t" 2>&1 | grep -A2 '^requests')"
snap=$(ls "$work" | grep "^ring.trace.snapshot-2$")
[ -n "$snap" ] || fail "ring: SIGUSR1 wrote no snapshot ($(ls "$work" | grep ring))"
"$llmrr" verify "$work/ring.trace.snapshot-2" >/dev/null 2>&1 || fail "ring: the snapshot does not verify"
[ "$(cat "$work/ring.trace.snapshot-1")" = "an earlier snapshot" ] || fail "ring: a snapshot replaced an earlier file"
ls "$work" | grep -q "ring.trace.partial\|ring.trace.snap$" && fail "ring: left behind: $(ls "$work" | grep ring)"
c=$("$llmrr" cut "$t" --request 1 -o "$work/ring-cut.trace" 2>&1) || fail "cut: $c"
echo "$c" | grep -q "request 1, steps $first\.\.[0-9]* ($steps steps), 1 requests (1 carried in)" || fail "cut: $c"
out=$("$llmrr" cut "$t" --request cmpl-none -o "$work/ring-cut2.trace" 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "has no request with that id or label" || fail "cut of an unknown request: $out"
out=$("$llmrr" join "$work/record-vllm-INT.trace" "$work/record-vllm-TERM.trace" -o "$work/j.trace" 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "not parts of one run" || fail "join of two runs: $out"
[ -e "$work/j.trace" ] && fail "join of two runs left -o"
echo "ring: folder at most ${max_kb} KiB of 256, kept $steps steps from $first; snapshot and cut verify"

# A link planted where the trigger goes: SIGUSR1 writes nothing through it, and it is left.
printf 'keep' >"$work/victim"
ln -sf "$work/victim" "$work/sym.trace.snap"
"$llmrr" record-vllm -o "$work/sym.trace" -- "$fake" VLLM 100000 "$work/sym.ready" \
  >/dev/null 2>"$work/sym.err" &
pid=$!
wait_for "$work/sym.ready" 20 || fail "sym: the program never recorded a step"
kill -USR1 "$pid"
sleep 0.3
kill -INT "$pid"
wait_exit "$pid" 10
rc=$?
[ "$rc" -eq 0 ] || fail "sym: exit $rc: $(cat "$work/sym.err")"
[ "$(cat "$work/victim")" = "keep" ] || fail "SIGUSR1 wrote through a link at the trigger: $(cat "$work/victim")"
[ -L "$work/sym.trace.snap" ] || fail "the user's link at the trigger was removed"
ls "$work" | grep -q "sym.trace.snapshot" && fail "a snapshot was taken through a link"

# A program killed while its ring is open: record-vllm joins the segments it left.
FAKE_RUNTIME_STEP_US=50 "$llmrr" record-vllm --ring 256K -o "$work/ringk.trace" -- "$fake" VLLM 100000 \
  "$work/ringk.ready" >/dev/null 2>"$work/ringk.err" &
pid=$!
wait_for "$work/ringk.ready" 20 || fail "ring kill: the program never recorded a step"
sleep 1
pkill -9 -f "^$fake VLLM 100000 $work/ringk.ready"
wait_exit "$pid" 10
grep -q "joined [0-9]* flight-recorder segment(s) left by the program" "$work/ringk.err" ||
  fail "ring kill: the segments were not joined: $(cat "$work/ringk.err")"
"$llmrr" verify "$work/ringk.trace" 2>&1 | grep -q "lossy: flight recorder" ||
  fail "ring kill: $("$llmrr" verify "$work/ringk.trace" 2>&1)"
ls "$work" | grep -q "ringk.trace.partial" && fail "ring kill: left behind: $(ls "$work" | grep ringk)"

# An earlier -o stays whole until a whole trace replaces it; kill -9 of the recording command
# (and of its program) leaves -o as it was and the partial file as a readable prefix.
old="$work/old.trace"
printf 'an earlier run' >"$old"
"$llmrr" record-vllm -o "$old" -- "$fake" VLLM 100000 "$work/old.ready" hang >/dev/null 2>&1 &
pid=$!
wait_for "$work/old.ready" 20 || fail "kill -9: the program never recorded a step"
sleep 0.3
kill -INT "$pid"   # passed on; this program ignores it, so both keep running
sleep 0.3
kill -0 "$pid" 2>/dev/null || fail "record-vllm ended on SIGINT while its program still ran"
kill -9 "$pid"
pkill -9 -f "^$fake VLLM 100000 $work/old.ready" 2>/dev/null
wait "$pid" 2>/dev/null
[ "$(cat "$old")" = "an earlier run" ] || fail "kill -9 changed the earlier -o"
partial=$(ls "$work" | grep "old.trace.partial-" | head -1)
if [ -z "$partial" ]; then
  fail "kill -9: no partial file left ($(ls "$work"))"
else
  v=$("$llmrr" verify --allow-incomplete "$work/$partial" 2>&1) ||
    fail "kill -9: the partial file is not a readable prefix: $v"
  echo "kill -9: -o kept as it was; $partial: $(echo "$v" | head -1 | cut -c1-100)"
fi
# Then a whole run replaces it.
"$llmrr" record-vllm -o "$old" -- "$fake" VLLM 4 "$work/old2.ready" >/dev/null 2>&1 ||
  fail "record-vllm of 4 steps failed"
"$llmrr" verify "$old" 2>&1 | grep -q "complete, .* 4 steps" || fail "the earlier -o was not replaced by the 4-step trace"

# A program that is killed (its own crash, or kill -9 of it alone): the readable prefix is put
# at -o, said incomplete, and the exit status is the program's.
"$llmrr" record-vllm -o "$work/killed.trace" -- "$fake" VLLM 100000 "$work/killed.ready" hang \
  >/dev/null 2>"$work/killed.err" &
pid=$!
wait_for "$work/killed.ready" 20 || fail "killed: the program never recorded a step"
sleep 0.3
pkill -9 -f "^$fake VLLM 100000 $work/killed.ready"  # the program only
wait_exit "$pid" 10
rc=$?
[ "$rc" -eq 137 ] || fail "record-vllm whose program was killed: exit $rc (expected 137)"
grep -q "no footer" "$work/killed.err" || fail "killed: the summary does not say incomplete: $(cat "$work/killed.err")"
"$llmrr" verify --allow-incomplete "$work/killed.trace" >/dev/null 2>&1 || fail "killed: -o is not a readable prefix"

# --runtime: the table names what each verb takes.
out=$("$llmrr" replay --runtime sglang x.trace 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "replay --runtime sglang: exit $rc"
echo "$out" | grep -q "expected vllm or llamacpp" || fail "replay --runtime sglang: $out"
out=$("$llmrr" bisect --runtime cuda a b 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "cuda has no bisect" || fail "bisect --runtime cuda: $out"
out=$("$llmrr" bisect --runtime llamacpp a b 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "\-\-model is required" || fail "bisect --runtime llamacpp without --model: $out"
"$llmrr" --help | grep -q "record-llamacpp" || fail "llmrr --help does not list record-llamacpp"

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all record_child checks passed"
