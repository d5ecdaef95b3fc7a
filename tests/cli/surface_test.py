#!/usr/bin/env python3
"""CLI tests of the user's surface: --version, defaults in every --help, `fcp plan`
on a terminal, timelines (--trace / --plot) of `fcp plan` and `fcp simulate`,
and the shell-injection / temp-file reproducers of issue 18 against `--plot` and
`fcp eval paper --out`.

Usage: surface_test.py FCP_BINARY
"""

import json
import os
import pathlib
import pty
import re
import select
import subprocess
import sys
import tempfile
import time

from checks import check, summary

FCP = os.path.abspath(sys.argv[1])
ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "batch.json")


def run(args, env=None, stdin=subprocess.DEVNULL, cwd=None):
    p = subprocess.run(
        [FCP] + args, capture_output=True, text=True, timeout=300, env=env, stdin=stdin, cwd=cwd
    )
    return p.returncode, p.stdout, p.stderr


def one_error_line(stderr):
    return stderr.count("\n") == 1 and stderr.startswith("error: ")


def test_version():
    m = re.search(r"project\(fcp VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    rc, out, _ = run(["--version"])
    check("--version", rc == 0 and out == f"fcp {m.group(1)}\n", repr(out))


def test_defaults_in_every_help():
    rc, out, _ = run(["--help"])
    commands = re.findall(r"^  (\S+(?: \S+)?)\s{2,}", out.split("Commands:")[1], re.M)
    check("commands listed", "lengths" in commands and "plan" in commands, str(commands))
    for command in commands:
        rc, out, err = run(command.split() + ["--help"])
        check(f"{command} --help exits 0", rc == 0, err)
        # Every option taking a number has a default to show ("--gbs INT=512").
        for line in out.splitlines():
            # The type column ends at the first run of 2+ spaces (then the
            # description): "--steps INT:INT in [1 - 1000]=3   measured ...".
            m = re.match(
                r"\s+(?:-\w,)?(--[\w-]+) (INT|UINT|FLOAT|UINT64|INT64)\b(.*?)(?:\s{2,}|$)", line
            )
            if m:
                check(f"{command} {m.group(1)} shows its default", "=" in m.group(3), line)
    rc, out, _ = run(["plan", "--help"])
    check("plan --help strategy default", "--strategy TEXT=fcp" in out, out)
    rc, out, _ = run(["lengths", "--help"])
    check("lengths --help idx-unit default", "=document" in out, out)


def test_plan_on_a_terminal_prints_usage():
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(FCP, [FCP, "plan"])
    deadline = time.time() + 20
    output = b""
    status = None
    while time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            output += chunk
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            break
    if status is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    check("plan on a tty exits", status is not None, "still waiting after 20 s")
    if status is not None:
        check("plan on a tty: exit 2", os.waitstatus_to_exitcode(status) == 2, str(status))
        check("plan on a tty: usage", b"Usage: fcp plan" in output, output[:200])
    os.close(fd)


def plan_json():
    rc, out, err = run(["plan", "-i", EXAMPLE])
    assert rc == 0, err
    return json.loads(out)


def test_plan_trace(tmp):
    plan = plan_json()
    path = os.path.join(tmp, "trace.json")
    rc, out, err = run(["plan", "-i", EXAMPLE, "--trace", path])
    check("plan --trace", rc == 0 and json.loads(out) is not None, err)
    trace = json.load(open(path))
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    expected = sum(
        len(g["ranks"]) for mb in plan["micro_batches"] for g in mb["groups"] if g["sequences"]
    )
    check(
        "trace: one slice per group and rank",
        len(slices) == expected,
        f"{len(slices)} != {expected}",
    )
    ranks_per_node = 16  # ascend910c-4x16
    check("trace: node processes", all(e["pid"] == e["tid"] // ranks_per_node for e in slices))
    last = max(e["ts"] + e["dur"] for e in slices)
    check(
        "trace: ends at the plan's estimate (us)",
        abs(last - 1e3 * plan["est_ms"]) < 1e-6 * last,
        f"{last} vs {1e3 * plan['est_ms']}",
    )
    rc, out, err = run(["plan", "-i", EXAMPLE, "--trace", os.path.join(tmp, "no", "t.json")])
    check(
        "plan --trace bad path: exit 2, one line, no stdout",
        rc == 2 and one_error_line(err) and out == "",
        err,
    )


def test_plan_plot(tmp):
    png = os.path.join(tmp, "p.png")
    svg = os.path.join(tmp, "p.svg")
    rc, _, err = run(["plan", "-i", EXAMPLE, "--plot", png])
    check("plot png", rc == 0 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", err)
    rc, _, err = run(["plan", "-i", EXAMPLE, "--plot", svg])
    check("plot svg is SVG", rc == 0 and "<svg" in open(svg).read(), err)
    for bad in [
        os.path.join(tmp, "missing", "p.png"),
        os.path.join(tmp, "p.pdf"),
        tmp,
        os.path.join(tmp, "missing\nline", "p.png"),
    ]:
        rc, out, err = run(["plan", "-i", EXAMPLE, "--plot", bad])
        check(
            f"plot bad path {bad!r}: exit 2, one line",
            rc == 2 and one_error_line(err) and "plot" in err and out == "",
            f"{rc} {err!r}",
        )
    env = dict(os.environ, PATH=os.path.join(tmp, "nothing-here"))
    rc, out, err = run(["plan", "-i", EXAMPLE, "--plot", os.path.join(tmp, "q.png")], env=env)
    check(
        "plot without gnuplot: exit 1, one line",
        rc == 1 and one_error_line(err) and "gnuplot not found" in err,
        f"{rc} {err!r}",
    )


def markers(tmp):
    return [
        m
        for m in ("pwned1", "pwned2", "pwned3", "pwned4")
        if os.path.exists(os.path.join(tmp, m)) or os.path.exists(m)
    ]


def test_no_shell_injection(tmp):
    # Issue 18: a newline in --plot PATH ran gnuplot `system` commands; an
    # apostrophe in `eval paper --out` ran a shell command.
    hostile = [
        f"x';system('touch {tmp}/pwned1');'.png",
        f'a\nsystem "touch {tmp}/pwned2"\n.png',
        f"$(touch {tmp}/pwned3)`touch {tmp}/pwned4`.svg",
    ]
    work = os.path.join(tmp, "plots")
    os.mkdir(work)
    for name in hostile:
        path = os.path.join(work, name.replace("/", "_"))
        rc, _, err = run(["plan", "-i", EXAMPLE, "--plot", path], cwd=tmp)
        check(f"hostile --plot {name!r} drawn", rc == 0 and os.path.isfile(path), err)
    check("hostile --plot ran nothing", markers(tmp) == [], str(markers(tmp)))
    out_dir = os.path.join(tmp, f"x';touch {tmp}/pwned1;'\n$(touch {tmp}/pwned3)")
    rc, _, err = run(["eval", "paper", "--quick", "--out", out_dir], cwd=tmp)
    check("hostile eval paper --out: exit 0", rc == 0, err[-500:])
    pngs = sorted(p.name for p in pathlib.Path(out_dir).glob("*.png"))
    check("hostile eval paper --out: figures drawn", len(pngs) == 4, str(pngs))
    report = (pathlib.Path(out_dir) / "report.md").read_text()
    check(
        "report links the figures, no failure notes",
        "figure failed" not in report and "![fig3.png](fig3.png)" in report,
        "",
    )
    check("hostile eval paper ran nothing", markers(tmp) == [], str(markers(tmp)))


def test_simulate_timelines(tmp):
    png = os.path.join(tmp, "sim.png")
    trace = os.path.join(tmp, "sim.json")
    rc, out, err = run(
        [
            "simulate",
            "--dataset",
            "github",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--strategies",
            "fcp,megatron",
            "-q",
            "--plot",
            png,
            "--trace",
            trace,
        ]
    )
    check("simulate --plot --trace", rc == 0 and os.path.getsize(png) > 1000, err)
    t = json.load(open(trace))
    names = {e["args"]["name"] for e in t["traceEvents"] if e["name"] == "process_name"}
    check(
        "simulate trace: a process per strategy and node",
        {"fcp: node 0", "fcp: node 3", "megatron: node 0", "megatron: node 3"} <= names,
        str(sorted(names)),
    )
    check(
        "simulate trace labelled simulated",
        all(e["args"]["source"] == "simulated" for e in t["traceEvents"] if e["ph"] == "X"),
    )


def test_no_shell_in_sources():
    pattern = re.compile(r"\b(std::)?system\s*\(|\bpopen\s*\(|\"/bin/sh\"|\bsh -c\b")
    hits = []
    for folder in ("src", "apps", "include", "python"):
        for p in (ROOT / folder).rglob("*"):
            if p.suffix in (".cc", ".h", ".py") and not p.name.endswith("_test.cc"):
                for no, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                    if pattern.search(line):
                        hits.append(f"{p.relative_to(ROOT)}:{no}")
    check("no shell calls in the sources", hits == [], str(hits))


def main():
    test_version()
    test_defaults_in_every_help()
    test_plan_on_a_terminal_prints_usage()
    test_no_shell_in_sources()
    with tempfile.TemporaryDirectory() as tmp:
        test_plan_trace(tmp)
        test_plan_plot(tmp)
        test_no_shell_injection(tmp)
        test_simulate_timelines(tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
