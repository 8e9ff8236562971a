"""Shared by the vLLM tests: the tiny model and one recorded vLLM run (generate.py)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def make_model(path, *args):
    """A seeded random Llama checkpoint vLLM's CPU backend runs (make_model.py)."""
    subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), path, *args],
                   check=True, capture_output=True)


def generate(model, trace, prompts, multiprocess=False, **kw):
    """Runs generate.py under the plugin; returns (token lists, stderr). In-process runs set
    $LLMRR_VLLM_TRACE themselves; multiprocess runs go through `llmrr record-vllm`."""
    capture = kw.pop("capture", "all")
    cmd = [sys.executable, os.path.join(HERE, "generate.py"), model,
           json.dumps(dict(prompts=prompts, **kw))]
    env = dict(os.environ)
    if multiprocess:
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        cmd = [os.environ["LLMRR_BIN"], "record-vllm", "--capture", capture, "-o", trace,
               "--"] + cmd
    else:
        env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", LLMRR_VLLM_TRACE=trace,
                   LLMRR_CAPTURE=capture)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise AssertionError("generate.py exit %d:\n%s" % (p.returncode, p.stderr[-4000:]))
    # (vLLM's shutdown may log to stdout after the result line)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("[[")]
    if not lines:
        raise AssertionError("generate.py printed no result:\n%s" % p.stdout[-2000:])
    return json.loads(lines[-1]), p.stderr
