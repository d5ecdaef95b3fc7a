#!/usr/bin/env python3
"""Measured fcp / static step ratio on this machine's CPU (docs/replay.md).

1. ``python -m fcp profile --target torch --in-process`` fits the cost model
   to a tiny layer (cpu-tiny unless --model) on this CPU;
2. ``fcp simulate --save-plans`` plans real long-tailed lengths (data/, Go
   source files tokenized by Qwen3, divided by --scale and clipped at
   --max-len so that a batch replays in seconds on one core) with fcp and with
   the static baselines at every degree (ring: megatron; all-to-all:
   deepspeed, at degrees that divide the query heads), all with that cost
   model;
3. ``python -m fcp replay`` runs every plan's groups on the CPU kernels
   (all-to-all groups through fcp.torch.ulysses_attention);
4. prints the measured step sums, the profiled cost model's estimates, where
   measured and modelled group times part (by degree, by sequences per
   group), and fcp / best static (tuned in hindsight: the static strategy
   with the smallest measured time) measured beside predicted.

Environment: PYTHONPATH with the built module (build/python), FCP_CLI the
built C++ CLI (build/fcp).
"""

import argparse
import csv
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
PY = [sys.executable, "-m", "fcp"]


def sh(args, **kw):
    res = subprocess.run(args, capture_output=True, text=True, **kw)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        raise SystemExit(f"error: {' '.join(map(str, args[:4]))}... failed (rc {res.returncode})")
    return res.stdout


def print_by_sequences(files, rep):
    """Measured / model of group times by sequences per group: a cost per
    sequence that the model lacks shows as a ratio rising with the count."""
    bins = ((1, 1), (2, 4), (5, 8), (9, 16), (17, 1 << 30))
    print("group time, measured / profiled model, by sequences per group (all strategies)")
    cells = []
    for lo, hi in bins:
        m = e = n = 0
        for f in rep["files"]:
            for plan in f["plans"]:
                for g in plan["groups"]:
                    if lo <= g["sequences"] <= hi:
                        m, e, n = m + g["measured_ms"], e + g["model_ms"], n + 1
        if n:
            label = f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi < 1 << 30 else f">={lo}")
            cells.append(f"{label}: {m / e:.3f} ({n})")
    print("  " + "  ".join(cells))
    # measured - model = a + b * sequences, least squares over every group.
    pts = [
        (g["sequences"], g["measured_ms"] - g["model_ms"])
        for f in rep["files"]
        for plan in f["plans"]
        for g in plan["groups"]
    ]
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0
    print(
        f"  measured - model per group = {my - b * mx:+.2f} ms {b:+.3f} ms x sequences "
        f"(least squares, {n} groups)"
    )


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default="build/replay-bench")
    p.add_argument("--model", default="cpu-tiny")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--gbs", type=int, default=64, help="sequences per global batch")
    p.add_argument("--steps", type=int, default=3, help="batches replayed")
    p.add_argument("--scale", type=int, default=16, help="lengths divided by this")
    p.add_argument("--max-len", type=int, default=8192, help="lengths clipped at this")
    p.add_argument("--degrees", default="1,2,4,8", help="static (ring) degrees tried")
    p.add_argument(
        "--ulysses-degrees",
        default="2,4",
        help="static all-to-all (deepspeed) degrees tried; must divide the model's query heads",
    )
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--profile", default=None, help="reuse this profile JSON")
    p.add_argument(
        "--packs",
        default="4,16",
        help="profile --packs: packed groups of k short sequences per grid point (plans "
        "pack many: the fit must see their per-sequence costs)",
    )
    return p.parse_args()


def profile(args, prof):
    print(f"[bench] profiling {args.model} on the CPU", file=sys.stderr, flush=True)
    grid = ["--lengths", "1024,2048,4096,8192", "--degrees", "1,2,4,6,8", "--min-chunk", "128"]
    sh(
        PY
        + ["profile", "--target", "torch", "--device", "cpu", "--in-process"]
        + ["--model", args.model, *grid, "--packs", args.packs, "-q", "--out", str(prof)]
    )


def write_lengths(args, out):
    """The real lengths / --scale, clipped at --max-len; returns the raw ones."""
    with open(ROOT / "data" / "go-src-qwen3-lengths.csv", encoding="utf-8") as f:
        raw = [int(r["tokens"]) for r in csv.DictReader(f) if int(r["tokens"]) > 0]
    path = out / "lengths.txt"
    path.write_text("".join(f"{min(args.max_len, max(1, n // args.scale))}\n" for n in raw))
    return raw, path


