#!/usr/bin/env python3
"""llmrr vs llama.cpp on the same GGUF, side by side: prompt tokens/s, decode tokens/s and
peak RSS at each thread count, medians of interleaved repetitions, each measurement in a
fresh process.

llama.cpp is built here from source — the llama.cpp that PyPI's llama-cpp-python source
package vendors (`pip download --no-deps --no-binary :all: llama-cpp-python`), so no binary
is fetched — and measured with its own `llama-bench`. The build lives under --peer-dir
(default ~/.cache/llmrr/peers), never in the repository; it is made on first use (about an
hour of one core) and reused afterwards. Two builds can be asked for:
  --peer native  -DGGML_NATIVE=ON (what llama.cpp's defaults pick on this CPU)
  --peer avx2    AVX2 + FMA + F16C, no AVX-512 (to compare with LLMRR_ISA=avx2 on an
                 AVX-512 machine)
llmrr runs as `llmrr run`, the way a user runs it, with the same token count, greedy, at
the same thread count; --isa sets LLMRR_ISA for it. Both engines get the same number of
prompt tokens (llama-bench draws its own ids; llmrr gets fixed ordinary-text ids).

  bench/engine/peer_llamacpp.py --llmrr build/default/tools/llmrr --threads 1,2 --reps 5
  bench/engine/peer_llamacpp.py --peer avx2 --isa avx2 --threads 1,2 --reps 5

Rates: llama.cpp's are llama-bench's (`-p P -n G -r 1`: prompt processing of P tokens, then
G tokens generated one at a time from an empty context). llmrr's decode rate is
G / (t(prompt + G tokens) − t(prompt + 0 tokens)) of engine time from its summary line (its
G tokens follow the P prompt positions, slightly more attention work than llama-bench's),
and its prompt rate P / the prefill time. Peak RSS is the child's ru_maxrss (llama.cpp maps
the file: its pages count).
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile

PEER_FLAGS = {
    "native": ["-DGGML_NATIVE=ON"],
    "avx2": ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
             "-DGGML_F16C=ON", "-DGGML_AVX512=OFF"],
}
COMMON_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_SERVER=OFF",
                "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_CURL=OFF"]


def die(msg):
    print(f"peer_llamacpp: {msg}", file=sys.stderr)
    sys.exit(2)


def run_checked(cmd, log):
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        die(f"{' '.join(cmd[:3])} ... failed ({r.returncode}); see {log}")


def build_llama_bench(peer_dir, variant, jobs):
    """The llama-bench binary of `variant`, built from the llama-cpp-python sdist if needed."""
    exe = os.path.join(peer_dir, f"build-{variant}", "bin", "llama-bench")
    if os.path.isfile(exe):
        return exe
    os.makedirs(peer_dir, exist_ok=True)
    sdists = sorted(glob.glob(os.path.join(peer_dir, "llama_cpp_python-*.tar.gz")))
    if not sdists:
        print("peer_llamacpp: downloading the llama-cpp-python source package", file=sys.stderr)
        run_checked([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                     "-d", peer_dir, "llama-cpp-python"], os.path.join(peer_dir, "download.log"))
        sdists = sorted(glob.glob(os.path.join(peer_dir, "llama_cpp_python-*.tar.gz")))
        if not sdists:
            die(f"pip download left no llama_cpp_python-*.tar.gz in {peer_dir}")
    sdist = sdists[-1]
    src = sdist[:-len(".tar.gz")]
    if not os.path.isdir(src):
        with tarfile.open(sdist) as t:
            if hasattr(tarfile, "data_filter"):
                t.extractall(peer_dir, filter="data")
            else:
                t.extractall(peer_dir)
    llama = os.path.join(src, "vendor", "llama.cpp")
    if not os.path.isfile(os.path.join(llama, "CMakeLists.txt")):
        die(f"{sdist} has no vendor/llama.cpp/CMakeLists.txt")
    bdir = os.path.join(peer_dir, f"build-{variant}")
    print(f"peer_llamacpp: building llama-bench ({variant}) in {bdir}", file=sys.stderr)
    run_checked(["cmake", "-S", llama, "-B", bdir] + COMMON_FLAGS + PEER_FLAGS[variant],
                os.path.join(peer_dir, f"configure-{variant}.log"))
    run_checked(["cmake", "--build", bdir, "--target", "llama-bench", "-j", str(jobs)],
                os.path.join(peer_dir, f"build-{variant}.log"))
    if not os.path.isfile(exe):
        die(f"the build made no {exe}")
    return exe


def spawn(cmd, env=None):
    """Runs cmd in a fresh process; returns (stdout, stderr, its peak RSS in MiB)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            if env is not None:
                os.execvpe(cmd[0], cmd, env)
            os.execvp(cmd[0], cmd)
        _, status, ru = os.wait4(pid, 0)
        out.seek(0)
        err.seek(0)
        o, e = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if status != 0:
        die(f"{' '.join(cmd[:4])} ... failed ({status}):\n{e[-2000:]}")
    return o, e, ru.ru_maxrss / 1024


