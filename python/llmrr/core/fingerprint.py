"""Row fingerprints computed where the tensor lives ("mixsum64"), shared by llmrr.runtimes.torch
and llmrr.runtimes.vllm.

The hash is defined in format/include/llmrr/format/fingerprint.h (llmrr_fingerprint_mixsum64
in the C library is the reference): for a row x[0..n) widened exactly to fp32, u_i its 32
bits, and lanes j = 0, 1,

    a = u_i ^ (i * P_j + S_j);  a ^= a >> 16;  a *= M1;  a ^= a >> 15;  a *= M2;  a ^= a >> 16
    T_j = sum_i a;   hash = splitmix64(T_0 ^ splitmix64(T_1 ^ n))

every step but the sum mod 2^32. Here it runs as torch int64 ops on the tensor's own device:
the values stay below 2^32 and the constants below 2^31, so no product overflows, and the
sum of integers is exact in any order the device picks. Only T (two int64 per row), l2 and
max |x| travel to the host, once per step (Pending.flush). The final splitmix64 runs in numpy
on those few numbers.

l2 (sqrt of the sum of squares, in float64) and max |x| are summaries for a reader; diff
compares rows by hash only, so a device's summation order in l2 does not matter.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from .recorder import Recorder

KIND = "mixsum64"
_P = (0x61C88647, 0x2545F491)
_S = (0x1B873593, 0x27D4EB2F)
_M1, _M2 = 0x7FEB352D, 0x68E31DA5
_MASK = 0xFFFFFFFF
_idx_cache: dict[tuple[int, str], torch.Tensor] = {}


def _lane_terms(n: int, device: torch.device) -> torch.Tensor:
    key = (n, str(device))
    t = _idx_cache.get(key)
    if t is None:
        i = torch.arange(n, dtype=torch.int64, device=device)
        t = torch.stack([(i * p + s) & _MASK for p, s in zip(_P, _S)])  # [2, n]
        if len(_idx_cache) > 64:
            _idx_cache.clear()
        _idx_cache[key] = t
    return t


def lane_sums(x: torch.Tensor) -> torch.Tensor:
    """T of each row of x ([rows, n], any float dtype, any device): int64 [rows, 2]."""
    x = x.detach()
    if x.dtype != torch.float32:
        x = x.float()  # bf16 / f16 widen exactly
    x = x.contiguous()
    n = x.shape[-1]
    u = x.view(torch.int32).to(torch.int64) & _MASK  # [rows, n]
    a = u.unsqueeze(1) ^ _lane_terms(n, x.device)  # [rows, 2, n]
    a ^= a >> 16
    a.mul_(_M1).bitwise_and_(_MASK)
    a ^= a >> 15
    a.mul_(_M2).bitwise_and_(_MASK)
    a ^= a >> 16
    return a.sum(dim=-1)


def summaries(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(l2, max |x|) of each row as float32 tensors on x's device."""
    xf = x.detach().float()
    l2 = xf.double().square().sum(dim=-1).sqrt().float()
    mx = xf.abs().amax(dim=-1)
    return l2, mx


def _splitmix64(z: Any) -> Any:
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def finish(t: Any, n: int) -> np.ndarray:
    """The hashes (uint64 array) from lane sums t (int64 array [rows, 2]) of rows of n."""
    t = np.ascontiguousarray(t, dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        return _splitmix64(t[:, 0] ^ _splitmix64(t[:, 1] ^ np.uint64(n)))


def mixsum64(x: torch.Tensor) -> np.ndarray:
    """The hashes of the rows of x ([rows, n] or [n]) as a uint64 numpy array."""
    if x.dim() == 1:
        x = x.unsqueeze(0)
    x = x.reshape(-1, x.shape[-1])
    return finish(lane_sums(x).cpu().numpy(), x.shape[-1])


class Pending:
    """The fingerprints of one step's sites, computed on the device as the rows come (a hook's
    tensor may be overwritten in place later) and handed to the recorder at the step's end
    with one copy to the host per kind of number."""

    def __init__(self) -> None:
        # (site, cols, batch_rows, t [rows, 2], l2, mx)
        self.items: list[tuple[str, int, Any, torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def add(self, site: str, x: torch.Tensor, batch_rows: Any = None) -> None:
        x = x.detach().reshape(-1, x.shape[-1])
        l2, mx = summaries(x)
        self.items.append((site, x.shape[-1], batch_rows, lane_sums(x), l2, mx))

    def flush(self, rec: Recorder) -> None:
        if not self.items:
            return
        items, self.items = self.items, []
        dev = items[0][3].device
        t = torch.cat([it[3].to(dev) for it in items])
        f = torch.stack([torch.cat([it[4].to(dev) for it in items]),
                         torch.cat([it[5].to(dev) for it in items])])
        if dev.type != "cpu":
            # One transfer each, then one wait for the step.
            t_h = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            f_h = torch.empty(f.shape, dtype=f.dtype, pin_memory=True)
            t_h.copy_(t, non_blocking=True)
            f_h.copy_(f, non_blocking=True)
            torch.cuda.current_stream(dev).synchronize()
            t, f = t_h, f_h
        t_np = t.numpy()
        f_np = f.numpy()
        at = 0
        for site, cols, batch_rows, tt, _, _ in items:
            rows = tt.shape[0]
            hashes = finish(t_np[at:at + rows], cols)
            l2 = np.ascontiguousarray(f_np[0, at:at + rows], dtype=np.float32)
            mx = np.ascontiguousarray(f_np[1, at:at + rows], dtype=np.float32)
            rec.fingerprints(site, hashes, l2, mx, cols, batch_rows)
            at += rows
