"""The pybind11 module: round trip against the `fcp plan` CLI, errors, numpy
input, GIL release."""

import json
import os
import pathlib
import pickle
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import fcp

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _cli():
    path = os.environ.get("FCP_CLI")
    if not path:  # PYTHONPATH=<build>/python -> <build>/fcp
        for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
            candidate = pathlib.Path(entry).parent / "fcp"
            if entry and candidate.is_file():
                path = str(candidate)
                break
    if not path or not os.path.isfile(path):
        pytest.skip("fcp CLI not found (set FCP_CLI)")
    return path


def _cli_plan(batch, tmp_path, *args):
    f = tmp_path / "batch.json"
    f.write_text(json.dumps(batch) if not isinstance(batch, str) else batch)
    res = subprocess.run(
        [_cli(), "plan", "--input", str(f), "--format", "json", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout)


def _without_solver_ms(d):
    d = dict(d)
    d.pop("solver_ms")
    return d


def _lengths_and_eta(sequences):
    lengths, eta = [], []
    for s in sequences:
        if isinstance(s, dict):
            lengths.append(s["length"])
            eta.append(1.0 if s.get("attention") == "full" else float(s.get("eta", 0.0)))
        else:
            lengths.append(s)
            eta.append(0.0)
    return lengths, eta


def test_imports_the_built_module():
    assert fcp._fcp is not None, fcp._IMPORT_ERROR


def test_presets_list_the_builtins():
    p = fcp.presets()
    assert "qwen3-8b" in p["models"] and "ascend910c-4x16" in p["clusters"]
    assert p["strategies"][0] == "fcp" and "fcp-paper" in p["strategies"]


CASES = [
    dict(cluster="ascend910c-4x16", model="qwen3-8b", strategy="fcp"),
    dict(cluster="h100-8x8", model="llama3-8b", strategy="fcp-paper"),
    dict(cluster={"ranks": 12, "ranks_per_node": 5}, model="qwen3-1.7b", strategy="megatron"),
    dict(
        cluster={"ranks": 8, "ranks_per_node": 4, "hardware": "h100-8x8"},
        model=None,
        cost_model={"beta1": 0.002},
        strategy="fcp",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["strategy"] + "-" + str(c["cluster"])[:12])
def test_round_trip_equals_cli_json(case, tmp_path):
    rng = np.random.default_rng(11)
    lengths = np.minimum(np.exp(rng.normal(7.5, 1.6, 40)).astype(np.int64) + 1, 131072)
    eta = np.where(np.arange(40) % 7 == 0, 1.0, 0.0)
    batch = {k: case[k] for k in ("cluster", "model", "cost_model") if case.get(k) is not None}
    batch["sequences"] = [{"length": int(n), "eta": float(e)} for n, e in zip(lengths, eta)]
    expected = _cli_plan(batch, tmp_path, "--strategy", case["strategy"])
    sched = fcp.Scheduler(
        cluster=case["cluster"],
        model=case["model"],
        cost_model=case.get("cost_model"),
        strategy=case["strategy"],
    )
    plan = sched.plan(lengths, eta=eta)
    got = plan.to_dict()
    assert _without_solver_ms(got) == _without_solver_ms(expected)
    # The object view agrees with the dict view.
    assert plan.est_ms == got["est_ms"] and plan.lower_bound_ms == got["lower_bound_ms"]
    for mb, mbd in zip(plan.micro_batches, got["micro_batches"]):
        for g, gd in zip(mb.groups, mbd["groups"]):
            assert list(g.ranks) == gd["ranks"] and list(g.sequences) == gd["sequences"]
            assert g.est_ms == gd["est_ms"] and g.degree == len(gd["ranks"])


def test_example_batch_round_trip(tmp_path):
    text = (ROOT / "examples" / "batch.json").read_text()
    expected = _cli_plan(text, tmp_path)
    assert _without_solver_ms(fcp.plan_json(text).to_dict()) == _without_solver_ms(expected)
    batch = json.loads(text)
    lengths, eta = _lengths_and_eta(batch["sequences"])
    plan = fcp.Scheduler(cluster=batch.get("cluster"), model=batch.get("model")).plan(
        lengths, eta=eta
    )
    assert _without_solver_ms(plan.to_dict()) == _without_solver_ms(expected)


def test_lists_tuples_and_numpy_dtypes_agree():
    sched = fcp.Scheduler(cluster={"ranks": 8, "ranks_per_node": 4}, model="qwen3-4b")
    lengths = [30000, 9000, 4000, 4000, 1200, 800, 300, 64]
    ref = _without_solver_ms(sched.plan(lengths).to_dict())
    for variant in (
        tuple(lengths),
        np.array(lengths, dtype=np.int32),
        np.array(lengths, dtype=np.uint32),
        np.array(lengths, dtype=np.int64),
        np.array(lengths, dtype=np.float64),
    ):
        assert _without_solver_ms(sched.plan(variant).to_dict()) == ref
    every = sorted(
        s for mb in sched.plan(lengths).micro_batches for g in mb.groups for s in g.sequences
    )
    assert every == list(range(len(lengths)))


@pytest.mark.parametrize(
    "bad, field",
    [
        ([100, 0, 5], r"sequences\[1\]"),
        ([100, -7], r"sequences\[1\]"),
        ([100, 2.5], r"sequences\[1\]"),
        ([5, "a"], r"sequences\[1\]"),
        ([5, None], r"sequences\[1\]"),
        ([], r"sequences"),
        ([[1, 2], [3, 4]], r"sequences"),
        (17, r"sequences"),
    ],
)
def test_bad_lengths_raise_value_error_naming_the_field(bad, field):
    sched = fcp.Scheduler()
    with pytest.raises(ValueError, match="^" + field):
        sched.plan(bad)


def test_bad_eta_names_the_field():
    sched = fcp.Scheduler()
    with pytest.raises(ValueError, match=r"^sequences\[1\]\.?eta|^sequences\[1\]"):
        sched.plan([100, 200], eta=[0.0, 1.5])
    with pytest.raises(ValueError, match="^eta"):
        sched.plan([100, 200], eta=[0.0])


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(cluster="no-such-cluster"), "cluster"),
        (dict(model="no-such-model"), "model"),
        (dict(strategy="no-such-strategy"), "strategy"),
        (dict(cluster={"ranks": 0}), r"cluster\.ranks"),
        (dict(cost_model={"alpha9": 1.0}), r"cost_model\.alpha9"),
        (dict(cost_model={"alpha1": -1.0}), r"cost_model\.alpha1"),
        (dict(cp_degree=-1), "cp_degree"),
        (dict(grad_sync=0.3), "grad_sync"),
        (dict(grad_sync={"collective_s": 0.3, "bucket": 2}), r"grad_sync\.bucket"),
        (dict(grad_sync={"collective_s": float("nan")}), r"grad_sync\.collective_s"),
        (dict(group_time_sigma=-0.1), "group_time_sigma"),
        (dict(group_time_sigma=2.5), "group_time_sigma"),
        (dict(group_time_sigma=float("nan")), "group_time_sigma"),
        (dict(group_time_sigma="0.1"), "group_time_sigma"),
        (dict(communicators=[[0, 1]]), "communicators"),
        (dict(communicators={"create_s": -1}), r"communicators\.create_s"),
        (
            dict(communicators={"create_s": 0.001, "existing": [[0, 1 << 20]]}),
            r"communicators\.existing\[0\]\[1\]",
        ),
    ],
)
def test_bad_config_raises_value_error_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match="^" + field):
        fcp.Scheduler(**kwargs)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError) as e:
        fcp.Scheduler(strategy="no-such-strategy")
    assert str(e.value).startswith('strategy: unknown strategy "no-such-strategy" (known: ')
    assert all(name in str(e.value) for name in fcp.presets()["strategies"])
    for kwargs, key in ((dict(cluster="no-such"), "clusters"), (dict(model="no-such"), "models")):
        with pytest.raises(ValueError) as e:
            fcp.Scheduler(**kwargs)
        assert all(name in str(e.value) for name in fcp.presets()[key]), str(e.value)


