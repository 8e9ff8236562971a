"""llmrr.open against `llmrr dump --json` on traces written through the C ABI (the C toy
decoder), blobs, recovery of a crashed trace, and rejection of every golden bad trace."""
import glob
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import dump_json, require  # noqa: E402

require("numpy")
import numpy as np  # noqa: E402

import llmrr  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def toy_trace(path, *args):
    subprocess.run([os.environ["LLMRR_TOY_DECODE"], path, *args], check=True,
                   capture_output=True)
    return path


class ReaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path = toy_trace("toy.trace", "--splits", "2", "--logits", "full", "--capture", "all")
        cls.t = llmrr.open(cls.path)
        cls.dump = [d for d in dump_json(cls.path) if d.get("type") == "step"]

    def test_header(self):
        h = self.t.header
        self.assertTrue(self.t.complete)
        self.assertFalse(self.t.lossy)
        self.assertEqual(h["model"]["vocab"], 64)
        self.assertEqual(h["engine"]["capture"], "all")
        self.assertEqual(h["step_count"], len(self.dump))

    def test_steps_segments_tokens_match_dump(self):
        t = self.t
        self.assertEqual(t.steps.step.tolist(), [d["step"] for d in self.dump])
        self.assertEqual(t.steps.rows.tolist(), [d["rows"] for d in self.dump])
        segs = [(d["step"], g["request"], g["start"], g["count"], g["cached"], g["kind"])
                for d in self.dump for g in d["segments"]]
        kinds = {0: "prefill", 1: "decode"}
        got = list(zip(t.segments.step.tolist(), t.segments.request.tolist(),
                       t.segments.start.tolist(), t.segments["count"].tolist(),
                       t.segments.cached.tolist(), [kinds[k] for k in t.segments.kind.tolist()]))
        self.assertEqual(got, segs)
        toks = [(d["step"], k["request"], k["position"], k["token"]) for d in self.dump
                for k in d["tokens"]]
        self.assertEqual(list(zip(t.tokens.step.tolist(), t.tokens.request.tolist(),
                                  t.tokens.position.tolist(), t.tokens.token.tolist())), toks)
        for req in (0, 1):
            self.assertEqual(t.generated(req).tolist(), [k[3] for k in toks if k[1] == req])
        fin = [(d["step"], f["request"], f["generated"]) for d in self.dump for f in d["finishes"]]
        self.assertEqual(list(zip(t.finishes.step.tolist(), t.finishes.request.tolist(),
                                  t.finishes.generated.tolist())), fin)

    def test_fingerprints_match_dump(self):
        want = []
        for d in self.dump:
            for sr in d["fingerprints"]:
                for i, f in enumerate(sr["fingerprints"]):
                    row = sr["batch_rows"][i] if sr["batch_rows"] else i
                    want.append((d["step"], sr["site"], row, int(f["hash"], 16), f["l2"]))
        fp = self.t.fingerprints
        got = list(zip(fp.step.tolist(), fp.site_name.tolist(), fp.batch_row.tolist(),
                       fp.hash.tolist(), fp.l2.astype(float).tolist()))
        self.assertEqual(got, want)
        self.assertGreater(len(got), 0)
        one = fp.where(site="L1.out", step=0)
        self.assertEqual(len(one), self.t.steps.rows[0])
        seg = self.t.segments.where(step=0)
        self.assertEqual(one.request.tolist(), np.repeat(seg.request, seg["count"]).tolist())
        self.assertEqual(one.position.tolist(),
                         [s + k for s, n in zip(seg.start, seg["count"]) for k in range(n)])

    def test_plans_match_dump(self):
        want = [(d["step"], p["site"], p["splits"], p["k_tile"]) for d in self.dump
                for p in d["plans"]]
        pl = self.t.plans
        got = list(zip(pl.step.tolist(), pl.site_name.tolist(), pl.splits.tolist(),
                       pl.k_tile.tolist()))
        self.assertEqual(sorted(got), sorted(want))
        self.assertIn(2, pl.where(site="L0.mlp.down").splits.tolist())

    def test_logits_topk_and_blob(self):
        lg = self.t.logits
        want = [(d["step"], l["position"], l["top_ids"], l["margin"]) for d in self.dump
                for l in d["logits"]]
        self.assertEqual(len(lg), len(want))
        for i, (step, pos, ids, margin) in enumerate(want):
            self.assertEqual(lg.step[i], step)
            self.assertEqual(lg.position[i], pos)
            self.assertEqual(lg.top_ids[i][:len(ids)].tolist(), ids)
            self.assertAlmostEqual(float(lg.margin[i]), margin, places=5)
        # --logits full: each row is a blob; its argmax is the greedy token.
        for i in range(len(lg)):
            row = np.frombuffer(self.t.blob(lg.blob[i]), dtype=np.float32)
            self.assertEqual(row.shape[0], lg.vocab[i])
            tok = self.t.tokens.where(step=lg.step[i], request=lg.request[i]).token[0]
            self.assertEqual(int(np.argmax(row)), tok)
            self.assertAlmostEqual(float(np.sqrt(np.sum(row.astype(np.float64) ** 2))),
                                   float(lg.l2[i]), places=3)
            self.assertEqual(lg.top_ids[i][0], tok)

    def test_requests(self):
        r = self.t.requests
        self.assertEqual(r.id.tolist(), [0, 1])  # request 1 arrives at step 2
        self.assertEqual(r.arrival_step.tolist(), [0, 2])
        for i in range(2):
            self.assertEqual(r.prompt_len[i], len(r.prompt[i]))
            self.assertEqual(r.generated[i], 8)
            self.assertEqual(r.finish_step[i], self.t.finishes.where(request=i).step[0])
        self.t.verify()

    def test_site_names(self):
        for name in ("embed", "L3.attn.q", "L0.moe.e5.up", "L12.out", "final_norm", "logits"):
            self.assertEqual(llmrr.site_name(llmrr.site_pack(name)), name)
        with self.assertRaises(ValueError):
            llmrr.site_pack("L3.nonsense")

    def test_crashed_trace_is_recovered(self):
        t = llmrr.open(os.path.join(ROOT, "tests", "golden", "crashed.trace"))
        self.assertFalse(t.complete)
        self.assertGreater(len(t.steps), 0)

    def test_json_nested_past_the_cap_is_a_value_error(self):
        # tests/golden/deep_config.trace: a run header whose extra_config_json nests 100,000
        # deep. Before the cap the library dumped it back recursively (SIGSEGV), and json.loads
        # raised RecursionError from 1,000 levels.
        path = os.path.join(ROOT, "tests", "golden", "deep_config.trace")
        with self.assertRaises(ValueError) as cm:
            llmrr.open(path)
        e = cm.exception
        self.assertIsInstance(e, llmrr.JsonNestingError)
        self.assertIsInstance(e, llmrr.LlmrrError)
        self.assertEqual(e.path, path)
        self.assertIn(path + ": run header extra_config_json: nesting deeper than 64 levels",
                      str(e))

    def test_json_depth_scan(self):
        from llmrr.core import _json
        self.assertEqual(_json.too_deep_at("[" * 64 + "]" * 64), 0)
        self.assertEqual(_json.too_deep_at("[" * 65), 65)
        self.assertEqual(_json.too_deep_at('{"a": "' + "[" * 100 + '"}'), 0)  # in a string
        self.assertEqual(_json.too_deep_at('["\\\"' + "[" * 100 + '"]'), 0)  # \" keeps it
        self.assertEqual(_json.too_deep_at('["\\\\"' + "[" * 64), 69)  # \\ then " ends it
        with self.assertRaises(_json.JsonNestingError) as cm:
            _json.loads("[" * 100000 + "]" * 100000, "x.json", "config")
        self.assertIn("x.json: config: nesting deeper than 64 levels at byte 65",
                      str(cm.exception))
        self.assertEqual(_json.loads('{"a": [[1]]}', "x.json"), {"a": [[1]]})

    def test_golden_errors_are_rejected(self):
        files = sorted(glob.glob(os.path.join(os.environ["LLMRR_GOLDEN_ERRORS"], "*.trace")))
        self.assertGreater(len(files), 10)
        for path in files:
            with open(path[:-len(".trace")] + ".expected") as f:
                exp = dict(line.split(" ", 1) for line in f.read().splitlines()
                           if line and not line.startswith("#"))
            with self.subTest(trace=os.path.basename(path)):
                try:
                    t = llmrr.open(path)
                    t.verify()
                except llmrr.LlmrrError as e:
                    self.assertIn(exp["message"].strip(), str(e))
                    continue
                # Readable but torn (no footer): recovered, marked incomplete, as `llmrr
                # verify` reports it (exit 2, "incomplete trace", with the warning).
                self.assertFalse(t.complete)
                self.assertIn(exp["message"].strip(),
                              "incomplete trace " + " ".join(t.header["warnings"]))

    def test_recorder_settings(self):
        # sync_on_close (fsync at close) writes the same complete trace; a misspelt setting
        # is an error, not silently ignored.
        with llmrr.Recorder("sync.trace", model_name="m", layers=1, hidden=4, vocab=8,
                            sync_on_close=True) as rec:
            rec.add_request(0, [1, 2], max_tokens=1)
            rec.begin_step(0, [dict(request=0, start=0, count=2, kind=0, sample=1)])
            rec.token(0, 2, 5)
            rec.finish(0, 1, 1)
            rec.end_step()
        t = llmrr.open("sync.trace")
        t.verify()
        self.assertTrue(t.complete)
        self.assertEqual(t.generated(0).tolist(), [5])
        with self.assertRaises(TypeError) as cm:
            llmrr.Recorder("typo.trace", sync_on_clsoe=True)
        self.assertIn("sync_on_clsoe", str(cm.exception))
        with self.assertRaises(llmrr.LlmrrError) as cm:
            llmrr.Recorder("bad.trace", sync_on_close=2)
        self.assertIn("sync_on_close must be 0 or 1", str(cm.exception))

    def test_missing_file(self):
        with self.assertRaises(llmrr.LlmrrError) as cm:
            llmrr.open("no/such.trace")
        self.assertIn("no/such.trace", str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
