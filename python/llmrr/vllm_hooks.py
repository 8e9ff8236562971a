"""The row hooks of llmrr.vllm (a mixin of its step recorder): llmrr's sites on vLLM's modules,
rows hashed as they come, the logits of every sampled row and MoE routing.

Every hook is a no-op outside a step and after a failure; rows go to the step's sink (the
trace, or under async scheduling the step's tape), device rows into the step's Pending."""
import sys

# id(vLLM router) -> (step recorder, layer): whose select_experts results are recorded.
ROUTERS: dict = {}


def vllm_router(moe):
    """The FusedMoERouter of a vLLM MoE block (its experts' runner holds it), or None."""
    try:
        from vllm.model_executor.layers.fused_moe.router.fused_moe_router import FusedMoERouter
    except Exception:
        return None
    experts = getattr(moe, "experts", None)
    for owner in (experts, getattr(experts, "runner", None)):
        r = getattr(owner, "router", None)
        if isinstance(r, FusedMoERouter):
            return r
    return None


def patch_router_selection():
    """Wraps FusedMoERouter.select_experts (once): each call of a registered router hands its
    (weights, ids) to its recorder. False when this vLLM has no such class."""
    try:
        from vllm.model_executor.layers.fused_moe.router.fused_moe_router import FusedMoERouter
    except Exception:
        return False
    if getattr(FusedMoERouter.select_experts, "_llmrr", False):
        return True
    orig = FusedMoERouter.select_experts

    def select_experts(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        who = ROUTERS.get(id(self))
        if who is not None:
            who[0].safe(who[0]._routed, who[1], out[0], out[1])
        return out
    select_experts._llmrr = True
    FusedMoERouter.select_experts = select_experts
    return True


def _warn(msg):
    print("llmrr.vllm: %s" % msg, file=sys.stderr, flush=True)


class Hooks:
    def _attach(self, model):
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
    def _first(out):
        import torch
        if isinstance(out, (tuple, list)):
            out = out[0] if out else None
        return out if isinstance(out, torch.Tensor) else None

    def _hook(self, module, site):
        if module is None or not self.rec.wants_rows(site):
            return

        def hook(mod, args, out):
            self._rows(site, self._first(out))
        self.handles.append(module.register_forward_hook(hook))

    def _layer_out(self, i):
        import torch
        site = "L%d.out" % i

        def hook(mod, args, out):
            # vLLM layers return (hidden, residual); the layer's output is their sum.
            if not self.in_step:
                return
            if isinstance(out, (tuple, list)) and len(out) == 2 and out[1] is not None:
                x = self.safe(torch.add, out[0], out[1])
            else:
                x = self._first(out)
            self._rows(site, x)
        return hook

    def _qkv(self, i, attn):
        q, kv = getattr(attn, "q_size", None), getattr(attn, "kv_size", None)
        sites = ["L%d.attn.%s" % (i, s) for s in ("q", "k", "v")]

        def hook(mod, args, out):
            x = self._first(out)
            if (not self.in_step or x is None or q is None or kv is None
                    or x.shape[-1] != q + 2 * kv):
                return
            for site, part in zip(sites, x.split([q, kv, kv], dim=-1)):
                self._rows(site, part)
        return hook

    def _gate_up(self, i):
        gate, up = "L%d.mlp.gate" % i, "L%d.mlp.up" % i

        def hook(mod, args, out):
            x = self._first(out)
            if not self.in_step or x is None or x.shape[-1] % 2:
                return
            g, u = x.chunk(2, dim=-1)
            self._rows(gate, g)
            self._rows(up, u)
        return hook

    def _routed(self, i, weights, ids, total=None):
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

    def _router(self, i, mlp, recompute):
        import torch

        def hook(mod, args, out):
            logits = self._first(out)
            if logits is None or not self.in_step:
                return
            self._rows("L%d.moe.router" % i, logits)
            if not recompute:
                return  # the routing comes from vLLM's own selection (_routed)
            k = int(getattr(mlp, "top_k", 0) or getattr(getattr(mlp, "experts", None), "top_k", 0)
                    or 0)
            if k <= 0:
                return
            rows = logits.reshape(-1, logits.shape[-1])[:self.rows]
            # The router's choice as vLLM's top-k softmax makes it (ids, weights).
            w, idx = torch.topk(torch.softmax(rows.float(), dim=-1), k, dim=-1)
            if getattr(mlp, "renormalize", False) or getattr(
                    getattr(mlp, "experts", None), "renormalize", False):
                w = w / w.sum(dim=-1, keepdim=True)
            self.safe(self._routed, i, w, idx, int(rows.shape[-1]))
        return hook

    def _rows(self, site, x):
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

    def _wrap_logits(self, model):
        orig = getattr(model, "compute_logits", None)
        if orig is None:
            return

        def compute_logits(*args, **kwargs):
            out = orig(*args, **kwargs)
            self.safe(self._logits, out)
            return out
        model.compute_logits = compute_logits

    def _logits(self, logits):
        import torch
        if not self.in_step or not isinstance(logits, torch.Tensor) or logits.dim() != 2:
            return
        # One logits row per scheduled request, in batch order (vLLM's logits_indices).
        if logits.shape[0] < len(self.order):
            self._missing("logits", "%d rows for %d requests" % (logits.shape[0],
                                                               len(self.order)))
            return
        from . import _lib
        dt = _lib.torch_dtypes()
        x = logits.detach()
        if x.dtype not in dt:
            x = x.float()
        x = x[:len(self.order)].to("cpu").contiguous()
        self.keep.append(x)
        for n, (rid, first, count, sample, pos) in enumerate(self.order):
            if sample:
                row = x[n]
                self.sink.logits(self.ids[rid], pos, first + count - 1, row.data_ptr(),
                                dt[row.dtype], x.shape[-1])
