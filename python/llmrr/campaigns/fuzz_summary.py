"""llmrr.campaigns.fuzz_summary: the one summary.json writer of the Python fuzz campaigns
(llmrr.campaigns.vllm_fuzz, llmrr.campaigns.llamacpp_fuzz), in the schema of `llmrr fuzz`'s
own (replayer/fuzz/src/report.cc, fuzz_summary_json), so that `llmrr fuzz merge` reads either.
docs/fuzz-summary.md lists the fields, their types and which writer fills which.

    comparison = fuzz_summary.comparison(diff_request)      # one `llmrr diff --json` request
    results.append(fuzz_summary.run_record(index, comparison, co_requests=3,
                                           completion=fuzz_summary.completion_id(tokens),
                                           runtime="vllm", section={...}))
    s = fuzz_summary.summary("vllm", fuzz_summary.campaign(...), results, completions,
                             baseline, seconds, section={...})
    fuzz_summary.write(out_dir, s)                            # OUT/summary.json

What every writer shares: the version key "llmrr_fuzz_summary" (1), "campaign" (what was
fuzzed, with the run count), "runs_done", "stats" (counts by class: identical, numerical,
visible, and their histograms, computed here as `llmrr fuzz` computes them), "completions",
"splits" and "results" (one record a run). The Python campaigns add "runtime" (vllm,
llamacpp; the engine's summary has none) and a section named after the runtime, at the top
level and in every run record, for what only that runtime has.

Stdlib only: llamacpp_fuzz runs with a bare python3, which loads this file beside it.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Mapping, Sequence

VERSION = 1                      # "llmrr_fuzz_summary": bumped with an incompatible change
VERDICTS = ("identical", "numerical", "visible")
SUMMARY = "summary.json"


def completion_id(tokens: Sequence[int]) -> str:
    """A completion's id in "completions" and each run's "completion": 64 bits (hex) of the
    target's generated token ids."""
    return hashlib.sha256(json.dumps([int(t) for t in tokens]).encode()).hexdigest()[:16]


def layer_of(site: str | None) -> int:
    """The layer a site names ("L3.attn.q" -> 3), -1 for none (embed, logits, ...)."""
    if site and site.startswith("L") and "." in site and site[1:site.index(".")].isdigit():
        return int(site[1:site.index(".")])
    return -1


def comparison(q: Mapping[str, Any]) -> dict[str, Any]:
    """The target's class from one entry of `llmrr diff --json`'s "requests" (that output's
    schema: diff_report_json, replayer/diff/src/render.cc; the fields read here are listed in
    docs/fuzz-summary.md): the per-run fields the summary shares with `llmrr fuzz`
    (verdict, numerical_token, visible_token, cause, cause_position, cause_layer), plus what
    the campaigns keep in their own section: diff_verdict (diff's words), first_step (the
    second trace's step of the first difference), first_site, first_batch (that step's batch:
    rows, requests, prefill segments), op_cause (op_cause(): what the ops there ran with
    otherwise; None without op records)."""
    c: dict[str, Any] = {"verdict": "identical", "numerical_token": -1, "visible_token": -1,
                         "cause": "", "cause_position": -1, "cause_layer": -1,
                         "diff_verdict": q.get("verdict"), "first_step": -1,
                         "first_site": None, "first_batch": None, "op_cause": None}
    prompt_len = int(q.get("prompt_len", 0) or 0)
    num = q.get("numerical_split")
    if num:
        # The logits row at position p chooses the token at p + 1: generated token
        # p + 1 - prompt_len, the index `llmrr fuzz` counts logits by.
        c["verdict"] = "numerical"
        c["numerical_token"] = int(num["position"]) + 1 - prompt_len
    vis = q.get("visible_split")
    if vis:
        c["verdict"] = "visible"
        c["visible_token"] = int(vis.get("token_index", -1))
        # A token differs only after the logits did (or at the same index), as in `llmrr fuzz`.
        if c["visible_token"] >= 0 and not 0 <= c["numerical_token"] <= c["visible_token"]:
            c["numerical_token"] = c["visible_token"]
    first = q.get("first_difference")
    if first:
        # (with identical logits and tokens the verdict stays identical, as in `llmrr fuzz`;
        # rows that differ inside are the campaign's to count)
        c["cause"] = first.get("cause", "") or ""
        c["cause_position"] = int(first.get("position", -1))
        c["first_step"] = int(first.get("step_b", -1))
        c["first_site"] = first.get("site")
        c["cause_layer"] = layer_of(c["first_site"])
        b = first.get("batch_b") or {}
        c["first_batch"] = {k: b.get(k, -1) for k in ("rows", "requests", "prefill_segments")}
        c["op_cause"] = op_cause(first.get("ops") or [])
    return c


