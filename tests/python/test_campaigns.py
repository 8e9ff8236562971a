"""The campaigns' parts that need no runtime (label "python"):
- llmrr.campaigns.fuzz_summary writes the schema of `llmrr fuzz`'s own summary.json
  (replayer/fuzz/src/report.cc): the same keys with the same JSON types in the campaign, the
  stats, the completions and every run record, plus "runtime" and the runtime's section;
  counts computed as `llmrr fuzz` computes them (`llmrr fuzz merge` reads it back and agrees);
  comparison() classifies a real `llmrr diff --json` request entry;
- llmrr.campaigns.llamacpp_fuzz runs as a file without numpy (what `llmrr fuzz --runtime
  llamacpp` does with python3), its summary writer loaded from beside it;
- llmrr.campaigns.vllm_replay reads a trace's steps and requests through llmrr.open exactly
  as `llmrr dump --json` has them."""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import dump_json, llmrr_cli, require  # noqa: E402

require("numpy")
import numpy as np  # noqa: E402

import llmrr  # noqa: E402
from llmrr.campaigns import fuzz_summary  # noqa: E402
from llmrr.campaigns import vllm_replay  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMACPP_FUZZ = os.path.join(ROOT, "python", "llmrr", "campaigns", "llamacpp_fuzz.py")
RECORD = ["record", "--model", "builtin:tiny-moe", "--prompt", "hello world", "--max-tokens",
          "12", "--arrival", "3", "--capacity-factor", "1.0", "--overflow", "reroute"]


