"""The proof on real code: Hugging Face transformers (CPU) runs the committed tiny Llama,
Mixtral, Qwen2-MoE, Qwen3, Qwen3-MoE and DeepSeek-V3 checkpoints on one prompt alone (batch 1) and inside a left-padded
batch of 8, llmrr.runtimes.torch.record records both, and `llmrr diff` says where they split. Where
torch's CPU kernels split depends on the machine (the GEMM kernels oneDNN / MKL pick differ
between AVX2, AVX-512 and AMX machines), so the finding `llmrr diff` must report is worked
out here from the tensors transformers itself computed in the two runs: the first target
position where any hooked module's row differs bit for bit, the first such site in forward
order there, and the first position whose logits differ. README "Python" has the table of
one machine. Each case also checks the trace against those tensors (fingerprint l2 per row,
hash equality <=> bit equality, routing, tokens, padding rows), so a wrong mapping of rows
fails here, not only a wrong finding."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import llmrr_cli, require  # noqa: E402

require("numpy", "torch", "transformers")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import llmrr  # noqa: E402
import llmrr.runtimes.torch  # noqa: E402

FIXTURES = os.environ["LLMRR_FIXTURES"]
TARGET = [1, 17, 42, 255, 256, 3, 99]  # the fixtures' prompt p7
OTHERS = [[1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [1, 20], [1, 30, 31, 32], [1] * 9,
          [1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52], [1, 60, 61],
          [1, 70, 71, 72, 73, 74]]
BATCH = OTHERS[:3] + [TARGET] + OTHERS[3:]  # the target is row 3, padded from 7 to 14
ROW = 3
MAX_NEW = 12

# Forward order of the site kinds (runtime/include/llmrr/format/site.h, SiteKind): the
# order `llmrr diff` names the first differing site of a position in.
KIND_ORDER = ["attn_norm", "attn.q_a", "attn.q_a_norm", "attn.q", "attn.k", "attn.v",
              "attn.kv_a", "attn.kv_a_norm", "attn.q_norm", "attn.k_norm", "attn.core",
              "attn.v_up", "attn.o", "mlp_norm", "mlp.gate", "mlp.up", "mlp.act", "mlp.down",
              "moe.router", "moe.shared.gate", "moe.shared.up", "moe.shared.down",
              "moe.shared.scale", "moe.combine", "out"]

transformers.utils.logging.disable_progress_bar()
torch.set_num_threads(1)  # the finding is for one thread; more threads may block differently
_models = {}


def load(name, dtype):
    key = (name, dtype)
    if key not in _models:
        m = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.join(FIXTURES, name), attn_implementation="eager",
            dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
        _models[key] = m.eval()
    return _models[key]


def padded(prompts):
    n = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (n - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


class Saved:
    """Forward outputs (or inputs) of some modules, per call (= per step), as transformers
    computed them. watch: {name: module} or {name: (module, inputs)}."""

    def __init__(self, watch):
        self.out = {name: [] for name in watch}
        self.handles = []
        for name, spec in watch.items():
            module, inputs = spec if isinstance(spec, tuple) else (spec, False)
            if inputs:
                self.handles.append(module.register_forward_pre_hook(self._pre(name)))
            else:
                self.handles.append(module.register_forward_hook(self._hook(name)))

    def _pre(self, name):
        def hook(mod, args):
            self.out[name].append(args[0].detach().clone())
        return hook

    def _hook(self, name):
        def hook(mod, args, out):
            if torch.is_tensor(out) and out.dim() == 4:
                out = out.flatten(-2)  # Qwen3's q/k norm: [B, T, heads, head_dim]
            self.out[name].append(tuple(o.detach().clone() for o in out)
                                  if isinstance(out, tuple) else out.detach().clone())
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


def sites_of(model, capture):
    """{site: (module, inputs)} in forward order, as the llmrr.runtimes.torch hooks name them
    (python/llmrr/runtimes/torch.py), plus "logits" (the LM head)."""
    sites = {}
    for i, layer in enumerate(model.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        mods = {"out": (layer, False)}
        if capture == "all":
            mods.update({"attn_norm": (layer.input_layernorm, False),
                         "mlp_norm": (layer.post_attention_layernorm, False),
                         "attn.o": (attn.o_proj, False)})
            if hasattr(attn, "kv_a_proj_with_mqa"):  # DeepSeek-V3 MLA
                mods.update({"attn.kv_a": (attn.kv_a_proj_with_mqa, False),
                             "attn.kv_a_norm": (attn.kv_a_layernorm, False),
                             "attn.v_up": (attn.o_proj, True)})
                if attn.q_a_proj is not None:
                    mods.update({"attn.q_a": (attn.q_a_proj, False),
                                 "attn.q_a_norm": (attn.q_a_layernorm, False),
                                 "attn.q": (attn.q_b_proj, False)})
                else:
                    mods["attn.q"] = (attn.q_proj, False)
            else:
                mods.update({"attn.q": (attn.q_proj, False), "attn.k": (attn.k_proj, False),
                             "attn.v": (attn.v_proj, False), "attn.core": (attn.o_proj, True)})
            if hasattr(attn, "q_norm"):
                mods.update({"attn.q_norm": (attn.q_norm, False),
                             "attn.k_norm": (attn.k_norm, False)})
            if hasattr(mlp, "experts"):
                mods["moe.router"] = (mlp.gate, False)
                mods["moe.combine"] = (mlp, False)
                shared = getattr(mlp, "shared_expert", None) or getattr(mlp, "shared_experts", None)
                if shared is not None:
                    mods.update({"moe.shared.gate": (shared.gate_proj, False),
                                 "moe.shared.up": (shared.up_proj, False),
                                 "moe.shared.down": (shared.down_proj, False)})
                if getattr(mlp, "shared_expert_gate", None) is not None:
                    mods["moe.shared.scale"] = (mlp.shared_expert_gate, False)
            else:
                mods.update({"mlp.gate": (mlp.gate_proj, False), "mlp.up": (mlp.up_proj, False),
                             "mlp.down": (mlp.down_proj, False),
                             "mlp.act": (mlp.down_proj, True)})
        for kind in KIND_ORDER:
            if kind in mods:
                sites["L%d.%s" % (i, kind)] = mods[kind]
    if capture == "all":
        sites = dict([("embed", (model.model.embed_tokens, False))] + list(sites.items()) +
                     [("final_norm", (model.model.norm, False))])
    sites["logits"] = (model.get_output_embeddings(), False)
    return sites


def first(x):
    return x[0] if isinstance(x, tuple) else x


def expected_finding(s1, s8, sites, pad):
    """What `llmrr diff` must find for the target, from the tensors of the two runs:
    (verdict, first differing site or None for the logits, its step, its position, first
    position whose logits differ). Step 0 holds the prompt, step k > 0 position P - 1 + k."""
    P = len(TARGET)
    first_site = first_logits = None
    for step in range(MAX_NEW):
        rows = [(k, k) for k in range(P)] if step == 0 else [(0, P - 1 + step)]
        for k, position in rows:
            for site in sites:
                x1, x8 = first(s1.out[site][step]), first(s8.out[site][step])
                if site == "logits":
                    if k != len(rows) - 1:
                        continue  # only the last row of a step is sampled
                    r1, r8 = x1[0, -1], x8[ROW, -1]
                else:
                    cols = x1.shape[-1]
                    r1 = x1.reshape(-1, cols)[k]
                    t8 = x8.reshape(len(BATCH), -1, cols)
                    r8 = t8[ROW, (pad + k) if step == 0 else 0]
                if torch.equal(r1, r8):
                    continue
                if first_site is None:
                    first_site = (None if site == "logits" else site, step, position)
                if site == "logits" and first_logits is None:
                    first_logits = position
    if first_site is None:
        return ("identical", None, None, None, None)
    return ("numerical split",) + first_site + (first_logits,)


def run(model, prompts, path, capture="all", eos=None, watch=None):
    ids, mask = padded(prompts)
    saved = Saved(watch or {})
    try:
        with llmrr.runtimes.torch.record(model, path, capture=capture):
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=MAX_NEW,
                                 do_sample=False, pad_token_id=0, eos_token_id=eos)
    finally:
        saved.remove()
    llmrr_cli("verify", path)
    return out, mask, saved


def diff(a, b):
    rc, out = llmrr_cli("diff", "--json", a, b, ok=(0, 1))
    return rc, json.loads(out)


def finding(d):
    r = d["requests"][0]
    fd, ns = r.get("first_difference"), r.get("numerical_split")
    return (r["verdict"], fd.get("site") or None if fd else None,
            fd.get("step_b") if fd else None, fd.get("position") if fd else None,
            ns["position"] if ns else None)


class BatchDependence(unittest.TestCase):
    def check_case(self, name, dtype):
        model = load(name, dtype)
        tag = "%s-%s" % (name, dtype)
        layers = model.model.layers
        watch = sites_of(model, "all")
        moe = hasattr(layers[0].mlp, "experts")
        if moe:
            watch["router0"] = layers[0].mlp.gate
        out1, _, s1 = run(model, [TARGET], tag + ".b1.trace", watch=watch)
        out1b, _, _ = run(model, [TARGET], tag + ".b1-again.trace")
        out8, mask8, s8 = run(model, BATCH, tag + ".b8.trace", watch=watch)

        # Control: the same batch twice is bit-identical, and diff says so (exit 0).
        rc, d = diff(tag + ".b1.trace", tag + ".b1-again.trace")
        self.assertEqual(rc, 0, d)
        self.assertTrue(d["identical"])

        rc, d = diff(tag + ".b1.trace", tag + ".b8.trace")
        got = finding(d)
        print("%-22s %s" % (tag, got), file=sys.stderr)
        sites = [k for k in watch if k != "router0"]
        want = expected_finding(s1, s8, sites, mask8.shape[1] - len(TARGET))
        self.assertEqual(got, want, json.dumps(d["requests"][0], indent=1))
        self.assertEqual(rc, 0 if got[0] == "identical" else 1)
        if got[0] != "identical" and got[1] is None:
            # Every site through final_norm agrees: diff names the LM head.
            self.assertIn("LM head", d["requests"][0]["first_difference"]["capture_note"])
        self.assertEqual(d["requests"][0]["a"], 0)
        self.assertEqual(d["requests"][0]["b"], ROW)
        # The greedy tokens agree in every case here; the traces hold them.
        self.assertEqual(out1[0, -MAX_NEW:].tolist(), out8[ROW, -MAX_NEW:].tolist())

        t1, t8 = llmrr.open(tag + ".b1.trace"), llmrr.open(tag + ".b8.trace")
        self.assertEqual(t1.generated(0).tolist(), out1[0, -MAX_NEW:].tolist())
        for b in range(len(BATCH)):
            self.assertEqual(t8.generated(b).tolist(), out8[b, -MAX_NEW:].tolist())
        self.check_batch(t8, mask8)
        self.check_rows(t1, t8, s1, s8, len(layers), mask8)
        if hasattr(layers[0].self_attn, "q_norm"):
            self.check_head_rows(t1, s1, len(layers))
        if moe:
            self.check_routing(t8, s8, mask8)

    def check_batch(self, t, mask):
        B, T = mask.shape
        s0 = t.segments.where(step=0)
        pad = s0.request == llmrr.runtimes.torch.PADDING_REQUEST
        self.assertEqual(int(s0["count"][pad].sum()), int((mask == 0).sum()))
        self.assertEqual(int(s0["count"].sum()), B * T)
        for b in range(B):
            real = s0.where(request=b)
            self.assertEqual(real["count"].tolist(), [int(mask[b].sum())])
            self.assertEqual(real.start.tolist(), [0])
            self.assertEqual(real.batch_row.tolist(), [b * T + T - int(mask[b].sum())])
        later = t.segments.where(step=1)
        self.assertEqual(later.request.tolist(), list(range(B)))
        self.assertEqual(later.kind.tolist(), [1] * B)  # decode
        self.assertEqual(later.start.tolist(), mask.sum(dim=1).tolist())
        self.assertEqual(t.requests.where(id=ROW).prompt[0].tolist(), TARGET)

    def check_head_rows(self, t, saved, n_layers):
        """Qwen3's q/k norm sites: one row per token holding all its heads, l2 as computed
        from transformers' [B, T, heads, head_dim] output, at every step."""
        for li in range(n_layers):
            for kind in ("q_norm", "k_norm"):
                site = "L%d.attn.%s" % (li, kind)
                f = t.fingerprints.where(site=site)
                for step in range(MAX_NEW):
                    x = saved.out[site][step]
                    x = x.reshape(-1, x.shape[-1])
                    a = f.where(step=step)
                    self.assertEqual(len(a), x.shape[0], "%s step %d" % (site, step))
                    for k in range(len(a)):
                        want = float(np.float32(np.sqrt(np.sum(x[k].double().numpy() ** 2))))
                        self.assertAlmostEqual(float(a.l2[k]), want, delta=1e-6 * max(1.0, want))

    def check_rows(self, t1, t8, s1, s8, n_layers, mask8):
        """Per layer output row: l2 as computed from the tensor, and hash equal between the
        two runs exactly when transformers' rows are bit-identical."""
        B, T = mask8.shape
        pad = (T - mask8.sum(dim=1)).tolist()
        equal = differ = 0
        for li in range(n_layers):
            site = "L%d.out" % li
            f1, f8 = t1.fingerprints.where(site=site), t8.fingerprints.where(site=site)
            for step in range(MAX_NEW):
                x1 = s1.out[site][step].reshape(-1, s1.out[site][step].shape[-1])
                x8 = s8.out[site][step]
                a = f1.where(step=step)
                b = f8.where(step=step, request=ROW)
                self.assertEqual(len(a), x1.shape[0])
                self.assertEqual(a.position.tolist(), b.position.tolist())
                for k in range(len(a)):
                    row1 = x1[k]
                    t_in = pad[ROW] + k if step == 0 else 0
                    row8 = x8[ROW, t_in]
                    self.assertEqual(b.batch_row[k], ROW * x8.shape[1] + t_in)
                    want = float(np.float32(np.sqrt(np.sum(row1.double().numpy() ** 2))))
                    self.assertAlmostEqual(float(a.l2[k]), want, delta=1e-6 * max(1.0, want))
                    same = torch.equal(row1, row8)
                    self.assertEqual(same, int(a.hash[k]) == int(b.hash[k]),
                                     "%s step %d position %d" % (site, step, a.position[k]))
                    equal += same
                    differ += not same
        print("  L*.out rows of the target: %d bit-identical, %d differ (hash agrees each time)" %
              (equal, differ), file=sys.stderr)

    def check_routing(self, t, s, mask):
        B, T = mask.shape
        r = t.routing.where(layer=0, step=0)
        logits, scores, idx = s.out["router0"][0]
        self.assertEqual(len(r), idx.numel())
        self.assertEqual(r.expert.tolist(), idx.reshape(-1).tolist())
        self.assertEqual(r.chosen.tolist(), idx.reshape(-1).tolist())
        np.testing.assert_array_equal(r.gate, scores.float().reshape(-1).numpy())
        self.assertEqual(r.batch_row.tolist(), np.repeat(np.arange(B * T), idx.shape[-1]).tolist())

    def test_llama_f32(self):
        self.check_case("tiny-llama", "f32")

    def test_llama_bf16(self):
        self.check_case("tiny-llama", "bf16")

    def test_mixtral_f32(self):
        self.check_case("tiny-mixtral", "f32")

    def test_mixtral_bf16(self):
        self.check_case("tiny-mixtral", "bf16")

    def test_qwen2moe_f32(self):
        self.check_case("tiny-qwen2moe", "f32")

    def test_qwen2moe_bf16(self):
        self.check_case("tiny-qwen2moe", "bf16")

    def test_qwen3_f32(self):
        self.check_case("tiny-qwen3", "f32")

    def test_qwen3moe_f32(self):
        self.check_case("tiny-qwen3moe", "f32")

    def test_deepseek_f32(self):
        self.check_case("tiny-deepseek", "f32")

    def test_deepseek_qproj_f32(self):
        self.check_case("tiny-deepseek-qproj", "f32")


