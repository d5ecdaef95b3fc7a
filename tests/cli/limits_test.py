#!/usr/bin/env python3
"""Limits and hostile inputs of the `fcp` CLI (issues 8, 18 and 30).

Every case must either be planned correctly (exit 0, a plan that passes an
independent structural check; or exit 3, "infeasible", with one `error:` line)
or be rejected with exit 2, exactly one `error:` line on stderr and nothing on
stdout. A signal, exit 1 or a hang (TIMEOUT_S) is a failure. Issue 18 adds:
every strategy on the same limits, the near-equal-memory cases, output that
cannot be written (/dev/full, closed stdout, unwritable --out), escaped
one-line errors, NUL bytes, streamed input under a memory limit, pipes and
directories as input, checked integer flags, bounded `simulate`/`profile`.

Usage: limits_test.py FCP_BINARY    Prints 'N passed, N failed' last.
"""

import re
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

from checks import check, list_schedule_ms, summary

FCP = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 120

# A complete, explicit cost model (qwen3-8b-like magnitudes) so cases do not
# depend on preset values.
CM = {
    "alpha1": 1.2e-11,
    "alpha2": 2.5e-6,
    "beta1": 1e-3,
    "alpha3": 1.3e5,
    "beta2": 1e-4,
    "bw_intra_node": 1.96e11,
    "bw_inter_node": 5e10,
    "mem_per_token": 4.5e5,
    "mem_static": 2.2e10,
    "mem_capacity": 6.4e10,
}

# Address-space limit for the child (no unbounded memory); disabled for
# sanitizer builds, which reserve terabytes of shadow memory up front.
MEM_LIMIT_BYTES = 8 << 30


def _limit():
    resource.setrlimit(resource.RLIMIT_AS, (MEM_LIMIT_BYTES, MEM_LIMIT_BYTES))


def _probe_limit():
    try:
        p = subprocess.run([FCP, "--help"], capture_output=True, preexec_fn=_limit, timeout=60)
        return p.returncode == 0
    except Exception:
        return False


USE_LIMIT = _probe_limit()


def run(args, stdin=b"", timeout=TIMEOUT_S):
    """(exit code, stdout, stderr, seconds); exit code "timeout" on a hang."""
    if isinstance(stdin, str):
        stdin = stdin.encode()
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            [FCP] + args,
            input=stdin,
            capture_output=True,
            timeout=timeout,
            preexec_fn=_limit if USE_LIMIT else None,
        )
    except subprocess.TimeoutExpired as e:
        return "timeout", e.stdout or b"", (e.stderr or b"") + b"<timeout>", time.monotonic() - t0
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def batch(seqs, ranks=64, per_node=16, cm=None, **extra):
    d = {
        "cluster": {"ranks": ranks, "ranks_per_node": per_node},
        "cost_model": dict(CM if cm is None else cm),
        "sequences": seqs,
    }
    d.update(extra)
    return json.dumps(d)


def plan_problem(inp, plan):
    """Independent structural check of a plan (None when fine)."""
    n = inp["cluster"]["ranks"]
    k = len(inp["sequences"])
    cm = inp["cost_model"]
    seen = [0] * k
    total = 0.0
    for m, mb in enumerate(plan["micro_batches"]):
        used = set()
        worst = 0.0
        if not mb["groups"]:
            return f"micro-batch {m} has no groups"
        for g in mb["groups"]:
            if not g["ranks"] or not g["sequences"]:
                return "empty group"
            for r in g["ranks"]:
                if not 0 <= r < n or r in used:
                    return f"rank {r} outside [0,N) or used twice"
                used.add(r)
            tokens = 0
            for s in g["sequences"]:
                if not 0 <= s < k:
                    return f"sequence index {s} out of range"
                seen[s] += 1
                x = inp["sequences"][s]
                tokens += x["length"] if isinstance(x, dict) else x
            mem = cm["mem_static"] + cm["mem_per_token"] * tokens / len(g["ranks"])
            if mem > cm["mem_capacity"] * (1 + 1e-9):
                return f"group memory {mem} > capacity"
            if not (math.isfinite(g["est_ms"]) and g["est_ms"] >= 0):
                return f"bad group est_ms {g['est_ms']}"
            if not 0 <= g["mem_bytes"] <= cm["mem_capacity"] * (1 + 1e-9) + 1:
                return f"bad mem_bytes {g['mem_bytes']}"
            worst = max(worst, g["est_ms"])
        if abs(mb["est_ms"] - worst) > 1e-9 * max(1.0, worst):
            return "micro-batch est_ms is not the max of its groups"
        total += mb["est_ms"]
    if any(c != 1 for c in seen):
        return "some sequence not scheduled exactly once"
    makespan = list_schedule_ms(plan, n)
    if not math.isfinite(plan["est_ms"]) or abs(plan["est_ms"] - makespan) > 1e-9 * max(
        1.0, makespan
    ):
        return "plan est_ms is not the list-schedule makespan of its micro-batches"
    if plan["est_ms"] > total * (1 + 1e-9):
        return "plan est_ms exceeds the sum of its micro-batches"
    if not plan["lower_bound_ms"] <= plan["est_ms"] * (1 + 1e-9):
        return "lower bound above the estimate"
    return None


def expect(name, text, want, args=(), contains=None, validate=True, timeout=TIMEOUT_S):
    """want: a set of allowed outcomes among {"ok", "infeasible", "error"}.
    contains: a substring the error line must contain (the field)."""
    code, out, err, wall = run(["plan"] + list(args), stdin=text, timeout=timeout)
    lines = err.decode("utf-8", "replace").strip().splitlines()
    outcome = {0: "ok", 2: "error", 3: "infeasible"}.get(code)
    if outcome is None:
        check(name, False, f"exit {code}; stderr: {err[-400:]!r}")
        return None
    if outcome not in want:
        check(name, False, f"{outcome} (exit {code}), want {sorted(want)}; stderr: {err[-300:]!r}")
        return None
    if outcome in ("error", "infeasible"):
        ok = len(lines) == 1 and lines[0].startswith("error: ") and out == b""
        # An infeasible batch names the sequence; `contains` is checked on
        # rejections, and on infeasibility when that is the only outcome wanted.
        if ok and outcome == "infeasible":
            ok = "sequences[" in lines[0]
        if ok and contains and (outcome == "error" or want == {"infeasible"}):
            ok = contains in lines[0]
        check(name, ok, f"stderr {lines[:3]!r}, stdout {out[:100]!r}, want {contains!r}")
        return None
    plan = json.loads(out)
    problem = plan_problem(json.loads(text), plan) if validate else None
    check(name, problem is None, problem or "")
    return plan


