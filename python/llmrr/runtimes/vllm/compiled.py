"""Row fingerprints inside vLLM's compiled model (enforce_eager=False).

Hooks added after vLLM compiled its model never fire, so when the model is compiled,
llmrr.runtimes.vllm attaches its sites right after the model is loaded, before vLLM warms it
up and compiles it. Each site calls one torch custom op, llmrr::site_rows(x, token, slot), that the
compiler keeps in the graph as an opaque call (it declares that it mutates `token`, so it is
never dropped): at run time the op hands x to the recorder's row path for the slot's site,
the same path an eager hook takes (host rows fingerprinted by the C library where they are,
device rows hashed on the device into the step's Pending). Hashing each site inside the
graph with torch ops instead cost 15 % of a decode step on the CPU (two dozen small ops a
site); copying every site's rows to a buffer and hashing them in one batch at the step's end
cost 40 %.
"""
# No `from __future__ import annotations`: torch.library.custom_op reads site_rows' annotations
# as the op's schema.
from typing import Any, Callable

import torch

_defined = False
# slot -> the bound recorder's row path for that slot's site
CALLBACKS: dict[int, Callable[[torch.Tensor], None]] = {}


def define_op() -> None:
    global _defined
    if _defined:
        return
    _defined = True

    @torch.library.custom_op("llmrr::site_rows", mutates_args=("token",))
    def site_rows(x: torch.Tensor, token: torch.Tensor, slot: int) -> None:
        cb = CALLBACKS.get(slot)
        if cb is not None:
            cb(x)

    @site_rows.register_fake
    def _(x: torch.Tensor, token: torch.Tensor, slot: int) -> None:
        return None


_next_slot = [0]


class _Bound:
    """A slot's callback: the rows of its site to the recorder's row path."""

    def __init__(self, rows: Callable[[str, torch.Tensor], None], site: str) -> None:
        self.rows = rows
        self.site = site

    def __call__(self, x: torch.Tensor) -> None:
        self.rows(self.site, x)


class CompiledSites:
    """The sites of one model runner's compiled model: their slots and hooks."""

    def __init__(self, runner: Any, capture: str) -> None:
        define_op()
        model = runner.get_model()
        base = getattr(model, "model", model)
        layers = getattr(base, "layers", None) or []
        start = getattr(base, "start_layer", 0) or 0
        self.sites: list[tuple[str, Any, str]] = []  # (site, module, how)
        for j, layer in enumerate(layers):
            if type(layer).__name__ == "PPMissingLayer":
                continue
            i = start + j
            self.sites.append(("L%d.out" % i, layer, "sum"))
            if capture == "all":
                attn = getattr(layer, "self_attn", None)
                mlp = getattr(layer, "mlp", None)
                for site, m in (("L%d.attn_norm" % i, getattr(layer, "input_layernorm", None)),
                                ("L%d.attn.o" % i, getattr(attn, "o_proj", None)),
                                ("L%d.mlp_norm" % i, getattr(layer, "post_attention_layernorm",
                                                             None)),
                                ("L%d.mlp.down" % i, getattr(mlp, "down_proj", None))):
                    if m is not None:
                        self.sites.append((site, m, "first"))
        if capture == "all":
            for site, m in (("embed", getattr(base, "embed_tokens", None)),
                            ("final_norm", getattr(base, "norm", None))):
                if m is not None:
                    self.sites.append((site, m, "first"))
        self.token = torch.zeros((1,), dtype=torch.int64, device=runner.device)
        # Slots are unique in the process (several runners may each have a model).
        self.slots = list(range(_next_slot[0], _next_slot[0] + len(self.sites)))
        _next_slot[0] += len(self.sites)
        self.handles = [m.register_forward_hook(self._hook(slot, how))
                        for slot, (_, m, how) in zip(self.slots, self.sites)]

    def _hook(self, slot: int, how: str) -> Callable[[Any, Any, Any], None]:
        token = self.token

        def hook(mod: Any, args: Any, out: Any) -> None:
            if isinstance(out, (tuple, list)):
                if how == "sum" and len(out) == 2 and out[1] is not None:
                    x = out[0] + out[1]  # vLLM layers return (hidden, residual)
                else:
                    x = out[0]
            else:
                x = out
            torch.ops.llmrr.site_rows(x, token, slot)
        return hook

    def bind(self, rows: Callable[[str, torch.Tensor], None]) -> None:
        """Hands each site's rows to rows(site, x) from now on."""
        for slot, (site, _, _) in zip(self.slots, self.sites):
            CALLBACKS[slot] = _Bound(rows, site)

    def close(self) -> None:
        for slot in self.slots:
            CALLBACKS.pop(slot, None)
        for h in self.handles:
            h.remove()
