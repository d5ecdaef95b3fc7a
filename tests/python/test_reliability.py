"""Issue 30: one case per cause in the Python API and the Python length reader.

Plans from outside (Plan.from_dict, unpickling, another cluster) go through one
validator (C++ CheckPlanShape) in estimate, observe and fcp.validate_plan; the
Python length writer follows the C++ output-file policy; the Python and C++
length readers share one integer grammar and the same caps. Run with
PYTHONPATH=build/python (the C++ module) and FCP_CLI=build/fcp.
"""

import copy
import os
import pathlib
import pickle
import stat
import subprocess
import sys

import pytest

import fcp
import fcp.lengths as fl

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE_PARENT = str(pathlib.Path(fl.__file__).resolve().parents[1])
LENGTHS = [100, 200, 3000, 40]


def _cli():
    path = os.environ.get("FCP_CLI") or str(ROOT / "build" / "fcp")
    if not os.path.isfile(path):
        pytest.skip("fcp CLI not found (set FCP_CLI)")
    return path


@pytest.fixture(scope="module")
def sched():
    return fcp.Scheduler(cluster={"ranks": 8, "ranks_per_node": 4})


@pytest.fixture()
def plan_dict(sched):
    return sched.plan(LENGTHS).to_dict()


def _group(d, m=0, g=0):
    return d["micro_batches"][m]["groups"][g]


# --- one plan validator (items 1, 14) -------------------------------------


def _mutations():
    """(name, mutate(dict), lengths, field the ValueError must start with)."""

    def set_seq(d, v):
        _group(d)["sequences"][0] = v

    def set_rank(d, v):
        _group(d)["ranks"][0] = v

    def dup_rank(d):
        groups = [g for mb in d["micro_batches"] for g in mb["groups"]]
        first = d["micro_batches"][0]["groups"]
        if len(first) > 1:
            first[1]["ranks"][0] = first[0]["ranks"][0]
        else:
            first[0]["ranks"].append(first[0]["ranks"][0])
        return groups

    return [
        (
            "sequence index 10^6 (the issue's reproducer)",
            lambda d: set_seq(d, 10**6),
            LENGTHS,
            "plan.micro_batches[0].groups[0].sequences[0]",
        ),
        (
            "negative sequence index",
            lambda d: set_seq(d, -1),
            LENGTHS,
            "plan.micro_batches[0].groups[0].sequences[0]",
        ),
        (
            "rank out of range",
            lambda d: set_rank(d, 10**6),
            LENGTHS,
            "plan.micro_batches[0].groups[0].ranks[0]",
        ),
        (
            "negative rank",
            lambda d: set_rank(d, -3),
            LENGTHS,
            "plan.micro_batches[0].groups[0].ranks[0]",
        ),
        ("rank twice in a micro-batch", dup_rank, LENGTHS, "plan.micro_batches[0].groups["),
        ("plan of another cluster", lambda d: d.__setitem__("ranks", 64), LENGTHS, "plan.ranks"),
        ("too few lengths", lambda d: None, LENGTHS[:2], "plan.micro_batches["),
        ("too many lengths", lambda d: None, LENGTHS + [7], "plan.micro_batches"),
        (
            "empty group",
            lambda d: _group(d).__setitem__("ranks", []),
            LENGTHS,
            "plan.micro_batches[0].groups[0].ranks",
        ),
        (
            "no micro-batches",
            lambda d: d.__setitem__("micro_batches", []),
            LENGTHS,
            "plan.micro_batches",
        ),
        (
            "infeasible status",
            lambda d: d.__setitem__("status", "infeasible"),
            LENGTHS,
            "plan.status",
        ),
    ]


@pytest.mark.parametrize(
    "name,mutate,lengths,field", _mutations(), ids=[m[0] for m in _mutations()]
)
def test_every_entry_point_rejects_a_bad_plan_naming_the_field(
    sched, plan_dict, name, mutate, lengths, field
):
    mutate(plan_dict)
    bad = fcp.Plan.from_dict(plan_dict)
    times = [[0.01] * len(mb.groups) for mb in bad.micro_batches]
    calls = {
        "estimate": lambda: sched.estimate(lengths, bad),
        "validate": lambda: sched.validate(lengths, bad),
        "fcp.validate_plan": lambda: fcp.validate_plan(lengths, bad, 8),
        "observe": lambda: copy.deepcopy(sched).observe(lengths, bad, times),
        "unpickled": lambda: sched.estimate(lengths, pickle.loads(pickle.dumps(bad))),
    }
    for entry, call in calls.items():
        with pytest.raises(ValueError) as err:
            call()
        message = str(err.value)
        assert "\n" not in message, entry
        assert message.startswith(field), (entry, message)


