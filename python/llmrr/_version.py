"""The package's version, in one place: pyproject.toml reads it ([tool.setuptools.dynamic]),
llmrr.__version__ is it, and the tool_version that llmrr.torch writes into a trace header
carries its major.minor."""
__version__ = "0.1.0"
