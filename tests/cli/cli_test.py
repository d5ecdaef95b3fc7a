#!/usr/bin/env python3
"""CLI tests for `fcp plan`: golden JSON, an independent re-computation of every
estimate from the docs/design.md §2 formula, and the error classes (exit 2/3 with an
`error:` line and nothing on stdout).

Usage: cli_test.py FCP_BINARY [--update]   (--update rewrites the golden files)
"""

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

from checks import check, list_schedule_ms, summary

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden")
FCP = sys.argv[1]
UPDATE = "--update" in sys.argv


def run(args, stdin=None):
    p = subprocess.run([FCP] + args, input=stdin, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def group_time(cm, seqs, ranks, per_node):
    """T(G, d) of docs/design.md §2, written independently of the C++ code."""
    d = len(ranks)
    sum_s = sum(s for s, _, _ in seqs)
    h = cm.get("attn_overhead_tokens", 0.0)  # cost model v2; 0 = the paper's model
    attn = cm["alpha1"] * sum((1 + eta) * (s * s / d + h * s) for s, eta, _ in seqs)
    # Every token's linear work, and the vision encoder's on vision tokens (v2).
    lin = cm["alpha2"] * sum_s / d + cm.get("alpha2_vision", 0.0) * sum(v for *_, v in seqs) / d
    tcp = attn + lin + cm["beta1"]
    if d == 1:
        tcm = 0.0
    else:
        one_node = len({r // per_node for r in ranks}) == 1
        bw = cm["bw_intra_node"] if one_node else cm["bw_inter_node"]
        gamma = cm.get("gamma_intra" if one_node else "gamma_inter", 0.0)
        tcp += (d - 1) * cm.get("gamma_serial", 0.0)  # not hidden behind attention
        tcm = cm["alpha3"] * sum_s * (d - 1) / d / bw + cm["beta2"] + (d - 1) * gamma
        tcp += cm.get("alpha3_home", 0.0) * sum_s / d / bw  # after the last step
    hideable = attn * (d - cm.get("ring_tail_steps", 0.0)) / d
    return tcp + tcm - min(hideable, tcm)


def sequences_of(inp):
    out = []
    for s in inp["sequences"]:
        if isinstance(s, dict):
            eta = s.get("eta", 1.0 if s.get("attention") == "full" else 0.0)
            out.append((s["length"], eta, s.get("vision_tokens", 0)))
        else:
            out.append((s, 0.0, 0))
    return out


def strip(plan):
    plan = dict(plan)
    plan.pop("solver_ms", None)
    return plan


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


# The paper's coefficients (docs/design.md §2): an input that gives them all
# needs no preset. Every strategy's estimates are in the input's whole model.
PAPER_TERMS = set(
    "alpha1 alpha2 beta1 alpha3 beta2 bw_intra_node bw_inter_node mem_per_token mem_static"
    " mem_capacity".split()
)


def check_formula(name, inp, plan):
    cm = inp["cost_model"]
    seqs = sequences_of(inp)
    per_node = inp["cluster"]["ranks_per_node"]
    n = inp["cluster"]["ranks"]
    seen = []
    total = 0.0
    for m, mb in enumerate(plan["micro_batches"]):
        used = []
        worst = 0.0
        for g in mb["groups"]:
            members = [seqs[i] for i in g["sequences"]]
            t = 1000 * group_time(cm, members, g["ranks"], per_node)
            check(f"{name} mb{m} est_ms formula", close(t, g["est_ms"]), f"{t} vs {g['est_ms']}")
            mem = cm["mem_static"] + cm["mem_per_token"] * sum(s for s, *_ in members) / len(
                g["ranks"]
            )
            check(f"{name} mb{m} memory", mem <= cm["mem_capacity"] * (1 + 1e-12), f"{mem}")
            check(f"{name} mb{m} mem_bytes", abs(g["mem_bytes"] - math.ceil(mem)) <= 1, f"{mem}")
            worst = max(worst, g["est_ms"])
            used += g["ranks"]
            seen += g["sequences"]
        check(
            f"{name} mb{m} disjoint ranks",
            len(used) == len(set(used)) and all(0 <= r < n for r in used),
        )
        check(f"{name} mb{m} max", close(worst, mb["est_ms"]))
        total += mb["est_ms"]
    check(f"{name} every sequence once", sorted(seen) == list(range(len(seqs))), str(sorted(seen)))
    # The plan's estimate is the list schedule's makespan: between the largest
    # micro-batch and the sum of all (equal to the sum only with a barrier).
    largest = max(mb["est_ms"] for mb in plan["micro_batches"])
    check(
        f"{name} list schedule",
        close(list_schedule_ms(plan, n), plan["est_ms"]),
        f"{list_schedule_ms(plan, n)} vs {plan['est_ms']}",
    )
    check(
        f"{name} between max and sum",
        largest * (1 - 1e-12) <= plan["est_ms"] <= total * (1 + 1e-12),
        f"{largest} <= {plan['est_ms']} <= {total}",
    )
    check(f"{name} bound", plan["lower_bound_ms"] <= plan["est_ms"] * (1 + 1e-9))


def golden_tests():
    for file in sorted(os.listdir(GOLDEN)):
        if not file.endswith(".json") or file.endswith(".expected.json"):
            continue
        path = os.path.join(GOLDEN, file)
        inp = json.load(open(path))
        for strategy in ("fcp", "fcp-paper"):
            name = f"{file}:{strategy}"
            code, out, err = run(["plan", "--input", path, "--strategy", strategy])
            check(f"{name} exit", code == 0, err)
            if code != 0:
                continue
            plan = json.loads(out)
            check(f"{name} strategy", plan["strategy"] == strategy)
            if PAPER_TERMS <= set(inp.get("cost_model", {})):
                check_formula(name, inp, plan)
            expected_path = path[:-5] + f".{strategy}.expected.json"
            if UPDATE:
                with open(expected_path, "w") as f:
                    json.dump(strip(plan), f, indent=1, sort_keys=True)
                    f.write("\n")
                continue
            expected = json.load(open(expected_path))
            check(
                f"{name} golden",
                strip(plan) == expected,
                "output differs from " + os.path.basename(expected_path),
            )
        # Reading stdin, or the file as the first argument, gives the same
        # plan as --input.
        code, out, _ = run(["plan"], stdin=open(path).read())
        code2, out2, _ = run(["plan", "-i", path])
        code3, out3, _ = run(["plan", path])
        check(
            f"{file} stdin == positional file == --input",
            code == code2 == code3 == 0
            and strip(json.loads(out)) == strip(json.loads(out2)) == strip(json.loads(out3)),
        )
        # The table format prints totals and the gap.
        code, out, _ = run(["plan", "-i", path, "-f", "table"])
        check(f"{file} table", code == 0 and "lower bound" in out and "gap" in out, out[-200:])


def help_defaults_in_range_tests():
    """Every command's --help: a default shown beside a range lies in it
    (`--planner-noise ... in [0 - 2]=-1` showed its unset marker)."""
    code, out, _ = run(["--help"])
    commands = re.findall(r"^  (\S+(?: (?!  )\S+)?)  ", out, re.M)
    check("fcp --help lists the commands", code == 0 and "simulate" in commands, commands)
    shown = 0
    for command in commands:
        code, out, _ = run(command.split() + ["--help"])
        for lo, hi, default in re.findall(r"in \[(\S+) - (\S+)\]=(\S+)", out):
            shown += 1
            try:
                inside = float(lo) <= float(default) <= float(hi)
            except ValueError:  # a word: what the option follows when unset
                inside = not default.lstrip("-").replace(".", "").isdigit()
            check(f"{command} --help: default {default} in [{lo}, {hi}]", code == 0 and inside)
    check("some --help shows a range with its default", shown > 0, shown)


def study_default_lengths_tests():
    """eval study's default --lengths from any working directory: the file
    beside the executable's folder (as the wheel installs fcp/_bin/fcp and
    fcp/data/), else one error naming the flag; --lengths none: no real
    lengths."""
    quick = ["eval", "study", "--quick", "--cluster", "h100-8x8", "--gbs", "16", "--ranks", "8"]
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "bin"))
        os.makedirs(os.path.join(d, "elsewhere"))
        exe = os.path.join(d, "bin", "fcp")
        shutil.copy(FCP, exe)

        def study(extra, out):
            p = subprocess.run(
                [exe] + quick + extra + ["--out", out],
                cwd=os.path.join(d, "elsewhere"),
                capture_output=True,
                text=True,
                timeout=120,
            )
            return p.returncode, p.stderr

        code, err = study([], os.path.join(d, "out1"))
        check(
            "eval study: no data/ here or beside the executable is one error naming lengths",
            code == 2
            and err.startswith("error: lengths:")
            and "--lengths none" in err
            and not os.path.exists(os.path.join(d, "out1", "study.csv")),
            err,
        )
        # A stand-in file of known lengths where the wheel keeps the real one.
        os.makedirs(os.path.join(d, "data"))
        with open(os.path.join(d, "data", "go-src-qwen3-lengths.csv"), "w") as f:
            f.write("\n".join(str(65536 + 1000 * i) for i in range(40)) + "\n")
        for extra, out, want in (([], "out2", True), (["--lengths", "none"], "out3", False)):
            code, err = study(extra, os.path.join(d, out))
            rows = []
            if code == 0:
                with open(os.path.join(d, out, "study.csv")) as f:
                    rows = list(csv.DictReader(f))
            real = [r for r in rows if r["dataset"] == "go-src (real)"]
            check(
                f"eval study {' '.join(extra) or '(default lengths)'} from another directory: "
                + ("reads the file beside the executable" if want else "no real lengths"),
                code == 0
                and bool(rows)
                and bool(real) == want
                and all(float(r["bound_s"]) > 0 for r in real),
                (code, err[-300:], [r["dataset"] for r in rows]),
            )


def error_tests():
    base = {
        "cluster": {"ranks": 8, "ranks_per_node": 4},
        "model": "qwen3-8b",
        "sequences": [1000, 2000],
    }

    def with_(**kw):
        d = json.loads(json.dumps(base))
        d.update(kw)
        return json.dumps(d)

    cases = [
        ("malformed JSON", '{"sequences": [1, 2', 2, "input"),
        ("not an object", "[1, 2, 3]", 2, "input"),
        ("zero length", with_(sequences=[1000, 0]), 2, "sequences[1]"),
        ("negative length", with_(sequences=[-5]), 2, "sequences[0]"),
        ("fractional length", with_(sequences=[10.5]), 2, "sequences[0]"),
        ("string length", with_(sequences=["12"]), 2, "sequences[0]"),
        ("bad eta", with_(sequences=[{"length": 10, "eta": 2}]), 2, "sequences[0].eta"),
        (
            "bad attention",
            with_(sequences=[{"length": 10, "attention": "sparse"}]),
            2,
            "sequences[0].attention",
        ),
        ("empty batch", with_(sequences=[]), 2, "sequences"),
        ("missing sequences", json.dumps({"model": "qwen3-8b"}), 2, "sequences"),
        ("unknown model", with_(model="gpt-9"), 2, "model"),
        ("unknown cluster", with_(cluster="tpu-pod"), 2, "cluster"),
        ("zero ranks", with_(cluster={"ranks": 0}), 2, "cluster.ranks"),
        ("unknown key", with_(sequence=[1]), 2, "sequence"),
        ("bad coefficient", with_(cost_model={"alpha1": -1}), 2, "cost_model.alpha1"),
        (
            "capacity below static",
            with_(cost_model={"mem_capacity": 1, "mem_static": 2}),
            2,
            "cost_model.mem_capacity",
        ),
        ("unknown coefficient", with_(cost_model={"gamma": 1}), 2, "cost_model.gamma"),
        ("duplicate key", '{"sequences": [1], "sequences": [2]}', 2, "duplicate"),
        ("too long for the cluster", with_(sequences=[1000, 1 << 36]), 3, "sequences[1]"),
    ]
    for name, text, want_code, needle in cases:
        code, out, err = run(["plan"], stdin=text)
        check(f"error {name}: exit {want_code}", code == want_code, f"got {code}, stderr {err!r}")
        check(f"error {name}: no stdout", out == "", out[:200])
        check(
            f"error {name}: error line",
            err.startswith("error:") and needle in err and err.count("\n") == 1,
            repr(err),
        )
    code, out, err = run(["plan", "--input", "/nonexistent/batch.json"])
    check("missing file", code == 2 and out == "" and err.startswith("error:"), err)
    code, out, err = run(
        ["plan", "--strategy", "nope", "-i", os.path.join(GOLDEN, "small_explicit.json")]
    )
    check("unknown strategy", code == 2 and "strategy" in err and out == "", err)
    # Unknown names list the valid ones (the presets' and strategies' own lists).
    check(
        "unknown strategy lists the known",
        all(s in err for s in ("fcp", "megatron", "optimal")),
        err,
    )
    code, out, err = run(["simulate", "--model", "nope", "--steps", "1", "--warmup", "0", "-q"])
    check(
        "unknown model lists the presets",
        code == 2
        and err.count("\n") == 1
        and "unknown model preset 'nope' (known:" in err
        and "qwen3-8b" in err,
        err,
    )
    code, out, err = run(["simulate", "--cluster", "nope", "--steps", "1", "--warmup", "0", "-q"])
    check(
        "unknown cluster lists the presets",
        code == 2 and err.count("\n") == 1 and "h100-8x8" in err and "ascend910c-4x16" in err,
        err,
    )
    # A dataset where a length file belongs: one line naming `fcp lengths`.
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "docs.jsonl")
        with open(data, "w") as f:
            f.write('{"tokens": 5}\n')
        code, out, err = run(["simulate", "--lengths", data, "--steps", "1", "-q"])
        check(
            "--lengths on a JSONL dataset names fcp lengths",
            code == 2 and out == "" and err.count("\n") == 1 and "fcp lengths" in err,
            err,
        )
    # eval study: the grid's axes and the data's name come from the flags.
    with tempfile.TemporaryDirectory() as d:
        lengths = os.path.join(d, "mine.txt")
        with open(lengths, "w") as f:
            f.write("\n".join(str(300 + 97 * i) for i in range(200)) + "\n")
        code, out, err = run(
            [
                "eval",
                "study",
                "--quick",
                "--cluster",
                "h100-8x8",
                "--model",
                "qwen3-1.7b",
                "--gbs",
                "16,32",
                "--ranks",
                "16",
                "--lengths",
                lengths,
                "--out",
                d,
            ]
        )
        with open(os.path.join(d, "study.csv")) as f:
            rows = list(csv.DictReader(f)) if code == 0 else []
        check("eval study flags: exit 0", code == 0, err)
        check(
            "eval study flags: only the given cluster, model, gbs and ranks",
            rows
            and all(
                r["cluster"] == "h100-8x8"
                and r["model"] == "qwen3-1.7b"
                and (r["part"] != "batch size" or r["global_batch"] in ("16", "32"))
                and (r["part"] != "scale" or r["ranks"] == "16")
                for r in rows
            ),
            rows[:2],
        )
        check(
            "eval study flags: the data named after its file",
            any(r["dataset"] == "mine (real)" for r in rows)
            and not any("go-src" in r["dataset"] for r in rows),
            [r["dataset"] for r in rows],
        )
    study_default_lengths_tests()
    help_defaults_in_range_tests()
    # An output in a missing directory fails before the work (no progress
    # line; for lengths, before the input is opened), naming the flag.
    missing = "/nonexistent/dir/"
    for args, flag in (
        (
            ["simulate", "--strategies", "fcp", "--steps", "2", "--trace", missing + "t.json"],
            "trace",
        ),
        (["simulate", "--strategies", "fcp", "--steps", "2", "--plot", missing + "p.png"], "plot"),
        (
            [
                "simulate",
                "--strategies",
                "fcp",
                "--steps",
                "2",
                "--save-plans",
                missing + "p.jsonl",
            ],
            "save-plans",
        ),
        (
            [
                "profile",
                "--target",
                "sim:h100-8x8",
                "--model",
                "qwen3-8b",
                "--out",
                missing + "c.json",
            ],
            "out",
        ),
        (["lengths", "/nonexistent/lengths.txt", "-o", missing + "l.txt"], "out"),
    ):
        code, out, err = run(args)
        check(
            f"{args[0]} --{flag} in a missing directory: one error line before the work",
            code == 2
            and out == ""
            and err.count("\n") == 1
            and err.startswith(f"error: {flag}: cannot write")
            and "no directory '/nonexistent/dir'" in err,
            err[-300:],
        )
    code, out, err = run(["plan", "--format", "xml"], stdin=with_())
    check("bad format flag", code == 2 and err.startswith("error:") and out == "", err)
    code, out, err = run(["plan", "--help"])
    check("help", code == 0 and "--strategy" in out and "--cost-model" in out, err)
    code, out, err = run(["no-such-command"])
    check("unknown command", code == 2 and err.startswith("error:"), err)
    # --cost-model overrides: a file written by hand is accepted and applied.
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"cost_model": {"alpha1": 0, "alpha2": 1e-6}}, f)
    code, out, err = run(["plan", "--cost-model", f.name], stdin=with_())
    os.unlink(f.name)
    check("cost-model file", code == 0 and json.loads(out)["est_ms"] > 0, err)


golden_tests()
error_tests()
sys.exit(summary())
