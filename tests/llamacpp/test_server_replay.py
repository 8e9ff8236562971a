"""Replay of recorded llama-server runs, bit for bit (SmolLM2 Q4_1, CPU).

Where a decode's rows land in the KV cache, and so the order attention sums over them in,
follows every memory call the server made. With `--no-cache-idle-slots --cache-ram 0` the only
ones are those a replay repeats (a slot cut back where its next request starts, and the
warmup's and probe's decodes, each followed by llama_memory_clear): then ten runs, -np 2 to 4
and n_ubatch 512, 7 or 3, each with staggered greedy completions and a prompt-cache hit on a
reused slot, replay bit-exact (`llmrr replay --runtime llamacpp`), most at --capture none (the
logits of every sampled row and every token), one at layers (also every layer's rows).

With the server's defaults (idle slots cleared and prompts restored from its RAM cache) the
trace does not hold those calls: it says so (lossy, naming the first call), and a replay that
differs says why."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lc_common import Trace, llmrr, model_path, replay, require_llamacpp  # noqa: E402

require_llamacpp("LLMRR_LLAMACPP_REPLAY")
MODEL = model_path()
from server import PROMPTS, RecordedServer, staggered  # noqa: E402

REPEATABLE = ("--no-cache-idle-slots", "--cache-ram", "0")
P = PROMPTS
# (np, n_ubatch, capture, first wave [(delay s, prompt, n_predict)], second wave after it)
# Each first wave: a longer completion and one arriving with it (batched together however fast
# the machine), then others staggered in while they run.
RUNS = [
    (4, 512, "none", [(0.0, P[0], 12), (0.0, P[1], 4), (0.2, P[2], 8)], [(0.0, P[0], 4)]),
    (4, 7, "none", [(0.0, P[3], 12), (0.0, P[4], 6), (0.1, P[0], 4), (0.3, P[1], 3)],
     [(0.0, P[3], 4), (0.1, P[2], 3)]),
    (3, 512, "none", [(0.0, P[2], 12), (0.0, P[2], 4), (0.2, P[4], 5)], [(0.0, P[4], 4)]),
    (2, 3, "none", [(0.0, P[1], 10), (0.0, P[0], 5)], [(0.0, P[1], 3), (0.0, P[3], 3)]),
    (4, 512, "none", [(0.0, P[4], 12), (0.0, P[3], 3), (0.1, P[2], 3), (0.2, P[1], 3),
                      (0.3, P[0], 3)], [(0.0, P[3], 4)]),
    (3, 7, "none", [(0.0, P[0], 12), (0.0, P[1], 4), (0.2, P[2], 4)], [(0.0, P[2], 3)]),
    (2, 512, "none", [(0.0, P[3], 10), (0.0, P[4], 6)], [(0.0, P[3], 3), (0.1, P[4], 3)]),
    (4, 3, "none", [(0.0, P[2], 12), (0.0, P[0], 4), (0.1, P[4], 4)], [(0.0, P[0], 5)]),
    (3, 512, "none", [(0.0, P[1], 12), (0.0, P[3], 4), (0.2, P[0], 4)], [(0.0, P[1], 4)]),
    (2, 7, "layers", [(0.0, P[0], 4), (0.0, P[2], 3)], [(0.0, P[0], 2)]),
]


def record(name, np_, ub, capture, waves, extra):
    trace = name + ".trace"
    srv = RecordedServer(trace, MODEL, extra=("--kv-unified", "-ub", str(ub), *extra),
                         capture=capture, np=np_)
    try:
        for w in waves:
            for r in staggered(srv, w):
                assert r["tokens"], r
    finally:
        rc = srv.stop()
    with open(trace + ".log") as f:
        log = f.read()
    # 1: llama-server was still shutting down 3 s after SIGTERM and record-llamacpp sent it
    # again (it exits through exit(), where the shim closes the trace).
    assert rc == 0 or (rc == 1 and "sending it again" in log), \
        "server exit %d\n%s" % (rc, log[-3000:])
    return trace


def header(trace):
    for line in llmrr("dump", trace, "--json").stdout.splitlines():
        r = json.loads(line)
        if r.get("type") == "header":
            return r
    raise AssertionError("no header in %s" % trace)


class ServerReplayTest(unittest.TestCase):
    def test_ten_runs_replay_bit_exact(self):
        hits = mixed = 0
        for i, (np_, ub, capture, first, second) in enumerate(RUNS):
            with self.subTest(run=i, np=np_, ub=ub, capture=capture):
                trace = record("run%d" % i, np_, ub, capture, [first, second], REPEATABLE)
                llmrr("verify", trace)
                h = header(trace)
                self.assertTrue(h["complete"])
                self.assertFalse(h["lossy"], llmrr("inspect", trace).stdout[:2000])
                self.assertIn('"n_ubatch":%d,' % ub, llmrr("inspect", trace).stdout)
                self.assertIn('"n_seq_max":%d,' % np_, llmrr("inspect", trace).stdout)
                t = Trace(trace)
                self.assertEqual(len(t.requests), len(first) + len(second))
                hits += any(g["cached"] > 0 and g["kind"] == "prefill" and g["start"] == g["cached"]
                            for s in t.steps for g in s["segments"])
                mixed += any(len({g["request"] for g in s["segments"]}) >= 2 for s in t.steps)
                if capture == "layers":
                    self.assertTrue(all(len(s["fingerprints"]) == 30 for s in t.steps))
                rc, out = replay(trace, MODEL)
                self.assertEqual(rc, 0, out)
                self.assertIn("bit-exact: %d steps" % len(t.steps), out)
        self.assertGreaterEqual(hits, 5, "too few runs reused a slot's prompt (cache hit)")
        self.assertGreaterEqual(mixed, 8, "too few runs batched requests together")

    def test_server_defaults_say_what_the_trace_misses(self):
        # Idle slots cleared at each new task, prompts restored from the RAM cache: calls a
        # replay cannot repeat from the trace.
        trace = record("defaults", 2, 512, "none",
                       [[(0.0, P[0], 3)], [(0.0, P[4], 3)], [(0.0, P[1], 3)], [(0.0, P[0], 3)]],
                       ())
        llmrr("verify", trace)
        h = header(trace)
        self.assertTrue(h["lossy"])
        reason = llmrr("verify", trace).stdout + llmrr("inspect", trace).stdout
        self.assertRegex(reason, r"before step \d+, (llama_memory_seq_rm|llama_state_seq_set)")
        self.assertIn("--no-cache-idle-slots --cache-ram 0", reason)
        rc, out = replay(trace, MODEL)
        self.assertIn("the recording is lossy: before step", out)


if __name__ == "__main__":
    unittest.main()
