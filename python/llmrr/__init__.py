"""llmrr for Python: read traces (llmrr.open) and record PyTorch / transformers models into
them (llmrr.torch.record). Both go through llmrr's C library (libllmrr_recorder_c.so), so
every trace works with `llmrr inspect | dump | verify | diff`."""
from ._lib import (CAPTURE, DTYPE_BF16, DTYPE_F16, DTYPE_F32, LlmrrError, library_path,
                   site_name, site_pack)
from ._json import JsonNestingError
from .reader import Table, Trace, open  # noqa: A004
from .recorder import Recorder

__version__ = "0.1.0"
__all__ = ["open", "Trace", "Table", "Recorder", "LlmrrError", "JsonNestingError", "site_name",
           "site_pack", "library_path", "DTYPE_F32", "DTYPE_BF16", "DTYPE_F16", "CAPTURE"]


def __getattr__(name):
    # `import llmrr; llmrr.torch.record(...)` without importing torch for readers.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'llmrr' has no attribute %r" % name)
