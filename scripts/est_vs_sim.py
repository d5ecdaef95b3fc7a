#!/usr/bin/env python3
"""Planner estimate against the simulator, batch by batch.

    scripts/est_vs_sim.py PLANS.jsonl --cluster h100-8x8 --model qwen3-8b [--fcp build/fcp]

PLANS.jsonl is what `fcp simulate --save-plans` writes (one {"batch", "plan"}
per line). For each batch it prints the plan's estimate (est_ms: the sum over
micro-batches of the slowest group, as if ranks waited at every micro-batch
boundary), the barrier-free estimate (each group starts once its ranks are
free, the group times being the plan's own estimates) and the simulated compute
time of the plan alone (`fcp simulate --plan`, no warm-up, simulated), all in
seconds.
"""
import argparse
import json
import subprocess
import sys


def barrier_free_s(plan, num_ranks):
    free = [0.0] * num_ranks
    end = 0.0
    for mb in plan["micro_batches"]:
        for g in mb["groups"]:
            if not g["sequences"]:
                continue
            start = max(free[r] for r in g["ranks"])
            done = start + g["est_ms"] / 1000
            for r in g["ranks"]:
                free[r] = done
            end = max(end, done)
    return end


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("plans", help="JSON lines of {batch, plan} (fcp simulate --save-plans)")
    p.add_argument("--cluster", required=True, help="cluster preset the batches were planned on")
    p.add_argument("--model", required=True, help="model preset")
    p.add_argument("--fcp", default="build/fcp", help="the fcp binary")
    a = p.parse_args()
    try:
        lines = [l for l in open(a.plans) if l.strip()]
    except OSError as e:
        sys.exit(f"error: plans: {e.strerror}: {a.plans}")
    print(f"{'batch':>5} {'micro-batches':>13} {'est_s':>9} {'barrier-free_s':>14} {'simulated_s':>11}")
    for i, line in enumerate(lines):
        pair = json.loads(line)
        plan = pair["plan"]
        ranks = 1 + max(r for mb in plan["micro_batches"] for g in mb["groups"] for r in g["ranks"])
        cluster = pair["batch"].get("cluster")
        if isinstance(cluster, dict) and "ranks" in cluster:
            ranks = cluster["ranks"]
        r = subprocess.run([a.fcp, "simulate", "--plan", "-", "--cluster", a.cluster,
                            "--model", a.model, "--warmup", "0", "--steps", "1", "-q",
                            "--format", "json"], input=line, capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr.strip() or f"error: fcp simulate exited {r.returncode}")
        sim = json.loads(r.stdout)["results"][0]["compute_s"]
        print(f"{i:>5} {len(plan['micro_batches']):>13} {plan['est_ms'] / 1000:>9.2f} "
              f"{barrier_free_s(plan, ranks):>14.2f} {sim:>11.2f}")
    print("(est and barrier-free: planner estimates; simulated: the simulator's compute time)")


if __name__ == "__main__":
    main()
