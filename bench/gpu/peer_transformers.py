#!/usr/bin/env python3
"""The peer of gpu_engine_bench: Hugging Face transformers' decode tokens/s on the same shape
(a Llama checkpoint directory, bf16), greedy, a fixed number of new tokens, batch 1 and 16,
two ways: `eager` (dynamic cache, no compile) and `compiled` (static cache + torch.compile
through transformers' own CompileConfig, which marks each CUDA-graph step itself; a plain
torch.compile(mode="reduce-overhead") over a static cache raises CUDA graphs' "overwritten"
error). Prints one table: mode, batch, new tokens, median seconds, tok/s.

    python3 bench/gpu/peer_transformers.py --model DIR [--device cuda|cpu] [--tokens 64]
        [--batches 1,16] [--reps 3] [--modes eager,compiled]

Prompts are token ids (the same short prompts as gpu_engine_bench), so a tokenizer-less
checkpoint (bench/gpu/make_random_llama.py) works. The first run of each mode/batch is a
warm-up (compilation) and is not counted.
"""
import argparse
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a Hugging Face Llama checkpoint directory")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per request")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default="eager,compiled")
    a = ap.parse_args()
    try:
        batches = [int(b) for b in a.batches.split(",")]
    except ValueError:
        print(f"peer_transformers: --batches {a.batches!r}: expected integers like 1,16",
              file=sys.stderr)
        return 2
    modes = a.modes.split(",")
    for m in modes:
        if m not in ("eager", "compiled"):
            print(f"peer_transformers: --modes: unknown mode {m!r}; expected eager, compiled",
                  file=sys.stderr)
            return 2
    if a.tokens < 1 or a.reps < 1 or any(b < 1 for b in batches):
        print("peer_transformers: --tokens, --reps and batches must be at least 1", file=sys.stderr)
        return 2
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.generation.configuration_utils import CompileConfig

    if a.device == "cuda" and not torch.cuda.is_available():
        print("peer_transformers: no CUDA device (use --device cpu)", file=sys.stderr)
        return 2
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).to(a.device)
    model.eval()

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    def run(mode: str, batch: int) -> float:
        prompt = [[1, 504, 3458 + i, 314, 260, 5865] for i in range(batch)]
        ids = torch.tensor(prompt, device=a.device) % model.config.vocab_size
        kw = dict(max_new_tokens=a.tokens, min_new_tokens=a.tokens, do_sample=False,
                  attention_mask=torch.ones_like(ids), pad_token_id=0)
        if mode == "compiled":
            cc = CompileConfig(fullgraph=False, mode="reduce-overhead" if a.device == "cuda"
                               else "default")
            cc._compile_all_devices = True  # transformers compiles on CUDA only otherwise
            kw.update(cache_implementation="static", compile_config=cc)
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, **kw)
        sync()
        dt = time.perf_counter() - t0
        assert out.shape == (batch, ids.shape[1] + a.tokens), out.shape
        return dt

    print(f"# transformers peer: {a.model} on {a.device} "
          f"({torch.cuda.get_device_name() if a.device == 'cuda' else 'cpu'}), bf16, "
          f"{a.tokens} new tokens, median of {a.reps}")
    print(f"{'mode':<10} {'batch':>5} {'tokens':>7} {'seconds':>9} {'tok/s':>10}")
    for mode in modes:
        for batch in batches:
            run(mode, batch)  # warm-up / compilation
            times = [run(mode, batch) for _ in range(a.reps)]
            med = statistics.median(times)
            print(f"{mode:<10} {batch:>5} {batch * a.tokens:>7} {med:>9.3f} "
                  f"{batch * a.tokens / med:>10.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
