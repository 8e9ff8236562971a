"""llmrr.campaigns.llamacpp_fuzz: run one target prompt through llama-server under many drawn
server settings and co-request mixes, record every run with `llmrr record-llamacpp`, and
report what splits the target.

    llmrr fuzz --runtime llamacpp --model M.gguf --runs 200 --seed 1 --out fz/
    python3 python/llmrr/campaigns/llamacpp_fuzz.py --model M.gguf ...   # what that runs
    python -m llmrr.campaigns.llamacpp_fuzz --model M.gguf ...           # the same

Each run draws: slots (-np 1..4), n_batch/n_ubatch (512/512, 64/16, 32/7), cache_prompt on
or off, 0..5 co-requests from a fixed pool of short prompts, each with an arrival delay of
0..300 ms (the target's own delay too). Every run starts its own llama-server under
`record-llamacpp --capture layers` (--kv-unified -t 2 -c 2048 --no-cache-idle-slots
--cache-ram 0, so the trace holds every memory call and replays), sends the target (greedy,
return_tokens) and the co-requests, stops the server, checks the trace with `llmrr verify`,
and compares the target with the baseline (the target alone on a -np 1 server, recorded
first) by `llmrr diff BASE RUN --align prompt --json`: identical, numerical (logits differ,
same tokens) or visible (a token differs), with the first differing step and site and the ops
that ran otherwise there (op records). Each split is then shrunk (`llmrr bisect --runtime
llamacpp`, unless --no-shrink): the 1-minimal set of the target's co-requests whose rows,
replayed in libllama with the target's, still split it from the target replayed alone, with
that minimal split's op-level cause; the replays stay in OUT/bisect/runN/.

Writes OUT/summary.json through llmrr.campaigns.fuzz_summary (the schema of `llmrr fuzz`,
docs/fuzz-summary.md, with a "llamacpp" section at the top and in every run: counts per
-b/-ub, cache_prompt, slot count and co-request count, the server's text) and
OUT/summary.md; keeps the baseline and the traces of runs that differ under OUT/traces/. OUT
must not exist; the work goes to a temporary folder beside it, renamed at the end.

Stdlib only: `llmrr fuzz --runtime llamacpp` runs this file with python3, which need not have
numpy (the llmrr package's reader needs it), so traces are verified and compared by the CLI
(`llmrr verify`, `llmrr diff --json`) and the summary writer beside this file is loaded by
path. Exit: 0 no run split, 1 some run split, 2 bad input.
"""
from __future__ import annotations

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
from typing import TYPE_CHECKING, Any, NoReturn, Sequence

if TYPE_CHECKING or __package__:
    from . import fuzz_summary
