"""llmrr.runtimes.vllm: record vLLM engine steps into an llmrr trace (a vLLM general plugin).

    LLMRR_VLLM_TRACE=run.trace python serve.py          # any vLLM program
    llmrr record-vllm -o run.trace -- python serve.py   # the same, from the llmrr CLI

vLLM loads the plugin (entry point group vllm.general_plugins) in every process it starts;
when $LLMRR_VLLM_TRACE names a trace, the plugin patches the model runner class, so the
recording happens where the model runs: in the worker process in vLLM's default
multiprocess mode, in the caller's process with VLLM_ENABLE_V1_MULTIPROCESSING=0. One
trace per worker: with tensor parallelism, rank r > 0 writes <trace>.rank<r>.

Per engine step (one execute_model / sample_tokens pair) it records:
- the batch composition, in the order the model runner lays out the step's rows (read in
  _prepare_inputs, after vLLM updated its persistent batch, and checked against the step's
  output: a step whose order differs is dropped and the trace marked lossy): for each
  scheduled request its rows, positions (from the request's computed tokens, so a
  prefix-cache hit starts past 0), prefill chunk or decode, and whether the step samples
  it. Requests become llmrr requests with their prompt, sampling parameters and arrival
  step; vLLM's id "8-8c4800be" is request 8 (a numeric user id), other ids are numbered in
  arrival order and kept as label.
- row fingerprints at llmrr's sites through forward hooks on the model's modules (capture
  "layers": L<i>.out and the logits; "all" adds attention and MLP sites; "none": neither),
  hashed with "mixsum64": host tensors by the C library in place, GPU tensors where they
  live (llmrr.core.fingerprint), with one copy of the hashes to the host per step.
- the logits of every sampled row (the recorder keeps the top-K), the sampled tokens, and
  MoE routing (top-k ids and weights) where the model exposes its router.
- a run header with vLLM and torch versions, attention backend, dtype, eager or compiled,
  VLLM_BATCH_INVARIANT, max_num_batched_tokens, chunked prefill, prefix caching, TP size
  and device.

Under `llmrr record-cuda` ($LLMRR_SHARED_RECORDER_LIB names the injection library) the steps
go into that library's trace instead, bracketed with the NVTX range "llmrr.step", so kernel
records and fingerprints share step numbers (rows are then copied to the host and hashed
there: that trace is xxh3-64). Not verified on a GPU yet.

In eager mode (enforce_eager=True) the rows come from forward hooks. A compiled model gets
llmrr's sites as the llmrr::site_rows custom op, attached right after vLLM loads the model and
before it compiles it (llmrr.runtimes.vllm.compiled); the header says which.

Under async scheduling vLLM collects a step's tokens after the next step has run: each step
is kept on a tape (its rows hashed as they come) and written, in step order, when vLLM calls
its output's get_output(), so tokens and finishes land in the step that produced them.

Settings, shared by every llmrr recorder: $LLMRR_CAPTURE (none | layers | all, default
layers), $LLMRR_TOP_K (32); the older $LLMRR_VLLM_CAPTURE / $LLMRR_VLLM_TOP_K are read when
those are unset.
Recording never breaks vLLM: a failure warns once on stderr, marks the trace lossy with its
reason (llmrr verify prints it), and stops recording; vLLM goes on.
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..._version import __version__
from .hooks import Hooks, Row, Sink, _warn, patch_router_selection, vllm_router


def weight_hash_of(model: str) -> str:
    """The run header's weight_hash: xxh3-64 of the model's weight files (a directory's
    *.safetensors, else *.bin / *.pt, in name order; a .gguf file itself), "" when there are
    none here (a hub id not yet downloaded) or $LLMRR_WEIGHT_HASH=0 (reading every byte of a
    very large model at start-up is the cost)."""
    if os.environ.get("LLMRR_WEIGHT_HASH", "1") == "0":
        return ""
    import glob

    from ...core import _lib
    if os.path.isfile(model):
        files = [model]
    else:
        files = []
        for pattern in ("*.safetensors", "*.bin", "*.pt"):
            files = sorted(glob.glob(os.path.join(glob.escape(model), pattern)))
            if files:
                break
    if not files:
        return ""
    try:
        return _lib.weight_hash(files)
    except (OSError, _lib.LlmrrError) as e:
        _warn("the weights' hash is left empty: %s" % e)
        return ""

if TYPE_CHECKING:
    from ...core.fingerprint import Pending
    from ...core.recorder import Recorder
    from .compiled import CompiledSites

ENV_TRACE = "LLMRR_VLLM_TRACE"
ENV_CAPTURE = "LLMRR_CAPTURE"
ENV_TOP_K = "LLMRR_TOP_K"
ENV_OPS = "LLMRR_VLLM_OPS"  # 0: no op records (format 1.6)
# Seconds a stopping server gives its engine processes before it kills them (vLLM's own
# default, --shutdown-timeout 0, kills the engine core's process tree at once, the worker
# that records with it, so its trace would never be closed).
ENV_SHUTDOWN_GRACE = "LLMRR_VLLM_SHUTDOWN_GRACE"
# Before the one scheme (LLMRR_<RUNTIME>_TRACE switches a recorder on, LLMRR_CAPTURE and
# LLMRR_TOP_K set every recorder) the plugin read these; still read when the new ones are unset.
_OLD_NAMES = {ENV_CAPTURE: "LLMRR_VLLM_CAPTURE", ENV_TOP_K: "LLMRR_VLLM_TOP_K"}
STEP_RANGE = "llmrr.step"
PRODUCER = "llmrr.runtimes.vllm"  # the run header's extra_config "producer"


def _setting(name: str, default: str) -> str:
    value = os.environ.get(name)
    if value is None:
        value = os.environ.get(_OLD_NAMES[name], default)
    return value


_patched = False
_active: list[_StepRecorder] = []  # the step recorders of this process


def rotate(path: str | None) -> int:
    """In-process vLLM (VLLM_ENABLE_V1_MULTIPROCESSING=0): close the current trace and record
    the next steps into `path`, so that one engine records one trace per run (the fuzzer
    and llmrr.campaigns.vllm_replay do this); path None closes it and records nothing until
    the next rotate(path). Returns the number of model runners switched (0 before the first
    step)."""
    for r in _active:
        r.reopen(path)
    return len(_active)


def active_step() -> int:
    """The step number the first model runner of this process recorded last (-1 before its
    first step, and after a rotate); what an in-process driver steps the engine by."""
    return _active[0].step if _active else -1


def _on_exit(close: Callable[[], None]) -> None:
    """Runs `close` when this process ends, however it ends short of a kill: at interpreter
    exit (atexit) and, in a multiprocessing child (vLLM's engine core and its workers, which
    leave by os._exit, where atexit never runs), from multiprocessing's exit finalizers.
    close() is idempotent, so running from both is harmless."""
    import atexit
    import multiprocessing.util

    atexit.register(close)
    multiprocessing.util.Finalize(None, close, exitpriority=100)


def close_all() -> None:
    """Closes the traces of this process's model runners (the fuzzer, after its last run)."""
    for r in list(_active):
        r.close()


