"""llmrr.Recorder: the recorder C ABI (llmrr/recorder.h) for Python runtimes.

    with llmrr.Recorder("run.trace", model_name="m", layers=2, hidden=64, vocab=300) as rec:
        rec.add_request(0, prompt_ids, max_tokens=8)
        rec.begin_step(0, [dict(request=0, start=0, count=len(prompt_ids), kind=0, sample=1)])
        rec.rows("L0.out", ptr, llmrr.DTYPE_F32, rows, cols)   # pointer: no copy
        ...
        rec.end_step()

Settings are the fields of llmrr_recorder_config (e.g. capture="all", zstd_level=3,
sync_on_close=True); an unknown one raises TypeError.
Rows are passed as a host address (numpy .ctypes.data, torch .data_ptr()): the library
copies what it needs before the call returns (the buffer may be reused at once). Every call
raises LlmrrError with llmrr's message on failure.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any, Sequence

from . import _lib
from ._lib import LlmrrError


def inline_steps(host_rows: bool) -> int:
    """config.inline_steps for a runtime: 1 (rows fingerprinted where they are, each step
    completed on the calling thread) when its rows live on the host, whose cores its own
    threads fill; 0 (the library's thread) for a GPU runtime, whose host cores are free.
    $LLMRR_INLINE_STEPS=0|1 overrides (to measure one against the other)."""
    v = os.environ.get("LLMRR_INLINE_STEPS", "")
    if v in ("0", "1"):
        return int(v)
    return 1 if host_rows else 0


class Recorder:
    def __init__(self, path: str | os.PathLike[str], **config: Any) -> None:
        L = _lib.lib()
        self._L = L
        cfg = _lib.Config()
        L.llmrr_recorder_config_init_sized(ctypes.byref(cfg), ctypes.sizeof(cfg))
        self._keep: list[bytes] = []  # strings must outlive the open call
        fields = {f[0] for f in _lib.Config._fields_} - {"struct_size"}
        for key, value in config.items():
            if key not in fields:
                raise TypeError("llmrr.Recorder: unknown setting %r (llmrr_recorder_config has %s)"
                                % (key, ", ".join(sorted(fields))))
            if value is None:
                continue
            if isinstance(value, bool):
                value = int(value)
            if key in ("capture",) and isinstance(value, str):
                value = _lib.CAPTURE[value]
            if key in ("logits_mode",) and isinstance(value, str):
                value = _lib.LOGITS[value]
            if isinstance(value, str):
                value = value.encode()
                self._keep.append(value)
            setattr(cfg, key, value)
        self.path = os.fspath(path)
        self._h = ctypes.c_void_p()
        self._check(L.llmrr_recorder_open(self.path.encode(), ctypes.byref(cfg),
                                          ctypes.byref(self._h)), "open " + self.path)
        self._bound()

    def _bound(self) -> None:
        self._wants: dict[str, bool] = {}
        self._site_bytes: dict[str, bytes] = {}  # host_rows: site name -> its bytes, encoded once
        self._record_rows = self._L.llmrr_recorder_record_rows

    @classmethod
    def _of_handle(cls, L: ctypes.CDLL, handle: int, path: str) -> Recorder:
        """A Recorder over a recorder another library opened (and closes)."""
        rec = cls.__new__(cls)
        rec._L, rec._h, rec._keep, rec.path = L, ctypes.c_void_p(handle), [], path
        rec._bound()
        return rec

    def _check(self, rc: int, what: str) -> None:
        if rc != _lib.OK:
            raise LlmrrError(rc, "%s: %s (%d): %s" % (what, _lib.error_name(rc), rc,
                                                      self._L.llmrr_recorder_last_error().decode()))

    def add_request(self, rid: int, prompt: Sequence[int], max_tokens: int, label: str = "",
                    temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                    stop_at_eos: bool = True, arrival_step: int = 0) -> None:
        prompt = [int(t) for t in prompt]
        ids = (ctypes.c_int32 * max(1, len(prompt)))(*prompt)
        lab = label.encode()
        req = _lib.Request(id=rid, prompt=ids, prompt_len=len(prompt), temperature=temperature,
                           top_k=top_k, top_p=top_p, seed=seed, max_tokens=max_tokens,
                           arrival_step=arrival_step, stop_at_eos=1 if stop_at_eos else 0,
                           label=lab)
        self._check(self._L.llmrr_recorder_add_request(self._h, ctypes.byref(req)),
                    "add_request %d" % rid)

    def begin_step(self, step: int, segments: Sequence[dict[str, int]]) -> None:
        arr = (_lib.Segment * max(1, len(segments)))(*[_lib.Segment(**s) for s in segments])
        self._check(self._L.llmrr_recorder_begin_step(self._h, step, arr, len(segments)),
                    "begin_step %d" % step)

    def wants_rows(self, site: str) -> bool:
        v = self._wants.get(site)
        if v is None:
            v = self._L.llmrr_recorder_wants_rows(self._h, site.encode())
            if v < 0:
                self._check(-v, "wants_rows " + site)
            v = self._wants[site] = v == 1
        return v

    def rows(self, site: str, address: int | None, dtype: int, rows: int, cols: int, ld: int = 0,
             batch_rows: Sequence[int] | None = None) -> None:
        br = None
        if batch_rows is not None:
            br = (ctypes.c_int32 * len(batch_rows))(*[int(b) for b in batch_rows])
        self._check(self._L.llmrr_recorder_record_rows(self._h, site.encode(), address, dtype, rows,
                                                       cols, ld, br), "rows " + site)

    def host_rows(self, site: str, x: Any, rows: int) -> bool:
        """The hot path of a host runtime's row hooks, a few microseconds a call: the first
        `rows` rows of the CPU tensor x, viewed as [-1, x.shape[-1]], at `site`. The library
        fingerprints them where they are when each row is contiguous; otherwise (or for a
        dtype it does not take) a compact copy of those rows is made first. Returns False,
        recording nothing, when x has fewer than `rows` rows."""
        if x.dim() != 2:
            x = x.reshape(-1, x.shape[-1])
        n, cols = x.shape
        if n < rows:
            return False
        codes = _lib.torch_dtypes()
        code = codes.get(x.dtype)
        ld, unit = x.stride()
        if code is None or unit != 1 or (rows > 1 and ld < cols):
            x = x[:rows].detach()
            x = (x.float() if code is None else x).contiguous()
            code, ld = codes[x.dtype], cols
        b = self._site_bytes.get(site)
        if b is None:
            b = self._site_bytes[site] = site.encode()
        rc = self._record_rows(self._h, b, x.data_ptr(), code, rows, cols, ld, None)
        if rc != _lib.OK:
            self._check(rc, "rows " + site)
        return True

    def fingerprints(self, site: str, hashes: Any, l2: Any, max_abs: Any, cols: int,
                     batch_rows: Sequence[int] | None = None) -> None:
        """Rows whose fingerprints were made where they live (a recorder opened with
        fingerprint="mixsum64"; llmrr.core.fingerprint computes them): numpy uint64 hashes and
        float32 l2 / max |x| (or None), one per row of `cols` elements."""
        import numpy as np
        hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
        l2 = None if l2 is None else np.ascontiguousarray(l2, dtype=np.float32)
        mx = None if max_abs is None else np.ascontiguousarray(max_abs, dtype=np.float32)
        br = None
        if batch_rows is not None:
            br = (ctypes.c_int32 * len(batch_rows))(*[int(b) for b in batch_rows])
        self._check(self._L.llmrr_recorder_record_fingerprints(
            self._h, site.encode(), hashes.ctypes.data,
            None if l2 is None else l2.ctypes.data, None if mx is None else mx.ctypes.data,
            len(hashes), cols, br), "fingerprints " + site)

    def routing(self, layer: int, rows: int, k: int, experts_total: int, chosen: int | None,
                experts: int | None = None, gates: int | None = None,
                outcome: int | None = None, capacity: int = 0) -> None:
        """chosen / experts: int32 host addresses (rows x k); gates: float32; outcome: uint8."""
        r = _lib.Routing(layer=layer, rows=rows, k=k, experts_total=experts_total,
                         capacity=capacity, chosen=chosen, experts=experts, gates=gates,
                         outcome=outcome)
        self._check(self._L.llmrr_recorder_record_routing(self._h, ctypes.byref(r)),
                    "routing L%d" % layer)

    def logits(self, request: int, position: int, batch_row: int, address: int | None,
               dtype: int, vocab: int) -> None:
        self._check(self._L.llmrr_recorder_record_logits(self._h, request, position, batch_row,
                                                         address, dtype, vocab), "logits")

    def token(self, request: int, position: int, token: int, uniform: float = -1.0) -> None:
        self._check(self._L.llmrr_recorder_record_token(self._h, request, position, token, uniform),
                    "token")

    def finish(self, request: int, reason: int, generated: int) -> None:
        self._check(self._L.llmrr_recorder_record_finish(self._h, request, reason, generated),
                    "finish")

    def op(self, name: str, op: str = "", attrs: str = "", *, layer: int = -1, layers: int = 1,
           graph: int = 0, first_row: int = 0, rows: int = 0) -> None:
        """What one op of the runtime ran with (format 1.6 op records; `llmrr diff` names the
        keys that changed at the first differing site): `attrs` is space-separated key=value
        pairs (keys [a-z0-9_.], values without spaces); layers >= 1 consecutive layers from
        `layer` (-1: outside the layers) ran it the same way, over batch rows [first_row,
        first_row + rows) (rows 0: the whole step)."""
        self._check(self._L.llmrr_recorder_record_op(self._h, layer, layers, graph, first_row,
                                                     rows, name.encode(), op.encode(),
                                                     attrs.encode()), "op " + name)

    def end_step(self) -> None:
        self._check(self._L.llmrr_recorder_end_step(self._h), "end_step")

    def mark_lossy(self, reason: object) -> None:
        """Marks the trace lossy with `reason` (records are missing or wrong); recording goes
        on. The first reason wins; `llmrr verify` and `inspect` print it."""
        self._check(self._L.llmrr_recorder_mark_lossy(self._h, str(reason).encode()),
                    "mark_lossy")

    def discard_step(self, reason: object) -> None:
        """Drops the open step (nothing of it is written) and marks the trace lossy with
        `reason`; its arrivals come with the next step."""
        self._check(self._L.llmrr_recorder_discard_step(self._h, str(reason).encode()),
                    "discard_step")

    def close(self) -> None:
        if self._h:
            rc = self._L.llmrr_recorder_close(self._h)
            self._h = ctypes.c_void_p()
            self._check(rc, "close " + self.path)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def shared_recorder() -> Recorder | None:
    """The recorder `llmrr record-cuda`'s injection library shares with the process, when
    $LLMRR_SHARED_RECORDER_LIB names a library that exports `llmrr_recorder*
    llmrr_recorder_shared(void)` and it has one; else None. Its owner closes it, so that
    kernel records and a runtime's steps land in one trace (llmrr.runtimes.torch and
    llmrr.runtimes.vllm write into it instead of opening a file)."""
    path = os.environ.get("LLMRR_SHARED_RECORDER_LIB")
    if not path:
        return None
    L = ctypes.CDLL(path)
    fn = getattr(L, "llmrr_recorder_shared", None)
    if fn is None:
        return None
    fn.restype = ctypes.c_void_p
    h = fn()
    if not h:
        return None
    _lib._declare(L)
    return Recorder._of_handle(L, h, path)
