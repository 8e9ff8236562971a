"""llama-server under `llmrr record-llamacpp`, stopped as an operator stops a server, with a
completion still generating: SIGINT to llmrr (which passes it on, and again 3 s later if the
server still runs), and
separately SIGTERM to llama-server itself. Through llmrr the whole process tree ends within
10 s (past llmrr, llama-server waits on the open stream for its own 30 s). Each time the trace
at -o is closed (a footer, `llmrr verify` passes) and holds every step that ran: every token
of each finished completion, credited to its request, the top-1 of its row, and the tokens
the cut completion had generated when the signal came (at least the ones the test saw
streamed)."""
import json
import os
import signal
import sys
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lc_common import Trace, llmrr, model_path, require_llamacpp  # noqa: E402

require_llamacpp()
MODEL = model_path()
from server import PROMPTS, RecordedServer, staggered  # noqa: E402

STOP_WITHIN_S = 10.0  # through llmrr
JOBS = [(0.0, PROMPTS[0], 16), (0.2, PROMPTS[1], 24), (0.4, PROMPTS[2], 8),
        (0.6, PROMPTS[3], 20)]


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has ended
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stream_long(port, seen, started):
    """A long streamed completion; appends each token id it receives to `seen` until the
    server goes away."""
    body = {"prompt": PROMPTS[4], "n_predict": 2000, "temperature": 0.0, "top_k": 1,
            "stream": True, "return_tokens": True, "ignore_eos": True, "seed": 0}
    req = urllib.request.Request("http://127.0.0.1:%d/completion" % port,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                ev = json.loads(line[6:])
                seen.extend(ev.get("tokens", []))
                if len(seen) >= 8:
                    started.set()
    except Exception:  # noqa: BLE001 - the server stops under it
        pass
    started.set()


def run(name, target):
    """Records the jobs, starts a long streamed completion, signals `target` (llmrr or the
    server) once it has streamed some tokens; returns what the test checks."""
    trace = name + ".trace"
    srv = RecordedServer(trace, MODEL)
    out = {"trace": trace}
    try:
        out["prompt_tokens"] = {p: srv.tokenize(p) for p in PROMPTS}
        out["responses"] = staggered(srv, JOBS)
        seen, started = [], threading.Event()
        t = threading.Thread(target=stream_long, args=(srv.port, seen, started))
        t.start()
        started.wait(60)
        kids = children(srv.proc.pid)
        out["server_pid"] = kids[0] if kids else None
        t0 = time.time()
        if target == "llmrr":
            srv.proc.send_signal(signal.SIGINT)
        else:
            os.kill(out["server_pid"], signal.SIGTERM)
        rc = srv.proc.wait(timeout=60)
        out["stop_s"] = time.time() - t0
        out["rc"] = rc
        t.join(30)
        out["streamed"] = list(seen)
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()
        srv.log.close()
    with open(trace + ".log") as f:
        out["log"] = f.read()
    return out


class Stopped:
    """The checks of one stop; `TARGET` says whom the signal went to."""
    TARGET = ""
    STOP_WITHIN_S = STOP_WITHIN_S
    r = {}

    @classmethod
    def setUpClass(cls):
        cls.r = run("stop-" + cls.TARGET, cls.TARGET)
        cls.t = Trace(cls.r["trace"])

    def test_the_tree_ends_within_seconds(self):
        self.assertLess(self.r["stop_s"], self.STOP_WITHIN_S, self.r["log"][-3000:])
        if self.r["server_pid"] is not None:
            self.assertFalse(alive(self.r["server_pid"]), "llama-server outlived llmrr")

    def test_the_trace_is_closed_and_verifies(self):
        self.assertTrue(os.path.exists(self.r["trace"]), self.r["log"][-3000:])
        out = llmrr("verify", self.r["trace"]).stdout
        h = [x for x in self.t.records if x.get("type") == "header"][0]
        self.assertTrue(h["complete"], out)
        leftovers = [f for f in os.listdir(".") if f.startswith(self.r["trace"] + ".partial")]
        self.assertEqual(leftovers, [])

    def test_every_finished_completion_is_in_the_trace(self):
        unmatched = dict(self.t.requests)
        for (_, prompt, n), resp in zip(JOBS, self.r["responses"]):
            want = resp["tokens"]
            hit = [rid for rid, q in unmatched.items()
                   if q["prompt"] == self.r["prompt_tokens"][prompt]
                   and self.t.generated(rid) == want]
            self.assertTrue(hit, "no request with prompt %r and tokens %r" % (prompt, want))
            del unmatched[hit[0]]
        # The cut completion: its prompt, and at least the tokens the client had streamed,
        # in order. (Its finish is the shim's at exit: libllama sees no slot release, so a
        # completion cut short and one done whose slot idles look the same there.)
        cut = [rid for rid, q in unmatched.items()
               if q["prompt"] == self.r["prompt_tokens"][PROMPTS[4]]]
        self.assertEqual(len(cut), 1, unmatched)
        got = self.t.generated(cut[0])
        streamed = self.r["streamed"]
        self.assertGreaterEqual(len(streamed), 8)
        self.assertGreaterEqual(len(got), len(streamed))
        self.assertEqual(got[:len(streamed)], streamed)

    def test_every_token_is_the_top1_of_its_row(self):
        n = self.t.check_top1(self)
        self.assertGreaterEqual(n, sum(len(x["tokens"]) for x in self.r["responses"])
                                + len(self.r["streamed"]))


class SigintToLlmrr(Stopped, unittest.TestCase):
    TARGET = "llmrr"

    def test_llmrr_passed_the_signal_on_again(self):
        # llama-server may wait on the open stream at a first SIGINT (or cancel it and leave
        # at once: it depends on where its HTTP thread is); when it still runs 3 s later,
        # record-llamacpp sends SIGINT again, which llama-server takes as "exit now" (exit
        # status 1). (tests/record_child checks the resend itself on a program that always
        # waits for a second signal.)
        resent = "sending it again" in self.r["log"]
        if self.r["stop_s"] > 3.5:
            self.assertTrue(resent, self.r["log"][-3000:])
        self.assertIn(self.r["rc"], (0, 1, 130) if resent else (0, 130), self.r["log"][-3000:])


class SigtermToServer(Stopped, unittest.TestCase):
    TARGET = "server"
    # Sent past llmrr, the signal is llama-server's alone: it waits on the open stream for
    # its own 30 s before it exits (and the shim closes the trace). Not yet within 10 s.
    STOP_WITHIN_S = 40.0

    def test_the_signal_reached_the_server_directly(self):
        self.assertIsNotNone(self.r["server_pid"])
        self.assertIn(self.r["rc"], (0, 143), self.r["log"][-3000:])


if __name__ == "__main__":
    unittest.main()