def register() -> None:
    """vLLM general plugin entry point: runs in every vLLM process. Patches the model runner
    when $LLMRR_VLLM_TRACE is set; does nothing otherwise."""
    global _patched
    if _patched or not os.environ.get(ENV_TRACE):
        return
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except Exception as e:  # an unknown vLLM layout: say so, never break vLLM
        _warn("cannot find vLLM's model runner (%s); not recording" % e)
        return
    if not hasattr(GPUModelRunner, "_prepare_inputs"):
        # The batch's rows are taken where the runner lays them out; without that point a
        # row could be credited to another request.
        _warn("this vLLM's model runner has no _prepare_inputs; not recording")
        return
    _patch(GPUModelRunner)
    patch_router_selection()
    _patch_shutdown()
    _patched = True


def _patch_shutdown() -> None:
    """A server stopped by SIGINT / SIGTERM ends its engine processes through
    vllm.v1.utils.shutdown(procs, timeout): SIGTERM, a wait of `timeout`, then SIGKILL of each
    process tree. With vLLM's default request timeout (0) the wait is 0 s and the worker is
    killed before it can close its trace. While recording the wait is at least
    $LLMRR_VLLM_SHUTDOWN_GRACE seconds (5): the engine core stops its workers, each closes
    its trace from its exit finalizer, and the kill finds nothing left to close."""
    try:
        grace = float(os.environ.get(ENV_SHUTDOWN_GRACE, "5"))
    except ValueError:
        _warn("%s must be a number of seconds; using 5" % ENV_SHUTDOWN_GRACE)
        grace = 5.0
    if grace <= 0:
        return
    import importlib
    try:
        utils = importlib.import_module("vllm.v1.utils")
    except Exception as e:  # noqa: BLE001 - an unknown layout: say so, never break vLLM
        _warn("cannot find vLLM's process shutdown (%s): a stopped server may kill its "
              "worker before the trace is closed" % e)
        return
    orig = getattr(utils, "shutdown", None)
    if orig is None:
        _warn("vllm.v1.utils has no shutdown: a stopped server may kill its worker before "
              "the trace is closed")
        return

    def shutdown(procs: Any, timeout: float | None = None) -> Any:
        return orig(procs, timeout=max(grace, timeout or 0.0))

    # Callers bind it by name (`from vllm.v1.utils import shutdown`): a module imported from
    # now on takes the patched one; one imported already is patched where it took it.
    setattr(utils, "shutdown", shutdown)  # noqa: B010
    for name in ("vllm.v1.engine.utils", "vllm.v1.engine.coordinator"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "shutdown", None) is orig:
            setattr(mod, "shutdown", shutdown)  # noqa: B010


