"""The pass/fail tally the CLI test scripts share: `check` records one
assertion (printing FAIL lines as they happen), `summary` prints the totals
and returns the exit status."""

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
