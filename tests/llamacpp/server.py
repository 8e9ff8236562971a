"""llama-server under `llmrr record-llamacpp`, driven with staggered greedy completions."""
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request

from lc_common import LCDIR, LLMRR


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(port, path, body, timeout=300):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class RecordedServer:
    """`llmrr record-llamacpp -o TRACE -- llama-server ARGS` on a free port; stop() sends
    SIGTERM to llmrr (passed on to the server, which closes the trace) and waits."""

    def __init__(self, trace, model, extra=(), capture="layers", np=4, record=()):
        self.port = free_port()
        self.log = open(trace + ".log", "w")
        cmd = [LLMRR, "record-llamacpp", *record, "-o", trace, "--capture", capture, "--",
               os.path.join(LCDIR, "bin/llama-server"), "-m", model, "-np", str(np), "-t", "2",
               "-c", "2048", "--host", "127.0.0.1", "--port", str(self.port), *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 180
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("llama-server exited with %d; see %s.log"
                                     % (self.proc.returncode, trace))
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % self.port,
                                            timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if time.time() > deadline:
                self.proc.kill()
                raise AssertionError("llama-server not healthy after 180 s")
            time.sleep(0.5)

    def tokenize(self, text):
        return post(self.port, "/tokenize", {"content": text, "add_special": True})["tokens"]

    def complete(self, prompt, n_predict):
        return post(self.port, "/completion", {
            "prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "top_k": 1,
            "cache_prompt": True, "return_tokens": True, "seed": 0})

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.log.close()
        return rc


PROMPTS = [
    "The capital of France is",
    "Write a haiku about the sea.",
    "List three prime numbers:",
    "In 1969, the first person to walk on the Moon was",
    "The quick brown fox",
]


def staggered(server, jobs):
    """jobs: (delay_s, prompt, n_predict); each in its own thread, started `delay` seconds
    after the first. Returns the responses in job order."""
    out = [None] * len(jobs)
    errs = []

    def one(i, delay, prompt, n):
        time.sleep(delay)
        try:
            out[i] = server.complete(prompt, n)
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    threads = [threading.Thread(target=one, args=(i, *j)) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errs:
        raise errs[0]
    return out