def _patch(cls: Any) -> None:
    orig_execute = cls.execute_model
    orig_sample = getattr(cls, "sample_tokens", None)
    orig_prepare = cls._prepare_inputs
    orig_build = getattr(cls, "_build_attention_metadata", None)

    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        rec: _StepRecorder | None
        if not hasattr(self, "_llmrr"):  # the first step of this runner: its model is loaded
            try:
                rec = _StepRecorder(self)
            except Exception as e:
                _warn("recording not started: %s: %s" % (type(e).__name__, e))
                rec = None
            self._llmrr = rec
        else:
            rec = self._llmrr
        if rec is not None:
            rec.safe(rec.begin, scheduler_output)
        out = orig_execute(self, scheduler_output, *args, **kwargs)
        if rec is not None and out is not None and orig_sample is not None:
            rec.safe(rec.end, out)  # this vLLM sampled inside execute_model
        return out

    def _prepare_inputs(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        # The persistent batch is updated by now (new requests placed, holes condensed, rows
        # reordered for the attention backend): its order is the order of the step's rows.
        rec = getattr(self, "_llmrr", None)
        if rec is not None:
            rec.safe(rec.start, scheduler_output)
        out = orig_prepare(self, scheduler_output, *args, **kwargs)
        if rec is not None and orig_build is None:
            rec.safe(rec.planned, out)  # an older vLLM: the metadata come from here
        return out

    def _build_attention_metadata(self: Any, *args: Any, **kwargs: Any) -> Any:
        assert orig_build is not None
        out = orig_build(self, *args, **kwargs)
        rec = getattr(self, "_llmrr", None)
        if rec is not None:
            rec.safe(rec.planned, out)
        return out

    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        assert orig_sample is not None
        out = orig_sample(self, *args, **kwargs)
        rec = getattr(self, "_llmrr", None)
        if rec is not None:
            rec.safe(rec.end, out)
        return out

    def wrap_load(c: Any) -> None:
        orig_load = c.__dict__.get("load_model")
        if orig_load is None:
            return

        def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig_load(self, *args, **kwargs)
            _compiled_sites(self)
            return out
        c.load_model = load_model

    wrap_load(cls)
    try:  # the CPU runner loads (and warms up) its own way
        from vllm.v1.worker.cpu_model_runner import CPUModelRunner
        wrap_load(CPUModelRunner)
    except Exception:
        pass
    cls.execute_model = execute_model
    cls._prepare_inputs = _prepare_inputs
    if orig_build is not None:
        cls._build_attention_metadata = _build_attention_metadata
    if orig_sample is not None:
        cls.sample_tokens = sample_tokens


def _compiled_sites(runner: Any) -> None:
    """Right after vLLM loaded the model and before it compiles it: llmrr's sites as the
    llmrr::site_rows op, when the model will be compiled and rows are captured."""
    capture = _setting(ENV_CAPTURE, "layers")
    cfg = runner.vllm_config
    if getattr(cfg.model_config, "enforce_eager", False) or capture not in ("layers", "all") \
            or getattr(runner, "_llmrr_sites", None) is not None:
        return
    try:
        from .compiled import CompiledSites
        runner._llmrr_sites = CompiledSites(runner, capture)
    except Exception as e:  # never break vLLM: the steps are still recorded
        _warn("cannot put llmrr's sites into the compiled model (%s: %s); rows will not be "
              "recorded" % (type(e).__name__, e))


def _attention_metadata(prepared: Any) -> list[Any]:
    """The attention metadata objects in what _build_attention_metadata (or an older vLLM's
    _prepare_inputs) returned (a tuple holding a dict of layer name -> metadata, or a list of
    such dicts per ubatch); nothing when none is found."""
    found: list[Any] = []

    def walk(x: Any, depth: int) -> None:
        if depth > 3 or len(found) >= 16:
            return
        if isinstance(x, dict):
            for v in x.values():
                walk(v, depth + 1)
        elif isinstance(x, (list, tuple)):
            for v in x[:16]:
                walk(v, depth + 1)
        elif type(x).__name__.endswith("Metadata") and hasattr(x, "__dict__"):
            found.append(x)
    walk(prepared, 0)
    return found


def _scalar_attrs(meta: Any) -> str:
    """A metadata object's int and bool fields as sorted key=value pairs (keys lowercased, at
    most 4096 bytes). Tensors are left out: the CPU backend's thread schedule
    (scheduler_metadata) hashed differently in two runs of the same batch (bytes that are
    not the plan), so it would name a change that is not one."""
    out: list[str] = []
    for k in sorted(vars(meta)):
        v = getattr(meta, k, None)
        key = "".join(c if c.isalnum() or c in "_." else "_" for c in k.lower())
        if not key or not key.isascii():
            continue
        if isinstance(v, bool):
            out.append("%s=%d" % (key, int(v)))
        elif isinstance(v, int):
            out.append("%s=%d" % (key, v))
    text = ""
    for pair in out:
        if len(text) + len(pair) + 1 > 4096:
            break
        text = pair if not text else text + " " + pair
    return text


def _versions() -> tuple[str | None, str]:
    import torch
    try:
        import vllm
        v: str | None = vllm.__version__
    except Exception:
        v = None
    return v, str(torch.__version__)


class _Known:
    """What the recorder knows of one vLLM request."""

    def __init__(self, prompt_len: int, eos: set[int], max_tokens: int,
                 stop_at_eos: bool) -> None:
        self.prompt_len = prompt_len
        self.generated = 0
        self.done = False
        self.eos = eos
        self.max_tokens = max_tokens
        self.stop_at_eos = stop_at_eos


class _StepRecorder(Hooks):
    """Records the steps of one model runner (one worker)."""

    def __init__(self, runner: Any) -> None:
        from ...core import recorder as recorder_mod
        from ...core.fingerprint import KIND, Pending
        from ...core.recorder import Recorder
        self.runner = runner
        self._Pending = Pending
        self.failed = False
        self.open = False  # a trace is open (rotate(None) and close() close it)
        self.capture = _setting(ENV_CAPTURE, "layers")
        if self.capture not in ("none", "layers", "all"):
            raise ValueError("%s must be none, layers or all, found %r" % (ENV_CAPTURE,
                                                                          self.capture))
        top_k = int(_setting(ENV_TOP_K, "32"))
        path = os.environ[ENV_TRACE]
        cfg = runner.vllm_config
        rank = getattr(cfg.parallel_config, "rank", 0) or 0
        if rank:
            path = "%s.rank%d" % (path, rank)
        self.eager = bool(getattr(cfg.model_config, "enforce_eager", False))
        # A compiled model records its rows through the llmrr::site_rows op that
        # llmrr.runtimes.vllm.compiled put into it before vLLM compiled it (load_model).
        self.compiled: CompiledSites | None = getattr(runner, "_llmrr_sites", None)
        self.hooks_work = self.eager or self.compiled is not None
        header = self._header(runner, cfg)
        if self.compiled is not None:
            header["row_hooks"] = ("compiled: llmrr::site_rows in the compiled model (%d sites)"
                                   % len(self.compiled.sites))
        if not self.hooks_work and self.capture != "none":
            _warn("the model is compiled (enforce_eager=False) and llmrr's sites could not be "
                  "put into it: %s records the steps only (batch, logits, tokens), no row "
                  "fingerprints" % path)
        hf = cfg.model_config.hf_config
        text = getattr(hf, "text_config", None) or hf

        def get(*names: str) -> Any:
            for n in names:
                v = getattr(text, n, None)
                if v is not None:
                    return v
            return 0
        dtype = {"torch.float32": "f32", "torch.bfloat16": "bf16",
                 "torch.float16": "f16"}.get(str(cfg.model_config.dtype),
                                             str(cfg.model_config.dtype))
        vllm_v, torch_v = _versions()
        self.vocab = int(get("vocab_size"))
        self.layers = int(get("num_hidden_layers"))
        self.ops = os.environ.get(ENV_OPS, "1") != "0"
        self.batch_invariant = bool(header["batch_invariant"])  # the run's, as the header says
        self.n_experts = int(get("num_local_experts", "num_experts", "n_routed_experts"))
        if self.n_experts:
            model = runner.get_model()
            moes = [m for m in model.modules() if hasattr(m, "experts")]
            header["routing"] = (
                "as vLLM's router selected it (FusedMoERouter.select_experts)"
                if any(vllm_router(m) is not None for m in moes) else
                "recomputed from the router logits (softmax top-k): this vLLM has no "
                "FusedMoERouter")
        eos = getattr(hf, "eos_token_id", None)
        self.eos = set(int(e) for e in (eos if isinstance(eos, (list, tuple)) else
                                        ([] if eos is None else [eos])))
        self._Recorder = Recorder
        on_cuda = str(header["device"]).startswith("cuda")
        self.rec_config: dict[str, Any] = dict(
            tool_version="%s %s (vllm %s, torch %s)" % (
                PRODUCER, ".".join(__version__.split(".")[:2]), vllm_v, torch_v),
            model_name=str(cfg.model_config.model),
            weight_hash=weight_hash_of(str(cfg.model_config.model)),
            architecture=str(getattr(text, "model_type", "") or ""),
            weight_dtype=dtype, compute_dtype=dtype,
            layers=int(get("num_hidden_layers")), hidden=int(get("hidden_size")),
            vocab=self.vocab, heads=int(get("num_attention_heads")),
            kv_heads=int(get("num_key_value_heads", "num_attention_heads")),
            experts=int(get("num_local_experts", "num_experts", "n_routed_experts")),
            experts_per_token=int(get("num_experts_per_tok")),
            policy="vllm-batch-invariant" if header["batch_invariant"] else "vllm",
            threads=int(header.get("torch_threads") or 0),
            capture=self.capture if self.hooks_work else "none", top_k=top_k,
            extra_config_json=json.dumps(header), command_line=" ".join(sys.argv),
            device_kind="cuda" if on_cuda else "cpu",
            device_name=header.get("device_name"), fingerprint=KIND,
            inline_steps=recorder_mod.inline_steps(not on_cuda))
        # Under `llmrr record-cuda` the injection library's recorder takes the steps, so
        # kernel records and fingerprints share step numbers (its trace hashes rows with
        # xxh3-64 on the host; its owner closes it).
        self.shared = recorder_mod.shared_recorder()
        if self.shared is not None:
            self.rec = self.shared
            path = self.shared.path
        else:
            self.rec = Recorder(path, **self.rec_config)
        self.open = True
        _active.append(self)
        self.path = path
        self.async_sched = bool(getattr(runner, "use_async_scheduling", False)) and \
            self.shared is None
        self.lock = threading.Lock()
        self._reset()
        self.handles = []
        self.missing = set()
        self.nvtx = on_cuda or self.shared is not None

        if self.eager and self.capture != "none":
            self._attach(runner.get_model())
        if self.compiled is not None:
            self.compiled.bind(self._rows)
        self._wrap_logits(runner.get_model())
        _on_exit(self.close)
        _warn("recording %s to %s (capture %s%s)" % (
            type(runner.get_model()).__name__, path, self.capture if self.hooks_work else "none",
            "" if self.eager else ", compiled model: rows by llmrr::site_rows"
            if self.compiled is not None else ", compiled model: steps only"))

    def _reset(self) -> None:
        self.step = -1
        self.in_step = False
        self.ids = {}
        self.known: dict[str, _Known] = {}   # vLLM request id -> what is known of it
        self.next_id = 0
        self.used_ids: set[int] = set()
        self.gone: set[str] = set()  # finished by vLLM, to be closed at the next step
        self.rows = 0
        self.order = []
        self.keep = []
        # Under async scheduling each step goes on a tape (its arrivals included) and is
        # replayed into the trace, in order, when vLLM collects its tokens; else the calls
        # go to the trace as they come.
        self.tape: _Tape | None = _Tape(self._Pending()) if self.async_sched else None
        self.queue: list[_Tape] = []  # taped steps not replayed yet, in step order
        self.pending = self.tape.pending if self.tape else self._Pending()
        self.sink = self.tape or self.rec

    def reopen(self, path: str | None) -> None:
        """Closes the trace and records the steps from now on into a new one at `path`
        (requests still running continue there as new arrivals)."""
        if self.shared is not None:
            raise ValueError("rotate: this worker records into llmrr record-cuda's trace")
        if self.open:
            if self.in_step and not self.failed:
                self._end_step()
            with self.lock:
                self._drain(all_of_them=True)
            self.open = False
            self.rec.close()
        if path is None:  # paused: the hooks and steps record nothing until a new path
            self.failed = True
            return
        self.path = path
        self.rec = self._Recorder(path, **self.rec_config)
        self.open = True
        self.failed = False
        self._reset()

    # ---- header ---------------------------------------------------------------------------

    @staticmethod
    def _header(runner: Any, cfg: Any) -> dict[str, Any]:
        import torch
        vllm_v, torch_v = _versions()
        sc, cc, pc = cfg.scheduler_config, cfg.cache_config, cfg.parallel_config
        backend = None
        for name in ("attn_backend", "attention_backend"):
            b = getattr(runner, name, None)
            if b is not None:
                backend = getattr(b, "__name__", str(b))
                break
        if backend is None:
            groups = getattr(runner, "attn_groups", None)
            try:
                backend = groups[0][0].backend.get_name() if groups else None
            except Exception:
                backend = None
        dev = str(runner.device)
        return {
            "producer": PRODUCER, "vllm": vllm_v, "torch": torch_v,
            "attention_backend": backend, "dtype": str(cfg.model_config.dtype),
            "enforce_eager": bool(cfg.model_config.enforce_eager),
            "batch_invariant": os.environ.get("VLLM_BATCH_INVARIANT", "0") not in ("", "0"),
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "max_num_seqs": sc.max_num_seqs,
            "chunked_prefill": bool(getattr(sc, "enable_chunked_prefill", False)),
            "prefix_caching": bool(getattr(cc, "enable_prefix_caching", False)),
            "block_size": getattr(cc, "block_size", None),
            "num_gpu_blocks": getattr(cc, "num_gpu_blocks", None),
            "kv_cache_memory_bytes": getattr(cc, "kv_cache_memory_bytes", None),
            "max_model_len": getattr(cfg.model_config, "max_model_len", None),
            "async_scheduling": bool(getattr(sc, "async_scheduling", False)),
            "tensor_parallel_size": pc.tensor_parallel_size,
            "rank": getattr(pc, "rank", 0), "device": dev,
            "device_name": torch.cuda.get_device_name(runner.device)
            if dev.startswith("cuda") else None,
            "torch_threads": torch.get_num_threads(),
            "row_hooks": "on" if cfg.model_config.enforce_eager else
            "off (compiled model: steps only)",
        }

    # ---- steps ----------------------------------------------------------------------------

    def _discard(self, why: str) -> None:
        """Drops the open step (nothing of it is written), says why in the trace and on
        stderr, and stops recording."""
        self.in_step = False
        self.pending.items = []
        self.keep = []
        self.failed = True
        _warn("step %d dropped, recording stopped: %s" % (self.step, why))
        try:
            if self.tape is not None:  # the step is on its tape: never replayed
                self.rec.mark_lossy("%s: step %d discarded: %s" % (PRODUCER, self.step, why))
                with self.lock:
                    self._drain()
            else:
                self.rec.discard_step("%s: %s" % (PRODUCER, why))
        except Exception as e:
            _warn("cannot drop step %d of %s: %s" % (self.step, self.path, e))
        if self.nvtx:
            import torch
            torch.cuda.nvtx.range_pop()

    def _llmrr_id(self, rid: str) -> int:
        m = re.match(r"^(\d+)(?:-[0-9a-f]+)?$", rid)
        if m and int(m.group(1)) not in self.used_ids and int(m.group(1)) < 2**63:
            n = int(m.group(1))
        else:
            while self.next_id in self.used_ids:
                self.next_id += 1
            n = self.next_id
        self.used_ids.add(n)
        return n

    def begin(self, so: Any) -> None:
        """execute_model, before vLLM updates its batch: the requests that arrive with this
        scheduler output, and those vLLM finished for reasons the worker does not see."""
        if self.in_step:  # the previous step never reached sample_tokens
            self._end_step()
        # Requests vLLM finished for reasons the worker does not see (a stop string, an
        # abort): closed in this step as aborted.
        self.gone.update(r for r in (getattr(so, "finished_req_ids", ()) or ())
                         if r in self.known and not self.known[r].done)
        for nr in so.scheduled_new_reqs:
            if nr.req_id in self.known:
                continue
            sp = nr.sampling_params
            prompt = list(nr.prompt_token_ids or [])
            n = self._llmrr_id(nr.req_id)
            self.ids[nr.req_id] = n
            stops = set(int(t) for t in (getattr(sp, "stop_token_ids", None) or []))
            max_tokens = int(getattr(sp, "max_tokens", 0) or 2**31 - 1)
            stop_at_eos = not bool(getattr(sp, "ignore_eos", False))
            self.known[nr.req_id] = _Known(len(prompt), self.eos | stops, max_tokens,
                                           stop_at_eos)
            label = "" if re.match(r"^\d+(-[0-9a-f]+)?$", nr.req_id) else nr.req_id
            self.sink.add_request(
                n, prompt or [0], max_tokens,
                label=label[:200], temperature=float(getattr(sp, "temperature", 0.0) or 0.0),
                top_k=max(0, int(getattr(sp, "top_k", 0) or 0)),
                top_p=float(getattr(sp, "top_p", 1.0) or 1.0),
                seed=int(getattr(sp, "seed", 0) or 0) & (2**64 - 1),
                stop_at_eos=stop_at_eos, arrival_step=self.step + 1)

    def start(self, so: Any) -> None:
        """_prepare_inputs, after vLLM updated its persistent batch and before the forward
        pass: the step's rows in the order the runner lays them out (input_batch.req_ids,
        which _prepare_inputs, the attention metadata and the logits indices all follow)."""
        if self.in_step:
            return
        sched = so.num_scheduled_tokens
        if not sched:
            return
        ib = self.runner.input_batch
        order_ids = list(ib.req_ids[:ib.num_reqs])
        if sorted(order_ids) != sorted(sched) or any(r not in self.ids for r in order_ids):
            # Rows whose owner is unknown are never recorded under a guess.
            self._stop_lossy("step %d: the runner's batch %s is not the scheduled set %s" %
                             (self.step + 1, order_ids, sorted(sched)))
            return
        computed: dict[str, int] = {}
        for nr in so.scheduled_new_reqs:
            computed[nr.req_id] = nr.num_computed_tokens
        cr = so.scheduled_cached_reqs
        for rid, c in zip(cr.req_ids, cr.num_computed_tokens):
            computed[rid] = c
        self.step += 1
        segments: list[dict[str, int]] = []
        self.order = []
        row = 0
        for rid in order_ids:
            k = self.known[rid]
            count = int(sched[rid])
            start = int(computed.get(rid, 0))
            sample = start + count >= k.prompt_len
            kind = 1 if (start >= k.prompt_len and count == 1) else 0
            segments.append(dict(request=self.ids[rid], start=start, count=count,
                                 cached=start, kind=kind, sample=1 if sample else 0))
            self.order.append(Row(rid, row, count, sample, start + count - 1))
            row += count
        self.rows = row
        if self.nvtx:
            import torch
            torch.cuda.nvtx.range_push(STEP_RANGE)
        if self.tape is not None:
            # vLLM collects this step's tokens after the next step has run: the step stays
            # on its tape, replayed into the trace when its tokens come (_collect).
            self.tape.order = self.order
            self.tape.step = self.step
        self.sink.begin_step(self.step, segments)
        self.in_step = True
        self._batch_op(segments)
        for rid in sorted(self.gone):
            self._finish(rid, 2)  # FINISH_ABORTED
        self.gone.clear()

    def _batch_op(self, segments: Sequence[dict[str, int]]) -> None:
        """Op record (format 1.6) of what every layer's ops take from the step's batch: the
        linears' M (the step's tokens), the prefill and decode counts, the longest query and
        sequence the attention backend plans for; `llmrr diff` names what changed."""
        if not self.ops:
            return
        prefills = sum(1 for g in segments if g["kind"] == 0)
        attrs = "tokens=%d prefills=%d decodes=%d max_query=%d max_seq=%d batch_invariant=%d" % (
            self.rows, prefills, len(segments) - prefills,
            max((g["count"] for g in segments), default=0),
            max((g["start"] + g["count"] for g in segments), default=0),
            1 if self.batch_invariant else 0)
        self.sink.op("batch", "BATCH", attrs, layer=0, layers=max(self.layers, 1))

    def planned(self, prepared: Any) -> None:
        """After _build_attention_metadata (or, in a vLLM without it, _prepare_inputs): the
        attention metadata the backend built for the step (its
        integer and boolean fields: prefill/decode counts, query and sequence lengths, split
        and cascade decisions where the backend makes them), one op record per distinct
        metadata class, named after it."""
        if not self.in_step or not self.ops:
            return
        metas = _attention_metadata(prepared)
        seen: set[str] = set()
        for meta in metas:
            name = type(meta).__name__
            if name in seen:
                continue
            seen.add(name)
            attrs = _scalar_attrs(meta)
            if attrs:
                self.sink.op(name[:128], "ATTENTION", attrs, layer=0, layers=max(self.layers, 1))

    def end(self, out: Any) -> None:
        if not self.in_step:
            return
        req_ids = getattr(out, "req_ids", None)
        sampled = getattr(out, "sampled_token_ids", None)
        ran = req_ids if req_ids is not None else getattr(
            getattr(out, "_model_runner_output", None), "req_ids", None)
        if ran is not None and list(ran) != [e.rid for e in self.order]:
            # The rows were taken in another order than vLLM's output has them: nothing of
            # this step is written under a request it may not belong to.
            self._discard("step %d: rows recorded in the order %s, vLLM's output has %s" %
                          (self.step, [e.rid for e in self.order], list(ran)))
            return
        if self.sink is self.tape:
            self._end_tape(out)
            return
        if req_ids is not None and sampled is not None:
            self._tokens(out, self.order, self.sink)
        self._end_step()

    # ---- async scheduling: a step on a tape until vLLM collects its tokens -------------------

    def _end_tape(self, out: Any) -> None:
        """Ends a taped step. Its tokens come from the output now (synchronous output) or
        when vLLM calls the async output's get_output(), after the next step has begun."""
        tape = self.tape
        assert tape is not None
        tape.keep, self.keep = self.keep, []
        self.in_step = False
        self.tape = _Tape(self._Pending())
        self.sink = self.tape  # the next step's arrivals (begin) go on the next tape
        self.pending = self.tape.pending
        with self.lock:
            self.queue.append(tape)
        if self.nvtx:
            import torch
            torch.cuda.nvtx.range_pop()
        if getattr(out, "req_ids", None) is not None:
            self.safe(self._collect, tape, out)
            return
        orig = getattr(out, "get_output", None)
        if orig is None:
            self.safe(self._collect, tape, None)
            return
        out.get_output = self._collecting(tape, orig)

    def _collecting(self, tape: _Tape, orig: Callable[[], Any]) -> Callable[[], Any]:
        """The async output's get_output, wrapped: the tape's tokens are collected from what
        it returns."""
        def get_output() -> Any:
            o = orig()
            self.safe(self._collect, tape, o)
            return o
        return get_output

    def _collect(self, tape: _Tape, out: Any) -> None:
        """A taped step's tokens and finishes (none when `out` is None), then every step
        whose tokens are in replayed into the trace, in step order."""
        with self.lock:
            if out is not None:
                self._tokens(out, tape.order, tape)
            tape.ready = True
            self._drain()

    def _drain(self, all_of_them: bool = False) -> None:
        while self.queue and (all_of_them or self.queue[0].ready):
            tape = self.queue.pop(0)
            if not tape.ready:
                self.rec.mark_lossy("%s: the tokens of step %d were never collected (the run "
                                    "ended first)" % (PRODUCER, tape.step))
            tape.replay(self.rec)

    def _tokens(self, out: Any, order: Sequence[Row], sink: Sink) -> None:
        """The tokens of a step's sampled rows from vLLM's output, with the finishes they
        cause (eos, max_tokens), into `sink` (the trace, or the step's tape)."""
        where = {e.rid: e for e in order}
        for rid, toks in zip(out.req_ids, out.sampled_token_ids):
            e = where.get(rid)
            if e is None or not e.sample or not toks:
                continue  # not in this step, or a partial prefill chunk (vLLM drops it)
            k = self.known[rid]
            if k.done:
                continue
            t = int(toks[0])
            sink.token(self.ids[rid], e.last_pos + 1, t)
            k.generated += 1
            if k.stop_at_eos and t in k.eos:
                self._finish(rid, 0, sink)  # FINISH_EOS
            elif k.generated >= k.max_tokens:
                self._finish(rid, 1, sink)  # FINISH_MAX_TOKENS

    def _end_step(self) -> None:
        self.in_step = False
        if self.sink is self.tape:  # a taped step that never reached sample_tokens
            self._end_tape(None)
            return
        self.keep = []
        self.pending.flush(self.rec)
        self.rec.end_step()
        if self.nvtx:
            import torch
            torch.cuda.nvtx.range_pop()

    def _finish(self, rid: str, reason: int, sink: Sink | None = None) -> None:
        k = self.known.get(rid)
        if k is None or k.done:
            return
        k.done = True
        (sink or self.sink).finish(self.ids[rid], reason, k.generated)

    def close(self) -> None:
        if not self.open:
            return
        self.open = False
        try:
            if self.in_step and not self.failed:
                # The process ends inside a step (a signal stopped the server mid-forward):
                # the step keeps what it recorded, and the trace says it was cut.
                self.rec.mark_lossy("%s: interrupted: step %d was cut by the process's exit"
                                    % (PRODUCER, self.step))
                self._end_step()
            with self.lock:
                self._drain(all_of_them=True)
            for h in self.handles:
                h.remove()
            if self.shared is None:
                self.rec.close()
        except Exception as e:
            _warn("closing %s: %s" % (self.path, e))
        self.failed = True
        if self in _active:
            _active.remove(self)


class _Tape:
    """One step under vLLM's async scheduling, kept until vLLM collects its tokens: the calls
    the step would make on the trace, in order, replayed by replay(). Rows are hashed as they
    come (a hook's tensor may be overwritten in place later), on the tensor's device, into the
    tape's own Pending; the routing and logits arrays whose addresses the calls carry are
    held by the recorder's `keep` list, which moves here at the step's end."""

    def __init__(self, pending: Pending) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.pending = pending
        self.keep: list[Any] | None = None
        self.order: list[Row] = []
        self.step = -1
        self.ready = False

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls.append((name, args, kwargs))

    # The calls of Sink that a taped step makes, replayed on the trace in this order.
    def add_request(self, *args: Any, **kwargs: Any) -> None:
        self._call("add_request", args, kwargs)

    def begin_step(self, *args: Any, **kwargs: Any) -> None:
        self._call("begin_step", args, kwargs)

    def routing(self, *args: Any, **kwargs: Any) -> None:
        self._call("routing", args, kwargs)

    def op(self, *args: Any, **kwargs: Any) -> None:
        self._call("op", args, kwargs)

    def logits(self, *args: Any, **kwargs: Any) -> None:
        self._call("logits", args, kwargs)

    def token(self, *args: Any, **kwargs: Any) -> None:
        self._call("token", args, kwargs)

    def finish(self, *args: Any, **kwargs: Any) -> None:
        self._call("finish", args, kwargs)

    def mark_lossy(self, *args: Any, **kwargs: Any) -> None:
        self._call("mark_lossy", args, kwargs)

    def host_rows(self, site: str, x: Any, rows: int) -> bool:
        x = x.reshape(-1, x.shape[-1])
        if x.shape[0] < rows:
            return False
        self.pending.add(site, x[:rows])
        return True

    def replay(self, rec: Recorder) -> None:
        for name, a, kw in self.calls:
            getattr(rec, name)(*a, **kw)
        if any(name == "begin_step" for name, _, _ in self.calls):
            self.pending.flush(rec)
            rec.end_step()
        self.calls, self.keep = [], None
