#!/usr/bin/env python3
"""design_paths.py ROOT [DOC.md ...]: every path a design document names exists in the tree.

Checked in every document (default: DESIGN.md and docs/*.md): each name, backticked or not,
that starts with a top-level directory of the tree (`replayer/diff/src/kernels.cc`,
tools/llmrr/cli/, runtime/model.h). In DESIGN.md also:
  - backticked spans that look like paths: with a '/' (`replayer/diff/src/kernels.cc`,
    `tools/llmrr/`) or a file name with a source extension (`site.cc`, `moe_router.h`);
    `#include "x/y.h"` checks x/y.h, a trailing `/...` is dropped;
  - in DESIGN.md's Layout block (the ``` block under "## Layout"): directory names (`cupti/`),
    file names with an extension (`plan.h`) and dot-names (`.ci/run`, `.clang-format`), each
    looked up under the top-level directory whose paragraph it is in.
A name resolves when ROOT/name exists, or when some file or directory of the tree ends with
/name (include paths such as `llmrr/cupti/activity.h`, names relative to their module such as
`engine/forward.cc`). Spans with placeholders (<module>, *, |), spaces, command-line options,
absolute or home paths are not paths. Exit 0 when all resolve, 1 naming each one that does not.
"""
import os
import re
import sys

EXT = ("cc", "h", "cu", "c", "py", "md", "fbs", "txt", "json", "toml", "sh", "cmake", "jsonl",
       "hpp", "in", "cfg")
FILE_RE = re.compile(r"^[\w\-]+(\.[\w\-]+)*\.(%s)$" % "|".join(EXT))
PATHISH = re.compile(r"^[\w.\-/]+$")
SKIP_DIRS = {".git", "build", "__pycache__", ".mypy_cache", ".ruff_cache"}
# Headers of other projects that DESIGN.md names: not ours to find in the tree.
EXTERNAL = {"cupti_activity.h", "zstd_errors.h"}


def tree(root):
    """Every file and directory under root, as root-relative paths."""
    out = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.endswith(".egg-info")]
        rel = os.path.relpath(d, root)
        for name in dirs + files:
            out.add(name if rel == "." else rel + "/" + name)
    return out


def resolves(name, paths, root, under=""):
    name = name.rstrip("/")
    if not name:
        return True
    for base in ([under] if under else []) + [""]:
        if os.path.exists(os.path.join(root, base, name)):
            return True
    prefix = under.rstrip("/") + "/" if under else ""
    return any(p.startswith(prefix) and (p == name or p.endswith("/" + name)) for p in paths)


def backtick_names(text):
    """(line number, name) for each backticked span outside ``` blocks that looks like a path."""
    out = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for span in re.findall(r"`([^`]+)`", line):
            m = re.match(r'^#include "([^"]+)"$', span)
            if m:
                span = m.group(1)
            if span.endswith("/..."):
                span = span[:-4]
            if not PATHISH.match(span) or span.startswith(("-", "/", ".")) and "/" not in span:
                continue
            if span.startswith("/") or span.startswith("~"):
                continue
            if ("/" in span or FILE_RE.match(span)) and span not in EXTERNAL:
                out.append((n, span))
    return out


def top_level_names(text, tops):
    """(line number, name) for each name in the text that starts with a top-level directory."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for tok in re.findall(r"(?<![\w.\-/<>$~])([\w.\-]+/[\w.\-/]*)(?![\w<>*])", line):
            tok = tok.rstrip(".,;:")
            if tok.endswith("/..."):
                tok = tok[:-4]
            if tok.split("/")[0] in tops:
                out.append((n, tok))
    return out


def layout_names(text):
    """(line number, name, top-level directory) for the names in DESIGN.md's Layout block."""
    out = []
    lines = text.splitlines()
    try:
        start = lines.index("## Layout")
    except ValueError:
        return out
    i = start + 1
    while i < len(lines) and not lines[i].startswith("```"):
        i += 1
    top = ""
    for n in range(i + 1, len(lines)):
        line = lines[n]
        if line.startswith("```"):
            break
        if line and not line[0].isspace():
            m = re.match(r"^([\w.\-]+/)\s", line + " ")
            top = m.group(1) if m else ""
        for tok in re.findall(r"(?<![\w.\-/<>])[\w.\-/]+(?![\w.\-/<>])", line):
            tok = tok.rstrip(".,;:")
            if not tok or tok == top:
                if tok == top and tok:
                    out.append((n + 1, tok, ""))
                continue
            # Dot-names (.ci/run, .clang-format) on the block's first line or with a '/':
            # elsewhere ".npy" is a kind of file, not a path.
            dot = tok.startswith(".") and ("/" in tok or n == i + 1)
            if tok.endswith("/") or FILE_RE.match(tok) or dot:
                out.append((n + 1, tok, "" if line.startswith(tok) else top))
    return out


def main(argv):
    root = argv[1] if len(argv) > 1 else "."
    docs = argv[2:] or ["DESIGN.md"] + sorted(
        "docs/" + f for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    paths = tree(root)
    tops = {p for p in paths if "/" not in p and os.path.isdir(os.path.join(root, p))}
    missing = []
    for doc in docs:
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            text = f.read()
        for n, name in top_level_names(text, tops):
            if not resolves(name, paths, root):
                missing.append("%s:%d: %s" % (doc, n, name))
        if os.path.basename(doc) == "DESIGN.md":
            for n, name in backtick_names(text):
                if not resolves(name, paths, root):
                    missing.append("%s:%d: `%s`" % (doc, n, name))
            for n, name, top in layout_names(text):
                if not resolves(name, paths, root, top):
                    missing.append("%s:%d: %s (Layout%s)" % (doc, n, name,
                                                            ", under " + top if top else ""))
    missing = list(dict.fromkeys(m.replace("`", "") for m in missing))  # both rules, once
    for m in missing:
        print("no such path: " + m)
    if missing:
        print("%d path(s) named but not in the tree: fix the document or the tree" % len(missing))
        return 1
    print("every path named in %s exists" % ", ".join(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
