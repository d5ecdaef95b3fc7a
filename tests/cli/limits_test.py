#!/usr/bin/env python3
"""Limits and hostile inputs of `fcp plan` (issue 8).

Every case must either be planned correctly (exit 0, a plan that passes an
independent structural check; or exit 3, "infeasible", with one `error:` line)
or be rejected with exit 2, exactly one `error:` line on stderr and nothing on
stdout. A signal, exit 1 or a hang is a failure.

Usage: limits_test.py FCP_BINARY    Prints 'N passed, N failed' last.
"""
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

FCP = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
results = {"passed": 0, "failed": 0}
TIMEOUT_S = 120

# A complete, explicit cost model (qwen3-8b-like magnitudes) so cases do not
# depend on preset values.
CM = {"alpha1": 1.2e-11, "alpha2": 2.5e-6, "beta1": 1e-3, "alpha3": 1.3e5, "beta2": 1e-4,
      "bw_intra_node": 1.96e11, "bw_inter_node": 5e10, "mem_per_token": 4.5e5,
      "mem_static": 2.2e10, "mem_capacity": 6.4e10}

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


def run(args, stdin=b""):
    if isinstance(stdin, str):
        stdin = stdin.encode()
    t0 = time.monotonic()
    p = subprocess.run([FCP] + args, input=stdin, capture_output=True, timeout=TIMEOUT_S,
                       preexec_fn=_limit if USE_LIMIT else None)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def check(name, ok, detail=""):
    if ok:
        results["passed"] += 1
    else:
        results["failed"] += 1
        print(f"FAIL {name}: {detail}")


def batch(seqs, ranks=64, per_node=16, cm=None, **extra):
    d = {"cluster": {"ranks": ranks, "ranks_per_node": per_node},
         "cost_model": dict(CM if cm is None else cm), "sequences": seqs}
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
    if not math.isfinite(plan["est_ms"]) or abs(plan["est_ms"] - total) > 1e-9 * max(1.0, total):
        return "plan est_ms is not the sum of its micro-batches"
    if not plan["lower_bound_ms"] <= plan["est_ms"] * (1 + 1e-9):
        return "lower bound above the estimate"
    return None


def expect(name, text, want, args=(), contains=None, validate=True):
    """want: a set of allowed outcomes among {"ok", "infeasible", "error"}.
    contains: a substring the error line must contain (the field)."""
    code, out, err, wall = run(["plan"] + list(args), stdin=text)
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
    expect("length 2^40 on a roomy model", batch([2**40, 1], cm=dict(CM, mem_per_token=1e-3)),
           {"ok"})
    expect("length 2^40 on the default model is infeasible", batch([2**40, 5]), {"infeasible"},
           contains="sequences[0]")
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
    expect("eta 1.0000001", batch([{"length": 5, "eta": 1.0000001}]), {"error"},
           contains="sequences[0].eta")
    expect("eta -0.0 is causal", batch([{"length": 5, "eta": -0.0}]), {"ok"})
    expect("every length 2^40 with tiny memory", batch([2**40] * 8, cm=dict(CM, mem_per_token=1e-6)),
           {"ok"})
    expect("1..2^40 powers of two", batch([2**i for i in range(41)], cm=dict(CM, mem_per_token=1e-6)),
           {"ok"})


def cluster_cases():
    seqs = [131072, 65536, 4096, 4096, 900, 17, 1]
    for ranks, per_node in [(65536, 16), (65536, 7), (65535, 16), (1, 1), (7, 3), (100, 64),
                            (64, 1000), (1000, 999)]:
        for strategy in ("fcp", "fcp-paper"):
            # 131072 tokens need 2 ranks of this model's memory: N = 1 is infeasible.
            expect(f"N={ranks} R={per_node} {strategy}", batch(seqs, ranks, per_node),
                   {"ok"} if ranks > 1 else {"infeasible"}, args=["--strategy", strategy])
    expect("N = 1 and a too-long sequence", batch([131072], 1, 1), {"infeasible"},
           contains="sequences[0]")
    expect("N = 0", batch([5], 0, 1), {"error"}, contains="cluster.ranks")
    expect("N = -4", batch([5], -4, 1), {"error"}, contains="cluster.ranks")
    expect("N = 2^20 + 1", batch([5], 2**20 + 1, 8), {"error"}, contains="cluster.ranks")
    expect("N = 2^31", batch([5], 2**31, 8), {"error"}, contains="cluster.ranks")
    expect("R = 0", batch([5], 8, 0), {"error"}, contains="cluster.ranks_per_node")
    expect("R = 2^40", batch([5], 8, 2**40), {"error"}, contains="cluster.ranks_per_node")


