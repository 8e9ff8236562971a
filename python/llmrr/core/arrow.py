"""A trace's tables through the Arrow C Data Interface (llmrr/reader_arrow.h), with no Arrow
library here: the library exports each table as ArrowSchema / ArrowArray / ArrowArrayStream
structs whose buffers are its own columns. This module

- hands those streams to Arrow consumers through the PyCapsule protocol
  (`__arrow_c_stream__`, capsule name "arrow_array_stream"): pyarrow, polars and DuckDB
  import them without a copy, and
- turns the same buffers into numpy views (the numpy API of llmrr.open), also without a copy.

Either way the memory is the library's, kept alive by a reference the export holds and
dropped by the release callback, so it outlives the Trace that read it.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from . import _lib


class ArrowSchema(ctypes.Structure):
    pass


ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_char_p),
    ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowSchema))),
    ("dictionary", ctypes.POINTER(ArrowSchema)),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))),
    ("private_data", ctypes.c_void_p)]


class ArrowArray(ctypes.Structure):
    pass


ArrowArray._fields_ = [
    ("length", ctypes.c_int64), ("null_count", ctypes.c_int64), ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64), ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowArray))),
    ("dictionary", ctypes.POINTER(ArrowArray)),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))),
    ("private_data", ctypes.c_void_p)]

_declared = False
_stream_free: Any = None  # llmrr_reader_stream_free, bound once (the capsule destructor's)


def lib() -> Any:
    global _declared
    L = _lib.lib()
    if not _declared:
        h, i64, vp, cp = ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_char_p
        sig = {
            "llmrr_reader_open_lazy": (ctypes.c_int, [cp, ctypes.POINTER(h)]),
            "llmrr_reader_read_table": (ctypes.c_int, [h, cp, i64, i64, ctypes.POINTER(h)]),
            "llmrr_reader_table_free": (None, [h]),
            "llmrr_reader_table_rows": (i64, [h]),
            "llmrr_reader_table_fields": (cp, [h]),
            "llmrr_reader_table_column": (ctypes.c_int, [h, cp, ctypes.POINTER(vp),
                                                         ctypes.POINTER(i64)]),
            "llmrr_reader_table_export": (ctypes.c_int, [h, ctypes.POINTER(ArrowSchema),
                                                         ctypes.POINTER(ArrowArray)]),
            "llmrr_reader_table_stream": (ctypes.c_int, [h, vp]),
            "llmrr_reader_stream_alloc": (vp, []),
            "llmrr_reader_stream_free": (None, [vp]),
        }
        for name, (res, args) in sig.items():
            fn = getattr(L, name)
            fn.restype = res
            fn.argtypes = args
        global _stream_free
        _stream_free = L.llmrr_reader_stream_free
        _declared = True
    return L


def check(rc: int) -> None:
    if rc != _lib.OK:
        raise _lib.LlmrrError(rc, _lib.lib().llmrr_reader_last_error().decode("utf-8", "replace"))


# ---- PyCapsule ------------------------------------------------------------------------------

_STREAM = b"arrow_array_stream"
_capi = ctypes.pythonapi
_capi.PyCapsule_New.restype = ctypes.py_object
_capi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capi.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


# The capsule's destructor (run with the GIL held, so a PYFUNCTYPE): frees the struct, first
# releasing the stream when no consumer took it (a consumer moves it out and marks it
# released). Its argument is the capsule as a plain address: no reference is taken to an
# object being destroyed.
@ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
def _free_stream_capsule(capsule: int) -> None:
    try:
        p = _capi.PyCapsule_GetPointer(capsule, _STREAM)
        if p:
            _stream_free(p)
    except Exception:  # noqa: BLE001 - a destructor must not raise (interpreter shutdown)
        pass


def stream_capsule(table_handle: Any) -> object:
    """A PyCapsule "arrow_array_stream" holding a new stream over the table."""
    L = lib()
    p = L.llmrr_reader_stream_alloc()
    if not p:
        raise MemoryError("llmrr: cannot allocate an ArrowArrayStream")
    try:
        check(L.llmrr_reader_table_stream(table_handle, p))
        return _capi.PyCapsule_New(p, _STREAM, ctypes.cast(_free_stream_capsule, ctypes.c_void_p))
    except BaseException:
        L.llmrr_reader_stream_free(p)
        raise


# ---- numpy views ----------------------------------------------------------------------------

class _Export:
    """An exported schema + array; releasing it drops the library's reference."""

    def __init__(self, handle: Any) -> None:
        self.schema = ArrowSchema()
        self.array = ArrowArray()
        check(lib().llmrr_reader_table_export(handle, ctypes.byref(self.schema),
                                              ctypes.byref(self.array)))

    def __del__(self) -> None:
        for s in (self.array, self.schema):
            if s.release:
                s.release(ctypes.byref(s))


