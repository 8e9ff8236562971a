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
import ctypes
import os

from . import _lib
from ._lib import LlmrrError


def inline_steps(host_rows):
    """config.inline_steps for a runtime: 1 (rows fingerprinted where they are, each step
    completed on the calling thread) when its rows live on the host, whose cores its own
    threads fill; 0 (the library's thread) for a GPU runtime, whose host cores are free.
    $LLMRR_INLINE_STEPS=0|1 overrides (to measure one against the other)."""
    v = os.environ.get("LLMRR_INLINE_STEPS", "")
    if v in ("0", "1"):
        return int(v)
    return 1 if host_rows else 0


class Recorder:
    def __init__(self, path, **config):
        L = _lib.lib()
        self._L = L
        cfg = _lib.Config()
        L.llmrr_recorder_config_init(ctypes.byref(cfg))
        self._keep = []  # strings must outlive the open call
        fields = {name for name, _ in _lib.Config._fields_} - {"struct_size"}
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
        self._wants = {}
        self._site_bytes = {}  # host_rows: site name -> its bytes, encoded once
        self._record_rows = L.llmrr_recorder_record_rows

    def _check(self, rc, what):
        if rc != _lib.OK:
            raise LlmrrError(rc, "%s: %s (%d): %s" % (what, _lib.error_name(rc), rc,
                                                      self._L.llmrr_recorder_last_error().decode()))

    def add_request(self, rid, prompt, max_tokens, label="", temperature=0.0, top_k=0,
                    top_p=1.0, seed=0, stop_at_eos=True, arrival_step=0):
        prompt = [int(t) for t in prompt]
        ids = (ctypes.c_int32 * max(1, len(prompt)))(*prompt)
        lab = label.encode()
        req = _lib.Request(id=rid, prompt=ids, prompt_len=len(prompt), temperature=temperature,
                           top_k=top_k, top_p=top_p, seed=seed, max_tokens=max_tokens,
                           arrival_step=arrival_step, stop_at_eos=1 if stop_at_eos else 0,
                           label=lab)
        self._check(self._L.llmrr_recorder_add_request(self._h, ctypes.byref(req)),
                    "add_request %d" % rid)

    def begin_step(self, step, segments):
        arr = (_lib.Segment * max(1, len(segments)))(*[_lib.Segment(**s) for s in segments])
        self._check(self._L.llmrr_recorder_begin_step(self._h, step, arr, len(segments)),
                    "begin_step %d" % step)

    def wants_rows(self, site):
        v = self._wants.get(site)
        if v is None:
            v = self._L.llmrr_recorder_wants_rows(self._h, site.encode())
            if v < 0:
                self._check(-v, "wants_rows " + site)
            v = self._wants[site] = v == 1
        return v

    def rows(self, site, address, dtype, rows, cols, ld=0, batch_rows=None):
        br = None
        if batch_rows is not None:
            br = (ctypes.c_int32 * len(batch_rows))(*[int(b) for b in batch_rows])
        self._check(self._L.llmrr_recorder_record_rows(self._h, site.encode(), address, dtype, rows,
                                                       cols, ld, br), "rows " + site)

    def host_rows(self, site, x, rows):
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

    def fingerprints(self, site, hashes, l2, max_abs, cols, batch_rows=None):
        """Rows whose fingerprints were made where they live (a recorder opened with
        fingerprint="mixsum64"; llmrr.fingerprint computes them): numpy uint64 hashes and
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

    def routing(self, layer, rows, k, experts_total, chosen, experts=None, gates=None,
                outcome=None, capacity=0):
        """chosen / experts: int32 host addresses (rows x k); gates: float32; outcome: uint8."""
        r = _lib.Routing(layer=layer, rows=rows, k=k, experts_total=experts_total,
                         capacity=capacity, chosen=chosen, experts=experts, gates=gates,
                         outcome=outcome)
        self._check(self._L.llmrr_recorder_record_routing(self._h, ctypes.byref(r)),
                    "routing L%d" % layer)

    def logits(self, request, position, batch_row, address, dtype, vocab):
        self._check(self._L.llmrr_recorder_record_logits(self._h, request, position, batch_row,
                                                         address, dtype, vocab), "logits")

    def token(self, request, position, token, uniform=-1.0):
        self._check(self._L.llmrr_recorder_record_token(self._h, request, position, token, uniform),
                    "token")

    def finish(self, request, reason, generated):
        self._check(self._L.llmrr_recorder_record_finish(self._h, request, reason, generated),
                    "finish")

    def end_step(self):
        self._check(self._L.llmrr_recorder_end_step(self._h), "end_step")

    def mark_lossy(self, reason):
        """Marks the trace lossy with `reason` (records are missing or wrong); recording goes
        on. The first reason wins; `llmrr verify` and `inspect` print it."""
        self._check(self._L.llmrr_recorder_mark_lossy(self._h, str(reason).encode()),
                    "mark_lossy")

    def discard_step(self, reason):
        """Drops the open step (nothing of it is written) and marks the trace lossy with
        `reason`; its arrivals come with the next step."""
        self._check(self._L.llmrr_recorder_discard_step(self._h, str(reason).encode()),
                    "discard_step")

    def close(self):
        if self._h:
            rc = self._L.llmrr_recorder_close(self._h)
            self._h = ctypes.c_void_p()
            self._check(rc, "close " + self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
