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
"""
import ctypes
import re

import numpy as np

from . import _json, _lib

# safeio's message for JSON past its nesting cap: "... nested deeper than 64 levels at byte 65".
_NESTED = re.compile(r"nested deeper than (\d+) levels at byte (\d+)")

_NP = {"i32": np.int32, "i64": np.int64, "u64": np.uint64, "f32": np.float32,
       "f64": np.float64, "u8": np.uint8}

# Columns that hold packed sites get a decoded twin "<column>_name".
_SITE_COLUMNS = {("plans", "site"), ("fingerprints", "site")}


class Table:
    """Columns of equal length: t["col"] or t.col is a numpy array."""

    def __init__(self, name, columns):
        self.name = name
        self._cols = columns

    def __getitem__(self, column):
        try:
            return self._cols[column]
        except KeyError:
            raise KeyError("table %r has no column %r (columns: %s)" %
                           (self.name, column, ", ".join(self._cols))) from None

    def __getattr__(self, column):
        if column.startswith("_"):
            raise AttributeError(column)
        try:
            return self._cols[column]
        except KeyError:
            raise AttributeError("table %r has no column %r" % (self.name, column)) from None

    def __len__(self):
        return len(next(iter(self._cols.values()))) if self._cols else 0

    def __contains__(self, column):
        return column in self._cols

    def columns(self):
        return list(self._cols)

    def where(self, **conditions):
        """The rows where every column equals the given value; site= takes a site name."""
        mask = np.ones(len(self), dtype=bool)
        for column, value in conditions.items():
            if column == "site" and isinstance(value, str):
                value = _lib.site_pack(value)
            mask &= self[column] == value
        return Table(self.name, {k: v[mask] for k, v in self._cols.items()})

    def __repr__(self):
        return "<llmrr table %s: %d rows; %s>" % (self.name, len(self), ", ".join(self._cols))


class Trace:
    """An opened trace. Tables: requests, steps, segments, plans, fingerprints, routing,
    logits, tokens, finishes, kernels (llmrr/reader.h lists their columns)."""

    def __init__(self, path):
        L = _lib.lib()
        self.path = str(path)
        self._h = ctypes.c_void_p()
        rc = L.llmrr_reader_open(self.path.encode(), ctypes.byref(self._h))
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
        raw = {}
        for table in L.llmrr_reader_tables(self._h).decode().split():
            raw[table] = self._read_table(table)
        self._tables = self._shape(raw)

    def _read_table(self, table):
        L = _lib.lib()
        cols = {}
        rows = L.llmrr_reader_rows(self._h, table.encode())
        for spec in L.llmrr_reader_columns(self._h, table.encode()).decode().split():
            name, typ = spec.split(":")
            data = ctypes.c_void_p()
            n = ctypes.c_int64()
            if typ == "str":
                rc = L.llmrr_reader_strings(self._h, table.encode(), name.encode(),
                                            ctypes.byref(data), ctypes.byref(n))
                self._check(rc)
                blob = ctypes.string_at(data, n.value) if n.value else b""
                parts = blob.split(b"\0")[:rows]
                cols[name] = np.array([p.decode("utf-8", "replace") for p in parts], dtype=object)
                continue
            rc = L.llmrr_reader_column(self._h, table.encode(), name.encode(), ctypes.byref(data),
                                       ctypes.byref(n))
            self._check(rc)
            dt = np.dtype(_NP[typ])
            if n.value == 0:
                cols[name] = np.zeros(0, dtype=dt)
            else:
                buf = ctypes.string_at(data, n.value * dt.itemsize)
                cols[name] = np.frombuffer(buf, dtype=dt).copy()
            if (table, name) in _SITE_COLUMNS:
                names = {int(v): _lib.site_name(int(v)) for v in np.unique(cols[name])}
                cols[name + "_name"] = np.array([names[int(v)] for v in cols[name]], dtype=object)
        return cols

    @staticmethod
    def _shape(raw):
        # Ragged lists as the arrays people want: prompts per request, top-K as (n, K).
        req = raw["requests"]
        pt = raw.pop("prompt_tokens")
        req["prompt"] = np.array(
            [pt["token"][o:o + n] for o, n in zip(req["prompt_offset"], req["prompt_len"])] +
            [None], dtype=object)[:-1]
        lg = raw["logits"]
        tk = raw.pop("logits_topk")
        n = len(lg["step"])
        k = int(lg["top_count"].max()) if n else 0
        ids = np.full((n, k), -1, dtype=np.int32)
        vals = np.full((n, k), np.nan, dtype=np.float32)
        ids[tk["logit"], tk["rank"]] = tk["id"]
        vals[tk["logit"], tk["rank"]] = tk["value"]
        lg["top_ids"] = ids
        lg["top_values"] = vals
        return {name: Table(name, cols) for name, cols in raw.items()}

    def _check(self, rc):
        if rc != _lib.OK:
            raise _lib.LlmrrError(rc, _lib.lib().llmrr_reader_last_error().decode())

    def __getattr__(self, table):
        if table.startswith("_"):
            raise AttributeError(table)
        try:
            return self._tables[table]
        except KeyError:
            raise AttributeError("a trace has no table %r (tables: %s)" %
                                 (table, ", ".join(self._tables))) from None

    def tables(self):
        return list(self._tables)

    @property
    def complete(self):
        return bool(self.header["complete"])

    @property
    def lossy(self):
        return bool(self.header["lossy"])

    def generated(self, request):
        """The tokens recorded for `request`, in position order."""
        t = self._tables["tokens"].where(request=request)
        return t["token"][np.argsort(t["position"], kind="stable")]

    def blob(self, blob_id):
        """The decoded bytes of tensor blob `blob_id` (e.g. a logits row with --logits full)."""
        L = _lib.lib()
        size = ctypes.c_size_t()
        self._check(L.llmrr_reader_blob(self._h, int(blob_id), None, 0, ctypes.byref(size)))
        buf = ctypes.create_string_buffer(size.value)
        self._check(L.llmrr_reader_blob(self._h, int(blob_id), buf, size.value,
                                        ctypes.byref(size)))
        return buf.raw[:size.value]

    def verify(self):
        """Full verification, as `llmrr verify`; raises LlmrrError on the first problem."""
        self._check(_lib.lib().llmrr_reader_verify(self._h))

    def close(self):
        if self._h:
            _lib.lib().llmrr_reader_close(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "<llmrr trace %s: %d steps, %d requests, %d tokens>" % (
            self.path, len(self._tables["steps"]), len(self._tables["requests"]),
            len(self._tables["tokens"]))


def open(path):  # noqa: A001 - the package's entry point is llmrr.open, like io.open
    """Opens and reads the trace at `path`. Raises llmrr.LlmrrError on a bad trace, and
    llmrr.JsonNestingError (an LlmrrError and a ValueError naming the path) when JSON in it
    nests deeper than 64 levels."""
    return Trace(path)
