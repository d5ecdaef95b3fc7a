#!/usr/bin/env python3
"""atheris target: the plan validator through the Python bindings (issue 30).

Each input is decoded into a batch of lengths and a plan dict of the shape
`Plan.to_dict()` gives (ranks, sequence indices and sizes drawn around and far
outside the valid ranges, other clusters, empty lists, duplicates), then fed
to `Plan.from_dict`, `Scheduler.validate`, `fcp.validate_plan`,
`Scheduler.estimate` and `Scheduler.observe`.

Properties: each call returns or raises ValueError (a crash, another
exception, or a message of more than one line is a finding); the validator
accepts exactly the plans an independent check written here accepts (every
rank in [0, N) once per micro-batch, every sequence index in [0, K) exactly
once, status ok, N ranks, no empty group); an accepted plan's estimate is
finite and non-negative and observe learns from it.

    PYTHONPATH=build/python python3 fuzz/plan_validator_fuzz.py -max_total_time=20
    (scripts/fuzz.sh runs it as target `plan_validator`; corpus fuzz/corpus/plan_validator/)
"""

import copy
import math
import sys

import atheris

with atheris.instrument_imports():
    import fcp

RANKS = 8
SCHED = fcp.Scheduler(cluster={"ranks": RANKS, "ranks_per_node": 4})
INTERESTING = [-2 ** 31, -1, 0, 1, 2, 3, 7, 8, 9, 2 ** 31 - 1, 2 ** 31, 2 ** 63]


def _int(fdp, hi):
    """Mostly in [0, hi], sometimes an edge value far outside."""
    if fdp.ConsumeIntInRange(0, 15) == 0:
        return INTERESTING[fdp.ConsumeIntInRange(0, len(INTERESTING) - 1)]
    return fdp.ConsumeIntInRange(0, hi)


