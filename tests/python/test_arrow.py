"""Traces as data: the Arrow export of the reader (pyarrow, polars, pandas, DuckDB read the
library's buffers; a check of buffer addresses proves no copy), lazy step-range tables, the
Parquet export, and python/README.md's worked examples, run block by block."""
import os
import re
import shlex
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import llmrr_cli, require  # noqa: E402

require("numpy", "pyarrow", "polars", "pandas", "duckdb", "matplotlib")
import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import llmrr  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLES = ["requests", "steps", "segments", "plans", "fingerprints", "routing", "logits",
          "tokens", "finishes", "kernels"]


def record(path, *extra):
    llmrr_cli("record", "--model", "builtin:tiny-moe", "--prompt", "hello world",
              "--max-tokens", "24", "--capacity-factor", "1.0", "-o", path, *extra)
    return path


def arrow_values(col):
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


class ArrowTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.a = record("a.trace")
        cls.b = record("b.trace", "--load", "7", "--capture", "all")
        cls.t = llmrr.open(cls.b)

    def test_pyarrow_is_zero_copy(self):
        fp = self.t.fingerprints
        tbl = pa.table(fp)
        self.assertEqual(tbl.num_rows, len(fp))
        self.assertGreater(len(fp), 1000)
        for col in ("step", "hash", "l2", "request", "position"):
            chunks = tbl.column(col).chunks
            self.assertEqual(len(chunks), 1)
            # The Arrow data buffer is the library's column, and so is the numpy view.
            self.assertEqual(chunks[0].buffers()[1].address, fp.column_address(col), col)
            self.assertEqual(fp[col].ctypes.data, fp.column_address(col), col)
            np.testing.assert_array_equal(chunks[0].to_numpy(), fp[col])
        self.assertEqual(str(tbl.schema.field("site_name").type),
                         "dictionary<values=large_string, indices=int32, ordered=0>")
        names = tbl.column("site_name").to_pylist()
        self.assertEqual(names, [llmrr.site_name(int(s)) for s in fp.site])
        self.assertEqual(list(fp.site_name), names)
        # The categories run in forward order, as site_order does.
        cats = tbl.column("site_name").chunks[0].dictionary.to_pylist()
        first = {n: int(k) for n, k in zip(reversed(names), reversed(fp.site_order.tolist()))}
        self.assertEqual(cats, sorted(first, key=first.get))
        self.assertEqual(cats[0], "embed")
        self.assertEqual(cats[-1], "logits")
        # The protocol's capsule, named as the spec says; one no consumer takes is released.
        import ctypes
        cap = fp.__arrow_c_stream__()
        is_valid = ctypes.pythonapi.PyCapsule_IsValid
        is_valid.restype, is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
        self.assertEqual(is_valid(cap, b"arrow_array_stream"), 1)
        del cap
        # The export outlives the Trace and the Table it came from.
        del fp
        self.assertEqual(tbl.column("site_name").to_pylist(), names)

    def test_lists(self):
        lg = self.t.logits
        tbl = pa.table(lg)
        k = lg.top_ids.shape[1]
        self.assertEqual(str(tbl.schema.field("top_ids").type), "fixed_size_list<item: int32 not null>[%d]" % k)
        self.assertEqual(tbl.column("top_ids").to_pylist(), lg.top_ids.tolist())
        self.assertEqual(tbl.column("top_values").to_pylist(), lg.top_values.tolist())
        tk = self.t.table("logits_topk")
        self.assertEqual(len(tk), int(lg.top_count.sum()))
        self.assertTrue((lg.top_ids[tk.logit, tk.rank] == tk.id).all())
        rq = self.t.requests
        prompts = pa.table(rq).column("prompt").to_pylist()
        self.assertEqual(prompts, [p.tolist() for p in rq.prompt])
        self.assertEqual([len(p) for p in prompts], rq.prompt_len.tolist())
        pt = self.t.table("prompt_tokens")
        self.assertEqual(sum(prompts, []), pt.token.tolist())

    def test_polars_pandas_duckdb(self):
        fp = self.t.fingerprints
        df = pl.DataFrame(fp)
        self.assertEqual(df.height, len(fp))
        self.assertEqual(df["hash"].to_numpy().tolist(), fp.hash.tolist())
        self.assertEqual(pl.from_arrow(pa.table(fp))["l2"].to_list(), fp.l2.tolist())
        # polars.from_arrow gives any Arrow stream as one struct Series; unnested, the table.
        self.assertTrue(pl.from_arrow(fp).struct.unnest().equals(df))
        self.assertTrue(fp.to_polars().equals(df))
        pdf = fp.to_pandas()
        self.assertEqual(len(pdf), len(fp))
        self.assertEqual(str(pdf.site_name.dtype), "category")
        per_site = duckdb.sql("select site_name::varchar as s, count(*) as n from fp "
                              "group by 1 order by 1").fetchall()
        want = sorted((s, int((fp.site_name == s).sum())) for s in set(fp.site_name))
        self.assertEqual(per_site, want)

    def test_step_range_reads_only_those_steps(self):
        steps = self.t.steps.step
        lo, hi = int(steps[len(steps) // 3]), int(steps[2 * len(steps) // 3])
        for name in ("fingerprints", "routing", "tokens", "segments", "logits", "plans"):
            whole = self.t.table(name)
            part = self.t.table(name, steps=(lo, hi))
            keep = (whole.step >= lo) & (whole.step < hi)
            self.assertGreater(keep.sum(), 0, name)
            self.assertEqual(len(part), int(keep.sum()), name)
            for col in whole.columns():
                if col in ("prompt",):
                    continue
                np.testing.assert_array_equal(np.asarray(part[col]), np.asarray(whole[col])[keep],
                                              err_msg="%s.%s" % (name, col))
        req = self.t.table("requests", steps=(lo, hi))
        r = self.t.requests
        self.assertEqual(req.id.tolist(),
                         r.id[(r.arrival_step >= lo) & (r.arrival_step < hi)].tolist())
        with self.assertRaises(ValueError):
            self.t.table("fingerprints", steps=(5, 5))
        with self.assertRaises(llmrr.LlmrrError) as cm:
            self.t.table("nonsense")
        self.assertIn("unknown table 'nonsense'", str(cm.exception))

    def test_tables_are_lazy(self):
        # Opening reads the header and index; a table is read at its first use, alone.
        t = llmrr.open(self.b)
        self.assertEqual(t._tables, {})
        self.assertEqual(len(t.tokens), t.header["token_count"])
        self.assertEqual(list(t._tables), ["tokens"])

    def test_where_result_goes_through_pyarrow(self):
        one = self.t.fingerprints.where(site="L1.out")
        tbl = pa.table(one)
        self.assertEqual(tbl.num_rows, len(one))
        self.assertEqual(tbl.column("hash").to_pylist(), one.hash.tolist())

    def test_parquet_export(self):
        out = "pq"
        llmrr_cli("export", self.b, "--parquet", out)
        self.assertEqual(sorted(os.listdir(out)),
                         sorted(n + ".parquet" for n in TABLES + ["prompt_tokens", "logits_topk"]))
        for name in TABLES + ["prompt_tokens", "logits_topk"]:
            got = pq.read_table(os.path.join(out, name + ".parquet"))
            want = pa.table(self.t.table(name))
            self.assertEqual(got.column_names, want.column_names, name)
            for col in want.column_names:
                g = arrow_values(got.column(col)).to_pylist()
                w = arrow_values(want.column(col)).to_pylist()
                if col in ("top_values",):  # NaN padding: compare bit patterns
                    g = np.array(g, dtype=np.float32).view(np.uint32).tolist()
                    w = np.array(w, dtype=np.float32).view(np.uint32).tolist()
                self.assertEqual(g, w, "%s.%s" % (name, col))
        # Into an existing directory: its files are replaced whole (safeio::OutputDir), others
        # left; the input is never an output.
        with open(os.path.join(out, "notes.txt"), "w") as f:
            f.write("mine")
        llmrr_cli("export", self.a, "--parquet", out)
        self.assertEqual(pq.read_table(os.path.join(out, "tokens.parquet")).num_rows,
                         len(llmrr.open(self.a).tokens))
        self.assertTrue(os.path.exists(os.path.join(out, "notes.txt")))
        with open(self.b, "rb") as f:
            before = f.read()
        _, err = llmrr_cli("export", self.b, "--parquet", self.b, ok=(2,))
        with open(self.b, "rb") as f:
            self.assertEqual(f.read(), before)
        # A damaged trace: exit 2 with the reader's message, and nothing written.
        bad = os.path.join(os.environ["LLMRR_GOLDEN_ERRORS"], "corrupt_zstd.trace")
        p = subprocess.run([os.environ["LLMRR_BIN"], "export", bad, "--parquet", "bad-out"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("corrupt_zstd.trace: frame 1 (step chunk)", p.stderr)
        self.assertFalse(os.path.exists("bad-out"))
        self.assertEqual([n for n in os.listdir(".") if "llmrr-" in n], [])

    def test_parquet_without_pyarrow_says_what_to_run(self):
        env = dict(os.environ, LLMRR_PYTHON=sys.executable, PYTHONPATH="/nonexistent-llmrr",
                   PYTHONNOUSERSITE="1")
        # A python without pyarrow: the venv's interpreter with pyarrow hidden.
        os.makedirs("nopa/pyarrow", exist_ok=True)
        with open("nopa/pyarrow/__init__.py", "w") as f:
            f.write("raise ImportError('hidden by the test')\n")
        env["PYTHONPATH"] = os.path.abspath("nopa") + os.pathsep + os.path.join(ROOT, "python")
        p = subprocess.run([os.environ["LLMRR_BIN"], "export", self.b, "--parquet", "none-out"],
                           capture_output=True, text=True, env=env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("pyarrow", p.stderr)
        self.assertIn("tools/setup/python", p.stderr)
        self.assertFalse(os.path.exists("none-out"))


class ReadmeExamplesTest(unittest.TestCase):
    def test_examples(self):
        with open(os.path.join(ROOT, "python", "README.md")) as f:
            text = f.read()
        blocks = re.findall(r"```python example\n(.*?)```", text, re.S)
        self.assertEqual(len(blocks), 3)
        sh = re.search(r"```sh\n(llmrr record --model builtin:tiny-moe.*?)```", text, re.S)
        for line in sh.group(1).strip().splitlines():
            llmrr_cli(*shlex.split(line)[1:])
        scope = {}
        for block in blocks:
            exec(compile(block, "python/README.md", "exec"), scope)
        # The DuckDB split is the one `llmrr diff` reports.
        _, out = llmrr_cli("diff", "a.trace", "b.trace", ok=(1,))
        m = re.search(r"First difference at step (\d+), (?:prompt )?position (\d+)"
                      r"(?: \(token \d+\))?, (\S+):", out)
        self.assertIsNotNone(m, out)
        split = scope["split"]
        self.assertEqual(len(split), 1)
        self.assertEqual((int(split.step_b[0]), int(split.position[0]), str(split.site[0])),
                         (int(m.group(1)), int(m.group(2)), m.group(3)))
        # The plot was written, a real PNG with one line per layer.
        with open(scope["png"], "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        delta = scope["delta"]
        a = scope["a"]
        layers = a.header["model"]["layers"]
        self.assertEqual(sorted(set(delta.site)), sorted("L%d.out" % i for i in range(layers)))
        self.assertTrue((delta[delta.position < int(split.position[0])].dl2 == 0).all())
        # The routing changes, counted again with numpy.
        b = scope["b"]
        ra, rb = a.routing.where(request=0), b.routing.where(request=0)
        ka = {(p, l, r): (e, o) for p, l, r, e, o in
              zip(ra.position, ra.layer, ra["rank"], ra.expert, ra.outcome)}
        kb = {(p, l, r): (e, o) for p, l, r, e, o in
              zip(rb.position, rb.layer, rb["rank"], rb.expert, rb.outcome)}
        want = sorted(k for k in ka.keys() & kb.keys() if ka[k] != kb[k])
        changes = scope["changes"]
        got = sorted(zip(changes.position, changes.layer, changes["rank"]))
        self.assertGreater(len(want), 0)  # capacity under load reroutes some of its tokens
        self.assertEqual(got, want)


if __name__ == "__main__":
    unittest.main(verbosity=2)
