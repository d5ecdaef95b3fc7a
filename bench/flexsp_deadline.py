#!/usr/bin/env python3
"""How well `fcp plan --strategy flexsp --time-limit L` holds its deadline.

For each batch size K (github-like lengths: log-normal mu = 6.6, sigma = 1.75,
1 ... 131,072 tokens, seeded) on N ranks (default 64, R = 16 per node, qwen3-8b), runs the CLI
`--repeats` times per limit L and prints the median planning time (`solver_ms`,
the planning call: bucketing, model build, MILPs, plan extraction, estimates)
against L and the median wall time of the whole process (JSON parse and print
included). How each run's deadline ended (`notes.deadline`, which depends on
the machine's speed) goes to stderr with the progress lines.

Usage: bench/flexsp_deadline.py [--fcp build/fcp] [--sizes 512,100000,1000000]
                                [--limits 1,2,10] [--repeats 3] [--ranks 64]
                                [--ranks-per-node 16]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time


def batch(k, ranks, ranks_per_node, seed=1):
    rng = random.Random(seed)
    seqs = [max(1, min(131072, int(rng.lognormvariate(6.6, 1.75)))) for _ in range(k)]
    cluster = {"ranks": ranks, "ranks_per_node": ranks_per_node}
    return json.dumps({"cluster": cluster, "model": "qwen3-8b", "sequences": seqs})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fcp", default="build/fcp")
    ap.add_argument("--sizes", default="512,100000,1000000")
    ap.add_argument("--limits", default="1,2,10")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=64, help="cluster size N")
    ap.add_argument(
        "--ranks-per-node", type=int, default=16, help="ranks per node R (issue 30: up to N)"
    )
    args = ap.parse_args()
    print(f"{'K':>9} {'L (s)':>6} {'planning (s)':>13} {'/ L':>6} {'process (s)':>12}")
    for k in [int(x) for x in args.sizes.split(",")]:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write(batch(k, args.ranks, args.ranks_per_node))
            path = f.name
        try:
            for limit in [float(x) for x in args.limits.split(",")]:
                planning, process = [], []
                for _ in range(args.repeats):
                    t0 = time.monotonic()
                    p = subprocess.run(
                        [
                            args.fcp,
                            "plan",
                            "-s",
                            "flexsp",
                            "--time-limit",
                            f"{limit:g}",
                            "-i",
                            path,
                        ],
                        capture_output=True,
                    )
                    process.append(time.monotonic() - t0)
                    if p.returncode != 0:
                        sys.exit(f"fcp exited {p.returncode}: {p.stderr.decode()[:300]}")
                    plan = json.loads(p.stdout)
                    planning.append(plan["solver_ms"] / 1000)
                    print(
                        f"  ... K={k} L={limit:g}: {planning[-1]:.2f} s, deadline "
                        f"{plan['notes']['deadline']}",
                        file=sys.stderr,
                        flush=True,
                    )
                med = statistics.median(planning)
                print(
                    f"{k:>9} {limit:>6g} {med:>13.2f} {med / limit:>6.2f} "
                    f"{statistics.median(process):>12.2f}",
                    flush=True,
                )
        finally:
            os.unlink(path)


if __name__ == "__main__":
    main()