def test_vision_tokens_plan_as_the_cli(tmp_path):
    # MLLM batches: the binding's vision_tokens reach the planner as the CLI's
    # "vision_tokens" keys do, and each one costs alpha2_vision.
    lengths = [8192, 4096, 2048, 1024, 700, 500]
    eta = [0.1, 0.1, 0.2, 0.3, 0.0, 0.0]
    vision = [7680, 3840, 1792, 768, 0, 0]
    cost = {"alpha2_vision": 2e-5}
    sched = fcp.Scheduler(cluster="h100-8x8", model="qwen3-vl-8b", cost_model=cost)
    plan = sched.plan(lengths, eta=eta, vision_tokens=vision).to_dict()
    seqs = [{"length": n, "eta": e, "vision_tokens": v} for n, e, v in zip(lengths, eta, vision)]
    cli = _cli_plan(
        {"cluster": "h100-8x8", "model": "qwen3-vl-8b", "cost_model": cost, "sequences": seqs},
        tmp_path,
    )
    assert _without_solver_ms(plan) == _without_solver_ms(cli)
    # Re-estimated without the vision tokens, every group whose sequences
    # have some is cheaper by alpha2_vision per vision token over its degree.
    text = sched.estimate(lengths, fcp.Plan.from_dict(plan), eta=eta).to_dict()
    for g, t in zip(plan["micro_batches"][0]["groups"], text["micro_batches"][0]["groups"]):
        v = sum(vision[i] for i in g["sequences"])
        assert g["est_ms"] - t["est_ms"] == pytest.approx(
            1e3 * 2e-5 * v / len(g["ranks"]), rel=1e-9
        )
    with pytest.raises(ValueError, match=r"^sequences\[4\]\.vision_tokens"):
        sched.plan(lengths, vision_tokens=[0, 0, 0, 0, 701, 0])
    with pytest.raises(ValueError, match="^vision_tokens"):
        sched.plan(lengths, vision_tokens=[0, 0])


