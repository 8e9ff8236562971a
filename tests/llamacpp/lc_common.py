"""Shared by the llama.cpp tests: where things are, skips, and a trace read as dicts."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLMRR = os.environ.get("LLMRR_BIN", os.path.join(ROOT, "build/default/tools/llmrr"))
LCDIR = os.environ.get("LLMRR_LLAMACPP_DIR", os.path.join(ROOT, "build/llamacpp"))


def skip(why):
    print("skipped: " + why)
    sys.exit(77)


def require_llamacpp(*tools):
    if not os.path.isfile(os.path.join(LCDIR, "lib/libllama.so")):
        skip("no llama.cpp at %s (run tools/setup/llamacpp, then reconfigure the build)" % LCDIR)
    shim = os.environ.get("LLMRR_LLAMACPP_SHIM")
    if not shim or not os.path.isfile(shim):
        skip("libllmrr_llamacpp.so was not built (llama.cpp was absent when the build was "
             "configured: run tools/setup/llamacpp, then reconfigure)")
    for t in tools:
        if not os.environ.get(t):
            skip("%s not built (llama.cpp was absent at configure time: tools/setup/llamacpp)" % t)


def model_path():
    d = os.environ.get("LLMRR_MODEL_DIR", os.path.expanduser("~/.cache/llmrr/models"))
    p = os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.isfile(p):
        skip("SmolLM2 not found in %s (run tools/setup/smollm2, or set LLMRR_MODEL_DIR)" % d)
    return p


def llmrr(*args, check=True):
    p = subprocess.run([LLMRR, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError("llmrr %s: exit %d\n%s%s" % (" ".join(args), p.returncode,
                                                          p.stdout, p.stderr))
    return p


class Trace:
    """A trace through `llmrr dump --json`: requests, tokens and logits by request."""

    def __init__(self, path):
        out = llmrr("dump", path, "--json").stdout
        self.records = [json.loads(line) for line in out.splitlines() if line.strip()]
        self.steps = [r for r in self.records if r.get("type") == "step"]
        self.requests = {}
        self.tokens = {}    # request -> [(position, token)]
        self.logits = {}    # (request, position) -> logits record
        self.finishes = {}  # request -> finish record
        for s in self.steps:
            for a in s.get("arrivals", []):
                self.requests[a["id"]] = a
            for t in s["tokens"]:
                self.tokens.setdefault(t["request"], []).append((t["position"], t["token"]))
            for lg in s["logits"]:
                self.logits[(lg["request"], lg["position"])] = lg
            for f in s["finishes"]:
                self.finishes[f["request"]] = f

    def generated(self, req):
        return [t for _, t in sorted(self.tokens.get(req, []))]

    def check_top1(self, test):
        """Every token is the top-1 of the logits row that predicted it (greedy sampling)."""
        n = 0
        for req, toks in self.tokens.items():
            for pos, tok in toks:
                lg = self.logits.get((req, pos - 1))
                test.assertIsNotNone(lg, "request %d: no logits row for position %d" % (req, pos - 1))
                test.assertEqual(lg["top_ids"][0], tok,
                                 "request %d position %d: token %d is not the top-1 (%d) of its "
                                 "row" % (req, pos, tok, lg["top_ids"][0]))
                n += 1
        return n


def replay(trace, model, *args):
    """`llmrr replay --runtime llamacpp TRACE --model MODEL ARGS`: (exit code, stdout)."""
    p = llmrr("replay", "--runtime", "llamacpp", trace, "--model", model, *args, check=False)
    if p.returncode not in (0, 1):
        raise AssertionError("replay %s: exit %d\n%s%s" % (trace, p.returncode, p.stdout,
                                                           p.stderr[-3000:]))
    return p.returncode, p.stdout
