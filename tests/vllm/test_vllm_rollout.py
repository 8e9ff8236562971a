"""Rollout in vLLM against the trainer in transformers (label "vllm"): vLLM's CPU backend
generates two greedy completions of the tiny seeded Llama (the rollout, recorded by the plugin),
transformers recomputes the same tokens in one teacher-forced forward over the same checkpoint
(the trainer, llmrr.runtimes.torch.score), and `llmrr mismatch` compares them token by token.
Checked against what the runtimes computed: each request pairs by its tokens and covers the
whole sequence, every compared token is the one vLLM generated, the trainer's log-prob is the
one score returned, the rollout's is its logit minus the row's logsumexp as vLLM's plugin
recorded them (read back through llmrr.open), and the totals are recomputed from the tokens.
Two engines, two kernels: their log-probs differ a little, by an amount this prints."""
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from common import check_mismatch_totals, llmrr_cli, require  # noqa: E402

require("torch", "transformers", "vllm")
import torch  # noqa: E402
import transformers  # noqa: E402

import vllm_common  # noqa: E402
from vllm_common import make_model  # noqa: E402

WORK = os.getcwd()
MODEL = os.path.join(WORK, "tiny-llama")
PROMPTS = [[3, 17, 42, 255, 256, 3, 99, 7], [5, 6, 7, 8, 9]]
NEW = 8


class VllmRollout(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        make_model(MODEL)
        cls.rollout = os.path.join(WORK, "rollout.trace")
        cls.tokens, _ = vllm_common.generate(MODEL, cls.rollout, PROMPTS, max_tokens=NEW,
                                             capture="layers")
        cls.seqs = [p + t for p, t in zip(PROMPTS, cls.tokens)]
        transformers.utils.logging.disable_progress_bar()
        model = transformers.AutoModelForCausalLM.from_pretrained(
            MODEL, attn_implementation="eager", dtype=torch.float32).eval()
        cls.trainer = os.path.join(WORK, "trainer.trace")
        import llmrr.runtimes.torch
        cls.lp_trainer = llmrr.runtimes.torch.score(model, cls.seqs, cls.trainer,
                                                    prompt_lens=[len(p) for p in PROMPTS])

    def test_mismatch_token_by_token(self):
        self.assertEqual([len(t) for t in self.tokens], [NEW, NEW])
        rc, out = llmrr_cli("mismatch", "--json", self.rollout, self.trainer, ok=(0, 1))
        rep = json.loads(out)
        self.assertEqual(len(rep["requests"]), len(PROMPTS), out[:2000])
        # the rollout's own logits rows, as the plugin recorded them
        import llmrr
        t = llmrr.open(self.rollout)
        lg = t.logits
        rows = {(int(lg["request"][i]), int(lg["position"][i])): i for i in range(len(lg["request"]))}
        la, lb = [], []
        for b, req in enumerate(sorted(rep["requests"], key=lambda r: len(r["tokens"]),
                                       reverse=True)):
            pb = 0 if len(PROMPTS[0]) >= len(PROMPTS[1]) else 1
            b = pb if b == 0 else 1 - pb
            s, P = self.seqs[b], len(PROMPTS[b])
            self.assertEqual(req["covered"], len(s), req)
            # vLLM's rollout samples positions P-1 .. P+NEW-2 (the last token is never fed back)
            self.assertEqual([x["position"] for x in req["tokens"]], list(range(P - 1, len(s) - 1)))
            for k, x in enumerate(req["tokens"]):
                p = x["position"]
                self.assertEqual(x["token"], s[p + 1])
                self.assertIsNotNone(x["logp_a"], x)
                self.assertIsNotNone(x["logp_b"], x)
                self.assertAlmostEqual(x["logp_b"], float(self.lp_trainer[b][k]), delta=2e-6)
                i = rows[(int(req["a"]), p)]
                ids = list(lg["top_ids"][i])
                self.assertEqual(ids[0], s[p + 1], "greedy: the token is the row's top-1")
                want_a = float(lg["top_values"][i][0]) - float(lg["logsumexp"][i])
                self.assertAlmostEqual(x["logp_a"], want_a, delta=1e-9)
                if not x["logits_equal"]:  # both record layer rows: the site is named
                    self.assertTrue(x.get("first_site"), x)
                la.append(x["logp_a"])
                lb.append(x["logp_b"])
        tot = rep["total"]
        d = check_mismatch_totals(self, tot, la, lb)
        # two engines on one fp32 checkpoint: close, and the report says how close
        self.assertLess(tot["max_abs_dlogp"], 1e-2, tot)
        self.assertEqual(rc, 1 if max(d) > 0 else 0)
        print("vLLM rollout vs transformers trainer: %s" % json.dumps(tot))
        _, text = llmrr_cli("mismatch", self.rollout, self.trainer, ok=(0, 1))
        print(text[:1500])


if __name__ == "__main__":
    unittest.main(verbosity=2)
