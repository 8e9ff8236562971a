"""make_model.py DIR [HIDDEN LAYERS]: a seeded random Llama checkpoint vLLM's CPU backend runs
(head_dim 64: its CPU attention has no kernel for the fixtures' head_dim 16).
make_model.py DIR smollm2[:LAYERS]: SmolLM2-135M's shape (hidden 576, 9 heads, 3 kv heads,
intermediate 1536, vocab 49152, tied embeddings; 30 layers unless LAYERS), seeded random weights."""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    if len(sys.argv) > 2 and sys.argv[2].startswith("smollm2"):
        layers = int(sys.argv[2].split(":")[1]) if ":" in sys.argv[2] else 30
        cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                          num_hidden_layers=layers, num_attention_heads=9, num_key_value_heads=3,
                          max_position_embeddings=2048, tie_word_embeddings=True, rope_theta=1e5,
                          rms_norm_eps=1e-5, eos_token_id=0, bos_token_id=1)
        torch.manual_seed(0)
        LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(sys.argv[1])
        return
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
