"""The flight recorder on vLLM (label "vllm"): the plugin's recorder with $LLMRR_RING=256K (what
`llmrr record-vllm --ring 256K` sets) over 300 requests of the tiny model, max_num_seqs 8,
every site's rows, records several times its bound. While it runs the ring's folder stays under 256 KiB; touching
the snapshot trigger ($LLMRR_SNAPSHOT_TRIGGER) mid-run writes a closed snapshot; the trace
holds the last steps, says which were dropped, carries in the requests running when they
were, and every request that arrived and finished in it has exactly vLLM's tokens, the
top-1 of its logits row. A request cut out with its running co-requests carried in is
refused by `llmrr replay --runtime vllm`, saying why."""
import glob
import json
import os
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from common import require  # noqa: E402

require("torch", "transformers", "vllm")
from vllm_common import make_model  # noqa: E402

WORK = os.getcwd()
MODEL = os.path.join(WORK, "tiny-llama")
N = 300
RING_KIB = 256


def llmrr(*args):
    p = subprocess.run([os.environ["LLMRR_BIN"], *args], capture_output=True, text=True,
                       timeout=900)
    return p.returncode, p.stdout + p.stderr


def dump(path):
    _, out = llmrr("dump", path, "--json")
    return [json.loads(x) for x in out.splitlines() if x.startswith("{")]


class VllmRing(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        make_model(MODEL)
        # Distinct prompts (so each names its request), 3 to 6 tokens each generated.
        cls.prompts = [[2 + i % 240, 2 + i // 240] + [1 + (i * 7 + k * 13) % 250
                                                       for k in range(2 + i % 5)]
                       for i in range(N)]
        assert len({tuple(p) for p in cls.prompts}) == N
        max_tokens = [3 + i % 4 for i in range(N)]
        for f in glob.glob("ring.trace*"):
            os.remove(f)
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", LLMRR_VLLM_TRACE="ring.trace",
                   LLMRR_CAPTURE="all", LLMRR_RING="%dK" % RING_KIB,
                   LLMRR_SNAPSHOT_TRIGGER="ring.trace.snap")
        cmd = [sys.executable, os.path.join(HERE, "generate.py"), MODEL,
               json.dumps(dict(prompts=cls.prompts, max_tokens=max_tokens, seqs=8))]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        largest, steps_seen = [0], [0]

        def watch():
            touched = False
            while proc.poll() is None:
                for d in glob.glob("ring.trace.ring"):
                    try:
                        segs = glob.glob(d + "/*")
                        largest[0] = max(largest[0], sum(os.path.getsize(f) for f in segs))
                        if len(segs) >= 4 and not touched:  # the ring is turning: a snapshot
                            with open("ring.trace.snap", "w") as f:
                                f.write("snapshot\n")
                            touched = True
                    except OSError:  # a segment removed under us
                        pass
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        out, err = proc.communicate(timeout=900)
        watcher.join()
        if proc.returncode != 0:
            raise AssertionError("generate.py exit %d:\n%s" % (proc.returncode, err[-4000:]))
        cls.tokens = json.loads([ln for ln in out.splitlines() if ln.startswith("[[")][-1])
        cls.largest = largest[0]
        cls.records = dump("ring.trace")
        del steps_seen

    def test_the_ring_stays_under_its_bound(self):
        print("vllm ring: %d requests, the ring's folder at most %d KiB of %d, the trace %d KiB"
              % (N, self.largest // 1024, RING_KIB, os.path.getsize("ring.trace") // 1024))
        self.assertGreater(self.largest, 0, "the ring's folder was never seen")
        self.assertLessEqual(self.largest, RING_KIB * 1024)
        self.assertLessEqual(os.path.getsize("ring.trace"), RING_KIB * 1024)
        self.assertFalse(os.path.exists("ring.trace.ring"), "the segments were not joined")

    def test_the_trace_keeps_the_last_steps_and_carries_the_running_requests(self):
        rc, out = llmrr("verify", "ring.trace")
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"lossy: flight recorder \(ring 256 KiB\): the steps before \d+ "
                              r"were dropped")
        steps = [r for r in self.records if r.get("type") == "step"]
        self.assertGreater(steps[0]["step"], len(steps), "the ring kept most of the run")
        carried = [a for a in steps[0]["arrivals"] if a.get("carried")]
        self.assertTrue(carried, "no request carried into the first step kept")
        for a in carried:  # what each had generated before: a prefix of vLLM's tokens
            i = self.prompts.index(a["prompt"])
            self.assertEqual(self.tokens[i][:len(a["history"])], a["history"])

    def test_the_header_holds_the_weights_hash(self):
        from llmrr.core import _lib
        h = [r for r in self.records if r.get("type") == "header"][0]
        files = sorted(glob.glob(os.path.join(MODEL, "*.safetensors")))
        self.assertTrue(files)
        self.assertRegex(h["weight_hash"], r"^xxh3-64:[0-9a-f]{16}$")
        self.assertEqual(h["weight_hash"], _lib.weight_hash(files))

    def test_the_snapshot_is_a_closed_trace(self):
        self.assertTrue(os.path.exists("ring.trace.snapshot-1"), os.listdir("."))
        rc, out = llmrr("verify", "ring.trace.snapshot-1")
        self.assertEqual(rc, 0, out)
        self.assertIn("complete", out)

    def test_every_request_that_lived_in_the_ring_has_vllms_tokens(self):
        steps = [r for r in self.records if r.get("type") == "step"]
        arrived, gen, top, finished = {}, {}, {}, set()
        for s in steps:
            for a in s["arrivals"]:
                if not a.get("carried"):
                    arrived[a["id"]] = a["prompt"]
            for lg in s["logits"]:
                top[(lg["request"], lg["position"])] = lg["top_ids"][0]
            for t in s["tokens"]:
                gen.setdefault(t["request"], []).append((t["position"], t["token"]))
                self.assertEqual(top.get((t["request"], t["position"] - 1)), t["token"])
            for f in s["finishes"]:
                finished.add(f["request"])
        lived = [r for r in arrived if r in finished]
        self.assertGreater(len(lived), 20)
        for r in lived:
            i = self.prompts.index(arrived[r])
            self.assertEqual([t for _, t in sorted(gen[r])], self.tokens[i], "request %d" % r)

    def test_a_slice_with_carried_requests_is_refused_by_replay(self):
        steps = [r for r in self.records if r.get("type") == "step"]
        carried = [a["id"] for a in steps[0]["arrivals"] if a.get("carried")]
        self.assertTrue(carried)
        rc, out = llmrr("cut", "ring.trace", "--request", str(carried[0]), "-o", "cut.trace")
        self.assertEqual(rc, 0, out)
        rc, out = llmrr("replay", "--runtime", "vllm", "cut.trace", "--model", MODEL)
        self.assertEqual(rc, 2, out)
        self.assertIn("was carried into this trace", out)


if __name__ == "__main__":
    unittest.main()
