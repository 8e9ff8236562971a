"""llmrr.open(path): a trace's records as numpy arrays, read through the C library's reader
(llmrr/reader.h), so Python sees exactly what `llmrr dump` / `llmrr diff` see: every frame is
checked (checksums, zstd, FlatBuffers Verifier), plans come back resolved (not as deltas), and
a trace without footer (a crashed writer) is recovered the same way.

    t = llmrr.open("run.trace")
    t.header["model"]["name"]            # the run header, a dict
    t.tokens["token"], t.tokens["request"]
    t.fingerprints.where(site="L1.out")  # rows of one site, with request / position per row
    t.logits["top_ids"]                  # (n, K) int32, -1 where a row has fewer than K
    t.routing["expert"]                  # one row per (step, layer, batch row, rank)
    t.table("fingerprints", steps=(100, 200))   # steps 100..199 only, from their chunks
    pyarrow.table(t.fingerprints); t.fingerprints.to_pandas()   # Arrow, no copy (arrow.py)

Opening reads the header and the frame index; a table is read at its first use.
"""
from __future__ import annotations

import ctypes
import os
import re
from typing import Any

import numpy as np

from . import _json, _lib, arrow

# safeio's message for JSON past its nesting cap: "... nested deeper than 64 levels at byte 65".
_NESTED = re.compile(r"nested deeper than (\d+) levels at byte (\d+)")

# The tables Trace.tables() lists; prompt_tokens and logits_topk (what requests.prompt and
# logits.top_ids / top_values are made of) are read with Trace.table(name).
_TABLES = ("requests", "steps", "segments", "plans", "fingerprints", "routing", "logits",
           "tokens", "finishes", "kernels")
_ALL_STEPS = (-(1 << 63), (1 << 63) - 1)


class _Handle:
    """A table of the library (llmrr_reader_table); freed with the last Python reference.
    Exports (numpy views, Arrow streams) hold references of their own in the library."""

    def __init__(self, reader: Any, table: str, first: int, last: int) -> None:
        L = arrow.lib()
        self.h = ctypes.c_void_p()
        arrow.check(L.llmrr_reader_read_table(reader, table.encode(), first, last,
                                               ctypes.byref(self.h)))

    def __del__(self) -> None:
        if self.h:
            arrow.lib().llmrr_reader_table_free(self.h)
            self.h = ctypes.c_void_p()


class Table:
    """Columns of equal length: t["col"] or t.col is a numpy array. A table read from a trace
    is also an Arrow table: `pyarrow.table(t)`, `polars.DataFrame(t)`, `duckdb.sql("select
    ... from t")` and `t.to_pandas()` import the library's buffers without a copy
    (`__arrow_c_stream__`); its numpy columns are views of the same buffers (read-only).
    `where()` gives a new table of numpy copies."""

    def __init__(self, name: str, columns: dict[str, Any] | None = None,
                 handle: _Handle | None = None) -> None:
        self.name = name
        self._handle = handle
        self._c = columns

    @property
    def _cols(self) -> dict[str, Any]:
        if self._c is None:
            assert self._handle is not None
            self._c = arrow.numpy_columns(self._handle.h)
        return self._c

    def _column(self, column: str) -> np.ndarray:
        v = self._cols[column]
        if isinstance(v, arrow.Dictionary):
            v = self._cols[column] = v.decode()
        return v

    def __getitem__(self, column: str) -> np.ndarray:
        try:
            return self._column(column)
        except KeyError:
            raise KeyError("table %r has no column %r (columns: %s)" %
                           (self.name, column, ", ".join(self._cols))) from None

    def __getattr__(self, column: str) -> np.ndarray:
        if column.startswith("_"):
            raise AttributeError(column)
        try:
            return self._column(column)
        except KeyError:
            raise AttributeError("table %r has no column %r" % (self.name, column)) from None

    def __len__(self) -> int:
        if self._c is None and self._handle is not None:
            return int(arrow.lib().llmrr_reader_table_rows(self._handle.h))
        return len(next(iter(self._cols.values()))) if self._cols else 0

    def __contains__(self, column: object) -> bool:
        return column in self._cols

    def columns(self) -> list[str]:
        return list(self._cols)

    def where(self, **conditions: Any) -> Table:
        """The rows where every column equals the given value; site= takes a site name."""
        mask = np.ones(len(self), dtype=bool)
        for column, value in conditions.items():
            if column == "site" and isinstance(value, str):
                value = _lib.site_pack(value)
            mask &= self[column] == value
        return Table(self.name, {k: arrow.Dictionary(v.indices[mask], v.names)
                                 if isinstance(v, arrow.Dictionary) else v[mask]
                                 for k, v in self._cols.items()})

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        """The Arrow PyCapsule protocol: a capsule "arrow_array_stream" over the library's
        buffers (no copy). A where() result has no library table: it goes through pyarrow."""
        if self._handle is not None:
            return arrow.stream_capsule(self._handle.h)
        import pyarrow as pa
        cols = {}
        for k in self._cols:
            v = self._column(k)
            cols[k] = list(v) if v.ndim > 1 or v.dtype == object else v
        return pa.table(cols).__arrow_c_stream__(requested_schema)

    def to_arrow(self) -> Any:
        """A pyarrow.Table (needs pyarrow; tools/setup/python installs it)."""
        import pyarrow as pa
        return pa.table(self)

    def to_pandas(self, **kwargs: Any) -> Any:
        """A pandas.DataFrame through pyarrow (site_name as a categorical)."""
        return self.to_arrow().to_pandas(**kwargs)

    def to_polars(self) -> Any:
        import polars as pl
        return pl.DataFrame(self)

    def column_address(self, column: str) -> int:
        """The library's address of a fixed-size column: what numpy views and Arrow exports
        of this table point at."""
        if self._handle is None:
            raise ValueError("table %r was not read from a trace (a where() result)" % self.name)
        return arrow.column_address(self._handle.h, column)

    def __repr__(self) -> str:
        return "<llmrr table %s: %d rows; %s>" % (self.name, len(self), ", ".join(self._cols))