def length_cases():
    expect(
        "length 2^40 on a roomy model", batch([2**40, 1], cm=dict(CM, mem_per_token=1e-3)), {"ok"}
    )
    expect(
        "length 2^40 on the default model is infeasible",
        batch([2**40, 5]),
        {"infeasible"},
        contains="sequences[0]",
    )
    expect("length 2^40 + 1", batch([5, 2**40 + 1]), {"error"}, contains="sequences[1]")
    expect("length 2^63", batch([2**63]), {"error"}, contains="sequences[0]")
    expect("length 2^64", batch([2**64]), {"error"}, contains="sequences[0]")
    expect("length 1e30", batch([1e30]), {"error"}, contains="sequences[0]")
    expect("length 0", batch([0]), {"error"}, contains="sequences[0]")
    expect("length -1", batch([-1]), {"error"}, contains="sequences[0]")
    expect("length 1.5", batch([1.5]), {"error"}, contains="sequences[0]")
    expect("length 4096.0 is an integer", batch([4096.0]), {"ok"})
    expect("length as string", batch(["4096"]), {"error"}, contains="sequences[0]")
    expect("length true", batch([True]), {"error"}, contains="sequences[0]")
    expect("length null", batch([None]), {"error"}, contains="sequences[0]")
    expect(
        "eta 1.0000001",
        batch([{"length": 5, "eta": 1.0000001}]),
        {"error"},
        contains="sequences[0].eta",
    )
    expect("eta -0.0 is causal", batch([{"length": 5, "eta": -0.0}]), {"ok"})
    expect(
        "every length 2^40 with tiny memory",
        batch([2**40] * 8, cm=dict(CM, mem_per_token=1e-6)),
        {"ok"},
    )
    expect(
        "1..2^40 powers of two",
        batch([2**i for i in range(41)], cm=dict(CM, mem_per_token=1e-6)),
        {"ok"},
    )


def cluster_cases():
    seqs = [131072, 65536, 4096, 4096, 900, 17, 1]
    for ranks, per_node in [
        (65536, 16),
        (65536, 7),
        (65535, 16),
        (1, 1),
        (7, 3),
        (100, 64),
        (64, 1000),
        (1000, 999),
    ]:
        for strategy in ("fcp", "fcp-paper"):
            # 131072 tokens need 2 ranks of this model's memory: N = 1 is infeasible.
            expect(
                f"N={ranks} R={per_node} {strategy}",
                batch(seqs, ranks, per_node),
                {"ok"} if ranks > 1 else {"infeasible"},
                args=["--strategy", strategy],
            )
    expect(
        "N = 1 and a too-long sequence",
        batch([131072], 1, 1),
        {"infeasible"},
        contains="sequences[0]",
    )
    expect("N = 0", batch([5], 0, 1), {"error"}, contains="cluster.ranks")
    expect("N = -4", batch([5], -4, 1), {"error"}, contains="cluster.ranks")
    expect("N = 2^20 + 1", batch([5], 2**20 + 1, 8), {"error"}, contains="cluster.ranks")
    expect("N = 2^31", batch([5], 2**31, 8), {"error"}, contains="cluster.ranks")
    expect("R = 0", batch([5], 8, 0), {"error"}, contains="cluster.ranks_per_node")
    expect("R = 2^40", batch([5], 8, 2**40), {"error"}, contains="cluster.ranks_per_node")


