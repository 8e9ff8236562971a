"""The server users run, recorded as they run it: `llmrr record-vllm -o T -- vllm serve DIR`,
driven by the real `openai` client, then stopped as an operator stops it (issue 40).

The model is SmolLM2's shape at 2 layers with seeded random weights and SmolLM2's own
tokenizer and chat template (from the GGUF tools/setup/smollm2 fetches), so completions and
chat completions both go through vLLM's OpenAI server. Ten concurrent, staggered requests of
different lengths (completions and chat completions, temperature 0) are sent, with vLLM's
`return_token_ids` so the client knows every token id it was sent. Then:
- SIGINT to `llmrr record-vllm` (compiled mode, vLLM's default), and separately SIGTERM to
  the API server itself (eager mode): the whole process tree ends within 10 s, and the trace
  at -o is closed (a footer, verifies), not lossy;
- every token the client received is in the trace, credited to its request (the request's
  label is the id vLLM gave it, which the response's id names), the top-1 of its logits row;
  the counts are asserted, not the exit codes alone;
- the run header says what served it (the server's command line, the model).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from common import llmrr_cli, require  # noqa: E402

require("torch", "transformers", "vllm", "openai")
import numpy as np  # noqa: E402
import openai  # noqa: E402

import llmrr  # noqa: E402

WORK = os.getcwd()
MODEL = os.path.join(WORK, "smollm2-2l")
GGUF = os.path.join(os.path.expanduser(os.environ.get("LLMRR_CACHE", "~/.cache/llmrr")),
                    "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
VLLM = os.path.join(os.path.dirname(sys.executable), "vllm")
STOP_WITHIN_S = 10.0
TORCH_PYTHON = os.environ.get("LLMRR_TORCH_PYTHON", os.path.join(
    HERE, "..", "..", "build", "venv", "bin", "python"))


def setUpModule():
    if not os.path.exists(GGUF):
        print("skipped: no SmolLM2 GGUF at %s (tools/setup/smollm2 fetches it)" % GGUF)
        sys.exit(77)
    if os.path.exists(os.path.join(MODEL, "config.json")):
        return
    subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), MODEL, "smollm2:2"],
                   check=True, capture_output=True)
    # SmolLM2's tokenizer and chat template, from the GGUF: read by transformers in the torch
    # venv (tools/setup/python installs gguf there; vLLM's venv has none).
    if not os.path.exists(TORCH_PYTHON):
        print("skipped: no torch venv at %s (tools/setup/python makes it)" % TORCH_PYTHON)
        sys.exit(77)
    subprocess.run([TORCH_PYTHON, "-c", "import sys; from transformers import AutoTokenizer; "
                    "AutoTokenizer.from_pretrained(sys.argv[1], gguf_file=sys.argv[2])"
                    ".save_pretrained(sys.argv[3])",
                    os.path.dirname(GGUF), os.path.basename(GGUF), MODEL], check=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid):
    """Every live process below pid (from /proc), so that a test can say which one lingers."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


