"""generate.py MODEL JSON: one vLLM offline run for the vLLM tests and the fuzz study.

JSON: prompts (lists of token ids), and optionally max_tokens (8, or one per prompt), dtype
("float32"), mbt (max_num_batched_tokens, 256), seqs (max_num_seqs, 16), prefix (prefix
caching, false), block (KV block size, vLLM's default), blocks (KV blocks, to provoke
preemption), eager (false: vLLM compiles the model), moe_oracle (in-process only: every MoE layer call's expert ids as vLLM's fused
experts received them, and the top-k of a softmax over the router logits, printed in call
order as a second line "MOE_ORACLE [...]"). Prints the generated token ids of each prompt as
one JSON line. Recording is switched on by
the environment (LLMRR_VLLM_TRACE), as for any vLLM program."""
import json
import sys


def main():
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    a = json.loads(sys.argv[2])
    extra = {}
    if a.get("block"):
        extra["block_size"] = a["block"]
    if a.get("blocks"):
        extra["num_gpu_blocks_override"] = a["blocks"]
    if a.get("attention_backend"):
        extra["attention_backend"] = a["attention_backend"]
    llm = LLM(model=sys.argv[1], skip_tokenizer_init=True, enforce_eager=a.get("eager", True),
              dtype=a.get("dtype", "float32"), max_model_len=256,
              kv_cache_memory_bytes=64 << 20, max_num_batched_tokens=a.get("mbt", 256),
              max_num_seqs=a.get("seqs", 16), seed=0,
              enable_prefix_caching=a.get("prefix", False), **extra)
    calls = []
    if a.get("moe_oracle"):
        watch_moe(llm, calls)
    mt = a.get("max_tokens", 8)
    mts = mt if isinstance(mt, list) else [mt] * len(a["prompts"])
    sps = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True, detokenize=False)
           for m in mts]
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in a["prompts"]], sps,
                        use_tqdm=False)
    print(json.dumps([list(o.outputs[0].token_ids) for o in outs]), flush=True)
    if a.get("moe_oracle"):
        print("MOE_ORACLE " + json.dumps(calls), flush=True)


def watch_moe(llm, calls):
    """What each MoE layer's experts ran with, seen from the experts' side (not through
    select_experts, which llmrr.runtimes.vllm wraps): the ids forward_modular received, and the
    top-k of softmax(router logits) from the gate's output, one entry per call, in call order."""
    import torch
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.get_model()
    for name, m in model.named_modules():
        experts = getattr(m, "routed_experts", None)
        if experts is None or not hasattr(experts, "forward_modular"):
            continue
        layer = int(name.split("layers.")[1].split(".")[0])
        orig = experts.forward_modular

        def forward_modular(*args, _orig=orig, _layer=layer, **kw):
            calls.append({"layer": _layer, "ids": kw["topk_ids"].tolist()})
            return _orig(*args, **kw)
        experts.forward_modular = forward_modular
    for name, m in model.named_modules():
        gate = getattr(m, "gate", None)
        if gate is None or not hasattr(m, "experts"):
            continue
        k = int(llm.llm_engine.model_config.hf_config.num_experts_per_tok)

        def hook(mod, args, out, _k=k):
            logits = out[0] if isinstance(out, tuple) else out
            top = torch.topk(torch.softmax(logits.float(), dim=-1), _k, dim=-1).indices
            calls.append({"softmax_topk": top.tolist()})
        gate.register_forward_hook(hook)


if __name__ == "__main__":  # vLLM's multiprocess mode starts workers that import this file
    main()