def coefficient_cases():
    for key in CM:
        expect(f"{key} negative", batch([4096], cm=dict(CM, **{key: -1.0})), {"error"},
               contains=f"cost_model.{key}")
        expect(f"{key} = 1e308", batch([4096, 131072], cm=dict(CM, **{key: 1e308})),
               {"ok", "infeasible", "error"}, contains="cost_model")
        expect(f"{key} = 1e-320 (denormal)", batch([4096, 131072], cm=dict(CM, **{key: 1e-320})),
               {"ok", "infeasible", "error"}, contains="cost_model")
        if key not in ("bw_intra_node", "bw_inter_node", "mem_capacity"):
            expect(f"{key} = 0", batch([4096, 131072, 7], cm=dict(CM, **{key: 0.0})),
                   {"ok", "infeasible"})
        else:
            expect(f"{key} = 0", batch([4096], cm=dict(CM, **{key: 0.0})), {"error"},
                   contains=f"cost_model.{key}")
    # NaN / Infinity are not JSON; Python writes them as bare words.
    for word in ("NaN", "Infinity", "-Infinity"):
        text = batch([4096]).replace('"alpha1": 1.2e-11', f'"alpha1": {word}')
        expect(f"alpha1 = {word}", text, {"error"})
    # Out of double range: nlohmann throws out_of_range (was exit 1 "internal").
    expect("length 1e400", '{"sequences": [1e400]}', {"error"}, contains="input")
    expect("alpha1 = -1e309", batch([4096]).replace('"alpha1": 1.2e-11', '"alpha1": -1e309'),
           {"error"}, contains="input")
    expect("alpha1 as string", batch([4096], cm=dict(CM, alpha1="1e-11")), {"error"},
           contains="cost_model.alpha1")
    expect("mem_capacity == mem_static", batch([4096], cm=dict(CM, mem_capacity=CM["mem_static"])),
           {"error"}, contains="cost_model.mem_capacity")
    expect("every time coefficient 0", batch([4096, 8, 131072], cm=dict(
        CM, alpha1=0.0, alpha2=0.0, beta1=0.0, alpha3=0.0, beta2=0.0)), {"ok"})
    expect("huge alpha1 and 2^40 tokens (times overflow)",
           batch([2**40], cm=dict(CM, alpha1=1e300, mem_per_token=1e-9)), {"error"},
           contains="cost_model")
    # Found by fuzz/planner_fuzz: alpha3 * sum * (d - 1) overflowed before the
    # division by d and bw (fcp-paper aborted: FCP_CHECK best < kInf).
    for strategy in ("fcp", "fcp-paper"):
        expect(f"alpha3 = 1e300 with a 10^7-token sequence, {strategy}",
               batch([50] * 19 + [9967640], 247, 30, cm=dict(
                   CM, alpha3=1e300, bw_intra_node=8.5e11, bw_inter_node=2.125e11,
                   mem_per_token=2.125e6, mem_static=8.5e10, mem_capacity=2.71e11)),
               {"error"}, contains="cost_model", args=["--strategy", strategy])
    expect("huge memory capacity (mem_bytes beyond int64)",
           batch([4096, 8192], cm=dict(CM, mem_per_token=1e290, mem_static=0.0, mem_capacity=1e300)),
           {"error"}, contains="cost_model.mem_capacity")
    expect("memory capacity 2^62 is fine",
           batch([4096, 2**40], cm=dict(CM, mem_per_token=1e3, mem_static=0.0, mem_capacity=2.0**62)),
           {"ok"})
    # Found by fuzz/planner_fuzz: zero work everywhere made the micro-batch
    # split fail at every count (FCP_CHECK abort) when long sequences need
    # separate micro-batches.
    zero_work = dict(CM, alpha1=0.0, alpha2=0.0, beta1=0.0, alpha3=0.0, beta2=3e-4,
                     mem_per_token=2.125e6, mem_static=6.49e10, mem_capacity=2.077e11)
    for strategy in ("fcp", "fcp-paper"):
        expect(f"zero work, 19 long sequences, {strategy}",
               batch([8372157] * 18 + [4] * 24 + [8176, 8372157], 247, 24, cm=zero_work), {"ok"},
               args=["--strategy", strategy])
    expect("unknown coefficient", batch([4096], cm=dict(CM, alpha9=1.0)), {"error"},
           contains="cost_model.alpha9")


