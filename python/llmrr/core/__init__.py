"""llmrr.core: the runtime-independent part of the package. The reader (reader.py:
llmrr.open, numpy and Arrow tables over the reader C ABI), the recorder C ABI (recorder.py:
llmrr.Recorder), their ctypes binding (_lib.py), JSON under safeio's caps (_json.py), the
Arrow C Data Interface import (arrow.py), Parquet export (parquet.py: `python -m
llmrr.core.parquet`, what `llmrr export --parquet` runs) and mixsum64 computed with torch ops
where a tensor lives (fingerprint.py). The top-level package re-exports the public names."""
