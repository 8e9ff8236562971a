"""Rollout against trainer on real code: transformers (CPU) generates two completions with
a KV cache (the rollout, recorded by llmrr.runtimes.torch.record), then recomputes the same
tokens in one teacher-forced forward (the trainer, recorded by llmrr.runtimes.torch.score),
and `llmrr mismatch` compares them token by token. Everything it reports is checked against
the tensors transformers computed: each log-prob (the rollout's from generate's own logits,
the trainer's from score's return), whether the two logits rows are the same bits, the
metrics recomputed here, and for the MoE model the routing agreement per layer from the
routers' own top-k. `llmrr diff --align tokens` pairs the same requests."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check_mismatch_totals, llmrr_cli, require  # noqa: E402

require("numpy", "torch", "transformers")
import torch  # noqa: E402
import transformers  # noqa: E402

import llmrr.runtimes.torch  # noqa: E402

FIXTURES = os.environ["LLMRR_FIXTURES"]
PROMPTS = [[1, 17, 42, 255, 256, 3, 99], [1, 5, 6, 7]]
NEW = 8

transformers.utils.logging.disable_progress_bar()
torch.set_num_threads(1)


def rollout_and_trainer(name, capture="layers"):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(FIXTURES, name), attn_implementation="eager", dtype=torch.float32).eval()
    n = max(len(p) for p in PROMPTS)
    ids = torch.tensor([[0] * (n - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in PROMPTS])
    rollout = os.path.abspath("%s-rollout.trace" % name)
    trainer = os.path.abspath("%s-trainer.trace" % name)
    with llmrr.runtimes.torch.record(model, rollout, capture=capture):
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=NEW,
                                 min_new_tokens=NEW, do_sample=False, output_logits=True,
                                 return_dict_in_generate=True)
    seqs = [p + out.sequences[b, n:].tolist() for b, p in enumerate(PROMPTS)]
    # generate's raw logits of each step: the rollout's rows predicting tokens P .. P+NEW-1
    gen_logits = torch.stack(out.logits, dim=1)  # [B, NEW, V]
    lp_trainer = llmrr.runtimes.torch.score(model, seqs, trainer,
                                            prompt_lens=[len(p) for p in PROMPTS],
                                            capture=capture)
    # the trainer's logits rows, recomputed as score ran them (right-padded, one forward)
    T = max(len(s) for s in seqs)
    tids = torch.zeros((len(seqs), T), dtype=torch.long)
    tmask = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        tids[i, :len(s)] = torch.tensor(s)
        tmask[i, :len(s)] = 1
    with torch.no_grad():
        t_logits = model(input_ids=tids, attention_mask=tmask).logits
    return model, rollout, trainer, seqs, gen_logits, t_logits, lp_trainer


class Mismatch(unittest.TestCase):
    def check(self, name, capture="layers"):
        model, rollout, trainer, seqs, gen_logits, t_logits, lp_trainer = \
            rollout_and_trainer(name, capture)
        rc, out = llmrr_cli("mismatch", "--json", rollout, trainer, ok=(0, 1))
        rep = json.loads(out)
        self.assertEqual(len(rep["requests"]), len(PROMPTS), out[:2000])
        la, lb = [], []
        any_differ = False
        for b, (req, s) in enumerate(zip(rep["requests"], seqs)):
            P = len(PROMPTS[b])
            self.assertEqual(req["covered"], len(s))
            self.assertEqual([t["position"] for t in req["tokens"]], list(range(P - 1, len(s) - 1)))
            for k, t in enumerate(req["tokens"]):
                p = t["position"]
                self.assertEqual(t["token"], s[p + 1])
                ga = gen_logits[b, k].double()
                want_a = (ga[s[p + 1]] - torch.logsumexp(ga, dim=0)).item()
                tb = t_logits[b, p]
                want_b = float(lp_trainer[b][k])
                self.assertIsNotNone(t["logp_a"], t)
                self.assertIsNotNone(t["logp_b"], t)
                self.assertAlmostEqual(t["logp_a"], want_a, delta=1e-9)  # fp64 both
                self.assertAlmostEqual(t["logp_b"], want_b, delta=2e-6)  # score's is fp32
                equal = torch.equal(gen_logits[b, k], tb)
                self.assertEqual(t["logits_equal"], equal, "request %d position %d" % (b, p))
                if not equal:
                    any_differ = True
                    self.assertIn("first_site", t)
                la.append(t["logp_a"])
                lb.append(t["logp_b"])
        self.assertEqual(rc, 1 if any_differ else 0)
        # The metrics, recomputed from the per-token values.
        tot = rep["total"]
        d = check_mismatch_totals(self, tot, la, lb)
        # diff pairs the same requests by tokens.
        drc, dout = llmrr_cli("diff", "--align", "tokens", "--json", rollout, trainer, ok=(0, 1))
        d = json.loads(dout)
        self.assertEqual(d["alignment"], "token sequence")
        self.assertEqual(len(d["requests"]), len(PROMPTS))
        return rep, model

    def test_llama(self):
        rep, _ = self.check("tiny-llama", capture="all")
        print("tiny-llama: %s" % json.dumps(rep["total"]))
        print("  first differing sites: %s" % json.dumps(rep["first_site_histogram"]))

    def test_qwen2moe_routing_agreement(self):
        rep, model = self.check("tiny-qwen2moe")
        cfg = model.config
        moe_layers = [i for i in range(cfg.num_hidden_layers)  # layer 1 is dense in the fixture
                      if i not in (cfg.mlp_only_layers or [])]
        self.assertEqual([r["layer"] for r in rep["routing"]], moe_layers)
        covered = sum(len(s) for s in [p + [0] * NEW for p in PROMPTS]) - len(PROMPTS)
        for r in rep["routing"]:
            # every position both routed: the rollout routes 0 .. P+NEW-2 (the last token is
            # never fed back), the trainer every position
            self.assertEqual(r["positions"], covered, r)
            self.assertLessEqual(r["same"], r["positions"])
        print("tiny-qwen2moe: %s" % json.dumps(rep["total"]))
        print("  routing: %s" % json.dumps(rep["routing"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
