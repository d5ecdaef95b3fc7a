#!/usr/bin/env python3
"""`megatron-dcp` against the real Megatron-Core scheduler: for seeded random
batches, `fcp plan --strategy megatron-dcp` reports its tuned
max_seqlen_per_dp_cp_rank; megatron-core's own BalancedCPScheduler
(megatron/core/pipeline_parallel/hybrid_cp_schedule.py, 0.19.2, installed in
the Megatron venv .venv312) is run with that setting on the same lengths, and every GPU must
get the same sequences in the same order, and the plan the same number of
barrier-delimited steps (notes.hdp_groups).

Usage: megatron_dcp_oracle.py FCP_BINARY
"""

import json
import random
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")
from megatron.core.pipeline_parallel.hybrid_cp_schedule import BalancedCPScheduler  # noqa: E402

FCP = sys.argv[1]


class FakeGroup:
    """The scheduler only asks its DPxCP group for its size."""

    def __init__(self, n):
        self.n = n

    def size(self):
        return self.n


def per_gpu_from_plan(plan, n):
    lists = [[] for _ in range(n)]
    for mb in plan["micro_batches"]:
        for g in mb["groups"]:
            for r in g["ranks"]:
                lists[r].extend(g["sequences"])
    return lists


def main():
    rng = random.Random(20251130)
    failures = 0
    cases = 0
    for case in range(60):
        n = rng.choice([8, 16, 32, 64])  # smaller N: the preset has no activation room
        k = rng.randint(1, 80)
        lengths = [max(1, min(131072, int(rng.lognormvariate(7.5, 1.6)))) for _ in range(k)]
        batch = {"cluster": {"ranks": n, "ranks_per_node": min(n, 8)}, "sequences": lengths}
        p = subprocess.run(
            [FCP, "plan", "--strategy", "megatron-dcp", "--format", "json"],
            input=json.dumps(batch),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if p.returncode == 3:
            continue  # a sequence needs more than N ranks: Megatron has no such group
        if p.returncode != 0:
            print(f"FAIL case {case}: exit {p.returncode}: {p.stderr.strip()}")
            failures += 1
            continue
        plan = json.loads(p.stdout)
        t = int(plan["notes"]["max_seqlen_per_dp_cp_rank"])
        sched = BalancedCPScheduler(t, FakeGroup(n))
        _, id_groups = sched.get_groups_and_subsamples(list(enumerate(lengths)), None)
        want = [[] for _ in range(n)]
        for step in id_groups:
            for r in range(n):
                want[r].extend(step[r])
        got = per_gpu_from_plan(plan, n)
        cases += 1
        if got != want or int(plan["notes"]["hdp_groups"]) != len(id_groups):
            failures += 1
            print(
                f"FAIL case {case}: N={n} T={t} lengths={lengths}\n  megatron: {want}\n"
                f"  fcp:      {got}\n  steps {len(id_groups)} vs {plan['notes']['hdp_groups']}"
            )
    print(f"{cases} batches compared, {failures} failures")
    if cases < 40:
        print("FAIL: too few comparable batches")
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
