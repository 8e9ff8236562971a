"""llmrr for Python: read traces (llmrr.open) and record PyTorch / transformers models into
them (llmrr.runtimes.torch.record). Both go through llmrr's C library
(libllmrr_recorder_c.so), so every trace works with `llmrr inspect | dump | verify | diff`.

The package has three parts:
  llmrr.core       what does not depend on a runtime: the reader (llmrr.open), the recorder
                   C ABI (llmrr.Recorder), the ctypes binding, Arrow / Parquet export and the
                   device-side fingerprints;
  llmrr.runtimes   the recorders of other runtimes: llmrr.runtimes.torch (transformers) and
                   llmrr.runtimes.vllm (the vLLM plugin);
  llmrr.campaigns  the programs `llmrr replay | bisect | fuzz --runtime R` run: vllm_replay,
                   vllm_fuzz, llamacpp_fuzz, and the summary.json they share (fuzz_summary).
"""
from ._version import __version__ as __version__
from .core._json import JsonNestingError
from .core._lib import (CAPTURE, DTYPE_BF16, DTYPE_F16, DTYPE_F32, LlmrrError, library_path,
                        site_name, site_pack)
from .core.reader import Table, Trace, open  # noqa: A004
from .core.recorder import Recorder

__all__ = ["open", "Trace", "Table", "Recorder", "LlmrrError", "JsonNestingError", "site_name",
           "site_pack", "library_path", "DTYPE_F32", "DTYPE_BF16", "DTYPE_F16", "CAPTURE"]
