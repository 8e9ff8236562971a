"""llama-server -np 4 under `llmrr record-llamacpp` (SmolLM2 Q4_1, CPU): ten greedy completions
arriving at different times with different lengths, a prompt asked again after it finished (a
prompt-cache hit: the segment's `cached` says how much was reused). The trace verifies (lossy
only for the server's memory calls a replay cannot repeat: its idle-slot clearing) and holds
one request per completion, with the server's prompt tokens and exactly the tokens it returned,
each the top-1 of the logits row credited to it."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lc_common import Trace, llmrr, model_path, require_llamacpp  # noqa: E402

require_llamacpp()
MODEL = model_path()
from server import PROMPTS, RecordedServer, staggered  # noqa: E402

# The first three arrive together (a batch of three requests however fast the machine decodes),
# the rest staggered.
JOBS = [(0.0, PROMPTS[0], 24), (0.0, PROMPTS[1], 16), (0.0, PROMPTS[2], 32),
        (0.9, PROMPTS[3], 8), (1.5, PROMPTS[4], 20), (2.0, PROMPTS[0], 12),
        (2.5, PROMPTS[1], 28), (3.0, PROMPTS[3], 16)]


_recording = {}


def recording():
    """The recorded run (made once, for both test classes)."""
    if not _recording:
        r = _recording
        srv = RecordedServer("run.trace", MODEL, extra=("--kv-unified",))
        try:
            r["prompt_tokens"] = {p: srv.tokenize(p) for p in PROMPTS}
            r["responses"] = staggered(srv, JOBS)
            # after those: the first prompt again, alone (its slot still holds it: cache hit)
            r["responses"] += staggered(srv, [(0.0, PROMPTS[0], 24), (0.0, PROMPTS[2], 10)])
        finally:
            r["rc"] = srv.stop()
        r["jobs"] = JOBS + [(0.0, PROMPTS[0], 24), (0.0, PROMPTS[2], 10)]
        with open("run.trace.log") as f:
            r["log"] = f.read()
    return _recording


class ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = recording()
        cls.prompt_tokens, cls.responses, cls.rc = r["prompt_tokens"], r["responses"], r["rc"]
        cls.jobs, cls.log = r["jobs"], r["log"]
        cls.t = Trace("run.trace")

    def test_trace_verifies_complete_lossy_only_for_memory_calls(self):
        # (1: still shutting down 3 s after SIGTERM, llama-server got it again and exited)
        self.assertTrue(self.rc == 0 or (self.rc == 1 and "sending it again" in self.log),
                        self.log[-3000:])
        out = llmrr("verify", "run.trace").stdout
        h = [r for r in self.t.records if r.get("type") == "header"][0]
        self.assertTrue(h["complete"])
        # The server's defaults clear idle slots at each new task (and restore prompts from
        # its RAM cache): every batch, logits row and token is in the trace, and the trace
        # says it misses those memory calls, naming the first (test_server_replay.py replays).
        self.assertTrue(h["lossy"], out)
        self.assertRegex(out, r"lossy: before step \d+, (llama_memory_seq_rm|"
                              r"llama_state_seq_set_data_ext)\(", self.log[-3000:])

    def test_one_request_per_completion_with_the_servers_tokens(self):
        self.assertEqual(len(self.t.requests), len(self.responses))
        unmatched = dict(self.t.requests)
        for (_, prompt, n), resp in zip(self.jobs, self.responses):
            want = resp["tokens"]
            self.assertGreater(len(want), 0)
            self.assertLessEqual(len(want), n)
            hit = [rid for rid, r in unmatched.items()
                   if r["prompt"] == self.prompt_tokens[prompt] and self.t.generated(rid) == want]
            self.assertTrue(hit, "no request in the trace with prompt %r and tokens %r"
                            % (prompt, want))
            f = self.t.finishes[hit[0]]
            self.assertEqual(f["generated"], len(want))
            self.assertEqual(f["reason"], "max_tokens" if len(want) == n else "eos")
            del unmatched[hit[0]]
        self.assertEqual(unmatched, {})

    def test_every_token_is_the_top1_of_its_row(self):
        n = self.t.check_top1(self)
        self.assertEqual(n, sum(len(r["tokens"]) for r in self.responses))

    def test_batches_mix_requests_and_reuse_the_prompt_cache(self):
        self.assertTrue(any(len({g["request"] for g in s["segments"]}) >= 3
                            for s in self.t.steps), "no batch with three requests")
        cached = [g for s in self.t.steps for g in s["segments"]
                  if g["request"] in self.t.requests and g["cached"] > 0
                  and g["start"] == g["cached"] and g["kind"] == "prefill"]
        self.assertTrue(cached, "no request started past position 0 (prompt cache)")

    def test_layer_fingerprints(self):
        for s in self.t.steps:
            sites = {r["site"]: r for r in s["fingerprints"]}
            self.assertEqual(len(sites), 30, s["step"])
            self.assertEqual(sorted(sites["L0.out"]["batch_rows"]), list(range(s["rows"])))



if __name__ == "__main__":
    unittest.main()
