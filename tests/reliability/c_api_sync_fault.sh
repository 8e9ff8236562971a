#!/bin/sh
# The C ABI's sync_on_close under an fsync that fails (fault_inject.c preloaded into the
# toy_decode example): with --sync, close fails with the device's error, the example exits
# non-zero, and the trace verifies as complete but lossy with that reason; without --sync
# nothing is fsynced, so nothing fails.
#   c_api_sync_fault.sh LLMRR TOY_DECODE FAULT_LIB WORKDIR
set -u
llmrr=$1 toy=$2 lib=$3 dir=$4
mkdir -p "$dir"
trace="$dir/sync_fault.trace"
fail() { echo "c_api_sync_fault: $*"; exit 1; }
# Under ASan its runtime wants to be the first library loaded; the preloaded one is.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
faulty() { LD_PRELOAD="$lib" LLMRR_FAULT_PATH="$trace" LLMRR_FAULT_OP=fsync "$@"; }

rm -f "$trace"
faulty "$toy" "$trace" >"$dir/nosync.out" 2>&1 || fail "without --sync: exit $? ($(cat "$dir/nosync.out"))"
grep -q "llmrr_fault_inject: " "$dir/nosync.out" && fail "without --sync an fsync was made"
"$llmrr" verify "$trace" >/dev/null || fail "without --sync the trace does not verify"

rm -f "$trace"
faulty "$toy" "$trace" --sync >"$dir/sync.out" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "with --sync and a failing fsync the example exited 0"
grep -q "close: .*fsync: Input/output error" "$dir/sync.out" ||
  fail "close did not report the fsync error: $(cat "$dir/sync.out")"
out=$("$llmrr" inspect "$trace" 2>&1) || fail "the lossy trace does not open: $out"
printf '%s\n' "$out" | grep -qi "lossy.*fsync: Input/output error" ||
  fail "the footer does not say lossy (fsync): $(printf '%s\n' "$out" | head -3)"
"$llmrr" verify "$trace" >/dev/null 2>&1 || true   # lossy: verify may say so; must not crash
[ $? -lt 3 ] || fail "verify crashed on the lossy trace"
echo "c_api_sync_fault: ok (close: $(grep -o 'fsync: Input/output error' "$dir/sync.out" | head -1))"
