"""make_moe_model.py KIND DIR: a seeded random tiny MoE checkpoint vLLM's CPU backend runs, for
the routing tests. KIND: mixtral (4 experts, top-2, softmax), qwen3moe (8 experts, top-2,
norm_topk_prob), deepseek (DeepSeek-V3: MLA with kv_lora 512 + rope 64, the head size vLLM's
CPU MLA takes; 8 routed experts in 4 groups, top-2 of the best 2 groups, sigmoid scores with
an e_score_correction_bias, a shared expert, the first layer dense)."""
import json
import os
import sys

import torch


def main():
    kind, out = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    common = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=2, max_position_embeddings=256, eos_token_id=1,
                  bos_token_id=0)
    if kind == "mixtral":
        from transformers import MixtralConfig, MixtralForCausalLM
        m = MixtralForCausalLM(MixtralConfig(num_key_value_heads=1, num_local_experts=4,
                                             num_experts_per_tok=2, **common))
    elif kind == "qwen3moe":
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
        m = Qwen3MoeForCausalLM(Qwen3MoeConfig(
            num_key_value_heads=1, head_dim=64, moe_intermediate_size=64, num_experts=8,
            num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
            **common))
    elif kind == "deepseek":
        from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
        m = DeepseekV3ForCausalLM(DeepseekV3Config(
            num_key_value_heads=2, moe_intermediate_size=64, n_routed_experts=8,
            num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
            first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=512, qk_rope_head_dim=64,
            qk_nope_head_dim=128, v_head_dim=128, rope_scaling=None, routed_scaling_factor=2.5,
            norm_topk_prob=True, **common))
        with torch.no_grad():  # a bias that moves the choice without deciding it alone
            for layer in m.model.layers:
                b = getattr(getattr(layer.mlp, "gate", None), "e_score_correction_bias", None)
                if b is not None:
                    b.copy_(torch.randn_like(b) * 0.01)
    else:
        sys.exit("make_moe_model.py: KIND is mixtral, qwen3moe or deepseek, found %r" % kind)
    m.to(torch.float32).save_pretrained(out)
    if kind == "deepseek":  # vLLM reads the router's kind from these (transformers omits them)
        p = os.path.join(out, "config.json")
        cfg = json.load(open(p))
        cfg.update(topk_method="noaux_tc", scoring_func="sigmoid")
        json.dump(cfg, open(p, "w"), indent=1)


if __name__ == "__main__":
    main()