def _valid_micro_batches(fdp, k):
    """A plan that is valid for k sequences (then maybe mutated)."""
    m = fdp.ConsumeIntInRange(1, min(3, k))
    members = [[i] for i in range(m)]
    for i in range(m, k):
        members[fdp.ConsumeIntInRange(0, m - 1)].append(i)
    out = []
    for seqs in members:
        g = fdp.ConsumeIntInRange(1, min(len(seqs), 4))
        ranks = list(range(RANKS))
        for i in range(RANKS - 1, 0, -1):  # Fisher-Yates from the input
            j = fdp.ConsumeIntInRange(0, i)
            ranks[i], ranks[j] = ranks[j], ranks[i]
        groups = []
        for q in range(g):
            groups.append({"ranks": ranks[q * (RANKS // g):(q + 1) * (RANKS // g)],
                           "sequences": seqs[q::g], "comm": "ring", "est_ms": 1.0,
                           "mem_bytes": 0})
        out.append({"est_ms": 1.0, "groups": groups})
    return out


def _mutate(fdp, micro_batches, k):
    groups = [g for mb in micro_batches for g in mb["groups"]]
    g = groups[fdp.ConsumeIntInRange(0, len(groups) - 1)]
    key = "ranks" if fdp.ConsumeBool() else "sequences"
    what = fdp.ConsumeIntInRange(0, 3)
    if what < 2 and not g[key]:
        what = 3
    if what == 0:
        g[key][fdp.ConsumeIntInRange(0, len(g[key]) - 1)] = _int(fdp, RANKS if key == "ranks" else k)
    elif what == 1:
        g[key].append(g[key][0])
    elif what == 2:
        g[key].clear()
    else:
        micro_batches[0]["groups"].append({"ranks": [_int(fdp, RANKS)], "sequences": [_int(fdp, k)],
                                           "comm": "all-to-all", "est_ms": 1.0, "mem_bytes": 0})


def _case(data):
    fdp = atheris.FuzzedDataProvider(data)
    k = fdp.ConsumeIntInRange(1, 12)
    lengths = [fdp.ConsumeIntInRange(1, 1 << 16) for _ in range(k)]
    num_ranks = RANKS if fdp.ConsumeIntInRange(0, 7) else _int(fdp, 64)
    if fdp.ConsumeBool():
        micro_batches = _valid_micro_batches(fdp, k)
        for _ in range(fdp.ConsumeIntInRange(0, 2)):
            _mutate(fdp, micro_batches, k)
        return _finish(fdp, lengths, num_ranks, micro_batches)
    micro_batches = []
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        groups = []
        for _ in range(fdp.ConsumeIntInRange(0, 4)):
            groups.append({
                "ranks": [_int(fdp, RANKS) for _ in range(fdp.ConsumeIntInRange(0, 4))],
                "sequences": [_int(fdp, k) for _ in range(fdp.ConsumeIntInRange(0, 4))],
                "comm": "ring" if fdp.ConsumeBool() else "all-to-all",
                "est_ms": 1.0, "mem_bytes": 0,
            })
        micro_batches.append({"est_ms": 1.0, "groups": groups})
    return _finish(fdp, lengths, num_ranks, micro_batches)


def _finish(fdp, lengths, num_ranks, micro_batches):
    k = len(lengths)
    plan = {"strategy": "fuzz", "ranks": num_ranks,
            "status": "ok" if fdp.ConsumeIntInRange(0, 15) else "infeasible",
            "est_ms": 1.0, "lower_bound_ms": 0.0, "micro_batches": micro_batches}
    # Lengths the plan was not made for: fewer, more.
    shift = fdp.ConsumeIntInRange(-2, 2) if fdp.ConsumeIntInRange(0, 3) == 0 else 0
    lengths = lengths[:max(1, k + shift)] + [5] * max(0, shift)
    return lengths, plan


def _oracle_ok(lengths, plan):
    if plan["status"] != "ok" or plan["ranks"] != RANKS or not plan["micro_batches"]:
        return False
    seen = [0] * len(lengths)
    for mb in plan["micro_batches"]:
        if not mb["groups"]:
            return False
        used = set()
        for g in mb["groups"]:
            if not g["ranks"] or not g["sequences"]:
                return False
            for r in g["ranks"]:
                if not 0 <= r < RANKS or r in used:
                    return False
                used.add(r)
            for s in g["sequences"]:
                if not 0 <= s < len(lengths):
                    return False
                seen[s] += 1
    return all(c == 1 for c in seen)


def _one_line_value_error(call, what):
    try:
        return call(), None
    except ValueError as e:
        if "\n" in str(e) or not str(e):
            raise AssertionError(f"{what}: not a one-line message: {e!r}") from None
        return None, e


def TestOneInput(data):
    lengths, plan_dict = _case(data)
    plan, err = _one_line_value_error(lambda: fcp.Plan.from_dict(plan_dict), "from_dict")
    if err is not None:  # only integers outside C++ int (ranks: < 0) are refused here
        if not any(not -2 ** 31 <= v < 2 ** 31 for mb in plan_dict["micro_batches"]
                   for g in mb["groups"] for v in g["ranks"] + g["sequences"]) and \
                0 <= plan_dict["ranks"] < 2 ** 31:
            raise AssertionError(f"from_dict refused a representable plan: {err}")
        return
    want = _oracle_ok(lengths, plan_dict)
    for name, call in (("validate", lambda: SCHED.validate(lengths, plan)),
                       ("validate_plan", lambda: fcp.validate_plan(lengths, plan, RANKS))):
        _, err = _one_line_value_error(call, name)
        if (err is None) != want:
            raise AssertionError(f"{name}: oracle says {want}, validator {err!r}: "
                                 f"{lengths} {plan_dict}")
    estimated, err = _one_line_value_error(lambda: SCHED.estimate(lengths, plan), "estimate")
    if (err is None) != want:
        raise AssertionError(f"estimate: oracle says {want}, got {err!r}")
    if estimated is not None and not (math.isfinite(estimated.est_ms) and estimated.est_ms >= 0):
        raise AssertionError(f"estimate: est_ms {estimated.est_ms}")
    if estimated is not None:
        times = [[max(g.est_ms, 1e-3) / 1e3 for g in mb.groups] for mb in estimated.micro_batches]
        _one_line_value_error(lambda: copy.deepcopy(SCHED).observe(lengths, estimated, times),
                              "observe")


def main():
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