def json_type(v):
    """A JSON value's type as a reader sees it (an integer is a number too)."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return type(v).__name__


class FuzzSummarySchemaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # `llmrr fuzz`'s own summary, and a real diff of a request alone and in a crowd.
        llmrr_cli("fuzz", "--model", "builtin:tiny-moe", "--prompt", "hello world", "--runs", "3",
                  "--max-tokens", "4", "--max-shrink", "0", "-q", "--out", "engine", ok=(0, 1))
        with open(os.path.join("engine", "summary.json")) as f:
            cls.engine = json.load(f)
        llmrr_cli(*RECORD, "-o", "a.trace")
        llmrr_cli(*RECORD, "--load", "16", "-o", "b.trace")
        _, out = llmrr_cli("diff", "a.trace", "b.trace", "--request", "0", "--json", ok=(0, 1))
        cls.split = json.loads(out)["requests"][0]
        _, out = llmrr_cli("diff", "a.trace", "a.trace", "--request", "0", "--json")
        cls.same = json.loads(out)["requests"][0]

    def summary(self):
        split, same = fuzz_summary.comparison(self.split), fuzz_summary.comparison(self.same)
        alone, other = [5, 6, 7], [5, 6, 8]
        a, b = fuzz_summary.completion_id(alone), fuzz_summary.completion_id(other)
        results = [
            fuzz_summary.run_record(0, same, co_requests=0, completion=a, runtime="test",
                                    section={"note": "alone"}),
            fuzz_summary.run_record(1, dict(split, verdict="numerical", visible_token=-1),
                                    co_requests=16, completion=a, prompt_tokens=40,
                                    target_arrival=3, prefill_chunk=64, runtime="test",
                                    section={"note": "crowd"}),
            fuzz_summary.run_record(2, dict(split, verdict="visible", visible_token=2),
                                    co_requests=4, completion=b, runtime="test", section={}),
        ]
        campaign = fuzz_summary.campaign(
            model="m", model_identity="test:m", policy="test", dtype="f32",
            target_prompt_ids=[1, 2], prompt="hello world", max_tokens=4, seed=0, runs=3,
            space={"max_co": 16})
        return fuzz_summary.summary("test", campaign, results, {a: (alone, "x"), b: (other, "")},
                                    a, 1.5, {"by": {}})

    def test_comparison_of_a_real_diff(self):
        c = fuzz_summary.comparison(self.split)
        q = self.split
        self.assertIn(c["verdict"], ("numerical", "visible"))
        # token indices as `llmrr fuzz` counts them: the logits row at the prompt's last
        # position chooses token 0
        self.assertEqual(c["numerical_token"], min(
            q["numerical_split"]["position"] + 1 - q["prompt_len"],
            c["visible_token"] if c["visible_token"] >= 0 else 1 << 30))
        if q["visible_split"]:
            self.assertEqual(c["visible_token"], q["visible_split"]["position"] - q["prompt_len"])
        self.assertTrue(c["cause"], self.split)
        self.assertTrue(c["first_site"])
        self.assertGreaterEqual(c["first_step"], 0)
        self.assertEqual(c["cause_layer"], fuzz_summary.layer_of(c["first_site"]))
        self.assertEqual(set(c["first_batch"]), {"rows", "requests", "prefill_segments"})
        self.assertEqual(self.split["first_difference"]["ops"], [])  # the engine records plans
        self.assertIsNone(c["op_cause"])
        c = fuzz_summary.comparison(self.same)
        self.assertEqual((c["verdict"], c["numerical_token"], c["cause"], c["first_site"]),
                         ("identical", -1, "", None))

    def test_op_cause_names_each_op_and_the_keys_that_changed(self):
        ops = [{"name": "Qcur", "op": "MUL_MAT", "a": "src1=f32:576x1 dst=f32:576x1",
                "b": "src1=f32:576x7 dst=f32:576x7",
                "changes": ["src1 f32:576x1 vs f32:576x7", "dst f32:576x1 vs f32:576x7"]},
               {"name": "__fattn__", "op": "FLASH_ATTN_EXT", "a": "prec=0", "b": None,
                "changes": ["ran in A only"]},
               {"name": "graph", "op": "GRAPH", "a": "nodes=9 tokens=1", "b": "nodes=9 tokens=7",
                "changes": ["tokens 1 vs 7"]}]
        ops.insert(1, {"name": "Kcur", "op": "MUL_MAT", "a": "src1=f32:576x1", "b": "src1=f16:576x7",
                       "changes": ["src1 f32:576x1 vs f16:576x7"]})
        self.assertEqual(fuzz_summary.op_cause(ops),
                         "MUL_MAT x2: src1.ne1, dst.ne1, src1.type; FLASH_ATTN_EXT: only in A; "
                         "graph: tokens")
        self.assertIsNone(fuzz_summary.op_cause([]))
        q = json.loads(json.dumps(self.split))
        q["first_difference"]["ops"] = ops
        self.assertEqual(fuzz_summary.comparison(q)["op_cause"], fuzz_summary.op_cause(ops))

    def test_same_keys_and_types_as_llmrr_fuzz(self):
        s, e = self.summary(), self.engine
        self.assertEqual(s["llmrr_fuzz_summary"], e["llmrr_fuzz_summary"])
        self.assertEqual(set(s) - set(e), {"runtime", "test"})
        self.assertEqual(set(e) - set(s), set())
        for part in ("campaign", "stats"):
            self.assertEqual(set(s[part]), set(e[part]), part)
            for k in e[part]:
                if k != "space":
                    self.assertEqual(json_type(s[part][k]), json_type(e[part][k]), (part, k))
        for k in e:
            self.assertEqual(json_type(s[k]), json_type(e[k]), k)
        ec, sc = next(iter(e["completions"].values())), next(iter(s["completions"].values()))
        self.assertEqual({k: json_type(v) for k, v in sc.items()},
                         {k: json_type(v) for k, v in ec.items()})
        want = {k: json_type(v) for k, v in e["results"][0].items()}
        for r in s["results"]:
            got = {k: json_type(v) for k, v in r.items()}
            self.assertEqual(got.pop("test"), "dict")
            self.assertEqual(got, want, r)

    def test_counts_as_llmrr_fuzz_counts(self):
        s = self.summary()
        st = s["stats"]
        self.assertEqual((st["identical"], st["numerical"], st["visible"]), (1, 1, 1))
        self.assertEqual(s["runs_done"], 3)
        self.assertEqual(sum(c["runs"] for c in s["completions"].values()), 3)
        self.assertEqual(st["unique_completions"], 2)
        os.makedirs("py", exist_ok=True)
        path = fuzz_summary.write("py", s)
        with open(path) as f:
            self.assertEqual(json.load(f), s)
        # `llmrr fuzz merge` reads it (it refuses anything but its own schema) and, counting
        # again from the run records, finds the same stats.
        _, out = llmrr_cli("fuzz", "merge", path, "--json", ok=(0, 1))  # 1: runs split
        merged = json.loads(out)
        self.assertEqual(merged["stats"], st)
        self.assertEqual(merged["campaign"], s["campaign"])
        self.assertEqual([r["index"] for r in merged["results"]], [0, 1, 2])
        self.assertEqual(merged["completions"].keys(), s["completions"].keys())

    def test_bad_verdict_refused(self):
        with self.assertRaises(ValueError):
            fuzz_summary.run_record(0, dict(fuzz_summary.comparison(self.same), verdict="odd"),
                                    co_requests=0, completion="x", runtime="t", section={})


class LlamacppFuzzAsAFileTest(unittest.TestCase):
    def test_runs_without_numpy(self):
        # As `llmrr fuzz --runtime llamacpp` runs it (python3 on the file), with numpy made
        # unimportable: it loads its summary writer from beside it and refuses a bad --model.
        code = ("import runpy, sys; sys.modules['numpy'] = None; sys.argv = sys.argv[1:]; "
                "runpy.run_path(sys.argv[0], run_name='__main__')")
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # nothing of the package but the two files
        p = subprocess.run([sys.executable, "-c", code, LLAMACPP_FUZZ, "--model", "no.gguf",
                            "--runs", "1", "--out", "lc"], capture_output=True, text=True,
                           env=env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--model: no such file: no.gguf", p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        self.assertFalse(os.path.exists("lc"))


class VllmReplayReadsTheTraceTest(unittest.TestCase):
    def test_steps_and_requests_as_dump_has_them(self):
        llmrr_cli(*RECORD, "--load", "6", "-o", "r.trace")
        with llmrr.open("r.trace") as t:
            steps = vllm_replay.Recorded._steps(t)
            requests = vllm_replay.Recorded._requests(t, steps)
        dumped = [d for d in dump_json("r.trace") if d.get("type") == "step"]
        self.assertEqual([st for st, _ in steps], [d["step"] for d in dumped])
        first = {}
        for (st, segs), d in zip(steps, dumped):
            self.assertEqual(segs, [(g["request"], g["start"], g["count"], g["kind"],
                                     bool(g["sample"])) for g in d["segments"]], st)
            for g in d["segments"]:
                first.setdefault(g["request"], st)
        arrivals = {a["id"]: a for d in dumped for a in d.get("arrivals", [])}
        self.assertEqual(sorted(requests), sorted(arrivals))
        self.assertGreater(len({a["arrival_step"] for a in arrivals.values()}), 1)
        for rid, a in arrivals.items():
            r = requests[rid]
            for k in ("prompt", "max_tokens", "top_k", "seed", "stop_at_eos", "arrival_step"):
                self.assertEqual(r[k], a[k], (rid, k))
            for k in ("temperature", "top_p"):
                self.assertEqual(np.float32(r[k]), np.float32(a[k]), (rid, k))
            self.assertEqual(r["first_step"], first[rid])

    def test_not_a_vllm_trace_refused(self):
        llmrr_cli(*RECORD, "-o", "engine.trace")
        code = ("import sys; from llmrr.campaigns import vllm_replay; "
                "vllm_replay.Recorded(sys.argv[1])")
        p = subprocess.run([sys.executable, "-c", code, "engine.trace"], capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("engine.trace: not a vLLM trace", p.stderr)
        p = subprocess.run([sys.executable, "-c", code, os.path.join(
            ROOT, "fuzz", "corpus", "reader_arrow_fuzzer", "error_corrupt_zstd.trace")],
            capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("error_corrupt_zstd.trace: ", p.stderr)
        self.assertNotIn("Traceback", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
