"""Exit 0 only when this interpreter runs vLLM as on an AVX2-only CPU (sitecustomize.py here
on PYTHONPATH): vLLM loaded its AVX2 extension and not the AVX-512 one, torch dispatches at
AVX2, oneDNN is capped at AVX2. With --native (no sitecustomize: the CPU has no AVX-512) the
same without the cap, which such a CPU needs none of. Prints what it found; exit 1 naming
what did not take."""

import os
import sys

import torch

from vllm.platforms import current_platform

current_platform.import_kernels()


def vllm_extensions() -> list:
    """The vLLM extension libraries mapped into this process (the import of _C_AVX2 fails by
    name, "does not define module export function", after the library is loaded)."""
    with open("/proc/self/maps") as maps:
        libs = {os.path.basename(line.split()[-1]) for line in maps if "/vllm/_C" in line}
    return sorted(lib.split(".")[0] for lib in libs)


found = {
    "torch capability": torch.backends.cpu.get_cpu_capability(),
    "vllm extension": vllm_extensions(),
    "ONEDNN_MAX_CPU_ISA": os.environ.get("ONEDNN_MAX_CPU_ISA"),
    "avx512 reported": torch.cpu._is_avx512_supported(),
}
print("vllm-avx2:", found)
problems = []
if found["torch capability"] != "AVX2":
    problems.append("torch dispatches at %s, expected AVX2" % found["torch capability"])
if "_C_AVX2" not in found["vllm extension"]:
    problems.append("vllm's _C_AVX2 not loaded (%s)" % found["vllm extension"])
if any(m in found["vllm extension"] for m in ("_C", "_C_AVX512")):
    problems.append("an AVX-512 extension of vLLM was loaded too")
native = "--native" in sys.argv[1:]
if not native and found["ONEDNN_MAX_CPU_ISA"] != "AVX2":
    problems.append("oneDNN not capped at AVX2")
if found["avx512 reported"]:
    problems.append("torch.cpu still reports AVX-512")
if problems:
    print("vllm-avx2: " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