def llama_once(exe, model, threads, prompt, gen):
    out, _, rss = spawn([exe, "-m", model, "-p", str(prompt), "-n", str(gen), "-t", str(threads),
                         "-r", "1", "-o", "json"])
    try:
        tests = json.loads(out)
    except json.JSONDecodeError:
        die(f"llama-bench printed no JSON:\n{out[-2000:]}")
    r = {"rss_mb": rss, "cpu": tests[0].get("cpu_info", "?"),
         "build": f"{tests[0].get('build_commit', '?')} ({tests[0].get('build_number', '?')})"}
    for t in tests:
        if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0:
            r["prompt"] = t["avg_ts"]
        elif t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0:
            r["decode"] = t["avg_ts"]
    if "prompt" not in r or "decode" not in r:
        die(f"llama-bench gave no pp/tg results:\n{out[-2000:]}")
    return r


# (Binaries from before 2026-12-04 do not name the ISA: "?".)
SUMMARY = re.compile(r"(\d+) rows \(.*\| [\d.]+ tokens/s, ([\d.]+) rows/s \|[^\n]*?(?:isa (\w+))?$",
                     re.M)


def llmrr_secs(binary, model, threads, ids, max_tokens, policy, env):
    """Engine seconds (rows / rows per second of the summary line), the ISA and peak RSS."""
    cmd = [binary, "run", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
           "--max-tokens", str(max_tokens), "--threads", str(threads), "--policy", policy]
    _, err, rss = spawn(cmd, env)
    m = SUMMARY.search(err)
    if not m:
        die(f"no summary line from llmrr run:\n{err[-2000:]}")
    return int(m.group(1)) / float(m.group(2)), m.group(3) or "?", rss