class HookBehaviour(unittest.TestCase):
    def test_capture_layers_keeps_layer_outputs_and_diff_names_the_layer(self):
        model = load("tiny-llama", "f32")
        watch = sites_of(model, "layers")
        _, _, s1 = run(model, [TARGET], "layers.b1.trace", capture="layers", watch=watch)
        _, mask8, s8 = run(model, BATCH, "layers.b8.trace", capture="layers", watch=watch)
        t = llmrr.open("layers.b8.trace")
        self.assertEqual(sorted(set(t.fingerprints.site_name.tolist())), ["L0.out", "L1.out"])
        self.assertEqual(t.header["engine"]["capture"], "layers")
        rc, d = diff("layers.b1.trace", "layers.b8.trace")
        want = expected_finding(s1, s8, list(watch), mask8.shape[1] - len(TARGET))
        self.assertEqual(rc, 0 if want[0] == "identical" else 1)
        self.assertEqual(finding(d), want, json.dumps(d["requests"][0], indent=1))

    def test_eos_finishes_a_request_and_its_rows_become_padding(self):
        model = load("tiny-llama", "f32")
        out, mask, _ = run(model, BATCH, "eos.trace")  # learn the target's first token
        first = int(out[ROW, mask.shape[1]])
        out, mask, _ = run(model, BATCH, "eos.trace", eos=first)
        t = llmrr.open("eos.trace")
        fin = t.finishes.where(request=ROW)
        self.assertEqual(fin.reason.tolist(), [0])  # eos
        self.assertEqual(fin.generated.tolist(), [1])
        self.assertEqual(fin.step.tolist(), [0])
        self.assertEqual(len(t.segments.where(step=1, request=ROW)), 0)
        if len(t.steps) > 1:
            pad = t.segments.where(step=1, request=llmrr.runtimes.torch.PADDING_REQUEST)
            self.assertGreaterEqual(int(pad["count"].sum()), 1)
        self.assertEqual(t.generated(ROW).tolist(), [first])

    def test_trace_path_from_the_environment(self):
        # No path: a shared recorder when $LLMRR_SHARED_RECORDER_LIB exports one (this library
        # does not), else $LLMRR_TRACE.
        model = load("tiny-llama", "f32")
        os.environ["LLMRR_SHARED_RECORDER_LIB"] = os.environ["LLMRR_RECORDER_LIB"]
        os.environ["LLMRR_TRACE"] = "env.trace"
        try:
            ids, mask = padded([TARGET])
            with llmrr.runtimes.torch.record(model):
                model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3,
                               do_sample=False, pad_token_id=0)
            del os.environ["LLMRR_TRACE"]
            with self.assertRaises(ValueError):
                with llmrr.runtimes.torch.record(model):
                    pass
        finally:
            os.environ.pop("LLMRR_SHARED_RECORDER_LIB", None)
            os.environ.pop("LLMRR_TRACE", None)
        self.assertEqual(len(llmrr.open("env.trace").tokens), 3)

    def test_forward_calls_without_generate(self):
        # A hand-written decoding loop: each forward is a step, the next one's input is the
        # token, and leaving the block finishes the request as aborted.
        model = load("tiny-llama", "f32")
        ids, mask = padded([TARGET])
        with torch.no_grad(), llmrr.runtimes.torch.record(model, "manual.trace"):
            out = model(input_ids=ids, attention_mask=mask, use_cache=True)
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            mask = torch.cat([mask, torch.ones(1, 1, dtype=mask.dtype)], dim=1)
            model(input_ids=tok, attention_mask=mask, past_key_values=out.past_key_values,
                  use_cache=True)
        llmrr_cli("verify", "manual.trace")
        t = llmrr.open("manual.trace")
        self.assertEqual(t.steps.rows.tolist(), [len(TARGET), 1])
        self.assertEqual(t.tokens.token.tolist(), [int(tok)])
        self.assertEqual(t.tokens.position.tolist(), [len(TARGET)])
        self.assertEqual(t.finishes.reason.tolist(), [2])  # aborted
        self.assertEqual(t.segments.kind.tolist(), [0, 1])

    def test_record_leaves_the_model_as_it_was(self):
        model = load("tiny-llama", "f32")
        with self.assertRaises(llmrr.LlmrrError):
            with llmrr.runtimes.torch.record(model, "no/such/dir/x.trace"):
                pass
        run(model, [TARGET], "plain.trace")
        self.assertNotIn("generate", model.__dict__)  # the instance's generate wrapper is gone
        for name, m in model.named_modules():
            self.assertEqual((name, len(m._forward_hooks), len(m._forward_pre_hooks)), (name, 0, 0))
        ids, mask = padded([TARGET])
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2,
                             do_sample=False, pad_token_id=0)
        self.assertEqual(out.shape, (1, len(TARGET) + 2))


if __name__ == "__main__":
    unittest.main(verbosity=2)
