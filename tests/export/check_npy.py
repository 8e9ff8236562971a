#!/usr/bin/env python3
"""Loads every array of an `llmrr export --npy` directory with NumPy and prints, as JSON,
each array's dtype, shape and a few values for the test to compare with the trace."""
import json
import sys

import numpy as np

d = sys.argv[1]
manifest = json.load(open(d + "/manifest.json"))
out = {}
for name, meta in manifest["arrays"].items():
    a = np.load(d + "/" + name)
    if list(a.shape) != meta["shape"] or a.dtype.str != meta["dtype"]:
        print("mismatch " + name, a.shape, a.dtype.str, meta, file=sys.stderr)
        sys.exit(1)
    flat = a.reshape(-1)
    out[name] = {"dtype": a.dtype.str, "shape": list(a.shape),
                 "first": [str(v) for v in flat[:8].tolist()],
                 "sum": str(int(flat.astype(np.uint64).sum(dtype=np.uint64)) if a.dtype.kind == "u"
                            else float(np.nansum(flat.astype(np.float64))))}
print(json.dumps(out))
