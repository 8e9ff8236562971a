#!/usr/bin/env python3
"""Builds llmrr's conformance fixtures with an implementation we did not write (Hugging Face
transformers + gguf-py): tiny random checkpoints, the tensors transformers builds from them,
and the logits it computes. See tools/conformance/README.md; the layout is documented in
tests/fixtures/README.md.

    /opt/conf-venv/bin/python tools/conformance/make_fixtures.py \
        [--out tests/fixtures] [--smollm2 PATH.gguf]

Needs torch, transformers, safetensors, gguf, numpy. Deterministic: fixed seeds, fp32, eager
attention. CI never runs this; it only reads what it wrote.
"""
import argparse
import json
import os
import shutil
import sys
import zlib

import numpy as np
import torch

import gguf
from gguf import GGMLQuantizationType as QT
from safetensors.numpy import save_file

import transformers
from transformers import (AutoModelForCausalLM, AutoTokenizer, DeepseekV3Config,
                          DeepseekV3ForCausalLM, LlamaConfig, LlamaForCausalLM,
                          MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

torch.use_deterministic_algorithms(True)
transformers.logging.set_verbosity_error()

VOCAB = 300
# Token-id prompts for the tiny models: one token, a short one, a longer one.
_rng = np.random.default_rng(1234)
TINY_PROMPTS = {
    "p1": [1],
    "p7": [1, 17, 42, 255, 256, 3, 99],
    "p29": [1] + [int(x) for x in _rng.integers(3, VOCAB, size=28)],
}


def crc32_f32(t):
    a = np.ascontiguousarray(np.asarray(t, dtype=np.float32))
    return f"{zlib.crc32(a.tobytes()) & 0xffffffff:08x}"


def save_npy(path, arr):
    np.save(path, np.ascontiguousarray(arr))


# --- canonical tensors (the layout contract of runtime/include/llmrr/runtime/model.h) -------

def canonical_state(model):
    """state_dict in the checkpoint (Hub) names: transformers >= 5 fuses experts in memory
    (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]); split them back."""
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    arch = model.config.model_type
    out = {}
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            p = k[: -len("mlp.experts.gate_up_proj")]
            i = v.shape[1] // 2
            for e in range(v.shape[0]):
                if arch == "mixtral":
                    out[f"{p}block_sparse_moe.experts.{e}.w1.weight"] = v[e, :i]
                    out[f"{p}block_sparse_moe.experts.{e}.w3.weight"] = v[e, i:]
                else:
                    out[f"{p}mlp.experts.{e}.gate_proj.weight"] = v[e, :i]
                    out[f"{p}mlp.experts.{e}.up_proj.weight"] = v[e, i:]
        elif k.endswith("mlp.experts.down_proj"):
            p = k[: -len("mlp.experts.down_proj")]
            for e in range(v.shape[0]):
                name = (f"{p}block_sparse_moe.experts.{e}.w2.weight" if arch == "mixtral"
                        else f"{p}mlp.experts.{e}.down_proj.weight")
                out[name] = v[e]
        elif arch == "mixtral" and k.endswith("mlp.gate.weight"):
            out[k.replace("mlp.gate.weight", "block_sparse_moe.gate.weight")] = v
        else:
            out[k] = v
    if getattr(model.config, "tie_word_embeddings", False):
        out.pop("lm_head.weight", None)
    return out


def tensor_table(state):
    return {k: {"shape": list(v.shape), "crc32": crc32_f32(v), "sum": float(np.float64(v).sum())}
            for k, v in sorted(state.items())}


# --- deterministic initialisation -----------------------------------------------------------

def init_weights(model, seed):
    """Replaces transformers' default init (std 0.02, near-uniform logits) with scales that give
    logits a spread of a few units and decisive routing, from a fixed generator."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            z = torch.randn(shape, generator=g, dtype=torch.float32)
            if name.endswith("norm.weight") or "layernorm" in name:
                # (also Qwen3's per-head self_attn.q_norm / k_norm)
                v = 1.0 + 0.1 * z
            elif "embed_tokens" in name:
                v = z
            elif name.endswith(".bias"):
                v = 0.5 * z
            else:
                fan_in = shape[-1]
                gain = 1.0
                if "o_proj" in name or "down_proj" in name or name.endswith("w2.weight"):
                    gain = 0.5
                if name.endswith("mlp.gate.weight") or "block_sparse_moe.gate" in name:
                    gain = 3.0  # decisive routing: no near-ties between the k-th and k+1-th expert
                if "lm_head" in name:
                    gain = 2.0
                v = gain * z / np.sqrt(fan_in)
            p.copy_(v.to(p.dtype))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                # DeepSeek-V3's selection bias (a buffer, zero at init): 0.1·z moves the choice
                # of experts away from the plain top-k of the scores.
                b.copy_(0.1 * torch.randn(b.shape, generator=g, dtype=torch.float32))


def deepseek_gaps(router, logits):
    """DeepSeek-V3's selection margins: the gap between the topk_group-th and the next group
    score, and between the k-th and (k+1)-th biased score among the chosen groups."""
    scores = torch.sigmoid(logits.float())
    sfc = scores + router.e_score_correction_bias
    n_group, tg, k = router.num_group, router.topk_group, router.top_k
    gs = sfc.view(-1, n_group, router.num_experts // n_group).topk(2, dim=-1)[0].sum(dim=-1)
    gtop = torch.topk(gs, min(tg + 1, n_group), dim=-1).values
    gap = float("inf") if tg >= n_group else float((gtop[..., tg - 1] - gtop[..., tg]).min())
    idx = torch.topk(gs, tg, dim=-1)[1]
    mask = torch.zeros_like(gs).scatter_(1, idx, 1).bool()
    mask = mask.unsqueeze(-1).expand(-1, n_group, router.num_experts // n_group).reshape(
        -1, router.num_experts)
    masked = sfc.masked_fill(~mask, float("-inf"))
    top = torch.topk(masked, k + 1, dim=-1).values
    return min(gap, float((top[..., k - 1] - top[..., k]).min()))


def router_margin(model, ids):
    """Smallest gap between the k-th and (k+1)-th router probability over all tokens and MoE
    layers: a conformance run must not hinge on a near-tie. (DeepSeek-V3: deepseek_gaps.)"""
    gaps = []
    hooks = []
    k = model.config.num_experts_per_tok
    if model.config.model_type == "deepseek_v3":
        def ds_hook(mod, _inp, out):
            gaps.append(deepseek_gaps(mod, out[0]))
        for name, mod in model.named_modules():
            if type(mod).__name__ == "DeepseekV3TopkRouter":
                hooks.append(mod.register_forward_hook(ds_hook))
        with torch.no_grad():
            model(torch.tensor([ids]))
        for h in hooks:
            h.remove()
        return min(gaps)

    def hook(_m, _inp, out):
        logits = out[0] if isinstance(out, tuple) else out
        probs = torch.softmax(logits.float(), dim=-1)
        top = torch.topk(probs, k + 1, dim=-1).values
        gaps.append(float((top[..., k - 1] - top[..., k]).min()))

    for name, mod in model.named_modules():
        if type(mod).__name__.endswith("TopKRouter"):
            hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    return min(gaps) if gaps else None


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().cpu().numpy()


def run_prompts(model, prompts, out_dir, tag, keep_last=None):
    """Reference logits for each prompt; also reruns with one thread and reports the largest
    difference between the two runs (transformers' own run-to-run spread)."""
    entries = {}
    spread = 0.0
    threads = torch.get_num_threads()
    for pname, ids in prompts.items():
        ref = logits_of(model, ids)
        torch.set_num_threads(1)
        again = logits_of(model, ids)
        torch.set_num_threads(threads)
        spread = max(spread, float(np.abs(ref - again).max()))
        first = 0 if keep_last is None else max(0, len(ids) - keep_last)
        fname = f"{tag}.{pname}.logits.npy"
        save_npy(os.path.join(out_dir, fname), ref[first:])
        entries[pname] = {"ids": ids, "logits": fname, "first_position": first,
                          "shape": list(ref[first:].shape),
                          "logit_range": float(ref.max() - ref.min())}
    return entries, spread


# --- tiny HF checkpoints --------------------------------------------------------------------

MIN_ROUTER_MARGIN = 1e-3


def decisive(make, seed, greedy=False, margin=None):
    """The first seed from `seed` on whose routing has no near-tie on the fixture prompts
    (top-k boundary gap >= MIN_ROUTER_MARGIN in probability), so that an engine within fp32
    rounding of transformers picks the same experts. With `greedy`, also on the greedy
    continuation of GREEDY_PROMPT, whose every step must have a top-1 / top-2 logit gap of at
    least MIN_ROUTER_MARGIN too. `margin` overrides MIN_ROUTER_MARGIN for the routers (many
    experts leave smaller gaps between the k-th and k+1-th probability)."""
    margin = MIN_ROUTER_MARGIN if margin is None else margin
    for s in range(seed, seed + 100):
        torch.manual_seed(0)
        m = make()
        init_weights(m, s)
        seqs = list(TINY_PROMPTS.values())
        if greedy:
            seq, gap = greedy_run(m, TINY_PROMPTS[GREEDY_PROMPT], GREEDY_STEPS)
            if gap < MIN_ROUTER_MARGIN:
                continue
            seqs.append(seq)
        if m.config.model_type in ("llama", "qwen3"):
            return m
        if min(router_margin(m, ids) for ids in seqs) >= margin:
            return m
    raise RuntimeError("no seed with decisive routing")


GREEDY_PROMPT = "p7"
GREEDY_STEPS = 16


def greedy_run(model, ids, steps):
    """Greedy decoding by full forward passes: the sequence (prompt + `steps` tokens) and the
    smallest top-1 / top-2 logit gap over the steps."""
    seq = list(ids)
    gap = float("inf")
    for _ in range(steps):
        last = logits_of(model, seq)[-1]
        top = np.sort(last)[-2:]
        gap = min(gap, float(top[1] - top[0]))
        seq.append(int(np.argmax(last)))
    return seq, gap


def greedy_entry(model, out_dir, tag):
    """transformers' greedy continuation of GREEDY_PROMPT (GREEDY_STEPS tokens) and the logits
    of every position of prompt + continuation: the rows each decode step samples from."""
    ids = TINY_PROMPTS[GREEDY_PROMPT]
    seq, gap = greedy_run(model, ids, GREEDY_STEPS)
    ref = logits_of(model, seq)
    fname = f"{tag}.{GREEDY_PROMPT}-greedy{GREEDY_STEPS}.logits.npy"
    save_npy(os.path.join(out_dir, fname), ref)
    return {"prompt": GREEDY_PROMPT, "ids": seq, "generated": seq[len(ids):], "logits": fname,
            "shape": list(ref.shape), "first_position": 0,
            "logit_range": float(ref.max() - ref.min()), "min_top1_gap": gap}


def tiny_llama():
    c = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    bos_token_id=1, eos_token_id=2, attn_implementation="eager",
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(0)
    m = LlamaForCausalLM(c).eval()
    init_weights(m, 101)
    return m


def tiny_mixtral():
    c = MixtralConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=256,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=2, attn_implementation="eager",
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    return decisive(lambda: MixtralForCausalLM(c).eval(), 202)


def tiny_qwen2moe():
    # Three layers: MoE, dense (mlp_only_layers), MoE; q/k/v biases; shared expert with its
    # sigmoid gate; norm_topk_prob False (Qwen2MoeConfig's default).
    c = Qwen2MoeConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                       num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                       num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                       shared_expert_intermediate_size=48, norm_topk_prob=False,
                       decoder_sparse_step=1, mlp_only_layers=[1], qkv_bias=True,
                       max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       bos_token_id=1, eos_token_id=2, attn_implementation="eager",
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return decisive(lambda: Qwen2MoeForCausalLM(c).eval(), 303)


def tiny_qwen3():
    # head_dim 32 while hidden / heads is 16: q/k/v widths follow head_dim, not hidden.
    c = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                    max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                    attention_bias=False, use_sliding_window=False, bos_token_id=1,
                    eos_token_id=2, attn_implementation="eager",
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    return decisive(lambda: Qwen3ForCausalLM(c).eval(), 404, greedy=True)


def tiny_qwen3moe():
    # Three layers: MoE, dense (mlp_only_layers), MoE; 16 experts, top-4, norm_topk_prob true
    # (Qwen3-30B-A3B's setting; the config's default is false), no shared expert. With 16
    # experts the 4th / 5th probabilities are close more often: the routing margin asked is
    # 2e-4 (still ~1000x the fp32 error of a router probability), and the search starts at
    # the first seed that has it (seeds 505-528 do not).
    c = Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                       num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, num_experts=16, num_experts_per_tok=4,
                       moe_intermediate_size=16, norm_topk_prob=True, decoder_sparse_step=1,
                       mlp_only_layers=[1], max_position_embeddings=256, rms_norm_eps=1e-6,
                       tie_word_embeddings=False, attention_bias=False, use_sliding_window=False,
                       bos_token_id=1, eos_token_id=2, attn_implementation="eager",
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    return decisive(lambda: Qwen3MoeForCausalLM(c).eval(), 529, greedy=True, margin=2e-4)


def tiny_deepseek():
    # Three layers: dense (first_k_dense_replace 1), MoE, MoE. MLA with a q LoRA (q_lora_rank
    # 32), kv_lora_rank 32, nope 16 + rope 8 per head (interleaved rope, the config's
    # default), v_head_dim 16; 16 routed experts in 4 groups, 2 groups kept, top-4, sigmoid
    # scores with a selection bias, routed_scaling_factor 2.5, one shared expert. The margin
    # asked (group and expert gaps of the biased scores) is 2e-4, as for Qwen3-MoE.
    c = DeepseekV3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                         moe_intermediate_size=16, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=4, n_shared_experts=1, n_routed_experts=16,
                         routed_scaling_factor=2.5, kv_lora_rank=32, q_lora_rank=32,
                         qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16, n_group=4,
                         topk_group=2, num_experts_per_tok=4, first_k_dense_replace=1,
                         norm_topk_prob=True, max_position_embeddings=256, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                         attn_implementation="eager",
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return decisive(lambda: DeepseekV3ForCausalLM(c).eval(), 606, greedy=True, margin=2e-4)


def tiny_deepseek_qproj():
    # The other DeepSeek-V3 paths: no q LoRA (q_proj), rope not interleaved, no expert groups
    # (n_group 1; the selection bias alone), norm_topk_prob false, routed_scaling_factor 1.5,
    # two shared experts (one MLP of 2 x moe_intermediate_size), no dense layer.
    c = DeepseekV3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                         moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=4, n_shared_experts=2, n_routed_experts=8,
                         routed_scaling_factor=1.5, kv_lora_rank=32, q_lora_rank=None,
                         qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16, n_group=1,
                         topk_group=1, num_experts_per_tok=2, first_k_dense_replace=0,
                         norm_topk_prob=False, rope_interleave=False,
                         max_position_embeddings=256, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                         attn_implementation="eager",
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return decisive(lambda: DeepseekV3ForCausalLM(c).eval(), 707, greedy=True, margin=2e-4)


def save_hf(model, out_dir, name):
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d)
    # Keep only what a loader reads: config.json and the weights.
    for f in os.listdir(d):
        if f not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(d, f))
    return d


