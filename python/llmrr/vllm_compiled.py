"""Row fingerprints inside vLLM's compiled model (enforce_eager=False).

Forward hooks that call Python (ctypes) cannot run inside a compiled graph, and hooks added
after vLLM compiled its model never fire. So when the model is compiled, llmrr.vllm attaches
its sites right after the model is loaded, before vLLM warms it up and compiles it, and each
site calls one torch custom op, llmrr::site_rows, that the compiler keeps in the graph as an
opaque call: it writes the rows' mixsum64 lane sums, l2 and max |x| (llmrr.fingerprint) into
preallocated buffers on the model's device, at the site's slot. Nothing leaves the device
during the forward pass; at the step's end the recorder reads the slots the step wrote, the
first `rows` rows of each (padded rows left out), and finishes the hashes on the host.
"""
import torch

from . import fingerprint as fp

_defined = False


def define_op():
    """llmrr::site_rows(x, sums, stats, meta, slot): x's rows into slot `slot` (once)."""
    global _defined
    if _defined:
        return
    _defined = True

    @torch.library.custom_op("llmrr::site_rows", mutates_args=("sums", "stats", "meta"))
    def site_rows(x: torch.Tensor, sums: torch.Tensor, stats: torch.Tensor, meta: torch.Tensor,
                  slot: int) -> None:
        x = x.reshape(-1, x.shape[-1])
        n = min(int(x.shape[0]), int(sums.shape[1]))
        x = x[:n]
        sums[slot, :n].copy_(fp.lane_sums(x))
        l2, mx = fp.summaries(x)
        stats[slot, :n, 0].copy_(l2)
        stats[slot, :n, 1].copy_(mx)
        meta[slot, 0] = x.shape[-1]
        meta[slot, 1] = n

    @site_rows.register_fake
    def _(x, sums, stats, meta, slot):
        return None


class CompiledSites:
    """The sites of one model runner's compiled model: their slots, buffers and hooks."""

    def __init__(self, runner, capture):
        define_op()
        model = runner.get_model()
        base = getattr(model, "model", model)
        layers = getattr(base, "layers", None) or []
        start = getattr(base, "start_layer", 0) or 0
        self.sites = []  # (site, module, how)
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
        rows = int(runner.vllm_config.scheduler_config.max_num_batched_tokens)
        dev = runner.device
        n = max(1, len(self.sites))
        self.sums = torch.zeros((n, rows, 2), dtype=torch.int64, device=dev)
        self.stats = torch.zeros((n, rows, 2), dtype=torch.float32, device=dev)
        self.meta = torch.zeros((n, 2), dtype=torch.int64, device=dev)
        self.handles = [m.register_forward_hook(self._hook(slot, how))
                        for slot, (_, m, how) in enumerate(self.sites)]

    def _hook(self, slot, how):
        sums, stats, meta = self.sums, self.stats, self.meta

        def hook(mod, args, out):
            if isinstance(out, (tuple, list)):
                if how == "sum" and len(out) == 2 and out[1] is not None:
                    x = out[0] + out[1]  # vLLM layers return (hidden, residual)
                else:
                    x = out[0]
            else:
                x = out
            torch.ops.llmrr.site_rows(x, sums, stats, meta, slot)
        return hook

    def take(self, rows, want):
        """The step's rows of every site it wrote and `want(site)` keeps, as Pending items
        (copies: the next step overwrites the buffers); the slots are marked unwritten."""
        meta = self.meta.to("cpu")
        items = []
        for slot, (site, _, _) in enumerate(self.sites):
            cols, n = int(meta[slot, 0]), int(meta[slot, 1])
            if n < rows or not want(site):
                continue
            t = self.sums[slot, :rows].clone()
            items.append((site, cols, None, t, self.stats[slot, :rows, 0].clone(),
                          self.stats[slot, :rows, 1].clone()))
        self.meta.zero_()
        return items

    def close(self):
        for h in self.handles:
            h.remove()
