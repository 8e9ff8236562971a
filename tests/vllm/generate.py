"""generate.py MODEL JSON: one vLLM offline run for the vLLM tests and the fuzz study.

JSON: prompts (lists of token ids), and optionally max_tokens (8, or one per prompt), dtype
("float32"), mbt (max_num_batched_tokens, 256), seqs (max_num_seqs, 16), prefix (prefix
caching, false), block (KV block size, vLLM's default), blocks (KV blocks, to provoke
preemption). Prints the generated token ids of each prompt as one JSON line. Recording is switched on by
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
    llm = LLM(model=sys.argv[1], skip_tokenizer_init=True, enforce_eager=True,
              dtype=a.get("dtype", "float32"), max_model_len=256,
              kv_cache_memory_bytes=64 << 20, max_num_batched_tokens=a.get("mbt", 256),
              max_num_seqs=a.get("seqs", 16), seed=0,
              enable_prefix_caching=a.get("prefix", False), **extra)
    mt = a.get("max_tokens", 8)
    mts = mt if isinstance(mt, list) else [mt] * len(a["prompts"])
    sps = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True, detokenize=False)
           for m in mts]
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in a["prompts"]], sps,
                        use_tqdm=False)
    print(json.dumps([list(o.outputs[0].token_ids) for o in outs]), flush=True)


if __name__ == "__main__":  # vLLM's multiprocess mode starts workers that import this file
    main()
