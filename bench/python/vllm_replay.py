"""bench/python/vllm_replay.py: record vLLM runs with llmrr.runtimes.vllm and replay each with
`llmrr replay --runtime vllm`; prints one table row per run (setting, steps, requests, verdict,
record and replay seconds) and how many replayed bit-exact.

    build/venv-vllm/bin/python bench/python/vllm_replay.py --out /tmp/vr [--runs 24]

Runs (24 by default, in this order): a seeded random Llama (tests/vllm/make_model.py, hidden
128, 2 layers), a SmolLM2-shaped one with 4 layers, and a random Mixtral (4 experts, top-2),
each in fp32 and bf16, under settings that stagger arrivals and finishes (max_num_seqs below
the number of prompts, different max_tokens), chunk prefills (max_num_batched_tokens 16 to
64), hit the prefix cache (prompts sharing a 40-token prefix, block size 32) and preempt (a
KV cache of 9 blocks). Needs $LLMRR_BIN (the llmrr binary) and the llmrr package on
PYTHONPATH with $LLMRR_RECORDER_LIB, as the vLLM tests have them.
"""
import argparse
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))
from vllm_common import generate, make_model  # noqa: E402

MIXTRAL = """
import sys, torch
from transformers import MixtralConfig, MixtralForCausalLM
torch.manual_seed(0)
cfg = MixtralConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=1, num_local_experts=4,
                    num_experts_per_tok=2, max_position_embeddings=256, eos_token_id=1,
                    bos_token_id=0)
MixtralForCausalLM(cfg).to(torch.float32).save_pretrained(sys.argv[1])
"""

SETTINGS = [  # (name, generate.py settings)
    ("seqs3-mbt32-prefix", dict(seqs=3, mbt=32, prefix=True, block=32)),
    ("seqs4-mbt64", dict(seqs=4, mbt=64, block=32)),
    ("seqs8-preempt", dict(seqs=8, mbt=64, block=32, blocks=9)),
    ("seqs2-mbt16-prefix", dict(seqs=2, mbt=16, prefix=True, block=32)),
]


def workload(seed, n, vocab):
    rng = random.Random(seed)
    prefix = [rng.randrange(2, vocab) for _ in range(40)]
    prompts, max_tokens = [], []
    for i in range(n):
        if i % 3 == 1:
            p = prefix + [rng.randrange(2, vocab) for _ in range(rng.randint(2, 8))]
        else:
            p = [rng.randrange(2, vocab) for _ in range(rng.randint(3, 60))]
        prompts.append(p)
        max_tokens.append(rng.randint(2, 24))
    return prompts, max_tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=24)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    models = {"llama": os.path.join(a.out, "tiny-llama"), "smol4": os.path.join(a.out, "smol4"),
              "mixtral": os.path.join(a.out, "tiny-mixtral")}
    if not os.path.isdir(models["llama"]):
        make_model(models["llama"])
    if not os.path.isdir(models["smol4"]):
        make_model(models["smol4"], "smollm2:4")
    if not os.path.isdir(models["mixtral"]):
        subprocess.run([sys.executable, "-c", MIXTRAL, models["mixtral"]], check=True,
                       capture_output=True)
    plan = [(model, dtype, name, kw) for model in ("llama", "mixtral", "smol4")
            for dtype in ("float32", "bfloat16") for name, kw in SETTINGS][:a.runs]
    rows, exact = [], 0
    for i, (model, dtype, name, kw) in enumerate(plan):
        vocab = 49152 if model == "smol4" else 512
        prompts, max_tokens = workload(100 + i, 24, vocab)
        trace = os.path.join(a.out, "run%02d-%s-%s-%s.trace" % (i, model, dtype, name))
        t0 = time.time()
        generate(models[model], trace, prompts, max_tokens=max_tokens, capture="layers",
                 dtype=dtype, **kw)
        rec_s = time.time() - t0
        t0 = time.time()
        p = subprocess.run([os.environ["LLMRR_BIN"], "replay", "--runtime", "vllm", trace,
                            "--model", models[model]], capture_output=True, text=True)
        rep_s = time.time() - t0
        steps = next((ln.split(": ")[1].split(" steps")[0] for ln in p.stdout.splitlines()
                      if ln.startswith("replayed ")), "?")
        verdict = "bit-exact" if p.returncode == 0 and "bit-exact" in p.stdout else \
            "DIFFERS (exit %d)" % p.returncode
        exact += verdict == "bit-exact"
        rows.append((i, model, dtype, name, steps, len(prompts), verdict, rec_s, rep_s))
        print("| %d | %s | %s | %s | %s | %d | %s | %.1f | %.1f |" % rows[-1], flush=True)
        if verdict != "bit-exact":
            print(p.stdout[-3000:] + p.stderr[-2000:], file=sys.stderr)
    print("\n%d of %d recorded vLLM runs replay bit-exact" % (exact, len(rows)))
    return 0 if exact == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
