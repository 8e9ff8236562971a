"""`llmrr fuzz --runtime llamacpp` (python/llmrr/campaigns/llamacpp_fuzz.py): six drawn
llama-server runs under record-llamacpp; the summary (docs/fuzz-summary.md: `llmrr fuzz`'s
schema with a "llamacpp" section) has counts that add up to the runs and that `llmrr fuzz
merge` reads back, every trace verified, each run's class agrees with the server's own text
(visible iff it differs from the baseline's), and the target alone twice (no co-requests,
-np 1) is classified identical; each split names its op-level cause and is shrunk by `llmrr
bisect --runtime llamacpp` to a 1-minimal co-request set that still splits it when replayed.
Refusals: an existing --out, --runs 0, a missing model: exit 2 with one line, nothing written;
bisect's and replay --drop's bad input: exit 2."""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lc_common import LLMRR, model_path, require_llamacpp  # noqa: E402

require_llamacpp()
MODEL = model_path()


def fuzz(*args):
    return subprocess.run([LLMRR, "fuzz", "--runtime", "llamacpp", "--model", MODEL, *args],
                          capture_output=True, text=True)


class LlamacppFuzzTest(unittest.TestCase):
    def test_six_runs(self):
        p = fuzz("--runs", "6", "--seed", "3", "--n-predict", "8", "--out", "fz")
        self.assertIn(p.returncode, (0, 1), p.stderr[-3000:])
        s = json.load(open("fz/summary.json"))
        self.assertEqual((s["llmrr_fuzz_summary"], s["runtime"]), (1, "llamacpp"))
        self.assertEqual((s["campaign"]["runs"], s["runs_done"]), (6, 6))
        self.assertEqual(len(s["results"]), 6)
        st, lc = s["stats"], s["llamacpp"]
        self.assertEqual(st["identical"] + st["numerical"] + st["visible"], 6)
        self.assertEqual(lc["verified"], 6)
        for name, table in lc["by"].items():
            self.assertEqual(sum(b["runs"] for b in table.values()), 6, name)
        self.assertEqual(p.returncode, 1 if st["identical"] < 6 else 0)
        self.assertTrue(os.path.isfile(os.path.join("fz", lc["baseline_trace"])))
        self.assertEqual(subprocess.run([LLMRR, "verify", "fz/traces/baseline.trace"],
                                        capture_output=True).returncode, 0)
        self.assertEqual(s["completions"][s["baseline_completion"]]["text"], lc["baseline_text"])
        md = open("fz/summary.md").read()
        self.assertIn("| identical | %d |" % st["identical"], md)
        for r in s["results"]:
            x = r["llamacpp"]
            # the server's own text: a visible split iff it differs from the baseline's
            self.assertEqual(r["verdict"] == "visible", x["text"] != lc["baseline_text"], r)
            self.assertEqual(r["co_requests"], len(x["config"]["co"]))
            if r["verdict"] != "identical":
                self.assertGreaterEqual(x["first_step"], 0, r)
                self.assertTrue(x["first_site"], r)
                self.assertEqual(x["trace"], "traces/run%d.trace" % r["index"])
                self.assertTrue(os.path.isfile(os.path.join("fz", x["trace"])))
                # op records name what ran otherwise at the first difference
                self.assertEqual(r["cause"], "op", r)
                self.assertTrue(x["op_cause"], r)
                self.check_shrunk(r)
            else:
                self.assertNotIn("minimal_cause", x)
        self.assertFalse([f for f in os.listdir(".") if f.startswith(".llamacpp-fuzz-")])
        # `llmrr fuzz`'s own reader takes it: the same stats, counted again from the runs
        m = subprocess.run([LLMRR, "fuzz", "merge", "fz", "--json"], capture_output=True,
                           text=True)
        self.assertEqual(m.returncode, p.returncode, m.stderr)
        self.assertEqual(json.loads(m.stdout)["stats"], st)

    def check_shrunk(self, r):
        """A split's shrink (llmrr bisect --runtime llamacpp): a subset of the target's
        co-requests, 1-minimal; replayed with it the target splits from itself alone (diff of
        the two replays bisect kept, exit 1, cause op); the subset's rows are in the trace."""
        m = r["llamacpp"]["minimal_cause"]
        self.assertNotIn("error", m, r)
        self.assertEqual(len(m["co_requests"]), len(set(m["co_requests"])))
        if not m["splits_replayed"]:  # replayed, its co-requests do not move it
            self.assertEqual(m["minimal"], [])
            return
        self.assertTrue(m["minimal"])
        self.assertTrue(set(m["minimal"]) <= set(m["co_requests"]), m)
        self.assertTrue(m["one_minimal"], m)
        self.assertTrue(m["op_cause"], m)
        folder = os.path.join("fz", "bisect", "run%d" % r["index"])
        with open(os.path.join(folder, "bisect.json")) as f:
            b = json.load(f)
        self.assertEqual(b["minimal"], m["minimal"])
        self.assertEqual(b["first_difference"]["cause"], "op")
        d = subprocess.run([LLMRR, "diff", os.path.join(folder, b["alone_trace"]),
                            os.path.join(folder, b["minimal_trace"]), "--request",
                            "%d:%d" % (b["alone_id"], b["minimal_id"])],
                           capture_output=True, text=True)
        self.assertEqual(d.returncode, 1, d.stdout + d.stderr)

    def test_bisect_refusals_and_a_request_alone(self):
        os.makedirs("bz", exist_ok=True)
        p = fuzz("--runs", "1", "--seed", "0", "--n-predict", "4", "--max-co", "0",
                 "--slots", "1", "--out", "bz/one")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        base = "bz/one/traces/baseline.trace"

        def bisect(*args):
            return subprocess.run([LLMRR, "bisect", "--runtime", "llamacpp", base, "--model",
                                   MODEL, *args], capture_output=True, text=True)
        q = bisect("--request", "0", "-o", "bz/b0")
        self.assertEqual(q.returncode, 0, q.stdout + q.stderr)
        self.assertIn("with its 0 co-requests (none) is identical to it replayed alone", q.stdout)
        with open("bz/b0/bisect.json") as f:
            self.assertFalse(json.load(f)["splits"])
        q = bisect("--request", "7", "-o", "bz/b7")
        self.assertEqual(q.returncode, 2)
        self.assertIn("--request 7: no such request", q.stderr)
        q = bisect("--request", "0", "-o", "bz/b0")
        self.assertEqual(q.returncode, 2)
        self.assertIn("exists", q.stderr)
        q = subprocess.run([LLMRR, "replay", "--runtime", "llamacpp", base, "--model", MODEL,
                            "--drop", "0", "-o", "bz/r.trace"], capture_output=True, text=True)
        self.assertEqual(q.returncode, 2)
        self.assertIn("--drop needs --request", q.stderr)
        for drop, says in (("7", "--drop 7: no such request"), ("0", "--drop 0: is the judged request")):
            q = subprocess.run([LLMRR, "replay", "--runtime", "llamacpp", base, "--model", MODEL,
                                "--request", "0", "--drop", drop, "-o", "bz/r.trace"],
                               capture_output=True, text=True)
            self.assertEqual(q.returncode, 2, q.stderr)
            self.assertIn(says, q.stderr)
        self.assertFalse(os.path.exists("bz/r.trace"))

    def test_target_alone_is_identical(self):
        # no co-requests and one slot: the target alone twice, as the baseline was
        p = fuzz("--runs", "2", "--seed", "0", "--n-predict", "8", "--max-co", "0",
                 "--slots", "1", "--out", "alone")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr[-3000:])
        s = json.load(open("alone/summary.json"))
        self.assertEqual({k: s["stats"][k] for k in ("identical", "numerical", "visible")},
                         {"identical": 2, "numerical": 0, "visible": 0})
        self.assertTrue(all(r["llamacpp"]["first_site"] is None and r["llamacpp"]["trace"] is None
                            and r["llamacpp"]["text"] == s["llamacpp"]["baseline_text"]
                            for r in s["results"]))

    def test_refusals(self):
        os.makedirs("taken", exist_ok=True)
        for args, what in ((("--runs", "1", "--out", "taken"), "exists"),
                           (("--runs", "0", "--out", "new"), "--runs"),
                           (("--runs", "1", "--out", "new", "--slots", "0"), "--slots")):
            p = fuzz(*args)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(what, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        p = subprocess.run([LLMRR, "fuzz", "--runtime", "llamacpp", "--model", "no.gguf",
                            "--runs", "1", "--out", "new"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("no such file", p.stderr)
        self.assertFalse(os.path.exists("new"))
        self.assertEqual(os.listdir("taken"), [])


if __name__ == "__main__":
    unittest.main()