def test_the_issue_reproducer_in_a_subprocess_exits_cleanly():
    # Before the fix: SIGSEGV (exit 139). A crash cannot be caught in-process.
    code = (
        "import fcp; s=fcp.Scheduler(); d=s.plan([100,200]).to_dict(); "
        "d['micro_batches'][0]['groups'][0]['sequences']=[10**6]\n"
        "try:\n s.estimate([100,200], fcp.Plan.from_dict(d))\n"
        "except ValueError as e:\n print('ValueError', e)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ValueError plan.micro_batches[0].groups[0].sequences[0]")


def test_a_valid_plan_passes_and_estimates_as_planned(sched, plan_dict):
    plan = fcp.Plan.from_dict(plan_dict)
    sched.validate(LENGTHS, plan)
    fcp.validate_plan(LENGTHS, plan, fcp.Cluster(8, 4, sched.cluster.hardware))
    assert sched.estimate(LENGTHS, plan).est_ms == pytest.approx(plan.est_ms, rel=1e-9)


@pytest.mark.parametrize("ranks", [1, 2])
def test_validate_plan_checks_plans_of_small_clusters(ranks):
    # The shape check reads no coefficient: the default model (which does not
    # fit 1 or 2 ranks) is no reason to refuse a plan for them.
    lengths = [300, 200, 100]
    cluster = {"ranks": ranks, "ranks_per_node": ranks}
    plan = fcp.Scheduler(cluster=cluster, model="qwen3-1.7b").plan(lengths)
    fcp.validate_plan(lengths, plan, ranks)
    with pytest.raises(ValueError, match=r"^plan\.ranks"):
        fcp.validate_plan(lengths, plan, ranks + 1)


def test_bad_arguments_are_value_errors_naming_the_field(sched):
    with pytest.raises(ValueError, match=r"^sequences\[1\]"):
        sched.plan([5, True])
    with pytest.raises(ValueError, match=r"^plan: must be an fcp.Plan"):
        sched.estimate(LENGTHS, "not a plan")
    with pytest.raises(ValueError, match=r"^plan: must be an fcp.Plan"):
        sched.observe(LENGTHS, None, [])
    with pytest.raises(ValueError, match=r"^cost_model.alpha1: missing"):
        fcp.CostModel.from_dict({})
    with pytest.raises(ValueError, match=r"^cost_model.alpha1: must be a number"):
        fcp.CostModel.from_dict(dict(sched.cost_model.to_dict(), alpha1="1"))
    d = sched.plan(LENGTHS).to_dict()
    _group(d)["ranks"][0] = 2**40
    with pytest.raises(ValueError, match=r"^micro_batches\[0\].groups\[0\].ranks\[0\]"):
        fcp.Plan.from_dict(d)
    with pytest.raises(ValueError, match=r"^communicators.existing\[0\]"):
        fcp.Scheduler(cluster={"ranks": 8}, communicators={"create_s": 1, "existing": [[1, 1]]})
    with pytest.raises(ValueError, match=r"^communicators.existing\[0\]"):
        fcp.Scheduler(cluster={"ranks": 8}, communicators={"create_s": 1, "existing": [[]]})


def test_deepcopy_of_a_scheduler_is_independent(sched):
    twin = copy.deepcopy(sched)
    plan = twin.plan(LENGTHS)

    def without_time(d):
        return {k: v for k, v in d.items() if k != "solver_ms"}

    assert without_time(plan.to_dict()) == without_time(sched.plan(LENGTHS).to_dict())
    times = [[g.est_ms / 1e3 * 2 for g in mb.groups] for mb in plan.micro_batches]
    twin.observe(LENGTHS, plan, times)
    assert twin.calibration is not None and sched.calibration is None
    assert copy.deepcopy(twin).calibration == twin.calibration


def test_a_model_that_does_not_fit_names_the_model_and_ranks():
    with pytest.raises(ValueError) as err:
        fcp.Scheduler(cluster={"ranks": 2, "ranks_per_node": 2}, model="llama3-70b")
    message = str(err.value)
    assert message.startswith("model: llama3-70b's states need"), message
    assert "on 2 ranks" in message and "cost_model.mem" not in message


# --- one output-file policy (item 2) --------------------------------------


def test_length_writer_writes_devices_in_place_and_files_atomically(tmp_path):
    if os.geteuid() == 0:  # the issue's case: a device node must stay one
        node = tmp_path / "null"
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        fl.write_length_file(str(node), [1, 2])
        assert stat.S_ISCHR(os.stat(node).st_mode)
    link = tmp_path / "to-null"
    link.symlink_to("/dev/null")
    fl.write_length_file(str(link), [1, 2])
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    fl.write_length_file(str(fifo), [7])
    assert reader.communicate(timeout=30)[0].decode().splitlines()[-1] == "7"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    target = tmp_path / "victim"
    target.write_text("keep")
    link2 = tmp_path / "link"
    link2.symlink_to(target)
    fl.write_length_file(str(link2), [3])  # the link is replaced, never its target
    assert target.read_text() == "keep" and not link2.is_symlink()
    assert link2.read_text().splitlines()[1:] == ["3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["fifo", "link", "to-null", "victim"] + (["null"] if os.geteuid() == 0 else [])
    )


