"""llmrr.campaigns.vllm_replay: re-execute a recorded vLLM run in vLLM, compare it with its
trace, and bisect a split to the co-requests that cause it.

    llmrr replay --runtime vllm TRACE --model DIR [-o OUT] [counterfactual options]
    llmrr bisect --runtime vllm TRACE --model DIR [--request R] [--max-replays N]
    python -m llmrr.campaigns.vllm_replay replay|bisect ...   # the same, in vLLM's Python

A vLLM run is decided by its inputs: the requests, the steps they were scheduled at and the
engine's settings, and the trace holds all of them (llmrr.runtimes.vllm writes the settings
into the run header). The trace is read through the reader (llmrr.open: its header, requests
and segments). `replay` starts an engine with the recorded settings (dtype,
max_num_batched_tokens, max_num_seqs, chunked prefill, prefix caching, block size, KV blocks,
max_model_len, torch threads), submits each request just before the step it was first
scheduled at, steps the engine one step at a time, and records the replay with
llmrr.runtimes.vllm. It then checks every step's batch against the trace (requests, chunk,
decode rows, prefix-cache hits as the positions a prefill starts at) and compares every
fingerprint, logits row and token with `llmrr diff`: "bit-exact", or the first step where
the batch differs and the first step, position and site where the numbers do. Exit 0
bit-exact, 1 differs, 2 refused or bad input.

Counterfactuals are replays of the same trace with one thing changed, compared with it:
--alone R (request R alone), --only R,S / --drop R,S (which requests run), --move R:STEP (an
arrival moved), --mbt N (another chunk size), --prefix on|off, --dtype D. `bisect` replays
request R alone and, when that splits from the recording, delta-debugs (ddmin) the set of
co-requests down to a smallest one whose replay with R still gives R's recorded logits at the
first split position (numerical search) or its recorded tokens through the first differing
token (visible search), and names the steps they share with R.

The trace's model and vLLM version must match the model directory and the vLLM at hand
(exit 2 with the reason; --force goes on and says so). Differences that can change bits on
the same build (torch version, device, thread count) are printed before the result.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import IO, Any, Callable, NoReturn, Optional, Sequence, Tuple, TypedDict

import numpy as np

from ..core import _json, _lib
from ..core.reader import Trace
from ..core.reader import open as open_trace
from ..runtimes.vllm import ENV_TRACE, PRODUCER, weight_hash_of

PROG = "llmrr.campaigns.vllm_replay"
# A step's batch, one segment a request in row order: (request, start, count, kind, sample),
# kind as `llmrr dump` names it.
Segment = Tuple[int, int, int, str, bool]
SEGMENT_KINDS = {_lib.SEGMENT_PREFILL: "prefill", _lib.SEGMENT_DECODE: "decode"}


class _Request(TypedDict):
    """What a recorded request and a replayed one share: its id, prompt and sampling."""
    id: int
    prompt: list[int]
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int
    stop_at_eos: bool


class RecordedRequest(_Request):
    """A request of the trace (its requests table), with the step it was first scheduled at."""
    arrival_step: int
    first_step: int


class ReplayRequest(_Request):
    """A request as the engine worker submits it: just before engine step `step`."""
    step: int


def die(msg: str) -> NoReturn:
    sys.stderr.write("llmrr replay --runtime vllm: error: %s\n" % msg)
    sys.exit(2)


def llmrr_bin() -> str:
    return _lib.llmrr_binary() or die("no llmrr binary: set $LLMRR_BIN or put llmrr on PATH")


def cli(*args: str, ok: Sequence[int] = (0,)) -> tuple[int, str]:
    p = subprocess.run([llmrr_bin(), *args], capture_output=True, text=True)
    if p.returncode not in ok:
        die("llmrr %s: exit %d: %s" % (" ".join(args), p.returncode,
                                       (p.stderr or p.stdout).strip()[-2000:]))
    return p.returncode, p.stdout


def _f32(v: Any) -> float:
    """A float32 column value as the number it was written from: the shortest decimal that
    reads back as the same float32 (0.95, not 0.949999988079071)."""
    return float(str(np.float32(v)))


# ---- the recorded run -------------------------------------------------------------------------

class Recorded:
    """What a vLLM trace says about its run: settings, requests, each step's batch (read
    through llmrr.open)."""

    def __init__(self, path: str) -> None:
        if not os.path.isfile(path):
            die("%s: expected a trace file, found %s" % (
                path, "no such file" if not os.path.exists(path) else "not a regular file"))
        self.path = path
        try:
            with open_trace(path) as t:
                self.header: dict[str, Any] = t.header
                extra = t.header.get("extra_config")
                self.extra: dict[str, Any] = extra if isinstance(extra, dict) else {}
                if self.extra.get("producer") != PRODUCER:
                    die("%s: not a vLLM trace (its run header's producer is %r; replay "
                        "--runtime vllm takes traces %s recorded)" % (
                            path, self.extra.get("producer"), PRODUCER))
                self.steps = self._steps(t)
                self.requests = self._requests(t, self.steps)
        except (_lib.LlmrrError, OSError) as e:
            die("%s: %s" % (path, e))

    @staticmethod
    def _steps(t: Trace) -> list[tuple[int, list[Segment]]]:
        """[(step, its segments in row order)] for every step of the trace."""
        seg = t.segments
        by_step: dict[int, list[Segment]] = {}
        for st, r, start, count, kind, sample in zip(
                seg["step"].tolist(), seg["request"].tolist(), seg["start"].tolist(),
                seg["count"].tolist(), seg["kind"].tolist(), seg["sample"].tolist()):
            by_step.setdefault(st, []).append(
                (r, start, count, SEGMENT_KINDS.get(kind, str(kind)), bool(sample)))
        return [(st, by_step.get(st, [])) for st in t.steps["step"].tolist()]

    @staticmethod
    def _requests(t: Trace, steps: list[tuple[int, list[Segment]]]) -> dict[int, RecordedRequest]:
        """id -> the request, in arrival order; first_step is the step it was first
        scheduled at (its arrival step when it never was)."""
        first: dict[int, int] = {}
        for st, segs in steps:
            for g in segs:
                first.setdefault(g[0], st)
        q = t.requests
        out: dict[int, RecordedRequest] = {}
        for n in range(len(q)):
            rid = int(q["id"][n])
            arrival = int(q["arrival_step"][n])
            if "carried" in q and int(q["carried"][n]):
                die("request %d (%s) was carried into this trace at step %d with %d tokens "
                    "generated before it: its KV cache was built in steps the trace does not "
                    "hold, so the batches cannot be re-executed bit for bit (cut with llmrr cut "
                    "--whole-lives, so that every request arrives inside the slice)" % (
                        rid, q["label"][n], arrival, int(q["history_len"][n])))
            out[rid] = RecordedRequest(
                id=rid, prompt=[int(x) for x in q["prompt"][n]],
                max_tokens=int(q["max_tokens"][n]), temperature=_f32(q["temperature"][n]),
                top_k=int(q["top_k"][n]), top_p=_f32(q["top_p"][n]), seed=int(q["seed"][n]),
                stop_at_eos=bool(q["stop_at_eos"][n]), arrival_step=arrival,
                first_step=first.get(rid, arrival))
        return out

    def model_for(self, model: str) -> str:
        """The model path to give vLLM: the recorded spelling when it names the same
        directory (so the replay's header says the same model), else the absolute path."""
        recorded = self.header.get("model", {}).get("name") or ""
        if recorded and os.path.isdir(recorded) and \
                os.path.realpath(recorded) == os.path.realpath(model):
            return recorded
        return os.path.abspath(model)

    def settings(self) -> dict[str, Any]:
        e = self.extra
        s = {"dtype": {"torch.float32": "float32", "torch.bfloat16": "bfloat16",
                       "torch.float16": "float16"}.get(str(e.get("dtype")), e.get("dtype")),
             "mbt": e.get("max_num_batched_tokens"), "seqs": e.get("max_num_seqs"),
             "chunked": e.get("chunked_prefill", True), "prefix": e.get("prefix_caching", False),
             "block": e.get("block_size"), "blocks": e.get("num_gpu_blocks"),
             "kv_bytes": e.get("kv_cache_memory_bytes"),
             "max_model_len": e.get("max_model_len"), "threads": e.get("torch_threads"),
             "eager": e.get("enforce_eager", True)}
        return s


def check_compat(rec: Recorded, model: str, force: bool) -> list[str]:
    """Refuses (exit 2) a model or vLLM that is not the recorded one, unless force; returns
    the notes on what else differs from the recording."""
    notes: list[str] = []
    refusals: list[str] = []
    cfg_path = os.path.join(model, "config.json")
    if not os.path.isfile(cfg_path):
        die("--model %s: expected a model directory with config.json" % model)
    try:  # under the nesting and size caps (llmrr.core._json)
        cfg = _json.load(cfg_path)
        if not isinstance(cfg, dict):
            raise ValueError("%s: expected a JSON object" % cfg_path)
    except (OSError, ValueError) as e:
        die("--model %s: cannot read its config: %s" % (model, e))
    text = cfg.get("text_config") or cfg
    m = rec.header.get("model", {})
    want = {"architecture": (m.get("architecture"), text.get("model_type")),
            "layers": (m.get("layers"), text.get("num_hidden_layers")),
            "hidden": (m.get("hidden"), text.get("hidden_size")),
            "vocab": (m.get("vocab"), text.get("vocab_size"))}
    for key, (recorded, here) in want.items():
        if recorded not in (None, 0, "") and here is not None and recorded != here:
            refusals.append("model %s: the trace says %r, %s has %r" % (key, recorded, model, here))
    if m.get("weight_hash"):
        here_hash = weight_hash_of(model)
        if here_hash and here_hash != m["weight_hash"]:
            refusals.append("the weights' hash: the trace says %s, %s has %s (other weights)"
                            % (m["weight_hash"], model, here_hash))
    import torch
    import vllm
    if rec.extra.get("vllm") and rec.extra["vllm"] != vllm.__version__:
        refusals.append("vLLM %s recorded, %s here" % (rec.extra["vllm"], vllm.__version__))
    if rec.extra.get("torch") and rec.extra["torch"] != torch.__version__:
        notes.append("torch %s recorded, %s here (kernels may differ)" % (rec.extra["torch"],
                                                                         torch.__version__))
    dev = rec.extra.get("device") or "cpu"
    if not dev.startswith("cpu"):
        notes.append("recorded on %s (%s), replayed on the CPU: bits are not expected to "
                     "match" % (dev, rec.extra.get("device_name")))
    for key in ("block_size", "num_gpu_blocks", "max_model_len"):
        if rec.extra.get(key) is None:
            notes.append("the trace's header has no %s (an older %s): vLLM's default is used"
                         % (key, PRODUCER))
    if refusals:
        if not force:
            die("%s does not match %s: %s (--force replays anyway)" % (
                rec.path, model, "; ".join(refusals)))
        notes += ["--force: " + r for r in refusals]
    return notes


def requests_of(rec: Recorded, keep: set[int] | None = None,
                moved: dict[int, int] | None = None) -> list[ReplayRequest]:
    """The replay's requests: (id, prompt, max_tokens, sampling, step) sorted by step."""
    out = []
    for rid, r in rec.requests.items():
        if keep is not None and rid not in keep:
            continue
        step = (moved or {}).get(rid, r["first_step"])
        out.append(ReplayRequest(id=rid, prompt=r["prompt"], max_tokens=r["max_tokens"],
                                 temperature=r["temperature"], top_k=r["top_k"],
                                 top_p=r["top_p"], seed=r["seed"],
                                 stop_at_eos=r["stop_at_eos"], step=step))
    return sorted(out, key=lambda q: (q["step"], q["id"]))


# ---- the engine side (a child process: one engine, many replays) -----------------------------

def worker(settings_json: str) -> None:
    """Reads one replay a line from stdin ({"trace", "requests"}), runs it in one in-process
    engine with the recorded settings, answers one JSON line each on stdout."""
    s = json.loads(settings_json)
    import torch
    if s.get("threads"):
        torch.set_num_threads(int(s["threads"]))
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from ..runtimes import vllm as plugin
    kw = dict(model=s["model"], skip_tokenizer_init=True, enforce_eager=bool(s["eager"]),
              dtype=s["dtype"] or "auto", max_num_batched_tokens=s["mbt"],
              max_num_seqs=s["seqs"], seed=0, enable_prefix_caching=bool(s["prefix"]),
              enable_chunked_prefill=bool(s["chunked"]))
    if s.get("max_model_len"):
        kw["max_model_len"] = s["max_model_len"]
    if s.get("block"):
        kw["block_size"] = s["block"]
    if s.get("blocks"):
        kw["num_gpu_blocks_override"] = s["blocks"]
    # (vLLM's CPU backend otherwise reserves most of the machine's memory at start)
    kw["kv_cache_memory_bytes"] = s.get("kv_bytes") or 64 << 20
    llm = LLM(**kw)
    engine = llm.llm_engine
    for line in sys.stdin:
        job = json.loads(line)
        # The runner's recorder starts at the engine's first step, with $LLMRR_VLLM_TRACE;
        # later replays switch it to their own trace.
        os.environ[ENV_TRACE] = job["trace"]
        plugin.rotate(job["trace"])
        if s["prefix"]:
            llm.reset_prefix_cache()
        waiting = list(job["requests"])
        t0 = time.time()
        steps = 0
        while waiting or engine.has_unfinished_requests():
            nxt = plugin.active_step() + 1
            if not engine.has_unfinished_requests() and waiting and waiting[0]["step"] > nxt:
                nxt = waiting[0]["step"]  # the recording had no idle step here: go on
            while waiting and waiting[0]["step"] <= nxt:
                q = waiting.pop(0)
                sp = SamplingParams(temperature=q["temperature"], top_k=q["top_k"] or 0,
                                    top_p=q["top_p"], seed=q["seed"] or None,
                                    max_tokens=q["max_tokens"], ignore_eos=not q["stop_at_eos"],
                                    detokenize=False)
                engine.add_request(str(q["id"]), TokensPrompt(prompt_token_ids=q["prompt"]), sp)
            engine.step()
            steps += 1
        plugin.rotate(None)  # the replay's trace is closed (whole) before it is compared
        print("LLMRR_REPLAY " + json.dumps({"trace": job["trace"], "engine_steps": steps,
                                            "seconds": round(time.time() - t0, 3)}), flush=True)
    plugin.close_all()


class Engine:
    """A worker process with one engine; replay() runs one replay in it."""

    def __init__(self, model: str, settings: dict[str, Any], capture: str, log: str) -> None:
        # (the worker names each replay's trace; this one is only there for the plugin to
        # patch vLLM's model runner at start)
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", LLMRR_CAPTURE=capture)
        env[ENV_TRACE] = log + ".unused"
        cfg = dict(settings, model=model)
        self.log = open(log, "w")
        self.p = subprocess.Popen([sys.executable, "-m", PROG, "--worker", json.dumps(cfg)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, text=True, env=env)
        self.count = 0

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self.p.stdin is not None and self.p.stdout is not None
        return self.p.stdin, self.p.stdout

    def replay(self, trace: str, requests: list[ReplayRequest]) -> dict[str, Any]:
        stdin, stdout = self._pipes()
        stdin.write(json.dumps({"trace": trace, "requests": requests}) + "\n")
        stdin.flush()
        for line in stdout:
            if line.startswith("LLMRR_REPLAY "):
                self.count += 1
                reply: dict[str, Any] = json.loads(line[len("LLMRR_REPLAY "):])
                return reply
        self.close()
        die("the vLLM engine ended before the replay did (its log: %s)" % self.log.name)

    def close(self) -> None:
        if self.p.poll() is None:
            self._pipes()[0].close()
            self.p.wait()
        self.log.close()
        if os.path.exists(self.log.name + ".unused"):
            os.remove(self.log.name + ".unused")


# ---- comparing ----------------------------------------------------------------------------------

def batch_difference(rec: Recorded, replayed: Recorded) -> str | None:
    """The first step whose batch differs between the recording and a replay, in words, or
    None when every step's batch is the same."""
    for (step, a), (_, b) in zip(rec.steps, replayed.steps):
        if a != b:
            return ("step %d: the batch differs: recorded %s, replayed %s" %
                    (step, fmt_batch(a), fmt_batch(b)))
    if len(rec.steps) != len(replayed.steps):
        return "the recording has %d steps, the replay %d" % (len(rec.steps), len(replayed.steps))
    return None


def fmt_batch(segs: Sequence[Segment]) -> str:
    return "[" + ", ".join("r%d %s %d+%d%s" % (r, k, s, c, "" if smp else " (no sample)")
                           for r, s, c, k, smp in segs) + "]"


# `llmrr diff` stays a CLI call: the divergence analysis (alignment, split points, causes) is
# the C++ side's. Its --json output's schema is diff_report_json (replayer/diff/src/render.cc;
# the fields read here are listed in docs/fuzz-summary.md).
def diff_json(a: str, b: str, request: int | None = None) -> tuple[int, dict[str, Any]]:
    args = ["diff", a, b, "--json", "--align", "ids"]
    if request is not None:
        args += ["--request", "%d:%d" % (request, request)]
    rc, out = cli(*args, ok=(0, 1))
    return rc, json.loads(out)


def diff_text(a: str, b: str, request: int | None = None) -> tuple[int, str]:
    args = ["diff", a, b, "--align", "ids"]
    if request is not None:
        args += ["--request", "%d:%d" % (request, request)]
    return cli(*args, ok=(0, 1))


# ---- replay -------------------------------------------------------------------------------------

def cmd_replay(a: argparse.Namespace) -> int:
    rec = Recorded(a.trace)
    notes = check_compat(rec, a.model, a.force)
    settings = rec.settings()
    keep: set[int] | None = None
    moved: dict[int, int] = {}
    what: list[str] = []
    ids = sorted(rec.requests)

    def parse_ids(text: str, opt: str) -> set[int]:
        try:
            out = {int(x) for x in text.split(",") if x != ""}
        except ValueError:
            die("%s: expected request ids like 3,5, found %r" % (opt, text))
        unknown = sorted(out - set(ids))
        if unknown:
            die("%s: the trace has no request %s (it has %s)" % (
                opt, ",".join(map(str, unknown)), ",".join(map(str, ids))))
        return out

    if a.alone is not None:
        keep = parse_ids(str(a.alone), "--alone")
        moved = {a.alone: 0}
        what.append("request %d alone" % a.alone)
    if a.only:
        keep = parse_ids(a.only, "--only")
        what.append("only requests %s" % a.only)
    if a.drop:
        keep = (keep if keep is not None else set(ids)) - parse_ids(a.drop, "--drop")
        what.append("without requests %s" % a.drop)
    for m in a.move or []:
        try:
            r, st = (int(x) for x in m.split(":"))
        except ValueError:
            die("--move: expected REQUEST:STEP, found %r" % m)
        parse_ids(str(r), "--move")
        moved[r] = st
        what.append("request %d arriving at step %d" % (r, st))
    for opt, key, val in (("--mbt", "mbt", a.mbt), ("--dtype", "dtype", a.dtype),
                          ("--prefix", "prefix", a.prefix)):
        if val is not None:
            if key == "prefix":
                val = val == "on"
            what.append("%s %s (recorded %s)" % (opt, val, settings[key]))
            settings[key] = val
    if keep is not None and not keep:
        die("no request left to replay")
    out = a.output or os.path.splitext(a.trace)[0] + ".replay.trace"
    if os.path.abspath(out) == os.path.abspath(a.trace):
        die("-o %s: that is the trace being replayed" % out)
    for n in notes:
        print("note: " + n)
    t0 = time.time()
    eng = Engine(rec.model_for(a.model), settings,
                 rec.header.get("engine", {}).get("capture") or "layers",
                 out + ".engine.log")
    try:
        eng.replay(out, requests_of(rec, keep, moved))
    finally:
        eng.close()
    seconds = time.time() - t0
    replayed = Recorded(out)
    print("replayed %s%s: %d steps, %d requests, in %.1f s (engine start included) -> %s" % (
        a.trace, " with " + ", ".join(what) if what else "", len(replayed.steps),
        len(replayed.requests), seconds, out))
    common = None if keep is None else sorted(keep)
    batch = None if what else batch_difference(rec, replayed)
    if common is None or len(common) > 1:
        rc, text = diff_text(a.trace, out)
    else:
        rc, text = diff_text(a.trace, out, common[0])
    if not what and batch is None and rc == 0:
        print("bit-exact: every step's batch, fingerprint, logits row and token as recorded")
        return 0
    if batch:
        print(batch)
    print(text.rstrip())
    return 1 if (rc != 0 or batch) else 0


# ---- bisect -------------------------------------------------------------------------------------

def ddmin(items: list[int], test: Callable[[list[int]], bool],
          budget: Callable[[], int]) -> tuple[list[int], bool]:
    """Zeller's ddmin: a 1-minimal subset of items for which test() holds (test(items) must).
    Returns (subset, minimal): minimal is False when the budget ran out first."""
    n = 2
    while len(items) >= 2:
        size = (len(items) + n - 1) // n
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        reduced = False
        for c in chunks:
            if budget() <= 0:
                return items, False
            if test(c):
                items, n, reduced = c, 2, True
                break
        if not reduced:
            for c in chunks:
                rest = [x for x in items if x not in c]
                if budget() <= 0:
                    return items, False
                if rest and test(rest):
                    items, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(items):
                break
            n = min(len(items), 2 * n)
    if len(items) == 1 and budget() > 0 and test([]):
        return [], True
    return items, True


def cmd_bisect(a: argparse.Namespace) -> int:
    rec = Recorded(a.trace)
    notes = check_compat(rec, a.model, a.force)
    for n in notes:
        print("note: " + n)
    ids = sorted(rec.requests)
    work = a.output or os.path.splitext(a.trace)[0] + ".bisect"
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    capture = rec.header.get("engine", {}).get("capture") or "layers"
    alone_trace = os.path.join(work, "alone.trace")
    eng = Engine(rec.model_for(a.model), rec.settings(), capture,
                 os.path.join(work, "engine.log"))
    try:
        targets = [a.request] if a.request is not None else ids
        for r in targets:
            if r not in rec.requests:
                die("--request %d: the trace has no such request (it has %s)" %
                    (r, ",".join(map(str, ids))))
        found: Optional[tuple[int, str, dict[str, Any]]] = None
        for r in targets:
            trace = alone_trace if r == targets[0] else os.path.join(work, "alone-%d.trace" % r)
            eng.replay(trace, requests_of(rec, {r}, {r: 0}))
            rc, d = diff_json(rec.path, trace, r)
            if rc != 0:
                found = (r, trace, d["requests"][0])
                break
        if found is None:
            print("no split: %s alone replays bit-identical to the recording" % (
                "request %d" % a.request if a.request is not None else "every request"))
            return 0
        r, alone, split = found
        print("request %d: %s against the request alone (%s)" % (r, split["verdict"], alone))
        num: dict[str, Any] = split.get("numerical_split") or {}
        vis: dict[str, Any] = split.get("visible_split") or {}
        steps_r = {st for st, segs in rec.steps for g in segs if g[0] == r}
        # Every other request is a factor: one that never shares a step with r can still
        # move the chunks of those that do.
        co = sorted(set(ids) - {r})
        spent = [0]

        def budget() -> int:
            return int(a.max_replays) - spent[0]

        def reproduces(subset: list[int], kind: str) -> bool:
            spent[0] += 1
            t = os.path.join(work, "r%d-%03d.trace" % (r, spent[0]))
            keep = set(subset) | {r}
            eng.replay(t, requests_of(rec, keep))
            _, d = diff_json(rec.path, t, r)
            q = d["requests"][0]
            ok = True
            if kind == "numerical":
                ns = q.get("numerical_split")
                ok = ns is None or ns["position"] > num["position"]
            else:
                vs = q.get("visible_split")
                ok = vs is None or vs["position"] > vis["position"]
            if not a.keep_traces:
                os.remove(t)
            return ok

        searches = []
        if a.search in ("numerical", "both") and num:
            searches.append("numerical")
        if a.search in ("visible", "both") and vis:
            searches.append("visible")
        if not searches:
            print("nothing to search: %s" % ("no visible split" if a.search == "visible"
                                              else "no numerical split"))
            return 0
        searched: list[dict[str, Any]] = []
        report: dict[str, Any] = {"request": r, "co_requests": co, "searches": searched}
        for kind in searches:
            where = num if kind == "numerical" else vis
            if not reproduces(co, kind):
                print("%s split: the replay with every co-request does not reproduce the "
                      "recording (the replay is not bit-exact here); nothing to bisect" % kind)
                return 1
            subset, minimal = ddmin(co, _reproducing(reproduces, kind), budget)
            at: int | None = where.get("step_a")
            if at is None:  # a visible split: the step whose row chose that token
                at = next((st for st, segs in rec.steps for g in segs
                           if g[0] == r and g[1] <= where["position"] - 1 < g[1] + g[2]), None)
            batch = dict(rec.steps).get(at, []) if at is not None else []
            beside = sorted({g[0] for g in batch} & set(subset))
            shared = sorted({st for st, segs in rec.steps if st in steps_r and
                             (at is None or st <= at) for g in segs if g[0] in subset})
            print("%s split of request %d at position %d (step %s): reproduced by co-request%s "
                  "%s (%d of %d%s)" % (
                      kind, r, where["position"], at, "" if len(subset) == 1 else "s",
                      ",".join(map(str, subset)) or "none", len(subset), len(co),
                      ", 1-minimal" if minimal else ", replay budget spent: possibly not "
                      "minimal"))
            print("  in the batch with request %d at step %s: %s; at least one of them shared "
                  "its batch at %d step%s up to there" % (
                      r, at, ",".join(map(str, beside)) or "none of them", len(shared),
                      "" if len(shared) == 1 else "s"))
            searched.append({"kind": kind, "position": where["position"], "step": at,
                             "minimal": subset, "one_minimal": minimal,
                             "in_batch_at_split": beside, "shared_steps": shared})
        report["replays"] = spent[0] + 1
        report["seconds"] = round(time.time() - t0, 1)
        print("%d replays in %.1f s (engine start included)" % (report["replays"],
                                                               report["seconds"]))
        with open(os.path.join(work, "bisect.json"), "w") as f:
            json.dump(report, f, indent=1)
        return 0
    finally:
        eng.close()


def _reproducing(reproduces: Callable[[list[int], str], bool],
                 kind: str) -> Callable[[list[int]], bool]:
    """ddmin's test for one kind of split."""
    def test(subset: list[int]) -> bool:
        return reproduces(subset, kind)
    return test


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        worker(argv[1])
        return 0
    ap = argparse.ArgumentParser(prog="llmrr replay|bisect --runtime vllm")
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("replay", help="re-execute a vLLM trace and compare")
    bp = sub.add_parser("bisect", help="find the co-requests that split a request")
    for p in (rp, bp):
        p.add_argument("trace")
        p.add_argument("--model", required=True, help="the model directory vLLM loads")
        p.add_argument("-o", "--output", help="replay trace (replay) or work folder (bisect)")
        p.add_argument("--force", action="store_true",
                       help="replay a trace whose model or vLLM version differs")
    rp.add_argument("--alone", type=int, help="counterfactual: this request alone")
    rp.add_argument("--only", help="counterfactual: only these requests (ids, comma-separated)")
    rp.add_argument("--drop", help="counterfactual: without these requests")
    rp.add_argument("--move", action="append", help="counterfactual: REQUEST:STEP arrival")
    rp.add_argument("--mbt", type=int, help="counterfactual: max_num_batched_tokens")
    rp.add_argument("--prefix", choices=("on", "off"), help="counterfactual: prefix caching")
    rp.add_argument("--dtype", help="counterfactual: dtype (float32, bfloat16, ...)")
    bp.add_argument("--request", type=int, help="the request to explain (default: the first "
                    "that splits from its replay alone)")
    bp.add_argument("--search", choices=("numerical", "visible", "both"), default="both")
    bp.add_argument("--max-replays", type=int, default=64)
    bp.add_argument("--keep-traces", action="store_true")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.model):
        die("--model %s: expected a model directory" % a.model)
    return cmd_replay(a) if a.cmd == "replay" else cmd_bisect(a)


if __name__ == "__main__":
    sys.exit(main())