def test_grad_sync_plans_as_the_cli(tmp_path):
    # The same input through the CLI and the binding: identical plans, ranked
    # by step time (the step_ms note) with the gradient sync.
    lengths = [65536, 16384, 4096, 2048, 1024, 512, 300, 200]
    sync = {"collective_s": 0.3, "buckets": 4, "forward_share": 0.25}
    sched = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b", grad_sync=sync)
    plan = sched.plan(lengths).to_dict()
    assert "step_ms" in plan["notes"]
    cli = _cli_plan(
        {"cluster": "h100-8x8", "model": "qwen3-8b", "grad_sync": sync, "sequences": lengths},
        tmp_path,
    )
    assert _without_solver_ms(plan) == _without_solver_ms(cli)


def test_group_time_sigma_plans_as_the_cli(tmp_path):
    # Ranked by the expected step under group-time noise (the
    # expected_step_ms note), through the CLI and the binding alike.
    lengths = [65536, 16384] + [4096] * 6 + [1024] * 24 + [300] * 40
    sched = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b", group_time_sigma=0.3)
    plan = sched.plan(lengths).to_dict()
    assert "expected_step_ms" in plan["notes"]
    cli = _cli_plan(
        {"cluster": "h100-8x8", "model": "qwen3-8b", "group_time_sigma": 0.3, "sequences": lengths},
        tmp_path,
    )
    assert _without_solver_ms(plan) == _without_solver_ms(cli)


@pytest.mark.parametrize(
    "strategy, kwargs, flags, note",
    [
        ("megatron-dcp", dict(max_seqlen_per_rank=6000), ["--max-seqlen", "6000"], "max_seqlen"),
        ("bytescale", dict(capacity_tokens=9000), ["--capacity", "9000"], "capacity"),
        ("megatron", dict(dealing="loader"), ["--dealing", "loader"], "dealing"),
        ("deepspeed", dict(dealing="loader"), ["--dealing", "loader"], "dealing"),
    ],
)
def test_every_plan_option_reaches_the_planner(strategy, kwargs, flags, note, tmp_path):
    # Each PlanOptions field the Scheduler takes plans as the CLI flag that
    # sets it, and changes the plan from the default (tuned / balanced).
    lengths = [20000, 9000, 7000] + [3000] * 6 + [900] * 20 + [200] * 30
    batch = {"cluster": "h100-8x8", "model": "qwen3-8b", "sequences": lengths}
    made = dict(cluster="h100-8x8", model="qwen3-8b", strategy=strategy)
    plan = fcp.Scheduler(**made, **kwargs).plan(lengths).to_dict()
    cli = _cli_plan(batch, tmp_path, "--strategy", strategy, *flags)
    assert _without_solver_ms(plan) == _without_solver_ms(cli)
    default = fcp.Scheduler(**made).plan(lengths).to_dict()
    assert plan["micro_batches"] != default["micro_batches"]  # this batch: another schedule
    if note == "max_seqlen":
        assert plan["notes"]["max_seqlen_per_dp_cp_rank"] == "6000"
        assert plan["notes"]["max_seqlen_source"] == "fixed (--max-seqlen)"
    elif note == "capacity":
        assert plan["notes"]["capacity_tokens"] == "9000"
        assert plan["notes"]["capacity_source"] == "fixed (--capacity)"
    else:
        assert plan["notes"]["dealing"] == "data-loader order"
        assert default["notes"]["dealing"] != "data-loader order"
    assert _without_solver_ms(fcp.plan_json(json.dumps(batch), strategy, **kwargs).to_dict()) == (
        _without_solver_ms(plan)
    )


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(max_seqlen_per_rank=-1), "max_seqlen_per_rank"),
        (dict(max_seqlen_per_rank=1.5), "max_seqlen_per_rank"),
        (dict(capacity_tokens=-3), "capacity_tokens"),
        (dict(capacity_tokens=True), "capacity_tokens"),
        (dict(dealing="random"), "dealing"),
        (dict(dealing=1), "dealing"),
    ],
)
def test_plan_option_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        fcp.Scheduler(**kwargs)


