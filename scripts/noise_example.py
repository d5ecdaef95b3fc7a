#!/usr/bin/env python3
"""One batch of `fcp eval noise`, re-planned with chosen coefficient factors.

    scripts/noise_example.py [--fcp build/fcp] [--batch 1] [--scale alpha1=1.13,alpha2=0.84]...

Takes the same setting as `fcp eval noise` with its defaults (github batches of
512 sequences, seed 1, qwen3-8b on ascend910c-4x16, base coefficients fitted by
`fcp profile --target sim:ascend910c-4x16`, 2 % memory headroom) and its batch
number BATCH (0-based). Plans it with `fcp plan -s fcp` under the base
coefficients and under each --scale (factors on the named timing coefficients),
simulates each plan with `fcp simulate --plan` and prints per plan: the degree
of the group holding the longest sequence, the d = 1 groups and the most tokens
on one of them, the planner's estimate (under the coefficients it planned with)
and the simulated step time, with its change against the base plan. Times in
seconds, all *simulated* or planner estimates. Exit status 1 when a command
fails, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CLUSTER, MODEL, DATASET, GBS, SEED, HEADROOM = "ascend910c-4x16", "qwen3-8b", "github", 512, 1, 0.02
TIMING = (
    "alpha1",
    "alpha2",
    "beta1",
    "alpha3",
    "beta2",
    "attn_overhead_tokens",
    "gamma_intra",
    "gamma_inter",
    "gamma_serial",
    "alpha3_home",
)


def run(cmd: list[str], stdin: str | None = None) -> str:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[:3])} exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
        )
    return proc.stdout


def parse_scale(text: str) -> dict[str, float]:
    out = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name not in TIMING:
            raise ValueError(f"unknown timing coefficient '{name}' ({', '.join(TIMING)})")
        try:
            out[name] = float(value)
        except ValueError:
            raise ValueError(f"{name}: factor must be a number, got '{value}'") from None
        if not out[name] > 0:
            raise ValueError(f"{name}: factor must be > 0")
    return out


def describe(batch: dict, plan: dict) -> tuple[int, int, int]:
    """(degree of the longest sequence's group, d = 1 groups, most tokens on one)."""
    lengths = [s if isinstance(s, int) else s["length"] for s in batch["sequences"]]
    longest = max(range(len(lengths)), key=lambda i: lengths[i])
    long_degree, singles, most = 0, 0, 0
    for mb in plan["micro_batches"]:
        for g in mb["groups"]:
            if longest in g["sequences"]:
                long_degree = len(g["ranks"])
            if len(g["ranks"]) == 1 and g["sequences"]:
                singles += 1
                most = max(most, sum(lengths[i] for i in g["sequences"]))
    return long_degree, singles, most


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fcp", default="build/fcp", help="fcp binary (default: build/fcp)")
    ap.add_argument(
        "--batch", type=int, default=1, help="batch number of fcp eval noise (default: 1)"
    )
    ap.add_argument(
        "--scale",
        action="append",
        default=[],
        help="NAME=FACTOR[,NAME=FACTOR...]: one plan per use (default: alpha1=1.13,alpha2=0.84)",
    )
    args = ap.parse_args()
    if args.batch < 0:
        print("error: --batch: must be >= 0", file=sys.stderr)
        return 2
    try:
        cases = [parse_scale(s) for s in (args.scale or ["alpha1=1.13,alpha2=0.84"])]
    except ValueError as e:
        print(f"error: --scale: {e}", file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory() as tmp:
            fit = Path(tmp, "fit.json")
            run(
                [
                    args.fcp,
                    "profile",
                    "--target",
                    f"sim:{CLUSTER}",
                    "--model",
                    MODEL,
                    "--seed",
                    str(SEED),
                    "-o",
                    str(fit),
                ]
            )
            base = json.loads(fit.read_text())["cost_model"]
            # As fcp eval noise: plan against HEADROOM less of the free memory.
            base["mem_capacity"] = base["mem_static"] + (
                base["mem_capacity"] - base["mem_static"]
            ) * (1 - HEADROOM)
            # fcp simulate's batch i has seed SEED + i; fcp eval noise's batch b
            # has seed SEED * 1000003 + b.
            saved = Path(tmp, "batch.jsonl")
            run(
                [
                    args.fcp,
                    "simulate",
                    "--dataset",
                    DATASET,
                    "--gbs",
                    str(GBS),
                    "--cluster",
                    CLUSTER,
                    "--model",
                    MODEL,
                    "--seed",
                    str(SEED * 1000003 + args.batch),
                    "--steps",
                    "1",
                    "--warmup",
                    "0",
                    "--strategies",
                    "fcp",
                    "-q",
                    "--save-plans",
                    str(saved),
                ]
            )
            batch = json.loads(saved.read_text().splitlines()[0])["batch"]
            print(
                f"{'coefficients':28} {'long group d':>12} {'d=1 groups':>10} "
                f"{'most tokens on d=1':>18} {'estimate_s':>10} {'simulated_s':>11} {'change':>8}"
            )
            base_sim = None
            for scale in [{}] + cases:
                b = dict(batch)
                b["cost_model"] = {k: v * scale.get(k, 1.0) for k, v in base.items()}
                plan = json.loads(
                    run([args.fcp, "plan", "-s", "fcp", "--seed", str(SEED)], json.dumps(b))
                )
                sim = json.loads(
                    run(
                        [
                            args.fcp,
                            "simulate",
                            "--plan",
                            "-",
                            "--cluster",
                            CLUSTER,
                            "--model",
                            MODEL,
                            "--warmup",
                            "0",
                            "-q",
                            "--format",
                            "json",
                        ],
                        json.dumps({"batch": b, "plan": plan}),
                    )
                )
                sim_s = sim["results"][0]["iter_s"]
                base_sim = base_sim or sim_s
                long_degree, singles, most = describe(b, plan)
                label = ",".join(f"{k} x{v:g}" for k, v in scale.items()) or "fitted (unperturbed)"
                print(
                    f"{label:28} {long_degree:>12} {singles:>10} {most:>18} "
                    f"{plan['est_ms'] / 1000:>10.3f} {sim_s:>11.3f} "
                    f"{100 * (sim_s / base_sim - 1):>+7.1f}%"
                )
    except (RuntimeError, ValueError, KeyError, IndexError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
