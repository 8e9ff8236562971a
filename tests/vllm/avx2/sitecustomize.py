"""vLLM's CPU build on its AVX2 kernels, on a machine that has AVX-512 (CI's vllm-avx2 step).

On this directory's PYTHONPATH every Python process of a vLLM test (the test, vLLM's engine
core, its workers) starts as on an AVX2-only CPU:
- torch.cpu reports no AVX-512, AVX-512 BF16, VNNI or AMX, so vLLM imports `vllm._C_AVX2`
  (vllm/platforms/cpu.py, import_kernels) and picks no AMX or AVX-512 attention path;
- torch's own kernels dispatch at AVX2 and oneDNN's matmuls stop at AVX2: the environment
  variables ATEN_CPU_CAPABILITY=avx2 and ONEDNN_MAX_CPU_ISA=AVX2, set here before torch loads
  (and inherited by the processes vLLM starts);
- llmrr's own kernels (the plugin's fingerprints) run their AVX2 path: LLMRR_ISA=avx2.
tests/vllm/avx2/check.py proves the switch took (the AVX2 extension loaded, torch at AVX2).
"""

import os

os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
os.environ.setdefault("LLMRR_ISA", "avx2")


def _no() -> bool:
    return False


def _patch_torch_cpu() -> None:
    try:
        import torch.cpu
    except Exception:  # not a torch venv: nothing to patch
        return
    for name in (
        "_is_avx512_supported",
        "_is_avx512_bf16_supported",
        "_is_avx512_vnni_supported",
        "_is_avx512_fp16_supported",
        "_is_amx_tile_supported",
        "_is_amx_fp16_supported",
    ):
        if hasattr(torch.cpu, name):
            setattr(torch.cpu, name, _no)


# Only where vLLM's tests run: the vLLM venv's interpreter, which imports torch anyway.
if os.environ.get("LLMRR_VLLM_AVX2", "1") == "1":
    _patch_torch_cpu()
