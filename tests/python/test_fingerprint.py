"""mixsum64 computed with torch ops where the tensor lives (llmrr.core.fingerprint) against the
C library's reference (llmrr_fingerprint_mixsum64, format/include/llmrr/format/fingerprint.h)
bit for bit: fp32, bf16 and f16 rows, special values, row lengths from 1 to a vocabulary, on
the CPU and on a GPU where one is at hand; the same trace through both recorder paths (rows
the library hashes, fingerprints made on the device) reads back equal."""
import ctypes
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import require  # noqa: E402

require("numpy", "torch")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import llmrr  # noqa: E402
from llmrr.core import _lib, fingerprint  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def reference(x):
    """The C library's hashes of the rows of x (widened to fp32 on the host)."""
    a = np.ascontiguousarray(x.detach().float().cpu().numpy(), dtype=np.float32)
    a = a.reshape(-1, a.shape[-1])
    L = _lib.lib()
    return np.array([L.llmrr_fingerprint_mixsum64(a[r].ctypes.data, a.shape[1])
                     for r in range(a.shape[0])], dtype=np.uint64)


class Mixsum64(unittest.TestCase):
    def test_pinned_value(self):
        # The value tests/format/fingerprint_test.cc pins, from an independent implementation.
        x = torch.tensor([[1.0, -2.5, 0.0, 3.0e-5]])
        self.assertEqual(int(fingerprint.mixsum64(x)[0]), 0x58BF9A47E6948BA8)
        self.assertEqual(int(reference(x)[0]), 0x58BF9A47E6948BA8)

    def test_equals_the_library_on_every_dtype_and_device(self):
        g = torch.Generator().manual_seed(3)
        for dev in DEVICES:
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                for n in (1, 7, 64, 576, 1536, 49152):
                    x = (torch.randn(3, n, generator=g) * 4).to(dtype)
                    x[0, 0] = float("nan")
                    x[1, -1] = -0.0
                    x[2, n // 2] = float("inf")
                    if dtype == torch.float32 and n > 2:
                        x[2, 1] = 1e-45  # a subnormal
                    got = fingerprint.mixsum64(x.to(dev))
                    np.testing.assert_array_equal(got, reference(x),
                                                  "%s %s n=%d" % (dev, dtype, n))

    def test_a_non_contiguous_view_hashes_its_values(self):
        x = torch.randn(8, 32)
        v = x[:, ::2]
        np.testing.assert_array_equal(fingerprint.mixsum64(v), reference(v.contiguous()))

    def test_one_bit_changes_the_hash(self):
        x = torch.randn(1, 576)
        h = fingerprint.mixsum64(x)[0]
        y = x.clone()
        y.view(torch.int32)[0, 100] ^= 1
        self.assertNotEqual(fingerprint.mixsum64(y)[0], h)

    def test_device_fingerprints_and_library_rows_read_back_equal(self):
        x = torch.randn(4, 96)
        paths = []
        for way in ("rows", "device"):
            path = "fp-%s.trace" % way
            with llmrr.Recorder(path, model_name="m", layers=1, hidden=96, vocab=16,
                                capture="all", fingerprint="mixsum64") as rec:
                rec.add_request(0, [1, 2, 3, 4], max_tokens=1)
                rec.begin_step(0, [dict(request=0, start=0, count=4, kind=0, sample=0)])
                if way == "rows":
                    rec.rows("L0.out", x.data_ptr(), _lib.DTYPE_F32, 4, 96)
                else:
                    p = fingerprint.Pending()
                    p.add("L0.out", x)
                    p.flush(rec)
                rec.end_step()
            paths.append(path)
        got = []
        for path in paths:
            t = llmrr.open(path)
            fp = t.fingerprints
            got.append((np.asarray(fp["hash"]), np.asarray(fp["l2"]), np.asarray(fp["max_abs"])))
            self.assertEqual(t.header["engine"]["fingerprint"], "mixsum64")
        np.testing.assert_array_equal(got[0][0], got[1][0])
        np.testing.assert_array_equal(got[0][0], reference(x))
        np.testing.assert_array_equal(got[0][2], got[1][2])  # max |x| is exact
        np.testing.assert_allclose(got[0][1], got[1][1], rtol=1e-6)  # l2: a summary

    def test_host_rows_takes_every_layout_as_its_values(self):
        # Recorder.host_rows, the hot path of the CPU hooks, against each view's values made
        # contiguous and fp32 first: column slices of a fused output (strided rows, taken where
        # they are), a 3-d batch, more rows than the step's (the first ones), bf16 (widened by
        # the library), float64 and a transposed view (copied), both recorder modes.
        g = torch.Generator().manual_seed(5)
        qkv = torch.randn(6, 96 + 2 * 32, generator=g)
        cases = {
            "L0.attn.q": qkv[:, :96], "L0.attn.k": qkv[:, 96:128], "L0.attn.v": qkv[:, 128:],
            "L0.out": torch.randn(2, 3, 96, generator=g),
            "L0.mlp.up": torch.randn(9, 40, generator=g),                 # 9 rows, 6 taken
            "L0.mlp.gate": torch.randn(6, 40, generator=g).bfloat16(),
            "L0.mlp.down": torch.randn(6, 96, generator=g).double(),
            "L0.attn.o": torch.randn(96, 6, generator=g).t(),
        }
        for inline in (1, 0):
            path = "host-rows-%d.trace" % inline
            with llmrr.Recorder(path, model_name="m", layers=1, hidden=96, vocab=16,
                                capture="all", fingerprint="mixsum64",
                                inline_steps=inline) as rec:
                rec.add_request(0, [1, 2, 3, 4, 5, 6], max_tokens=1)
                rec.begin_step(0, [dict(request=0, start=0, count=6, kind=0, sample=0)])
                for site, x in cases.items():
                    self.assertTrue(rec.host_rows(site, x, 6), site)
                self.assertFalse(rec.host_rows("L0.attn.core", torch.randn(5, 96), 6))
                rec.end_step()
            t = llmrr.open(path)
            fp = t.fingerprints
            for site, x in cases.items():
                want = reference(x.reshape(-1, x.shape[-1])[:6].float())
                got = np.asarray(fp.where(site=site)["hash"])
                np.testing.assert_array_equal(got, want, "%s inline=%d" % (site, inline))
            self.assertEqual(len(fp.where(site="L0.attn.core")), 0)
            t.close()

if __name__ == "__main__":
    unittest.main(verbosity=2)
