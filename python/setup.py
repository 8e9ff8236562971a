"""Copies libllmrr_recorder_c.so into the package when one is built, so that
`pip install ./python` gives a self-contained package. The library comes from
$LLMRR_RECORDER_LIB, else ../build/default/recorder/ (build it first:
`cmake --build build/default --target llmrr_recorder_c`). Without one the package still
installs and looks for the library at run time (llmrr/core/_lib.py says where).

A wheel with the library bundled is platform-specific (py3-none-<platform>: the library is
loaded through ctypes, so any Python 3 on that platform); without it the wheel is pure
(py3-none-any). The version is llmrr/_version.py's (pyproject.toml reads it)."""
import os
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1
except ImportError:  # older setuptools: the wheel package's
    from wheel.bdist_wheel import bdist_wheel

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
            # A copy left in the build folder by an earlier build would be bundled anyway.
            stale = os.path.join(self.build_lib, "llmrr", "lib")
            if os.path.isdir(stale):
                shutil.rmtree(stale)
            print("llmrr: no %s built; the package will look for it at run time" % LIB)


class BinaryDistribution(Distribution):
    # The bundled .so makes the package platform-specific: installed to platlib, and
    # bdist_wheel's root_is_pure (not has_ext_modules()) false, so the wheel gets a platform tag.
    def has_ext_modules(self):
        return built_library() is not None


class BdistWheel(bdist_wheel):
    def get_tag(self):
        python, abi, plat = super().get_tag()
        if not self.root_is_pure:
            python, abi = "py3", "none"  # ctypes, no extension module: any CPython 3
        return python, abi, plat


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
