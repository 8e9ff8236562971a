"""llmrr.runtimes.torch.record: record a PyTorch / Hugging Face transformers model into an
llmrr trace.

    import llmrr.runtimes.torch
    with llmrr.runtimes.torch.record(model, "run.trace", capture="layers"):
        model.generate(input_ids, attention_mask=mask, max_new_tokens=16, do_sample=False)

    # the trainer's recompute of a rollout: one teacher-forced forward, logits at every
    # completion position (compare with `llmrr mismatch rollout.trace trainer.trace`)
    llmrr.runtimes.torch.score(model, sequences, "trainer.trace", prompt_lens=[...])

Each forward call of `model` is one step. Its batch composition comes from the input shape
and the attention mask: row b of the batch is request b of the generate call (ids count on
across calls), its real tokens (mask 1) are one segment at their positions (counted from the
mask, as transformers counts them), and padding rows (mask 0, or rows of requests that have
already finished) are segments of one request labelled "padding", so the step's batch holds
every row the kernels ran on. Forward hooks name what they see with llmrr's sites
(runtime/include/llmrr/format/site.h):

    embed_tokens -> embed                    layers[i] -> L<i>.out
    input_layernorm -> L<i>.attn_norm        post_attention_layernorm -> L<i>.mlp_norm
    self_attn.q_proj / k_proj / v_proj -> L<i>.attn.q / .k / .v
    self_attn.q_norm / k_norm (Qwen3, per head) -> L<i>.attn.q_norm / .k_norm (heads joined)
    self_attn.o_proj input -> L<i>.attn.core, output -> L<i>.attn.o
    DeepSeek-V3 (MLA): q_a_proj / q_a_layernorm / q_b_proj -> L<i>.attn.q_a / .q_a_norm / .q,
      kv_a_proj_with_mqa / kv_a_layernorm -> L<i>.attn.kv_a / .kv_a_norm, o_proj input ->
      L<i>.attn.v_up (llmrr's absorbed attn.q_absorb / attn.core have no module here)
    mlp.gate_proj / up_proj / down_proj -> L<i>.mlp.gate / .up / .down (input of down: .act)
    MoE block (mlp with .gate router and .experts): router logits -> L<i>.moe.router, and the
      routing (top-k experts, weights) of every row; shared_expert(s).* -> L<i>.moe.shared.*,
      shared_expert_gate -> L<i>.moe.shared.scale; block output -> L<i>.moe.combine
    norm -> final_norm                       lm_head -> the logits of each sampled row

capture="layers" (default) keeps L<i>.out and the logits, "all" every site above, "none"
only the batch, routing, logits and tokens. Hooks are registered only for the sites kept.

Fingerprints are "mixsum64" (format/include/llmrr/format/fingerprint.h), an exact hash of
the fp32 bits (bf16 / f16 widened exactly first) that does not depend on reduction order, so
a row hashes the same on the CPU and on a GPU. A CPU tensor's data pointer goes through
ctypes as it is, no copy (a non-contiguous tensor is made contiguous first), and the library
hashes it. A CUDA tensor is hashed where it lives with torch integer ops
(llmrr.core.fingerprint), and only the hashes, l2 and max |x| are copied to the host, once
per step. Under `llmrr record-cuda` (a shared recorder, whose trace is xxh3-64) rows are
copied to the host and hashed there, as before.

Tokens: the token chosen from a step's logits is read from the next forward's input ids (or,
after the last step, from what generate returns) and recorded with that step; a request
finishes on its EOS token or when generate returns.

Recording never breaks the model: a failed recorder call warns once and stops recording (the
library marks the trace lossy); generate goes on.

Sharing a trace with `llmrr record-cuda`: when $LLMRR_SHARED_RECORDER_LIB names a loaded
library that exports `llmrr_recorder* llmrr_recorder_shared(void)` (the CUDA injection library
under record-cuda), record(model, None) writes into that recorder instead of opening a file
(the owner closes it), so kernel records and fingerprints land in one trace; steps are then
bracketed with the NVTX range "llmrr.step" (pass nvtx=True to get them otherwise).
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from .._version import __version__
from ..core import _lib
from ..core import fingerprint as _fingerprint
from ..core import recorder as _recorder_mod
from ..core.recorder import Recorder

PADDING_REQUEST = 0xFFFFFFFF  # request id of the "padding" rows
STEP_RANGE = "llmrr.step"

_DTYPES = _lib.torch_dtypes()


def _tensor(x: Any) -> torch.Tensor | None:
    if isinstance(x, (tuple, list)):
        x = x[0] if x else None
    if hasattr(x, "last_hidden_state"):
        x = x.last_hidden_state
    return x if isinstance(x, torch.Tensor) else None


class _HookRecorder:
    def __init__(self, model: torch.nn.Module, path: str | None, capture: str, top_k: int,
                 logits: str, zstd_level: int, label: str | Sequence[str] | None,
                 nvtx: bool | None) -> None:
        self.model: Any = model  # a transformers model (or any with .layers): duck-typed
        self.label = label
        cfg = model.config if hasattr(model, "config") else None
        self.eos = self._eos_ids(getattr(model, "generation_config", None))
        shared = _recorder_mod.shared_recorder() if path is None else None
        self.nvtx = nvtx if nvtx is not None else shared is not None
        if shared is not None:
            self.rec = shared
            self.owns = False
        else:
            path = path or os.environ.get("LLMRR_TRACE")
            if not path:
                raise ValueError("llmrr.runtimes.torch.record: no trace path (give one, or set "
                                 "LLMRR_TRACE)")
            self.rec = Recorder(path, fingerprint=_fingerprint.KIND,
                                **self._config(model, cfg, capture, top_k, logits, zstd_level))
            self.owns = True
        self.device_hash = self.owns  # a shared (record-cuda) trace hashes host rows
        self.pending = _fingerprint.Pending()
        self.handles: list[torch.utils.hooks.RemovableHandle] = []
        self.step = -1
        self.in_step = False
        self.failed = False
        self.next_id = 0
        self.requests: dict[int, dict[str, Any]] = {}  # batch row -> its request's state
        self.pad_added = False
        self.pad_pos = 0
        self.rows = 0
        self.T = 0
        self.B = 0
        # batch index -> (position, batch row, column) of its sampled row
        self.sampled: dict[int, tuple[int, int, int]] = {}
        self.gen_kwargs: dict[str, Any] = {}
        self.max_tokens = 2**31 - 1
        self.patched_generate = False
        # score(): batch index -> the first position whose logits are recorded (every real
        # position from there to the one before the last, each the row predicting the next)
        self.teacher: list[int] | None = None
        self.scored: dict[int, list[tuple[int, int, int]]] = {}

    # ---- setup --------------------------------------------------------------------------

    @staticmethod
    def _eos_ids(gc: Any) -> set[int]:
        eos = getattr(gc, "eos_token_id", None) if gc is not None else None
        if eos is None:
            return set()
        return {int(e) for e in eos} if isinstance(eos, (list, tuple)) else {int(eos)}

    @staticmethod
    def _config(model: torch.nn.Module, cfg: Any, capture: str, top_k: int, logits: str,
                zstd_level: int) -> dict[str, Any]:
        def get(*names: str) -> Any:
            for n in names:
                v = getattr(cfg, n, None) if cfg is not None else None
                if v is not None:
                    return v
            return 0
        p = next(model.parameters(), None)
        dtype = str(p.dtype).replace("torch.", "") if p is not None else ""
        dtype = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(dtype, dtype)
        dev = p.device if p is not None else torch.device("cpu")
        try:
            import transformers
            tf = transformers.__version__
        except Exception:
            tf = None
        extra = {"producer": "llmrr.runtimes.torch", "torch": torch.__version__,
                 "transformers": tf,
                 "attn_implementation": getattr(cfg, "_attn_implementation", None),
                 "torch_threads": torch.get_num_threads()}
        return dict(
            tool_version="llmrr.runtimes.torch %s (torch %s%s)" % (
                ".".join(__version__.split(".")[:2]), torch.__version__,
                ", transformers %s" % tf if tf else ""),
            model_name=str(getattr(cfg, "_name_or_path", "") or type(model).__name__),
            architecture=str(getattr(cfg, "model_type", "") or type(model).__name__),
            weight_dtype=dtype, compute_dtype=dtype,
            layers=int(get("num_hidden_layers", "n_layer")), hidden=int(get("hidden_size")),
            vocab=int(get("vocab_size")), heads=int(get("num_attention_heads")),
            kv_heads=int(get("num_key_value_heads", "num_attention_heads")),
            experts=int(get("num_local_experts", "num_experts")),
            experts_per_token=int(get("num_experts_per_tok")),
            policy="torch-eager", threads=torch.get_num_threads(), capture=capture,
            logits_mode=logits, top_k=top_k, zstd_level=zstd_level,
            extra_config_json=json.dumps(extra), command_line=" ".join(sys.argv),
            device_kind="cuda" if dev.type == "cuda" else "cpu",
            device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
            inline_steps=_recorder_mod.inline_steps(dev.type == "cpu"))

    def attach(self) -> _HookRecorder:
        m = self.model
        base = m.get_decoder() if hasattr(m, "get_decoder") else getattr(m, "model", m)
        layers = getattr(base, "layers", None)
        if layers is None:
            raise ValueError("llmrr.runtimes.torch.record: %s has no decoder layers (.layers) "
                             "to hook" % type(base).__name__)
        self.handles.append(m.register_forward_pre_hook(self._begin, with_kwargs=True))
        self.handles.append(m.register_forward_hook(self._end_forward))
        self._site(getattr(base, "embed_tokens", None), "embed")
        for i, layer in enumerate(layers):
            self._site(layer, "L%d.out" % i)
            self._site(getattr(layer, "input_layernorm", None), "L%d.attn_norm" % i)
            self._site(getattr(layer, "post_attention_layernorm", None), "L%d.mlp_norm" % i)
            attn = getattr(layer, "self_attn", None)
            for name, site in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("o_proj", "o")):
                self._site(getattr(attn, name, None), "L%d.attn.%s" % (i, site))
            for name in ("q_norm", "k_norm"):
                self._site(getattr(attn, name, None), "L%d.attn.%s" % (i, name), heads=True)
            # DeepSeek-V3 MLA: the low-rank projections and norms; o_proj's input is the
            # values (llmrr's attn.v_up; its attn.core is the latent, absorbed form).
            mla = hasattr(attn, "kv_a_proj_with_mqa")
            for name, site in (("q_a_proj", "q_a"), ("q_a_layernorm", "q_a_norm"),
                               ("q_b_proj", "q"), ("kv_a_proj_with_mqa", "kv_a"),
                               ("kv_a_layernorm", "kv_a_norm")):
                self._site(getattr(attn, name, None), "L%d.attn.%s" % (i, site))
            self._site(getattr(attn, "o_proj", None),
                       "L%d.attn.%s" % (i, "v_up" if mla else "core"), inputs=True)
            mlp = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe", None)
            router = getattr(mlp, "gate", None)
            if mlp is not None and hasattr(mlp, "experts") and isinstance(router, torch.nn.Module):
                self.handles.append(router.register_forward_hook(self._router(i)))
                self._site(mlp, "L%d.moe.combine" % i)
                shared = getattr(mlp, "shared_expert", None) or getattr(mlp, "shared_experts", None)
                for name, site in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
                    self._site(getattr(shared, name, None), "L%d.moe.shared.%s" % (i, site))
                self._site(getattr(mlp, "shared_expert_gate", None), "L%d.moe.shared.scale" % i)
            else:
                for name, site in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
                    self._site(getattr(mlp, name, None), "L%d.mlp.%s" % (i, site))
                self._site(getattr(mlp, "down_proj", None), "L%d.mlp.act" % i, inputs=True)
        self._site(getattr(base, "norm", None), "final_norm")
        head = m.get_output_embeddings() if hasattr(m, "get_output_embeddings") else None
        if head is not None:
            self.handles.append(head.register_forward_hook(self._logits))
        orig = getattr(m, "generate", None)
        if orig is not None:
            def generate(*args: Any, **kwargs: Any) -> Any:
                self.gen_kwargs = kwargs
                out = orig(*args, **kwargs)
                self._generate_done(out)
                return out
            m.generate = generate
            self.patched_generate = True
        return self

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        if self.patched_generate:
            try:
                del self.model.generate
            except AttributeError:
                pass
        if self.in_step:
            self._safe(self._finish_all, _lib.FINISH_ABORTED, None)

    def close(self) -> None:
        if self.owns:
            self.rec.close()

    def _site(self, module: torch.nn.Module | None, site: str, inputs: bool = False,
              heads: bool = False) -> None:
        """heads: the module's output is [..., heads, head_dim] (Qwen3's q/k norm); a row is
        all heads of one token, as llmrr's engine fingerprints it."""
        if module is None or not self.rec.wants_rows(site):
            return
        if inputs:
            def pre_hook(mod: torch.nn.Module, args: tuple[Any, ...]) -> None:
                self._safe(self._record_rows, site, args[0] if args else None)
            self.handles.append(module.register_forward_pre_hook(pre_hook))
        else:
            def hook(mod: torch.nn.Module, args: tuple[Any, ...], out: Any) -> None:
                if heads and torch.is_tensor(out):
                    out = out.flatten(-2)
                self._safe(self._record_rows, site, out)
            self.handles.append(module.register_forward_hook(hook))

    # ---- recording ----------------------------------------------------------------------

    def _safe(self, fn: Callable[..., object], *args: Any) -> None:
        if self.failed:
            return
        try:
            fn(*args)
        except Exception as e:  # never break the model being recorded
            self.failed = True
            warnings.warn("llmrr.runtimes.torch: recording stopped: %s" % e, RuntimeWarning,
                          stacklevel=3)

    def _begin(self, module: torch.nn.Module, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> None:
        if self.nvtx and torch.cuda.is_available():
            torch.cuda.nvtx.range_push(STEP_RANGE)
        self._safe(self._begin_step, args, kwargs)

    def _end_forward(self, module: torch.nn.Module, args: tuple[Any, ...], out: Any) -> None:
        if self.nvtx and torch.cuda.is_available():
            torch.cuda.nvtx.range_pop()

    def _begin_step(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            raise ValueError("a forward call without 2-d input_ids (inputs_embeds is not "
                             "supported): the batch composition is unknown")
        ids = ids.detach().to("cpu")
        B, T = ids.shape
        m = kwargs.get("attention_mask")
        mask = (m.detach().to("cpu").numpy() != 0) if isinstance(m, torch.Tensor) \
            and m.dim() == 2 else None
        if self.in_step:
            self._tokens_from_inputs(ids, B)
            self.pending.flush(self.rec)
            self.rec.end_step()
            self.in_step = False
        if not self.requests or len(self.requests) != B:
            self._new_requests(B)
        window = mask[:, -T:] if mask is not None else np.ones((B, T), dtype=bool)
        self.step += 1
        segments: list[dict[str, int]] = []
        self.sampled = {}
        self.scored = {}
        arrivals = []
        for b in range(B):
            r = self.requests[b]
            real = window[b] & r["live"]
            if mask is not None:
                before = int(mask[b, :mask.shape[1] - T].sum())
            else:
                before = r["pos"]
            if not r["arrived"] and real.any():
                r["prompt"] = ids[b].numpy()[real].tolist()
                arrivals.append(b)
            t = 0
            pos = before
            while t < T:
                u = t
                while u < T and real[u] == real[t]:
                    u += 1
                n = u - t
                if real[t]:
                    last = u == T or not real[u:].any()
                    kind = _lib.SEGMENT_DECODE if (n == 1 and pos > 0 and r["arrived"]) \
                        else _lib.SEGMENT_PREFILL
                    segments.append(dict(request=r["id"], start=pos, count=n, cached=before,
                                         kind=kind, sample=1 if last else 0))
                    if last:
                        self.sampled[b] = (pos + n - 1, b * T + u - 1, u - 1)
                    if self.teacher is not None:
                        first = self.teacher[b] if b < len(self.teacher) else 0
                        self.scored.setdefault(b, []).extend(
                            (pos + j, b * T + t + j, t + j) for j in range(n)
                            if first <= pos + j and (not last or j < n - 1))
                    pos += n
                else:
                    segments.append(dict(request=PADDING_REQUEST, start=self.pad_pos, count=n,
                                         cached=0, kind=_lib.SEGMENT_PREFILL, sample=0))
                    self.pad_pos += n
                t = u
            r["pos"] = pos
        if any(s["request"] == PADDING_REQUEST for s in segments) and not self.pad_added:
            self.rec.add_request(PADDING_REQUEST, [0], 1, label="padding", stop_at_eos=False)
            self.pad_added = True
        for b in arrivals:
            r = self.requests[b]
            label = self.label if isinstance(self.label, str) else \
                (self.label[b] if self.label else "")
            self.rec.add_request(r["id"], r["prompt"], self.max_tokens, label=label or "",
                                 stop_at_eos=bool(self.eos))
            r["arrived"] = True
        self.B, self.T, self.rows = B, T, B * T
        self.rec.begin_step(self.step, segments)
        self.in_step = True

    def _new_requests(self, B: int) -> None:
        kw = self.gen_kwargs
        gc = kw.get("generation_config") or getattr(self.model, "generation_config", None)
        mnt = kw.get("max_new_tokens", getattr(gc, "max_new_tokens", None) if gc else None)
        # Unknown outside generate (a hand-written decoding loop): no limit.
        self.max_tokens = int(mnt) if mnt is not None and int(mnt) > 0 else 2**31 - 1
        if self.teacher is not None:
            self.max_tokens = 1  # a scored sequence generates nothing (score())
        if "eos_token_id" in kw:
            eos = kw["eos_token_id"]
            self.eos = set() if eos is None else \
                set(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
        elif gc is not None:
            self.eos = self._eos_ids(gc)
        self.requests = {b: dict(id=self.next_id + b, live=True, arrived=False, pos=0,
                                 generated=0, prompt=[]) for b in range(B)}
        self.next_id += B

    def _tokens_from_inputs(self, ids: torch.Tensor, B: int) -> None:
        # The inputs of this forward hold the tokens the previous step chose.
        for b, (pos, _, _) in self.sampled.items():
            r = self.requests[b]
            if r["live"] and b < B:
                self._token(r, pos + 1, int(ids[b, -1]))

    def _token(self, r: dict[str, Any], position: int, token: int) -> None:
        self.rec.token(r["id"], position, token)
        r["generated"] += 1
        if token in self.eos:
            self.rec.finish(r["id"], _lib.FINISH_EOS, r["generated"])
            r["live"] = False

    def _generate_done(self, out: Any) -> None:
        seq = out if isinstance(out, torch.Tensor) else getattr(out, "sequences", None)
        self._safe(self._finish_all, _lib.FINISH_MAX_TOKENS, seq)
        self.requests = {}
        self.gen_kwargs = {}

    def _finish_all(self, reason: int, seq: torch.Tensor | None) -> None:
        if not self.in_step:
            return
        if seq is not None:
            seq = seq.detach().to("cpu")
            for b, (pos, _, _) in self.sampled.items():
                r = self.requests[b]
                if r["live"]:
                    self._token(r, pos + 1, int(seq[b, -1]))
        for r in self.requests.values():
            if r["live"] and r["arrived"]:
                self.rec.finish(r["id"], reason, r["generated"])
                r["live"] = False
        self.pending.flush(self.rec)
        self.rec.end_step()
        self.in_step = False

    def _record_rows(self, site: str, out: Any) -> None:
        if not self.in_step:
            return
        x = _tensor(out)
        if x is None:
            return
        if self.device_hash and not x.is_cpu:
            x = x.detach().reshape(-1, x.shape[-1])
            if x.shape[0] == self.rows:
                self.pending.add(site, x)
            return
        if x.numel() != self.rows * x.shape[-1]:
            return
        # Host rows (every site of every layer: the hot path), or a shared record-cuda
        # trace's (xxh3-64, hashed on the host): one C call, the rows hashed where they are.
        self.rec.host_rows(site, x if x.is_cpu else x.detach().to("cpu"), self.rows)

    def _router(self, layer: int) -> Callable[[torch.nn.Module, tuple[Any, ...], Any], None]:
        def hook(mod: torch.nn.Module, args: tuple[Any, ...], out: Any) -> None:
            self._safe(self._record_router, layer, out)
        return hook

    def _record_router(self, layer: int, out: Any) -> None:
        if not self.in_step:
            return
        logits = _tensor(out)
        if logits is None:
            return
        site = "L%d.moe.router" % layer
        if self.rec.wants_rows(site):
            self._record_rows(site, logits)
        if not (isinstance(out, (tuple, list)) and len(out) >= 3):
            return
        scores, idx = out[1], out[2]
        n, k = idx.reshape(-1, idx.shape[-1]).shape
        if n != self.rows:
            return
        chosen = np.ascontiguousarray(idx.detach().reshape(n, k).to("cpu").numpy(),
                                      dtype=np.int32)
        gates = np.ascontiguousarray(scores.detach().reshape(n, k).float().to("cpu").numpy(),
                                     dtype=np.float32)
        self.rec.routing(layer, n, k, int(logits.shape[-1]), chosen.ctypes.data,
                         chosen.ctypes.data, gates.ctypes.data, None)

    def _logits(self, mod: torch.nn.Module, args: tuple[Any, ...], out: Any) -> None:
        self._safe(self._record_logits, out)

    def _record_logits(self, out: Any) -> None:
        x = _tensor(out)
        if not self.in_step or x is None or x.dim() != 3:
            return
        x = x.detach()
        B, TL, V = x.shape
        rows: list[tuple[int, tuple[int, int, int]]] = \
            [(b, e) for b, es in self.scored.items() for e in es] if self.teacher is not None \
            else list(self.sampled.items())
        for b, (pos, batch_row, t) in rows:
            r = self.requests[b]
            li = t - (self.T - TL)  # transformers keeps only the last TL positions' logits
            if not r["live"] or li < 0:
                continue
            row = x[b, li]
            if row.dtype not in _DTYPES:
                row = row.float()
            if row.stride(-1) != 1:
                row = row.contiguous()
            if row.device.type != "cpu":
                row = row.to("cpu")
            self.rec.logits(r["id"], pos, batch_row, row.data_ptr(), _DTYPES[row.dtype], V)


@contextlib.contextmanager
def record(model: torch.nn.Module, path: str | None = None, capture: str = "layers",
           top_k: int = 32, logits: str = "topk", zstd_level: int = 1,
           label: str | Sequence[str] | None = None,
           nvtx: bool | None = None) -> Iterator[_HookRecorder]:
    """Records every forward call of `model` inside the block as one step of a trace at `path`
    (None: $LLMRR_TRACE, or the shared recorder of record-cuda). `label`: a string for every
    request, or one per batch row. Yields the recorder (its .step is the last step number)."""
    r = _HookRecorder(model, path, capture, top_k, logits, zstd_level, label, nvtx)
    try:
        r.attach()
        yield r
    finally:
        r.detach()
        r.close()


def score(model: torch.nn.Module, sequences: Sequence[Sequence[int]], path: str | None = None,
          prompt_lens: Sequence[int] | None = None, capture: str = "layers", top_k: int = 32,
          logits: str = "topk", zstd_level: int = 1,
          label: str | Sequence[str] | None = None) -> list[torch.Tensor]:
    """The trainer's recompute of a rollout: one teacher-forced forward of `model` over the
    batch of `sequences` (each prompt + completion, right-padded, with its attention mask),
    recorded as one step at `path`: each sequence is a request whose prompt is the whole
    sequence (it generates nothing: max_tokens 1, finished with 0 tokens), its rows at the
    sites `capture` keeps (the same names and mixsum64 hash as the vLLM plugin and record()),
    and the logits of every position from prompt_lens[i] - 1 (default 0) to the one before
    the last: each the row that predicts the next token, with its logsumexp, so `llmrr
    mismatch ROLLOUT TRAINER` pairs it by tokens with the rollout's request and compares the
    two log-probs token by token.

    Returns, per sequence, the float32 log-probs of its tokens at those positions (the next
    token's log_softmax, as a trainer computes them)."""
    seqs = [[int(t) for t in s] for s in sequences]
    if not seqs:
        raise ValueError("llmrr.runtimes.torch.score: no sequences")
    for i, s in enumerate(seqs):
        if len(s) < 2:
            raise ValueError("llmrr.runtimes.torch.score: sequence %d has %d token(s), expected "
                             "at least 2 (a prompt token and one to score)" % (i, len(s)))
    if prompt_lens is not None and len(prompt_lens) != len(seqs):
        raise ValueError("llmrr.runtimes.torch.score: %d prompt_lens for %d sequences"
                         % (len(prompt_lens), len(seqs)))
    starts = []
    for i, s in enumerate(seqs):
        p = int(prompt_lens[i]) if prompt_lens is not None else 1
        if not 1 <= p < len(s):
            raise ValueError("llmrr.runtimes.torch.score: prompt_lens[%d] = %d, expected 1 to %d "
                             "(the sequence's length - 1)" % (i, p, len(s) - 1))
        starts.append(p - 1)
    dev = next(model.parameters()).device
    T = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), T), dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1
    r = _HookRecorder(model, path, capture, top_k, logits, zstd_level, label, None)
    r.teacher = starts
    try:
        r.attach()
        with torch.no_grad():
            out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev))
        r._safe(r._finish_all, _lib.FINISH_MAX_TOKENS, None)
    finally:
        r.detach()
        r.close()
    lg = _tensor(out.logits if hasattr(out, "logits") else out)
    if lg is None:
        raise ValueError("llmrr.runtimes.torch.score: the model returned no logits")
    lp = torch.log_softmax(lg.float(), dim=-1).cpu()
    result = []
    for i, s in enumerate(seqs):
        nxt = torch.tensor(s[starts[i] + 1:], dtype=torch.long)
        result.append(lp[i, starts[i]:len(s) - 1].gather(-1, nxt[:, None])[:, 0])
    return result
