"""JSON from files llmrr did not write, under the caps the C++ side applies (safeio/json.h):
nesting at most MAX_DEPTH levels, checked by an iterative scan before json.loads runs, so a
document nested 100,000 deep is a JsonNestingError (a ValueError naming the path), never a
RecursionError or a crashed interpreter."""
from __future__ import annotations

import json
import re
from typing import Any

from . import _lib

MAX_DEPTH = 64            # safeio::kMaxJsonDepth
MAX_FILE_BYTES = 64 << 20  # what load() reads at most

# The characters the scan acts on; everything else is skipped by the regex engine, not Python.
_TOKENS = re.compile(r'[\[\]{}"\\]')


class JsonNestingError(_lib.LlmrrError, ValueError):
    """JSON nested deeper than MAX_DEPTH levels. .path is the file; .code is llmrr's
    semantic error code (109). A ValueError, and an llmrr.LlmrrError like any bad trace."""

    def __init__(self, path: str, where: str, offset: int, max_depth: int = MAX_DEPTH) -> None:
        super().__init__(109, "%s: %s: nesting deeper than %d levels at byte %d" %
                         (path, where, max_depth, offset))
        self.path = path


def too_deep_at(text: str, max_depth: int = MAX_DEPTH) -> int:
    """The 1-based offset of the bracket that nests `text` deeper than max_depth, or 0.
    Brackets inside strings do not count (escaped quotes included)."""
    depth = 0
    in_string = False
    escaped = -1  # the offset of the character a backslash escapes
    for m in _TOKENS.finditer(text):
        c, i = m.group(), m.start()
        if in_string:
            if i == escaped:
                continue
            if c == "\\":
                escaped = i + 1
            elif c == '"':
                in_string = False
            continue
        if c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > max_depth:
                return i + 1
        elif c in "]}":
            depth -= 1
    return 0


def loads(text: str, path: str, where: str = "JSON", max_depth: int = MAX_DEPTH) -> Any:
    """json.loads after the nesting check; JsonNestingError names `path` and `where`."""
    at = too_deep_at(text, max_depth)
    if at:
        raise JsonNestingError(path, where, at, max_depth)
    return json.loads(text)


def load(path: str, max_depth: int = MAX_DEPTH) -> Any:
    """A JSON file: at most MAX_FILE_BYTES, then loads()."""
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError("%s: more than %d bytes of JSON, expected at most %d" %
                         (path, MAX_FILE_BYTES, MAX_FILE_BYTES))
    return loads(data.decode("utf-8", "replace"), path, "JSON", max_depth)
