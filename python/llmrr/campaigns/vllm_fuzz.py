"""llmrr.campaigns.vllm_fuzz: run one target prompt through vLLM under many drawn batch
compositions and engine settings, record every run with llmrr.runtimes.vllm, and report what
splits the target.

    python -m llmrr.campaigns.vllm_fuzz MODEL --runs 200 --seed 1 --dtype bfloat16 -o fz/
    llmrr fuzz --runtime vllm MODEL --runs 200 ...      # the same, from the llmrr CLI

Each run draws: co-requests (0..max), their prompt lengths, the wave (engine step) each is
submitted at, the target's own wave, prefix sharing (a co-request that starts with the
target's first tokens, so prefix caching serves the target from cache or the other way
round) and an engine setting: max_num_batched_tokens (a small value chunks the prefills)
and prefix caching on or off. Runs are grouped by setting; each setting starts one
in-process engine (one worker process, VLLM_ENABLE_V1_MULTIPROCESSING=0) that runs the
target alone first, then its drawn runs, one trace per run (llmrr.runtimes.vllm.rotate),
with the prefix cache emptied before every run. Every trace is verified through the reader
(llmrr.open(trace).verify(), what `llmrr verify` does) and compared with the reference (the
target alone under the first setting: no chunking, no prefix caching) by `llmrr diff --json
--request 0` (the target is request 0 of every run).

Writes DIR/summary.json through llmrr.campaigns.fuzz_summary (the schema of `llmrr fuzz`,
docs/fuzz-summary.md, with a "vllm" section at the top and in every run) and DIR/summary.txt.
Keeps the reference trace and the traces of runs that split (numerically or visibly) under
DIR/traces/, deletes the others (--keep-all keeps them).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from typing import Any, NoReturn, Sequence

from ..core import _json, _lib
from ..core.reader import open as open_trace
from . import fuzz_summary

TARGET_LEN = 24
PROG = "llmrr.campaigns.vllm_fuzz"


def die(msg: str) -> NoReturn:
    sys.stderr.write("%s: error: %s\n" % (PROG, msg))
    sys.exit(2)


def llmrr_bin() -> str:
    return _lib.llmrr_binary() or die("no llmrr binary: set $LLMRR_BIN or put llmrr on PATH")


# ---- drawing ---------------------------------------------------------------------------------

def draw(rng: random.Random, target: list[int], vocab: int,
         space: dict[str, Any]) -> dict[str, Any]:
    """One composition around the target (request 0)."""
    setting = {"mbt": rng.choice(space["mbt"]), "prefix": rng.choice(space["prefix"])}
    n = rng.randint(0, space["max_co"])
    others = []
    for _ in range(n):
        length = rng.randint(1, space["max_prompt"])
        prompt = [rng.randrange(2, vocab) for _ in range(length)]
        if rng.random() < space["share"]:  # shares a prefix of the target
            k = rng.randint(1, len(target))
            prompt = target[:k] + prompt[:max(0, length - k)]
        others.append({"prompt_ids": prompt, "max_tokens": rng.randint(1, space["max_new"]),
                       "arrival_step": rng.randint(0, space["max_wave"])})
    return {"setting": setting, "target_arrival": rng.randint(0, space["max_wave"]),
            "others": others}


def setting_key(s: dict[str, Any]) -> str:
    return "mbt%d%s" % (s["mbt"], "-prefix" if s["prefix"] else "")


def tokenize(model: str, text: str) -> list[int]:
    """The target's token ids: the model directory's own tokenizer (transformers)."""
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(model)
    except Exception as e:  # no tokenizer files, or no transformers in this Python
        die("--target-text: cannot load the tokenizer of %s (%s)" % (model, e))
    ids = [int(t) for t in tok(text, add_special_tokens=False)["input_ids"]]
    if not ids:
        die("--target-text: %r tokenizes to nothing" % text)
    return ids


# ---- the engine side (runs in a child process per setting) -----------------------------------

def worker(job_path: str) -> int:
    """Runs the jobs of one engine setting in this process; prints one JSON line per run."""
    with open(job_path) as f:
        job = json.load(f)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from ..runtimes import vllm as plugin
    s = job["setting"]
    llm = LLM(model=job["model"], skip_tokenizer_init=True, enforce_eager=True,
              dtype=job["dtype"], max_model_len=job["max_model_len"],
              kv_cache_memory_bytes=64 << 20, max_num_batched_tokens=s["mbt"],
              max_num_seqs=job["max_seqs"], seed=0, enable_prefix_caching=s["prefix"],
              enable_chunked_prefill=True)
    engine = llm.llm_engine
    first = True
    for run in job["runs"]:
        if not first:
            plugin.rotate(run["trace"])  # closes the previous run's trace
        first = False
        if s["prefix"]:
            llm.reset_prefix_cache()
        reqs = [("0", job["target"], job["max_tokens"], run["target_arrival"])]
        for i, o in enumerate(run["others"]):
            reqs.append((str(i + 1), o["prompt_ids"], o["max_tokens"], o["arrival_step"]))
        waiting = sorted(reqs, key=lambda r: r[3])
        got: dict[str, list[int]] = {}
        step = 0
        t0 = time.time()
        while waiting or engine.has_unfinished_requests():
            while waiting and waiting[0][3] <= step:
                rid, p, mt, _ = waiting.pop(0)
                sp = SamplingParams(temperature=0, max_tokens=mt, ignore_eos=True,
                                    detokenize=False)
                engine.add_request(rid, TokensPrompt(prompt_token_ids=p), sp)
            if not engine.has_unfinished_requests():  # an idle wave: nothing to run yet
                step += 1
                continue
            for out in engine.step():
                if out.finished:
                    got[out.request_id.split("-")[0]] = list(out.outputs[0].token_ids)
            step += 1
        print("LLMRR_FUZZ_RUN " + json.dumps({"index": run["index"], "target": got.get("0"),
                                              "steps": step, "seconds": time.time() - t0}),
              flush=True)
    plugin.close_all()
    return 0


def run_setting(args: argparse.Namespace, key: str, setting: dict[str, Any],
                runs: list[dict[str, Any]], work: str) -> dict[int, dict[str, Any]]:
    job = {"model": args.model, "dtype": args.dtype, "max_tokens": args.max_tokens,
           "max_model_len": args.max_model_len, "max_seqs": args.max_seqs,
           "target": args.target, "setting": setting, "runs": runs}
    path = os.path.join(work, "job-%s.json" % key)
    with open(path, "w") as f:
        json.dump(job, f)
    env = dict(os.environ, LLMRR_VLLM_TRACE=runs[0]["trace"], VLLM_ENABLE_V1_MULTIPROCESSING="0",
               LLMRR_CAPTURE=args.capture)
    log = os.path.join(work, "engine-%s.log" % key)
    with open(log, "w") as lf:
        p = subprocess.run([sys.executable, "-m", PROG, "--worker", path], env=env,
                           stdout=subprocess.PIPE, stderr=lf, text=True)
    res = {}
    for ln in p.stdout.splitlines():
        if ln.startswith("LLMRR_FUZZ_RUN "):
            r = json.loads(ln[len("LLMRR_FUZZ_RUN "):])
            res[r["index"]] = r
    if p.returncode != 0 or len(res) != len(runs):
        die("the vLLM engine for setting %s failed (exit %d, %d of %d runs); see %s"
            % (key, p.returncode, len(res), len(runs), log))
    return res


# ---- comparing -------------------------------------------------------------------------------

def compare(binary: str, ref: str, trace: str) -> dict[str, Any]:
    """The target of `trace` against the reference: the trace verified through the reader,
    then compared by `llmrr diff --json` (the divergence analysis is the C++ side's; its
    output's schema is diff_report_json, replayer/diff/src/render.cc, the fields read here
    listed in docs/fuzz-summary.md), classified by fuzz_summary.comparison."""
    try:
        with open_trace(trace) as t:
            t.verify()
    except (_lib.LlmrrError, OSError) as e:
        die("%s does not verify: %s" % (trace, str(e)[-500:]))
    d = subprocess.run([binary, "diff", ref, trace, "--request", "0", "--json"],
                       capture_output=True, text=True)
    if d.returncode not in (0, 1):
        die("llmrr diff %s %s: exit %d: %s" % (ref, trace, d.returncode, d.stderr.strip()[-500:]))
    j = json.loads(d.stdout)
    reqs = j.get("requests", [])
    if len(reqs) != 1:
        die("llmrr diff %s %s: expected the target (request 0) in both, found %d compared"
            % (ref, trace, len(reqs)))
    return fuzz_summary.comparison(reqs[0])


# ---- shrinking -------------------------------------------------------------------------------

def shrink(a: argparse.Namespace, binary: str, trace: str, work: str) -> dict[str, Any]:
    """The smallest set of the run's co-requests that reproduces the target's split
    (`llmrr bisect --runtime vllm`, request 0, at most --shrink-replays replays): a dict of
    bisect's report, or {"error": ...}. An empty set means the target alone under the run's
    setting splits the same way: the setting, not a co-request, is the cause."""
    out = os.path.join(work, "shrink-" + os.path.basename(trace).replace(".trace", ""))
    p = subprocess.run([binary, "bisect", "--runtime", "vllm", trace, "--model", a.model,
                        "--request", "0", "--max-replays", str(a.shrink_replays), "-o", out],
                       capture_output=True, text=True)
    report = os.path.join(out, "bisect.json")
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip()[-500:]}
    if not os.path.exists(report):  # bisect found no split against the target alone
        return {"co_requests": [], "note": "the target alone under this setting splits the "
                "same way: the setting is the cause"}
    with open(report) as f:
        r = json.load(f)
    return {"searches": [{k: x[k] for k in ("kind", "position", "step", "minimal",
                                            "one_minimal", "in_batch_at_split")}
                         for x in r["searches"]],
            "replays": r["replays"], "seconds": r["seconds"]}


# ---- summary ---------------------------------------------------------------------------------

def vllm_section(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The summary's "vllm" section: runs by engine setting, the first differing sites."""
    sites: dict[str, int] = {}
    op_causes: dict[str, int] = {}
    by_setting: dict[str, dict[str, int]] = {}
    for r in results:
        v = r["vllm"]
        if v.get("op_cause"):
            op_causes[v["op_cause"]] = op_causes.get(v["op_cause"], 0) + 1
        b = by_setting.setdefault(v["setting"], {"runs": 0, "numerical": 0, "visible": 0,
                                                 "rows_differ": 0})
        b["runs"] += 1
        if v["rows_differ"]:
            b["rows_differ"] += 1
            site = v["first_split_site"] or "-"
            sites[site] = sites.get(site, 0) + 1
        if r["verdict"] != "identical":
            b[r["verdict"]] += 1
    return {"by_setting": by_setting, "first_split_sites": sites, "op_causes": op_causes,
            "rows_differ": sum(1 for r in results if r["vllm"]["rows_differ"]),
            "drawn_runs": sum(1 for r in results if not r["vllm"]["solo"])}


