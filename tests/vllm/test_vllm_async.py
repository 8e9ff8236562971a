"""llmrr.runtimes.vllm under vLLM's async scheduling, on the CPU (label "vllm").

vLLM's CPU backend always schedules synchronously, so the plugin's step recorder is driven
here as vLLM's model runner drives it under async scheduling (vLLM's GPU default): step N's
output is vLLM's own AsyncModelRunnerOutput, whose get_output() is called only after step
N+1 has run (vLLM's batch queue of 2). A tiny torch model supplies real hooks (embedding,
one layer, norm) and logits; each step's "sampled" tokens are the argmax of its logits rows.

The trace must hold every token in the step that produced it, with true finishes (max_tokens
at the step that reached it, never "aborted, 0 tokens"), and be the same trace, step for
step, as the same run recorded with synchronous outputs. A step whose tokens vLLM never
collects (the run ends first) is written without them and the trace says lossy."""
import json
import os
import sys
import unittest
from types import SimpleNamespace as NS

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from common import dump_json, llmrr_cli, require  # noqa: E402

require("torch", "vllm")
import torch  # noqa: E402
from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput  # noqa: E402

import llmrr.runtimes.vllm as plugin  # noqa: E402

WORK = os.getcwd()
VOCAB, HIDDEN = 64, 32


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x):
        return torch.tanh(self.proj(x)), x  # (hidden, residual), as vLLM's layers return


class Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleList([Layer()])
        self.norm = torch.nn.LayerNorm(HIDDEN)


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.model = Base()
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        h, r = self.model.layers[0](x)
        return self.model.norm(h + r)

    def compute_logits(self, h):
        return self.head(h)


class Output(AsyncModelRunnerOutput):
    """vLLM's async output type: the tokens exist only once get_output() is called."""

    def __init__(self, out):
        self.out = out
        self.collected = False

    def get_output(self):
        self.collected = True
        return self.out


def runner(model, async_sched):
    hf = NS(vocab_size=VOCAB, num_hidden_layers=1, hidden_size=HIDDEN, num_attention_heads=1,
            num_key_value_heads=1, model_type="llama", eos_token_id=1)
    cfg = NS(parallel_config=NS(rank=0, tensor_parallel_size=1),
             model_config=NS(enforce_eager=True, hf_config=hf, dtype=torch.float32,
                             model="tiny-lm"),
             scheduler_config=NS(max_num_batched_tokens=64, max_num_seqs=4,
                                 enable_chunked_prefill=True, async_scheduling=async_sched),
             cache_config=NS(enable_prefix_caching=False))
    return NS(vllm_config=cfg, device=torch.device("cpu"), get_model=lambda: model,
              input_batch=NS(req_ids=[], num_reqs=0), use_async_scheduling=async_sched)


def new_req(rid, prompt, max_tokens):
    sp = NS(max_tokens=max_tokens, temperature=0.0, top_k=0, top_p=1.0, seed=None,
            ignore_eos=True, stop_token_ids=None)
    return NS(req_id=rid, prompt_token_ids=prompt, sampling_params=sp, num_computed_tokens=0)


PROMPTS = {"0-aa": [5, 9, 11, 2], "1-bb": [7, 3, 8], "2-cc": [20, 21, 22, 23, 24]}
MAX_TOKENS = {"0-aa": 3, "1-bb": 4, "2-cc": 2}
# Per step: requests in the runner's batch order, and which arrive. Request 2 arrives at
# step 2 and takes the slot request 0 leaves after step 2 (its third token).
SCHEDULE = [(["0-aa", "1-bb"], ["0-aa", "1-bb"]), (["1-bb", "0-aa"], []),
            (["0-aa", "1-bb"], []), (["2-cc", "1-bb"], ["2-cc"]), (["2-cc"], [])]