def _changed_keys(change: str) -> list[str]:
    """"src1 f32:576x1 vs f32:576x9" -> ["src1.ne1"] (the dimensions of a type:shape value that
    differ; a type that differs is KEY.type), else the key itself ("tokens 1 vs 9" ->
    ["tokens"])."""
    key, _, rest = change.partition(" ")
    a, sep, b = rest.partition(" vs ")
    if sep and ":" in a and ":" in b:
        ta, da = a.split(":", 1)
        tb, db = b.split(":", 1)
        xa, xb = da.split("x"), db.split("x")
        out = ["%s.type" % key] if ta != tb else []
        n = max(len(xa), len(xb))
        xa += ["1"] * (n - len(xa))
        xb += ["1"] * (n - len(xb))
        out += ["%s.ne%d" % (key, i) for i in range(n) if xa[i] != xb[i]]
        return out or [key]
    return [key]


def op_cause(ops: Sequence[Mapping[str, Any]]) -> str | None:
    """The op-level cause of a first difference from its op records (diff's `ops`), grouped by
    the op's kind: how many ops of that kind ran otherwise and what changed in them (a shape's
    dimension as KEY.neI, e.g. src1.ne1, a matmul's rows; other keys by name; "only in A/B" for
    ops one run did not run), the graph record last, e.g. "MUL_MAT x7: src1.ne1, dst.ne1;
    graph: tokens". None when no op record differs."""
    kinds: dict[str, tuple[int, list[str]]] = {}
    for o in ops:
        kind = o.get("op") or o.get("name", "?")
        if o.get("name") == "graph":
            kind = "graph"
        if o.get("a") is None or o.get("b") is None:
            keys = ["only in " + ("B" if o.get("a") is None else "A")]
        else:
            keys = [k for ch in o.get("changes", []) for k in _changed_keys(ch)]
        n, have = kinds.get(kind, (0, []))
        kinds[kind] = (n + 1, have + [k for k in keys if k not in have])
    parts = ["%s%s: %s" % (k, " x%d" % n if n > 1 else "", ", ".join(keys))
             for k, (n, keys) in kinds.items() if k != "graph"]
    if "graph" in kinds:
        parts.append("graph: " + ", ".join(kinds["graph"][1]))
    return "; ".join(parts) if parts else None


def run_record(index: int, cmp: Mapping[str, Any], *, co_requests: int, completion: str,
               runtime: str, section: Mapping[str, Any], prompt_tokens: int = -1,
               target_arrival: int = -1, prefill_chunk: int = 0) -> dict[str, Any]:
    """One entry of "results": the fields of `llmrr fuzz`'s run record (from `cmp`, a
    comparison()) and the runtime's own section under results[i][runtime]. Where a runtime
    has no such thing: prompt_tokens and target_arrival -1 (not known), prefill_chunk 0,
    capacity_factor 0 and overflow "none" (no capacity-limited routing), target_dropped and
    target_rerouted 0."""
    if cmp["verdict"] not in VERDICTS:
        raise ValueError("run %d: verdict %r, expected one of %s" % (index, cmp["verdict"],
                                                                   ", ".join(VERDICTS)))
    return {"verdict": cmp["verdict"], "numerical_token": int(cmp["numerical_token"]),
            "visible_token": int(cmp["visible_token"]), "cause": str(cmp["cause"]),
            "cause_position": int(cmp["cause_position"]),
            "cause_layer": int(cmp["cause_layer"]), "index": int(index),
            "co_requests": int(co_requests), "prompt_tokens": int(prompt_tokens),
            "target_arrival": int(target_arrival), "prefill_chunk": int(prefill_chunk),
            "capacity_factor": 0.0, "overflow": "none", "completion": completion,
            "target_dropped": 0, "target_rerouted": 0, runtime: dict(section)}