def format_summary(s: dict[str, Any]) -> str:
    st, c, v = s["stats"], s["campaign"], s["vllm"]
    n = s["runs_done"]

    def pct(k: int) -> float:
        return 100.0 * k / n if n else 0.0

    out = ["fuzz: %s, vllm, %s, seed %d: %d of %d drawn runs + %d alone under other settings "
           "(%.2f runs/s)" % (c["model"], c["dtype"], c["seed"], v["drawn_runs"],
                              c["runs"], n - v["drawn_runs"],
                              n / s["seconds"] if s["seconds"] else 0)]
    base = s["completions"].get(s["baseline_completion"], {}).get("tokens", [])
    out.append("  target: %d prompt tokens, %d tokens; alone: %s" % (
        len(c["target_prompt_ids"]), c["max_tokens"], base))
    out.append("  identical %d (%.1f %%), numerical split %d (%.1f %%), visible split %d "
               "(%.1f %%)" % (st["identical"], pct(st["identical"]), st["numerical"],
                              pct(st["numerical"]), st["visible"], pct(st["visible"])))
    out.append("  unique completions: %d of %d runs" % (st["unique_completions"], n))
    if st["causes"]:
        out.append("  causes (first difference): " + " ".join(
            "%s %d" % (k or "-", m) for k, m in sorted(st["causes"].items())))
    out.append("  rows differ inside (any verdict): %d runs" % v["rows_differ"])
    if v["first_split_sites"]:
        out.append("  first differing site: " + " ".join(
            "%s %d" % kv for kv in sorted(v["first_split_sites"].items())))
    if v.get("op_causes"):
        out.append("  what the ops ran with otherwise at the first difference (runs):")
        for k, m in sorted(v["op_causes"].items(), key=lambda kv: -kv[1]):
            out.append("    %4d  %s" % (m, k))
    out.append("  by engine setting (max_num_batched_tokens, prefix caching):")
    for k, b in sorted(v["by_setting"].items()):
        out.append("    %-16s %4d runs: numerical %d, visible %d, rows differ %d"
                   % (k, b["runs"], b["numerical"], b["visible"], b["rows_differ"]))
    shrunk = [r for r in s["results"] if "minimal_cause" in r["vllm"]]
    if shrunk:
        out.append("  minimal cause of each split (bisect --runtime vllm, request 0):")
    for r in shrunk:
        m = r["vllm"]["minimal_cause"]
        if "error" in m:
            out.append("    run %d: not shrunk: %s" % (r["index"], m["error"].splitlines()[-1]))
        elif not m.get("searches"):
            out.append("    run %d (%s): no co-request: %s" % (r["index"], r["vllm"]["setting"],
                                                              m["note"]))
        else:
            out.append("    run %d (%s): %s; %d replays, %.0f s" % (
                r["index"], r["vllm"]["setting"], "; ".join(
                    "%s at step %s: co-request%s %s of %d%s" % (
                        x["kind"], x["step"], "" if len(x["minimal"]) == 1 else "s",
                        ",".join(map(str, x["minimal"])) or "none", r["co_requests"],
                        "" if x["one_minimal"] else " (budget spent)")
                    for x in m["searches"]), m["replays"], m["seconds"]))
    first = next((r for r in s["results"] if r["vllm"]["rows_differ"]), None)
    if first:
        out.append("  first difference: run %d (%s), %s%s, step %d, site %s; trace %s"
                   % (first["index"], first["vllm"]["setting"], first["verdict"],
                      " at token %d" % first["numerical_token"]
                      if first["numerical_token"] >= 0 else " (logits and tokens equal)",
                      first["vllm"]["first_split_step"], first["vllm"]["first_split_site"],
                      first["vllm"]["trace"]))
    return "\n".join(out) + "\n"