def test_deepcopy_keeps_every_plan_option():
    import copy

    s = fcp.Scheduler(
        strategy="megatron", dealing="loader", capacity_tokens=5, max_seqlen_per_rank=7
    )
    o = copy.deepcopy(s)._options
    assert (o.dealing, o.capacity_tokens, o.max_seqlen_per_rank) == (
        fcp._fcp.Dealing.LOADER,
        5,
        7,
    )


def test_communicators_plan_as_the_cli(tmp_path):
    # Charged for new communicators, through the CLI and the binding alike;
    # with every communicator of that plan held, nothing is charged and the
    # plan is unchanged.
    lengths = [65536, 16384] + [4096] * 6 + [1024] * 24 + [300] * 40
    comms = {"create_s": 0.05}
    sched = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b", communicators=comms)
    plan = sched.plan(lengths).to_dict()
    assert "step_ms" in plan["notes"]
    cli = _cli_plan(
        {"cluster": "h100-8x8", "model": "qwen3-8b", "communicators": comms, "sequences": lengths},
        tmp_path,
    )
    assert _without_solver_ms(plan) == _without_solver_ms(cli)
    held = {
        "create_s": 0.05,
        "existing": [
            g["ranks"] for mb in plan["micro_batches"] for g in mb["groups"] if len(g["ranks"]) > 1
        ],
    }
    again = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b", communicators=held)
    assert again.plan(lengths).to_dict()["micro_batches"] == plan["micro_batches"]


def test_existing_communicators_per_call(tmp_path):
    # plan(existing_communicators=...) is the CLI input with those sets.
    lengths = [65536, 16384] + [4096] * 6 + [1024] * 24 + [300] * 40
    sched = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b", communicators={"create_s": 0.05})
    held = [[0, 1, 2, 3, 4, 5, 6, 7], [8, 9]]
    plan = sched.plan(lengths, existing_communicators=held).to_dict()
    cli = _cli_plan(
        {
            "cluster": "h100-8x8",
            "model": "qwen3-8b",
            "sequences": lengths,
            "communicators": {"create_s": 0.05, "existing": held},
        },
        tmp_path,
    )
    assert _without_solver_ms(plan) == _without_solver_ms(cli)
    with pytest.raises(ValueError, match=r"^communicators\.existing\[1\]\[1\]"):
        sched.plan(lengths, existing_communicators=[[0, 1], [2, 64]])
    with pytest.raises(ValueError, match="^existing_communicators"):
        sched.plan(lengths, existing_communicators=[[0, "x"]])
    with pytest.raises(ValueError, match="^existing_communicators"):
        sched.plan(lengths, existing_communicators=[[0, 1.5]])
    with pytest.raises(ValueError, match="^existing_communicators"):
        fcp.Scheduler(cluster="h100-8x8").plan(lengths, existing_communicators=[[0, 1]])


def test_infeasible_is_a_status_not_an_error():
    sched = fcp.Scheduler(cluster={"ranks": 4, "ranks_per_node": 4}, model="qwen3-1.7b")
    plan = sched.plan([1 << 30])
    assert plan.status == fcp.PlanStatus.INFEASIBLE
    assert plan.infeasible_sequence == 0 and plan.message
    assert plan.to_dict()["status"] == "infeasible"


def test_plan_releases_the_gil():
    # While one thread plans, this thread must keep running Python code. With
    # the GIL held for the whole call it could not run at all between the
    # planner thread's start and end marks (first half checked, to leave the
    # return path out).
    sched = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b")
    rng = np.random.default_rng(5)
    lengths = np.minimum(np.exp(rng.normal(6.6, 1.75, 20000)).astype(np.int64) + 1, 131072)
    marks = {}

    def worker():
        marks["start"] = time.perf_counter()
        sched.plan(lengths)
        marks["end"] = time.perf_counter()

    ticks = []
    t = threading.Thread(target=worker)
    t.start()
    while t.is_alive():
        ticks.append(time.perf_counter())
    t.join()
    mid = (marks["start"] + marks["end"]) / 2
    during = [x for x in ticks if marks["start"] < x < mid]
    assert during, (
        f"no Python progress during a {1e3 * (marks['end'] - marks['start']):.1f} ms plan"
    )


