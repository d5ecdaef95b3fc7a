"""The pass/fail tally the CLI test scripts share: `check` records one
assertion (printing FAIL lines as they happen), `summary` prints the totals
and returns the exit status; `list_schedule_ms` recomputes a plan's estimate."""

results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    if ok:
        results["passed"] += 1
    else:
        results["failed"] += 1
        print(f"FAIL {name}: {detail}")


def summary():
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


def list_schedule_ms(plan, num_ranks):
    """A plan's est_ms as docs/design.md §2 defines it, from its groups'
    est_ms: micro-batches in order, each group starting when all its ranks
    are free (no barrier between micro-batches); the makespan."""
    free = [0.0] * num_ranks
    end = 0.0
    for mb in plan["micro_batches"]:
        for g in mb["groups"]:
            done = max(free[r] for r in g["ranks"]) + g["est_ms"]
            for r in g["ranks"]:
                free[r] = done
            end = max(end, done)
    return end
