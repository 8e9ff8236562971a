"""ctypes bindings of libllmrr_recorder_c.so: the recorder C ABI (llmrr/recorder.h) and the
reader C ABI (llmrr/reader.h). Everything else in the package goes through here.

Where the library is found, first hit wins:
  1. $LLMRR_RECORDER_LIB (a path to the .so);
  2. a copy inside the package, llmrr/lib/ (pip install copies
     build/default/recorder/libllmrr_recorder_c.so there when it exists, see python/setup.py);
  3. build/*/recorder/libllmrr_recorder_c.so above the package (a checkout, editable install);
  4. the dynamic linker's search path (libllmrr_recorder_c.so installed system-wide).
"""
from __future__ import annotations

import ctypes
import glob
import os
from typing import Any, Iterator

LIB_NAME = "libllmrr_recorder_c.so"
ABI_VERSION = 4

OK = 0
E_INVALID_ARGUMENT = 120

DTYPE_F32, DTYPE_BF16, DTYPE_F16 = 0, 1, 2
CAPTURE = {"none": 0, "layers": 1, "all": 2}
LOGITS = {"topk": 0, "full": 1}
SEGMENT_PREFILL, SEGMENT_DECODE = 0, 1
OP_GEMM, OP_RMSNORM, OP_ATTENTION, OP_COMBINE = 0, 1, 2, 3
ROUTE_KEPT, ROUTE_REROUTED, ROUTE_DROPPED = 0, 1, 2
FINISH_EOS, FINISH_MAX_TOKENS, FINISH_ABORTED = 0, 1, 2