else:  # run as a file (see above): fuzz_summary.py beside it, loaded by path
    import importlib.util
    _spec = importlib.util.spec_from_file_location(
        "llmrr_fuzz_summary",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_summary.py"))
    fuzz_summary = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = fuzz_summary
    _spec.loader.exec_module(fuzz_summary)

RUNTIME = "llamacpp"
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
BATCHES = [(512, 512), (64, 16), (32, 7)]  # (n_batch, n_ubatch)
REPEATABLE = ["--no-cache-idle-slots", "--cache-ram", "0"]


def die(msg: str) -> NoReturn:
    sys.stderr.write("llmrr fuzz --runtime llamacpp: error: %s\n" % msg)
    sys.exit(2)


def llmrr_bin() -> str:
    b = os.environ.get("LLMRR_BIN") or shutil.which("llmrr")
    return b or die("no llmrr binary: set $LLMRR_BIN or put llmrr on PATH")


def draw(rng: random.Random, space: dict[str, int]) -> dict[str, Any]:
    b, ub = rng.choice(BATCHES)
    n = rng.randint(0, space["max_co"])
    return {"np": rng.randint(1, space["slots"]), "n_batch": b, "n_ubatch": ub,
            "cache_prompt": rng.random() < 0.5,
            "target_delay_ms": rng.randint(0, space["max_delay_ms"]),
            "co": [{"prompt": rng.choice(POOL), "delay_ms": rng.randint(0, space["max_delay_ms"]),
                    "n_predict": rng.randint(1, space["n_predict"])} for _ in range(n)]}


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def post(port: int, body: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    req = urllib.request.Request("http://127.0.0.1:%d/completion" % port,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        reply: dict[str, Any] = json.loads(r.read())
    return reply


def wait_healthy(proc: subprocess.Popen[bytes], port: int, seconds: float,
                 log_name: str) -> None:
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


def serve_and_send(a: argparse.Namespace, binary: str, trace: str,
                   cfg: dict[str, Any]) -> dict[str, Any]:
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
    out: list[dict[str, Any] | None] = []
    with open(trace + ".log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_healthy(proc, port, 180, trace + ".log")
            jobs = [(cfg["target_delay_ms"], TARGET, a.n_predict)]
            jobs += [(c["delay_ms"], c["prompt"], c["n_predict"]) for c in cfg["co"]]
            out = [None] * len(jobs)
            errs: list[Exception] = []

            def one(i: int, delay: int, prompt: str, n: int) -> None:
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
    # 1 with "sending it again" in the log: llama-server was still shutting down 3 s after
    # SIGTERM, record-llamacpp passed it on again, and it exited through exit() (the shim
    # closed the trace there; verify() reads it).
    if rc != 0 and not (rc == 1 and _signalled_twice(trace + ".log")):
        raise RuntimeError("record-llamacpp exited with %d (see %s.log)" % (rc, trace))
    target = out[0]
    assert target is not None
    return target


def _signalled_twice(log: str) -> bool:
    try:
        with open(log, errors="replace") as f:
            return "sending it again" in f.read()
    except OSError:
        return False


def verify(binary: str, trace: str) -> None:
    # `llmrr verify`, not the reader's Trace.verify(): this file runs without numpy.
    v = subprocess.run([binary, "verify", trace], capture_output=True, text=True)
    if v.returncode != 0:
        raise RuntimeError("%s does not verify: %s" % (trace, (v.stdout + v.stderr)[-500:]))


def compare(binary: str, base: str, trace: str) -> dict[str, Any]:
    """The target (the baseline's only request) against its pair in `trace`, by `llmrr diff
    --json` (its output's schema is diff_report_json, replayer/diff/src/render.cc; the fields
    read are listed in docs/fuzz-summary.md), classified by fuzz_summary.comparison."""
    d = subprocess.run([binary, "diff", base, trace, "--align", "prompt", "--json"],
                       capture_output=True, text=True)
    if d.returncode not in (0, 1):
        raise RuntimeError("llmrr diff %s %s: exit %d: %s"
                           % (base, trace, d.returncode, d.stderr.strip()[-500:]))
    j = json.loads(d.stdout)
    reqs = [q for q in j.get("requests", []) if q.get("a") == 0]
    if len(reqs) != 1:
        raise RuntimeError("llmrr diff %s %s: the target is not paired" % (base, trace))
    c = fuzz_summary.comparison(reqs[0])
    c["target_id"] = reqs[0].get("b")  # the target's id in the run's trace
    return c


def shrink(binary: str, trace: str, model: str, request: int, out: str,
           max_replays: int) -> dict[str, Any]:
    """`llmrr bisect --runtime llamacpp`: the 1-minimal set of the target's co-requests whose
    rows, replayed with the target's, still split it from the target replayed alone, and the
    op-level cause of that minimal split (bisect.json's first difference, op_cause())."""
    p = subprocess.run([binary, "bisect", "--runtime", "llamacpp", trace, "--model", model,
                        "--request", str(request), "--max-replays", str(max_replays), "-o", out],
                       capture_output=True, text=True)
    if p.returncode not in (0, 1):
        return {"error": (p.stderr or p.stdout).strip()[-500:]}
    with open(os.path.join(out, "bisect.json")) as f:
        r = json.load(f)
    first = r.get("first_difference") or {}
    return {"co_requests": r["co_requests"], "kept_for_cache": r.get("kept_for_cache", []),
            "minimal": r["minimal"], "kept_with_minimal": r.get("kept_with_minimal", []),
            "splits_replayed": r["splits"], "one_minimal": r["one_minimal"],
            "replays": r["replays"], "seconds": round(r["seconds"], 2),
            "first_site": first.get("site"),
            "op_cause": fuzz_summary.op_cause(first.get("ops") or [])}


def bucket(table: dict[str, dict[str, int]], key: object, verdict: str) -> None:
    b = table.setdefault(str(key), {"runs": 0, "identical": 0, "numerical": 0, "visible": 0})
    b["runs"] += 1
    b[verdict] += 1


def llamacpp_section(results: Sequence[dict[str, Any]], base_text: str) -> dict[str, Any]:
    """The summary's "llamacpp" section: runs by each drawn setting, the baseline's text."""
    by: dict[str, dict[str, dict[str, int]]] = {"n_ubatch": {}, "cache_prompt": {}, "np": {},
                                                "co_requests": {}}
    for r in results:
        v, cfg = r["verdict"], r[RUNTIME]["config"]
        bucket(by["n_ubatch"], "%d/%d" % (cfg["n_batch"], cfg["n_ubatch"]), v)
        bucket(by["cache_prompt"], "on" if cfg["cache_prompt"] else "off", v)
        bucket(by["np"], cfg["np"], v)
        bucket(by["co_requests"], len(cfg["co"]), v)
    return {"by": by, "verified": sum(1 for r in results if r[RUNTIME]["verified"]),
            "baseline_text": base_text, "baseline_trace": "traces/baseline.trace",
            "server_per_run": True,
            "examples": [r["index"] for r in results if r["verdict"] != "identical"][:5]}


def markdown(s: dict[str, Any]) -> str:
    st, lc = s["stats"], s[RUNTIME]
    out = ["| class | runs |", "|---|---|"]
    out += ["| %s | %d |" % (k, st[k]) for k in fuzz_summary.VERDICTS]
    for name, title in (("n_ubatch", "-b/-ub"), ("cache_prompt", "cache_prompt"),
                        ("np", "-np"), ("co_requests", "co-requests")):
        out += ["", "| %s | runs | identical | numerical | visible |" % title,
                "|---|---|---|---|---|"]
        for k in sorted(lc["by"][name], key=lambda x: (len(x), x)):
            b = lc["by"][name][k]
            out.append("| %s | %d | %d | %d | %d |" % (k, b["runs"], b["identical"],
                                                      b["numerical"], b["visible"]))
    out += ["", "%d runs, %d traces verified, %.0f s; baseline text: %s"
            % (s["runs_done"], lc["verified"], s["seconds"], json.dumps(lc["baseline_text"]))]
    causes: dict[str, dict[str, int]] = {}
    for r in s["results"]:
        if r["verdict"] == "identical":
            continue
        x = r[RUNTIME]
        k = "%s at %s" % (x.get("op_cause") or "(no op record differs)", x["first_site"])
        b = causes.setdefault(k, {"numerical": 0, "visible": 0})
        b[r["verdict"]] += 1
    if causes:
        out += ["", "| op-level cause at the first differing site | numerical | visible |",
                "|---|---|---|"]
        for k in sorted(causes, key=lambda k: -(causes[k]["numerical"] + causes[k]["visible"])):
            out.append("| %s | %d | %d |" % (k, causes[k]["numerical"], causes[k]["visible"]))
    shrunk = [r for r in s["results"] if "minimal_cause" in r[RUNTIME]]
    if shrunk:
        out += ["", "| run | co-requests | minimal set (bisect --runtime llamacpp) | replays "
                "| op-level cause of the minimal split |", "|---|---|---|---|---|"]
    for r in shrunk:
        m = r[RUNTIME]["minimal_cause"]
        if "error" in m:
            out.append("| %d | %d | not shrunk: %s | | |" % (r["index"], r["co_requests"],
                                                          m["error"].splitlines()[-1]))
        elif not m["splits_replayed"]:
            out.append("| %d | %d | none: replayed, its co-requests do not move it | %d | |"
                       % (r["index"], r["co_requests"], m["replays"]))
        else:
            out.append("| %d | %d | %s of %s%s%s%s | %d | %s at %s |" % (
                r["index"], r["co_requests"], ",".join(map(str, m["minimal"])),
                ",".join(map(str, m["co_requests"])),
                " (with %s: its cached prefix)" % ",".join(map(str, m["kept_with_minimal"]))
                if m["kept_with_minimal"] else "",
                " (+%s: the target's cached prefix)" % ",".join(map(str, m["kept_for_cache"]))
                if m["kept_for_cache"] else "",
                "" if m["one_minimal"] else " (budget spent)", m["replays"], m["op_cause"],
                m["first_site"]))
    out += [""]
    by_index = {r["index"]: r for r in s["results"]}
    for i in lc["examples"]:
        e = by_index[i]
        x = e[RUNTIME]
        out.append("- run %d (%s): %s, first difference step %d, site %s, in a batch of %s%s"
                   % (i, json.dumps(x["config"]), e["verdict"], x["first_step"],
                      x["first_site"], json.dumps(x["first_batch"]),
                      "; ops: " + x["op_cause"] if x.get("op_cause") else ""))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llmrr fuzz --runtime llamacpp",
                                description=(__doc__ or "").split("\n\n")[0])
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
    p.add_argument("--no-shrink", dest="shrink", action="store_false",
                   help="do not shrink each split to its minimal co-requests (llmrr bisect "
                        "--runtime llamacpp)")
    p.add_argument("--shrink-replays", type=int, default=24,
                   help="replays per split's shrink, at most (default 24)")
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
        os.mkdir(os.path.join(work, "bisect"))
        base = os.path.join(work, "traces", "baseline.trace")
        one = {"np": 1, "n_batch": 512, "n_ubatch": 512, "cache_prompt": False,
               "target_delay_ms": 0, "co": []}
        resp = serve_and_send(a, binary, base, one)
        verify(binary, base)
        base_text = resp.get("content", "")
        baseline = fuzz_summary.completion_id(resp.get("tokens", []))
        completions: dict[str, tuple[Sequence[int], str]] = {
            baseline: (resp.get("tokens", []), base_text)}
        results = []
        for i in range(a.runs):
            cfg = draw(random.Random("%d/%d" % (a.seed, i)), space)
            name = "run%d.trace" % i
            trace = os.path.join(work, "traces", name)
            resp = serve_and_send(a, binary, trace, cfg)
            verify(binary, trace)
            c = compare(binary, base, trace)
            kept = not (c["verdict"] == "identical" and c["first_site"] is None)
            if not kept:
                for f in (trace, trace + ".log"):
                    if os.path.exists(f):
                        os.remove(f)
            tokens = resp.get("tokens", [])
            h = fuzz_summary.completion_id(tokens)
            completions.setdefault(h, (tokens, resp.get("content", "")))
            results.append(fuzz_summary.run_record(
                i, c, co_requests=len(cfg["co"]), completion=h, prefill_chunk=cfg["n_ubatch"],
                runtime=RUNTIME,
                section={"config": cfg, "verified": True, "text": resp.get("content", ""),
                         "tokens": tokens, "diff_verdict": c["diff_verdict"],
                         "first_step": c["first_step"], "first_site": c["first_site"],
                         "first_batch": c["first_batch"], "op_cause": c["op_cause"],
                         "trace": "traces/" + name if kept else None}))
            if c["verdict"] != "identical" and a.shrink and c["target_id"] is not None:
                results[-1][RUNTIME]["minimal_cause"] = shrink(
                    binary, trace, a.model, int(c["target_id"]),
                    os.path.join(work, "bisect", "run%d" % i), a.shrink_replays)
            sys.stderr.write("run %d/%d: %s\n" % (i + 1, a.runs, c["verdict"]))
        s = fuzz_summary.summary(
            RUNTIME, fuzz_summary.campaign(
                model=a.model, model_identity="llamacpp:" + os.path.basename(a.model),
                policy="llamacpp", dtype="", target_prompt_ids=[], prompt=TARGET,
                max_tokens=a.n_predict, seed=a.seed, runs=a.runs,
                space=dict(space, batches=BATCHES, pool=POOL)),
            results, completions, baseline, time.time() - t0,
            llamacpp_section(results, base_text))
        fuzz_summary.write(work, s)
        with open(os.path.join(work, "summary.md"), "w") as md:
            md.write(markdown(s))
        os.rename(work, a.out)
    except RuntimeError as e:
        shutil.rmtree(work, ignore_errors=True)
        sys.stderr.write("llmrr fuzz --runtime llamacpp: error: %s\n" % e)
        return 3
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    sys.stdout.write(markdown(s))
    return 1 if s["stats"]["numerical"] + s["stats"]["visible"] else 0


if __name__ == "__main__":
    sys.exit(main())
