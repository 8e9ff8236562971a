"""llmrr.llamacpp_fuzz: run one target prompt through llama-server under many drawn server
settings and co-request mixes, record every run with `llmrr record-llamacpp`, and report what
splits the target.

    llmrr fuzz --runtime llamacpp --model M.gguf --runs 200 --seed 1 --out fz/
    python -m llmrr.llamacpp_fuzz --model M.gguf --runs 200 --seed 1 --out fz/   # the same

Each run draws: slots (-np 1..4), n_batch/n_ubatch (512/512, 64/16, 32/7), cache_prompt on
or off, 0..5 co-requests from a fixed pool of short prompts, each with an arrival delay of
0..300 ms (the target's own delay too). Every run starts its own llama-server under
`record-llamacpp --capture layers` (--kv-unified -t 2 -c 2048 --no-cache-idle-slots
--cache-ram 0, so the trace holds every memory call and replays), sends the target (greedy,
return_tokens) and the co-requests, stops the server, checks the trace with `llmrr verify`,
and compares the target with the baseline (the target alone on a -np 1 server, recorded
first) by `llmrr diff BASE RUN --align prompt --json`: identical, numerical (logits differ,
same tokens) or visible (a token differs), with the first differing step and site.

Writes OUT/summary.json and OUT/summary.md (counts per class, per n_ubatch, per cache_prompt,
per slot count, examples of splits); keeps the baseline and the traces of runs that differ
under OUT/traces/. OUT must not exist; the work goes to a temporary folder beside it, renamed
at the end. Stdlib only (python3). Exit: 0 no run split, 1 some run split, 2 bad input.
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

TARGET = "The capital of France is"
POOL = [
    "The capital of Germany is",
    "Write a haiku about the sea.",
    "List three prime numbers:",
    "In 1969, the first person to walk on the Moon was",
    "The quick brown fox",
    "Explain photosynthesis in one sentence.",
    "The capital of France is a city that",
    "Once upon a time",
    "Translate 'good morning' into Spanish:",
    "What is 12 times 7?",
    "Name a famous painter.",
    "The weather today is",
]
BATCHES = [(512, 512), (64, 16), (32, 7)]
REPEATABLE = ["--no-cache-idle-slots", "--cache-ram", "0"]


def die(msg):
    sys.stderr.write("llmrr fuzz --runtime llamacpp: error: %s\n" % msg)
    sys.exit(2)


def llmrr_bin():
    b = os.environ.get("LLMRR_BIN") or shutil.which("llmrr")
    return b or die("no llmrr binary: set $LLMRR_BIN or put llmrr on PATH")


def draw(rng, space):
    b, ub = rng.choice(BATCHES)
    n = rng.randint(0, space["max_co"])
    return {"np": rng.randint(1, space["slots"]), "n_batch": b, "n_ubatch": ub,
            "cache_prompt": rng.random() < 0.5,
            "target_delay_ms": rng.randint(0, space["max_delay_ms"]),
            "co": [{"prompt": rng.choice(POOL), "delay_ms": rng.randint(0, space["max_delay_ms"]),
                    "n_predict": rng.randint(1, space["n_predict"])} for _ in range(n)]}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(port, body, timeout=300):
    req = urllib.request.Request("http://127.0.0.1:%d/completion" % port,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_healthy(proc, port, seconds, log_name):
    """Waits until llama-server on `port` answers /health with 200; RuntimeError when `proc`
    exits first or `seconds` pass."""
    deadline = time.time() + seconds
    while True:
        if proc.poll() is not None:
            raise RuntimeError("llama-server exited with %d (see %s)" % (proc.returncode, log_name))
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if time.time() > deadline:
            raise RuntimeError("llama-server not healthy after %d s" % seconds)
        time.sleep(0.1)


def serve_and_send(a, binary, trace, cfg):
    """One llama-server under record-llamacpp; the target and the co-requests, each in its own
    thread after its delay; SIGTERM. Returns the target's response."""
    port = free_port()
    cmd = [binary, "record-llamacpp", "-o", trace, "--capture", a.capture, "--",
           a.llama_server, "-m", a.model, "-np", str(cfg["np"]), "-t", "2", "-c", "2048",
           "-b", str(cfg["n_batch"]), "-ub", str(cfg["n_ubatch"]), "--kv-unified",
           "--host", "127.0.0.1", "--port", str(port), *REPEATABLE]
    env = dict(os.environ)
    # OpenMP's threads spin at each barrier by default; the recorder's graph pieces end in one
    # per recorded layer, and on a loaded machine spinning made -t 2 decode ~250x slower here.
    env.setdefault("OMP_WAIT_POLICY", "passive")
    with open(trace + ".log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_healthy(proc, port, 180, trace + ".log")
            jobs = [(cfg["target_delay_ms"], TARGET, a.n_predict)]
            jobs += [(c["delay_ms"], c["prompt"], c["n_predict"]) for c in cfg["co"]]
            out = [None] * len(jobs)
            errs = []

            def one(i, delay, prompt, n):
                time.sleep(delay / 1000.0)
                try:
                    out[i] = post(port, {"prompt": prompt, "n_predict": n, "temperature": 0.0,
                                         "top_k": 1, "seed": 0, "return_tokens": True,
                                         "cache_prompt": cfg["cache_prompt"]})
                except Exception as e:  # noqa: BLE001 - reported below
                    errs.append(e)

            threads = [threading.Thread(target=one, args=(i, *j)) for i, j in enumerate(jobs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errs:
                raise RuntimeError("a completion failed: %s" % errs[0])
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
    if rc != 0:
        raise RuntimeError("record-llamacpp exited with %d (see %s.log)" % (rc, trace))
    return out[0]


def verify(binary, trace):
    v = subprocess.run([binary, "verify", trace], capture_output=True, text=True)
    if v.returncode != 0:
        raise RuntimeError("%s does not verify: %s" % (trace, (v.stdout + v.stderr)[-500:]))


def compare(binary, base, trace):
    """The target (the baseline's only request) against its pair in `trace`."""
    d = subprocess.run([binary, "diff", base, trace, "--align", "prompt", "--json"],
                       capture_output=True, text=True)
    if d.returncode not in (0, 1):
        raise RuntimeError("llmrr diff %s %s: exit %d: %s"
                           % (base, trace, d.returncode, d.stderr.strip()[-500:]))
    j = json.loads(d.stdout)
    reqs = [q for q in j.get("requests", []) if q.get("a") == 0]
    if len(reqs) != 1:
        raise RuntimeError("llmrr diff %s %s: the target is not paired" % (base, trace))
    q = reqs[0]
    c = {"verdict": "identical", "diff_verdict": q.get("verdict"), "first_step": -1,
         "first_site": None, "first_position": -1, "visible_token": -1, "first_batch": None}
    if q.get("numerical_split"):
        c["verdict"] = "numerical"
    if q.get("visible_split"):
        c["verdict"] = "visible"
        c["visible_token"] = q["visible_split"].get("token_index", -1)
    f = q.get("first_difference")
    if f:
        c["first_step"] = f.get("step_b", -1)
        c["first_site"] = f.get("site")
        c["first_position"] = f.get("position", -1)
        b = f.get("batch_b") or {}
        # the run's batch at the first difference: its rows, requests, prefill segments
        c["first_batch"] = {k: b.get(k, -1) for k in ("rows", "requests", "prefill_segments")}
    return c


def bucket(table, key, verdict):
    b = table.setdefault(str(key), {"runs": 0, "identical": 0, "numerical": 0, "visible": 0})
    b["runs"] += 1
    b[verdict] += 1


def summarize(a, results, base_text, seconds):
    by = {"n_ubatch": {}, "cache_prompt": {}, "np": {}, "co_requests": {}}
    counts = {"identical": 0, "numerical": 0, "visible": 0}
    for r in results:
        v = r["verdict"]
        counts[v] += 1
        bucket(by["n_ubatch"], "%d/%d" % (r["config"]["n_batch"], r["config"]["n_ubatch"]), v)
        bucket(by["cache_prompt"], "on" if r["config"]["cache_prompt"] else "off", v)
        bucket(by["np"], r["config"]["np"], v)
        bucket(by["co_requests"], len(r["config"]["co"]), v)
    return {"runtime": "llamacpp", "model": a.model, "target": TARGET, "n_predict": a.n_predict,
            "seed": a.seed, "runs": len(results), "counts": counts, "by": by,
            "verified": sum(1 for r in results if r["verified"]),
            "baseline_text": base_text, "server_per_run": True, "seconds": round(seconds, 1),
            "examples": [r for r in results if r["verdict"] != "identical"][:5],
            "results": results}


def markdown(s):
    out = ["| class | runs |", "|---|---|"]
    out += ["| %s | %d |" % (k, v) for k, v in s["counts"].items()]
    for name, title in (("n_ubatch", "-b/-ub"), ("cache_prompt", "cache_prompt"),
                        ("np", "-np"), ("co_requests", "co-requests")):
        out += ["", "| %s | runs | identical | numerical | visible |" % title,
                "|---|---|---|---|---|"]
        for k in sorted(s["by"][name], key=lambda x: (len(x), x)):
            b = s["by"][name][k]
            out.append("| %s | %d | %d | %d | %d |" % (k, b["runs"], b["identical"],
                                                      b["numerical"], b["visible"]))
    out += ["", "%d runs, %d traces verified, %.0f s; baseline text: %s"
            % (s["runs"], s["verified"], s["seconds"], json.dumps(s["baseline_text"]))]
    for e in s["examples"]:
        out.append("- run %d (%s): %s, first difference step %d, site %s, in a batch of %s"
                   % (e["run"], json.dumps(e["config"]), e["verdict"], e["first_step"],
                      e["first_site"], json.dumps(e["first_batch"])))
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="llmrr fuzz --runtime llamacpp",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a .gguf file")
    p.add_argument("--runs", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", "-o", required=True, help="a new folder")
    p.add_argument("--n-predict", type=int, default=16, help="the target's tokens (default 16)")
    p.add_argument("--max-co", type=int, default=5, help="co-requests per run, at most (5)")
    p.add_argument("--max-delay-ms", type=int, default=300,
                   help="arrival delays drawn from 0..this (default 300)")
    p.add_argument("--capture", choices=("none", "layers", "all"), default="layers",
                   help="record-llamacpp's fingerprints (default layers; all names the op)")
    p.add_argument("--slots", type=int, default=4, help="-np drawn from 1..this (default 4)")
    p.add_argument("--llama-server", default=None,
                   help="default: $LLMRR_LLAMACPP_DIR/bin/llama-server, else build/llamacpp")
    a = p.parse_args(argv)
    if a.runs < 1:
        die("--runs: expected at least 1, found %d" % a.runs)
    if a.slots < 1:
        die("--slots: expected at least 1, found %d" % a.slots)
    if a.n_predict < 1 or a.max_co < 0 or a.max_delay_ms < 0 or a.seed < 0:
        die("--n-predict must be >= 1; --max-co, --max-delay-ms and --seed >= 0")
    if not os.path.isfile(a.model):
        die("--model: no such file: %s" % a.model)
    if os.path.lexists(a.out):
        die("--out: %s exists: give a new folder (nothing is overwritten)" % a.out)
    binary = llmrr_bin()
    if a.llama_server is None:
        d = os.environ.get("LLMRR_LLAMACPP_DIR") or os.path.join(
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(binary)))),
            "llamacpp")
        a.llama_server = os.path.join(d, "bin", "llama-server")
    if not os.access(a.llama_server, os.X_OK):
        die("no llama-server at %s (tools/setup/llamacpp, or --llama-server)" % a.llama_server)
    parent = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(parent):
        die("--out: no folder %s" % parent)
    space = {"slots": a.slots, "max_co": a.max_co, "max_delay_ms": a.max_delay_ms,
             "n_predict": a.n_predict}
    work = tempfile.mkdtemp(prefix=".llamacpp-fuzz-", dir=parent)
    t0 = time.time()
    try:
        os.mkdir(os.path.join(work, "traces"))
        base = os.path.join(work, "traces", "baseline.trace")
        one = {"np": 1, "n_batch": 512, "n_ubatch": 512, "cache_prompt": False,
               "target_delay_ms": 0, "co": []}
        resp = serve_and_send(a, binary, base, one)
        verify(binary, base)
        base_text = resp.get("content", "")
        results = []
        for i in range(a.runs):
            cfg = draw(random.Random("%d/%d" % (a.seed, i)), space)
            trace = os.path.join(work, "traces", "run%d.trace" % i)
            resp = serve_and_send(a, binary, trace, cfg)
            verify(binary, trace)
            c = compare(binary, base, trace)
            r = {"run": i, "config": cfg, "verified": True, "text": resp.get("content", ""),
                 "tokens": resp.get("tokens", []), **c}
            results.append(r)
            if c["verdict"] == "identical" and c["first_site"] is None:
                for f in (trace, trace + ".log"):
                    if os.path.exists(f):
                        os.remove(f)
            sys.stderr.write("run %d/%d: %s\n" % (i + 1, a.runs, c["verdict"]))
        s = summarize(a, results, base_text, time.time() - t0)
        with open(os.path.join(work, "summary.json"), "w") as f:
            json.dump(s, f, indent=1)
        with open(os.path.join(work, "summary.md"), "w") as f:
            f.write(markdown(s))
        os.rename(work, a.out)
    except RuntimeError as e:
        shutil.rmtree(work, ignore_errors=True)
        sys.stderr.write("llmrr fuzz --runtime llamacpp: error: %s\n" % e)
        return 3
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    sys.stdout.write(markdown(s))
    return 1 if s["counts"]["numerical"] + s["counts"]["visible"] else 0


if __name__ == "__main__":
    sys.exit(main())
