#!/usr/bin/env python3
"""Lists every function over 80 lines that does not say why it is long.

A function in src/, apps/ or python/ (C++: *.cc, *.h, *.inc; Python: *.py)
longer than --max-lines lines, counted from the first line of its signature
to its closing brace (C++) or last line (Python), needs a comment line
starting `// Long because:` (C++) or `# Long because:` (Python) in the comment
block directly above it (above its decorators, template line or leading
comment). Exits 1 and lists the offenders when there are any, else 0.

    scripts/long_functions.py                 # the whole tree
    scripts/long_functions.py src/sim apps    # only these folders or files
    scripts/long_functions.py --list          # every long function, marked or not

C++ is read by a small scanner (comments, strings and preprocessor lines
blanked, braces matched), not a compiler: a function is a brace block at
namespace or class scope whose header ends with `)` (plus qualifiers such as
`const`, `override`, `noexcept`, a trailing return type or a constructor's
initializer list). Python is read with `ast`.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("src", "apps", "python")
CXX_SUFFIXES = {".cc", ".h", ".inc"}
CXX_MARKER = "// Long because:"
PY_MARKER = "# Long because:"
# Brace blocks that open a scope of definitions rather than a function body.
SCOPE_OPENERS = re.compile(r"\b(namespace|struct|class|union|enum)\b[^()]*$|extern\s*\"C\"\s*$")
# `X(...) : a_(1), b_{` : a brace initializer in a constructor's list.
CTOR_INIT_OPEN = re.compile(r"\)\s*:(?!:)[^;{}]*[\w>]$")
CONTROL_WORDS = re.compile(r"^\s*(if|for|while|switch|catch|return|else)\b")


@dataclass
class LongFunction:
    path: Path
    line: int  # first line of the signature, 1-based
    length: int
    name: str
    marked: bool

    def __str__(self) -> str:
        rel = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{rel}:{self.line}: {self.name} is {self.length} lines"


def blank_cxx(text: str) -> str:
    """The text with comments, string/char literals and preprocessor lines
    replaced by spaces (newlines kept, so line numbers stay)."""
    out = list(text)
    i, n = 0, len(text)
    at_line_start = True

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            blank(i, j)
            i = j
            continue
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            blank(i, j)
            i = j
        elif c == '"' or (c == "'" and not is_digit_separator(text, i)):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def is_digit_separator(text: str, i: int) -> bool:
    """A quote between two hex digits, as in 1'000'000."""
    return 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()


def is_function_header(header: str) -> bool:
    """Whether the text before a `{` at definition scope is a function's."""
    h = " ".join(header.split())
    if not h or SCOPE_OPENERS.search(h) or CONTROL_WORDS.match(h):
        return False
    if h.endswith("="):
        return False
    # A constructor's initializer list: `X(...) : a_(1), b_{2}`.
    h = re.sub(
        r"\)\s*:\s*[^()]*(\([^()]*\)|\{[^{}]*\})(\s*,\s*[^(){}]*(\([^()]*\)|\{[^{}]*\}))*$", ")", h
    )
    # Trailing qualifiers and return type.
    h = re.sub(r"(\s*->\s*[\w:<>,\s*&]+)$", "", h)
    h = re.sub(r"(\s+(const|override|final|noexcept|mutable|volatile|&|&&))+$", "", h)
    return h.endswith(")")


def function_name(header: str) -> str:
    h = " ".join(header.split())
    m = re.search(r"([~\w:]+|operator\S+)\s*\(", h)
    if m and m.group(1) in ("TEST", "TEST_F", "TEST_P"):
        m = re.search(r"TEST\w*\s*\(([^)]*)\)", h)
        return m.group(1).replace(" ", "") if m else h[:40]
    return m.group(1) if m else h[:40]