class Config(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("tool_version", ctypes.c_char_p),
        ("model_name", ctypes.c_char_p),
        ("model_path", ctypes.c_char_p),
        ("architecture", ctypes.c_char_p),
        ("weight_hash", ctypes.c_char_p),
        ("weight_dtype", ctypes.c_char_p),
        ("compute_dtype", ctypes.c_char_p),
        ("layers", ctypes.c_int32),
        ("hidden", ctypes.c_int32),
        ("vocab", ctypes.c_int32),
        ("heads", ctypes.c_int32),
        ("kv_heads", ctypes.c_int32),
        ("experts", ctypes.c_int32),
        ("experts_per_token", ctypes.c_int32),
        ("policy", ctypes.c_char_p),
        ("threads", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("capture", ctypes.c_int32),
        ("logits_mode", ctypes.c_int32),
        ("top_k", ctypes.c_int32),
        ("zstd_level", ctypes.c_int32),
        ("extra_config_json", ctypes.c_char_p),
        ("command_line", ctypes.c_char_p),
        ("device_name", ctypes.c_char_p),
        ("device_kind", ctypes.c_char_p),
        ("sync_on_close", ctypes.c_int32),
        ("fingerprint", ctypes.c_char_p),
        ("inline_steps", ctypes.c_int32),
        ("ring", ctypes.c_char_p),              # ABI 4: the flight recorder
        ("snapshot_trigger", ctypes.c_char_p),
        ("snapshot_output", ctypes.c_char_p),
    ]


class Request(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("prompt", ctypes.POINTER(ctypes.c_int32)),
        ("prompt_len", ctypes.c_size_t),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("max_tokens", ctypes.c_int32),
        ("arrival_step", ctypes.c_int64),
        ("stop_at_eos", ctypes.c_int32),
        ("label", ctypes.c_char_p),
    ]


class Segment(ctypes.Structure):
    _fields_ = [
        ("request", ctypes.c_uint64),
        ("start", ctypes.c_int32),
        ("count", ctypes.c_int32),
        ("cached", ctypes.c_int32),
        ("kind", ctypes.c_int32),
        ("sample", ctypes.c_int32),
    ]


class Plan(ctypes.Structure):
    _fields_ = [
        ("op", ctypes.c_int32),
        ("mode", ctypes.c_int32),
        ("order", ctypes.c_int32),
        ("separate_new_kv", ctypes.c_int32),
        ("splits", ctypes.c_uint32),
        ("split_size", ctypes.c_uint32),
        ("k_tile", ctypes.c_uint32),
        ("arrival", ctypes.POINTER(ctypes.c_uint16)),
        ("arrival_len", ctypes.c_size_t),
    ]


class Routing(ctypes.Structure):
    _fields_ = [
        ("layer", ctypes.c_int32),
        ("rows", ctypes.c_int64),
        ("k", ctypes.c_int32),
        ("experts_total", ctypes.c_int32),
        ("capacity", ctypes.c_int32),
        ("chosen", ctypes.c_void_p),
        ("experts", ctypes.c_void_p),
        ("gates", ctypes.c_void_p),
        ("outcome", ctypes.c_void_p),
    ]


class LlmrrError(RuntimeError):
    """A failed llmrr call: .code is the stable llmrr error code, str() its message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _candidates() -> Iterator[str]:
    env = os.environ.get("LLMRR_RECORDER_LIB")
    if env:
        yield env
        return
    # this file is llmrr/core/_lib.py; the bundled copy is llmrr/lib/ (python/setup.py)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    yield os.path.join(package, "lib", LIB_NAME)
    d = package
    for _ in range(4):
        d = os.path.dirname(d)
        for preset in ("default", "release", "cuda"):
            yield os.path.join(d, "build", preset, "recorder", LIB_NAME)
        for p in sorted(glob.glob(os.path.join(d, "build", "*", "recorder", LIB_NAME))):
            yield p
    yield LIB_NAME


_lib: ctypes.CDLL | None = None


def library_path() -> str:
    """The path of the library the package uses (loads it if needed)."""
    return lib()._name


def lib() -> ctypes.CDLL:
    """The loaded library, with argument and result types set."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if path != LIB_NAME and not os.path.exists(path):
            continue
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        _declare(handle)
        if handle.llmrr_recorder_abi_version() != ABI_VERSION:
            raise LlmrrError(E_INVALID_ARGUMENT,
                             "%s: recorder ABI version %d, this package speaks %d" %
                             (path, handle.llmrr_recorder_abi_version(), ABI_VERSION))
        _lib = handle
        return _lib
    raise OSError("llmrr: cannot load %s (tried: %s); build it with `cmake --build build/default "
                  "--target llmrr_recorder_c` or set LLMRR_RECORDER_LIB" %
                  (LIB_NAME, "; ".join(tried) or "no candidate path exists"))


def _declare(L: ctypes.CDLL) -> None:
    h = ctypes.c_void_p
    i32, i64, u64, vp, cp = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_void_p, \
        ctypes.c_char_p
    sig = {
        # recorder
        "llmrr_recorder_config_init_sized": (None, [ctypes.POINTER(Config), ctypes.c_size_t]),
        "llmrr_recorder_open": (ctypes.c_int, [cp, ctypes.POINTER(Config), ctypes.POINTER(h)]),
        "llmrr_recorder_close": (ctypes.c_int, [h]),
        "llmrr_recorder_add_request": (ctypes.c_int, [h, ctypes.POINTER(Request)]),
        "llmrr_recorder_begin_step": (ctypes.c_int, [h, i64, ctypes.POINTER(Segment),
                                                     ctypes.c_size_t]),
        "llmrr_recorder_record_plan": (ctypes.c_int, [h, cp, ctypes.POINTER(Plan)]),
        "llmrr_recorder_wants_rows": (ctypes.c_int, [h, cp]),
        "llmrr_recorder_record_rows": (ctypes.c_int, [h, cp, vp, i32, i64, i64, i64, vp]),
        "llmrr_recorder_record_fingerprints": (ctypes.c_int, [h, cp, vp, vp, vp, i64, i64, vp]),
        "llmrr_fingerprint_mixsum64": (u64, [vp, i64]),
        "llmrr_fingerprint_files": (ctypes.c_int, [ctypes.POINTER(cp), ctypes.c_size_t,
                                                   ctypes.c_char_p, ctypes.c_size_t]),
        "llmrr_recorder_record_routing": (ctypes.c_int, [h, ctypes.POINTER(Routing)]),
        "llmrr_recorder_record_logits": (ctypes.c_int, [h, u64, i32, i64, vp, i32, i64]),
        "llmrr_recorder_record_token": (ctypes.c_int, [h, u64, i32, i32, ctypes.c_double]),
        "llmrr_recorder_record_finish": (ctypes.c_int, [h, u64, i32, i32]),
        "llmrr_recorder_record_op": (ctypes.c_int, [h, i32, i32, i32, i32, i32, cp, cp, cp]),
        "llmrr_recorder_end_step": (ctypes.c_int, [h]),
        "llmrr_recorder_mark_lossy": (ctypes.c_int, [h, cp]),
        "llmrr_recorder_discard_step": (ctypes.c_int, [h, cp]),
        "llmrr_recorder_status": (ctypes.c_int, [h]),
        "llmrr_recorder_last_error": (cp, []),
        "llmrr_error_name": (cp, [ctypes.c_int]),
        "llmrr_recorder_abi_version": (ctypes.c_int, []),
        # reader
        "llmrr_reader_open": (ctypes.c_int, [cp, ctypes.POINTER(h)]),
        "llmrr_reader_close": (None, [h]),
        "llmrr_reader_header_json": (cp, [h]),
        "llmrr_reader_tables": (cp, [h]),
        "llmrr_reader_columns": (cp, [h, cp]),
        "llmrr_reader_rows": (i64, [h, cp]),
        "llmrr_reader_column": (ctypes.c_int, [h, cp, cp, ctypes.POINTER(vp),
                                               ctypes.POINTER(i64)]),
        "llmrr_reader_strings": (ctypes.c_int, [h, cp, cp, ctypes.POINTER(vp),
                                                ctypes.POINTER(i64)]),
        "llmrr_reader_blob": (ctypes.c_int, [h, i64, vp, ctypes.c_size_t,
                                             ctypes.POINTER(ctypes.c_size_t)]),
        "llmrr_reader_verify": (ctypes.c_int, [h]),
        "llmrr_site_name": (cp, [u64]),
        "llmrr_site_pack": (u64, [cp, ctypes.POINTER(ctypes.c_int)]),
        "llmrr_reader_last_error": (cp, []),
    }
    for name, (res, args) in sig.items():
        fn = getattr(L, name)
        fn.restype = res
        fn.argtypes = args


def llmrr_binary() -> str | None:
    """The llmrr CLI for the modules that run it (the campaigns): $LLMRR_BIN, else
    llmrr on PATH; None when neither is an executable file."""
    import shutil
    b = os.environ.get("LLMRR_BIN") or shutil.which("llmrr")
    return b if b and os.path.isfile(b) and os.access(b, os.X_OK) else None


_torch_dtypes: dict[Any, int] | None = None


def torch_dtypes() -> dict[Any, int]:
    """torch dtype -> the recorder's dtype code, for the dtypes it takes as they are (torch is
    imported on the first call, not with this module)."""
    global _torch_dtypes
    if _torch_dtypes is None:
        import torch
        _torch_dtypes = {torch.float32: DTYPE_F32, torch.bfloat16: DTYPE_BF16,
                         torch.float16: DTYPE_F16}
    return _torch_dtypes


def weight_hash(paths: list[str]) -> str:
    """A model's weights as a run header's weight_hash ("xxh3-64:<hex>" of the files' bytes,
    in the order given, as one stream: llmrr_fingerprint_files)."""
    L = lib()
    arr = (ctypes.c_char_p * len(paths))(*[p.encode() for p in paths])
    out = ctypes.create_string_buffer(32)
    rc = L.llmrr_fingerprint_files(arr, len(paths), out, len(out))
    if rc != 0:
        raise LlmrrError(rc, L.llmrr_recorder_last_error().decode(errors="replace"))
    return out.value.decode()


def error_name(code: int) -> str:
    return lib().llmrr_error_name(code).decode()


def site_name(packed: int) -> str:
    """'L3.mlp.down' for a packed site (as traces store them); '' for an invalid one."""
    return lib().llmrr_site_name(int(packed)).decode()


def site_pack(name: str) -> int:
    """The packed form of a site name; ValueError for a name llmrr does not know."""
    ok = ctypes.c_int(0)
    v = lib().llmrr_site_pack(name.encode(), ctypes.byref(ok))
    if not ok.value:
        raise ValueError("unknown llmrr site name %r (runtime/include/llmrr/format/site.h: "
                         "embed, L<i>.attn.q, L<i>.mlp.down, L<i>.moe.router, L<i>.out, "
                         "final_norm, logits, ...)" % name)
    return v
