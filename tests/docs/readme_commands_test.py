#!/usr/bin/env python3
"""Every shell command in README.md runs as written from the repository root
(CTest docs_readme_commands, after `make build`).

A command in a ```sh fence either runs here (exit 0 within its time limit), or
is inside a figure block, which scripts/figures.py reruns and compares
(`--check`; the cheap ones in CTest docs_figures_cheap), or is listed in
COVERED_ELSEWHERE with the test that runs it. A new command outside those runs
here automatically.

Exit status: 0 when every command passed, 1 otherwise; prints one line per
command and `N passed, M failed` at the end.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPEN = re.compile(r"^<!-- figure (?P<attrs>.*?)-->\s*$")
CLOSE = re.compile(r"^<!-- /figure -->\s*$")
# Commands this test does not run, and what runs them instead.
COVERED_ELSEWHERE = {
    "make run": "the README's entry point; CI runs `make test`, which builds the same CLI",
    "make test": "the suite this test is part of",
    "pip install -v .": "ctest python_wheel (tests/python/test_wheel.py) builds, installs, plans",
    "python -m fcp --version": "ctest python_wheel checks `python -m fcp --version` installed",
    "scripts/figures.sh": "reruns every figure block: scripts/figures.py --check",
    "scripts/lint.sh fix": "rewrites files; ctest -L lint checks the tree it leaves",
    "build/fcp eval paper --out results": "long (simulated paper evaluation); its figure "
    "blocks in docs/simulator.md are rerun by "
    "scripts/figures.py --check",
}
TIMEOUT_S = 300


def commands(text: str) -> list[tuple[int, str, bool]]:
    """(line, command, in a figure block) for each command of each ```sh fence."""
    out = []
    lines = text.split("\n")
    in_figure = False
    i = 0
    while i < len(lines):
        if OPEN.match(lines[i]):
            in_figure = True
        elif CLOSE.match(lines[i]):
            in_figure = False
        elif lines[i].strip() == "```sh":
            i += 1
            pending, start = "", None
            while i < len(lines) and lines[i].strip() != "```":
                line = lines[i]
                start = i + 1 if start is None else start
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                else:
                    cmd = (pending + line).strip()
                    if cmd:
                        out.append((start, cmd, in_figure))
                    pending, start = "", None
                i += 1
        i += 1
    return out


def without_comment(cmd: str) -> str:
    """The command without a trailing `   # comment` (README style)."""
    return re.sub(r"\s{2,}#.*$", "", cmd).strip()


def main() -> int:
    readme = ROOT / "README.md"
    passed = failed = 0
    for line, cmd, in_figure in commands(readme.read_text(encoding="utf-8")):
        bare = without_comment(cmd)
        if in_figure:
            print(f"figure README.md:{line}: {bare[:70]} (scripts/figures.py)")
            continue
        if bare in COVERED_ELSEWHERE:
            print(f"elsewhere README.md:{line}: {bare[:70]} ({COVERED_ELSEWHERE[bare]})")
            continue
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                ["bash", "-c", "set -eo pipefail\n" + bare],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
            ok, why = proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"
        except subprocess.TimeoutExpired:
            ok, why = False, f"still running after {TIMEOUT_S} s"
        secs = time.monotonic() - t0
        if ok:
            passed += 1
            print(f"ok   README.md:{line}: {bare[:70]} ({secs:.1f} s)")
        else:
            failed += 1
            print(f"FAIL README.md:{line}: {bare[:70]}: {why}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
