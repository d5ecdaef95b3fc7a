#!/usr/bin/env python3
"""Regenerates or checks every figure block in the README and docs/ (and its subfolders).

A figure block is a command and the text it printed, between two markers:

    <!-- figure id=gap cheap tol=0.02 volatile="solver|ms/step" -->
    ```sh
    build/fcp eval gap --seed 1 --instances 200
    ```
    ```text
    ...what the command printed...
    ```
    <!-- /figure -->
    *Figure `gap`*

The caption line under the closing marker shows the block's id in rendered
Markdown (prose refers to blocks by id); --write and --captions add or fix it,
--check reports a block without it.

--write runs each command (bash, from the repository root) and replaces the text
block with its standard output. --check runs them and compares with what the file
holds: the words must match exactly and every number must agree within the
block's relative tolerance `tol` (default 0: exact). Lines matching the `volatile`
regular expression (wall-clock times, say) are compared word by word with their
numbers ignored. `cheap` marks blocks fast enough for the test suite
(--check --cheap runs only those).

Exit status: 0 when every block matches (or was written), 1 when a block
differs or its command failed, 2 for a malformed file or bad arguments.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILES = ["README.md", "docs/*.md", "docs/*/*.md"]
OPEN = re.compile(r"^<!-- figure (?P<attrs>.*?)-->\s*$")
CLOSE = re.compile(r"^<!-- /figure -->\s*$")
CAPTION = re.compile(r"^\*Figure `(?P<id>[^`]*)`\*\s*$")
NUMBER = re.compile(r"[-+]?(?:\d+(?:[.,]\d+)*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening marker
    ident: str
    cheap: bool
    tol: float
    volatile: re.Pattern | None
    command: str
    text_start: int  # index of the first line inside the ```text fence
    text_end: int  # index of the closing ``` of the text fence
    text: str
    caption: str | None  # the id the caption line names; None: no caption line


class FormatError(Exception):
    pass


def parse_attrs(attrs: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in shlex.split(attrs):
        key, _, value = word.partition("=")
        out[key] = value if _ else "1"
    if "id" not in out:
        raise FormatError(f"{where}: figure marker needs id=NAME")
    return out


def find_blocks(path: Path) -> tuple[list[str], list[Block]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        where = f"{path.relative_to(ROOT)}:{i + 1}"
        attrs = parse_attrs(m.group("attrs"), where)
        j = i + 1
        if j >= len(lines) or lines[j].strip() != "```sh":
            raise FormatError(f"{where}: expected a ```sh fence after the marker")
        k = j + 1
        cmd_lines = []
        while k < len(lines) and lines[k].strip() != "```":
            cmd_lines.append(lines[k])
            k += 1
        if k + 1 >= len(lines) or lines[k + 1].strip() != "```text":
            raise FormatError(f"{where}: expected a ```text fence after the command")
        start = k + 2
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end + 1 >= len(lines) or not CLOSE.match(lines[end + 1]):
            raise FormatError(f"{where}: expected <!-- /figure --> after the text fence")
        try:
            tol = float(attrs.get("tol", "0"))
        except ValueError:
            raise FormatError(f"{where}: tol must be a number") from None
        volatile = re.compile(attrs["volatile"]) if attrs.get("volatile") else None
        cap = CAPTION.match(lines[end + 2]) if end + 2 < len(lines) else None
        blocks.append(
            Block(
                path,
                i + 1,
                attrs["id"],
                "cheap" in attrs,
                tol,
                volatile,
                "\n".join(cmd_lines),
                start,
                end,
                "\n".join(lines[start:end]),
                cap.group("id") if cap else None,
            )
        )
        i = end + 2
    return lines, blocks


def caption_line(ident: str) -> str:
    return f"*Figure `{ident}`*"


def write_captions(path: Path) -> int:
    """Adds or fixes every block's caption line in `path`; returns how many changed."""
    lines, blocks = find_blocks(path)
    changed = 0
    for b in sorted(blocks, key=lambda b: -b.text_end):
        at = b.text_end + 2  # the line after <!-- /figure -->
        if b.caption == b.ident:
            continue
        changed += 1
        if b.caption is None:
            lines.insert(at, caption_line(b.ident))
        else:
            lines[at] = caption_line(b.ident)
    if changed:
        path.write_text("\n".join(lines), encoding="utf-8")
    return changed