def make_plans(args, lengths, prof, out):
    """{strategy name: plans file} of fcp and every static strategy."""
    cli = [os.environ.get("FCP_CLI", str(ROOT / "build" / "fcp"))]
    common = ["simulate", "--lengths", str(lengths), "--model", "qwen3-8b"]
    common += ["--cluster", "h100-8x8", "--ranks", str(args.ranks), "--gbs", str(args.gbs)]
    common += ["--steps", str(args.steps), "--warmup", "0", "--cost-model", str(prof), "-q"]
    # fcp-ring: fcp's planner with ring groups only (Ulysses needs a degree that
    # divides the query heads, and cpu-tiny has 4).
    files = {"fcp": out / "fcp.jsonl"}
    sh(cli + common + ["--strategies", "fcp-ring", "--save-plans", str(files["fcp"])])
    statics = [("static", "megatron", d) for d in args.degrees.split(",")]
    statics += [("ulysses", "deepspeed", d) for d in filter(None, args.ulysses_degrees.split(","))]
    for label, strategy, d in statics:
        name = f"{label} d={d}"
        files[name] = out / f"{label}-d{d}.jsonl"
        sh(cli + common + ["--strategies", strategy, "--cp", d, "--save-plans", str(files[name])])
    return files


def replay(args, files, prof, out):
    print(
        f"[bench] replaying {len(files)} strategies x {args.steps} batches",
        file=sys.stderr,
        flush=True,
    )
    cmd = PY + ["replay", *map(str, files.values()), "--cost-model", str(prof)]
    rep = json.loads(sh(cmd + ["--repeats", str(args.repeats), "-q", "--format", "json"]))
    (out / "replay.json").write_text(json.dumps(rep, indent=1))
    return rep


def print_by_degree(files, rep):
    """Where measured and modelled group times part: by degree, per strategy."""
    print("group time, measured / profiled model, by degree (sums over each strategy's groups)")
    for name, f in zip(files, rep["files"]):
        by_d = {}
        for plan in f["plans"]:
            for g in plan["groups"]:
                m, e, n = by_d.get(g["degree"], (0.0, 0.0, 0))
                by_d[g["degree"]] = (m + g["measured_ms"], e + g["model_ms"], n + 1)
        cells = "  ".join(f"d={d}: {m / e:.3f} ({n})" for d, (m, e, n) in sorted(by_d.items()))
        print(f"  {name:<12} {cells}")


def report(args, files, rep, raw):
    sums = {}
    for name, f in zip(files, rep["files"]):
        plans = f["plans"]
        sums[name] = (sum(r["measured_ms"] for r in plans), sum(r["model_ms"] for r in plans))
    print(rep["header"])
    print(
        f"{len(raw)} real lengths / {args.scale}, clipped at {args.max_len}; {args.ranks} ranks, "
        f"{args.gbs} sequences per batch, {args.steps} batches"
    )
    print(f"{'strategy':<14} {'measured_s':>10} {'model_s':>10} {'meas/model':>10}")
    for name, (m, e) in sums.items():
        print(f"{name:<14} {m / 1e3:10.2f} {e / 1e3:10.2f} {m / e:10.3f}")
    print_by_degree(files, rep)
    print_by_sequences(files, rep)
    statics = {k: v for k, v in sums.items() if k != "fcp"}
    best = min(statics, key=lambda k: statics[k][0])
    best_pred = min(statics, key=lambda k: statics[k][1])
    measured = sums["fcp"][0] / statics[best][0]
    predicted = sums["fcp"][1] / statics[best][1]
    print(f"best static in hindsight (measured): {best}; by the cost model: {best_pred}")
    print(
        f"fcp / {best}: measured {measured:.3f}, predicted {predicted:.3f} "
        f"(difference {100 * (measured / predicted - 1):+.1f}%)"
    )


def main():
    args = parse_args()
    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    prof = pathlib.Path(args.profile) if args.profile else out / "cost_model.json"
    if not args.profile:
        profile(args, prof)
    raw, lengths = write_lengths(args, out)
    files = make_plans(args, lengths, prof, out)
    rep = replay(args, files, prof, out)
    report(args, files, rep, raw)
    print(f"wall {time.time() - t0:.0f} s")  # the last line: volatile


if __name__ == "__main__":
    main()
