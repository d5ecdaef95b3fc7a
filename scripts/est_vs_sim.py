#!/usr/bin/env python3
"""Planner estimate against the simulator, batch by batch.

    scripts/est_vs_sim.py PLANS.jsonl --cluster h100-8x8 --model qwen3-8b [--fcp build/fcp]
    PYTHONPATH=build/python scripts/est_vs_sim.py PLANS.jsonl ... --groups

PLANS.jsonl is what `fcp simulate --save-plans` writes (one {"batch", "plan"}
per line). For each batch it prints the plan's estimate (est_ms: the
list-schedule makespan, each group starting once its ranks are free), the sum
over micro-batches of the slowest group (what the estimate would be if ranks
waited at every micro-batch boundary; the planner's estimate before it became
barrier-free) and the simulated compute time of the plan alone (`fcp simulate
--plan`, no warm-up, simulated), all in seconds.

With --groups it prints instead, per batch, the simulated time over the
planner's estimate of single groups (the fcp module, `fcp._fcp.simulate_plan`):
of the group whose sequences are shortest on average, of the one whose are
longest, and the range over all groups. A range wider than the plan's
margin over another is an estimate error that can rank the two wrongly.
"""

import argparse
import json
import subprocess
import sys


def sum_of_maxima_s(plan):
    return sum(max(g["est_ms"] for g in mb["groups"]) for mb in plan["micro_batches"]) / 1000


def group_ratios(pair, cluster, model):
    """(sequences, mean length, simulated / estimated) of every group that ran."""
    import fcp

    core = fcp._core()
    request = core.parse_batch_json(json.dumps(pair["batch"])).request
    plan = fcp.Plan.from_dict(pair["plan"])
    seqs = request.sequences
    lengths = [s.length_tokens for s in seqs]
    etas = [s.eta for s in seqs]
    visions = [s.vision_tokens for s in seqs]
    _, _, times = core.simulate_plan(
        model, cluster, plan.num_ranks, "full", plan, lengths, etas, visions
    )
    groups = [g for mb in plan.micro_batches for g in mb.groups]
    return [
        (
            len(g.sequences),
            sum(lengths[k] for k in g.sequences) / len(g.sequences),
            1e3 * t / g.est_ms,
        )
        for g, t in zip(groups, times)
        if g.sequences
    ]


def _ratio_cell(row):
    sequences, mean_length, ratio = row
    return f"{ratio:.4f} ({sequences} x {mean_length:.0f} tokens)"


def print_group_ratios(lines, cluster, model):
    print(
        f"{'batch':>5} {'groups':>6}  {'shortest sequences':>26}  {'longest sequences':>26}  range"
    )
    for i, line in enumerate(lines):
        rows = sorted(group_ratios(json.loads(line), cluster, model), key=lambda r: r[1])
        low, high = min(r[2] for r in rows), max(r[2] for r in rows)
        print(
            f"{i:>5} {len(rows):>6}  {_ratio_cell(rows[0]):>26}  {_ratio_cell(rows[-1]):>26}  {low:.4f}-{high:.4f}"
        )
    print("(simulated group time / planner estimate; mean tokens per sequence of the group)")


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("plans", help="JSON lines of {batch, plan} (fcp simulate --save-plans)")
    p.add_argument("--cluster", required=True, help="cluster preset the batches were planned on")
    p.add_argument("--model", required=True, help="model preset")
    p.add_argument("--fcp", default="build/fcp", help="the fcp binary")
    p.add_argument(
        "--groups", action="store_true", help="simulated / estimated time of single groups"
    )
    a = p.parse_args()
    try:
        lines = [l for l in open(a.plans) if l.strip()]
    except OSError as e:
        sys.exit(f"error: plans: {e.strerror}: {a.plans}")
    if a.groups:
        print_group_ratios(lines, a.cluster, a.model)
        return
    print(
        f"{'batch':>5} {'micro-batches':>13} {'est_s':>9} {'sum-of-maxima_s':>15} {'simulated_s':>11}"
    )
    for i, line in enumerate(lines):
        pair = json.loads(line)
        plan = pair["plan"]
        r = subprocess.run(
            [
                a.fcp,
                "simulate",
                "--plan",
                "-",
                "--cluster",
                a.cluster,
                "--model",
                a.model,
                "--warmup",
                "0",
                "-q",
                "--format",
                "json",
            ],
            input=line,
            capture_output=True,
            text=True,
        )
        if r.returncode:
            sys.exit(r.stderr.strip() or f"error: fcp simulate exited {r.returncode}")
        sim = json.loads(r.stdout)["results"][0]["compute_s"]
        print(
            f"{i:>5} {len(plan['micro_batches']):>13} {plan['est_ms'] / 1000:>9.2f} "
            f"{sum_of_maxima_s(plan):>15.2f} {sim:>11.2f}"
        )
    print("(est and sum of maxima: planner estimates; simulated: the simulator's compute time)")


if __name__ == "__main__":
    main()
