#!/usr/bin/env python3
"""`fcp eval search`: a short run's JSON holds, per instance, a reference no
worse than fcp, the best heuristic and the best static plan, and no better
than the lower bound; the same run twice (ended by --iterations) prints the
same table; bad options exit 2 with one `error:` line naming the option.

Usage: eval_search_test.py FCP_BINARY
"""

import json
import subprocess
import sys

from checks import check, summary

FCP = sys.argv[1]
SHORT = ["eval", "search", "--sequences", "48", "--ranks", "8,16", "--clusters", "h100-8x8"]
SHORT += ["--iterations", "3000", "--time-limit-s", "300", "-q"]


def run(args):
    return subprocess.run([FCP] + args, capture_output=True, text=True, timeout=600)


def test_short_run():
    p = run(SHORT + ["--format", "json"])
    check("short run exits 0", p.returncode == 0, p.stderr)
    if p.returncode != 0:
        return
    report = json.loads(p.stdout)
    check("two instances", len(report["instances"]) == 2, str(report["instances"]))
    for row in report["instances"]:
        name = f"{row['cluster']} x {row['ranks']}"
        ref = row["reference_ms"]
        for key in ("fcp_ms", "heuristic_ms", "static_ms"):
            check(f"{name}: reference <= {key}", ref <= row[key] * (1 + 1e-12), str(row))
        check(f"{name}: reference >= bound", ref >= row["bound_ms"] * (1 - 1e-12), str(row))
        check(f"{name}: iterations as asked", row["iterations"] == 3000, str(row))
    alone = run(SHORT + ["--format", "json", "--starts", "none"])
    check("--starts none exits 0", alone.returncode == 0, alone.stderr)
    if alone.returncode == 0:
        for row in json.loads(alone.stdout)["instances"]:
            check("--starts none: from one group", row["reference_from"] == "one group", str(row))
    ratios = [r["fcp_ms"] / r["reference_ms"] for r in report["instances"]]
    check("worst ratio", abs(report["worst_fcp_over_reference"] - max(ratios)) < 1e-12)


def test_deterministic():
    a, b = run(SHORT), run(SHORT)
    table = [line for line in a.stdout.splitlines() if not line.startswith("searched")]
    again = [line for line in b.stdout.splitlines() if not line.startswith("searched")]
    check("same table twice", a.returncode == 0 and table == again, a.stderr + b.stderr)


def test_bad_options():
    cases = [
        (["--ranks", "0"], "error: ranks:"),
        (["--clusters", "nope"], "error: clusters: unknown cluster preset 'nope'"),
        (["--model", "nope"], "error: model: unknown model preset 'nope'"),
        (["--dataset", "nope"], "error: dataset:"),
        (["--sequences", "0"], "error: sequences:"),
        (["--batches", "0"], "error: batches:"),
        (["--time-limit-s", "0"], "error: time_limit_s:"),
        (["--iterations", "-1"], "error: iterations:"),
        (["--starts", "fcp,nope"], "error: starts: unknown start 'nope'"),
        (["--lengths", "/nonexistent/lengths.csv"], "error: /nonexistent/lengths.csv"),
    ]
    for extra, want in cases:
        p = run(["eval", "search", "-q"] + extra)
        ok = (
            p.returncode == 2
            and p.stdout == ""
            and p.stderr.startswith(want)
            and p.stderr.count("\n") == 1
        )
        check(f"{' '.join(extra)}: one error line", ok, f"exit {p.returncode}: {p.stderr!r}")


if __name__ == "__main__":
    test_short_run()
    test_deterministic()
    test_bad_options()
    sys.exit(summary())
