#!/usr/bin/env python3
"""Runs the CPU profile with the ring traffic in-process and over MPI, one table row each.

    scripts/profile_transports.py [--fcp build/fcp] [--ranks 2] [--repeats 3]

Row 1: `fcp profile --target cpu --format json` (ring traffic as in-process copies
on a helper thread). Row 2: the same command under `mpirun -np RANKS` (OpenMPI;
rank 0 reports). Each row gives the ring bandwidth the profile measured (16 MiB
messages), the held-out error, the fitted alpha1 / alpha2, the relative standard
errors of alpha3 / beta2 and the wall time of the profile. Every figure is a
measurement on this machine (seconds to minutes per row; progress on stderr).
Exit status 1 when a run fails, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def profile(cmd: list[str]) -> tuple[dict, float]:
    print("running: " + " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    secs = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-400:]}"
        )
    # Under mpirun only rank 0 prints the report; take the JSON object from stdout.
    start = proc.stdout.find("{")
    return json.loads(proc.stdout[start:]), secs


def rel_err(report: dict, name: str) -> str:
    c = report["coefficients"][name]
    return f"{100 * c['std_error'] / c['value']:.0f}%" if c["value"] else "n/a (0)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fcp", default="build/fcp", help="fcp binary (default: build/fcp)")
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks (default: 2)")
    ap.add_argument(
        "--repeats", type=int, default=3, help="measurements per grid point (default: 3)"
    )
    args = ap.parse_args()
    if args.ranks < 2:
        print("error: --ranks: must be >= 2", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print("error: --repeats: must be >= 1", file=sys.stderr)
        return 2
    base = [
        args.fcp,
        "profile",
        "--target",
        "cpu",
        "--format",
        "json",
        "--repeats",
        str(args.repeats),
    ]
    runs = [
        ("in-process copy", base),
        (
            f"mpi, {args.ranks} ranks",
            ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(args.ranks)] + base,
        ),
    ]
    print(
        f"{'ring transport':18} {'v (GB/s)':>9} {'held-out mean':>13} {'max':>7} {'points':>6} "
        f"{'alpha1 (s/tok^2)':>16} {'alpha2 (s/tok)':>14} {'alpha3 err':>10} {'beta2 err':>9} "
        f"{'wall (s)':>8}"
    )
    for label, cmd in runs:
        try:
            rep, wall = profile(cmd)
            bw = re.search(r"\(([0-9.]+) GB/s\)", rep["hardware"])
            held = rep["heldout_error"]
            coef = rep["coefficients"]
            alpha3_err, beta2_err = rel_err(rep, "alpha3"), rel_err(rep, "beta2")
        except (RuntimeError, ValueError, KeyError, OSError) as e:
            print(f"error: {label}: {e}", file=sys.stderr)
            return 1
        print(
            f"{label:18} {bw.group(1) if bw else '?':>9} {100 * held['mean']:12.2f}% "
            f"{100 * held['max']:6.2f}% {held['points']:>6} {coef['alpha1']['value']:16.3e} "
            f"{coef['alpha2']['value']:14.3e} {alpha3_err:>10} {beta2_err:>9} {wall:8.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
