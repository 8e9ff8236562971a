#!/bin/sh
# tools/ci/check-required and the fuzz regression driver refuse what did not run (issue 37);
# check-required refuses a skip that no skip line of its list allows (issue 44).
#   check_required_test.sh SOURCE_DIR FUZZ_REGRESSION_DRIVER
set -u
src="$1"
driver="$2"
check="$src/tools/ci/check-required"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() {  # expect CODE PATTERN -- COMMAND...: exit CODE, and stderr matches PATTERN
  code="$1"; pat="$2"; shift 3
  "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -q -- "$pat" "$tmp/out"; then
    echo "FAIL: $* exited $rc (expected $code, output matching '$pat'):"; cat "$tmp/out"
    fails=$((fails + 1))
  fi
}

cat >"$tmp/list" <<'LIST'
a pass  story\.paris        the France story
a pass  fuzz_regression\..* the corpora
a built Gpu\..*             gpu binaries built
a skip  Other\.Skips        needs what this step lacks
a skip  Gone\..*            a test that no longer exists
b pass  Inst/Suite\.Case/X  a parameterized gtest name
LIST
mkdir -p "$tmp/ok/a" "$tmp/ok/b"
# ctest --output-junit: one <testsuite>, testcase name = the ctest name.
cat >"$tmp/ok/a/ctest.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="x" tests="4" failures="0" disabled="0" skipped="1">
  <testcase name="story.paris" classname="story.paris" time="1" status="run"><system-out>Paris</system-out></testcase>
  <testcase name="fuzz_regression.a" classname="fuzz_regression.a" time="1" status="run"/>
  <testcase name="Gpu.Runs" classname="Gpu.Runs" time="0" status="notrun"><skipped message="Skipped"/><system-out>[  SKIPPED ] no device</system-out></testcase>
  <testcase name="Other.Skips" classname="Other.Skips" time="0" status="notrun"><skipped message="Skipped"/><system-out>skipped: not required</system-out></testcase>
</testsuite>
XML
# gtest --gtest_output=xml: <testsuites>, Suite.Test from classname and name.
cat >"$tmp/ok/b/t.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="1"><testsuite name="Inst/Suite"><testcase name="Case/X" classname="Inst/Suite" status="run" result="completed"/></testsuite></testsuites>
XML
expect 0 "every required test of a b ran and passed" -- "$check" --list "$tmp/list" --junit-dir "$tmp/ok" a b
# An allow-listed skip passes, with its reason; a skip line that matches nothing is a note.
expect 0 "Other.Skips skipped (allowed: needs what this step lacks): skipped: not required" -- "$check" --list "$tmp/list" --junit-dir "$tmp/ok" a
expect 0 "note: skip line 5 (Gone.*) matches no test of the step: a stale allow-list entry" -- "$check" --list "$tmp/list" --junit-dir "$tmp/ok" a

# A skip no line allows fails, naming the test, the reason and the hint: in a ctest file ...
mkdir -p "$tmp/unlisted/a" "$tmp/unlisted-gtest/b"
sed 's|</testsuite>|  <testcase name="Extra.Skips" classname="Extra.Skips" time="0" status="notrun"><skipped message="Skipped"/><system-out>skipped: no widget here</system-out></testcase>\n</testsuite>|' \
  "$tmp/ok/a/ctest.xml" >"$tmp/unlisted/a/ctest.xml"
expect 1 "Extra.Skips: SKIPPED (not allow-listed): skipped: no widget here -- add a 'a skip PATTERN why' line to $tmp/list if it is expected" -- "$check" --list "$tmp/list" --junit-dir "$tmp/unlisted" a
# ... and in a gtest file (GTEST_SKIP: result="skipped").
sed 's|</testsuite>|<testcase name="Case/Y" classname="Inst/Suite" status="run" result="skipped"><skipped message="no device"/></testcase></testsuite>|' \
  "$tmp/ok/b/t.xml" >"$tmp/unlisted-gtest/b/t.xml"
expect 1 "Inst/Suite.Case/Y: SKIPPED (not allow-listed): no device" -- "$check" --list "$tmp/list" --junit-dir "$tmp/unlisted-gtest" b
# A skip line does not excuse a required test.
{ cat "$tmp/list"; echo 'a skip  story\..*  cannot excuse a pass line'; } >"$tmp/list-excuse"
# A skip line without its reason is a malformed list.
{ cat "$tmp/list"; echo 'a skip  Other\.Skips'; } >"$tmp/list-noreason"
expect 2 "a skip line needs its reason" -- "$check" --list "$tmp/list-noreason" --junit-dir "$tmp/ok" a

# The required story skipped: fails, naming it and the reason.
mkdir -p "$tmp/skip/a"
sed 's|<testcase name="story.paris" classname="story.paris" time="1" status="run"><system-out>Paris</system-out></testcase>|<testcase name="story.paris" classname="story.paris" time="0" status="notrun"><skipped message="Skipped"/><system-out>skipped: model.gguf is absent</system-out></testcase>|' \
  "$tmp/ok/a/ctest.xml" >"$tmp/skip/a/ctest.xml"
expect 1 "story.paris: SKIPPED: skipped: model.gguf is absent" -- "$check" --list "$tmp/list" --junit-dir "$tmp/skip" a
expect 1 "story.paris: SKIPPED: skipped: model.gguf is absent" -- "$check" --list "$tmp/list-excuse" --junit-dir "$tmp/skip" a
# Absent from the run (the corpus tests were not registered): fails, naming the pattern.
mkdir -p "$tmp/absent/a"
grep -v fuzz_regression "$tmp/ok/a/ctest.xml" >"$tmp/absent/a/ctest.xml"
expect 1 "fuzz_regression.*: absent from the run" -- "$check" --list "$tmp/list" --junit-dir "$tmp/absent" a
# Failed.
mkdir -p "$tmp/fail/a"
sed 's|status="run"/>|status="fail"><failure message="Failed"/></testcase>|' "$tmp/ok/a/ctest.xml" >"$tmp/fail/a/ctest.xml"
expect 1 "fuzz_regression.a: FAILED" -- "$check" --list "$tmp/list" --junit-dir "$tmp/fail" a
# A gtest listing (--gtest_list_tests with xml output) has no status: not a run.
mkdir -p "$tmp/list-only/b"
sed 's| status="run" result="completed"||' "$tmp/ok/b/t.xml" >"$tmp/list-only/b/t.xml"
expect 1 "Inst/Suite.Case/X: SKIPPED" -- "$check" --list "$tmp/list" --junit-dir "$tmp/list-only" b
# A step that wrote no file, and --all over a directory missing a step.
expect 1 "\[b\] no result file" -- "$check" --list "$tmp/list" --junit-dir "$tmp/skip" b
expect 1 "\[b\] no result file" -- "$check" --list "$tmp/list" --junit-dir "$tmp/absent" --all
expect 2 "no line of" -- "$check" --list "$tmp/list" --junit-dir "$tmp/ok" nosuchstep

# The fuzz regression driver: a missing corpus and an empty one fail; a file runs.
expect 1 "does not exist" -- "$driver" "$tmp/no-such-corpus"
mkdir -p "$tmp/empty-corpus"
expect 1 "holds no file" -- "$driver" "$tmp/empty-corpus"
expect 1 "no corpus given" -- "$driver"
printf 'x' >"$tmp/empty-corpus/one"
expect 0 "1 inputs ran clean" -- "$driver" "$tmp/empty-corpus"

[ "$fails" -eq 0 ] && echo "check-required and the regression driver: all cases hold"
exit "$fails"
