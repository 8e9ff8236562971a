#!/usr/bin/env python3
"""llama-server throughput unrecorded vs under `llmrr record-llamacpp` (--capture none, layers,
all; ring: layers under --ring 1M; noops: layers without op records), side by side: each round starts a fresh server per mode (the order rotates every round),
warms it with one completion, then 4 clients each send the same greedy completions at once
(-np 4: the server batches them). Tokens/s = generated tokens / wall time of that burst.
Prints per-round rates, then the medians and each mode's ratio to unrecorded.

  bench/llamacpp/record_overhead.py --llmrr build/default/tools/llmrr --rounds 5

Needs tools/setup/llamacpp (build/llamacpp) and tools/setup/smollm2 (the GGUF). Run it on a
quiet machine: llama.cpp's OpenMP threads spin, so a second busy process skews every mode.
"""
import argparse
import importlib.util
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# llama-server's client side (free port, /completion, /health) is
# llmrr.campaigns.llamacpp_fuzz's, loaded by path: that module is stdlib-only, while importing
# the llmrr package needs numpy.
_spec = importlib.util.spec_from_file_location(
    "llamacpp_fuzz", os.path.join(ROOT, "python", "llmrr", "campaigns", "llamacpp_fuzz.py"))
lcf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lcf)

PROMPTS = ["The capital of France is", "Write a haiku about the sea.",
           "List three prime numbers:", "Explain what a compiler does in one sentence."]


def die(msg):
    print(f"record_overhead: {msg}", file=sys.stderr)
    sys.exit(2)


def start(args, mode, trace, log):
    port = lcf.free_port()
    server = [os.path.join(args.llamacpp, "bin", "llama-server"), "-m", args.model,
              "-np", "4", "-t", str(args.threads), "-c", "4096", "--kv-unified",
              "--host", "127.0.0.1", "--port", str(port)]
    # "ring": layers through the flight recorder (--ring 1M: segments rotate and drop all along)
    ring = ["--ring", "1M"] if mode == "ring" else []
    # "noops": layers without the op records (LLMRR_LLAMACPP_OPS=0), so their cost shows
    capture = "layers" if mode in ("ring", "noops") else mode
    cmd = server if mode == "off" else [args.llmrr, "record-llamacpp", *ring, "-o", trace,
                                        "--capture", capture, "--"] + server
    env = dict(os.environ)
    if mode == "noops":
        env["LLMRR_LLAMACPP_OPS"] = "0"
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        lcf.wait_healthy(proc, port, 120, log.name)
    except RuntimeError as e:
        proc.kill()
        die(f"{mode}: {e}")
    return proc, port


def burst(port, tokens, reps):
    """4 clients, each `reps` completions; returns (generated tokens, seconds)."""
    counts, errors = [], []

    def client(i):
        try:
            for r in range(reps):
                out = lcf.post(port, {"prompt": PROMPTS[i], "n_predict": tokens,
                                      "temperature": 0.0, "top_k": 1, "cache_prompt": False,
                                      "seed": r})
                counts.append(int(out["tokens_predicted"]))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.perf_counter() - t0
    if errors:
        die(f"a completion failed: {errors[0]}")
    return sum(counts), secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llmrr", default=os.path.join(ROOT, "build/default/tools/llmrr"))
    ap.add_argument("--llamacpp", default=os.path.join(ROOT, "build/llamacpp"))
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/llmrr/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--modes", default="off,none,layers,all")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64, help="n_predict per completion")
    ap.add_argument("--reps", type=int, default=2, help="completions per client per burst")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    for p, what in ((args.llmrr, "--llmrr"), (args.model, "--model"),
                    (os.path.join(args.llamacpp, "bin", "llama-server"), "llama-server")):
        if not os.path.isfile(p):
            die(f"{what}: no file {p} (tools/setup/build, tools/setup/llamacpp, "
                "tools/setup/smollm2)")
    modes = args.modes.split(",")
    bad = [m for m in modes if m not in ("off", "none", "layers", "all", "ring", "noops")]
    if bad or "off" not in modes:
        die(f"--modes: off plus any of none, layers, all, ring, noops (got {args.modes!r})")
    rates = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            order = modes[rnd % len(modes):] + modes[:rnd % len(modes)]
            for mode in order:
                trace = os.path.join(tmp, f"{mode}-{rnd}.trace")
                with open(os.path.join(tmp, f"{mode}-{rnd}.log"), "w") as log:
                    proc, port = start(args, mode, trace, log)
                    try:
                        lcf.post(port, {"prompt": "Hello", "n_predict": 8, "temperature": 0.0})
                        n, secs = burst(port, args.tokens, args.reps)
                    finally:
                        proc.send_signal(signal.SIGTERM)
                        try:
                            proc.wait(timeout=120)
                        except subprocess.TimeoutExpired:
                            proc.kill()
                            proc.wait()
                if mode != "off" and not os.path.isfile(trace):
                    die(f"{mode}: no trace was written (log {log.name})")
                rates[mode].append(n / secs)
                print(f"round {rnd + 1} {mode:6s} {n} tokens in {secs:.2f} s: "
                      f"{n / secs:.1f} tok/s", file=sys.stderr)
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    base = statistics.median(rates["off"])
    print(f"llama-server -np 4 -t {args.threads}, 4 clients x {args.reps} x {args.tokens} tokens, "
          f"{args.rounds} rounds, medians; {cpu} ({platform.machine()}, {os.cpu_count()} cores)")
    print("| capture | tok/s | / unrecorded |")
    print("|---|---|---|")
    for m in modes:
        med = statistics.median(rates[m])
        print(f"| {'unrecorded' if m == 'off' else m} | {med:.1f} | {med / base:.3f} |")


if __name__ == "__main__":
    main()