def campaign(*, model: str, model_identity: str, policy: str, dtype: str,
             target_prompt_ids: Sequence[int], prompt: str, max_tokens: int, seed: int,
             runs: int, space: Mapping[str, Any]) -> dict[str, Any]:
    """The "campaign" object: what was fuzzed (`llmrr fuzz merge` refuses to merge summaries
    whose campaigns differ). One shard: a Python campaign is not sharded."""
    return {"model": model, "model_identity": model_identity, "policy": policy,
            "dtype": dtype, "target_prompt_ids": [int(t) for t in target_prompt_ids],
            "prompt": prompt, "max_tokens": int(max_tokens), "seed": int(seed),
            "runs": int(runs), "shards": 1, "space": dict(space)}


def stats(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts by class and their histograms, as `llmrr fuzz` computes them (summarize,
    replayer/fuzz/src/campaign.cc): first_split_token and causes over every run that split,
    first_visible_split_token and visible_causes over the visible ones."""
    counts = {v: 0 for v in VERDICTS}
    hist: dict[str, int] = {}
    vhist: dict[str, int] = {}
    causes: dict[str, int] = {}
    vcauses: dict[str, int] = {}

    def bump(h: dict[str, int], key: object) -> None:
        h[str(key)] = h.get(str(key), 0) + 1

    for r in results:
        counts[r["verdict"]] += 1
        if r["verdict"] == "identical":
            continue
        if r["verdict"] == "visible":
            bump(vhist, r["visible_token"])
            bump(vcauses, r["cause"])
        bump(hist, r["numerical_token"])
        bump(causes, r["cause"])
    n = len(results)
    out: dict[str, Any] = dict(counts)
    out.update(share_numerical=counts["numerical"] / n if n else 0.0,
               share_visible=counts["visible"] / n if n else 0.0,
               unique_completions=len({r["completion"] for r in results}),
               first_split_token=hist, first_visible_split_token=vhist, causes=causes,
               visible_causes=vcauses)
    return out


def summary(runtime: str, campaign: Mapping[str, Any], results: Sequence[Mapping[str, Any]],
            completions: Mapping[str, tuple[Sequence[int], str]], baseline: str,
            seconds: float, section: Mapping[str, Any]) -> dict[str, Any]:
    """The whole summary.json. completions: completion id -> (tokens, text) for every
    completion a run or the baseline produced (text "" where the campaign has none);
    baseline: the id of the target's completion alone. section: the runtime's own, under
    the key `runtime`."""
    runs: dict[str, int] = {}
    for r in results:
        runs[r["completion"]] = runs.get(r["completion"], 0) + 1
    if baseline not in completions:
        raise ValueError("the baseline completion %s is not among the completions" % baseline)
    return {
        "llmrr_fuzz_summary": VERSION,
        "runtime": runtime,
        "campaign": dict(campaign),
        "shard_list": [0], "runs_done": len(results), "seconds": round(float(seconds), 3),
        "baseline_completion": baseline,
        "stats": stats(results),
        "completions": {h: {"tokens": [int(t) for t in tokens], "text": text,
                            "runs": runs.get(h, 0)}
                        for h, (tokens, text) in completions.items()},
        "splits": [],  # `llmrr fuzz`'s shrunk splits; a Python campaign keeps its own
        "results": [dict(r) for r in results],
        runtime: dict(section),
    }


def write(out_dir: str, s: Mapping[str, Any]) -> str:
    """Writes OUT_DIR/summary.json whole or not at all (a temporary file renamed over it);
    returns its path."""
    path = os.path.join(out_dir, SUMMARY)
    tmp = path + ".tmp-%d" % os.getpid()
    try:
        with open(tmp, "x") as f:
            json.dump(s, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path