def run(block: Block) -> tuple[bool, str, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", "-c", "set -eo pipefail\n" + block.command],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        return False, f"command exited {proc.returncode}: {proc.stderr.strip()[-500:]}", elapsed
    return True, proc.stdout.rstrip("\n"), elapsed


def to_float(token: str) -> float:
    return float(token.replace(",", ""))


def compare(block: Block, got: str) -> list[str]:
    """Differences between the documented text and the fresh output."""
    want_lines, got_lines = block.text.split("\n"), got.split("\n")
    if len(want_lines) != len(got_lines):
        return [f"{len(want_lines)} lines documented, {len(got_lines)} printed"]
    problems = []
    for n, (w, g) in enumerate(zip(want_lines, got_lines), 1):
        if NUMBER.sub("#", w).split() != NUMBER.sub("#", g).split():
            problems.append(f"line {n}: text differs:\n    doc: {w}\n    now: {g}")
            continue
        if block.volatile and block.volatile.search(w):
            continue
        for a, b in zip(NUMBER.findall(w), NUMBER.findall(g)):
            x, y = to_float(a), to_float(b)
            scale = max(abs(x), abs(y))
            # Printed precision bounds the tolerance from below: 0.07 vs 0.08 is one
            # unit in the last place, not 13 %.
            decimals = len(a.split(".")[1]) if "." in a and "e" not in a.lower() else 0
            ulp = 10.0**-decimals
            if abs(x - y) > max(block.tol * scale, ulp) + 1e-12:
                problems.append(f"line {n}: {a} documented, {b} now (tol {block.tol:g})")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rerun and rewrite the blocks")
    mode.add_argument("--check", action="store_true", help="rerun and compare (default: all)")
    mode.add_argument("--list", action="store_true", help="list the blocks")
    mode.add_argument(
        "--captions",
        action="store_true",
        help="only add or fix every block's caption line (runs nothing)",
    )
    ap.add_argument("--cheap", action="store_true", help="only blocks marked cheap")
    ap.add_argument("--id", action="append", default=[], help="only these ids (repeatable)")
    ap.add_argument(
        "files", nargs="*", help="markdown files (default: README.md docs/*.md docs/*/*.md)"
    )
    args = ap.parse_args()

    paths: list[Path] = []
    for pattern in args.files or DEFAULT_FILES:
        matched = (
            sorted(ROOT.glob(pattern)) if any(c in pattern for c in "*?[") else [ROOT / pattern]
        )
        paths += [p for p in matched if p.is_file()]
    failed = 0
    seen: set[str] = set()
    for path in paths:
        try:
            lines, blocks = find_blocks(path)
        except FormatError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        for b in blocks:
            if b.ident in seen:
                print(
                    f"error: {path.relative_to(ROOT)}:{b.line}: duplicate figure id {b.ident}",
                    file=sys.stderr,
                )
                return 2
            seen.add(b.ident)
        chosen = [
            b for b in blocks if (not args.cheap or b.cheap) and (not args.id or b.ident in args.id)
        ]
        if args.captions:
            changed = write_captions(path)
            if changed:
                print(f"captions: {path.relative_to(ROOT)}: {changed} added or fixed")
            continue
        if args.check:
            for b in chosen:
                if b.caption != b.ident:
                    failed += 1
                    print(
                        f"FAIL {path.relative_to(ROOT)}:{b.line} [{b.ident}]: no caption line "
                        f"'{caption_line(b.ident)}' under <!-- /figure --> (add it with "
                        "scripts/figures.py --captions)"
                    )
        if args.list:
            for b in blocks:
                print(
                    f"{b.ident:24} {'cheap' if b.cheap else '     '} tol={b.tol:<6g} "
                    f"{path.relative_to(ROOT)}:{b.line}  {b.command.splitlines()[0]}"
                )
            continue
        # Rewrite from the bottom up so earlier line indices stay valid.
        for b in sorted(chosen, key=lambda b: -b.text_start):
            ok, out, secs = run(b)
            where = f"{path.relative_to(ROOT)}:{b.line} [{b.ident}]"
            if not ok:
                failed += 1
                print(f"FAIL {where}: {out}")
                continue
            if args.write:
                lines[b.text_start : b.text_end] = out.split("\n")
                print(f"wrote {where} ({secs:.1f} s)")
            else:
                problems = compare(b, out)
                if problems:
                    failed += 1
                    print(f"FAIL {where} ({secs:.1f} s):")
                    for p in problems[:10]:
                        print("  " + p)
                else:
                    print(f"ok   {where} ({secs:.1f} s)")
        if args.write:
            path.write_text("\n".join(lines), encoding="utf-8")
            write_captions(path)
    if args.check:
        print(f"figures: {len(seen)} blocks found, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
