"""vLLM's compiled mode (enforce_eager=False) recorded by llmrr.runtimes.vllm (label "vllm").

The plugin puts its sites into the model as the llmrr::site_rows custom op right after vLLM
loads it, before vLLM compiles it (on the CPU: Dynamo traced once, inductor), so a compiled
run writes row fingerprints as an eager run does, without forcing eager. Three prompts with
staggered finishes run compiled twice and eager once, capture "all". The compiled traces must
verify, say "compiled" in their header, hold every site's rows for every batch row of every
step, and hold the tokens vLLM returned; two compiled runs must be bit-identical; each row
must sit close to the eager run's (relative l2 within 1e-4: the same math, other kernels),
and `llmrr diff` must name where compiled and eager part, if they do."""
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from common import dump_json, llmrr_cli, require  # noqa: E402

require("torch", "transformers", "vllm")
from vllm_common import generate, make_model  # noqa: E402

WORK = os.getcwd()
MODEL = os.path.join(WORK, "tiny-llama")
PROMPTS = [[3, 4, 5, 6], [7, 8, 9], [10, 11, 12, 13, 14], [20 + i for i in range(30)]]
MAX_TOKENS = [3, 5, 4, 6]
SITES = ["embed", "final_norm"] + ["L%d.%s" % (i, s) for i in (0, 1)
                                   for s in ("attn_norm", "attn.o", "mlp_norm", "mlp.down", "out")]


def rows_by(trace):
    """{(site, request, position): l2} and each step's (rows, {site: rows recorded})."""
    out, steps = {}, []
    for s in dump_json(trace):
        if s.get("type") != "step":
            continue
        where = [(g["request"], g["start"] + k) for g in s["segments"] for k in range(g["count"])]
        steps.append((len(where), {f["site"]: len(f["fingerprints"]) for f in s["fingerprints"]}))
        for f in s["fingerprints"]:
            for b, fp in enumerate(f["fingerprints"]):
                out[(f["site"],) + where[b]] = fp["l2"]
    return out, steps


class CompiledMode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        make_model(MODEL)
        cls.runs = {}
        for name, eager in (("compiled", False), ("compiled-again", False), ("eager", True)):
            t = os.path.join(WORK, name + ".trace")
            tokens, err = generate(MODEL, t, PROMPTS, max_tokens=MAX_TOKENS, seqs=2,
                                   eager=eager, capture="all")
            cls.runs[name] = (t, tokens, err)

    def test_compiled_runs_write_fingerprints(self):
        t, tokens, err = self.runs["compiled"]
        self.assertIn("compiled model: rows by llmrr::site_rows", err)
        _, out = llmrr_cli("verify", t)
        self.assertIn("complete", out)
        self.assertNotIn("lossy", out)
        extra = json.loads(json.loads(llmrr_cli("inspect", t, "--json")[1])
                           ["run_header"]["extra_config_json"])
        self.assertFalse(extra["enforce_eager"])
        self.assertTrue(extra["row_hooks"].startswith("compiled: llmrr::site_rows"))
        _, steps = rows_by(t)
        for n, sites in steps:
            for site in SITES:
                self.assertEqual(sites.get(site), n, "%s in a step of %d rows" % (site, n))
        got = {}
        for s in dump_json(t):
            if s.get("type") != "step":
                continue
            for tok in s.get("tokens", []):
                got.setdefault(tok["request"], []).append(tok["token"])
        self.assertEqual([got[i] for i in range(len(PROMPTS))], tokens)

    def test_two_compiled_runs_are_bit_identical(self):
        rc, out = llmrr_cli("diff", self.runs["compiled"][0], self.runs["compiled-again"][0])
        self.assertIn("no split", out)

    def test_compiled_rows_sit_close_to_eager(self):
        c, _ = rows_by(self.runs["compiled"][0])
        e, _ = rows_by(self.runs["eager"][0])
        # (eager hooks more sites: q/k/v, attention, gate/up/act; the compiled op takes these)
        self.assertEqual({k[0] for k in c}, set(SITES))
        self.assertTrue(set(c) <= set(e))
        far = [(k, c[k], e[k]) for k in c if abs(c[k] - e[k]) > 1e-4 * max(abs(e[k]), 1e-6)]
        self.assertEqual(far, [])
        rc, out = llmrr_cli("diff", self.runs["eager"][0], self.runs["compiled"][0], ok=(0, 1))
        print(out[:1500])
        if rc == 1:
            self.assertRegex(out, r"First difference at step \d+, (prompt )?position \d+")
        print("%d rows compared with eager" % len(c))


if __name__ == "__main__":
    unittest.main(verbosity=2)