def test_group_cache_takes_a_planner_plan():
    import fcp.torch as ft

    plan = fcp.Scheduler(cluster={"ranks": 16, "ranks_per_node": 8}, model="qwen3-4b").plan(
        [65536, 30000, 9000, 4000, 4000, 1200, 800, 300, 64, 64]
    )
    calls = []
    cache = ft.GroupCache(new_group=lambda r: calls.append(tuple(r)) or tuple(r))
    sets = {tuple(sorted(g.ranks)) for mb in plan.micro_batches for g in mb.groups}
    assert cache.prepare(plan) == len(sets) == len(calls)
    assert ft.plan_groups(plan) == ft.plan_groups(plan.to_dict())
    for mb in plan.micro_batches:
        for g in mb.groups:
            got = cache.for_micro_batch(mb, rank=g.ranks[-1])
            assert got.ranks == tuple(g.ranks) and got.process_group == tuple(sorted(g.ranks))
    assert len(calls) == len(sets)


# --- issue 18: the promised ValueError, never OverflowError / TypeError -----


@pytest.mark.parametrize(
    "bad, field",
    [
        ([100, 2**70], r"sequences\[1\]: must be in \[1, 2\^40\]"),
        ([100, -(2**70)], r"sequences\[1\]: must be in \[1, 2\^40\]"),
        ([100, float("nan")], r"sequences\[1\]: must be an integer, got nan$"),
        ([100, float("inf")], r"sequences\[1\]: must be an integer, got inf$"),
        ([100, 1.5], r"sequences\[1\]: must be an integer, got 1\.5$"),
        ([100, 1e30], r"sequences\[1\]: must be in \[1, 2\^40\], got 1e\+30$"),
        (np.array([100, 2**63 + 5], dtype=np.uint64), r"sequences\[1\]: must be in"),
        ([5, 2**40 + 1], r"sequences\[1\]"),
    ],
)
def test_huge_or_nan_lengths_are_value_errors(bad, field):
    with pytest.raises(ValueError, match="^" + field):
        fcp.Scheduler().plan(bad)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(cp_degree=2**70), "cp_degree"),
        (dict(cp_degree=1.5), "cp_degree"),
        (dict(seed=2**64), "seed"),
        (dict(seed=-1), "seed"),
        (dict(time_limit_s=10**400), "time_limit_s"),
        (dict(time_limit_s=float("nan")), "time_limit_s"),
        (dict(time_limit_s="5"), "time_limit_s"),
        (dict(strategy=7), "strategy"),
        (dict(cost_model={"alpha1": float("nan")}), r"cost_model\.alpha1: must be a finite number"),
        (
            dict(cost_model={"mem_static": float("inf")}),
            r"cost_model\.mem_static: must be a finite",
        ),
        (dict(cost_model={"alpha1": object()}), r"cost_model\.alpha1"),
        (dict(cost_model={"alpha1": 10**400}), r"cost_model\.alpha1"),
        (dict(cluster={"ranks": 2**70}), r"cluster\.ranks"),
        (dict(cluster={"ranks": float("nan")}), r"cluster\.ranks"),
        (dict(cluster=3.5), "cluster"),
    ],
)
def test_bad_options_are_value_errors(kwargs, field):
    with pytest.raises(ValueError, match="^" + field):
        fcp.Scheduler(**kwargs)


def test_eta_overflow_and_nan_are_value_errors():
    sched = fcp.Scheduler()
    with pytest.raises(ValueError, match=r"^eta\[1\]"):
        sched.plan([100, 200], eta=[0.0, float("nan")])
    with pytest.raises(ValueError, match="^eta"):
        sched.plan([100, 200], eta=[0.0, 10**400])
    with pytest.raises(ValueError, match="^eta"):
        sched.plan([100, 200], eta=object())


def test_plan_json_type_errors_are_value_errors():
    with pytest.raises(ValueError, match="^input"):
        fcp.plan_json(12)
    with pytest.raises(ValueError, match="^cp_degree"):
        fcp.plan_json('{"sequences": [10]}', cp_degree=2**40)
    assert fcp.plan_json(b'{"sequences": [10]}').status == fcp.PlanStatus.OK