def run(trace, async_sched, collect_last=True):
    """Drives the plugin's step recorder over SCHEDULE; returns the tokens each request got.
    With async_sched, step N's tokens are collected after step N+1 has run."""
    os.environ[plugin.ENV_TRACE] = trace
    os.environ[plugin.ENV_CAPTURE] = "all"
    model = TinyLM()
    r = runner(model, async_sched)
    rec = plugin._StepRecorder(r)
    computed = {rid: 0 for rid in PROMPTS}
    got = {rid: [] for rid in PROMPTS}
    waiting = []  # async outputs not collected yet

    def collect(out):
        o = out.get_output()
        for rid, toks in zip(o.req_ids, o.sampled_token_ids):
            got[rid] += toks

    for batch, arrivals in SCHEDULE:
        sched, ids = {}, []
        new = [new_req(a, PROMPTS[a], MAX_TOKENS[a]) for a in arrivals]
        cached = [rid for rid in batch if rid not in arrivals]
        for rid in batch:
            if computed[rid] == 0:
                sched[rid] = len(PROMPTS[rid])
                ids += PROMPTS[rid]
            else:
                sched[rid] = 1
                # (async scheduling runs ahead of the tokens: the input row is a placeholder
                # vLLM fills on the device; any id does here)
                ids += [(computed[rid] * 7 + len(rid)) % VOCAB]
        so = NS(scheduled_new_reqs=new,
                scheduled_cached_reqs=NS(req_ids=cached,
                                         num_computed_tokens=[computed[c] for c in cached]),
                num_scheduled_tokens=sched, finished_req_ids=set())
        rec.begin(so)
        r.input_batch = NS(req_ids=list(batch), num_reqs=len(batch))
        rec.start(so)
        h = model(torch.tensor(ids))
        last, row = [], 0
        for rid in batch:
            row += sched[rid]
            last.append(row - 1)
        logits = model.compute_logits(h[last])
        sampled = [[int(t)] for t in logits.argmax(dim=-1)]
        out = ModelRunnerOutput(req_ids=list(batch),
                                req_id_to_index={rid: i for i, rid in enumerate(batch)},
                                sampled_token_ids=sampled)
        for rid in batch:
            computed[rid] += sched[rid]
        if async_sched:
            a = Output(out)
            rec.end(a)
            waiting.append(a)
            if len(waiting) == 2:  # vLLM's batch queue: collect the older step now
                collect(waiting.pop(0))
        else:
            rec.end(out)
            collect(NS(get_output=lambda o=out: o))
    while waiting and collect_last:
        collect(waiting.pop(0))
    rec.close()
    return got


def steps(trace):
    return [s for s in dump_json(trace) if s.get("type") == "step"]


class AsyncScheduling(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sync = os.path.join(WORK, "sync.trace")
        cls.asyn = os.path.join(WORK, "async.trace")
        cls.sync_tokens = run(cls.sync, False)
        cls.async_tokens = run(cls.asyn, True)

    def test_tokens_are_credited_to_the_step_that_produced_them(self):
        self.assertEqual(self.async_tokens, self.sync_tokens)
        s = steps(self.asyn)
        self.assertEqual(len(s), len(SCHEDULE))
        for st, (batch, _) in zip(s, SCHEDULE):
            self.assertEqual([g["request"] for g in st["segments"]],
                             [int(rid.split("-")[0]) for rid in batch])
            # every sampled row has its token in its own step, the top-1 of its logits row
            logits = {(lg["request"], lg["position"]): lg["top_ids"][0] for lg in st["logits"]}
            toks = {(t["request"], t["position"] - 1): t["token"] for t in st["tokens"]}
            self.assertEqual(toks, logits, "step %d" % st["step"])
        _, out = llmrr_cli("verify", self.asyn)
        self.assertIn("complete", out)
        self.assertNotIn("lossy", out)

    def test_finishes_are_true(self):
        fin = {}
        for st in steps(self.asyn):
            for f in st["finishes"]:
                fin[f["request"]] = (st["step"], f["reason"], f["generated"])
        # request 0: prefill at step 0, decodes at 1 and 2 -> its third token at step 2
        self.assertEqual(fin[0], (2, "max_tokens", 3))
        self.assertEqual(fin[1], (4 - 1, "max_tokens", 4))
        self.assertEqual(fin[2], (4, "max_tokens", 2))

    def test_the_same_trace_as_synchronous_outputs(self):
        a, b = steps(self.sync), steps(self.asyn)
        self.assertEqual(json.dumps(a, sort_keys=True), json.dumps(b, sort_keys=True))
        rc, out = llmrr_cli("diff", self.sync, self.asyn)
        self.assertIn("no split", out)
        header = json.loads(llmrr_cli("inspect", self.asyn, "--json")[1])
        extra = json.loads(header["run_header"]["extra_config_json"])
        self.assertTrue(extra["async_scheduling"])

    def test_tokens_never_collected_are_said(self):
        t = os.path.join(WORK, "uncollected.trace")
        run(t, True, collect_last=False)
        s = steps(t)
        self.assertEqual(len(s), len(SCHEDULE), "the last step is written, without tokens")
        self.assertEqual(s[-1]["tokens"], [])
        _, out = llmrr_cli("verify", t)
        self.assertIn("lossy: llmrr.runtimes.vllm: the tokens of step 4 were never collected", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