def coefficient_cases():
    for key in CM:
        expect(
            f"{key} negative",
            batch([4096], cm=dict(CM, **{key: -1.0})),
            {"error"},
            contains=f"cost_model.{key}",
        )
        expect(
            f"{key} = 1e308",
            batch([4096, 131072], cm=dict(CM, **{key: 1e308})),
            {"ok", "infeasible", "error"},
            contains="cost_model",
        )
        expect(
            f"{key} = 1e-320 (denormal)",
            batch([4096, 131072], cm=dict(CM, **{key: 1e-320})),
            {"ok", "infeasible", "error"},
            contains="cost_model",
        )
        if key not in ("bw_intra_node", "bw_inter_node", "mem_capacity"):
            expect(
                f"{key} = 0",
                batch([4096, 131072, 7], cm=dict(CM, **{key: 0.0})),
                {"ok", "infeasible"},
            )
        else:
            expect(
                f"{key} = 0",
                batch([4096], cm=dict(CM, **{key: 0.0})),
                {"error"},
                contains=f"cost_model.{key}",
            )
    # NaN / Infinity are not JSON; Python writes them as bare words.
    for word in ("NaN", "Infinity", "-Infinity"):
        text = batch([4096]).replace('"alpha1": 1.2e-11', f'"alpha1": {word}')
        expect(f"alpha1 = {word}", text, {"error"})
    # Out of double range: nlohmann throws out_of_range (was exit 1 "internal").
    expect("length 1e400", '{"sequences": [1e400]}', {"error"}, contains="input")
    expect(
        "alpha1 = -1e309",
        batch([4096]).replace('"alpha1": 1.2e-11', '"alpha1": -1e309'),
        {"error"},
        contains="input",
    )
    expect(
        "alpha1 as string",
        batch([4096], cm=dict(CM, alpha1="1e-11")),
        {"error"},
        contains="cost_model.alpha1",
    )
    expect(
        "mem_capacity == mem_static",
        batch([4096], cm=dict(CM, mem_capacity=CM["mem_static"])),
        {"error"},
        contains="cost_model.mem_capacity",
    )
    expect(
        "every time coefficient 0",
        batch(
            [4096, 8, 131072], cm=dict(CM, alpha1=0.0, alpha2=0.0, beta1=0.0, alpha3=0.0, beta2=0.0)
        ),
        {"ok"},
    )
    expect(
        "huge alpha1 and 2^40 tokens (times overflow)",
        batch([2**40], cm=dict(CM, alpha1=1e300, mem_per_token=1e-9)),
        {"error"},
        contains="cost_model",
    )
    # Found by fuzz/planner_fuzz: alpha3 * sum * (d - 1) overflowed before the
    # division by d and bw (fcp-paper aborted: FCP_CHECK best < kInf).
    for strategy in ("fcp", "fcp-paper"):
        expect(
            f"alpha3 = 1e300 with a 10^7-token sequence, {strategy}",
            batch(
                [50] * 19 + [9967640],
                247,
                30,
                cm=dict(
                    CM,
                    alpha3=1e300,
                    bw_intra_node=8.5e11,
                    bw_inter_node=2.125e11,
                    mem_per_token=2.125e6,
                    mem_static=8.5e10,
                    mem_capacity=2.71e11,
                ),
            ),
            {"error"},
            contains="cost_model",
            args=["--strategy", strategy],
        )
    expect(
        "huge memory capacity (mem_bytes beyond int64)",
        batch([4096, 8192], cm=dict(CM, mem_per_token=1e290, mem_static=0.0, mem_capacity=1e300)),
        {"error"},
        contains="cost_model.mem_capacity",
    )
    expect(
        "memory capacity 2^62 is fine",
        batch([4096, 2**40], cm=dict(CM, mem_per_token=1e3, mem_static=0.0, mem_capacity=2.0**62)),
        {"ok"},
    )
    # Found by fuzz/planner_fuzz: zero work everywhere made the micro-batch
    # split fail at every count (FCP_CHECK abort) when long sequences need
    # separate micro-batches.
    zero_work = dict(
        CM,
        alpha1=0.0,
        alpha2=0.0,
        beta1=0.0,
        alpha3=0.0,
        beta2=3e-4,
        mem_per_token=2.125e6,
        mem_static=6.49e10,
        mem_capacity=2.077e11,
    )
    for strategy in ("fcp", "fcp-paper"):
        expect(
            f"zero work, 19 long sequences, {strategy}",
            batch([8372157] * 18 + [4] * 24 + [8176, 8372157], 247, 24, cm=zero_work),
            {"ok"},
            args=["--strategy", strategy],
        )
    expect(
        "unknown coefficient",
        batch([4096], cm=dict(CM, alpha9=1.0)),
        {"error"},
        contains="cost_model.alpha9",
    )


def structure_cases():
    expect("empty batch", batch([]), {"error"}, contains="sequences")
    expect(
        "no sequences key", json.dumps({"cluster": {"ranks": 8}}), {"error"}, contains="sequences"
    )
    expect("empty input", "", {"error"})
    expect("whitespace input", "  \n\t ", {"error"})
    expect("top level array", "[1, 2, 3]", {"error"}, contains="input")
    expect("top level number", "42", {"error"}, contains="input")
    expect("sequences is an object", batch({"a": 1}), {"error"}, contains="sequences")
    expect("unknown top-level key", batch([5], extra_key=1), {"error"}, contains="extra_key")
    # Duplicate keys at every level.
    good = batch([5, 6])
    expect(
        "duplicate top-level key",
        good[:-1] + ', "sequences": [7]}',
        {"error"},
        contains="duplicate",
    )
    expect(
        "duplicate cost_model key",
        good.replace('"alpha2"', '"alpha1": 1e-11, "alpha2"', 1),
        {"error"},
        contains="duplicate",
    )
    expect(
        "duplicate cluster key",
        good.replace('"ranks": 64', '"ranks": 64, "ranks": 8', 1),
        {"error"},
        contains="duplicate",
    )
    expect(
        "duplicate sequence key",
        batch([{"length": 5}]).replace('"length": 5', '"length": 5, "length": 9'),
        {"error"},
        contains="duplicate",
    )
    expect(
        "same key in sibling objects is fine",
        batch([{"length": 5, "eta": 0.5}, {"length": 6, "eta": 0.5}]),
        {"ok"},
    )
    # Nesting.
    for depth in (15, 17, 100, 100000):
        nested = "[" * depth + "1" + "]" * depth
        # 15 levels parse (then sequences[0] is not an integer); more hit the limit.
        expect(
            f"nested {depth} deep",
            '{"sequences": ' + nested + "}",
            {"error"},
            contains="sequences[0]" if depth < 16 else "nested deeper",
        )
    expect(
        "nested objects 100000 deep",
        '{"model": ' + '{"a":' * 100000 + "1" + "}" * 100000 + "}",
        {"error"},
    )
    # Truncation at every 5th byte of a valid batch.
    text = batch(
        [131072, {"length": 2048, "attention": "full"}, {"length": 900, "eta": 0.4}], 12, 5
    )
    bad = []
    for cut in range(0, len(text) - 1, 5):
        code, out, err, _ = run(["plan"], stdin=text[:cut])
        lines = err.decode("utf-8", "replace").strip().splitlines()
        if code != 2 or len(lines) != 1 or not lines[0].startswith("error: ") or out:
            bad.append((cut, code, lines[:2]))
    check(f"truncated JSON at {len(range(0, len(text) - 1, 5))} cut points", not bad, repr(bad[:3]))
    # Non-UTF-8 and odd bytes.
    expect("invalid UTF-8 in a string", b'{"model": "qwen3-\xff\xfe", "sequences": [5]}', {"error"})
    expect("invalid UTF-8 in a key", b'{"\xc3\x28": 1, "sequences": [5]}', {"error"})
    expect("invalid UTF-8 outside strings", b'{"sequences": [5, \xff]}', {"error"})
    expect("NUL byte", b'{"sequences": [5]\x00}', {"error"})
    expect("UTF-16 input", '{"sequences": [5]}'.encode("utf-16"), {"error"})
    expect("trailing garbage", batch([5]) + " x", {"error"})
    expect("two documents", batch([5]) + batch([6]), {"error"})
    expect("lone surrogate escape in a key", '{"\\ud800": 1, "sequences": [5]}', {"error"})
    expect(
        "overlong escape in model name",
        '{"model": "\\u0000", "sequences": [5]}',
        {"error"},
        contains="model",
    )
    expect(
        "long unknown model name",
        json.dumps({"model": "x" * 100000, "sequences": [5]}),
        {"error"},
        contains="model",
    )
    code, out, err, _ = run(["plan", "--input", "/nonexistent/dir/batch.json"])
    check("missing input file", code == 2 and err.startswith(b"error: ") and not out, repr(err))
    code, out, err, _ = run(["plan", "--input", "/"])
    check(
        "directory as input",
        code == 2 and err == b"error: /: is a directory, not a file\n" and not out,
        repr(err),
    )


