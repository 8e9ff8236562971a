"""vLLM with staggered arrivals and finishes, recorded by llmrr.runtimes.vllm: every row credited
to its request (label "vllm").

56 prompts with different max_tokens (2 to 40) run with max_num_seqs 3, so requests finish at
different steps and waiting ones take the places they leave (vLLM puts a new request into a
freed slot, condense() moves tail rows into holes); max_num_batched_tokens 32, so long
prompts are prefilled in chunks beside decodes; prefix caching on, with 14 prompts sharing a
40-token prefix (block size 32: a cached block each). The same prompts run again one at a
time (max_num_seqs 1), each alone in its batch, and once more with 8 sequences and a KV cache
of 9 blocks, so that vLLM preempts requests and later recomputes them from position 0.

For every token vLLM sampled, the trace must hold it, and it must be the top-1 of the logits
row the trace credits to its request at the position before it: a row credited to another
request has another top-1 (the model's greedy token depends on the prompt; the test checks
that it does). And each request's last-layer rows must sit close to the same request's rows
run alone (relative l2 within 1e-3; another request's row is far off), up to where the two
runs' tokens part. At least 1,000 tokens and 1,000 rows are checked."""
import json
import os
import random
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from common import dump_json, llmrr_cli, require  # noqa: E402

require("torch", "transformers", "vllm")
from vllm_common import generate, make_model  # noqa: E402

WORK = os.getcwd()
MODEL = os.path.join(WORK, "tiny-llama")


def workload():
    rng = random.Random(31)
    prefix = [rng.randrange(2, 512) for _ in range(40)]
    prompts, max_tokens = [], []
    for i in range(56):
        if i % 4 == 1:  # 14 prompts share the prefix (prefix-cache hits after the first)
            p = prefix + [rng.randrange(2, 512) for _ in range(rng.randint(2, 10))]
        else:
            p = [rng.randrange(2, 512) for _ in range(rng.randint(3, 60))]
        prompts.append(p)
        max_tokens.append(rng.randint(2, 40))
    return prompts, max_tokens


def by_request(trace, site):
    """From a trace: {request: {position: l2 at site}}, {request: [tokens]}, the count of
    tokens that are the top-1 of their credited logits row, and the ones that are not."""
    rows, tokens, top1, wrong = {}, {}, 0, []
    for s in dump_json(trace):
        if s.get("type") != "step":
            continue
        where, b = [], 0
        for g in s["segments"]:
            for k in range(g["count"]):
                where.append((g["request"], g["start"] + k))
            b += g["count"]
        for f in s.get("fingerprints", []):
            if f["site"] != site:
                continue
            brs = f["batch_rows"] or list(range(len(f["fingerprints"])))
            for br, fp in zip(brs, f["fingerprints"]):
                r, pos = where[br]
                rows.setdefault(r, {})[pos] = fp["l2"]
        logits = {(lg["request"], lg["position"]): lg for lg in s.get("logits", [])}
        for t in s.get("tokens", []):
            tokens.setdefault(t["request"], []).append(t["token"])
            lg = logits.get((t["request"], t["position"] - 1))
            if lg is not None and lg["top_ids"] and lg["top_ids"][0] == t["token"]:
                top1 += 1
            else:
                wrong.append((s["step"], t["request"], t["position"], t["token"],
                              lg["top_ids"][:1] if lg else None))
    return rows, tokens, top1, wrong


def setUpModule():
    make_model(MODEL)


