"""llmrr's version, in one place: pyproject.toml reads it ([tool.setuptools.dynamic]),
llmrr.__version__ is it, the tool_version that llmrr.runtimes.torch and llmrr.runtimes.vllm
write into a trace header carries its major.minor, and CMakeLists.txt parses this file for
the C++ side's LLMRR_VERSION (keep the one line `__version__ = "X.Y.Z"`)."""
__version__ = "0.1.0"