def scale_cases():
    # 10^6 sequences. Parsing all of them is the part that scales; a bad last
    # element makes the CLI read every sequence and then reject (cheap path),
    # and one plan of 10^6 one-token sequences on 64 ranks checks the planner.
    many = [1 + (i % 7) for i in range(10**6)]
    text = batch(many[:-1] + [0])
    code, out, err, wall = run(["plan"], stdin=text)
    check(
        "10^6 sequences, last one bad",
        code == 2 and b"sequences[999999]" in err,
        f"exit {code} {err[:200]!r}",
    )
    print(f"info: 10^6-sequence parse+reject: {wall:.2f} s")
    # Planning: 10^5 sequences by default (about 1-2 s in a release build);
    # FCP_LIMITS_FULL=1 plans all 10^6 (about 20 s release, minutes under ASan).
    count = 10**6 if os.environ.get("FCP_LIMITS_FULL") else 10**5
    text = batch(many[:count], 64, 16, cm=dict(CM, mem_per_token=1.0))
    code, out, err, wall = run(["plan"], stdin=text)
    ok = code == 0
    if ok:
        problem = plan_problem(json.loads(text), json.loads(out))
        ok = problem is None
        err = (problem or "").encode()
    check(f"{count} sequences planned", ok, f"exit {code} {err[:200]!r}")
    print(f"info: {count}-sequence plan on N=64: {wall:.2f} s")


# ---------------------------------------------------------------------------
# Issue 18.


def one_error_line(code, out, err, want_code=2, contains=None):
    """None if the run ended with `want_code`, one printable `error:` line on
    stderr (containing `contains`) and nothing on stdout; else the problem."""
    if code != want_code:
        return f"exit {code}, want {want_code}; stderr {err[-300:]!r}"
    if out:
        return f"stdout not empty: {out[:100]!r}"
    # Long commands print progress lines ("[eval gap] instance 1/1") on stderr
    # before the error; the error itself must still be exactly one line.
    err = re.sub(rb"(?m)^\[[a-z ]+\] [^\n]*\n", b"", err)
    if not err.startswith(b"error: ") or err.count(b"\n") != 1 or not err.endswith(b"\n"):
        return f"not one error line: {err[:300]!r}"
    line = err[:-1]
    if any(b < 0x20 or b == 0x7F for b in line):
        return f"control byte in the error line: {line[:300]!r}"
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return f"error line is not UTF-8: {line[:300]!r}"
    if contains and contains.encode() not in line:
        return f"error line lacks {contains!r}: {line[:300]!r}"
    return None


def expect_error(name, args, stdin=b"", contains=None, want_code=2, timeout=TIMEOUT_S):
    code, out, err, _ = run(args, stdin=stdin, timeout=timeout)
    problem = one_error_line(code, out, err, want_code, contains)
    check(name, problem is None, problem or "")


def strategy_names():
    _, out, _, _ = run(["plan", "--help"])
    text = out.decode()
    names = text[text.index("one of: ") + len("one of: ") :].split("\n")[0]
    return [n.strip() for n in names.split(",") if n.strip()]


def strategy_cases():
    """Every strategy on the limits: tiny clusters, R not dividing N, an
    infeasible sequence, bad input, and the near-equal-memory cases where
    mem_static is just below mem_capacity (issue 18: the minimum-degree search
    stepped one degree at a time; [10000] took about 4 h)."""
    names = strategy_names()
    check("strategies listed", len(names) >= 8, repr(names))
    small = [131072, 65536, 4096, 4096, 900, 17, 1]
    free = 4.5e5 * 4096 / 64  # bytes a 4096-token sequence needs on each of 64 ranks
    for s in names:
        args = ["--strategy", s, "--time-limit", "2"]
        # `optimal` is exact and refuses instances beyond its size (exit 2);
        # DeepSpeed-Ulysses needs a model's head count (exit 2 without one).
        anything = {"ok", "infeasible", "error"}
        expect(f"{s}: small batch, N=16 R=8", batch(small, 16, 8), anything, args=args)
        expect(f"{s}: N=12 R=5 (R does not divide N)", batch(small[2:], 12, 5), anything, args=args)
        expect(f"{s}: N=1", batch([4096, 1], 1, 1), anything, args=args)
        expect(
            f"{s}: a sequence too long for N ranks",
            batch([131072], 1, 1),
            {"infeasible", "error"},
            args=args,
        )
        expect(f"{s}: length 0", batch([5, 0]), {"error"}, contains="sequences[1]", args=args)
        expect(
            f"{s}: N = 2^20 + 1",
            batch([5], 2**20 + 1, 8),
            {"error"},
            contains="cluster.ranks",
            args=args,
        )
        # With a model shape (DeepSpeed-Ulysses needs its head count).
        expect(
            f"{s}: with a model",
            batch([32768, 8192, 4096, 1024, 77], 16, 8, model="qwen3-8b"),
            {"ok"} if s != "optimal" else anything,
            args=args,
        )
        # Near-equal memory: 6.4e-5 bytes free per rank: nothing fits.
        expect(
            f"{s}: mem_static = mem_capacity (1 - 1e-15)",
            batch([10], 64, 16, cm=dict(CM, mem_static=CM["mem_capacity"] * (1 - 1e-15))),
            {"infeasible", "error"},
            args=args,
            timeout=30,
        )
        expect(
            f"{s}: mem_static = mem_capacity (1 - 1e-15), 10000 tokens",
            batch([10000], 64, 16, cm=dict(CM, mem_static=CM["mem_capacity"] * (1 - 1e-15))),
            {"infeasible", "error"},
            args=args,
            timeout=30,
        )
        # Just enough memory for a 4096-token sequence on all 64 ranks.
        expect(
            f"{s}: memory for exactly 64 ranks",
            batch(
                [4096, 64, 1],
                64,
                16,
                cm=dict(CM, mem_static=CM["mem_capacity"] - free * (1 + 1e-9)),
            ),
            anything,
            args=args,
            timeout=30,
        )
    # The issue's reproducer, verbatim (default preset, N = 64).
    for k in (10, 10000):
        expect(
            f"issue 18 reproducer, sequences [{k}]",
            '{"cost_model":{"mem_static":63999999999.99994},"sequences":[%d]}' % k,
            {"infeasible"},
            contains="sequences[0]",
            timeout=30,
        )