# --- GGUF of the tiny Llama (what llama.cpp's convert_hf_to_gguf.py would write) -------------

def llama_cpp_permute(w, n_head, n_head_kv):
    # convert_hf_to_gguf.py LlamaModel.permute
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_llama_gguf(model, path, qtype):
    c = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-llama")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if qtype == QT.F32 else gguf.LlamaFileType.MOSTLY_Q8_0)

    def put(name, arr):
        arr = np.ascontiguousarray(arr.astype(np.float32))
        if qtype != QT.F32 and arr.ndim == 2:
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, arr)

    put("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        put(f"blk.{i}.attn_q.weight", llama_cpp_permute(sd[p + "self_attn.q_proj.weight"],
                                                        c.num_attention_heads, c.num_attention_heads))
        put(f"blk.{i}.attn_k.weight", llama_cpp_permute(sd[p + "self_attn.k_proj.weight"],
                                                        c.num_attention_heads, c.num_key_value_heads))
        put(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        put(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        put(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        put(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        put(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        put(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    put("output_norm.weight", sd["model.norm.weight"])
    put("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_qwen3_gguf(model, path):
    """qwen3 / qwen3moe as llama.cpp's Qwen3Model / Qwen3MoeModel converters write them: no
    Q/K permutation (NEOX RoPE), attn_{q,k}_norm, stacked experts; all F32."""
    c = model.config
    moe = c.model_type == "qwen3_moe"
    sd = {k: v for k, v in canonical_state(model).items()}
    w = gguf.GGUFWriter(path, "qwen3moe" if moe else "qwen3")
    w.add_name("tiny-" + c.model_type.replace("_", ""))
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    if moe:
        w.add_expert_count(c.num_experts)
        w.add_expert_used_count(c.num_experts_per_tok)
        w.add_expert_feed_forward_length(c.moe_intermediate_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    def put(name, arr):
        w.add_tensor(name, np.ascontiguousarray(arr.astype(np.float32)))

    put("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        put(f"blk.{i}.attn_q.weight", sd[p + "self_attn.q_proj.weight"])
        put(f"blk.{i}.attn_k.weight", sd[p + "self_attn.k_proj.weight"])
        put(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        put(f"blk.{i}.attn_q_norm.weight", sd[p + "self_attn.q_norm.weight"])
        put(f"blk.{i}.attn_k_norm.weight", sd[p + "self_attn.k_norm.weight"])
        put(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        put(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        if p + "mlp.gate.weight" in sd:
            put(f"blk.{i}.ffn_gate_inp.weight", sd[p + "mlp.gate.weight"])
            for src, dst in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"),
                             ("down_proj", "ffn_down_exps")):
                put(f"blk.{i}.{dst}.weight",
                    np.stack([sd[f"{p}mlp.experts.{e}.{src}.weight"]
                              for e in range(c.num_experts)]))
        else:
            put(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
            put(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
            put(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    put("output_norm.weight", sd["model.norm.weight"])
    if "lm_head.weight" in sd:
        put("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_deepseek_gguf(model, path, qtype=QT.F32):
    """DeepSeek-V3 as llama.cpp's DeepseekV2Model converter writes it ("deepseek2"): MLA run as
    MQA (head_count_kv 1, key_length kv_lora + rope, value_length kv_lora; the per-head sizes
    in key_length_mla / value_length_mla), kv_b_proj split into attn_k_b (W_UK transposed per
    head) and attn_v_b, rope rows as HF stores them (llama.cpp rotates adjacent pairs),
    e_score_correction_bias as exp_probs_b.bias, stacked experts; all F32, or with `qtype`
    every 2-D / 3-D weight whose rows are whole blocks of 32 quantized by gguf-py (attn_k_b,
    whose rows are nope = 16 wide, and the experts' down_proj stay F32)."""
    c = model.config
    sd = canonical_state(model)
    w = gguf.GGUFWriter(path, "deepseek2")
    w.add_name("tiny-deepseek")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    w.add_leading_dense_block_count(c.first_k_dense_replace)
    w.add_q_lora_rank(c.q_lora_rank)
    w.add_kv_lora_rank(c.kv_lora_rank)
    w.add_key_length(c.kv_lora_rank + c.qk_rope_head_dim)
    w.add_value_length(c.kv_lora_rank)
    w.add_key_length_mla(c.qk_nope_head_dim + c.qk_rope_head_dim)
    w.add_value_length_mla(c.v_head_dim)
    w.add_expert_feed_forward_length(c.moe_intermediate_size)
    w.add_expert_count(c.n_routed_experts)
    w.add_expert_used_count(c.num_experts_per_tok)
    w.add_expert_shared_count(c.n_shared_experts)
    w.add_expert_weights_scale(c.routed_scaling_factor)
    w.add_expert_weights_norm(c.norm_topk_prob)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_group_count(c.n_group)
    w.add_expert_group_used_count(c.topk_group)
    w.add_rope_dimension_count(c.qk_rope_head_dim)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if qtype == QT.F32
                    else gguf.LlamaFileType.MOSTLY_Q8_0)

    def put(name, arr):
        arr = np.ascontiguousarray(arr.astype(np.float32))
        if qtype != QT.F32 and arr.ndim >= 2 and arr.shape[-1] % 32 == 0:
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, arr)

    nh, nope, vd = c.num_attention_heads, c.qk_nope_head_dim, c.v_head_dim
    put("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        put(b + "attn_norm.weight", sd[p + "input_layernorm.weight"])
        put(b + "attn_q_a.weight", sd[p + "self_attn.q_a_proj.weight"])
        put(b + "attn_q_a_norm.weight", sd[p + "self_attn.q_a_layernorm.weight"])
        put(b + "attn_q_b.weight", sd[p + "self_attn.q_b_proj.weight"])
        put(b + "attn_kv_a_mqa.weight", sd[p + "self_attn.kv_a_proj_with_mqa.weight"])
        put(b + "attn_kv_a_norm.weight", sd[p + "self_attn.kv_a_layernorm.weight"])
        kv_b = sd[p + "self_attn.kv_b_proj.weight"].reshape(nh, nope + vd, -1)
        put(b + "attn_k_b.weight", np.ascontiguousarray(kv_b[:, :nope, :].transpose(0, 2, 1)))
        put(b + "attn_v_b.weight", kv_b[:, nope:, :])
        put(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        put(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        if p + "mlp.gate.weight" in sd:
            put(b + "ffn_gate_inp.weight", sd[p + "mlp.gate.weight"])
            put(b + "exp_probs_b.bias", sd[p + "mlp.gate.e_score_correction_bias"])
            for src, dst in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"),
                             ("down_proj", "ffn_down_exps")):
                put(f"{b}{dst}.weight",
                    np.stack([sd[f"{p}mlp.experts.{e}.{src}.weight"]
                              for e in range(c.n_routed_experts)]))
            for src, dst in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"),
                             ("down_proj", "ffn_down_shexp")):
                put(f"{b}{dst}.weight", sd[f"{p}mlp.shared_experts.{src}.weight"])
        else:
            put(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
            put(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"])
            put(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    put("output_norm.weight", sd["model.norm.weight"])
    put("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def load_gguf_model(path):
    d, f = os.path.split(path)
    return AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                attn_implementation="eager").eval()


# --- the builtin models, regenerated independently ----------------------------------------

M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _fnv1a64(s):
    h = 0xcbf29ce484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def builtin_random(name, shape, sigma):
    """runtime/src/loaders/builtin.cc: splitmix64 counter → Irwin–Hall(4), fp32 arithmetic."""
    seed = 0x6c6c6d72720001
    with np.errstate(over="ignore"):
        key = _mix64(np.uint64(seed ^ _fnv1a64(name)))
        i = np.arange(int(np.prod(shape)), dtype=np.uint64)
        r = _mix64(key + (i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15))
    s = sum(((r >> np.uint64(16 * k)) & np.uint64(0xffff)).astype(np.int32) for k in range(4))
    scale = np.float32(1.7320508075688772) / np.float32(65536.0)
    z = (s - np.int32(131070)).astype(np.float32) * scale
    return (z * np.float32(sigma)).reshape(shape)


def _class_weight(t):
    if t == 256:
        return -3.0
    if t == 257:
        return -1.0
    c = chr(t)
    if "a" <= c <= "z":
        return 1.0
    if c == " ":
        return 0.9
    if "A" <= c <= "Z" or c in ".,;:!?'-":
        return 0.4
    if "0" <= c <= "9":
        return 0.2
    if c == "\n":
        return 0.0
    if 0x20 < t < 0x7f:
        return -0.5
    return -2.0


def builtin_state(moe):
    h, vocab, layers, heads, kvh, hd, ffn, experts, effn = 256, 258, 4, 8, 4, 32, 688, 8, 256
    f32 = np.float32
    sd = {}

    def lin(name, out, inp, gain):
        sd[name] = builtin_random(name, (out, inp), f32(gain) / np.sqrt(f32(inp)))

    def norm(name):
        sd[name] = builtin_random(name, (h,), 0.1) + f32(1.0)

    emb = builtin_random("model.embed_tokens.weight", (vocab, h), 1.0)
    emb[:, 0] = f32(4.0)
    sd["model.embed_tokens.weight"] = emb
    for l in range(layers):
        p = f"model.layers.{l}."
        norm(p + "input_layernorm.weight")
        norm(p + "post_attention_layernorm.weight")
        lin(p + "self_attn.q_proj.weight", heads * hd, h, 1.2)
        lin(p + "self_attn.k_proj.weight", kvh * hd, h, 1.2)
        lin(p + "self_attn.v_proj.weight", kvh * hd, h, 1.0)
        lin(p + "self_attn.o_proj.weight", h, heads * hd, 0.5)
        if not moe:
            lin(p + "mlp.gate_proj.weight", ffn, h, 1.0)
            lin(p + "mlp.up_proj.weight", ffn, h, 1.0)
            lin(p + "mlp.down_proj.weight", h, ffn, 0.5)
        else:
            m = p + "block_sparse_moe."
            lin(m + "gate.weight", experts, h, 1.0)
            sd[m + "gate.weight"][:, 0] *= f32(0.1)
            for e in range(experts):
                ep = f"{m}experts.{e}."
                lin(ep + "w1.weight", effn, h, 1.0)
                lin(ep + "w3.weight", effn, h, 1.0)
                lin(ep + "w2.weight", h, effn, 0.5)
    fnorm = builtin_random("model.norm.weight", (h,), 0.1) + f32(1.0)
    fnorm[0] = f32(1.0)
    sd["model.norm.weight"] = fnorm
    head = builtin_random("lm_head.weight", (vocab, h), 0.12)
    head[:, 1:] = head[:, 1:] - f32(0.02) * emb[:, 1:]
    head[:, 0] = np.array([_class_weight(t) for t in range(vocab)], dtype=f32)
    sd["lm_head.weight"] = head
    cfg = {"architectures": ["MixtralForCausalLM" if moe else "LlamaForCausalLM"],
           "model_type": "mixtral" if moe else "llama", "vocab_size": vocab, "hidden_size": h,
           "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kvh,
           "head_dim": hd, "intermediate_size": effn if moe else ffn, "rms_norm_eps": 1e-5,
           "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
           "max_position_embeddings": 4096, "tie_word_embeddings": False, "bos_token_id": 256,
           "eos_token_id": 257, "hidden_act": "silu"}
    if moe:
        cfg.update({"num_local_experts": experts, "num_experts_per_tok": 2,
                    "sliding_window": None})
    return sd, cfg


BUILTIN_PROMPTS = {
    "hello": [256] + list(b"Hello, world"),
    "fox": [256] + list(b"The quick brown fox jumps over the lazy dog."),
}


def builtin_fixture(out_dir, tmp_dir, name, moe):
    sd, cfg = builtin_state(moe)
    d = os.path.join(tmp_dir, name)
    os.makedirs(d, exist_ok=True)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                             attn_implementation="eager").eval()
    prompts, spread = run_prompts(m, BUILTIN_PROMPTS, out_dir, f"builtin-{name}")
    greedy = m.generate(torch.tensor([BUILTIN_PROMPTS["hello"]]), max_new_tokens=24,
                        do_sample=False)[0].tolist()
    return {"model": f"builtin:{name}", "prompts": prompts, "tensors": tensor_table(sd),
            "rerun_max_abs_diff": spread,
            "greedy_hello_24": greedy[len(BUILTIN_PROMPTS["hello"]):]}


# --- dequantization blocks ----------------------------------------------------------------

def dequant_fixtures(out_dir):
    """Random blocks of every quant type (scale fields forced to finite fp16) and what
    gguf-py's dequantize (the code transformers calls) makes of them."""
    rng = np.random.default_rng(77)
    d = os.path.join(out_dir, "dequant")
    os.makedirs(d, exist_ok=True)
    table = {}
    # (type, offsets of fp16 scale fields inside a block)
    types = {
        QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0],
        QT.Q2_K: [80, 82], QT.Q3_K: [108], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208],
        QT.F16: None, QT.BF16: None,
    }
    for qt, scale_offsets in types.items():
        block, size = gguf.GGML_QUANT_SIZES[qt]
        nblocks = 4 if block > 1 else 64
        raw = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
        if scale_offsets is not None:
            for off in scale_offsets:
                # fp16 in [2^-14, 2): sign random, exponent 1..15, any mantissa.
                hv = (rng.integers(0, 2, nblocks) << 15) | (rng.integers(1, 16, nblocks) << 10) | \
                    rng.integers(0, 1024, nblocks)
                raw[:, off] = (hv & 0xff).astype(np.uint8)
                raw[:, off + 1] = (hv >> 8).astype(np.uint8)
        elif qt == QT.F16:
            v = rng.standard_normal(nblocks).astype(np.float16)
            v[:4] = np.array([0.0, -0.0, 6.1e-5, 65504], dtype=np.float16)  # incl. a subnormal
            raw = v.view(np.uint8).reshape(nblocks, size)
        elif qt == QT.BF16:
            v = (rng.standard_normal(nblocks).astype(np.float32).view(np.uint32) >> 16)
            raw = v.astype(np.uint16).view(np.uint8).reshape(nblocks, size)
        flat = raw.reshape(-1)
        expected = gguf.quants.dequantize(flat, qt).astype(np.float32).reshape(-1)
        flat.tofile(os.path.join(d, f"{qt.name}.blocks.bin"))
        save_npy(os.path.join(d, f"{qt.name}.expected.npy"), expected)
        table[qt.name] = {"type": int(qt), "blocks": nblocks, "block_bytes": size,
                          "values": int(expected.size)}
    return table


# --- SmolLM2 ---------------------------------------------------------------------------------

SMOL_STRINGS = [
    "Hello, world!",
    "The year 2024 had 366 days.",
    "<|im_start|>user\nHi<|im_end|>",
    "  multiple   spaces\n\nnewlines\ttabs",
    "h\u00e9llo w\u00f6rld \u2014 \u00fcn\u00efc\u00f6d\u00e9 \u65e5\u672c\u8a9e \U0001F642",
    "it's we'll I'M can't",
    "def f(x):\n    return x**2  # square",
    "",
]


def smollm2_fixture(out_dir, path):
    d, f = os.path.split(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    chat = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   tokenize=False, add_generation_prompt=True)
    strings = [{"text": s, "ids": tok.encode(s, add_special_tokens=False)} for s in SMOL_STRINGS]
    strings.append({"text": chat, "ids": tok.encode(chat, add_special_tokens=False)})
    model = load_gguf_model(path)
    prompts = {
        "chat_france": tok.encode(chat, add_special_tokens=False),
        "fox": tok.encode("The quick brown fox", add_special_tokens=False),
        "story": tok.encode("Once upon a time, in a small village by the sea, there lived",
                            add_special_tokens=False),
    }
    keep = {"chat_france": 4, "fox": 2, "story": 1}  # rows of 49152 logits: mind the size
    entries = {}
    spread = 0.0
    for name, ids in prompts.items():
        e, s = run_prompts(model, {name: ids}, out_dir, "smollm2", keep_last=keep[name])
        entries.update(e)
        spread = max(spread, s)
    gen = model.generate(torch.tensor([prompts["chat_france"]]), max_new_tokens=16,
                         do_sample=False)[0].tolist()[len(prompts["chat_france"]):]
    return {
        "file": os.path.basename(path),
        "chat_template_render": chat,
        "tokenizer": strings,
        "prompts": entries,
        "rerun_max_abs_diff": spread,
        "greedy_chat_france_16": gen,
        "greedy_chat_france_16_text": tok.decode(gen),
        "tensors": tensor_table(canonical_state(model)),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--smollm2", default=os.path.join(
        os.environ.get("LLMRR_MODEL_DIR", os.path.expanduser("~/.cache/llmrr/models")),
        "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tmp", default="/tmp/llmrr-conformance")
    args = ap.parse_args()
    out = args.out
    ref = os.path.join(out, "reference")
    for sub in ("reference", "dequant"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    os.makedirs(ref, exist_ok=True)
    os.makedirs(args.tmp, exist_ok=True)
    manifest = {"generator": "tools/conformance/make_fixtures.py",
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                             "gguf": getattr(gguf, "__version__", "?"), "numpy": np.__version__},
                "models": {}}

    for name, build in (("tiny-llama", tiny_llama), ("tiny-mixtral", tiny_mixtral),
                        ("tiny-qwen2moe", tiny_qwen2moe), ("tiny-qwen3", tiny_qwen3),
                        ("tiny-qwen3moe", tiny_qwen3moe), ("tiny-deepseek", tiny_deepseek),
                        ("tiny-deepseek-qproj", tiny_deepseek_qproj)):
        m = build()
        save_hf(m, out, name)
        # Reload what was written, so the reference is computed from the files we ship.
        m = AutoModelForCausalLM.from_pretrained(os.path.join(out, name), dtype=torch.float32,
                                                 attn_implementation="eager").eval()
        prompts, spread = run_prompts(m, TINY_PROMPTS, ref, name)
        entry = {"path": name, "format": "safetensors", "prompts": prompts,
                 "tensors": tensor_table(canonical_state(m)), "rerun_max_abs_diff": spread}
        if m.config.model_type not in ("llama", "qwen3"):
            entry["min_router_margin"] = min(router_margin(m, ids) for ids in TINY_PROMPTS.values())
        manifest["models"][name] = entry
        print(name, "spread", spread, "margin", entry.get("min_router_margin"), file=sys.stderr)

        if name.startswith("tiny-deepseek"):
            entry["greedy"] = greedy_entry(m, ref, name)
        if name == "tiny-deepseek":
            gpath = os.path.join(out, f"{name}-f32.gguf")
            write_deepseek_gguf(m, gpath)
            gentry = {"path": f"{name}-f32.gguf", "format": "gguf", "prompts": prompts,
                      "tensors": entry["tensors"], "rerun_max_abs_diff": spread,
                      "greedy": entry["greedy"]}
            try:
                g = load_gguf_model(gpath)
                gentry["transformers_gguf"] = max(
                    float(np.abs(logits_of(g, ids) - logits_of(m, ids)).max())
                    for ids in TINY_PROMPTS.values())
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                gentry["transformers_gguf"] = f"not loadable: {type(e).__name__}"
            manifest["models"][f"{name}-f32.gguf"] = gentry
            # Q8_0: no transformers reference (it cannot load deepseek2); the engine must compute
            # the same bits with the weights kept quantized as with them dequantized at load.
            write_deepseek_gguf(m, os.path.join(out, f"{name}-q8_0.gguf"), QT.Q8_0)
            manifest["models"][f"{name}-q8_0.gguf"] = {
                "path": f"{name}-q8_0.gguf", "format": "gguf", "quantized": "Q8_0",
                "transformers_gguf": gentry["transformers_gguf"]}
        if name.startswith("tiny-qwen3"):
            entry["greedy"] = greedy_entry(m, ref, name)
            # The same checkpoint as GGUF. Its reference is the safetensors model's logits
            # (F32: the same bits); `transformers_gguf` says whether transformers could load
            # the file itself, and if so how far its logits are from those.
            gpath = os.path.join(out, f"{name}-f32.gguf")
            write_qwen3_gguf(m, gpath)
            gentry = {"path": f"{name}-f32.gguf", "format": "gguf", "prompts": prompts,
                      "tensors": entry["tensors"], "rerun_max_abs_diff": spread,
                      "greedy": entry["greedy"]}
            try:
                g = load_gguf_model(gpath)
                gentry["transformers_gguf"] = max(
                    float(np.abs(logits_of(g, ids) - logits_of(m, ids)).max())
                    for ids in TINY_PROMPTS.values())
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                gentry["transformers_gguf"] = f"not loadable: {type(e).__name__}"
            manifest["models"][f"{name}-f32.gguf"] = gentry

        if name == "tiny-llama":
            # bf16 checkpoint of the same weights, and transformers' bf16 logits.
            mb = m.to(torch.bfloat16)
            save_hf(mb, out, "tiny-llama-bf16")
            mb = AutoModelForCausalLM.from_pretrained(os.path.join(out, "tiny-llama-bf16"),
                                                      dtype=torch.bfloat16,
                                                      attn_implementation="eager").eval()
            p16, s16 = run_prompts(mb, TINY_PROMPTS, ref, "tiny-llama-bf16")
            # fp32 compute on the bf16-rounded weights: isolates activation rounding.
            mf = AutoModelForCausalLM.from_pretrained(os.path.join(out, "tiny-llama-bf16"),
                                                      dtype=torch.float32,
                                                      attn_implementation="eager").eval()
            pf, _ = run_prompts(mf, TINY_PROMPTS, ref, "tiny-llama-bf16-fp32compute")
            gap = max(float(np.abs(np.load(os.path.join(ref, p16[k]["logits"])) -
                                   np.load(os.path.join(ref, pf[k]["logits"]))).max()) for k in p16)
            manifest["models"]["tiny-llama-bf16"] = {
                "path": "tiny-llama-bf16", "format": "safetensors", "dtype": "bf16",
                "prompts": p16, "prompts_fp32_compute": pf, "rerun_max_abs_diff": s16,
                "bf16_vs_fp32_compute_max_abs_diff": gap,
                "tensors": tensor_table(canonical_state(mf))}
            m = m.float()
            for qname, qt in (("f32", QT.F32), ("q8_0", QT.Q8_0)):
                gpath = os.path.join(out, f"tiny-llama-{qname}.gguf")
                write_llama_gguf(tiny_llama(), gpath, qt)
                g = load_gguf_model(gpath)
                gp, gs = run_prompts(g, TINY_PROMPTS, ref, f"tiny-llama-{qname}.gguf")
                manifest["models"][f"tiny-llama-{qname}.gguf"] = {
                    "path": f"tiny-llama-{qname}.gguf", "format": "gguf", "prompts": gp,
                    "tensors": tensor_table(canonical_state(g)), "rerun_max_abs_diff": gs}

    for name, moe in (("tiny-dense", False), ("tiny-moe", True)):
        manifest["models"][f"builtin-{name}"] = builtin_fixture(ref, args.tmp, name, moe)

    manifest["dequant"] = dequant_fixtures(out)
    if os.path.exists(args.smollm2):
        manifest["smollm2"] = smollm2_fixture(ref, args.smollm2)
    else:
        print(f"SmolLM2 not found at {args.smollm2}: its fixtures are skipped", file=sys.stderr)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
