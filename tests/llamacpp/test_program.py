"""A program of its own under `llmrr record-llamacpp` (tests/llamacpp/greedy.c: two sequences in
one batch through llama_decode, greedy, with a sampler that accepts each token): the trace
verifies, holds one request per sequence with its prompt and exactly the tokens the program
printed, each the top-1 of the logits row credited to it, and layer fingerprints of every row.
Replayed in libllama (`llmrr replay --runtime llamacpp`): bit-exact; with n_ubatch 5 (the
prompt batch of 12 rows split into ubatches of 5, 5 and 2) also bit-exact, which is what
llama.cpp's CPU kernels with Q4_1 weights do (they do not depend on the batch); with flash
attention off (recorded: auto, on here) the first differing step and site are named."""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lc_common import Trace, llmrr, model_path, replay, require_llamacpp, LLMRR  # noqa: E402

require_llamacpp("LLMRR_LLAMACPP_GREEDY", "LLMRR_LLAMACPP_REPLAY")
MODEL = model_path()
PROMPT = [1, 504, 3575, 282, 4649, 314]
N = 12


class ProgramTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cmd = [LLMRR, "record-llamacpp", "-o", "run.trace", "--",
               os.environ["LLMRR_LLAMACPP_GREEDY"], MODEL, str(N), *map(str, PROMPT)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        assert p.returncode == 0, p.stdout + p.stderr[-3000:]
        cls.out = {}
        for line in p.stdout.splitlines():
            if line.startswith("seq "):
                head, toks = line.split(":", 1)
                cls.out[int(head.split()[1])] = [int(t) for t in toks.split()]
        cls.stderr = p.stderr
        cls.t = Trace("run.trace")

    def test_verifies_and_not_lossy(self):
        v = llmrr("verify", "run.trace")
        self.assertIn("ok", v.stdout + v.stderr)
        self.assertNotIn("LOSSY", self.stderr[-3000:], self.stderr[-3000:])
        h = [r for r in self.t.records if r.get("type") == "header"][0]
        self.assertTrue(h["complete"])
        self.assertFalse(h["lossy"])
        self.assertTrue(h["weight_hash"].startswith("xxh3-64:"))

    def test_one_request_per_sequence_with_its_tokens(self):
        self.assertEqual(len(self.out), 2)
        self.assertEqual(len(self.t.requests), 2)
        by_seq = {int(r["label"].split("seq=")[1]): rid for rid, r in self.t.requests.items()}
        self.assertEqual(sorted(by_seq), [0, 1])
        self.assertEqual(self.t.requests[by_seq[0]]["prompt"], PROMPT)
        self.assertEqual(self.t.requests[by_seq[1]]["prompt"], PROMPT[::-1])
        for s in (0, 1):
            self.assertEqual(self.t.generated(by_seq[s]), self.out[s])
            self.assertEqual(self.t.finishes[by_seq[s]]["generated"], N)

    def test_batches_and_top1(self):
        # one prompt batch (both prompts), then N - 1 batches of one row per sequence
        self.assertEqual(len(self.t.steps), N)
        self.assertEqual(self.t.steps[0]["rows"], 2 * len(PROMPT))
        self.assertTrue(all(s["rows"] == 2 for s in self.t.steps[1:]))
        self.assertEqual(self.t.check_top1(self), 2 * N)

    def test_layer_fingerprints_cover_every_row(self):
        layers = 30  # SmolLM2-135M
        for s in self.t.steps:
            sites = {r["site"]: r for r in s["fingerprints"]}
            self.assertEqual(len(sites), layers, s["step"])
            first = sites["L0.out"]
            self.assertEqual(sorted(first["batch_rows"]), list(range(s["rows"])))
            last = sites["L%d.out" % (layers - 1)]
            # the last layer keeps only the rows that want logits
            want = sorted(lg["batch_row"] for lg in s["logits"])
            self.assertEqual(sorted(last["batch_rows"]), want)

    def test_replay_is_bit_exact(self):
        rc, out = replay("run.trace", MODEL, "-o", "same.trace")
        self.assertEqual(rc, 0, out)
        self.assertIn("bit-exact: %d steps, %d rows" % (N, 2 * len(PROMPT) + 2 * (N - 1)), out)

    def test_other_n_ubatch_is_bit_exact_on_the_cpu(self):
        rc, out = replay("run.trace", MODEL, "--n-ubatch", "5", "-o", "ubatch5.trace")
        self.assertEqual(rc, 0, out)
        self.assertIn("bit-exact: ", out)
        # the replay's first step ran as three ubatches, its layer rows all mapped
        step0 = Trace("ubatch5.trace").steps[0]
        l0 = [r for r in step0["fingerprints"] if r["site"] == "L0.out"][0]
        self.assertEqual(sorted(l0["batch_rows"]), list(range(2 * len(PROMPT))))

    def test_other_n_ubatch_records_each_ubatch_ops(self):
        # op records (format 1.6): per ubatch graph, its rows; a matmul's src1 has the
        # ubatch's rows; the 30 layers that run a node the same way share one record
        rc, out = replay("run.trace", MODEL, "--n-ubatch", "5", "-o", "ubatch5-ops.trace")
        self.assertEqual(rc, 0, out)
        ops = Trace("ubatch5-ops.trace").steps[0]["ops"]
        graphs = sorted((o["graph"], o["first_row"], o["rows"]) for o in ops
                        if o["name"] == "graph")
        self.assertEqual(graphs, [(0, 0, 5), (1, 5, 5), (2, 10, 2)])
        for g, rows in ((0, 5), (1, 5), (2, 2)):
            q = [o for o in ops if o["graph"] == g and o["name"] == "Qcur" and o["op"] == "MUL_MAT"]
            self.assertEqual(len(q), 1, [o for o in ops if o["graph"] == g])
            self.assertEqual((q[0]["layer"], q[0]["layers"]), (0, 30), q[0])
            self.assertIn("src1=f32:576x%d" % rows, q[0]["attrs"])
            self.assertIn("src0=q4_1:576x576", q[0]["attrs"])
        # a decode step: one graph of 2 rows (one per sequence)
        ops1 = Trace("run.trace").steps[1]["ops"]
        g = [o for o in ops1 if o["name"] == "graph"]
        self.assertEqual(len(g), 1)
        self.assertIn("tokens=2", g[0]["attrs"])

    def test_flash_attention_off_names_the_first_difference(self):
        rc, out = replay("run.trace", MODEL, "--flash-attn", "off", "-o", "nofa.trace")
        self.assertEqual(rc, 1, out)
        self.assertIn("First difference at step 0", out)
        self.assertIn("L0.out", out)
        # the op-level cause: layer 0's attention ran as one fused flash-attention op in the
        # recording, as a KQ matmul and a softmax in the replay
        self.assertIn("what the ops ran with:", out)
        d = llmrr("diff", "run.trace", "nofa.trace", "--json", check=False)
        self.assertEqual(d.returncode, 1, d.stderr[-2000:])
        firsts = [q["first_difference"] for q in json.loads(d.stdout)["requests"]
                  if q.get("first_difference")]
        self.assertTrue(firsts)
        for f in firsts:
            self.assertEqual(f["cause"], "op", f)
            by = {(o["op"], o["a"] is not None, o["b"] is not None) for o in f["ops"]}
            self.assertIn(("FLASH_ATTN_EXT", True, False), by, f["ops"])
            self.assertIn(("SOFT_MAX", False, True), by, f["ops"])
            self.assertTrue(all(o["layer"] in (0, None) for o in f["ops"]), f["ops"])

    def test_replay_refusals(self):
        p = llmrr("replay", "--runtime", "llamacpp", "run.trace", "--model", "run.trace",
                  check=False)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr[-2000:])
        self.assertIn("weight hash", p.stderr)
        p = llmrr("replay", "--runtime", "llamacpp", "run.trace", "--model", MODEL, "-o",
                  "run.trace", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("exists", p.stderr)


if __name__ == "__main__":
    unittest.main()