class Served:
    """One recorded `vllm serve` run: started, driven by the openai client, stopped."""

    def __init__(self, name, extra_args):
        self.trace = os.path.join(WORK, name + ".trace")
        self.log_path = os.path.join(WORK, name + ".log")
        self.port = free_port()
        self.model = MODEL
        cmd = [os.environ["LLMRR_BIN"], "record-vllm", "-o", self.trace, "--",
               VLLM, "serve", MODEL, "--port", str(self.port), "--host", "127.0.0.1",
               "--max-num-seqs", "3", "--max-num-batched-tokens", "64",
               "--kv-cache-memory-bytes", str(64 << 20), "--seed", "0"] + extra_args
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.port,
                                    api_key="none", max_retries=0, timeout=300)

    def wait_ready(self, limit_s=600):
        end = time.time() + limit_s
        while time.time() < end:
            if self.proc.poll() is not None:
                raise AssertionError("the server exited %d before serving:\n%s" %
                                     (self.proc.returncode, self.tail()))
            try:
                self.client.models.list()
                return
            except Exception:
                time.sleep(1)
        raise AssertionError("the server did not come up in %d s:\n%s" % (limit_s, self.tail()))

    def tail(self, n=4000):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()[-n:]

    def drive(self):
        """Ten concurrent requests, staggered by 0.15 s: five completions and five chat
        completions of 4..40 tokens. Returns [(kind, response id, token ids)]."""
        results, errors = [None] * 10, []

        def one(i):
            try:
                time.sleep(0.15 * i)
                extra = {"return_token_ids": True}
                if i % 2 == 0:
                    r = self.client.completions.create(
                        model=self.model, prompt="The %d rivers of the north" % i,
                        max_tokens=4 + 4 * i, temperature=0, extra_body=extra)
                    ids = r.choices[0].model_extra.get("token_ids")
                    results[i] = ("completion", r.id, ids, r.usage.completion_tokens)
                else:
                    r = self.client.chat.completions.create(
                        model=self.model, max_tokens=4 + 4 * i, temperature=0,
                        messages=[{"role": "user", "content": "Name %d colours." % i}],
                        extra_body=extra)
                    ids = r.choices[0].model_extra.get("token_ids")
                    results[i] = ("chat", r.id, ids, r.usage.completion_tokens)
            except Exception as e:  # reported below, with the server's log
                errors.append("request %d: %r" % (i, e))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise AssertionError("; ".join(errors) + "\n" + self.tail())
        return results

    def stop(self, sig, target):
        """Sends sig to `target` ("llmrr": record-vllm; "server": the API server, its child);
        returns the seconds until the whole tree has ended."""
        pid = self.proc.pid
        if target == "server":
            kids = [c for c in descendants(pid)]
            self.assertion(kids, "record-vllm has no child process")
            pid = kids[0]  # the first child: the program record-vllm started
        tree = [self.proc.pid] + descendants(self.proc.pid)
        t0 = time.time()
        os.kill(pid, sig)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        while time.time() - t0 < 60 and any(alive(p) for p in tree):
            time.sleep(0.1)
        took = time.time() - t0
        left = [p for p in tree if alive(p)]
        for p in left:
            os.kill(p, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return took, left

    @staticmethod
    def assertion(cond, message):
        if not cond:
            raise AssertionError(message)


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        return stat[stat.rfind(")") + 2] != "Z"
    except OSError:
        return False


class VllmServe(unittest.TestCase):
    def run_server(self, name, extra_args, sig, target):
        s = Served(name, extra_args)
        try:
            s.wait_ready()
            results = s.drive()
        except BaseException:
            s.stop(signal.SIGKILL, "llmrr")
            raise
        took, left = s.stop(sig, target)
        print("%s: the process tree ended %.1f s after %s to %s" %
              (name, took, signal.Signals(sig).name, target))
        log = s.tail()
        self.assertEqual(left, [], "processes still alive %.0f s after %s: %s\n%s" %
                         (took, signal.Signals(sig).name, left, log))
        self.assertLessEqual(took, STOP_WITHIN_S, "the server took %.1f s to stop\n%s" %
                             (took, log))
        self.assertIn(s.proc.returncode, (0, -sig, 128 + sig), log)
        self.assertTrue(os.path.exists(s.trace), "no trace at -o:\n" + log)
        self.assertFalse([f for f in os.listdir(WORK) if f.startswith(name + ".trace.partial")],
                         "a partial trace was left beside -o")
        return s, results, log

    def check_trace(self, s, results):
        _, out = llmrr_cli("verify", s.trace)
        self.assertIn("complete", out)
        t = llmrr.open(s.trace)
        self.assertTrue(t.complete, "the trace has no footer")
        self.assertFalse(t.lossy, t.header.get("lossy_reason"))
        hdr = t.header
        self.assertIn("serve", hdr["command_line"])
        self.assertIn(MODEL, hdr["command_line"])
        self.assertEqual(hdr["model"]["name"], MODEL)
        req = t.requests
        labels = [str(x) for x in req["label"]]
        tokens, logits = t.tokens, t.logits
        top1 = {i: int(v) for i, v in enumerate(logits["top_ids"][:, 0])}
        row_of = {(int(q), int(p)): i for i, (q, p) in
                  enumerate(zip(logits["request"], logits["position"]))}
        total = 0
        for kind, rid, ids, n in results:
            self.assertTrue(ids, "%s %s: the response has no token_ids" % (kind, rid))
            self.assertEqual(len(ids), n)
            # vLLM's request id is the response id plus a suffix of its own.
            mine = [i for i, lab in enumerate(labels) if lab.startswith(rid)]
            self.assertEqual(len(mine), 1, "%s %s: requests labelled so: %s (labels %s)" %
                             (kind, rid, mine, labels))
            q = int(req["id"][mine[0]])
            got = t.generated(q)
            self.assertEqual(list(got), list(ids), "%s %s: the trace's tokens" % (kind, rid))
            sel = tokens["request"] == q
            for pos, tok in zip(tokens["position"][sel], tokens["token"][sel]):
                row = row_of.get((q, int(pos) - 1))
                self.assertIsNotNone(row, "%s: token at %d has no logits row" % (rid, pos))
                self.assertEqual(top1[row], int(tok), "%s: token at %d is not the top-1" %
                                 (rid, pos))
            total += len(ids)
        self.assertGreaterEqual(total, 100)
        self.assertEqual(int(np.sum(req["generated"])), total,
                         "tokens the trace credits vs tokens the clients received")
        t.close()
        return total

    def test_sigint_to_record_vllm_compiled(self):
        s, results, log = self.run_server("sigint", [], signal.SIGINT, "llmrr")
        total = self.check_trace(s, results)
        print("sigint: %d tokens, trace %d bytes" % (total, os.path.getsize(s.trace)))

    def test_sigterm_to_the_server_eager(self):
        s, results, log = self.run_server("sigterm", ["--enforce-eager"], signal.SIGTERM,
                                          "server")
        total = self.check_trace(s, results)
        print("sigterm: %d tokens, trace %d bytes" % (total, os.path.getsize(s.trace)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