def llmrr_once(binary, model, threads, ids, gen, policy, env):
    # max-tokens 1: the prefill step samples the first token; the rest are decode steps.
    t_prompt, isa, rss1 = llmrr_secs(binary, model, threads, ids, 1, policy, env)
    t_all, _, rss2 = llmrr_secs(binary, model, threads, ids, gen + 1, policy, env)
    return {"prompt": len(ids) / t_prompt, "decode": gen / max(t_all - t_prompt, 1e-9),
            "rss_mb": max(rss1, rss2), "isa": isa}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def load_average():
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    home = os.path.expanduser("~")
    ap.add_argument("--model", default=os.path.join(
        os.environ.get("LLMRR_MODEL_DIR", home + "/.cache/llmrr/models"),
        "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--llmrr", default="build/default/tools/llmrr")
    ap.add_argument("--isa", choices=["avx2", "avx512", "scalar"],
                    help="LLMRR_ISA for llmrr (default: the best this CPU has)")
    ap.add_argument("--peer", default="native", choices=sorted(PEER_FLAGS),
                    help="llama.cpp build: native or avx2 (no AVX-512)")
    ap.add_argument("--peer-dir", default=os.path.join(home, ".cache", "llmrr", "peers"))
    ap.add_argument("--llama-bench", help="use this llama-bench instead of building one")
    ap.add_argument("--jobs", type=int, default=2, help="build jobs for llama.cpp")
    ap.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--policy", default="production",
                    help="llmrr policies, comma-separated: production, invariant")
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        die(f"{a.model} not found (tools/setup/smollm2)")
    if not os.path.isfile(a.llmrr):
        die(f"{a.llmrr} not found (cmake --build build/default --target llmrr)")
    try:
        threads = [int(t) for t in a.threads.split(",")]
    except ValueError:
        die(f"--threads {a.threads}: expected thread counts such as 1,2")
    if not threads or min(threads) < 1:
        die(f"--threads {a.threads}: expected thread counts ≥ 1")
    policies = a.policy.split(",")
    for p in policies:
        if p not in ("production", "invariant"):
            die(f"--policy {a.policy}: expected production and/or invariant")
    if a.reps < 1 or a.gen < 1 or a.prompt_tokens < 1:
        die("--reps, --gen and --prompt-tokens must be ≥ 1")
    exe = a.llama_bench or build_llama_bench(a.peer_dir, a.peer, a.jobs)
    env = dict(os.environ)
    if a.isa:
        env["LLMRR_ISA"] = a.isa
    # Deterministic ordinary-text ids (no BOS).
    ids = [(32 + (t * 31) % 90) * 37 % 40000 + 200 for t in range(a.prompt_tokens)]
    jobs = [("llama.cpp", t) for t in threads] + [(p, t) for t in threads for p in policies]
    res = {j: [] for j in jobs}
    loads = [load_average()]
    for rep in range(a.reps):  # interleaved, rotating order: machine noise hits all alike
        for i in range(len(jobs)):
            name, t = jobs[(i + rep) % len(jobs)]
            if name == "llama.cpp":
                res[(name, t)].append(llama_once(exe, a.model, t, a.prompt_tokens, a.gen))
            else:
                res[(name, t)].append(llmrr_once(a.llmrr, a.model, t, ids, a.gen, name, env))
        loads.append(load_average())
    med = {j: {m: statistics.median(r[m] for r in v) for m in ("prompt", "decode", "rss_mb")}
           for j, v in res.items()}
    first_llama = res[("llama.cpp", threads[0])][0]
    isa = res[(policies[0], threads[0])][0]["isa"]
    size_mb = os.path.getsize(a.model) / 2**20
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs); llama.cpp sees: "
          f"{first_llama['cpu']}")
    print(f"llmrr ISA: {isa}{' (LLMRR_ISA=' + a.isa + ')' if a.isa else ''}; llama.cpp build: "
          f"{a.peer if not a.llama_bench else a.llama_bench}, commit {first_llama['build']}")
    print(f"model {os.path.basename(a.model)} ({size_mb:.1f} MiB), prompt {a.prompt_tokens} "
          f"tokens, decode {a.gen} tokens, {a.reps} interleaved reps (medians); 1-minute load "
          f"average before the first round and after each: {', '.join(loads)}")
    print("| threads | engine | prompt tok/s | decode tok/s | peak RSS MiB | prompt ratio | "
          "decode ratio | RSS ratio |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for t in threads:
        L = med[("llama.cpp", t)]
        print(f"| {t} | llama.cpp ({a.peer}) | {L['prompt']:.0f} | {L['decode']:.1f} | "
              f"{L['rss_mb']:.0f} | | | |")
        for p in policies:
            R = med[(p, t)]
            print(f"| {t} | llmrr {p} ({isa}) | {R['prompt']:.0f} | {R['decode']:.1f} | "
                  f"{R['rss_mb']:.0f} | {R['prompt'] / L['prompt']:.2f} | "
                  f"{R['decode'] / L['decode']:.2f} | {R['rss_mb'] / L['rss_mb']:.2f} |")
        if len(policies) == 2:
            P, I = med[("production", t)], med[("invariant", t)]
            print(f"| {t} | invariant / production | {I['prompt'] / P['prompt']:.2f} | "
                  f"{I['decode'] / P['decode']:.2f} | | | | |")
    print("(ratios: llmrr / llama.cpp at the same thread count)")
    busy = max((float(x) for x in loads if x != "?"), default=0.0)
    cpus = os.cpu_count() or 1
    if any(t > 1 and busy + t > cpus + 0.5 for t in threads):
        print(f"note: load average up to {busy:.1f} on {cpus} CPUs; at thread counts that "
              "leave no idle core, llama.cpp's spin-waiting workers slow down far more than "
              "llmrr's, so those ratios say little about the engines")


if __name__ == "__main__":
    main()
