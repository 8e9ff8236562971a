"""make_model.py DIR [HIDDEN LAYERS]: a seeded random Llama checkpoint vLLM's CPU backend runs
(head_dim 64: its CPU attention has no kernel for the fixtures' head_dim 16)."""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    hidden = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    cfg = LlamaConfig(vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=hidden // 64,
                      num_key_value_heads=max(1, hidden // 128), max_position_embeddings=256,
                      tie_word_embeddings=False, eos_token_id=1, bos_token_id=0)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(sys.argv[1])


if __name__ == "__main__":
    main()
