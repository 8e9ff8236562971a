"""The flight recorder on llama-server (SmolLM2 Q4_1, CPU): `llmrr record-llamacpp --ring 512K`
serves 300 greedy completions in bursts of 4 concurrent ones (-np 4, layer fingerprints), so the
run records several times its bound. While it runs the ring's folder stays under 512 KiB; SIGUSR1
to llmrr writes a closed snapshot without stopping the server; the trace at -o holds the last
steps, says which were dropped, and every request that arrived and finished in it has exactly
the tokens the client received, each the top-1 of its row. The last request cut out with
`llmrr cut --whole-lives` (no request carried in) replays bit-exact in libllama; cut without,
its running co-requests are carried in and the replay refuses it, saying why."""
import glob
import os
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lc_common import Trace, llmrr, model_path, replay, require_llamacpp  # noqa: E402

require_llamacpp("LLMRR_LLAMACPP_REPLAY")
MODEL = model_path()
from server import PROMPTS, RecordedServer, post  # noqa: E402

N = 300
RING_KIB = 512

_run = {}


def run():
    """The recorded run (once): responses, the ring folder's largest size, exit status."""
    if _run:
        return _run
    srv = RecordedServer("ring.trace", MODEL, record=("--ring", "%dK" % RING_KIB),
                         extra=("--kv-unified", "--no-cache-idle-slots", "--cache-ram", "0"))
    port, proc = srv.port, srv.proc
    tokens = {p: post(port, "/tokenize", {"content": p, "add_special": True})["tokens"]
              for p in PROMPTS}
    largest = [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            for d in glob.glob("ring.trace.partial-*.ring"):
                try:
                    largest[0] = max(largest[0], sum(os.path.getsize(f)
                                                     for f in glob.glob(d + "/*")))
                except OSError:  # a segment removed under us
                    pass
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    responses, lock = [], threading.Lock()

    def client(i):
        if True:
            p = PROMPTS[i % len(PROMPTS)]
            r = post(port, "/completion", {"prompt": p, "n_predict": 3 + i % 4,
                                           "temperature": 0.0, "top_k": 1, "cache_prompt": False,
                                           "return_tokens": True, "seed": 0})
            with lock:
                responses.append((tokens[p], r["tokens"]))
            if i == N // 2:
                proc.send_signal(signal.SIGUSR1)  # a snapshot, mid-run

    # Bursts of 4 (one per slot), each after the last: between two, no request runs, so a
    # request's whole-lives slice need not reach back to the ring's first step.
    for burst in range(0, N, 4):
        clients = [threading.Thread(target=client, args=(i,)) for i in range(burst, burst + 4)]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
    done.set()
    watcher.join()
    rc = srv.stop()
    with open("ring.trace.log") as f:
        _run.update(responses=responses, largest=largest[0], rc=rc, log=f.read())
    return _run


class RingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = run()
        cls.t = Trace("ring.trace")

    def test_the_ring_stays_under_its_bound(self):
        self.assertEqual(len(self.r["responses"]), N)
        self.assertIn(self.r["rc"], (0, 1), self.r["log"][-3000:])
        self.assertGreater(self.r["largest"], 0, "the ring's folder was never seen")
        print("ring: %d completions, the ring's folder at most %d KiB of %d, the trace %d KiB, "
              "steps %d.. kept" % (N, self.r["largest"] // 1024, RING_KIB,
                                   os.path.getsize("ring.trace") // 1024,
                                   min(s["step"] for s in self.t.steps)))
        self.assertLessEqual(self.r["largest"], RING_KIB * 1024)
        self.assertLessEqual(os.path.getsize("ring.trace"), RING_KIB * 1024)
        self.assertEqual(glob.glob("ring.trace.partial*") + glob.glob("ring.trace.snap"), [])

    def test_the_trace_keeps_the_last_steps_and_says_what_it_dropped(self):
        out = llmrr("verify", "ring.trace").stdout
        self.assertRegex(out, r"lossy: flight recorder \(ring 512 KiB\): the steps before "
                              r"\d+ were dropped")
        first = min(s["step"] for s in self.t.steps)
        self.assertGreater(first, len(self.t.steps), "the ring kept most of the run")
        self.assertLess(len(self.t.requests), N)

    def test_the_snapshot_is_a_closed_trace(self):
        self.assertTrue(os.path.exists("ring.trace.snapshot-1"), os.listdir("."))
        out = llmrr("verify", "ring.trace.snapshot-1").stdout
        self.assertIn("complete", out)

    def test_every_request_that_lived_in_the_ring_has_the_clients_tokens(self):
        carried = {rid for rid, a in self.t.requests.items() if a.get("carried")}
        lived = [rid for rid in self.t.requests if rid not in carried and rid in self.t.finishes]
        self.assertGreater(len(lived), 30)
        left = list(self.r["responses"])
        for rid in lived:
            key = (self.t.requests[rid]["prompt"], self.t.generated(rid))
            self.assertIn(key, left, "request %d's tokens are no client's" % rid)
            left.remove(key)
        n = self.t.check_top1(self)
        self.assertGreaterEqual(n, sum(len(self.t.generated(rid)) for rid in lived))

    def test_a_request_cut_out_whole_replays_bit_exact(self):
        last = max(self.t.requests)
        out = llmrr("cut", "ring.trace", "--request", str(last), "--whole-lives",
                    "-o", "cut-whole.trace").stdout
        self.assertIn("(0 carried in)", out)
        rc, text = replay("cut-whole.trace", MODEL)
        self.assertEqual(rc, 0, text)
        self.assertIn("bit-exact: request %d" % last, text)

    def test_a_slice_with_carried_requests_is_refused_by_replay(self):
        # A request that arrived a step after another of its burst: that one is carried in.
        out = ""
        for rid in sorted(self.t.requests, reverse=True)[:40]:
            if os.path.exists("cut.trace"):
                os.remove("cut.trace")
            out = llmrr("cut", "ring.trace", "--request", str(rid), "-o", "cut.trace").stdout
            if "(0 carried in)" not in out:
                break
        self.assertNotIn("(0 carried in)", out)
        p = llmrr("replay", "--runtime", "llamacpp", "cut.trace", "--model", MODEL, check=False)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("was carried into this trace", p.stderr)


if __name__ == "__main__":
    unittest.main()
