"""Copies libllmrr_recorder_c.so into the package when one is built, so that
`pip install ./python` gives a self-contained package. The library comes from
$LLMRR_RECORDER_LIB, else ../build/default/recorder/ (build it first:
`cmake --build build/default --target llmrr_recorder_c`). Without one the package still
installs and looks for the library at run time (llmrr/_lib.py says where)."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = "libllmrr_recorder_c.so"


def built_library():
    env = os.environ.get("LLMRR_RECORDER_LIB")
    if env:
        return env if os.path.exists(env) else None
    p = os.path.join(HERE, "..", "build", "default", "recorder", LIB)
    return p if os.path.exists(p) else None


class BuildPy(build_py):
    def run(self):
        super().run()
        src = built_library()
        if src:
            dst = os.path.join(self.build_lib, "llmrr", "lib")
            os.makedirs(dst, exist_ok=True)
            shutil.copy2(src, os.path.join(dst, LIB))
            print("llmrr: bundled %s" % os.path.realpath(src))
        else:
            print("llmrr: no %s built; the package will look for it at run time" % LIB)


setup(cmdclass={"build_py": BuildPy})
