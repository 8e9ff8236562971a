#!/bin/sh
# lint.sh ROOT WORKDIR: ruff and mypy over python/llmrr (settings in python/pyproject.toml) with the venv
# tools/setup/python makes, which installs both at pinned versions. Skipped (77) only when there
# is no venv; a finding, or a venv without ruff or mypy, fails.
root=$1
work=$2
py=${LLMRR_PYTHON:-$root/build/venv/bin/python}
if [ ! -x "$py" ]; then
  echo "skipped: no Python venv at $py (run tools/setup/python, or set LLMRR_PYTHON)"
  exit 77
fi
mkdir -p "$work" && cd "$root" || exit 1
rc=0
"$py" -m ruff check --cache-dir "$work/ruff" python/llmrr || rc=1
"$py" -m mypy --config-file python/pyproject.toml --cache-dir "$work/mypy" python/llmrr || rc=1
exit $rc
