#!/usr/bin/env python3
"""llmrr vs llama.cpp on the same GGUF, side by side: prompt tokens/s, decode tokens/s and
peak RSS, medians of interleaved repetitions, each measurement in a fresh process.

llama.cpp runs through llama-cpp-python (PyPI; it builds llama.cpp from source), which must
be importable by --python (default: this interpreter). llmrr runs as `llmrr run`, the way a
user runs it. Both get the same token ids (no tokenizer, no chat template), greedy decoding,
the same thread count.

  python3 -m venv /work/venv-llama
  CMAKE_ARGS="-DGGML_NATIVE=ON" /work/venv-llama/bin/pip install llama-cpp-python
  bench/engine/peer_llamacpp.py --python /work/venv-llama/bin/python \\
      --llmrr build/default/tools/llmrr --threads 2 --reps 5

Decode rate = G / (t(prompt + G tokens) − t(prompt + 0 tokens)) for llmrr (engine time from
its summary line), and the timed per-token eval loop for llama.cpp; prompt rate = P / the
prefill time. Peak RSS is the child's ru_maxrss (llama.cpp maps the file: its pages count).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

LLAMA_CHILD = r"""
import json, sys, time
import numpy as np
from llama_cpp import Llama
model, threads, P, G = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ids = [int(t) for t in sys.argv[5].split(",")]
llm = Llama(model_path=model, n_threads=threads, n_threads_batch=threads, n_ctx=P + G + 16,
            n_batch=512, n_ubatch=512, logits_all=False, verbose=False)
t0 = time.perf_counter()
llm.eval(ids)
t1 = time.perf_counter()
first = int(np.argmax(llm.scores[llm.n_tokens - 1]))
tok, out = first, [first]
t2 = time.perf_counter()
for _ in range(G):
    llm.eval([tok])
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    out.append(tok)
t3 = time.perf_counter()
print(json.dumps({"prompt_s": t1 - t0, "decode_s": t3 - t2, "tokens": out[:8]}))
"""


def spawn(cmd):
    """Runs cmd in a fresh process; returns (stdout, stderr, exit status, its peak RSS in MiB)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            os.execvp(cmd[0], cmd)
        _, status, ru = os.wait4(pid, 0)
        out.seek(0)
        err.seek(0)
        o, e = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if status != 0:
        sys.exit(f"peer_llamacpp: {' '.join(cmd[:4])} ... failed ({status}):\n{e[-2000:]}")
    return o, e, status, ru.ru_maxrss / 1024


def llama_once(py, model, threads, ids, gen):
    out, _, _, rss = spawn([py, "-c", LLAMA_CHILD, model, str(threads), str(len(ids)), str(gen),
                            ",".join(map(str, ids))])
    r = json.loads(out.strip().splitlines()[-1])
    return {"prompt": len(ids) / r["prompt_s"], "decode": gen / r["decode_s"], "rss_mb": rss,
            "tokens": r["tokens"]}


SUMMARY = re.compile(r"(\d+) rows \(.*\| [\d.]+ tokens/s, ([\d.]+) rows/s")


def llmrr_secs(binary, model, threads, ids, max_tokens, extra):
    """Engine seconds (rows / rows per second of the summary line) and peak RSS of one run."""
    cmd = [binary, "run", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
           "--max-tokens", str(max_tokens), "--threads", str(threads)] + extra
    _, err, _, rss = spawn(cmd)
    m = SUMMARY.search(err)
    if not m:
        sys.exit(f"peer_llamacpp: no summary line from llmrr run:\n{err[-2000:]}")
    return int(m.group(1)) / float(m.group(2)), rss


def llmrr_once(binary, model, threads, ids, gen, extra):
    # max-tokens 1: the prefill step samples the first token; the rest are decode steps.
    t_prompt, rss1 = llmrr_secs(binary, model, threads, ids, 1, extra)
    t_all, rss2 = llmrr_secs(binary, model, threads, ids, gen + 1, extra)
    return {"prompt": len(ids) / t_prompt, "decode": gen / max(t_all - t_prompt, 1e-9),
            "rss_mb": max(rss1, rss2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    home = os.path.expanduser("~")
    ap.add_argument("--model", default=os.path.join(
        os.environ.get("LLMRR_MODEL_DIR", home + "/.cache/llmrr/models"),
        "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--llmrr", default="build/default/tools/llmrr")
    ap.add_argument("--python", default=sys.executable, help="interpreter with llama_cpp")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--policy", default="production", choices=["production", "invariant"])
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        sys.exit(f"peer_llamacpp: {a.model} not found (tools/fetch-smollm2)")
    # Deterministic ordinary-text ids (no BOS), the same for both engines.
    ids = [(32 + (t * 31) % 90) * 37 % 40000 + 200 for t in range(a.prompt_tokens)]
    extra = ["--policy", a.policy]
    res = {"llama.cpp": [], "llmrr": []}
    for _ in range(a.reps):  # interleaved: machine noise hits both alike
        res["llama.cpp"].append(llama_once(a.python, a.model, a.threads, ids, a.gen))
        res["llmrr"].append(llmrr_once(a.llmrr, a.model, a.threads, ids, a.gen, extra))
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("prompt", "decode", "rss_mb")}
           for k, v in res.items()}
    size_mb = os.path.getsize(a.model) / 2**20
    print(f"model {os.path.basename(a.model)} ({size_mb:.1f} MiB), {a.threads} threads, "
          f"prompt {a.prompt_tokens} tokens, decode {a.gen} tokens, {a.reps} interleaved reps, "
          f"llmrr policy {a.policy}")
    print("| engine | prompt tok/s | decode tok/s | peak RSS MiB |")
    print("|---|---:|---:|---:|")
    for k in ("llama.cpp", "llmrr"):
        m = med[k]
        print(f"| {k} | {m['prompt']:.0f} | {m['decode']:.1f} | {m['rss_mb']:.0f} |")
    L, R = med["llama.cpp"], med["llmrr"]
    print(f"| llmrr / llama.cpp | {R['prompt'] / L['prompt']:.2f} | "
          f"{R['decode'] / L['decode']:.2f} | {R['rss_mb'] / L['rss_mb']:.2f} |")
    print(f"llmrr peak RSS / model file = {R['rss_mb'] / size_mb:.2f}")


if __name__ == "__main__":
    main()
