"""Python's copies of the C ABI's numbers (python/llmrr/core/_lib.py) against the header that
defines them (recorder/include/llmrr/recorder.h), whose macros are checked at compile time
against the trace's vocabulary (format/include/llmrr/format/vocab.h; recorder/src/c_api/c_api.cc).
Together: one definition per concept, from the schema to Python. Also the ctypes Config's
fields against the C struct's, in order. Stdlib only (label unit: runs in every test run).

  python3 test_abi_constants.py SOURCE_DIR
"""
import importlib.util
import os
import re
import sys
import unittest

ROOT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
HEADER = os.path.join(ROOT, "recorder", "include", "llmrr", "recorder.h")
LIB_PY = os.path.join(ROOT, "python", "llmrr", "core", "_lib.py")


def header_macros():
    with open(HEADER) as f:
        text = f.read()
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^#define (LLMRR_[A-Z0-9_]+) (\d+)\b", text, re.M)}, text


def load_lib_module():
    # _lib.py imports only the standard library: loaded as a file, no numpy, no library.
    spec = importlib.util.spec_from_file_location("llmrr_lib_under_test", LIB_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class AbiConstants(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.macros, cls.header = header_macros()
        cls.lib = load_lib_module()

    def python_constants(self):
        """Every int constant of _lib.py, as the C macro name it stands for."""
        out = {}
        for name, value in vars(self.lib).items():
            if isinstance(value, bool) or not re.fullmatch(r"[A-Z][A-Z0-9_]+", name):
                continue
            if isinstance(value, int):
                out["LLMRR_RECORDER_ABI_VERSION" if name == "ABI_VERSION" else "LLMRR_" + name] = value
            elif isinstance(value, dict) and all(isinstance(v, int) for v in value.values()):
                for key, v in value.items():
                    out["LLMRR_%s_%s" % (name, key.upper())] = v
        return out

    def test_every_python_constant_is_the_headers(self):
        py = self.python_constants()
        self.assertGreater(len(py), 20, "the constants were not found in %s" % LIB_PY)
        for macro, value in sorted(py.items()):
            self.assertIn(macro, self.macros, "%s: Python has %s = %d; recorder.h has no such "
                          "macro" % (LIB_PY, macro, value))
            self.assertEqual(value, self.macros[macro], "%s differs: Python %d, recorder.h %d"
                             % (macro, value, self.macros[macro]))

    def test_every_group_python_uses_is_complete(self):
        # A group (DTYPE, SEGMENT, OP, ...) Python has is there whole: a value added to the C
        # ABI is added to Python too.
        py = self.python_constants()
        groups = {m.split("_")[1] for m in py if m.count("_") >= 2}
        for g in sorted(groups - {"RECORDER", "E"}):
            c_names = {m for m in self.macros if m.startswith("LLMRR_%s_" % g)}
            self.assertEqual(sorted(c_names - set(py)), [],
                             "group %s: recorder.h has values _lib.py lacks" % g)

    def test_config_fields_match_the_c_struct(self):
        body = re.search(r"typedef struct llmrr_recorder_config \{(.*?)\} llmrr_recorder_config;",
                         self.header, re.S)
        self.assertIsNotNone(body, "llmrr_recorder_config not found in recorder.h")
        text = re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S)
        c_fields = []
        for decl in text.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            # "int32_t layers, hidden, vocab" declares three
            head, *rest = [p.strip() for p in decl.split(",")]
            c_fields.append(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", head)[-1])
            c_fields.extend(rest)
        py_fields = [f[0] for f in self.lib.Config._fields_]
        self.assertEqual(py_fields, c_fields, "ctypes Config vs the C struct, field by field")


if __name__ == "__main__":
    unittest.main(verbosity=2)
