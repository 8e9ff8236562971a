#!/bin/sh
# run.sh ROOT TEST.py WORKDIR: runs a Python test with the venv tools/setup/python makes.
root=$1
test=$2
work=$3
py=${LLMRR_PYTHON:-$root/build/venv/bin/python}
if [ ! -x "$py" ]; then
  echo "skipped: no Python venv at $py (run tools/setup/python, or set LLMRR_PYTHON)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" && exec "$py" "$test"
