"""MoE routing in vLLM, recorded as vLLM's router selected it (label "vllm").

Tiny random Mixtral, Qwen3-MoE and DeepSeek-V3 checkpoints (make_moe_model.py) run in vLLM's
CPU backend under llmrr.runtimes.vllm, with several requests in staggered batches. generate.py's
moe_oracle watches, from the experts' side, the expert ids each MoE layer's fused experts
received (not through select_experts, which the plugin wraps). Every routing record of the
trace must hold exactly those ids for every row of every step and MoE layer. For DeepSeek-V3
(sigmoid scores, correction bias, group-limited top-k) a softmax top-k of the router logits,
which the plugin used to record, must disagree with vLLM's choice on some rows; for Mixtral
and Qwen3-MoE it agrees (as sets)."""
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from common import dump_json, llmrr_cli, require  # noqa: E402

require("torch", "transformers", "vllm")

WORK = os.getcwd()
PROMPTS = [[3, 4, 5, 6, 7, 8, 9, 10], [11, 12, 13], [20 + i for i in range(20)], [40, 41],
           [50, 51, 52, 53, 54], [60 + i for i in range(12)]]
MAX_TOKENS = [6, 3, 5, 8, 2, 4]


def run(kind):
    model = os.path.join(WORK, kind)
    if not os.path.isdir(model):
        subprocess.run([sys.executable, os.path.join(HERE, "make_moe_model.py"), kind, model],
                       check=True, capture_output=True)
    trace = os.path.join(WORK, kind + ".trace")
    args = dict(prompts=PROMPTS, max_tokens=MAX_TOKENS, seqs=3, mbt=16, moe_oracle=True,
                block=16 if kind == "deepseek" else 32)
    if kind == "deepseek":
        # Where the CPU has AMX tiles (Intel Sapphire Rapids and later) vLLM prefers its AMX
        # MLA backend, which takes 16- and 8-bit weights only ("expect weight to be bfloat16,
        # float16, int8, ..." on this float32 model). The test is about routing: the reference
        # CPU MLA backend, which every x86 CPU runs, is named so the case is the same everywhere.
        args["attention_backend"] = "CPU_MLA"
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", LLMRR_VLLM_TRACE=trace,
               LLMRR_CAPTURE="all")
    p = subprocess.run([sys.executable, os.path.join(HERE, "generate.py"), model,
                        json.dumps(args)], env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError("generate.py exit %d:\n%s" % (p.returncode, p.stderr[-4000:]))
    oracle = [ln for ln in p.stdout.splitlines() if ln.startswith("MOE_ORACLE ")]
    return trace, json.loads(oracle[-1][len("MOE_ORACLE "):])


class MoeRouting(unittest.TestCase):
    def check(self, kind):
        trace, calls = run(kind)
        _, out = llmrr_cli("verify", trace)
        self.assertNotIn("lossy", out)
        header = json.loads(llmrr_cli("inspect", trace, "--json")[1])
        extra = json.loads(header["run_header"]["extra_config_json"])
        self.assertEqual(extra["routing"],
                         "as vLLM's router selected it (FusedMoERouter.select_experts)")
        recorded = [(r["layer"], r["rows"], r["k"], r["chosen"])
                    for s in dump_json(trace) if s.get("type") == "step" for r in s["routing"]]
        ran = [c for c in calls if "ids" in c]
        soft = [c["softmax_topk"] for c in calls if "softmax_topk" in c]
        self.assertEqual(len(recorded), len(ran), "one routing record per MoE layer call")
        rows = differ = 0
        for (layer, n, k, chosen), c, st in zip(recorded, ran, soft):
            self.assertEqual(layer, c["layer"])
            self.assertEqual(chosen, [e for row in c["ids"][:n] for e in row])
            rows += n
            differ += sum(sorted(a) != sorted(b) for a, b in zip(c["ids"][:n], st[:n]))
        print("%s: %d rows x %d layers' calls as vLLM's experts ran them; softmax top-k would "
              "differ on %d" % (kind, rows, len(ran), differ))
        self.assertGreater(rows, 50)
        return rows, differ

    def test_mixtral(self):
        _, differ = self.check("mixtral")
        self.assertEqual(differ, 0)

    def test_qwen3_moe(self):
        _, differ = self.check("qwen3moe")
        self.assertEqual(differ, 0)

    def test_deepseek_v3(self):
        rows, differ = self.check("deepseek")
        self.assertGreater(differ, 0, "the bias and groups must move some choices")


if __name__ == "__main__":
    unittest.main(verbosity=2)