def cxx_functions(path: Path, max_lines: int) -> list[LongFunction]:
    text = path.read_text(encoding="utf-8", errors="replace")
    raw_lines = text.split("\n")
    code = blank_cxx(text)
    found = []
    # Stack of open braces: (kind, first line, header); kind is "scope" (a
    # block of definitions), "function", "init" (a brace initializer inside a
    # constructor's initializer list: part of the header) or "body".
    blocks: list[tuple[str, int, str]] = []
    header_start = 0  # offset where the current declaration's text starts
    for i, c in enumerate(code):
        at_definition_scope = all(kind == "scope" for kind, _, _ in blocks)
        if c == "{":
            header = code[header_start:i]
            if not at_definition_scope:
                blocks.append(("body", 0, ""))
            elif CTOR_INIT_OPEN.search(" ".join(header.split())):
                blocks.append(("init", 0, ""))
                continue  # the header goes on after the initializer
            elif is_function_header(header):
                start = header_start + (len(header) - len(header.lstrip()))
                blocks.append(("function", code.count("\n", 0, start) + 1, header))
            else:
                blocks.append(("scope", 0, ""))
            header_start = i + 1
        elif c == "}":
            kind, first_line, header = blocks.pop() if blocks else ("scope", 0, "")
            if kind == "init":
                continue
            if kind == "function" and all(k == "scope" for k, _, _ in blocks):
                length = code.count("\n", 0, i) + 1 - first_line + 1
                if length > max_lines:
                    marked = marked_above(raw_lines, first_line, "//", CXX_MARKER)
                    found.append(
                        LongFunction(path, first_line, length, function_name(header), marked)
                    )
            header_start = i + 1
        elif c == ";" and at_definition_scope:
            header_start = i + 1
    return found


def marked_above(lines: list[str], first_line: int, comment: str, marker: str) -> bool:
    """Whether the comment block directly above line `first_line` (1-based)
    holds a line starting with `marker`."""
    k = first_line - 2
    while k >= 0:
        s = lines[k].strip()
        if not s.startswith(comment):
            return False
        if s.startswith(marker):
            return True
        k -= 1
    return False


def python_functions(path: Path, max_lines: int) -> list[LongFunction]:
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    found = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = node.end_lineno - node.lineno + 1
        if length <= max_lines:
            continue
        top = min([node.lineno] + [d.lineno for d in node.decorator_list])
        found.append(
            LongFunction(
                path, node.lineno, length, node.name, marked_above(lines, top, "#", PY_MARKER)
            )
        )
    return found


def source_files(paths: list[str]) -> list[Path]:
    files = []
    for p in paths:
        base = Path(p) if Path(p).is_absolute() else ROOT / p
        if base.is_file():
            files.append(base)
        elif base.is_dir():
            files.extend(f for f in sorted(base.rglob("*")) if f.is_file())
        else:
            raise SystemExit(f"error: path {p!r}: no such file or folder")
    return [f for f in files if f.suffix in CXX_SUFFIXES | {".py"} and "__pycache__" not in f.parts]


def long_functions(paths: list[str], max_lines: int) -> list[LongFunction]:
    found = []
    for f in source_files(paths):
        if f.suffix == ".py":
            found += python_functions(f, max_lines)
        else:
            found += cxx_functions(f, max_lines)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "paths",
        nargs="*",
        default=list(DEFAULT_PATHS),
        help="folders or files (default: src apps python)",
    )
    parser.add_argument(
        "--max-lines",
        type=int,
        default=80,
        help="longest function that needs no reason (default 80)",
    )
    parser.add_argument(
        "--list", action="store_true", help="list every long function, marked ones too; exit 0"
    )
    args = parser.parse_args(argv)
    if args.max_lines < 1:
        parser.error("--max-lines must be >= 1")
    found = long_functions(args.paths, args.max_lines)
    if args.list:
        for f in sorted(found, key=lambda f: -f.length):
            print(f"{f}{'' if not f.marked else ' (Long because: given)'}")
        return 0
    unmarked = [f for f in found if not f.marked]
    for f in unmarked:
        print(
            f"{f} (over {args.max_lines}): split it, or say why above it with `{CXX_MARKER if f.path.suffix != '.py' else PY_MARKER}`"
        )
    if unmarked:
        print(
            f"error: {len(unmarked)} function(s) over {args.max_lines} lines without a reason",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
