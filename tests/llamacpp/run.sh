#!/bin/sh
# run.sh TEST.py WORKDIR: runs a llama.cpp test in its own work folder (python3, stdlib only).
test=$1
work=$2
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" && exec python3 "$test"
