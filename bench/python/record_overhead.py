"""Recording cost in a real runtime: throughput recorded over unrecorded, side by side.

    build/venv-vllm/bin/python bench/python/record_overhead.py [--runtime vllm|transformers|both]
        [--layers 30] [--hidden 576] [--batch 8] [--tokens 32] [--rounds 3]

The model is a seeded random Llama of SmolLM2-135M's shape (hidden 576, 9 heads, 3 KV heads,
MLP 1536, 30 layers, vocab 49152), fp32, made once under ~/.cache/llmrr/bench-models. Each
round runs every mode once, in a fresh process, interleaved (off, none, layers, all), so a
noisy machine slows all modes alike; a process warms up with one batch, then times --reps
batches of --batch prompts x --tokens greedy tokens. Prints each mode's median tokens/s and
its ratio to "off" (medians over rounds). A mode "M:thread" (e.g. all:thread, with --modes)
is capture M with the rows copied to and completed on the library's own thread
(LLMRR_INLINE_STEPS=0) instead of fingerprinted where they are on the runtime's thread (the
default for host rows), to measure one against the other. vLLM runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING
=0) with enforce_eager=True (row hooks), or with --compiled as vLLM compiles it (rows through
the llmrr::site_rows op; "all" there is fewer sites than eager's); "off" is the same run
without the plugin switched on. transformers runs generate() with llmrr.runtimes.torch.record.

--breakdown (vLLM) says where capture "all"'s time goes: per round an "off" process, then one
recording process that alternates generates with Recorder.host_rows timed and generates whose
host_rows returns at once (every hook and its Python, no fingerprint).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODES = ["off", "none", "layers", "all"]


def make_model(path, hidden, layers):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    heads = hidden // 64
    cfg = LlamaConfig(vocab_size=49152, hidden_size=hidden, intermediate_size=hidden * 8 // 3,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=heads // 3 if heads % 3 == 0 else 1,
                      max_position_embeddings=2048, tie_word_embeddings=True,
                      eos_token_id=2, bos_token_id=1, rope_theta=100000.0)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(path)


def prompts(batch):
    return [[1] + [(97 * b + 13 * i) % 49000 + 100 for i in range(24 + 3 * b)]
            for b in range(batch)]


def child_vllm(a):
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    llm = LLM(model=a.model, skip_tokenizer_init=True, enforce_eager=not a.compiled,
              dtype="float32",
              max_model_len=512, kv_cache_memory_bytes=256 << 20, max_num_seqs=a.batch,
              max_num_batched_tokens=max(256, a.batch), seed=0, enable_prefix_caching=False)
    sp = SamplingParams(temperature=0, max_tokens=a.tokens, ignore_eos=True, detokenize=False)
    ps = [TokensPrompt(prompt_token_ids=p) for p in prompts(a.batch)]
    if a.mode != "off":
        import llmrr.runtimes.vllm
    llm.generate(ps, sp, use_tqdm=False)  # warm-up (and the recorder's start)
    if a.breakdown:
        return breakdown_vllm(a, llm, ps, sp)
    times = []
    for r in range(a.reps):
        if a.mode != "off":
            llmrr.runtimes.vllm.rotate(os.path.join(a.tmp, "v-%s-%d.trace" % (a.mode, r)))
        t = time.perf_counter()
        llm.generate(ps, sp, use_tqdm=False)
        times.append(time.perf_counter() - t)
    return a.batch * a.tokens / statistics.median(times)


def breakdown_vllm(a, llm, ps, sp):
    """--breakdown: in one recording process, generates with Recorder.host_rows (the rows'
    fingerprints) timed, interleaved with generates whose host_rows returns at once (every hook
    and its Python, no fingerprint); Recorder.end_step (the step stored) is timed in both.
    Returns the median seconds of each, and host_rows' calls and floats per generate (the
    timing adds ~0.3 us a call)."""
    import llmrr.runtimes.vllm
    from llmrr.core.recorder import Recorder
    real_rows, real_end = Recorder.host_rows, Recorder.end_step
    acc = {}

    def timed_rows(self, site, x, rows):
        t = time.perf_counter()
        ok = real_rows(self, site, x, rows)
        acc["rows_s"] += time.perf_counter() - t
        acc["calls"] += 1
        acc["floats"] += rows * x.shape[-1] if ok else 0
        return ok

    def timed_end(self):
        t = time.perf_counter()
        real_end(self)
        acc["end_s"] += time.perf_counter() - t
    Recorder.end_step = timed_end
    out = {}
    try:
        for r in range(a.reps):
            for variant in ("hooks", "all"):
                Recorder.host_rows = (timed_rows if variant == "all"
                                      else (lambda self, s, x, n: True))
                acc.update(rows_s=0.0, end_s=0.0, calls=0, floats=0)
                llmrr.runtimes.vllm.rotate(os.path.join(a.tmp, "b-%s-%d.trace" % (variant, r)))
                t = time.perf_counter()
                llm.generate(ps, sp, use_tqdm=False)
                for k, v in ((variant, time.perf_counter() - t),
                             (variant + "_end_s", acc["end_s"])):
                    out.setdefault(k, []).append(v)
                if variant == "all":
                    out.setdefault("rows_s", []).append(acc["rows_s"])
                    out["calls"], out["floats"] = acc["calls"], acc["floats"]
    finally:
        Recorder.host_rows, Recorder.end_step = real_rows, real_end
    return {k: statistics.median(v) if isinstance(v, list) else v for k, v in out.items()}


def child_transformers(a):
    import torch
    import transformers
    m = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    ps = prompts(a.batch)
    n = max(len(p) for p in ps)
    ids = torch.tensor([[0] * (n - len(p)) + p for p in ps])
    mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in ps])
    kw = dict(attention_mask=mask, max_new_tokens=a.tokens, min_new_tokens=a.tokens,
              do_sample=False, pad_token_id=0)

    def run(i):
        if a.mode == "off":
            with torch.no_grad():
                m.generate(ids, **kw)
        else:
            import llmrr.runtimes.torch
            path = os.path.join(a.tmp, "t-%s-%d.trace" % (a.mode, i))
            with torch.no_grad(), llmrr.runtimes.torch.record(m, path, capture=a.mode):
                m.generate(ids, **kw)
    run(-1)
    times = []
    for r in range(a.reps):
        t = time.perf_counter()
        run(r)
        times.append(time.perf_counter() - t)
    return a.batch * a.tokens / statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runtime", default="both", choices=["vllm", "transformers", "both"])
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--hidden", type=int, default=576)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated: off, none, layers, all, and M:thread (rows hashed "
                        "on the library's thread) or M:noops (no op records) variants")
    p.add_argument("--compiled", action="store_true",
                   help="vLLM compiles its model (enforce_eager=False): rows through the "
                        "llmrr::site_rows op llmrr.runtimes.vllm puts into it")
    p.add_argument("--breakdown", action="store_true",
                   help="vLLM only: where capture all's time goes (off; every hook without the "
                        "fingerprints; all, with host_rows timed), in one recording process")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        tps = (child_vllm if a.child == "vllm" else child_transformers)(a)
        print(json.dumps(tps if a.breakdown else {"tokens_per_s": tps}))
        return
    if a.breakdown and a.runtime != "vllm":
        sys.exit("--breakdown: with --runtime vllm only")
    cache = os.path.expanduser(os.environ.get("LLMRR_CACHE", "~/.cache/llmrr"))
    model = os.path.join(cache, "bench-models", "llama-h%d-l%d" % (a.hidden, a.layers))
    if not os.path.exists(os.path.join(model, "config.json")):
        make_model(model, a.hidden, a.layers)
    runtimes = ["vllm", "transformers"] if a.runtime == "both" else [a.runtime]
    modes = a.modes.split(",")
    for m in modes:
        if m.split(":")[0] not in MODES or m.split(":")[1:] not in ([], ["thread"], ["noops"]):
            sys.exit("--modes: unknown mode %r (off, none, layers, all, M:thread, M:noops)" % m)
    if "off" not in modes:
        modes.insert(0, "off")
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        flags = open("/proc/cpuinfo").read()
        isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"
    except OSError:
        isa = "?"
    print("# %s (%s), %d cores; model %s; batch %d x %d tokens; %d rounds x %d reps" % (
        cpu, isa, os.cpu_count(), os.path.basename(model), a.batch, a.tokens, a.rounds, a.reps))
    with tempfile.TemporaryDirectory(prefix="llmrr-bench-") as tmp:
        def child(rt, name, breakdown=False):
            mode = name.split(":")[0]
            env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0")
            env.pop("LLMRR_VLLM_TRACE", None)
            env.pop("LLMRR_INLINE_STEPS", None)
            if name.endswith(":thread"):
                env["LLMRR_INLINE_STEPS"] = "0"
            env.pop("LLMRR_VLLM_OPS", None)
            if name.endswith(":noops"):  # without the op records (format 1.6)
                env["LLMRR_VLLM_OPS"] = "0"
            if rt == "vllm" and mode != "off":
                env["LLMRR_VLLM_TRACE"] = os.path.join(tmp, "warm-%s.trace" % mode)
                env["LLMRR_CAPTURE"] = mode
            out = subprocess.run(
                [sys.executable, __file__, "--child", rt, "--mode", mode, "--model",
                 model, "--tmp", tmp, "--batch", str(a.batch), "--tokens",
                 str(a.tokens), "--reps", str(a.reps)] + (["--breakdown"] if breakdown else [])
                + (["--compiled"] if a.compiled else []),
                env=env, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit("%s %s failed:\n%s" % (rt, name, out.stderr[-3000:]))
            return json.loads([x for x in out.stdout.splitlines() if x.startswith("{")][-1])

        if a.breakdown:
            rounds = []
            for _ in range(a.rounds):
                off = a.batch * a.tokens / child("vllm", "off")["tokens_per_s"]
                rounds.append(dict(child("vllm", "all", breakdown=True), off=off))
            med = {k: statistics.median(r[k] for r in rounds)
                   for k in ("off", "hooks", "hooks_end_s", "all", "all_end_s", "rows_s")}
            print("| vllm, capture all | s per generate (median) | over off |")
            print("|---|---:|---:|")
            for label, k in (("off", "off"),
                             ("every hook, host_rows returning at once", "hooks"),
                             ("  in end_step", "hooks_end_s"),
                             ("all", "all"),
                             ("  in host_rows", "rows_s"),
                             ("  in end_step", "all_end_s")):
                print("| %s | %.3f | %.3f |" % (label, med[k], med[k] / med["off"]))
            print("  host_rows per generate: %d calls, %.1f M floats (%.2f G floats/s)" % (
                rounds[-1]["calls"], rounds[-1]["floats"] / 1e6,
                rounds[-1]["floats"] / med["rows_s"] / 1e9))
            print("  per round:", [{k: round(v, 3) if isinstance(v, float) else v
                                    for k, v in r.items()} for r in rounds])
            return
        for rt in runtimes:
            results = {m: [] for m in modes}
            for _ in range(a.rounds):
                for name in modes:
                    results[name].append(child(rt, name)["tokens_per_s"])
            off = statistics.median(results["off"])
            print("| %s capture | tokens/s (median) | recorded / off |" % rt)
            print("|---|---:|---:|")
            for name in modes:
                med = statistics.median(results[name])
                print("| %s | %.1f | %.3f |" % (name, med, med / off), flush=True)
            print("  per round:", {m: [round(x, 1) for x in v] for m, v in results.items()})

if __name__ == "__main__":
    main()
