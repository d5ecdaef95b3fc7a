#!/usr/bin/env python3
"""`megatron-dcp-dev` against Megatron-LM dev's own scheduler: for seeded
random batches, `fcp plan --strategy megatron-dcp-dev` reports its tuned
max_seqlen_per_dp_cp_rank; dev's packing-aware Dynamic-CP scheduler
(megatron/core/datasets/data_schedule_utils.py: next_hdp_group_packing_aware,
called as DefaultDynamicCPScheduler.get_groups_and_subsamples calls it) runs
with that setting on the same lengths, and every micro-batch must give every
rank the same sequences in the same order.

Dev is not a release: this check reads dev's file from a Megatron-LM checkout
(not part of this repository, nothing of it is copied) and is run by hand:

    git -C Megatron-LM show dev:megatron/core/datasets/data_schedule_utils.py > /tmp/dsu.py
    .venv312/bin/python tests/cli/megatron_dcp_dev_oracle.py build/fcp /tmp/dsu.py

Checked at dev commit d48bd6be0a85 (docs/baselines.md).
"""

import json
import random
import subprocess
import sys
import types
import warnings

warnings.filterwarnings("ignore")


def load_dev_scheduler(path):
    """The file's functions; its two Megatron imports the scheduler does not
    use are stood in for when this megatron-core lacks them."""
    import megatron.core.extensions.transformer_engine as mte
    import megatron.core.rerun_state_machine as rsm

    for mod, name in ((mte, "get_thd_partitioned_indices"), (rsm, "RerunDataIterator")):
        if not hasattr(mod, name):
            stub = types.ModuleType(mod.__name__)
            stub.__dict__.update(mod.__dict__)
            setattr(stub, name, None)
            sys.modules[mod.__name__] = stub
    namespace = {"__name__": "dev_data_schedule_utils"}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), namespace)  # noqa: S102 (a file the user names)
    return namespace["next_hdp_group_packing_aware"]


def dev_groups(next_group, lengths, n, t):
    """DefaultDynamicCPScheduler.get_groups_and_subsamples (min_cp_size 1, no VPP)."""
    pending = sorted(enumerate(lengths), key=lambda x: x[1], reverse=True)
    out = []
    while pending:
        _, pending, _, ids = next_group(pending, n, max_seq_len_per_rank=t, min_cp_size=1)
        out.append(ids)
    return out


def fcp_groups(plan, n):
    out = []
    for mb in plan["micro_batches"]:
        per_rank = [[] for _ in range(n)]
        for g in mb["groups"]:
            for r in g["ranks"]:
                per_rank[r].extend(g["sequences"])
        out.append(per_rank)
    return out


def main(fcp, dev_file):
    next_group = load_dev_scheduler(dev_file)
    rng = random.Random(20261202)
    failures = cases = 0
    for case in range(60):
        n = rng.choice([8, 16, 32, 64])
        k = rng.randint(1, 80)
        lengths = [max(1, min(131072, int(rng.lognormvariate(7.5, 1.6)))) for _ in range(k)]
        batch = {"cluster": {"ranks": n, "ranks_per_node": min(n, 8)}, "sequences": lengths}
        p = subprocess.run(
            [fcp, "plan", "--strategy", "megatron-dcp-dev", "--format", "json"],
            input=json.dumps(batch),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if p.returncode == 3:
            continue  # no setting places every sequence within memory
        if p.returncode != 0:
            print(f"FAIL case {case}: exit {p.returncode}: {p.stderr.strip()}")
            failures += 1
            continue
        plan = json.loads(p.stdout)
        t = int(plan["notes"]["max_seqlen_per_dp_cp_rank"])
        want = dev_groups(next_group, lengths, n, t)
        got = fcp_groups(plan, n)
        cases += 1
        if got != want:
            failures += 1
            print(f"FAIL case {case}: N={n} T={t} lengths={lengths}\n  dev: {want}\n  fcp: {got}")
    print(f"{cases} batches compared, {failures} failures")
    if cases < 40:
        print("FAIL: too few comparable batches")
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(
            "error: usage: megatron_dcp_dev_oracle.py FCP_BINARY DEV_DATA_SCHEDULE_UTILS_PY",
            file=sys.stderr,
        )
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