def test_sequence_cap_as_the_cli():
    sched = fcp.Scheduler()
    too_many = np.ones(fcp.MAX_SEQUENCES + 1, dtype=np.int64)
    with pytest.raises(ValueError, match=r"^sequences: at most 10000000 sequences"):
        sched.plan(too_many)
    with pytest.raises(ValueError, match=r"^sequences: at most 10000000"):
        sched.plan(range(fcp.MAX_SEQUENCES + 1))


# --- issue 16: Cluster carries its hardware; plans pickle and round-trip ------


def test_cluster_carries_its_hardware_or_refuses_to_guess():
    with pytest.raises(ValueError, match=r"^cluster\.hardware: required"):
        fcp.Cluster(8, 4)
    with pytest.raises(ValueError, match=r"^cluster\.hardware: unknown preset"):
        fcp.Cluster(8, 4, "tpu-v9")
    with pytest.raises(ValueError, match=r"^cluster\.ranks"):
        fcp.Cluster(0, 4, "h100-8x8")
    with pytest.raises(ValueError, match="^cluster: an fcp._fcp.Cluster carries no hardware"):
        fcp.Scheduler(cluster=fcp._fcp.Cluster(8, 4))
    h100 = fcp.Cluster(8, 8, "h100-8x8")
    # The hardware decides the cost model: the same shape on other hardware differs.
    on_h100 = fcp.Scheduler(cluster=h100, model="qwen3-8b")
    on_ascend = fcp.Scheduler(cluster=fcp.Cluster(8, 8, "ascend910c-4x16"), model="qwen3-8b")
    as_dict = fcp.Scheduler(
        cluster={"ranks": 8, "ranks_per_node": 8, "hardware": "h100-8x8"}, model="qwen3-8b"
    )
    assert on_h100.cost_model.to_dict() == as_dict.cost_model.to_dict()
    assert on_h100.cost_model.to_dict() != on_ascend.cost_model.to_dict()
    assert on_h100.cluster == h100
    assert fcp.Scheduler(cluster="h100-8x8").cluster == fcp.Cluster.preset("h100-8x8")
    assert fcp.Scheduler(cluster="h100-8x8").cluster.hardware == "h100-8x8"
    # An inline dict without hardware gets `fcp plan`'s default, and says which.
    default = fcp.Scheduler(cluster={"ranks": 8}).cluster
    assert default.hardware == fcp.Scheduler().cluster.hardware and default.num_ranks == 8
    assert pickle.loads(pickle.dumps(h100)) == h100
    with pytest.raises(AttributeError):
        h100.hardware = "ascend910c-4x16"


@pytest.mark.parametrize("strategy", ["fcp", "megatron", "deepspeed"])
def test_plans_pickle_and_round_trip_through_dicts(strategy):
    sched = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b", strategy=strategy)
    plan = sched.plan([131072, 32768, 8192, 4096, 4096, 1024, 512])
    d = plan.to_dict()
    again = fcp.Plan.from_dict(d)
    assert again.to_dict() == d
    assert again == plan
    assert list(again.micro_batches[0].groups[0].ranks) == list(
        plan.micro_batches[0].groups[0].ranks
    )
    loaded = pickle.loads(pickle.dumps(plan))
    assert loaded.to_dict() == d and loaded.est_ms == plan.est_ms and loaded.notes == plan.notes
    cm = pickle.loads(pickle.dumps(sched.cost_model))
    assert cm == sched.cost_model
    # Through JSON text, as a plan file would travel.
    assert fcp.Plan.from_dict(json.loads(json.dumps(d))).to_dict() == d


def test_infeasible_plan_round_trips_with_its_reason():
    sched = fcp.Scheduler(cluster={"ranks": 4, "ranks_per_node": 4}, model="qwen3-1.7b")
    plan = sched.plan([100, 1 << 30])
    again = pickle.loads(pickle.dumps(plan))
    assert again.status == fcp.PlanStatus.INFEASIBLE
    assert again.message == plan.message and again.infeasible_sequence == 1
    assert fcp.Plan.from_dict(plan.to_dict()).to_dict() == plan.to_dict()


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.pop("strategy"), "strategy: missing"),
        (lambda d: d.update(status="fine"), "status"),
        (
            lambda d: d["micro_batches"][0]["groups"][0].update(ranks=[0, "x"]),
            r"micro_batches\[0\]\.groups\[0\]\.ranks",
        ),
        (
            lambda d: d["micro_batches"][0]["groups"][0].update(comm="mesh"),
            r"micro_batches\[0\]\.groups\[0\]\.comm",
        ),
        (lambda d: d["micro_batches"][0].pop("est_ms"), r"micro_batches\[0\]\.est_ms: missing"),
        (lambda d: d.update(est_ms="fast"), "est_ms"),
    ],
)
def test_from_dict_names_the_bad_field(mutate, field):
    d = fcp.Scheduler(cluster="h100-8x8").plan([4096, 1024]).to_dict()
    mutate(d)
    with pytest.raises(ValueError, match="^" + field):
        fcp.Plan.from_dict(d)


