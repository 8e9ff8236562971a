"""Shared by the Python tests: skip (exit 77) without the packages, the llmrr CLI."""
import json
import os
import subprocess
import sys


def require(*modules):
    for m in modules:
        try:
            __import__(m)
        except ImportError as e:
            print("skipped: %s is not installed in %s (%s); run tools/setup/python" %
                  (m, sys.executable, e))
            sys.exit(77)


def llmrr_cli(*args, ok=(0,)):
    """Runs the llmrr binary; returns (rc, stdout). Fails the test on an unexpected rc."""
    p = subprocess.run([os.environ["LLMRR_BIN"], *args], capture_output=True, text=True)
    if p.returncode not in ok:
        raise AssertionError("llmrr %s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout,
                                                        p.stderr))
    return p.returncode, p.stdout


def dump_json(path, *args):
    _, out = llmrr_cli("dump", path, "--json", *args)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def check_mismatch_totals(test, tot, la, lb):
    """`llmrr mismatch --json`'s totals against the per-token log-probs they came from (la the
    rollout's, lb the trainer's): token count, mean and max |dlogp|, k3-KL, to 1e-12."""
    import math
    test.assertEqual(tot["tokens"], len(la))
    d = [abs(x - y) for x, y in zip(la, lb)]
    test.assertAlmostEqual(tot["mean_abs_dlogp"], sum(d) / len(d), delta=1e-12)
    test.assertAlmostEqual(tot["max_abs_dlogp"], max(d), delta=1e-12)
    k3 = sum(math.exp(y - x) - 1 - (y - x) for x, y in zip(la, lb)) / len(la)
    test.assertAlmostEqual(tot["k3_kl"], k3, delta=1e-12)
    return d