class Trace:
    """An opened trace. Tables: requests, steps, segments, plans, fingerprints, routing,
    logits, tokens, finishes, kernels (llmrr/reader.h lists their columns), read from the
    file at first use; table(name, steps=(first, stop)) reads the steps of a range only."""

    header: dict[str, Any]

    def __init__(self, path: str | os.PathLike[str]) -> None:
        L = arrow.lib()
        self.path = str(path)
        self._h = ctypes.c_void_p()
        self._tables: dict[str, Table] = {}
        rc = L.llmrr_reader_open_lazy(self.path.encode(), ctypes.byref(self._h))
        if rc != _lib.OK:
            message = L.llmrr_reader_last_error().decode("utf-8", "replace")
            # The library refuses JSON in the trace nested past its cap (safeio); say so as
            # Python does for the header below: a ValueError naming the path.
            nested = _NESTED.search(message)
            if nested:
                raise _json.JsonNestingError(self.path, "run header extra_config_json",
                                             int(nested.group(2)), int(nested.group(1)))
            raise _lib.LlmrrError(rc, message)
        # The library caps what it passes through; checked again here so that no json.loads
        # of this package ever recurses past the cap, whatever library it runs on (+ 8: the
        # header's own levels around extra_config).
        self.header = _json.loads(L.llmrr_reader_header_json(self._h).decode(), self.path,
                                  "run header", _json.MAX_DEPTH + 8)

    def table(self, name: str, steps: tuple[int, int] | None = None) -> Table:
        """Table `name`; with steps=(first, stop), only the rows of steps first <= step < stop
        (requests: those arriving then), read from the step chunks of that range alone."""
        if not self._h:
            raise ValueError("%s: the trace is closed" % self.path)
        if steps is None:
            first, last = _ALL_STEPS
        else:
            first, stop = (int(v) for v in steps)
            if stop <= first:
                raise ValueError("steps=(%d, %d): expected first < stop" % (first, stop))
            first, last = first, stop - 1
        return Table(name, handle=_Handle(self._h, name, first, last))

    def _check(self, rc: int) -> None:
        if rc != _lib.OK:
            raise _lib.LlmrrError(rc, _lib.lib().llmrr_reader_last_error().decode())

    def __getattr__(self, table: str) -> Table:
        if table.startswith("_") or table not in _TABLES:
            raise AttributeError("a trace has no table %r (tables: %s)" %
                                 (table, ", ".join(_TABLES)))
        if table not in self._tables:
            self._tables[table] = self.table(table)
        return self._tables[table]

    def tables(self) -> list[str]:
        return list(_TABLES)

    @property
    def complete(self) -> bool:
        return bool(self.header["complete"])

    @property
    def lossy(self) -> bool:
        return bool(self.header["lossy"])

    def generated(self, request: int) -> np.ndarray:
        """The tokens recorded for `request`, in position order."""
        t = self.tokens.where(request=request)
        return t["token"][np.argsort(t["position"], kind="stable")]

    def blob(self, blob_id: int) -> bytes:
        """The decoded bytes of tensor blob `blob_id` (e.g. a logits row with --logits full)."""
        L = _lib.lib()
        size = ctypes.c_size_t()
        self._check(L.llmrr_reader_blob(self._h, int(blob_id), None, 0, ctypes.byref(size)))
        buf = ctypes.create_string_buffer(size.value)
        self._check(L.llmrr_reader_blob(self._h, int(blob_id), buf, size.value,
                                        ctypes.byref(size)))
        return buf.raw[:size.value]

    def verify(self) -> None:
        """Full verification, as `llmrr verify`; raises LlmrrError on the first problem."""
        self._check(_lib.lib().llmrr_reader_verify(self._h))

    def close(self) -> None:
        """Closes the file; tables already read (and their exports) stay valid."""
        if self._h:
            _lib.lib().llmrr_reader_close(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return "<llmrr trace %s: %d steps, %d tokens>" % (
            self.path, self.header.get("step_count", 0), self.header.get("token_count", 0))


def open(path: str | os.PathLike[str]) -> Trace:  # noqa: A001 - the package's entry point is llmrr.open, like io.open
    """Opens the trace at `path` (its header and frame index; tables are read when used).
    Raises llmrr.LlmrrError on a bad trace, and
    llmrr.JsonNestingError (an LlmrrError and a ValueError naming the path) when JSON in it
    nests deeper than 64 levels."""
    return Trace(path)