def test_length_writer_leaves_nothing_behind_on_errors(tmp_path):
    with pytest.raises(ValueError, match=r"^out: cannot write '/dev/full': No space"):
        fl.write_length_file("/dev/full", [1])
    with pytest.raises(ValueError, match=r"is a directory"):
        fl.write_length_file(str(tmp_path), [1])
    with pytest.raises(ValueError, match=r"^out: cannot write"):
        fl.write_length_file(str(tmp_path / "no" / "such"), [1])
    # A file-size limit: the C++ writers fail with EFBIG, so must this one.
    out = tmp_path / "limited.txt"
    out.write_text("old\n")
    code = (
        "import resource, sys, fcp.lengths as fl\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))\n"
        "sys.exit(fl.main(['-o', sys.argv[1], sys.argv[2]]))"
    )
    src = tmp_path / "in.txt"
    src.write_text("".join(f"{i + 1000}\n" for i in range(2000)))
    res = subprocess.run(
        [sys.executable, "-c", code, str(out), str(src)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=PACKAGE_PARENT),
        timeout=60,
    )
    assert res.returncode == 2 and res.stderr.startswith("error: out: cannot write"), res.stderr
    assert res.stderr.count("\n") == 1
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "limited.txt"]


# --- one grammar, caps, usage errors (items 12, 13, 17) ---------------------

GRAMMAR_CASES = [
    "5",
    "  7\t",
    "007",
    "0",
    "-0",
    "-5",
    "+5",
    "1_000",
    "\u0663",
    "1e3",
    "5.0",
    "0x10",
    " 1 2",
    "\v5",
    "1099511627776",
    "1099511627777",
    "99999999999999999999",
    "",
    "#comment",
    "5\r",
]


@pytest.mark.parametrize("text", GRAMMAR_CASES, ids=[ascii(t) for t in GRAMMAR_CASES])
def test_cpp_and_python_readers_share_one_grammar(tmp_path, text):
    for suffix, body in ((".txt", f"3\n{text}\n"), (".csv", f"id,tokens\n1,3\n2,{text}\n")):
        src = tmp_path / f"in{suffix}"
        src.write_bytes(body.encode("utf-8"))
        cpp = subprocess.run(
            [_cli(), "lengths", str(src), "--out", str(tmp_path / "c.txt")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        py = subprocess.run(
            [sys.executable, "-m", "fcp.lengths", str(src), "--out", str(tmp_path / "p.txt")],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=PACKAGE_PARENT),
            timeout=60,
        )
        assert (cpp.returncode == 0) == (py.returncode == 0), (suffix, cpp.stderr, py.stderr)
        if cpp.returncode == 0:
            assert (tmp_path / "c.txt").read_text() == (tmp_path / "p.txt").read_text()
        else:
            assert cpp.stderr.count("\n") == 1 and py.stderr.count("\n") == 1


def test_python_reader_caps_name_the_cap(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"tokens": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(ValueError, match="nested deeper than 16 levels"):
        fl.read_lengths([str(deep)])
    ok = tmp_path / "ok.jsonl"
    ok.write_text('{"tokens": ' + "[" * 15 + "]" * 15 + ', "x": 1}\n{"tokens": 4}\n')
    assert fl.read_lengths([str(ok)]) == ([1, 4], 0)
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"tokens": 1, "tokens": 5}\n')
    with pytest.raises(ValueError, match="duplicate key"):
        fl.read_lengths([str(dup)])
    long_line = tmp_path / "long.txt"
    with open(long_line, "wb") as f:
        f.write(b"1" * (fl.MAX_LINE_BYTES + 1))
    with pytest.raises(ValueError, match="the line cap"):
        fl.read_lengths([str(long_line)])


def test_python_reader_of_dev_zero_stops_at_the_line_cap():
    code = (
        "import resource, fcp.lengths as fl\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "raise SystemExit(fl.main(['/dev/zero', '-o', '/dev/null']))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=PACKAGE_PARENT),
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert (
        res.stderr.startswith("error: /dev/zero line 1: longer than")
        and res.stderr.count("\n") == 1
    )


@pytest.mark.parametrize(
    "args",
    [[], ["x.txt"], ["x.txt", "-o", "y", "--bogus"], ["x.txt", "-o", "y", "--idx-unit", "page"]],
)
def test_module_usage_errors_are_one_line(args):
    res = subprocess.run(
        [sys.executable, "-m", "fcp.lengths", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=PACKAGE_PARENT),
        timeout=60,
    )
    assert (
        res.returncode == 2 and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    ), res.stderr
    assert res.stdout == ""
