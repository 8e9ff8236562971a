"""The row hooks of llmrr.runtimes.vllm (a mixin of its step recorder): llmrr's sites on vLLM's
modules, rows hashed as they come, the logits of every sampled row and MoE routing; and the
failure policy every hook shares (warn once, mark the trace lossy, stop recording).

Every hook is a no-op outside a step and after a failure; rows go to the step's sink (the
trace, or under async scheduling the step's tape), device rows into the step's Pending."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Protocol, Sequence, TypeVar

if TYPE_CHECKING:
    import torch

    from ...core.fingerprint import Pending
    from ...core.recorder import Recorder

_T = TypeVar("_T")
# A forward hook: (module, args, output).
ForwardHook = Callable[[Any, Any, Any], None]

# id(vLLM router) -> (step recorder, layer): whose select_experts results are recorded.
ROUTERS: dict[int, tuple[Hooks, int]] = {}
_router_patched = False  # FusedMoERouter.select_experts is wrapped (once a process)


class Row(NamedTuple):
    """One scheduled request of a step, in the order of the step's rows."""
    rid: str        # vLLM's request id
    first: int      # its first batch row
    rows: int       # its rows (tokens) in this step
    sample: bool    # whether the step samples it (its last row)
    last_pos: int   # the position of its last row


class Sink(Protocol):
    """Where a step's calls go: the trace (llmrr.core.recorder.Recorder) or, under async
    scheduling, the step's tape until vLLM collects its tokens."""

    def add_request(self, rid: int, prompt: Sequence[int], max_tokens: int, label: str = "",
                    temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                    stop_at_eos: bool = True, arrival_step: int = 0) -> None: ...

    def begin_step(self, step: int, segments: Sequence[dict[str, int]]) -> None: ...

    def host_rows(self, site: str, x: Any, rows: int) -> bool: ...

    def routing(self, layer: int, rows: int, k: int, experts_total: int, chosen: int | None,
                experts: int | None = None, gates: int | None = None,
                outcome: int | None = None, capacity: int = 0) -> None: ...

    def logits(self, request: int, position: int, batch_row: int, address: int | None,
               dtype: int, vocab: int) -> None: ...

    def token(self, request: int, position: int, token: int, uniform: float = -1.0) -> None: ...

    def finish(self, request: int, reason: int, generated: int) -> None: ...

    def op(self, name: str, op: str = "", attrs: str = "", *, layer: int = -1, layers: int = 1,
           graph: int = 0, first_row: int = 0, rows: int = 0) -> None: ...

    def mark_lossy(self, reason: object) -> None: ...


def _router_class() -> Any:
    """vLLM's FusedMoERouter, or None where this vLLM has none."""
    try:
        from vllm.model_executor.layers.fused_moe.router.fused_moe_router import FusedMoERouter
    except Exception:
        return None
    return FusedMoERouter


def vllm_router(moe: Any) -> Any:
    """The FusedMoERouter of a vLLM MoE block (its experts' runner holds it), or None."""
    router_class = _router_class()
    if router_class is None:
        return None
    experts = getattr(moe, "experts", None)
    for owner in (experts, getattr(experts, "runner", None)):
        r = getattr(owner, "router", None)
        if isinstance(r, router_class):
            return r
    return None


def patch_router_selection() -> bool:
    """Wraps FusedMoERouter.select_experts (once): each call of a registered router hands its
    (weights, ids) to its recorder. False when this vLLM has no such class."""
    global _router_patched
    router_class = _router_class()
    if router_class is None:
        return False
    if _router_patched:
        return True
    orig = router_class.select_experts

    def select_experts(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, *args, **kwargs)
        who = ROUTERS.get(id(self))
        if who is not None:
            rec, layer = who
            rec.safe(rec._routed, layer, out[0], out[1])
        return out
    router_class.select_experts = select_experts
    _router_patched = True
    return True


def _warn(msg: str) -> None:
    print("llmrr.runtimes.vllm: %s" % msg, file=sys.stderr, flush=True)