def structure_cases():
    expect("empty batch", batch([]), {"error"}, contains="sequences")
    expect("no sequences key", json.dumps({"cluster": {"ranks": 8}}), {"error"}, contains="sequences")
    expect("empty input", "", {"error"})
    expect("whitespace input", "  \n\t ", {"error"})
    expect("top level array", "[1, 2, 3]", {"error"}, contains="input")
    expect("top level number", "42", {"error"}, contains="input")
    expect("sequences is an object", batch({"a": 1}), {"error"}, contains="sequences")
    expect("unknown top-level key", batch([5], extra_key=1), {"error"}, contains="extra_key")
    # Duplicate keys at every level.
    good = batch([5, 6])
    expect("duplicate top-level key", good[:-1] + ', "sequences": [7]}', {"error"},
           contains="duplicate")
    expect("duplicate cost_model key", good.replace('"alpha2"', '"alpha1": 1e-11, "alpha2"', 1),
           {"error"}, contains="duplicate")
    expect("duplicate cluster key", good.replace('"ranks": 64', '"ranks": 64, "ranks": 8', 1),
           {"error"}, contains="duplicate")
    expect("duplicate sequence key", batch([{"length": 5}]).replace('"length": 5', '"length": 5, "length": 9'),
           {"error"}, contains="duplicate")
    expect("same key in sibling objects is fine",
           batch([{"length": 5, "eta": 0.5}, {"length": 6, "eta": 0.5}]), {"ok"})
    # Nesting.
    for depth in (15, 17, 100, 100000):
        nested = "[" * depth + "1" + "]" * depth
        # 15 levels parse (then sequences[0] is not an integer); more hit the limit.
        expect(f"nested {depth} deep", '{"sequences": ' + nested + "}", {"error"},
               contains="sequences[0]" if depth < 16 else "nested deeper")
    expect("nested objects 100000 deep", '{"model": ' + '{"a":' * 100000 + "1" + "}" * 100000 + "}",
           {"error"})
    # Truncation at every 5th byte of a valid batch.
    text = batch([131072, {"length": 2048, "attention": "full"}, {"length": 900, "eta": 0.4}], 12, 5)
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
    expect("overlong escape in model name", '{"model": "\\u0000", "sequences": [5]}', {"error"},
           contains="model")
    expect("long unknown model name", json.dumps({"model": "x" * 100000, "sequences": [5]}), {"error"},
           contains="model")
    code, out, err, _ = run(["plan", "--input", "/nonexistent/dir/batch.json"])
    check("missing input file", code == 2 and err.startswith(b"error: ") and not out, repr(err))
    code, out, err, _ = run(["plan", "--input", "/"])
    check("directory as input", code == 2 and err.startswith(b"error: ") and not out, repr(err))


def scale_cases():
    # 10^6 sequences. Parsing all of them is the part that scales; a bad last
    # element makes the CLI read every sequence and then reject (cheap path),
    # and one plan of 10^6 one-token sequences on 64 ranks checks the planner.
    many = [1 + (i % 7) for i in range(10**6)]
    text = batch(many[:-1] + [0])
    code, out, err, wall = run(["plan"], stdin=text)
    check("10^6 sequences, last one bad", code == 2 and b"sequences[999999]" in err,
          f"exit {code} {err[:200]!r}")
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


def main():
    t0 = time.monotonic()
    for group in (length_cases, cluster_cases, coefficient_cases, structure_cases, scale_cases):
        t = time.monotonic()
        group()
        print(f"info: {group.__name__}: {time.monotonic() - t:.1f} s")
    print(f"info: total {time.monotonic() - t0:.1f} s (memory limit {'on' if USE_LIMIT else 'off'})")
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
