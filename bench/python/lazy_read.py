"""Lazy reads: opening a large trace and reading one table over a step range, against reading
that table whole and against reading every table at open (what llmrr.open did before the
reader went lazy: llmrr_reader_open, the eager C path), and against opening alone (the
interpreter, numpy and the index: the floor under every row). Each measurement is a fresh process
(so its peak RSS is its own), the modes interleaved, medians of --runs.

    build/venv/bin/python bench/python/lazy_read.py [--trace T] [--mb 100] [--runs 5]

Without --trace it records one with `llmrr record --model builtin:tiny-moe --capture all
--requests` (128 requests of 400 tokens, arriving 10 steps apart) into a temporary
directory, sized by --mb. Needs $LLMRR_BIN (the CLI), the package on PYTHONPATH (python/)
and the library ($LLMRR_RECORDER_LIB or build/default)."""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r"""
import ctypes, json, resource, sys, time
import numpy as np
import llmrr
from llmrr.core import arrow
mode, path, first, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
t0 = time.perf_counter()
if mode == "eager":          # every table at open: the reader's old llmrr.open path
    L = arrow.lib()
    h = ctypes.c_void_p()
    assert L.llmrr_reader_open(path.encode(), ctypes.byref(h)) == 0
    rows = L.llmrr_reader_rows(h, b"fingerprints")
    L.llmrr_reader_close(h)
elif mode == "open":         # header and frame index only
    t = llmrr.open(path)
    rows = 0
else:
    t = llmrr.open(path)
    fp = t.table("fingerprints", steps=(first, stop)) if mode == "range" else t.fingerprints
    rows = len(fp)
    float(np.sum(fp.l2, dtype=np.float64))  # touch a column
dt = time.perf_counter() - t0
print(json.dumps({"s": dt, "rows": int(rows),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def record(out_dir, mb):
    reqs = os.path.join(out_dir, "requests.jsonl")
    n = max(8, int(128 * mb / 100))
    with open(reqs, "w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": "request %d: once upon a time in a land far away" % i,
                                "max_tokens": 400, "arrival_step": 10 * i}) + "\n")
    path = os.path.join(out_dir, "big.trace")
    subprocess.run([os.environ.get("LLMRR_BIN", os.path.join(ROOT, "build/default/tools/llmrr")),
                    "record", "--model", "builtin:tiny-moe", "--capture", "all", "--requests",
                    reqs, "-o", path], check=True, capture_output=True)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace")
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=100, help="the range's length in steps")
    args = ap.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    lib = os.path.join(ROOT, "build/default/recorder/libllmrr_recorder_c.so")
    if "LLMRR_RECORDER_LIB" not in env and os.path.exists(lib):
        env["LLMRR_RECORDER_LIB"] = lib
    with tempfile.TemporaryDirectory() as tmp:
        path = args.trace or record(tmp, args.mb)
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import llmrr
        t = llmrr.open(path)
        steps = t.header["step_count"]
        first = steps // 2
        stop = first + args.steps
        size = os.path.getsize(path)
        print("trace %s: %.1f MB, %d steps, %d tokens; range [%d, %d)" %
              (path if args.trace else "(tiny-moe, capture all)", size / 1e6, steps,
               t.header["token_count"], first, stop), file=sys.stderr)
        modes = ["range", "open", "table", "eager"]
        got = {m: [] for m in modes}
        for _ in range(args.runs):
            for m in modes:
                p = subprocess.run([sys.executable, "-c", CHILD, m, path, str(first), str(stop)],
                                   check=True, capture_output=True, text=True, env=env)
                got[m].append(json.loads(p.stdout))
        base = {k: statistics.median(r[k] for r in got["range"]) for k in ("s", "rss_mb")}
        print("| read | rows | time (median) | × range | peak RSS | × range |")
        print("|---|---|---|---|---|---|")
        labels = {"open": "open only: header and frame index (`llmrr.open`)",
                  "range": "fingerprints, steps [%d, %d) (`t.table(..., steps=)`)" % (first, stop),
                  "table": "fingerprints, all steps (`t.fingerprints`)",
                  "eager": "every table at open (`llmrr_reader_open`, the old `llmrr.open`)"}
        for m in modes:
            s = statistics.median(r["s"] for r in got[m])
            rss = statistics.median(r["rss_mb"] for r in got[m])
            print("| %s | %d | %.3f s | %.1f | %.0f MB | %.1f |" %
                  (labels[m], got[m][0]["rows"], s, s / base["s"], rss, rss / base["rss_mb"]))
        idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("(this script's own peak RSS, the trace's header and index: %.0f MB)" % idle,
              file=sys.stderr)


if __name__ == "__main__":
    main()
