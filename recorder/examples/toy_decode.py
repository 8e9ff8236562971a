#!/usr/bin/env python3
"""toy_decode.py: a tiny numpy "runtime" that records its decoding loop through the llmrr C ABI
(libllmrr_recorder_c.so, loaded with ctypes; the declarations are python/llmrr/core/_lib.py's).

    LLMRR_RECORDER_LIB=build/default/recorder/libllmrr_recorder_c.so \
        python3 recorder/examples/toy_decode.py OUT.trace [--splits N] [--bf16-site]

The model: vocabulary 96, hidden 48, three layers of x += W2 relu(W1 x) with random weights
(numpy's default_rng(0)), a head matrix for the logits, greedy decoding of one prompt.
Rows are recorded as float32, except the MLP activations, which are handed over as float16
(the recorder widens them exactly). --splits N reduces the down projection in N split-K
ranges added in order, and records that plan.

Exit status: 0 ok, 1 a recorder call failed, 2 usage, 77 numpy is missing (a skip for ctest).
"""
import ctypes
import os
import sys

try:
    import numpy as np
except ImportError:  # ctest treats 77 as "skipped"
    print("toy_decode.py: numpy is not installed; skipping", file=sys.stderr)
    sys.exit(77)

# ---- the C ABI (llmrr/recorder.h) -------------------------------------------------------
# Its ctypes declarations are the llmrr Python package's (python/llmrr/core/_lib.py), taken from this
# checkout when the script runs from one, else from an installed package.

_CHECKOUT_PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
if os.path.isfile(os.path.join(_CHECKOUT_PYTHON, "llmrr", "core", "_lib.py")):
    sys.path.insert(0, os.path.normpath(_CHECKOUT_PYTHON))
from llmrr.core import _lib  # noqa: E402
from llmrr.core._lib import (DTYPE_F16, DTYPE_F32, FINISH_MAX_TOKENS, OP_GEMM,  # noqa: E402
                             SEGMENT_DECODE, SEGMENT_PREFILL, Config, Plan, Request, Segment)

CAPTURE_ALL = _lib.CAPTURE["all"]
LOGITS_TOPK = _lib.LOGITS["topk"]


def load_library():
    """The recorder library with its declarations ($LLMRR_RECORDER_LIB, else the build tree)."""
    return _lib.lib()


class Recorder:
    """A thin wrapper: every call raises RuntimeError with llmrr's message on failure."""

    def __init__(self, lib, path, **config):
        self.lib = lib
        cfg = Config()
        lib.llmrr_recorder_config_init(ctypes.byref(cfg))
        for key, value in config.items():
            setattr(cfg, key, value.encode() if isinstance(value, str) else value)
        self.handle = ctypes.c_void_p()
        self._check(lib.llmrr_recorder_open(path.encode(), ctypes.byref(cfg),
                                            ctypes.byref(self.handle)), "open")

    def _check(self, rc, what):
        if rc != _lib.OK:
            raise RuntimeError("%s: %s (%d): %s" % (what, self.lib.llmrr_error_name(rc).decode(), rc,
                                                    self.lib.llmrr_recorder_last_error().decode()))

    def add_request(self, rid, prompt, max_tokens, label=""):
        ids = (ctypes.c_int32 * len(prompt))(*prompt)
        req = Request(id=rid, prompt=ids, prompt_len=len(prompt), top_p=1.0,
                      max_tokens=max_tokens, stop_at_eos=0, label=label.encode())
        self._check(self.lib.llmrr_recorder_add_request(self.handle, ctypes.byref(req)),
                    "add_request")

    def begin_step(self, step, segments):
        arr = (Segment * len(segments))(*[Segment(**s) for s in segments])
        self._check(self.lib.llmrr_recorder_begin_step(self.handle, step, arr, len(segments)),
                    "begin_step")

    def plan(self, site, splits=1):
        p = Plan(op=OP_GEMM, splits=splits)
        self._check(self.lib.llmrr_recorder_record_plan(self.handle, site.encode(),
                                                        ctypes.byref(p)), "plan " + site)

    def wants_rows(self, site):
        return self.lib.llmrr_recorder_wants_rows(self.handle, site.encode()) == 1

    def rows(self, site, array):
        array = np.ascontiguousarray(array)
        dtype = {np.dtype(np.float32): DTYPE_F32, np.dtype(np.float16): DTYPE_F16}[array.dtype]
        rows, cols = array.shape
        self._check(self.lib.llmrr_recorder_record_rows(self.handle, site.encode(),
                                                        array.ctypes.data, dtype, rows, cols,
                                                        cols, None), "rows " + site)

    def logits(self, request, position, batch_row, row):
        row = np.ascontiguousarray(row, dtype=np.float32)
        self._check(self.lib.llmrr_recorder_record_logits(self.handle, request, position,
                                                          batch_row, row.ctypes.data, DTYPE_F32,
                                                          row.shape[0]), "logits")

    def token(self, request, position, token):
        self._check(self.lib.llmrr_recorder_record_token(self.handle, request, position, token,
                                                         -1.0), "token")

    def finish(self, request, generated):
        self._check(self.lib.llmrr_recorder_record_finish(self.handle, request,
                                                          FINISH_MAX_TOKENS, generated),
                    "finish")

    def end_step(self):
        self._check(self.lib.llmrr_recorder_end_step(self.handle), "end_step")

    def close(self):
        if self.handle:
            rc = self.lib.llmrr_recorder_close(self.handle)
            self.handle = None
            self._check(rc, "close")