class StaggeredRequests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.prompts, cls.max_tokens = workload()
        cls.mixed = os.path.join(WORK, "staggered.trace")
        cls.mixed_tokens, cls.mixed_err = generate(
            MODEL, cls.mixed, cls.prompts, max_tokens=cls.max_tokens, seqs=3, mbt=32,
            prefix=True, block=32, capture="layers")
        cls.preempted = os.path.join(WORK, "preempted.trace")
        cls.preempted_tokens, cls.preempted_err = generate(
            MODEL, cls.preempted, cls.prompts, max_tokens=cls.max_tokens, seqs=8, mbt=64,
            block=32, blocks=9, capture="layers")
        cls.alone = os.path.join(WORK, "one-at-a-time.trace")
        cls.alone_tokens, _ = generate(MODEL, cls.alone, cls.prompts, max_tokens=cls.max_tokens,
                                       seqs=1, block=32, capture="layers")

    def runs(self):
        return ((self.mixed, self.mixed_tokens), (self.preempted, self.preempted_tokens))

    def test_the_trace_is_complete_and_not_lossy(self):
        for t in (self.mixed, self.preempted, self.alone):
            _, out = llmrr_cli("verify", t)
            self.assertIn("complete", out)
            self.assertNotIn("lossy", out)
        self.assertNotIn("dropped", self.mixed_err + self.preempted_err)

    def test_preempted_requests_are_recomputed(self):
        end, restarts = {}, 0
        for s in dump_json(self.preempted):
            if s.get("type") != "step":
                continue
            for g in s["segments"]:
                if g["request"] in end and g["start"] < end[g["request"]]:
                    restarts += 1
                    self.assertEqual((g["start"], g["kind"]), (0, "prefill"))
                end[g["request"]] = g["start"] + g["count"]
        self.assertGreater(restarts, 5, "vLLM must preempt and recompute requests")

    def test_the_schedule_staggers(self):
        steps = [s for s in dump_json(self.mixed) if s.get("type") == "step"]
        joined_late = sum(1 for s in steps[1:] for _ in s.get("arrivals", []))
        finished_early = sum(1 for s in steps[:-1] for _ in s.get("finishes", []))
        self.assertGreater(joined_late, 40, "requests must join while others run")
        self.assertGreater(finished_early, 40, "requests must finish while others run")
        chunked = sum(1 for s in steps for g in s["segments"]
                      if g["kind"] == "prefill" and not g["sample"])
        self.assertGreater(chunked, 5, "long prompts must be prefilled in chunks")
        cached = sum(1 for s in steps for g in s["segments"]
                     if g["kind"] == "prefill" and g["start"] >= 32 and g["cached"] >= 32
                     and g["start"] == g["cached"])
        self.assertGreater(cached, 5, "prefix-cache hits must start prefills past 0")

    def test_every_token_is_the_top1_of_its_own_row(self):
        for trace, returned in self.runs():
            _, tokens, top1, wrong = by_request(trace, "L1.out")
            for i, want in enumerate(returned):
                self.assertEqual(tokens.get(i), want, "request %d: the tokens vLLM returned" % i)
            self.assertEqual(wrong, [], "%s: tokens that are not the top-1 of the logits row "
                             "credited to their request (step, request, position, token, "
                             "top-1)" % os.path.basename(trace))
            self.assertGreaterEqual(top1, 1000)
            print("%s: %d tokens, each the top-1 of its own logits row" %
                  (os.path.basename(trace), top1))
        # The check has teeth: greedy tokens depend on the prompt, so a row credited to
        # another request would have another top-1.
        firsts = {t[0] for t in self.mixed_tokens}
        self.assertGreater(len(firsts), 20, "first tokens of 56 prompts: %s" % sorted(firsts))

    def test_rows_sit_close_to_the_same_request_alone(self):
        alone, at, _, _ = by_request(self.alone, "L1.out")
        for trace, _ in self.runs():
            self.rows_close(trace, alone, at)

    def rows_close(self, trace, alone, at):
        mixed, mt, _, _ = by_request(trace, "L1.out")
        compared, far = 0, []
        for r, prompt in enumerate(self.prompts):
            same = 0
            while same < min(len(mt[r]), len(at[r])) and mt[r][same] == at[r][same]:
                same += 1
            last = len(prompt) + same  # positions after the first differing token differ
            for pos, l2 in mixed.get(r, {}).items():
                if pos >= last or pos not in alone.get(r, {}):
                    continue
                a = alone[r][pos]
                compared += 1
                if abs(l2 - a) > 1e-3 * max(abs(a), 1e-6):
                    far.append((r, pos, l2, a))
        self.assertEqual(far, [], "%s: (request, position, l2 here, l2 alone)" %
                         os.path.basename(trace))
        self.assertGreaterEqual(compared, 1000)
        print("%s: %d rows at L1.out within 1e-3 of the same request run alone" %
              (os.path.basename(trace), compared))


if __name__ == "__main__":
    unittest.main(verbosity=2)
