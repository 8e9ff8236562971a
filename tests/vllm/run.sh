#!/bin/sh
# run.sh ROOT TEST.py WORKDIR: runs a vLLM test with the venv tools/setup/vllm makes.
root=$1
test=$2
work=$3
py=${LLMRR_VLLM_PYTHON:-$root/build/venv-vllm/bin/python}
if [ ! -x "$py" ]; then
  echo "skipped: no vLLM venv at $py (run tools/setup/vllm, or set LLMRR_VLLM_PYTHON)"
  exit 77
fi
# LLMRR_VLLM_PYTHONPATH: directories put before the checkout's package, e.g. tests/vllm/avx2
# (its sitecustomize.py runs vLLM on its AVX2 kernels: CI's vllm-avx2 step).
if [ -n "${LLMRR_VLLM_PYTHONPATH:-}" ]; then
  PYTHONPATH="$LLMRR_VLLM_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONPATH
fi
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" && exec "$py" "$test"
