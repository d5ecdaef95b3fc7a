#!/usr/bin/env python3
"""`fcp simulate --plan`: every strategy's plans, saved by `--save-plans` and
simulated again from the file, give exactly the simulated times of
`--strategies` (same warm-up and gradient-sync rules); `fcp plan` of a saved
batch makes the saved plan (with --noise too); bad pairs exit 2 with
one `error:` line naming the field; stdin (`-`) works.

Usage: plan_replay_test.py FCP_BINARY
"""

import json
import os
import subprocess
import sys
import tempfile

FCP = sys.argv[1]
STRATEGIES = ["fcp", "fcp-paper", "megatron", "deepspeed", "megatron-dcp", "flexsp", "bytescale"]
failures = []


def run(args, stdin=None):
    return subprocess.run([FCP] + args, input=stdin, capture_output=True, text=True, timeout=600)


def main():
    tmp = tempfile.mkdtemp(prefix="fcp-plan-replay-")
    common = [
        "--gbs",
        "48",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--time-limit",
        "0.5",
        "--format",
        "json",
        "-q",
    ]
    saved = {}
    for s in STRATEGIES:
        path = os.path.join(tmp, s + ".jsonl")
        a = run(["simulate", "--strategies", s, "--save-plans", path] + common)
        if a.returncode != 0:
            failures.append(f"{s}: simulate exit {a.returncode}: {a.stderr.strip()}")
            continue
        b = run(["simulate", "--plan", path, "--warmup", "1", "--format", "json", "-q"])
        if b.returncode != 0:
            failures.append(f"{s}: --plan exit {b.returncode}: {b.stderr.strip()}")
            continue
        ra = json.loads(a.stdout)["results"][0]
        rb = json.loads(b.stdout)["results"][0]
        if (
            rb["strategy"] != "plan"
            or ra["iter_s"] != rb["iter_s"]
            or ra["compute_s"] != rb["compute_s"]
            or ra["grad_sync_s"] != rb["grad_sync_s"]
        ):
            failures.append(f"{s}: --strategies {ra['iter_s']} s vs --plan {rb['iter_s']} s")
        saved[s] = path
    # A saved batch carries what fcp ranked by (the gradient sync, and with
    # --noise the group-time sigma): `fcp plan` of it makes the saved plan.
    for extra in ([], ["--noise", "0.2"]):
        path = os.path.join(tmp, "fcp-noise.jsonl")
        a = run(["simulate", "--strategies", "fcp", "--save-plans", path] + common + extra)
        if a.returncode != 0:
            failures.append(f"fcp {extra}: simulate exit {a.returncode}: {a.stderr.strip()}")
            continue
        for i, line in enumerate(open(path).read().splitlines()):
            item = json.loads(line)
            if "grad_sync" not in item["batch"] or ("group_time_sigma" in item["batch"]) != bool(
                extra
            ):
                failures.append(f"fcp {extra} [{i}]: batch keys {sorted(item['batch'])}")
            p = run(["plan", "-i", "-", "--format", "json"], stdin=json.dumps(item["batch"]))
            replanned = json.loads(p.stdout) if p.returncode == 0 else {}
            for plan in (replanned, item["plan"]):
                plan.pop("solver_ms", None)
                plan.get("notes", {}).pop("cost_model", None)  # fcp plan's source note
            if replanned != item["plan"]:
                failures.append(f"fcp {extra} [{i}]: fcp plan of the saved batch differs")
    # stdin and the JSON-array form give the same result.
    if "megatron" in saved:
        lines = open(saved["megatron"]).read().splitlines()
        array = "[" + ",".join(lines) + "]"
        c = run(["simulate", "--plan", "-", "--warmup", "1", "--format", "json", "-q"], stdin=array)
        d = run(
            ["simulate", "--plan", saved["megatron"], "--warmup", "1", "--format", "json", "-q"]
        )
        if c.returncode != 0 or json.loads(c.stdout)["results"] != json.loads(d.stdout)["results"]:
            failures.append(f"stdin array form differs: {c.returncode} {c.stderr.strip()}")
        # Errors name the field: a rank used twice in [1], micro-batch 0, group 1.
        items = [json.loads(l) for l in lines]
        groups = items[1]["plan"]["micro_batches"][0]["groups"]
        if len(groups) >= 2:
            groups[1]["ranks"][0] = groups[0]["ranks"][0]
            bad = "\n".join(json.dumps(i) for i in items)
            e = run(["simulate", "--plan", "-", "-q"], stdin=bad)
            want = "error: [1].plan.micro_batches[0].groups[1].ranks: rank"
            if (
                e.returncode != 2
                or not e.stderr.startswith(want)
                or e.stdout
                or e.stderr.count("\n") != 1
            ):
                failures.append(f"duplicate rank: exit {e.returncode}, stderr {e.stderr!r}")
        cases = [
            (
                lambda it: it[0]["plan"]["micro_batches"][0]["groups"][0]["ranks"].append(10**6),
                "error: [0].plan.micro_batches[0].groups[0].ranks[",
            ),
            (
                lambda it: it[1]["batch"]["sequences"].__setitem__(0, -5),
                "error: [1].batch.sequences[0]",
            ),
            (
                lambda it: it[0]["plan"].__setitem__("status", "infeasible"),
                "error: [0].plan.status",
            ),
            (lambda it: it[1].__setitem__("extra", 1), "error: [1].extra"),
            # fcp plan's ranges hold for replayed batches too: here a group's
            # memory beyond an int64 (found by plan_file_fuzz).
            (
                lambda it: (
                    it[0]["batch"].setdefault("cost_model", {}).__setitem__("mem_per_token", 4.6e17)
                ),
                "error: [0].batch.cost_model.mem_per_token",
            ),
        ]

        # The topology is --cluster's: a batch claiming 64 ranks per node on
        # the 16-per-node preset is refused, naming the field.
        def claim_one_node(it):
            for item in it:
                item["batch"]["cluster"]["ranks_per_node"] = item["batch"]["cluster"]["ranks"]

        cases.append((claim_one_node, "error: [0].batch.cluster.ranks_per_node: 64 ranks per node"))

        # An all-to-all group whose degree does not divide the 32 query heads.
        def three_rank_ulysses(it):
            k = len(it[0]["batch"]["sequences"])
            it[0]["plan"]["micro_batches"] = [
                {
                    "groups": [
                        {"ranks": [0, 1, 2], "sequences": list(range(k)), "comm": "all-to-all"}
                    ]
                }
            ]

        want_a2a = (
            "error: [0].plan.micro_batches[0].groups[0].comm: an all-to-all group "
            "of degree 3 does not divide q_heads = 32"
        )
        cases.append((three_rank_ulysses, want_a2a))
        for mutate, want in cases:
            items = [json.loads(l) for l in lines]
            mutate(items)
            e = run(
                ["simulate", "--plan", "-", "--warmup", "1", "-q"],
                stdin="\n".join(json.dumps(i) for i in items),
            )
            if e.returncode != 2 or not e.stderr.startswith(want) or e.stdout:
                failures.append(f"want {want!r}: exit {e.returncode}, stderr {e.stderr!r}")
    # --trace and --plot draw the first measured batch of the replayed plans.
    if "fcp" in saved:
        trace = os.path.join(tmp, "replay-trace.json")
        t = run(["simulate", "--plan", saved["fcp"], "--warmup", "1", "-q", "--trace", trace])
        events = []
        if t.returncode == 0 and os.path.isfile(trace):
            with open(trace) as f:
                events = json.load(f).get("traceEvents", [])
        if not events:
            failures.append(f"--plan --trace: exit {t.returncode}, stderr {t.stderr.strip()}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(STRATEGIES)} strategies round-tripped, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
