#!/usr/bin/env python3
"""Writes a randomly initialised Llama checkpoint (bf16 safetensors + config.json, the Hugging
Face layout llmrr's safetensors loader reads) for the GPU check and bench, where the SmolLM2
GGUF (98 MB) cannot travel. The default shape is SmolLM2-135M's: hidden 576, 9 heads, 3 kv
heads, intermediate 1536, 30 layers, vocab 49152, tied embeddings. No tokenizer is written:
prompt with token ids (`llmrr record --prompt-ids ...`).

    python3 bench/gpu/make_random_llama.py OUTDIR [--tiny] [--seed N]

--tiny writes a 2-layer, hidden-64 model of the same kind (for checking this script on a CPU).
OUTDIR must not exist yet (no input is ever overwritten). Needs torch and transformers.
"""
import argparse
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer hidden-64 model instead")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if os.path.exists(a.outdir):
        print(f"make_random_llama: {a.outdir} already exists; expected a new directory",
              file=sys.stderr)
        return 2
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        print(f"make_random_llama: needs torch and transformers ({e})", file=sys.stderr)
        return 2
    shape = dict(hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                 intermediate_size=1536, num_hidden_layers=30, vocab_size=49152)
    if a.tiny:
        shape = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=128, num_hidden_layers=2, vocab_size=256)
    cfg = LlamaConfig(**shape, max_position_embeddings=8192, rope_theta=100000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu",
                      bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(a.outdir, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    print(f"make_random_llama: wrote {a.outdir} ({n / 1e6:.1f} M parameters, bf16, seed {a.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