def output_cases():
    """A write error on stdout or an output file is exit 2 with one `error:`
    line (issue 18: exit 0 with the output lost)."""
    small = batch([4096, 900, 17], 8, 8)
    commands = [
        ("plan", ["plan"], small),
        ("plan table", ["plan", "--format", "table"], small),
        (
            "simulate",
            [
                "simulate",
                "--steps",
                "1",
                "--warmup",
                "0",
                "--gbs",
                "8",
                "--strategies",
                "fcp",
                "-q",
            ],
            b"",
        ),
        (
            "eval gap",
            [
                "eval",
                "gap",
                "--instances",
                "1",
                "--max-sequences",
                "3",
                "--max-ranks",
                "4",
                "--strategies",
                "fcp",
            ],
            b"",
        ),
        (
            "profile",
            [
                "profile",
                "--target",
                "sim:ascend910c-4x16",
                "--lengths",
                "4096,8192,16384",
                "--degrees",
                "1,2,4",
                "--repeats",
                "1",
            ],
            b"",
        ),
        ("help", ["plan", "--help"], b""),
    ]
    for name, args, stdin in commands:
        with open("/dev/full", "wb") as full:
            p = subprocess.run(
                [FCP] + args,
                input=stdin if isinstance(stdin, bytes) else stdin.encode(),
                stdout=full,
                stderr=subprocess.PIPE,
                timeout=TIMEOUT_S,
            )
        problem = one_error_line(p.returncode, b"", p.stderr, 2, "stdout: output lost")
        check(f"{name} > /dev/full", problem is None, problem or "")
        p = subprocess.run(
            [FCP] + args,
            input=stdin if isinstance(stdin, bytes) else stdin.encode(),
            capture_output=True,
            timeout=TIMEOUT_S,
            preexec_fn=lambda: os.close(1),
        )
        problem = one_error_line(p.returncode, b"", p.stderr, 2, "stdout is closed")
        check(f"{name} with stdout closed", problem is None, problem or "")
    with tempfile.TemporaryDirectory() as tmp:
        profile = [
            "profile",
            "--target",
            "sim:ascend910c-4x16",
            "--lengths",
            "4096,8192,16384",
            "--degrees",
            "1,2,4",
            "--repeats",
            "1",
            "--format",
            "json",
        ]
        expect_error(
            "profile --out /dev/full",
            profile + ["--out", "/dev/full"],
            contains="/dev/full: cannot write",
        )
        expect_error(
            "profile --out into a missing folder",
            profile + ["--out", os.path.join(tmp, "no", "such.json")],
            contains="cannot write",
        )
        expect_error("profile --out a directory", profile + ["--out", tmp], contains="cannot write")
        report = os.path.join(tmp, "report.json")
        code, out, err, _ = run(profile + ["--out", report])
        check(
            "profile --out writes the report", code == 0 and os.path.getsize(report) > 0, repr(err)
        )
        # The report is a valid --cost-model file (its extra keys are known).
        code, out, err, _ = run(["plan", "--cost-model", report], stdin=small)
        check("plan --cost-model <profile report>", code == 0, repr(err))
        with open(report) as f:
            doc = json.load(f)
        for key, value in (("bogus", 1), ("samples", "many"), ("alpha1", 1e-11)):
            bad = os.path.join(tmp, f"bad-{key}.json")
            with open(bad, "w") as f:
                json.dump(dict(doc, **{key: value}), f)
            expect_error(
                f"--cost-model with {key!r} beside cost_model",
                ["plan", "--cost-model", bad],
                stdin=small,
                contains=key,
            )


def message_cases():
    """Errors are one printable line whatever the input holds (issue 18)."""
    for what, raw in (
        ("newline", "a\\nb"),
        ("CR", "a\\rb"),
        ("ANSI escape", "\\u001b[2Jx"),
        ("NUL escape", "a\\u0000b"),
        ("C1 CSI", "\\u009b2J"),
        ("line separator", "a\\u2028b"),
    ):
        expect_error(
            f"{what} in a model name",
            ["plan"],
            stdin='{"model": "%s", "sequences": [5]}' % raw,
            contains="model",
        )
        expect_error(f"{what} in a key", ["plan"], stdin='{"%s": 1, "sequences": [5]}' % raw)
    expect_error(
        "raw newline + ESC in a flag value",
        ["plan", "--strategy", "x\n\x1b[31my"],
        stdin=batch([5]),
        contains="strategy",
    )
    expect_error(
        "raw control bytes in a file name",
        ["plan", "--input", "/no/such\n\r\x1bfile"],
        contains="cannot open",
    )
    expect_error(
        "invalid UTF-8 in a model name",
        ["plan"],
        stdin=b'{"model": "q\xff\xfe\xc3", "sequences": [5]}',
    )
    expect_error(
        "NUL then garbage after a valid batch",
        ["plan"],
        stdin=batch([5]).encode() + b"\0garbage",
        contains="NUL byte at offset",
    )
    expect_error(
        "NUL inside a string",
        ["plan"],
        stdin=b'{"model": "a\0b", "sequences": [5]}',
        contains="NUL byte",
    )
    expect_error("unknown command with an escape", ["\x1b[2Jplan"], contains="unknown command")


