"""`llmrr replay --runtime vllm` and `llmrr bisect --runtime vllm`: a recorded vLLM run
re-executed in vLLM, compared bit for bit, and a split bisected to its co-requests (label
"vllm").

Three recorded runs of test_vllm_staggered's 56 prompts on the tiny model (staggered
arrivals and finishes, chunked prefill, prefix caching; preemption in 9 KV blocks; bf16)
must replay bit-exact: every step's batch, fingerprint, logits row and token. A changed
setting (bf16 over an fp32 recording) must name the first differing step, position and site.
A trace of llmrr's own engine and a model that is not the recorded one are refused (exit 2,
with the reason; --force goes on). bisect must find a request whose replay alone splits from
the recording and a smallest set of co-requests that reproduces its recorded logits, which
an independent replay of just those requests confirms."""
import json
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from common import llmrr_cli, require  # noqa: E402

require("torch", "transformers", "vllm")
from test_vllm_staggered import workload  # noqa: E402
from vllm_common import generate, make_model  # noqa: E402

WORK = os.getcwd()
MODEL = os.path.join(WORK, "tiny-llama")
OTHER = os.path.join(WORK, "tiny-llama-256")


def llmrr(*args):
    p = subprocess.run([os.environ["LLMRR_BIN"], *args], capture_output=True, text=True,
                       timeout=900)
    return p.returncode, p.stdout + p.stderr


class VllmReplay(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        make_model(MODEL)
        prompts, max_tokens = workload()
        cls.traces = {}
        for name, kw in (("staggered", dict(seqs=3, mbt=32, prefix=True, block=32)),
                         ("preempted", dict(seqs=8, mbt=64, block=32, blocks=9)),
                         ("bf16", dict(seqs=4, mbt=48, prefix=True, block=32,
                                       dtype="bfloat16"))):
            t = os.path.join(WORK, name + ".trace")
            generate(MODEL, t, prompts, max_tokens=max_tokens, capture="layers", **kw)
            cls.traces[name] = t

    def test_recorded_runs_replay_bit_exact(self):
        for name, t in self.traces.items():
            rc, out = llmrr("replay", "--runtime", "vllm", t, "--model", MODEL)
            print(out[-600:])
            self.assertEqual(rc, 0, "%s: %s" % (name, out[-3000:]))
            self.assertIn("bit-exact: every step's batch, fingerprint, logits row and token as "
                          "recorded", out)
            self.assertRegex(out, r"replayed .*: \d+ steps, 56 requests")
            self.assertTrue(os.path.isfile(os.path.splitext(t)[0] + ".replay.trace"))

    def test_a_changed_setting_names_the_first_difference(self):
        out_trace = os.path.join(WORK, "staggered-bf16.trace")
        rc, out = llmrr("replay", "--runtime", "vllm", self.traces["staggered"], "--model",
                        MODEL, "--dtype", "bfloat16", "-o", out_trace)
        self.assertEqual(rc, 1, out[-3000:])
        self.assertNotIn("bit-exact", out)
        self.assertIn("with --dtype bfloat16 (recorded float32)", out)
        self.assertIn("run settings that differ: compute dtype: f32 vs bf16", out)
        self.assertIn("First difference at step 0, prompt position 0, L0.out", out)

    def test_refuses_what_it_cannot_replay(self):
        own = os.path.join(WORK, "own.trace")
        llmrr_cli("record", "--model", "builtin:tiny-dense", "--prompt-ids", "1,2,3",
                  "--max-tokens", "2", "-o", own)
        rc, out = llmrr("replay", "--runtime", "vllm", own, "--model", MODEL)
        self.assertEqual(rc, 2, out)
        self.assertIn("not a vLLM trace", out)
        make_model(OTHER, "256", "2")
        rc, out = llmrr("replay", "--runtime", "vllm", self.traces["staggered"], "--model", OTHER)
        self.assertEqual(rc, 2, out)
        self.assertIn("model hidden: the trace says 128, %s has 256" % OTHER, out)
        self.assertIn("--force replays anyway", out)
        # The same shapes, other weights (one byte of the last tensor changed): the header's
        # weight hash tells them apart.
        changed = os.path.join(WORK, "tiny-llama-changed")
        shutil.rmtree(changed, ignore_errors=True)
        shutil.copytree(MODEL, changed)
        st = sorted(f for f in os.listdir(changed) if f.endswith(".safetensors"))[-1]
        with open(os.path.join(changed, st), "r+b") as f:
            f.seek(-1, os.SEEK_END)
            b = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([b[0] ^ 1]))
        rc, out = llmrr("replay", "--runtime", "vllm", self.traces["staggered"], "--model", changed)
        self.assertEqual(rc, 2, out)
        self.assertIn("the weights' hash: the trace says xxh3-64:", out)
        rc, out = llmrr("replay", "--runtime", "vllm", os.path.join(WORK, "none.trace"),
                        "--model", MODEL)
        self.assertEqual(rc, 2, out)
        self.assertIn("none.trace: expected a trace file, found no such file", out)
        rc, out = llmrr("replay", "--runtime", "sglang", self.traces["staggered"])
        self.assertEqual(rc, 2, out)
        self.assertIn("--runtime: expected vllm", out)

    def test_bisect_names_the_co_requests_of_a_split(self):
        work = os.path.join(WORK, "bisect")
        rc, out = llmrr("bisect", "--runtime", "vllm", self.traces["staggered"], "--model", MODEL,
                        "--search", "numerical", "-o", work)
        print(out[-1500:])
        self.assertEqual(rc, 0, out[-3000:])
        report = json.load(open(os.path.join(work, "bisect.json")))
        r = report["request"]
        found = report["searches"][0]
        self.assertEqual(found["kind"], "numerical")
        subset = found["minimal"]
        self.assertTrue(subset, "a split against the request alone needs a co-request")
        self.assertLess(len(subset), len(report["co_requests"]))
        self.assertRegex(out, r"numerical split of request %d at position %d \(step \d+\): "
                         r"reproduced by co-requests? %s" % (r, found["position"],
                                                            ",".join(map(str, subset))))
        self.assertRegex(out, r"\d+ replays in [0-9.]+ s")
        # An independent replay of the request with just those co-requests keeps its recorded
        # logits through the split position.
        t = os.path.join(WORK, "only.trace")
        llmrr("replay", "--runtime", "vllm", self.traces["staggered"], "--model", MODEL,
              "--only", ",".join(map(str, [r] + subset)), "-o", t)
        _, d = llmrr_cli("diff", self.traces["staggered"], t, "--json", "--align", "ids",
                         "--request", "%d:%d" % (r, r), ok=(0, 1))
        ns = json.loads(d)["requests"][0].get("numerical_split")
        self.assertTrue(ns is None or ns["position"] > found["position"], ns)


if __name__ == "__main__":
    unittest.main(verbosity=2)
