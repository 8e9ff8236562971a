"""python -m llmrr.core.parquet TRACE DIR: every table of TRACE as DIR/<table>.parquet, written by
pyarrow from the reader's Arrow export (no copy on llmrr's side). `llmrr export --parquet DIR`
runs this in the venv (tools/setup/python) with DIR its staging directory, which it moves
into place only when every file was written. Exit 0 written, 2 bad input or no pyarrow."""
from __future__ import annotations

import os
import sys

TABLES = ("requests", "prompt_tokens", "steps", "segments", "plans", "fingerprints", "routing",
          "logits", "logits_topk", "tokens", "finishes", "kernels")


def write(trace_path: str, out_dir: str) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .reader import Trace
    written = []
    with Trace(trace_path) as t:
        for name in TABLES:
            path = os.path.join(out_dir, name + ".parquet")
            # O_EXCL | O_NOFOLLOW: a file or link planted in the directory is never written.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                pq.write_table(pa.table(t.table(name)), f)
            written.append(path)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m llmrr.core.parquet TRACE DIR", file=sys.stderr)
        return 2
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError as e:
        print("llmrr export: error: --parquet needs pyarrow in %s (%s); run tools/setup/python "
              "(build/venv), or set $LLMRR_PYTHON to a python that has it" % (sys.executable, e),
              file=sys.stderr)
        return 2
    from ._lib import LlmrrError
    try:
        files = write(argv[0], argv[1])
    except LlmrrError as e:
        print("llmrr export: error: %s" % e, file=sys.stderr)
        return 2
    except OSError as e:
        print("llmrr export: error: %s" % e, file=sys.stderr)
        return 3
    print("%d" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