def input_path_cases():
    text = batch([4096, 17], 8, 8)
    code, out, err, _ = run(["plan", "--input", "/dev/stdin"], stdin=text)
    check(
        "--input /dev/stdin from a pipe", code == 0 and json.loads(out)["status"] == "ok", repr(err)
    )
    with tempfile.TemporaryDirectory() as tmp:
        expect_error(
            "directory as --cost-model",
            ["plan", "--cost-model", tmp],
            stdin=text,
            contains="is a directory",
        )
        expect_error(
            "directory as --lengths",
            ["simulate", "--lengths", tmp, "-q"],
            contains="is a directory",
        )
        fifo = os.path.join(tmp, "batch.fifo")
        os.mkfifo(fifo)
        proc = subprocess.Popen(
            [FCP, "plan", "--input", fifo], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        with open(fifo, "w") as f:
            f.write(text)
        out, err = proc.communicate(timeout=TIMEOUT_S)
        check("--input FIFO", proc.returncode == 0 and json.loads(out)["status"] == "ok", repr(err))
        expect_error(
            "/dev/zero as input (NUL bytes)",
            ["plan", "--input", "/dev/zero"],
            contains="NUL byte at offset 0",
        )


def flag_cases():
    """Integer flags are decimal and range-checked; long runs are bounded."""
    sim = ["profile", "--target", "sim:ascend910c-4x16", "--lengths", "4096,8192,16384"]
    expect_error(
        "profile --degrees 4294967298 (was read as 2)",
        sim + ["--degrees", "4294967298"],
        contains="degrees",
    )
    expect_error("profile --degrees 1,x", sim + ["--degrees", "1,x"], contains="degrees")
    expect_error(
        "profile --lengths 2^64", sim + ["--lengths", "18446744073709551616"], contains="lengths"
    )
    expect_error(
        "profile --target cpu --lengths 3000000 (ran out of memory)",
        ["profile", "--target", "cpu", "--lengths", "3000000"],
        contains="lengths[0]",
    )
    expect_error(
        "simulate --steps 1000000000", ["simulate", "--steps", "1000000000", "-q"], contains="steps"
    )
    expect_error("simulate --steps 1e9", ["simulate", "--steps", "1e9", "-q"], contains="--steps")
    expect_error(
        "simulate --warmup 4294967296",
        ["simulate", "--warmup", "4294967296", "-q"],
        contains="--warmup",
    )
    expect_error(
        "simulate: every batch drawn up front is capped",
        ["simulate", "--gbs", "10000000", "--steps", "3", "-q"],
        contains="steps",
    )
    expect_error(
        "plan --cp 4294967298", ["plan", "--cp", "4294967298"], stdin=batch([5]), contains="--cp"
    )
    expect_error(
        "plan --max-seqlen -1",
        ["plan", "-s", "megatron-dcp", "--max-seqlen", "-1"],
        stdin=batch([5]),
        contains="max_seqlen_per_dp_cp_rank",
    )
    expect_error(
        "plan --capacity -1",
        ["plan", "-s", "bytescale", "--capacity", "-1"],
        stdin=batch([5]),
        contains="capacity_tokens",
    )
    expect_error(
        "simulate --max-seqlen -1",
        ["simulate", "--max-seqlen", "-1", "-q"],
        contains="max_seqlen_per_dp_cp_rank",
    )
    expect_error(
        "simulate --capacity -1", ["simulate", "--capacity", "-1", "-q"], contains="capacity_tokens"
    )
    expect_error(
        "plan --seed 0x10 (hex)", ["plan", "--seed", "0x10"], stdin=batch([5]), contains="--seed"
    )
    expect_error(
        "plan --seed -1 (unsigned)", ["plan", "--seed", "-1"], stdin=batch([5]), contains="--seed"
    )
    expect_error(
        "eval noise --ranks 4294967296",
        ["eval", "noise", "--ranks", "4294967296"],
        contains="ranks",
    )
    expect_error(
        "eval noise --feedback-steps 65",
        ["eval", "noise", "--ranks", "8", "--feedback-steps", "65"],
        contains="feedback_steps",
    )
    expect_error(
        "eval noise --prior-sigma 0",
        ["eval", "noise", "--ranks", "8", "--feedback-steps", "1", "--prior-sigma", "0"],
        contains="prior_sigma",
    )
    # "08" is decimal 8 (CLI11 alone reads a leading 0 as octal and rejects it).
    text = batch([4096] * 8, 16, 8)
    a = run(["plan", "--strategy", "megatron", "--cp", "08"], stdin=text)
    b = run(["plan", "--strategy", "megatron", "--cp", "8"], stdin=text)
    same = (
        a[0] == 0
        and b[0] == 0
        and json.loads(a[1])["micro_batches"] == json.loads(b[1])["micro_batches"]
    )
    check("--cp 08 is decimal 8", same, repr(a[2]))


def memory_cases():
    """The input is parsed while it streams (issue 18: a 200 MB batch peaked at
    3.7 GB and died with `internal: std::bad_alloc` under a 3 GiB limit)."""
    if not USE_LIMIT:
        # Sanitizer builds reserve terabytes of shadow memory, so no limit can
        # be set and this case would check nothing scale_cases does not (the
        # streamed parse and a rejection), at 85 s under ASan: it runs in the
        # release suite, where the 1 GiB limit holds.
        print("info: memory_cases: not run without a memory limit (sanitizer build)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "big.json")
        count = 10**7 + 1
        with open(path, "w") as f:
            f.write('{"cluster": {"ranks": 64}, "sequences": [')
            chunk = '{"length": 4096},' * 100000
            for _ in range(count // 100000):
                f.write(chunk)
            f.write('{"length": 4096}]}')
        size_mb = os.path.getsize(path) / 1e6
        limit = 1 << 30

        def one_gib():
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        t0 = time.monotonic()
        p = subprocess.run(
            [FCP, "plan", "--input", path],
            capture_output=True,
            timeout=TIMEOUT_S,
            preexec_fn=one_gib,
        )
        wall = time.monotonic() - t0
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        problem = one_error_line(p.returncode, p.stdout, p.stderr, 2, "at most 10000000 sequences")
        check(
            f"{size_mb:.0f} MB input with 10^7 + 1 sequences under a 1 GiB limit",
            problem is None,
            problem or "",
        )
        print(
            f"info: {size_mb:.0f} MB, 10^7 + 1 sequences rejected in {wall:.1f} s; "
            f"peak RSS of any child so far {peak_mb:.0f} MB"
        )


def deadline_cases():
    # flexsp's --time-limit covers the whole planning call, set-up included
    # (issue 18): 10^6 github-like sequences (log-normal mu 6.6, sigma 1.75,
    # <= 128k tokens, seeded) with a 1 s limit. The bound is deliberately
    # generous (5 s of planning; 25 s without the memory limit, i.e. under
    # sanitizers) so that a loaded machine cannot make it flake; the +-10 %
    # figures are measured by bench/flexsp_deadline.py (docs/baselines.md).
    import random

    rng = random.Random(18)
    seqs = [max(1, min(131072, int(rng.lognormvariate(6.6, 1.75)))) for _ in range(10**6)]
    text = batch(seqs)
    code, out, err, wall = run(["plan", "-s", "flexsp", "--time-limit", "1"], stdin=text)
    ok = code == 0
    detail = f"exit {code} {err[:200]!r}"
    if ok:
        plan = json.loads(out)
        bound_ms = 5000 if USE_LIMIT else 25000
        problem = plan_problem(json.loads(text), plan)
        if problem is None and not plan["solver_ms"] < bound_ms:
            problem = f"planning took {plan['solver_ms']:.0f} ms with --time-limit 1"
        if problem is None and not plan.get("notes", {}).get("deadline"):
            problem = "notes.deadline missing"
        ok = problem is None
        detail = problem or ""
        if ok:
            print(
                f"info: flexsp 10^6 sequences, --time-limit 1: planning "
                f"{plan['solver_ms'] / 1000:.2f} s, process {wall:.2f} s "
                f"({plan['notes']['deadline']})"
            )
    check("flexsp --time-limit 1 holds at 10^6 sequences", ok, detail)


def _fsize_limit(limit_bytes):
    def apply():
        if USE_LIMIT:
            _limit()
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return apply


def _write_fails_cleanly(name, args, out_path, stdin=b""):
    """Under a 2,000-byte file-size limit: exit 2, one error line naming the
    output, `out_path` as it was before (absent or "old") and no temporary
    file beside it (issue 30: --plot exited 0 with a cut image, --save-plans
    left a partial file)."""
    with open(out_path, "w") as f:
        f.write("old")
    folder = os.path.dirname(out_path)
    before = sorted(os.listdir(folder))
    p = subprocess.run(
        [FCP] + args,
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT_S,
        preexec_fn=_fsize_limit(2000),
    )
    problem = one_error_line(
        p.returncode, b"", re.sub(rb"(?m)^info: [^\n]*\n", b"", p.stderr), 2, "cannot write"
    )
    if problem is None and open(out_path).read() != "old":
        problem = "the old file was changed"
    if problem is None and sorted(os.listdir(folder)) != before:
        problem = f"left files behind: {sorted(set(os.listdir(folder)) - set(before))}"
    check(name, problem is None, problem or "")


def issue30_cases():
    """Issue 30: plans from outside, output files, flags, readers."""
    with tempfile.TemporaryDirectory() as tmp:
        saved = os.path.join(tmp, "saved.jsonl")
        code, _, err, _ = run(
            [
                "simulate",
                "--strategies",
                "fcp",
                "--steps",
                "2",
                "--warmup",
                "0",
                "--gbs",
                "8",
                "--ranks",
                "16",
                "--save-plans",
                saved,
                "-q",
            ]
        )
        check("simulate --save-plans writes the plans", code == 0, repr(err))
        lines = open(saved).read().splitlines() if code == 0 else []

        def replay(items, name, contains, extra=()):
            text = "\n".join(json.dumps(i) if not isinstance(i, str) else i for i in items)
            expect_error(
                name, ["simulate", "--plan", "-", "-q", *extra], stdin=text, contains=contains
            )

        if lines:
            for key, value, where in (
                ("est_ms", "5", "groups[0].est_ms"),
                ("mem_bytes", [1], "groups[0].mem_bytes"),
            ):
                bad = json.loads(lines[0])
                bad["plan"]["micro_batches"][0]["groups"][0][key] = value
                replay([bad], f"--plan group {key} {value!r}", where)
            bad = json.loads(lines[0])
            bad["plan"]["est_ms"] = "5"
            replay([bad], '--plan est_ms "5"', "[0].plan.est_ms")
            replay(
                [lines[0].replace('"plan":{', '"plan":{"status":"ok",', 1)],
                "--plan duplicate key",
                "duplicate key",
            )
            bad = json.loads(lines[0])
            bad["plan"]["micro_batches"][0]["groups"][0]["sequences"] = [10**6]
            replay([bad], "--plan sequence index 10^6", "groups[0].sequences[0]")
            bad = json.loads(lines[0])
            bad["plan"]["ranks"] = 64
            replay([bad], "--plan of another cluster", "[0].plan.ranks")
            for flag, value in (("--ranks", "16"), ("--steps", "3"), ("--gbs", "8")):
                expect_error(
                    f"simulate --plan with {flag} (not used)",
                    ["simulate", "--plan", saved, flag, value, "-q"],
                    contains=flag,
                )
        deep = os.path.join(tmp, "deep.json")
        with open(deep, "w") as f:
            f.write("[" * (60 << 20))
        t0 = time.monotonic()

        def one_gib():
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

        p = subprocess.run(
            [FCP, "simulate", "--plan", deep, "-q"],
            capture_output=True,
            timeout=TIMEOUT_S,
            preexec_fn=one_gib if USE_LIMIT else None,
        )
        problem = one_error_line(p.returncode, p.stdout, p.stderr, 2, "nested deeper than 16")
        check("simulate --plan: 60 MB of [ under a 1 GiB limit", problem is None, problem or "")
        print(f"info: 60 MB of [ rejected in {time.monotonic() - t0:.1f} s")
        # Output files under a file-size limit.
        _write_fails_cleanly(
            "simulate --save-plans under a 2,000-byte file-size limit",
            [
                "simulate",
                "--strategies",
                "fcp",
                "--steps",
                "3",
                "--warmup",
                "0",
                "--gbs",
                "64",
                "--ranks",
                "16",
                "--save-plans",
                os.path.join(tmp, "sp.jsonl"),
                "-q",
            ],
            os.path.join(tmp, "sp.jsonl"),
        )
        _write_fails_cleanly(
            "plan --plot under a 2,000-byte file-size limit",
            [
                "plan",
                "-i",
                os.path.join(HERE, "..", "..", "examples", "batch.json"),
                "--plot",
                os.path.join(tmp, "o.svg"),
            ],
            os.path.join(tmp, "o.svg"),
        )
        # eval study wrote study.md through std::ofstream (a cut file, exit 0
        # only if the stream noticed); now through the one output policy.
        _write_fails_cleanly(
            "eval study --out under a 2,000-byte file-size limit",
            [
                "eval",
                "study",
                "--quick",
                "--out",
                tmp,
                "--cluster",
                "h100-8x8",
                "--gbs",
                "16",
                "--ranks",
                "8",
                "--steps",
                "1",
                "--warmup",
                "0",
                "--coefficients",
                "preset",
                "--lengths",
                os.path.join(HERE, "..", "..", "data", "go-src-qwen3-lengths.csv"),
            ],
            os.path.join(tmp, "study.md"),
        )
    small = batch([4096, 900, 17], 8, 8)
    for comm, what in (([[1, 1]], "rank 1 is listed twice"), ([[]], "must hold at least one rank")):
        text = json.dumps(
            dict(json.loads(batch([5], 8, 8)), communicators={"create_s": 1, "existing": comm})
        )
        expect_error(
            f"communicators.existing {comm}",
            ["plan"],
            stdin=text,
            contains=f"communicators.existing[0]: {what}",
        )
    for args in (
        ["simulate", "--trace", "", "-q"],
        ["simulate", "--plot", "", "-q"],
        ["simulate", "--lengths", "", "-q"],
        ["simulate", "--dataset", "", "-q"],
        ["plan", "--plot", ""],
    ):
        expect_error(
            f"{' '.join(args[:2])} '' (empty flag)", args, stdin=small, contains="must not be empty"
        )
    expect_error(
        "simulate --planner-noise -2",
        ["simulate", "--planner-noise", "-2", "-q"],
        contains="--planner-noise",
    )
    expect_error(
        "eval noise --batch 10000001 (ran past 300 s)",
        ["eval", "noise", "--batch", "10000001"],
        contains="--batch",
    )
    text = json.dumps(
        {"cluster": {"ranks": 2, "ranks_per_node": 2}, "model": "llama3-70b", "sequences": [100]}
    )
    expect_error(
        "a model whose states do not fit one rank names the model, not cost_model",
        ["plan"],
        stdin=text,
        contains="model: llama3-70b's states need",
    )
    expect_error(
        "simulate: a model that does not fit names the model",
        ["simulate", "--model", "llama3-70b", "--ranks", "2", "-q"],
        contains="model: ",
    )
    # One grammar for lengths: what C++ rejects (Python too: tests/python/test_reliability.py).
    with tempfile.TemporaryDirectory() as tmp:
        for text in ("+5", "1_000", "\u0663", "5 5"):
            f = os.path.join(tmp, "l.txt")
            with open(f, "w", encoding="utf-8") as fh:
                fh.write(f"3\n{text}\n")
            expect_error(
                f"lengths {text!r}",
                ["lengths", f, "--out", os.path.join(tmp, "o")],
                contains="line 2",
            )
        f = os.path.join(tmp, "deep.jsonl")
        with open(f, "w") as fh:
            fh.write('{"tokens": ' + "[" * 100000 + "]" * 100000 + "}\n")
        expect_error(
            "lengths: deeply nested JSON lines record (stack overflow before)",
            ["lengths", f, "--out", os.path.join(tmp, "o")],
            contains="nested deeper",
        )
        expect_error(
            "lengths /dev/zero as a .jsonl (line cap)",
            ["lengths", "/dev/zero", "--out", os.path.join(tmp, "o")],
            contains="line",
        )


def main():
    t0 = time.monotonic()
    groups = (
        length_cases,
        cluster_cases,
        coefficient_cases,
        structure_cases,
        scale_cases,
        strategy_cases,
        output_cases,
        message_cases,
        input_path_cases,
        flag_cases,
        memory_cases,
        deadline_cases,
        issue30_cases,
    )
    only = os.environ.get("FCP_LIMITS_ONLY")  # e.g. "flag_cases,message_cases"
    for group in groups:
        if only and group.__name__ not in only.split(","):
            continue
        t = time.monotonic()
        group()
        print(f"info: {group.__name__}: {time.monotonic() - t:.1f} s")
    print(
        f"info: total {time.monotonic() - t0:.1f} s (memory limit {'on' if USE_LIMIT else 'off'})"
    )
    return summary()


if __name__ == "__main__":
    sys.exit(main())