_E_INTERNAL = 900  # llmrr/format/status.h kInternal

_NUMPY = {b"i": np.int32, b"l": np.int64, b"L": np.uint64, b"f": np.float32,
          b"g": np.float64, b"C": np.uint8}


def _view(owner: _Export, address: int, dtype: Any, count: int) -> np.ndarray:
    """`count` elements at `address` as a read-only numpy array that keeps `owner` alive."""
    dt = np.dtype(dtype)
    if count == 0:
        return np.zeros(0, dtype=dt)
    buf = (ctypes.c_char * (count * dt.itemsize)).from_address(address)
    buf._llmrr_owner = owner  # the memory's keeper
    a = np.frombuffer(buf, dtype=dt, count=count)
    a.flags.writeable = False
    return a


def _strings(owner: _Export, arr: ArrowArray, n: int) -> np.ndarray:
    off = _view(owner, arr.buffers[1], np.int64, n + 1) if n else np.zeros(1, np.int64)
    data = ctypes.string_at(arr.buffers[2], int(off[-1])) if n and off[-1] else b""
    out = np.empty(n, dtype=object)
    out[:] = [data[a:b].decode("utf-8", "replace") for a, b in zip(off[:-1], off[1:])]
    return out


class Dictionary:
    """A dictionary-encoded string column before decoding: int32 `indices` into `names`.
    Decoded (names[indices], no loop over rows) when the column is first used."""

    def __init__(self, indices: np.ndarray, names: np.ndarray) -> None:
        self.indices = indices
        self.names = names

    def __len__(self) -> int:
        return len(self.indices)

    def decode(self) -> np.ndarray:
        if not len(self.names):
            return np.empty(len(self.indices), dtype=object)
        return self.names[self.indices]


def numpy_columns(handle: Any) -> dict[str, Any]:
    """The table's exported fields as numpy arrays: primitive columns as views of the
    library's buffers; dictionary strings (site_name) as a Dictionary (decoded at first use);
    fixed-size lists as (n, K) views; the prompt list as an object array of views, one per
    request."""
    ex = _Export(handle)
    root = ex.array
    cols: dict[str, Any] = {}
    for i in range(root.n_children):
        sch = ex.schema.children[i].contents
        arr = root.children[i].contents
        name = sch.name.decode()
        fmt = sch.format
        n = arr.length
        if sch.dictionary:
            idx = _view(ex, arr.buffers[1], np.int32, n)
            d = arr.dictionary.contents
            names = _strings(ex, d, d.length)
            cols[name] = Dictionary(idx, names)
        elif fmt in _NUMPY:
            cols[name] = _view(ex, arr.buffers[1], _NUMPY[fmt], n)
        elif fmt == b"U":
            cols[name] = _strings(ex, arr, n)
        elif fmt.startswith(b"+w:"):
            k = int(fmt[3:])
            child = arr.children[0].contents
            cfmt = sch.children[0].contents.format
            cols[name] = _view(ex, child.buffers[1], _NUMPY[cfmt], n * k).reshape(n, k)
        elif fmt == b"+L":
            off = _view(ex, arr.buffers[1], np.int64, n + 1)
            child = arr.children[0].contents
            values = _view(ex, child.buffers[1], np.int32, child.length)
            lists = np.empty(n, dtype=object)
            for r in range(n):
                lists[r] = values[off[r]:off[r + 1]]
            cols[name] = lists
        else:
            raise _lib.LlmrrError(_E_INTERNAL, "llmrr: unexpected Arrow format %r for column %s"
                                  % (fmt, name))
    return cols


def column_address(handle: Any, column: str) -> int:
    """The library's pointer to a fixed-size column (what zero-copy exports point at)."""
    data = ctypes.c_void_p()
    n = ctypes.c_int64()
    check(lib().llmrr_reader_table_column(handle, column.encode(), ctypes.byref(data),
                                          ctypes.byref(n)))
    return int(data.value or 0)
