"""llama.cpp against llmrr's own engine on the same GGUF and prompt (SmolLM2-135M Q4_1): the
engine recorded with `--row-hash mixsum64` (the hash the llama.cpp recorder uses), llama.cpp
through tests/llamacpp/greedy.c under `llmrr record-llamacpp`. `llmrr diff --align prompt`
pairs the request and names the first site where the two implementations differ, with the
size of the difference; the engine's mixsum64 trace still replays bit for bit in the engine."""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lc_common import LLMRR, llmrr, model_path, require_llamacpp  # noqa: E402

require_llamacpp("LLMRR_LLAMACPP_GREEDY")
MODEL = model_path()
PROMPT = [504, 3575, 282, 4649, 314]
N = 8


class CrossRuntimeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        llmrr("record", "--model", MODEL, "--prompt-ids", ",".join(map(str, PROMPT)),
              "--max-tokens", str(N), "--row-hash", "mixsum64", "--summary-bits", "23",
              "-o", "engine.trace")
        p = subprocess.run([LLMRR, "record-llamacpp", "-o", "llamacpp.trace", "--",
                            os.environ["LLMRR_LLAMACPP_GREEDY"], MODEL, str(N),
                            *map(str, PROMPT)], capture_output=True, text=True, timeout=240)
        assert p.returncode == 0, p.stdout + p.stderr[-3000:]
        cls.diff = llmrr("diff", "engine.trace", "llamacpp.trace", "--align", "prompt",
                         check=False)

    def test_the_engine_trace_says_mixsum64_and_replays_bit_exact(self):
        info = llmrr("inspect", "engine.trace").stdout
        self.assertIn("mixsum64", info)
        r = llmrr("replay", "engine.trace", "--model", MODEL)
        self.assertIn("bit-exact", r.stdout + r.stderr)

    def test_diff_pairs_the_request_and_compares_rows(self):
        out = self.diff.stdout
        self.assertEqual(self.diff.returncode, 1, out + self.diff.stderr)
        self.assertIn("1 request in common (aligned by prompt hash)", out)
        self.assertNotIn("hash rows differently", out)

    def test_diff_names_the_first_differing_site_and_its_size(self):
        out = self.diff.stdout
        m = re.search(r"First difference at step (\d+), prompt position (\d+), (L\d+\.out)", out)
        self.assertIsNotNone(m, out)
        self.assertEqual(m.group(3), "L0.out", out)  # llama.cpp quantizes the activations
        size = re.search(r"There: l2 ([\d.]+) vs ([\d.]+) \(diff ([\d.e-]+)\)", out)
        self.assertIsNotNone(size, out)
        self.assertGreater(float(size.group(3)), 0.0)
        self.assertLess(float(size.group(3)), 1.0)  # the same model: close, not equal


if __name__ == "__main__":
    unittest.main(verbosity=2)