class Hooks:
    """The state the hooks read, set by the step recorder (llmrr.runtimes.vllm._StepRecorder)."""

    rec: Recorder            # the trace (or record-cuda's shared recorder)
    sink: Sink               # where this step's calls go: rec, or the step's tape
    pending: Pending         # device rows of this step, hashed on the device
    shared: Recorder | None  # record-cuda's recorder (rows hashed on the host), or None
    path: str
    handles: list[Any]       # torch hook handles, removed at close
    missing: set[str]        # sites already reported as not recorded
    keep: list[Any]          # host arrays whose addresses the step's calls passed
    order: list[Row]         # the step's requests in row order
    ids: dict[str, int]      # vLLM request id -> llmrr request id
    step: int
    rows: int                # rows (tokens) of the step
    in_step: bool
    failed: bool
    n_experts: int

    # ---- failures: warn once, mark the trace lossy, stop ------------------------------------

    def safe(self, fn: Callable[..., _T], *args: Any) -> _T | None:
        """fn(*args), unless recording stopped; a failure stops recording (never vLLM)."""
        if self.failed:
            return None
        try:
            return fn(*args)
        except Exception as e:  # never break vLLM
            self._stop(e)
            return None

    def _missing(self, site: str, why: str) -> None:
        """A site's rows could not be taken this step: the trace says lossy (the first
        reason in its footer), stderr says so once per site; recording goes on."""
        if site not in self.missing:
            self.missing.add(site)
            _warn("step %d, %s: not recorded (%s); the trace is marked lossy" %
                  (self.step, site, why))
        self.rec.mark_lossy("llmrr.runtimes.vllm: step %d, %s not recorded: %s" %
                            (self.step, site, why))

    def _stop(self, e: BaseException) -> None:
        self._stop_lossy("%s: %s" % (type(e).__name__, e))

    def _stop_lossy(self, why: str) -> None:
        """Stops recording for good; the trace says lossy, with why (verify and inspect
        print it), and keeps every step before."""
        self.failed = True
        _warn("recording stopped at step %d: %s" % (self.step, why))
        try:
            self.rec.mark_lossy("llmrr.runtimes.vllm: recording stopped at step %d: %s" %
                                (self.step, why))
        except Exception as e:  # the library itself failed: its own reason stands
            _warn("cannot mark %s lossy: %s" % (self.path, e))

    # ---- the hooks ---------------------------------------------------------------------------

    def _attach(self, model: Any) -> None:
        base = getattr(model, "model", model)
        layers = getattr(base, "layers", None)
        if layers is None:
            _warn("%s has no .model.layers: rows are not recorded" % type(model).__name__)
            return
        want = self.rec.wants_rows
        self._hook(getattr(base, "embed_tokens", None), "embed")
        start = getattr(base, "start_layer", 0) or 0
        for j, layer in enumerate(layers):
            i = start + j
            if type(layer).__name__ == "PPMissingLayer":
                continue
            if want("L%d.out" % i):
                self.handles.append(layer.register_forward_hook(self._layer_out(i)))
            self._hook(getattr(layer, "input_layernorm", None), "L%d.attn_norm" % i)
            self._hook(getattr(layer, "post_attention_layernorm", None), "L%d.mlp_norm" % i)
            attn = getattr(layer, "self_attn", None)
            qkv = getattr(attn, "qkv_proj", None)
            if qkv is not None and want("L%d.attn.q" % i):
                self.handles.append(qkv.register_forward_hook(self._qkv(i, attn)))
            self._hook(getattr(attn, "attn", None), "L%d.attn.core" % i)
            self._hook(getattr(attn, "o_proj", None), "L%d.attn.o" % i)
            mlp = getattr(layer, "mlp", None)
            gate_up = getattr(mlp, "gate_up_proj", None)
            if gate_up is not None and want("L%d.mlp.gate" % i):
                self.handles.append(gate_up.register_forward_hook(self._gate_up(i)))
            self._hook(getattr(mlp, "act_fn", None), "L%d.mlp.act" % i)
            self._hook(getattr(mlp, "down_proj", None), "L%d.mlp.down" % i)
            moe = mlp if hasattr(mlp, "experts") else getattr(layer, "block_sparse_moe", None)
            if moe is not None and hasattr(moe, "experts"):
                self._hook(moe, "L%d.moe.combine" % i)
                selector = vllm_router(moe)
                if selector is not None:
                    # The experts and weights vLLM's router selects (select_experts, patched
                    # once per process): DeepSeek's bias and groups, Mixtral, Qwen3-MoE alike.
                    ROUTERS[id(selector)] = (self, i)
                router = getattr(moe, "gate", None)
                if router is not None:
                    self.handles.append(router.register_forward_hook(
                        self._router(i, moe, recompute=selector is None)))
        self._hook(getattr(base, "norm", None), "final_norm")

    @staticmethod
    def _first(out: Any) -> torch.Tensor | None:
        import torch
        if isinstance(out, (tuple, list)):
            out = out[0] if out else None
        return out if isinstance(out, torch.Tensor) else None

    def _hook(self, module: Any, site: str) -> None:
        if module is None or not self.rec.wants_rows(site):
            return

        def hook(mod: Any, args: Any, out: Any) -> None:
            self._rows(site, self._first(out))
        self.handles.append(module.register_forward_hook(hook))

    def _layer_out(self, i: int) -> ForwardHook:
        import torch
        site = "L%d.out" % i

        def hook(mod: Any, args: Any, out: Any) -> None:
            # vLLM layers return (hidden, residual); the layer's output is their sum.
            if not self.in_step:
                return
            if isinstance(out, (tuple, list)) and len(out) == 2 and out[1] is not None:
                x = self.safe(torch.add, out[0], out[1])
            else:
                x = self._first(out)
            self._rows(site, x)
        return hook

    def _qkv(self, i: int, attn: Any) -> ForwardHook:
        q, kv = getattr(attn, "q_size", None), getattr(attn, "kv_size", None)
        sites = ["L%d.attn.%s" % (i, s) for s in ("q", "k", "v")]

        def hook(mod: Any, args: Any, out: Any) -> None:
            x = self._first(out)
            if (not self.in_step or x is None or q is None or kv is None
                    or x.shape[-1] != q + 2 * kv):
                return
            for site, part in zip(sites, x.split([q, kv, kv], dim=-1)):
                self._rows(site, part)
        return hook

    def _gate_up(self, i: int) -> ForwardHook:
        gate, up = "L%d.mlp.gate" % i, "L%d.mlp.up" % i

        def hook(mod: Any, args: Any, out: Any) -> None:
            x = self._first(out)
            if not self.in_step or x is None or x.shape[-1] % 2:
                return
            g, u = x.chunk(2, dim=-1)
            self._rows(gate, g)
            self._rows(up, u)
        return hook

    def _routed(self, i: int, weights: torch.Tensor, ids: torch.Tensor,
                total: int | None = None) -> None:
        """The experts `ids` with `weights` (tokens x k) at layer i, of `total` experts (the
        model's count by default): as vLLM's router selected them, or recomputed."""
        if not self.in_step or self.failed:
            return
        import numpy as np
        if ids.shape[0] < self.rows:
            self._missing("L%d.moe.router" % i, "routing of %d rows where the batch has %d" %
                          (ids.shape[0], self.rows))
            return
        k = int(ids.shape[-1])
        idx = np.ascontiguousarray(ids[:self.rows].to("cpu").numpy(), dtype=np.int32)
        gates = np.ascontiguousarray(weights[:self.rows].float().to("cpu").numpy(),
                                     dtype=np.float32)
        self.keep.append((idx, gates))  # a taped step replays these addresses later
        self.sink.routing(i, self.rows, k, total or self.n_experts, idx.ctypes.data,
                          idx.ctypes.data, gates.ctypes.data, None)

    def _router(self, i: int, mlp: Any, recompute: bool) -> ForwardHook:
        import torch

        def hook(mod: Any, args: Any, out: Any) -> None:
            logits = self._first(out)
            if logits is None or not self.in_step:
                return
            self._rows("L%d.moe.router" % i, logits)
            if not recompute:
                return  # the routing comes from vLLM's own selection (_routed)
            experts = getattr(mlp, "experts", None)
            k = int(getattr(mlp, "top_k", 0) or getattr(experts, "top_k", 0) or 0)
            if k <= 0:
                return
            rows = logits.reshape(-1, logits.shape[-1])[:self.rows]
            # The router's choice as vLLM's top-k softmax makes it (ids, weights).
            w, idx = torch.topk(torch.softmax(rows.float(), dim=-1), k, dim=-1)
            if getattr(mlp, "renormalize", False) or getattr(experts, "renormalize", False):
                w = w / w.sum(dim=-1, keepdim=True)
            self.safe(self._routed, i, w, idx, int(rows.shape[-1]))
        return hook

    def _rows(self, site: str, x: torch.Tensor | None) -> None:
        # Every row hook of every layer comes here (hundreds a step at capture "all"): kept
        # to a few attribute reads and one C call for host rows.
        if not self.in_step or x is None or self.failed:
            return
        try:
            if x.is_cpu:
                # Host rows: the library fingerprints them (the same mixsum64) where they
                # are, cheaper than a dozen torch ops per site.
                if not self.sink.host_rows(site, x, self.rows):
                    self._missing(site, "%d rows where the batch has %d" %
                                  (x.reshape(-1, x.shape[-1]).shape[0], self.rows))
                return
            x = x.reshape(-1, x.shape[-1])
            if x.shape[0] < self.rows:
                self._missing(site, "%d rows where the batch has %d" % (x.shape[0], self.rows))
                return
            x = x[:self.rows]  # padded rows (CUDA graphs) left out
            if self.shared is None:
                self.pending.add(site, x)  # hashed on the device, copied at the step's end
            else:
                # A shared xxh3-64 trace: the recorded rows, hashed on the host.
                self.rec.host_rows(site, x.detach().to("cpu"), self.rows)
        except Exception as e:  # never break vLLM
            self._stop(e)

    def _wrap_logits(self, model: Any) -> None:
        orig = getattr(model, "compute_logits", None)
        if orig is None:
            return

        def compute_logits(*args: Any, **kwargs: Any) -> Any:
            out = orig(*args, **kwargs)
            self.safe(self._logits, out)
            return out
        model.compute_logits = compute_logits

    def _logits(self, logits: Any) -> None:
        import torch
        if not self.in_step or not isinstance(logits, torch.Tensor) or logits.dim() != 2:
            return
        # One logits row per scheduled request, in batch order (vLLM's logits_indices).
        if logits.shape[0] < len(self.order):
            self._missing("logits", "%d rows for %d requests" % (logits.shape[0],
                                                               len(self.order)))
            return
        from ...core import _lib
        dt = _lib.torch_dtypes()
        x = logits.detach()
        if x.dtype not in dt:
            x = x.float()
        x = x[:len(self.order)].to("cpu").contiguous()
        self.keep.append(x)
        for n, e in enumerate(self.order):
            if e.sample:
                row = x[n]
                self.sink.logits(self.ids[e.rid], e.last_pos, e.first + e.rows - 1,
                                 row.data_ptr(), dt[row.dtype], x.shape[-1])