# ---- the toy model ----------------------------------------------------------------------

V, D, F, L = 96, 48, 96, 3


def matmul_split(x, w, splits):
    """x @ w.T with the reduction over k cut into `splits` ranges whose partials add in order."""
    k = x.shape[1]
    chunk = -(-k // splits)
    total = None
    for s in range(splits):
        part = x[:, s * chunk:(s + 1) * chunk] @ w[:, s * chunk:(s + 1) * chunk].T
        total = part if total is None else (total + part).astype(np.float32)
    return total.astype(np.float32)


def main(argv):
    args = [a for a in argv[1:]]
    splits = 1
    if "--splits" in args:
        i = args.index("--splits")
        splits = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1 or splits < 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = args[0]

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((V, D)).astype(np.float32)
    w1 = [(rng.standard_normal((F, D)) * 0.2).astype(np.float32) for _ in range(L)]
    w2 = [(rng.standard_normal((D, F)) * 0.2).astype(np.float32) for _ in range(L)]
    head = rng.standard_normal((V, D)).astype(np.float32)

    try:
        lib = load_library()
    except (OSError, _lib.LlmrrError) as e:
        print("toy_decode.py: cannot load the recorder library: %s (set LLMRR_RECORDER_LIB)" % e,
              file=sys.stderr)
        return 1
    rec = Recorder(lib, out, tool_version="toy_decode.py 1.0", model_name="toy-numpy-mlp",
                   architecture="toy-mlp", weight_dtype="f32", compute_dtype="f32", layers=L,
                   hidden=D, vocab=V, policy="split-k" if splits > 1 else "no-split", threads=1,
                   capture=CAPTURE_ALL, logits_mode=LOGITS_TOPK, top_k=10,
                   extra_config_json='{"example": "recorder/examples/toy_decode.py"}',
                   command_line=" ".join(argv))

    prompt = [3, 14, 15, 92, 65]
    max_tokens = 10
    tokens = list(prompt)
    rec.add_request(0, prompt, max_tokens, label="target")
    try:
        for step in range(max_tokens):
            if step == 0:  # prefill: every prompt row, the last one samples
                start, count, kind = 0, len(prompt), SEGMENT_PREFILL
            else:
                start, count, kind = len(tokens) - 1, 1, SEGMENT_DECODE
            rec.begin_step(step, [dict(request=0, start=start, count=count, cached=start,
                                       kind=kind, sample=1)])
            # Input of position p: its embedding plus the mean of the embeddings before it.
            x = np.empty((count, D), dtype=np.float32)
            for r, p in enumerate(range(start, start + count)):
                ctx = emb[tokens[:p]].mean(axis=0) if p > 0 else np.zeros(D, np.float32)
                x[r] = emb[tokens[p]] + ctx.astype(np.float32)
            rec.rows("embed", x)
            for l in range(L):
                rec.plan("L%d.mlp.up" % l)
                act = np.maximum(matmul_split(x, w1[l], 1), 0)
                if rec.wants_rows("L%d.mlp.act" % l):
                    rec.rows("L%d.mlp.act" % l, act.astype(np.float16))
                rec.plan("L%d.mlp.down" % l, splits)
                down = matmul_split(act, w2[l], splits)
                rec.rows("L%d.mlp.down" % l, down)
                x = (x + down).astype(np.float32)
                rec.rows("L%d.out" % l, x)
            rec.plan("logits")
            logits = matmul_split(x[-1:], head, 1)[0]
            pos = start + count - 1
            token = int(np.argmax(logits))
            rec.logits(0, pos, count - 1, logits)
            rec.token(0, pos + 1, token)
            tokens.append(token)
            if len(tokens) - len(prompt) == max_tokens:
                rec.finish(0, max_tokens)
            rec.end_step()
        rec.close()
    except RuntimeError as e:
        print("toy_decode.py: %s" % e, file=sys.stderr)
        return 1
    print("generated:", " ".join(str(t) for t in tokens[len(prompt):]))
    print("toy_decode.py: wrote %s" % out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
