#!/usr/bin/env python3
"""Every relative link in README.md, CHANGELOG.md and docs/ resolves (CTest docs_links).

A link `[text](path)` or `[text](path#anchor)` must name a file or folder of
the repository, and an anchor must be a heading of that file (GitHub's rule:
lower case, punctuation dropped, spaces to hyphens, `-N` for repeats) or an
explicit `<a id=...>`. Links to the web (`http:`, `https:`, `mailto:`) are not
followed: the docs stand alone. Code spans and fenced blocks are skipped.

Exit status: 0 when every link resolves, 1 otherwise (one line per broken link).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def documents() -> list[Path]:
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *docs]


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with code spans blanked."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(EXPLICIT_ANCHOR.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(doc: Path, cache: dict[Path, set[str]]) -> list[str]:
    problems = []
    for number, line in enumerate(prose_lines(doc.read_text(encoding="utf-8")), 1):
        for target in LINK.findall(line) + IMAGE.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue
            path_part, _, anchor = target.partition("#")
            dest = (doc.parent / path_part).resolve() if path_part else doc
            where = f"{doc.relative_to(ROOT)}:{number}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no such file")
                continue
            if ROOT not in dest.parents and dest != ROOT:
                problems.append(f"{where}: points outside the repository")
                continue
            if anchor and dest.suffix == ".md":
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    problems.append(f"{where}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return problems


def main() -> int:
    cache: dict[Path, set[str]] = {}
    docs = documents()
    problems = [p for doc in docs for p in broken_links(doc, cache)]
    for p in problems:
        print(p)
    print(f"links: {len(docs)} documents, {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