def test_version_is_the_project_version():
    text = (pathlib.Path(__file__).resolve().parents[2] / "CMakeLists.txt").read_text()
    assert fcp.__version__ == re.search(r"project\(fcp VERSION ([0-9.]+)", text).group(1)
    assert fcp._fcp.__version__ == fcp.__version__


def test_python_dash_m_fcp_runs_the_packaged_cli(tmp_path):
    """`python -m fcp` runs fcp/_bin/fcp next to the package (the CLI itself,
    same output and exit codes)."""
    env = {k: v for k, v in os.environ.items() if k != "FCP_CLI"}
    env["PYTHONPATH"] = str(pathlib.Path(fcp.__file__).resolve().parents[1])
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "batch.json"
    via_module = subprocess.run(
        [sys.executable, "-m", "fcp", "plan", "--input", str(example)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert via_module.returncode == 0, via_module.stderr
    direct = subprocess.run(
        [_cli(), "plan", "--input", str(example)], capture_output=True, text=True, timeout=60
    )
    strip = lambda out: {k: v for k, v in json.loads(out).items() if k != "solver_ms"}  # noqa: E731
    assert strip(via_module.stdout) == strip(direct.stdout)
    bad = subprocess.run(
        [sys.executable, "-m", "fcp", "plan", "--no-such-flag"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error:")


def test_observe_learns_the_true_coefficients():
    # A Scheduler that starts 20-25 % off in alpha1 and alpha2 is told the
    # true time of every group of three steps (the true model's estimate of
    # its own plans, an independent evaluation of the formula); afterwards it
    # estimates new plans as the true model does and plans as well as it does.
    truth = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b")
    true_cm = truth.cost_model
    start = {k: getattr(true_cm, k) for k in fcp._fcp.timing_coefficients}
    start.update(alpha1=true_cm.alpha1 * 1.25, alpha2=true_cm.alpha2 * 0.8)
    # Timing coefficients given: unset v2 terms would be 0 (the unset rule).
    start["ring_tail_steps"] = true_cm.ring_tail_steps
    wrong = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b", cost_model=start)
    assert wrong.calibration is None
    rng = np.random.default_rng(5)

    def batch():
        return [int(x) for x in np.minimum(rng.pareto(1.2, 256) * 600 + 64, 120000)]

    for _ in range(3):
        lengths = batch()
        plan = wrong.plan(lengths)
        times = [
            [g.est_ms / 1000 for g in mb.groups]
            for mb in truth.estimate(lengths, plan).micro_batches
        ]
        got = wrong.observe(lengths, plan, times)
    assert got == wrong.calibration
    assert got["groups"] >= 8
    assert got["rms_rel_after"] < 0.005 < 0.05 < got["rms_rel_before"]
    # The scales need not undo the error one by one (these groups do not tell
    # alpha1 from the short-chunk term); the predictions must.
    assert list(got["scale"]) == list(fcp._fcp.timing_coefficients)
    lengths = batch()
    learnt, true_plan = wrong.plan(lengths), truth.plan(lengths)
    for mine, right in zip(
        wrong.estimate(lengths, learnt).micro_batches, truth.estimate(lengths, learnt).micro_batches
    ):
        for a, b in zip(mine.groups, right.groups):
            assert a.est_ms == pytest.approx(b.est_ms, rel=0.01)
    assert truth.estimate(lengths, learnt).est_ms == pytest.approx(true_plan.est_ms, rel=0.01)


def test_observe_rejects_bad_input_naming_the_field():
    sched = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b")
    lengths = [65536, 16384] + [4096] * 6 + [1024] * 24
    plan = sched.plan(lengths)
    flat = [g.est_ms / 1000 for mb in plan.micro_batches for g in mb.groups]
    with pytest.raises(ValueError, match="^group_times_s"):
        sched.observe(lengths, plan, flat[:-1])
    bad = list(flat)
    bad[1] = -1.0
    with pytest.raises(ValueError, match=r"^group_times_s\[1\]"):
        sched.observe(lengths, plan, bad)
    with pytest.raises(ValueError, match="^plan"):
        sched.observe(lengths[:-1], plan, flat)
    assert sched.calibration is None
    # NaN: not measured; the measured groups are used.
    flat[0] = float("nan")
    assert sched.observe(lengths, plan, flat)["groups"] == len(flat) - 1
    for learning, field in [
        ({"prior_sigma": 0}, "learning.prior_sigma"),
        ({"measurement_sigma": "x"}, "learning.measurement_sigma"),
        ({"window_groups": 0}, "learning.window_groups"),
        ({"speed": 1}, "learning.speed"),
        (3, "learning"),
    ]:
        with pytest.raises(ValueError, match="^" + re.escape(field)):
            fcp.Scheduler(cluster="h100-8x8", learning=learning)


def test_cost_model_is_a_copy():
    # Changing the returned CostModel does not change the Scheduler's.
    sched = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b")
    cm = sched.cost_model
    alpha1 = cm.alpha1
    cm.alpha1 = 5.0
    assert sched.cost_model.alpha1 == alpha1


def test_cost_model_fields_come_from_the_cpp_table():
    # One list of coefficients (include/fcp/cost_coefficients.h): fcp.CostModel
    # has exactly its fields, and to_dict follows its order.
    table = fcp._fcp.cost_coefficients
    names = [c["name"] for c in table]
    assert list(fcp.CostModel().to_dict()) == names
    assert len(names) == len(set(names)) == 17
    v2 = {c["name"] for c in table if c["v2"]}
    assert v2 == {
        "attn_overhead_tokens",
        "gamma_intra",
        "gamma_inter",
        "gamma_serial",
        "alpha3_home",
        "ring_tail_steps",
        "alpha2_vision",
    }
    fitted = [c["name"] for c in table if c["fitted"]]
    assert fitted == list(fcp._fcp.timing_coefficients)
    for c in table:
        assert c["unit"] and c["meaning"]


def test_unset_v2_terms_are_zero_beside_timing_coefficients(tmp_path):
    # The case: alpha1.. plus one v2 term given; every other v2 term is 0
    # (the paper's model), not the preset's. A memory-only override keeps the
    # preset's v2 terms. Python and the CLI resolve it alike.
    preset = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b").cost_model
    assert preset.gamma_intra > 0 and preset.gamma_serial > 0
    given = {
        "alpha1": preset.alpha1,
        "alpha2": preset.alpha2,
        "beta1": preset.beta1,
        "alpha3": preset.alpha3,
        "beta2": preset.beta2,
        "attn_overhead_tokens": 256.0,
    }
    sched = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b", cost_model=given)
    cm = sched.cost_model
    assert cm.attn_overhead_tokens == 256.0
    unset_v2 = ("gamma_intra", "gamma_inter", "gamma_serial", "alpha3_home", "ring_tail_steps")
    for name in unset_v2:
        assert getattr(cm, name) == 0.0, name
    zeros = dict(given, **dict.fromkeys(unset_v2, 0.0))
    explicit = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b", cost_model=zeros)
    lengths = [30000, 8000, 4000, 1000, 500]
    assert sched.plan(lengths).est_ms == explicit.plan(lengths).est_ms
    memory_only = fcp.Scheduler(
        cluster="h100-8x8", model="qwen3-8b", cost_model={"mem_capacity": preset.mem_capacity * 2}
    )
    assert memory_only.cost_model.gamma_intra == preset.gamma_intra
    # Where each coefficient came from: in the plan note, as the CLI writes it.
    note = sched.plan(lengths).notes["cost_model"]
    assert note.startswith("input: alpha1, alpha2, beta1, alpha3, beta2, attn_overhead_tokens")
    assert "preset: bw_intra_node" in note
    assert "0 (v2 term unset beside timing coefficients): gamma_intra" in note
    batch = {"cluster": "h100-8x8", "model": "qwen3-8b", "cost_model": given, "sequences": lengths}
    cli = _cli_plan(batch, tmp_path)
    assert cli["notes"]["cost_model"] == note


def test_design_doc_lists_the_coefficients_of_the_table():
    # docs/design.md §2 shows the coefficients to readers; it must name exactly
    # the C++ table's, in its order.
    design = pathlib.Path(__file__).resolve().parents[2] / "docs" / "design.md"
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| [^|]+ \| [^|]+ \|$", design.read_text(), re.MULTILINE)
    names = [c["name"] for c in fcp._fcp.cost_coefficients]
    assert rows[: len(names)] == names