# ---- main ------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1])
    ap = argparse.ArgumentParser(prog="python -m " + PROG,
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("model", help="a Hugging Face model directory vLLM loads")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("-o", "--out", required=True, help="output folder (must not exist or be empty)")
    ap.add_argument("--max-co-requests", type=int, default=12)
    ap.add_argument("--max-prompt", type=int, default=48)
    ap.add_argument("--max-wave", type=int, default=4, help="last engine step a request arrives")
    ap.add_argument("--mbt", default="256,32,16",
                    help="max_num_batched_tokens values drawn (small ones chunk prefills)")
    ap.add_argument("--prefix", default="off,on", help="prefix caching values drawn")
    ap.add_argument("--capture", default="layers", choices=["none", "layers", "all"])
    ap.add_argument("--keep-all", action="store_true", help="keep every run's trace")
    ap.add_argument("--shrink", action=argparse.BooleanOptionalAction, default=True,
                    help="bisect each split to its smallest set of co-requests (default on)")
    ap.add_argument("--shrink-replays", type=int, default=24,
                    help="replay budget of each shrink (llmrr bisect --max-replays)")
    ap.add_argument("--run", type=int, action="append",
                    help="only this drawn run (repeatable): the same draws as without it, so "
                         "one run of a campaign is recorded again, with the target alone under "
                         "its setting and the reference setting")
    ap.add_argument("--target-text", default=None,
                    help="the target prompt as text, tokenized with the model's tokenizer "
                         "(default: %d random token ids drawn from the seed)" % TARGET_LEN)
    a = ap.parse_args(argv)
    if not os.path.isfile(os.path.join(a.model, "config.json")):
        die("%s: not a model directory (no config.json)" % a.model)
    if a.runs < 1 or a.max_tokens < 1:
        die("--runs and --max-tokens must be >= 1")
    if os.path.exists(a.out) and os.listdir(a.out):
        die("%s exists and is not empty: give a new folder (nothing is overwritten)" % a.out)
    try:
        mbts = [int(x) for x in a.mbt.split(",")]
        prefixes = [{"on": True, "off": False}[x] for x in a.prefix.split(",")]
    except (ValueError, KeyError):
        die("--mbt takes integers, --prefix takes on/off, comma-separated")
    try:  # the model's config.json, under the nesting cap (llmrr.core._json)
        cfg = _json.load(os.path.join(a.model, "config.json"))
    except (OSError, ValueError) as e:
        die(str(e))
    if not isinstance(cfg, dict):
        die("%s: the top level is not a JSON object" % os.path.join(a.model, "config.json"))
    vocab = int(cfg.get("vocab_size", 512))
    a.max_seqs = a.max_co_requests + 1
    if a.target_text is not None and not a.target_text.strip():
        die("--target-text is empty")
    if min(mbts) < a.max_seqs:
        die("--mbt values must be >= max_num_seqs (%d = --max-co-requests + 1)" % a.max_seqs)
    binary = llmrr_bin()
    rng = random.Random(a.seed)
    a.target = [rng.randrange(2, vocab) for _ in range(TARGET_LEN)]
    if a.target_text is not None:
        a.target = tokenize(a.model, a.target_text)
    a.max_model_len = max(256, len(a.target) + a.max_prompt + 2 * a.max_tokens + 64)
    space = {"max_co": a.max_co_requests, "max_prompt": a.max_prompt, "max_new": 2 * a.max_tokens,
             "max_wave": a.max_wave, "mbt": mbts, "prefix": prefixes, "share": 0.3}
    comps = [draw(rng, a.target, vocab, space) for _ in range(a.runs)]

    traces = os.path.join(a.out, "traces")
    work = os.path.join(a.out, "work")
    os.makedirs(traces, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    ref_setting = {"mbt": max(mbts), "prefix": False}
    groups: dict[str, tuple[dict[str, Any], list[int]]] = {
        setting_key(ref_setting): (ref_setting, [])}
    chosen = range(len(comps)) if not a.run else sorted(set(a.run))
    for i in chosen:
        if not 0 <= i < len(comps):
            die("--run %d: the campaign draws runs 0 to %d" % (i, len(comps) - 1))
        c = comps[i]
        groups.setdefault(setting_key(c["setting"]), (c["setting"], []))[1].append(i)
    t0 = time.time()
    ref = None
    outs: dict[int, dict[str, Any]] = {}
    runs_of: dict[int, tuple[str, dict[str, Any]]] = {}
    for key, (setting, idx) in groups.items():
        solo: dict[str, Any] = {"index": -1 - len(runs_of), "target_arrival": 0,
                                "others": [], "trace": os.path.join(traces, "alone-%s.trace" % key)}
        runs = [solo] + [dict(comps[i], index=i, trace=os.path.join(traces, "run-%05d.trace" % i))
                         for i in idx]
        if ref is None:
            ref = solo["trace"]
        sys.stderr.write("%s: setting %s: %d runs + the target alone\n" % (PROG, key, len(idx)))
        res = run_setting(a, key, setting, runs, work)
        for r in runs:
            outs[r["index"]] = res[r["index"]]
            runs_of[r["index"]] = (key, r)
    assert ref is not None
    alone = outs[-1]["target"]
    baseline = fuzz_summary.completion_id(alone)
    completions: dict[str, tuple[Sequence[int], str]] = {baseline: (alone, "")}
    results = []
    deleted = 0
    for index in sorted(runs_of, key=lambda i: (i < 0, abs(i))):
        key, r = runs_of[index]
        if r["trace"] == ref:
            continue
        c = compare(binary, ref, r["trace"])
        tokens = outs[index]["target"]
        h = fuzz_summary.completion_id(tokens)
        completions[h] = (tokens, "")
        if tokens != alone:
            c["verdict"] = "visible"
        rows_differ = c["first_site"] is not None or bool(c["cause"])
        kept = a.keep_all or c["verdict"] != "identical" or rows_differ
        if not kept:
            os.remove(r["trace"])
            deleted += 1
        others = r.get("others", [])
        results.append(fuzz_summary.run_record(
            index, c, co_requests=len(others), completion=h,
            prompt_tokens=len(a.target) + sum(len(o["prompt_ids"]) for o in others),
            target_arrival=r.get("target_arrival", 0),
            prefill_chunk=r.get("setting", {}).get("mbt", 0) if index >= 0
            else groups[key][0]["mbt"],
            runtime="vllm",
            section={"setting": key, "solo": index < 0, "verified": True,
                     "rows_differ": rows_differ, "compared_with": ref,
                     "diff_verdict": c["diff_verdict"], "first_split_step": c["first_step"],
                     "first_split_site": c["first_site"], "op_cause": c["op_cause"],
                     "engine_steps": outs[index]["steps"],
                     "trace": r["trace"] if kept else None, "others": others}))
    if a.shrink:
        for split in results:
            v = split["vllm"]
            if split["verdict"] != "identical" and not v["solo"] and v["trace"]:
                v["minimal_cause"] = shrink(a, binary, v["trace"], work)
    section = vllm_section(results)
    section.update(reference_trace=ref, traces_deleted=deleted,
                   note="runs with index < 0 are the target alone under a non-reference "
                        "setting; traces of identical runs are deleted unless --keep-all")
    s = fuzz_summary.summary(
        "vllm", fuzz_summary.campaign(
            model=a.model, model_identity="vllm:" + os.path.basename(os.path.normpath(a.model)),
            policy="vllm", dtype=a.dtype, target_prompt_ids=a.target,
            prompt=a.target_text or "", max_tokens=a.max_tokens, seed=a.seed, runs=a.runs,
            space=space),
        results, completions, baseline, time.time() - t0, section)
    fuzz_summary.write(a.out, s)
    text = format_summary(s) + ("  traces: kept %d (reference, splits, rows differing) in %s, "
                                "deleted %d identical\n" % (len(results) - deleted + 1, traces,
                                                            deleted))
    with open(os.path.join(a.out, "summary.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
